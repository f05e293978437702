"""`composer-lsp`: the agent for editors, over one of four transports.

    composer-lsp --stdio                      # LSP + session methods on stdin/stdout (default)
    composer-lsp --tcp 127.0.0.1:2087         # the same over one TCP connection
    composer-lsp --ws 127.0.0.1:8765          # websockets, many clients, and the web chat page
    composer-lsp --acp                        # an ACP agent on stdin/stdout (Zed, JetBrains, ...)
    composer-lsp --trust-workspace DIR        # let DIR's .composer/permissions.json allow things

Common options pick the workspace (default: the current directory; LSP clients' rootUri wins),
the model (in-process, int4, by default: composer-mini-trained, built from composer-mini and the
committed adapter by `make run` or at the first load, or the run `make model-trained` installed;
or --endpoint for any OpenAI-compatible server), and where session logs go. In stdio modes nothing but protocol is written to stdout.

At start the sandbox's isolation level goes to stderr; LSP clients also get it in a
`window/logMessage`, as a `window/showMessage` warning when it is weaker than bubblewrap, and
from the `composer/isolation` request (server/lsp.py). Weaker than bubblewrap, every terminal
command is asked about, with no "allow always", unless --allow-unsandboxed (or
`allow_unsandboxed = true` in $XDG_CONFIG_HOME/composer/config.toml) opts out: agent/isolation.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import threading
from pathlib import Path

from agent.isolation import OPT_IN_FLAG
from agent.sandbox import startup_isolation
from model.home import served_model
from server.hub import MODES, ServerSettings


def _host_port(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="composer-lsp", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdio", action="store_true", help="LSP over stdin/stdout (default)")
    mode.add_argument("--tcp", type=_host_port, metavar="HOST:PORT", help="LSP over one TCP connection")
    mode.add_argument("--ws", type=_host_port, metavar="HOST:PORT", help="LSP over websockets + the web chat page")
    mode.add_argument("--acp", action="store_true", help="an ACP agent over stdin/stdout")
    parser.add_argument("--workspace", type=Path, default=Path.cwd(), help="the repository to work in")
    parser.add_argument("--endpoint", default=None, help="OpenAI-compatible base URL (default: in-process engine)")
    parser.add_argument("--model", default=None, help="checkpoint directory, or the model name at --endpoint")
    parser.add_argument("--api-key", default=os.environ.get("COMPOSER_API_KEY"))
    parser.add_argument("--quantize", choices=["none", "int4"], default="int4", help="in-process engine weights")
    parser.add_argument("--log-dir", type=Path, default=None, help="where session logs go")
    parser.add_argument("--index", default=None, metavar="minilm|off|URL",
                        help="semantic codebase search: the bundled MiniLM (default; $COMPOSER_INDEX "
                             "overrides), an OpenAI-compatible embeddings URL, or off")
    parser.add_argument("--mode", choices=[m["id"] for m in MODES], default="agent",
                        help="new sessions' mode: agent (permission rules) or review (every edit asks)")
    parser.add_argument("--token", default=os.environ.get("COMPOSER_TOKEN"),
                        help="--ws: the connection token (default: a random one, printed at start)")
    parser.add_argument("--allow-origin", action="append", default=[],
                        help="--ws: another browser origin allowed to connect (repeatable)")
    parser.add_argument("--no-preload", action="store_true", help="--ws: load the model on the first prompt")
    parser.add_argument("--log-level", default=os.environ.get("COMPOSER_LOG_LEVEL", "WARNING"))
    parser.add_argument(OPT_IN_FLAG, action="store_true",
                        help="run terminal commands without asking even where the sandbox is weaker than bubblewrap")
    parser.add_argument("--trust-workspace", type=Path, metavar="DIR",
                        help="let DIR's .composer/permissions file allow things (as it is now) and exit")
    return parser


def _preload(settings: ServerSettings) -> None:
    """Loads (building on first use) the in-process model while the server already listens."""
    from agent.session import _shared_engine

    def load() -> None:
        try:
            _shared_engine(settings.model, settings.quantize)
            print(f"composer-lsp: model ready ({settings.model or 'composer-mini'})", file=sys.stderr, flush=True)
        except Exception as err:  # the first prompt will report it to the client
            print(f"composer-lsp: could not load the model: {err}", file=sys.stderr, flush=True)

    threading.Thread(target=load, name="composer-preload", daemon=True).start()


def _serve_ws(args: argparse.Namespace, settings: ServerSettings) -> int:
    from server.web import WebFrontEnd, serve

    front = WebFrontEnd(settings, token=args.token, allowed_origins=tuple(args.allow_origin))
    host, port = args.ws

    def ready(url: str) -> None:
        print(f"Composer is ready: {url}", flush=True)
        print(f"  workspace {settings.workspace}; editors connect to ws://{url.split('//', 1)[1].split('/')[0]}/ "
              "with the same token", file=sys.stderr, flush=True)

    if not settings.endpoint and not args.no_preload:
        _preload(settings)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(front, host, port, ready=ready))
    return 0


def _trust(workspace: Path) -> int:
    from agent.permission_files import trust_workspace

    try:
        trusted = trust_workspace(workspace)
    except (OSError, ValueError) as err:
        print(f"composer-lsp: not trusted: {err}", file=sys.stderr)
        return 2
    if not trusted:
        print(f"composer-lsp: {workspace} has no .composer/permissions.json or .toml to trust", file=sys.stderr)
        return 1
    for path in trusted:
        print(f"trusted {path} as it is now; any change to it needs --trust-workspace again")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    if args.trust_workspace is not None:
        return _trust(args.trust_workspace)
    status = startup_isolation("composer-lsp", args.workspace, args.allow_unsandboxed)
    if status is None:
        return 2
    model = served_model(args.model, args.endpoint)
    settings = ServerSettings(workspace=args.workspace.resolve(), endpoint=args.endpoint, model=model,
                              api_key=args.api_key, quantize=args.quantize, log_dir=args.log_dir,
                              default_mode=args.mode, index=args.index, allow_unsandboxed=args.allow_unsandboxed)
    if args.ws:
        return _serve_ws(args, settings)
    if args.acp:
        from server.acp_agent import main_acp

        return main_acp(settings)
    from server.lsp import ComposerServer

    server = ComposerServer(settings)
    if args.tcp:
        server.start_tcp(*args.tcp)
        return 0
    stdout = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the protocol stream
    server.start_io(sys.stdin.buffer, stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
