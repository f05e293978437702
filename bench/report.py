"""What every benchmark does with its results: the JSON under bench/results/ and its marked block
in docs/benchmarks.md, rewritten in place on each run (added under `heading` the first time).

    publish("server", "Language server", results, text, meta)   # bench/results/server.json
"""

from __future__ import annotations

import json
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RESULTS = ROOT / "bench" / "results"


def cpu_description() -> str:
    """The CPU as `lscpu` names it, with the vector extensions that decide matmul speed (avx2,
    avx512*, amx*), for a bench's meta line; the bare architecture where lscpu is missing."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.machine()
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    model = fields.get("Model name", platform.machine()).strip()
    flags = [f for f in fields.get("Flags", "").split() if f.startswith(("avx", "amx"))]
    return f"{model} ({' '.join(flags) or 'no avx'})"


def write_doc(name: str, heading: str, text: str, meta: str, doc: Path = DOC) -> None:
    """Replaces the `<!-- name:begin -->` ... `<!-- name:end -->` block of the doc (older blocks
    spelled `:start` are recognised too)."""
    end = f"<!-- {name}:end -->"
    old = doc.read_text() if doc.exists() else "# Benchmarks\n"
    start = next((s for s in (f"<!-- {name}:begin -->", f"<!-- {name}:start -->") if s in old), f"<!-- {name}:begin -->")
    block = f"{start}\n{meta}\n\n{text}{end}"
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip("\n") + f"\n\n## {heading}\n\n" + block + "\n"
    doc.write_text(new)


def save_results(name: str, results: dict[str, Any]) -> Path:
    path = RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


def publish(name: str, heading: str, results: dict[str, Any], text: str, meta: str, *, write: bool = True,
            doc: bool = True) -> None:
    """Prints the tables; unless `write` is False (a `--no-write` run), saves the JSON and, unless
    `doc` is False, rewrites the doc's block."""
    print("\n" + meta + "\n\n" + text)
    if write:
        save_results(name, results)
        if doc:
            write_doc(name, heading, text, meta)
