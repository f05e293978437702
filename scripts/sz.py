"""Size budget: fail when a library file or function outgrows what a reader holds in mind.

Run: python scripts/sz.py   (make lint runs it). Budgets: 600 lines a file, 100 lines a function,
for the packages only (tests and benchmarks are exempt).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("model", "agent", "server", "training", "kernels")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100


def violations(root: Path) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            source = path.read_text()
            lines = source.count("\n") + 1
            if lines > MAX_FILE_LINES:
                found.append(f"{path}: {lines} lines (budget {MAX_FILE_LINES})")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(
                            f"{path}:{node.lineno} {node.name}: {length} lines "
                            f"(budget {MAX_FUNCTION_LINES})"
                        )
    return found


if __name__ == "__main__":
    problems = violations(Path(__file__).resolve().parent.parent)
    for problem in problems:
        print(problem)
    sys.exit(1 if problems else 0)
