"""The task the training tests run agents on and grade: a package whose `add` a bug patch breaks
(a `dir` source), with its gold fix and its tests. Shared by test_tasks.py and test_run.py.

    from add_task import BUG, add_task_line
    line = add_task_line(tmp_path, instance_id="hidden", test_patch=HIDDEN)   # writes tmp_path/src
    (tmp_path / "tasks.jsonl").write_text(json.dumps(line) + "\n")            # source path: "src"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from training.tasks import DEFAULT_TEST_CMD

BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
       "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a + b\n+    return a - b\n")
"""The starting state's patch (source.patch): add subtracts."""
FIX = BUG.replace("-    return a + b\n+    return a - b", "-    return a - b\n+    return a + b")
"""The gold patch."""
TEST_CMD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 " + DEFAULT_TEST_CMD


def add_task_line(root: Path, **fields: Any) -> dict[str, Any]:
    """A task line over `root/src` (written when absent), for a tasks file in `root`: FAIL_TO_PASS
    test_add, PASS_TO_PASS test_zero; `fields` replace the defaults."""
    src = root / "src"
    if not src.exists():
        (src / "pkg").mkdir(parents=True)
        (src / "pkg" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
        (src / "test_pkg.py").write_text("from pkg import add\n\ndef test_add():\n    assert add(2, 3) == 5\n\n"
                                         "def test_zero():\n    assert add(0, 0) == 0\n")
    return {"instance_id": "dir-1", "problem_statement": "add(2, 3) is -1",
            "source": {"kind": "dir", "path": "src", "patch": BUG}, "patch": FIX,
            "FAIL_TO_PASS": ["test_pkg.py::test_add"], "PASS_TO_PASS": ["test_pkg.py::test_zero"],
            "test_cmd": TEST_CMD} | fields
