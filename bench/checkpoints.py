"""Checkpoint store timings on a real tree: a first checkpoint, an unchanged one, `rm -rf` of the
biggest subdirectory then restore, a diff, a prune to the newest checkpoint (what
`composer-agent checkpoints --keep 1` runs), and the store's own retention: one-file edits, each
checkpointed, until the store prunes itself to `CheckpointConfig.keep` (agent/checkpoints.py
quotes the numbers).

    python bench/checkpoints.py DIR...      # e.g. a copy of .venv/lib/python3.11/site-packages

The DIRs are copied into a temporary workspace first (nothing of theirs is touched).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent.checkpoints import CheckpointStore


def retention(store: CheckpointStore, ws: Path) -> str:
    """Edits one file and records a checkpoint until the store prunes itself; times both kinds."""
    edited = max(ws.rglob("*.py"), key=lambda p: p.stat().st_size)
    text, plain, pruning = edited.read_text(), [], []
    keep = store.config.keep
    assert keep is not None
    store.create("after the restore")  # re-reads the files the restore rewrote (new inodes), once
    count = len(store.list())
    while not pruning:
        edited.write_text(f"# edit {count}\n{text}")
        t0 = time.perf_counter()
        store.create(f"edit {count}")
        seconds = time.perf_counter() - t0
        after = sum(1 for _ in store.store_dir.glob("refs/*.json"))
        (pruning if after <= count else plain).append(seconds)
        count = after
    plain.sort()
    return (f"retention (keep {keep}): {len(plain)} one-file edits recorded in {plain[len(plain) // 2]:.3f} s "
            f"(median; slowest {plain[-1]:.3f} s); the one that pruned back to {count} took {pruning[0]:.2f} s")


def main(sources: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        for src in sources:
            shutil.copytree(src, ws / Path(src).name, symlinks=True)  # copy2 keeps mtimes
        store = CheckpointStore(ws)
        first, second = store.create("first"), store.create("unchanged")
        victim = max((p for p in ws.glob("[!.]*/*") if p.is_dir()), key=lambda p: len(list(p.rglob("*"))))
        shutil.rmtree(victim)
        t0 = time.perf_counter()
        restored = store.restore(first.id)
        t1 = time.perf_counter()
        assert not store.diff(first.id)
        t2 = time.perf_counter()
        pruned = store.prune(keep=1)
        t3 = time.perf_counter()
        print(f"{first.files} files, {first.bytes / 1e6:.0f} MB: first checkpoint {first.seconds:.2f} s "
              f"(stores {first.new_bytes / 1e6:.0f} MB), unchanged {second.seconds:.2f} s, rm -rf "
              f"{len(restored.changes.added)} paths + restore {t1 - t0:.2f} s, diff {t2 - t1:.2f} s, prune "
              f"{pruned.checkpoints} of {pruned.checkpoints + 1} checkpoints ({pruned.objects} objects) {t3 - t2:.2f} s")
        print(retention(store, ws))


if __name__ == "__main__":
    main(sys.argv[1:])
