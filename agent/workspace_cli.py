"""`composer-agent checkpoints` and `composer-agent answers`: what a workspace keeps between
sessions, seen and managed from a terminal, with or without an editor open.

    composer-agent checkpoints --workspace DIR                 # how many, their dates, size on disk
    composer-agent checkpoints --workspace DIR --list          # id, time and label of each
    composer-agent checkpoints --workspace DIR --diff ID       # what changed since ID (a unified diff)
    composer-agent checkpoints --workspace DIR --restore ID    # back to ID; a backup is taken first
    composer-agent checkpoints --workspace DIR --keep N        # delete all but the newest N
    composer-agent answers --workspace DIR [--forget]          # "always" permission answers kept

A store prunes itself to its newest 300 (agent/checkpoints.py, CheckpointConfig.keep); --keep N
goes further when asked. It waits for any session recording a checkpoint in the workspace, so it
is safe beside a working server. --restore rewinds any checkpoint, shell-made changes included,
as an editor's rewind does; the checkpoint it takes first undoes it (`--restore` that one). It
does not wait for a session's turn that is writing in the workspace: stop it first.

`answers` lists the "Always allow" / "Always reject" answers kept for the workspace (in
$XDG_CONFIG_HOME/composer/answers/, agent/permission_files.py); --forget deletes them, so later
sessions ask again (one already running keeps them until it ends).

Tests: .venv/bin/python -m pytest tests/agent/test_cli_checkpoints.py tests/agent/test_cli_answers.py
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import warnings
from pathlib import Path

from agent.checkpoints import CheckpointError, CheckpointStore, default_store_dir
from agent.permission_files import forget_answers, load_rules, workspace_answers_file


def add_parsers(sub: argparse._SubParsersAction) -> None:
    stored = sub.add_parser("checkpoints", help="the workspace's checkpoints: count and size, list, diff, "
                                                "restore, prune")
    stored.add_argument("--workspace", type=Path, default=Path.cwd(), help="the repository they record")
    action = stored.add_mutually_exclusive_group()
    action.add_argument("--list", action="store_true", help="one line per checkpoint: id, time, label")
    action.add_argument("--diff", metavar="ID", help="what changed from checkpoint ID to now")
    action.add_argument("--restore", metavar="ID", help="return the workspace to checkpoint ID")
    action.add_argument("--keep", type=int, default=None, help="delete all but the newest KEEP checkpoints")
    answers = sub.add_parser("answers", help='the "always" permission answers kept for the workspace; --forget deletes them')
    answers.add_argument("--workspace", type=Path, default=Path.cwd(), help="the repository they were given in")
    answers.add_argument("--forget", action="store_true", help="delete them: later sessions ask again")


def run(args: argparse.Namespace) -> int:
    workspace = args.workspace.resolve()
    if not workspace.is_dir():
        print(f"{workspace} is not a directory", file=sys.stderr)
        return 1
    if args.command == "answers":
        return _answers(workspace, args.forget)
    if not default_store_dir(workspace).is_dir():
        print(f"no checkpoints in {workspace}", file=sys.stderr if args.diff or args.restore else sys.stdout)
        return 1 if args.diff or args.restore else 0
    with warnings.catch_warnings(record=True) as noted:  # a record that cannot be read, say
        warnings.simplefilter("always")
        try:
            store = CheckpointStore(workspace)
            if args.list:
                code = _list(store)
            elif args.diff is not None:
                print(store.unified_diff(args.diff), end="")
                code = 0
            elif args.restore is not None:
                code = _restore(store, args.restore)
            else:
                code = _summary(store, args.keep)
        except (CheckpointError, OSError) as err:
            print(err, file=sys.stderr)
            code = 1
    for warning in noted:
        print(f"warning: {warning.message}", file=sys.stderr)
    return code


def _when(created: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created))


def _list(store: CheckpointStore) -> int:
    for cp in store.list():
        print(f"{cp.id}  {_when(cp.created)}  {cp.label}")
    return 0


def _restore(store: CheckpointStore, checkpoint_id: str) -> int:
    result = store.restore(checkpoint_id)
    changes = result.changes
    print(f"restored {checkpoint_id}: {len(changes.added)} added, {len(changes.modified)} modified, "
          f"{len(changes.deleted)} deleted")
    for path in result.skipped:
        print(f"left as it is (recorded without its contents): {path}")
    if result.backup is not None:
        print(f"to undo: composer-agent checkpoints --workspace {shlex.quote(str(store.root))} --restore {result.backup.id}")
    return 0


def _summary(store: CheckpointStore, keep: int | None) -> int:
    """Prints the store's checkpoints and size; with `keep`, prunes it first."""
    if keep is not None:
        if keep < 0:
            print(f"--keep must be 0 or more, got {keep}", file=sys.stderr)
            return 2
        pruned = store.prune(keep)
        print(f"deleted {pruned.checkpoints} checkpoints and {pruned.objects} objects ({pruned.bytes / 1e6:.1f} MB)")
    kept = store.list()
    size = sum(_size(path) for path in store.store_dir.rglob("*"))
    days = [time.strftime("%Y-%m-%d", time.localtime(cp.created)) for cp in kept[:1] + kept[-1:]]
    span = f", {days[0]} to {days[-1]}" if days else ""
    print(f"{len(kept)} checkpoints{span}: {size / 1e6:.1f} MB in {store.store_dir}")
    return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except FileNotFoundError:  # a prune beside us deleted it
        return 0


def _answers(workspace: Path, forget: bool) -> int:
    """Prints the answers kept for the workspace; with `forget`, deletes them (even unreadable)."""
    path = workspace_answers_file(workspace)
    if forget and forget_answers(path):
        print(f"forgot the answers kept for {workspace} ({path} deleted); a session already running keeps them until it ends")
        return 0
    if not path.is_file():
        print(f"no answers kept for {workspace}")
        return 0
    try:
        rules = load_rules(path)[0]
    except ValueError as err:
        print(f"{err}\n--forget deletes the file", file=sys.stderr)
        return 1
    print(f"{len(rules)} answers kept for {workspace} in {path}:")
    for rule in rules:
        print(f"  {rule.action} {rule.tool}: {rule.command if rule.command is not None else rule.path}")
    return 0
