"""composer-lsp: the language server, the ACP agent and the web chat that bring the agent to
editors. Run `composer-lsp --help` (server/cli.py)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("composer-agent")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
