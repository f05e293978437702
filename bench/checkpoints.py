"""Checkpoint store timings on a real tree: a first checkpoint, an unchanged one, `rm -rf` of the
biggest subdirectory then restore, a diff, and a prune to the newest checkpoint (what
`composer-agent checkpoints --keep 1` runs; agent/checkpoints.py quotes the numbers).

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


if __name__ == "__main__":
    main(sys.argv[1:])
