"""Workspace: path safety, the editor overlay, encodings, atomic writes, .gitignore-aware listing.

Run: .venv/bin/python -m pytest tests/agent/test_workspace.py -q
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.exceptions import (
    BinaryFileError,
    EditorRefusedError,
    FileTooLargeError,
    OutsideWorkspaceError,
    WorkspaceError,
)
from agent.workspace import DirEntry, Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
def ws(root: Path) -> Workspace:
    return Workspace(root)


class RecordingSink:
    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.calls: list[tuple] = []

    async def apply(self, path, old_text, new_text, version):
        self.calls.append(("apply", path, old_text, new_text, version))
        return self.accept

    async def delete(self, path, version):
        self.calls.append(("delete", path, version))
        return self.accept


# ---- paths -----------------------------------------------------------------------------------


def test_relative_and_absolute_inside(ws: Workspace, root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("x = 1\n")
    assert ws.resolve("src/a.py") == root.resolve() / "src" / "a.py"
    assert ws.relative(str(root / "src" / "a.py")) == "src/a.py"
    assert ws.relative("src/../src/./a.py") == "src/a.py"
    assert ws.relative(".") == "."
    assert ws.resolve("") == ws.root


def test_an_alias_names_the_root_and_resolves_to_it(root: Path) -> None:
    (root / "a.py").write_text("x = 1\n")
    ws = Workspace(root, alias="/workspace/")
    assert ws.display_root == "/workspace"
    assert ws.resolve("/workspace/a.py") == root.resolve() / "a.py" == ws.resolve(str(root / "a.py"))
    assert ws.read_text("/workspace/a.py") == "x = 1\n"
    with pytest.raises(OutsideWorkspaceError, match="outside the workspace /workspace;"):
        ws.resolve("/workspace/../etc/passwd")
    with pytest.raises(OutsideWorkspaceError, match="outside the workspace /workspace;"):
        ws.resolve("/workspaces/a.py")
    with pytest.raises(ValueError, match="not an absolute path"):
        Workspace(root, alias="workspace")
    assert Workspace(root).display_root == str(root)


def test_dotdot_escape_is_refused(ws: Workspace) -> None:
    with pytest.raises(OutsideWorkspaceError, match=r"'\.\./etc/passwd' escapes the workspace via '\.\.'"):
        ws.resolve("../etc/passwd")
    with pytest.raises(OutsideWorkspaceError, match="escapes"):
        ws.read_text("src/../../x")


def test_absolute_outside_is_refused(ws: Workspace) -> None:
    with pytest.raises(OutsideWorkspaceError, match=r"'/etc/passwd' is outside the workspace .*relative"):
        ws.read_text("/etc/passwd")


def test_symlink_out_is_refused_and_in_is_fine(ws: Workspace, root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("key\n")
    (root / "out.txt").symlink_to(secret)
    with pytest.raises(OutsideWorkspaceError, match=r"'out.txt' goes through the symlink 'out.txt'.*outside"):
        ws.read_text("out.txt")
    (root / "real.txt").write_text("inside\n")
    (root / "in.txt").symlink_to(root / "real.txt")
    assert ws.read_text("in.txt") == "inside\n"
    assert ws.relative("in.txt") == "in.txt"


def test_symlinked_parent_directory(ws: Workspace, root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "f.txt").write_text("no\n")
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OutsideWorkspaceError, match="symlink 'linkdir'"):
        ws.read_text("linkdir/f.txt")
    with pytest.raises(OutsideWorkspaceError):
        ws.write_text("linkdir/new.txt", "x")
    assert not (outside / "new.txt").exists()
    (root / "pkg").mkdir()
    (root / "pkg" / "m.py").write_text("ok\n")
    (root / "alias").symlink_to(root / "pkg", target_is_directory=True)
    assert ws.read_text("alias/m.py") == "ok\n"


def test_weird_names(ws: Workspace, root: Path) -> None:
    for name in ["with space.txt", "uni\u00e7\u00f8de \u6587\u4ef6.md", "-dash", "semi;colon"]:
        ws.write_text(f"dir x/{name}", f"{name}\n")
        assert (root / "dir x" / name).read_text() == f"{name}\n"
        assert ws.read_text(f"dir x/{name}") == f"{name}\n"
    assert sorted(ws.iter_files("dir x")) == sorted(f"dir x/{n}" for n in os.listdir(root / "dir x"))


def test_directory_and_missing_paths(ws: Workspace, root: Path) -> None:
    (root / "pkg").mkdir()
    (root / "pkg" / "module.py").write_text("")
    with pytest.raises(WorkspaceError, match="pkg is a directory, not a file; use list_dir"):
        ws.read_text("pkg")
    with pytest.raises(WorkspaceError, match=r"pkg/modul\.py does not exist; did you mean pkg/module\.py\?"):
        ws.read_text("pkg/modul.py")
    with pytest.raises(WorkspaceError, match="nor does its folder"):
        ws.read_text("nope/x.py")
    with pytest.raises(WorkspaceError, match="NUL"):
        ws.resolve("a\x00b")
    with pytest.raises(WorkspaceError, match="has a name of 1197 bytes; file names are at most 255"):
        ws.read_text("date." + "parser." * 170 + "py")  # a model's runaway path: not "failed unexpectedly"


# ---- overlay ---------------------------------------------------------------------------------


def test_buffer_overlay_wins_over_disk(ws: Workspace, root: Path) -> None:
    (root / "a.py").write_text("disk\n")
    ws.set_buffer("a.py", "buffer\n", 3)
    assert ws.read_text("a.py") == "buffer\n"
    assert ws.read_text(str(root / "a.py")) == "buffer\n"
    assert ws.buffer("a.py") == ("buffer\n", 3)
    assert ws.read_bytes("a.py") == b"buffer\n"
    assert ws.open_buffers() == ["a.py"]
    ws.set_buffer("new.py", "unsaved\n", 1)
    assert ws.exists("new.py") and ws.is_file("new.py") and not (root / "new.py").exists()
    ws.clear_buffer("a.py")
    assert ws.read_text("a.py") == "disk\n"
    assert ws.buffer("a.py") is None
    assert ws.open_buffers() == ["new.py"]


async def test_apply_text_goes_to_the_editor_for_open_buffers(root: Path) -> None:
    sink = RecordingSink()
    ws = Workspace(root, edit_sink=sink)
    (root / "a.py").write_text("disk\n")
    ws.set_buffer("a.py", "one\r\ntwo\r\n", 7)
    assert ws.read_text("a.py") == "one\ntwo\n"
    assert await ws.apply_text("a.py", "one\nTWO\n") == "editor"
    assert sink.calls == [("apply", "a.py", "one\r\ntwo\r\n", "one\r\nTWO\r\n", 7)]
    assert ws.read_text("a.py") == "one\nTWO\n"
    assert (root / "a.py").read_text() == "disk\n"
    assert await ws.apply_text("b.py", "new\n") == "disk"  # no buffer: the disk
    assert (root / "b.py").read_text() == "new\n"
    sink.accept = False
    with pytest.raises(EditorRefusedError, match=r"the editor refused the edit to a\.py"):
        await ws.apply_text("a.py", "x\n")


async def test_apply_delete(root: Path) -> None:
    sink = RecordingSink()
    ws = Workspace(root, edit_sink=sink)
    (root / "a.py").write_text("a\n")
    (root / "b.py").write_text("b\n")
    ws.set_buffer("a.py", "a\n", 2)
    assert await ws.apply_delete("a.py") == "editor"
    assert sink.calls == [("delete", "a.py", 2)] and ws.open_buffers() == []
    assert await ws.apply_delete("b.py") == "disk"
    assert not (root / "b.py").exists()


# ---- reading ---------------------------------------------------------------------------------


def test_binary_and_huge_files(root: Path) -> None:
    ws = Workspace(root, max_file_bytes=1000)
    (root / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(100))
    with pytest.raises(BinaryFileError, match=r"img.png is a binary file, 116 bytes; use run_terminal with `xxd`"):
        ws.read_text("img.png")
    big = "".join(f"line {i}\n" for i in range(1, 501))
    (root / "big.log").write_text(big)
    with pytest.raises(FileTooLargeError, match=r"big.log is 4,39\d bytes.*read a line range"):
        ws.read_text("big.log")
    lines, total = ws.read_lines("big.log", 100, 3)
    assert (lines, total) == (["line 100", "line 101", "line 102"], 500)
    assert ws.read_lines("big.log", 499) == (["line 499", "line 500"], 500)


@pytest.mark.parametrize(
    ("data", "encoding", "newline"),
    [
        (b"\xef\xbb\xbfprint('h\xc3\xa9')\n", "utf-8", "\n"),
        ("\ufeffa = '\u00e9'\r\nb = 2\r\n".encode("utf-16-le"), "utf-16-le", "\r\n"),
        ("\ufeffa\nb\n".encode("utf-16-be"), "utf-16-be", "\n"),
        (b"caf\xe9 = 1\r\nna\xefve = 2\r\n", "latin-1", "\r\n"),
    ],
)
def test_encodings_round_trip(ws: Workspace, root: Path, data: bytes, encoding: str, newline: str) -> None:
    (root / "f.txt").write_bytes(data)
    text = ws.read_text("f.txt")
    assert "\r" not in text and "\ufeff" not in text
    fmt = ws.text_format("f.txt")
    assert (fmt.encoding, fmt.newline) == (encoding, newline)
    assert (fmt.note is not None) == (encoding == "latin-1")
    ws.write_text("f.txt", text)
    assert (root / "f.txt").read_bytes() == data
    ws.write_text("f.txt", text + "extra\n")
    assert (root / "f.txt").read_bytes() == data + ("extra" + newline).encode(encoding)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.lists(st.sampled_from(["a", "\u00e9", "\u6587", " ", "\t", "\r", "\n", "\r\n"]), max_size=40).map("".join),
    bom=st.sampled_from([("utf-8", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"), ("latin-1", b"")]),
)
def test_unchanged_text_writes_back_the_same_bytes(root: Path, text: str, bom: tuple[str, bytes]) -> None:
    encoding, mark = bom
    data = mark + text.replace("\u6587", "x" if encoding == "latin-1" else "\u6587").encode(encoding)
    if encoding == "latin-1":
        data += b"\xff"  # not UTF-8, so it must fall back to latin-1
    (root / "f.txt").write_bytes(data)
    ws = Workspace(root)
    ws.write_text("f.txt", ws.read_text("f.txt"))
    assert (root / "f.txt").read_bytes() == data


def test_crlf_and_mixed_line_breaks(ws: Workspace, root: Path) -> None:
    (root / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    assert ws.read_text("crlf.txt") == "a\nb\n"
    ws.write_text("crlf.txt", "a\nb\nc\r\n")  # a stray CRLF from the model is not doubled
    assert (root / "crlf.txt").read_bytes() == b"a\r\nb\r\nc\r\n"
    (root / "mixed.txt").write_bytes(b"a\r\nb\nc\r\n")
    assert ws.read_text("mixed.txt") == "a\r\nb\nc\r\n"
    assert ws.text_format("mixed.txt").newline is None


def test_latin1_file_refuses_characters_it_cannot_hold(ws: Workspace, root: Path) -> None:
    (root / "l.txt").write_bytes(b"caf\xe9\n")
    text = ws.read_text("l.txt")
    with pytest.raises(WorkspaceError, match=r"l.txt is stored as latin-1, which cannot hold '.' \(line 2\)"):
        ws.write_text("l.txt", text + "\u2192\n")
    assert (root / "l.txt").read_bytes() == b"caf\xe9\n"


# ---- writing ---------------------------------------------------------------------------------


def test_atomic_write_keeps_mode_and_leaves_no_temp_files(ws: Workspace, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("echo 1\n")
    script.chmod(0o751)
    ws.write_text("run.sh", "echo 2\n")
    assert script.read_text() == "echo 2\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o751
    ws.write_text("deep/er/new.txt", "x")
    assert (root / "deep" / "er" / "new.txt").read_text() == "x"
    assert stat.S_IMODE((root / "deep" / "er" / "new.txt").stat().st_mode) & 0o600 == 0o600
    assert sorted(p.name for p in root.rglob("*")) == ["deep", "er", "new.txt", "run.sh"]


def test_failed_write_leaves_the_old_file_and_no_temp(ws: Workspace, root: Path, monkeypatch) -> None:
    (root / "a.txt").write_text("old\n")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        ws.write_text("a.txt", "new\n")
    assert (root / "a.txt").read_text() == "old\n"
    assert [p.name for p in root.iterdir()] == ["a.txt"]


def test_write_through_symlink_keeps_the_link(ws: Workspace, root: Path) -> None:
    (root / "real.txt").write_text("1\n")
    (root / "link.txt").symlink_to("real.txt")
    ws.write_text("link.txt", "2\n")
    assert (root / "link.txt").is_symlink() and (root / "real.txt").read_text() == "2\n"
    ws.delete("link.txt")
    assert not (root / "link.txt").exists() and (root / "real.txt").exists()


def test_delete_refuses_directories_and_missing_files(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    with pytest.raises(WorkspaceError, match=r"d is a directory; only files can be deleted.*rm -r d"):
        ws.delete("d")
    with pytest.raises(WorkspaceError, match=r"gone\.txt does not exist"):
        ws.delete("gone.txt")
    with pytest.raises(WorkspaceError, match="is a directory"):
        ws.write_text("d", "x")


# ---- listing ---------------------------------------------------------------------------------


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_iter_files_respects_gitignore(ws: Workspace, root: Path) -> None:
    _tree(root, {
        ".gitignore": "*.log\nbuild/\n!keep.log\n/top.txt\n",
        ".git/info/exclude": "secret.env\n",
        ".git/config": "",
        ".composer/index.db": "",
        ".hidden/h.txt": "",
        "a.log": "", "keep.log": "", "top.txt": "", "secret.env": "",
        "build/out.js": "",
        "src/main.py": "", "src/top.txt": "", "src/debug.log": "",
        "src/gen/.gitignore": "*.py\n!keep.py\n",
        "src/gen/x.py": "", "src/gen/keep.py": "", "src/gen/data.json": "",
        "src/a-b.py": "", "src/a/b.py": "",
    })
    assert list(ws.iter_files()) == [
        "keep.log", "src/a-b.py", "src/a/b.py", "src/gen/data.json", "src/gen/keep.py",
        "src/main.py", "src/top.txt",
    ]
    assert list(ws.iter_files("src/gen")) == ["src/gen/data.json", "src/gen/keep.py"]
    hidden = list(ws.iter_files(include_hidden=True))
    assert ".gitignore" in hidden and ".hidden/h.txt" in hidden and "src/gen/.gitignore" in hidden
    assert not any(p.startswith((".git/", ".composer/")) for p in hidden)
    everything = list(ws.iter_files(include_ignored=True, include_hidden=True))
    assert everything == sorted(everything)
    assert {"a.log", "build/out.js", "secret.env", "src/gen/x.py", "top.txt"} <= set(everything)
    assert not any(p.startswith((".git/", ".composer/")) for p in everything)
    assert ws.is_ignored("build/out.js") and ws.is_ignored("build") and ws.is_ignored("secret.env")
    assert ws.is_ignored("src/gen/x.py") and not ws.is_ignored("src/gen/keep.py")
    assert ws.is_ignored(".git/config") and not ws.is_ignored("src/top.txt")
    assert list(ws.iter_files("build")) == []
    (root / "src" / "gen" / ".gitignore").write_text("data.json\n")  # edits are picked up
    assert list(ws.iter_files("src/gen")) == ["src/gen/keep.py", "src/gen/x.py"]


def test_iter_files_symlinks(ws: Workspace, root: Path, tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("")
    _tree(root, {"real/f.txt": ""})
    (root / "in.txt").symlink_to(root / "real" / "f.txt")
    (root / "out.txt").symlink_to(tmp_path / "outside.txt")
    (root / "loop").symlink_to(root, target_is_directory=True)
    assert list(ws.iter_files()) == ["in.txt", "real/f.txt"]


def test_list_dir(ws: Workspace, root: Path) -> None:
    _tree(root, {"b.txt": "12345", "a/x": "", ".env": "K=1"})
    assert ws.list_dir(".") == [DirEntry(".env", False, 3), DirEntry("a", True, None), DirEntry("b.txt", False, 5)]
    with pytest.raises(WorkspaceError, match=r"b\.txt is a file, not a directory"):
        ws.list_dir("b.txt")
    with pytest.raises(WorkspaceError, match="c does not exist"):
        ws.list_dir("c")
