"""The file tools: read_file, edit_file, write_file, delete_file.

    registry = ToolRegistry([*file_tools(), ...])       # fresh instances; nothing is global
    await registry.call("edit_file", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"}, ctx)

Every tool goes through `ctx.workspace` (paths checked, the editor's unsaved buffers seen, edits
to open buffers sent to the editor). Results put what the editor and the log need in `data`:
edits carry {"path", "diff" (unified), "old_text", "new_text", "applied_via", "tolerated", ...}
(ACP's diff content is oldText/newText).

Session state they keep in `ctx.state`:
- "file_reads": {path: sha1 of the text last read or written}, to notice a file that changed
  underneath the agent (an edit still applies when old_string matches, and says so);
- "changed_paths": [paths edited, written or deleted], what read_lints checks by default.

edit_file's matching, in order: exact (unique, or every occurrence with replace_all); then, when
that fails, a unique match of whole lines ignoring indentation, trailing whitespace and CR line
ends, re-indenting new_string by the file's offset and saying exactly what was tolerated; else
an error showing the closest block (difflib) with its line numbers.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agent.exceptions import BinaryFileError, FileTooLargeError, WorkspaceError
from agent.tools.base import MAX_OUTPUT_CHARS, ToolContext, ToolError, ToolResult, ToolSpec
from agent.tools.lints import format_diagnostics, lint, new_diagnostics

if TYPE_CHECKING:
    from agent.workspace import Workspace

READ_LIMIT = 400
"""Lines read_file shows when no limit is given."""
MAX_LINE_CHARS = 2000
SNIPPET_CONTEXT = 3
MAX_SNIPPET_REGIONS = 3
READS_KEY = "file_reads"
CHANGED_KEY = "changed_paths"
_NUMBERED = re.compile(r"^\s*\d+\t")


def _path_param(what: str) -> dict[str, Any]:
    return {"type": "string", "description": f"{what}, relative to the workspace root (or absolute inside it)."}


# ---- helpers shared by the tools -------------------------------------------------------------


def split_lines(text: str) -> list[str]:
    """Lines without their breaks; a final line break does not start another line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def number_lines(lines: list[str], first: int) -> str:
    """`cat -n` style: right-aligned line number, a tab, the line."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, first))


def fingerprint(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()


def unified_diff(rel: str, old: str, new: str) -> str:
    def lines(text: str) -> list[str]:
        out = text.splitlines(keepends=True)
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n\\ No newline at end of file\n"
        return out

    return "".join(difflib.unified_diff(lines(old), lines(new), f"a/{rel}", f"b/{rel}"))


def line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def files_read(ctx: ToolContext) -> dict[str, str]:
    """The files read or written this session, as they are now (unsaved buffers included), by
    each name a call may give them: `a.py`, `./a.py` and absolute. Deleted, binary and too
    large files are left out."""
    texts: dict[str, str] = {}
    for rel in list(ctx.state.get(READS_KEY, {})):
        try:
            text = ctx.workspace.read_text(rel)
        except (WorkspaceError, OSError):
            continue
        texts.update(dict.fromkeys((rel, f"./{rel}", str(ctx.workspace.root / rel)), text))
    return texts


def _remember(ctx: ToolContext, rel: str, text: str) -> None:
    ctx.state.setdefault(READS_KEY, {})[rel] = fingerprint(text)


def _mark_changed(ctx: ToolContext, rel: str) -> None:
    changed = ctx.state.setdefault(CHANGED_KEY, [])
    if rel not in changed:
        changed.append(rel)


def _changed_underneath(ctx: ToolContext, rel: str, text: str) -> bool:
    seen = ctx.state.get(READS_KEY, {}).get(rel)
    return seen is not None and seen != fingerprint(text)


def _snippet(text: str, regions: list[tuple[int, int]], max_lines: int = 60) -> str:
    """The edited regions (1-based inclusive line ranges of `text`) with a few lines around."""
    lines = split_lines(text)
    parts, used = [], 0
    for start, end in regions[:MAX_SNIPPET_REGIONS]:
        lo, hi = max(1, start - SNIPPET_CONTEXT), min(len(lines), end + SNIPPET_CONTEXT)
        hi = min(hi, lo + max_lines - used - 1)
        if hi < lo:
            break
        parts.append(number_lines(lines[lo - 1 : hi], lo))
        used += hi - lo + 1
    if len(regions) > len(parts):
        parts.append(f"[... {len(regions) - len(parts)} more edited places not shown]")
    return "\n   ...\n".join(parts)


async def apply_and_report(ctx: ToolContext, rel: str, old_text: str | None, new_text: str,
                            first_line: int) -> tuple[str, list[dict[str, Any]], str]:
    """Applies the change, records it, and lints before and after. Returns (applied_via,
    the new diagnostics as dicts, the text to show for them)."""
    ws = ctx.workspace
    via = await ws.apply_text(rel, new_text)
    _remember(ctx, rel, new_text)
    _mark_changed(ctx, rel)
    try:
        before, after = await asyncio.gather(
            lint(ws, rel, old_text) if old_text else _no_diagnostics(), lint(ws, rel, new_text)
        )
    except Exception as err:  # the change is already applied: a linter failure must not hide that
        return via, [], f"\n[lint check failed: {type(err).__name__}: {err}; the change was applied]"
    delta = len(split_lines(new_text)) - len(split_lines(old_text or ""))
    fresh = new_diagnostics(before, after, first_line, delta)
    shown = ""
    if fresh:
        shown = f"\nNew lint errors introduced by this change:\n{format_diagnostics(fresh)}"
    return via, [asdict(d) for d in fresh], shown


async def _no_diagnostics() -> list:
    return []


def _lines(n: int) -> str:
    return f"{n} line{'s' * (n != 1)}"


def _where(via: str) -> str:
    return "applied in the editor" if via == "editor" else "written to disk"


# ---- read_file -------------------------------------------------------------------------------


class ReadFile:
    spec = ToolSpec(
        name="read_file",
        description=(
            "Read a text file, with line numbers (cat -n style: the number, a tab, the line; the "
            f"prefix is not part of the file). Shows up to {READ_LIMIT} lines starting at offset and "
            "says how to continue when more remain. Sees the editor's unsaved changes. Lines over "
            f"{MAX_LINE_CHARS} characters are cut; binary files are refused."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _path_param("The file to read"),
                "offset": {"type": "integer", "minimum": 1, "description": "1-based line to start from (default 1)."},
                "limit": {"type": "integer", "minimum": 1,
                          "description": f"How many lines to show (default {READ_LIMIT})."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        read_only=True,
        kind="read",
    )

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return []

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        rel = ws.relative(args["path"])
        offset, limit = args.get("offset", 1), args.get("limit", READ_LIMIT)
        notes, streamed = [], False
        try:
            text = ws.read_text(rel)
        except FileTooLargeError:
            lines, total = ws.read_lines(rel, offset, limit)
            streamed = True
        else:
            _remember(ctx, rel, text)
            all_lines = split_lines(text)
            total, lines = len(all_lines), all_lines[offset - 1 : offset - 1 + limit]
        data: dict[str, Any] = {"path": rel, "total_lines": total}
        if total == 0:
            return ToolResult(output=f"{rel} is empty (0 lines).", data=data)
        if offset > total:
            raise ToolError(f"offset {offset} is past the end of {rel}, which has {total} lines; "
                            f"use an offset from 1 to {total}")
        body, last, cut = _render(lines, offset)
        if last < total:
            notes.append(f"[showing lines {offset}-{last} of {total}; call read_file with "
                         f"offset={last + 1} to continue]")
        if streamed:
            notes.append(f"[{rel} is over the size limit for whole-file reads; it cannot be edited with edit_file]")
        if cut:
            notes.append(f"[{cut} long line(s) cut at {MAX_LINE_CHARS} characters; use grep or "
                         f"run_terminal to see them whole]")
        fmt = ws.text_format(rel)
        if fmt is not None and fmt.note:
            notes.append(f"[{rel} is {fmt.note}]")
        if ws.buffer(rel) is not None:
            notes.append("[this is the editor's unsaved buffer, which may differ from the disk]")
        data.update(start_line=offset, end_line=last)
        output = body + ("\n" + "\n".join(notes) if notes else "")
        return ToolResult(output=output, data=data, truncated=last < offset - 1 + len(lines) or cut > 0)


def _render(lines: list[str], first: int) -> tuple[str, int, int]:
    """Numbers `lines` within the output budget. Returns (text, last line shown, lines cut)."""
    budget = MAX_OUTPUT_CHARS - 500
    out, cut, last = [], 0, first - 1
    for n, line in enumerate(lines, first):
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" ... [line cut: {len(line)} characters]"
            cut += 1
        row = f"{n:>6}\t{line}"
        budget -= len(row) + 1
        if budget < 0 and out:
            break
        out.append(row)
        last = n
    return "\n".join(out), last, cut


# ---- edit_file -------------------------------------------------------------------------------


@dataclass
class EditPlan:
    new_text: str
    regions: list[tuple[int, int]]
    """Edited line ranges in new_text (1-based, inclusive)."""
    count: int
    tolerated: str | None = None
    """What the whitespace-tolerant match ignored, when it was used."""


def plan_edit(text: str, old: str, new: str, replace_all: bool, rel: str) -> EditPlan:
    """Where and how old -> new applies in `text`; raises ToolError saying what to do instead."""
    starts, i = [], text.find(old)
    while i != -1:
        starts.append(i)
        i = text.find(old, i + len(old))
    if not starts:
        return _tolerant_plan(text, old, new, rel)
    if len(starts) > 1 and not replace_all:
        where = [line_of(text, s) for s in starts]
        raise ToolError(
            f"old_string occurs {len(starts)} times in {rel}, at lines {where}; include more "
            f"surrounding lines to make it unique, or set replace_all=true to change every occurrence"
        )
    pieces, regions, prev, shift = [], [], 0, 0
    grow = new.count("\n") - old.count("\n")
    for s in starts:
        pieces += [text[prev:s], new]
        first = line_of(text, s) + shift
        regions.append((first, first + new.count("\n")))
        shift += grow
        prev = s + len(old)
    pieces.append(text[prev:])
    return EditPlan("".join(pieces), regions, len(starts))


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _tolerant_plan(text: str, old: str, new: str, rel: str) -> EditPlan:
    file_lines = text.split("\n")
    old_lines = split_lines(old.replace("\r\n", "\n")) or [""]
    new_lines = split_lines(new.replace("\r\n", "\n"))
    keys = [line.strip() for line in old_lines]
    if not any(keys):
        raise ToolError(f"old_string did not appear verbatim in {rel}, and it is only whitespace; "
                        f"read the file and copy the exact text to replace")
    file_keys = [line.strip() for line in file_lines]
    n = len(keys)
    found = [i for i in range(len(file_lines) - n + 1) if file_keys[i] == keys[0] and file_keys[i : i + n] == keys]
    if not found:
        raise ToolError(_not_found(rel, file_lines, file_keys, old_lines, keys))
    if len(found) > 1:
        raise ToolError(
            f"old_string did not appear verbatim in {rel}; ignoring whitespace it matches "
            f"{len(found)} places, at lines {[i + 1 for i in found]}; copy the exact text from "
            f"read_file, with enough surrounding lines to be unique"
        )
    i = found[0]
    region = file_lines[i : i + n]
    j = next(k for k, key in enumerate(keys) if key)
    file_indent, old_indent = _indent(region[j]), _indent(old_lines[j])
    cr = "\r" if region[0].endswith("\r") else ""
    placed = [(file_indent + line[len(old_indent) :] if line.startswith(old_indent) and line.strip() else line) + cr
              for line in new_lines]
    new_text = "\n".join(file_lines[:i] + placed + file_lines[i + n :])
    tolerated = _describe_tolerance(region, old_lines, file_indent, old_indent)
    end = i + max(len(placed), 1)
    return EditPlan(new_text, [(i + 1, end)], 1,
                    f"old_string did not match {rel} exactly; it matched lines {i + 1}-{i + n} when "
                    f"ignoring {tolerated}. Check the result below.")


def _describe_tolerance(region: list[str], old_lines: list[str], file_indent: str, old_indent: str) -> str:
    kinds = []
    pairs = [(f, o) for f, o in zip(region, old_lines, strict=True) if f.strip()]
    if any(_indent(f) != _indent(o) for f, o in pairs):
        kinds.append(f"indentation (the file indents with {file_indent!r} where old_string has "
                     f"{old_indent!r}; new_string was re-indented by the same offset)")
    if any(f.rstrip("\r")[len(f.rstrip()) :] != o[len(o.rstrip()) :] for f, o in pairs):
        kinds.append("trailing whitespace")
    if any(f.endswith("\r") for f in region):
        kinds.append("CRLF line ends (kept in the file)")
    if not kinds:
        return "line breaks at the ends of old_string"
    return " and ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 1 else kinds)


def _not_found(rel: str, file_lines: list[str], file_keys: list[str], old_lines: list[str], keys: list[str]) -> str:
    message = (f"old_string did not appear verbatim in {rel} (not even ignoring whitespace); read "
               f"the file again with read_file and copy the exact text, indentation included.")
    if all(_NUMBERED.match(line) for line in old_lines if line.strip()):
        message += " old_string seems to include read_file's line-number prefixes; leave them out."
    best = _closest(file_keys, keys)
    if best is not None:
        start, ratio = best
        shown = file_lines[start : start + min(len(keys), 30)]
        message += (f"\nThe closest match ({ratio:.0%} similar) is at lines {start + 1}-{start + len(shown)}:\n"
                    + number_lines([line.rstrip("\r") for line in shown], start + 1))
    return message


def _closest(file_keys: list[str], keys: list[str]) -> tuple[int, float] | None:
    """The window of len(keys) file lines most like `keys` (by difflib ratio), if any is >= 40%."""
    n = len(keys)
    last = len(file_keys) - n
    if last < 0 or not file_keys:
        return None
    wanted = {k for k in keys if k}
    hits = [0] * (len(file_keys) + 1)
    for idx, key in enumerate(file_keys):
        hits[idx + 1] = hits[idx] + (key in wanted)
    scores = sorted(range(last + 1), key=lambda s: hits[s + n] - hits[s], reverse=True)
    candidates = set(scores[:20])
    j, first = next((k, key) for k, key in enumerate(keys) if key)
    for near in difflib.get_close_matches(first, file_keys, n=5, cutoff=0.5):
        for idx, key in enumerate(file_keys):
            if key == near and 0 <= idx - j <= last:
                candidates.add(idx - j)
    target = "\n".join(keys)
    rated = [(difflib.SequenceMatcher(None, target, "\n".join(file_keys[s : s + n])).ratio(), -s) for s in candidates]
    ratio, neg_start = max(rated)
    return (-neg_start, ratio) if ratio >= 0.4 else None


class EditFile:
    spec = ToolSpec(
        name="edit_file",
        description=(
            "Replace exact text in a file. old_string must match the file verbatim (copy it from "
            "read_file without the line-number prefix, indentation included) and be unique in the "
            "file unless replace_all is true; add surrounding lines to make it unique. To create a "
            "new file, pass an empty old_string (or use write_file). Shows the edited lines and any "
            "lint errors the edit introduced."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _path_param("The file to edit"),
                "old_string": {"type": "string", "description": "The exact text to replace (empty only to create a new file)."},
                "new_string": {"type": "string", "description": "The text to put in its place (must differ from old_string)."},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence of old_string (default false)."},
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        },
        read_only=False,
        kind="edit",
        quoted=("old_string",),
    )

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return [args["path"]]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        rel = ws.relative(args["path"])
        old, new = args["old_string"], args["new_string"]
        if old != "" and old != new:
            text = _text_to_edit(ws, rel)
            if "\r" not in text:  # LF files and CRLF files (which read with \n): match in that view
                old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
        if old == new:
            raise ToolError("old_string and new_string are identical, so there is nothing to change; "
                            "put the text you want in new_string")
        if old == "":
            return await self._create(ctx, rel, new)
        underneath = _changed_underneath(ctx, rel, text)
        try:
            plan = plan_edit(text, old, new, bool(args.get("replace_all")), rel)
        except ToolError as err:
            if underneath:
                raise ToolError(f"{err}\nNote: {rel} changed since you last read it; read it again.") from None
            raise
        via, fresh, lint_text = await apply_and_report(ctx, rel, text, plan.new_text, plan.regions[0][0])
        notes = [f"Edited {rel}: replaced {plan.count} occurrence{'s' * (plan.count > 1)} ({_where(via)})."]
        if plan.tolerated:
            notes.append(plan.tolerated)
        if underneath:
            notes.append(f"Note: {rel} changed since you last read it (the user or another process "
                         f"edited it); old_string still matched, so the edit was applied.")
        output = "\n".join(notes) + "\n" + _snippet(plan.new_text, plan.regions) + lint_text
        data = {"path": rel, "diff": unified_diff(rel, text, plan.new_text), "old_text": text,
                "new_text": plan.new_text, "applied_via": via, "tolerated": plan.tolerated,
                "replacements": plan.count, "changed_underneath": underneath, "new_diagnostics": fresh}
        return ToolResult(output=output, data=data)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str | None, str] | None:
        """(path, old text, new text) this call would produce, without writing; None when the
        call would fail (the failure is then the model's to read, not the person's)."""
        try:
            rel = ctx.workspace.relative(args["path"])
            old, new = args["old_string"], args["new_string"]
            if old == "":
                return (rel, None, new) if not ctx.workspace.exists(rel) else None
            text = _text_to_edit(ctx.workspace, rel)
            if "\r" not in text:
                old, new = old.replace("\r\n", "\n"), new.replace("\r\n", "\n")
            return rel, text, plan_edit(text, old, new, bool(args.get("replace_all")), rel).new_text
        except Exception:
            return None

    async def _create(self, ctx: ToolContext, rel: str, content: str) -> ToolResult:
        ws = ctx.workspace
        old_text = None
        if ws.exists(rel):
            old_text = _text_to_edit(ws, rel)
            if old_text.strip():
                raise ToolError(f"old_string is empty, which only creates a new file (or fills an empty "
                                f"one), but {rel} already has content; pass the exact text to replace, "
                                f"or use write_file to overwrite the whole file")
        via, fresh, lint_text = await apply_and_report(ctx, rel, old_text, content, 1)
        lines = split_lines(content)
        output = f"Created {rel} ({_lines(len(lines))}, {_where(via)}).\n" + _snippet(content, [(1, len(lines))], 20)
        data = {"path": rel, "diff": unified_diff(rel, old_text or "", content), "old_text": old_text,
                "new_text": content, "applied_via": via, "tolerated": None, "replacements": 0,
                "changed_underneath": False, "new_diagnostics": fresh}
        return ToolResult(output=output + lint_text, data=data)


def _text_to_edit(ws: Workspace, rel: str) -> str:
    if not ws.exists(rel):
        try:
            ws.stat(rel)
        except WorkspaceError as err:
            raise ToolError(f"{err}; to create a new file, use write_file") from None
    try:
        return ws.read_text(rel)
    except FileTooLargeError as err:
        raise ToolError(f"{err}. edit_file cannot change a file this large; use run_terminal "
                        f"(sed, python) to edit it") from None


# ---- write_file, delete_file -----------------------------------------------------------------


class WriteFile:
    spec = ToolSpec(
        name="write_file",
        description=(
            "Create a file with the given content, or overwrite an existing file entirely. Parent "
            "folders are created. For changes to part of an existing file, prefer edit_file."
        ),
        parameters={
            "type": "object",
            "properties": {
                "path": _path_param("The file to create or overwrite"),
                "content": {"type": "string", "description": "The complete new content of the file."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        read_only=False,
        kind="edit",
    )

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return [args["path"]]

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> tuple[str, str | None, str] | None:
        """(path, old text or None for a new file, new text), without writing."""
        try:
            rel, ws = ctx.workspace.relative(args["path"]), ctx.workspace
            return rel, (ws.read_text(rel) if ws.exists(rel) else None), args["content"]
        except Exception:
            return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        rel, content = ws.relative(args["path"]), args["content"]
        if ws.is_dir(rel):
            raise ToolError(f"{rel} is a directory; give the path of a file to write")
        old_text, notes = None, []
        if ws.exists(rel):
            try:
                old_text = ws.read_text(rel)
            except (BinaryFileError, FileTooLargeError) as err:
                notes.append(f"Replaced what was there: {err}.")
        fmt = ws.text_format(rel)
        if old_text is not None and fmt is not None and fmt.newline == "\r\n":
            content = content.replace("\r\n", "\n")  # compare and diff in the \n view
        if old_text == content:
            return ToolResult(output=f"{rel} already has exactly this content; nothing was written.",
                              data={"path": rel, "diff": "", "old_text": old_text, "new_text": content,
                                    "applied_via": None})
        underneath = old_text is not None and _changed_underneath(ctx, rel, old_text)
        via, fresh, lint_text = await apply_and_report(ctx, rel, old_text, content, 1)
        diff = unified_diff(rel, old_text or "", content)
        lines = len(split_lines(content))
        if old_text is None and not notes:
            head = f"Created {rel} ({_lines(lines)}, {_where(via)})."
        else:
            added = sum(1 for d in diff.splitlines() if d.startswith("+") and not d.startswith("+++"))
            removed = sum(1 for d in diff.splitlines() if d.startswith("-") and not d.startswith("---"))
            head = f"Overwrote {rel} ({_lines(lines)}: +{added} -{removed}, {_where(via)})."
        if underneath:
            notes.append(f"Note: {rel} changed since you last read it; those changes were overwritten.")
        output = "\n".join([head, *notes]) + lint_text
        data = {"path": rel, "diff": diff, "old_text": old_text, "new_text": content, "applied_via": via,
                "changed_underneath": underneath, "new_diagnostics": fresh}
        return ToolResult(output=output, data=data)


class DeleteFile:
    spec = ToolSpec(
        name="delete_file",
        description="Delete one file. Directories are refused (use run_terminal for those).",
        parameters={
            "type": "object",
            "properties": {"path": _path_param("The file to delete")},
            "required": ["path"],
            "additionalProperties": False,
        },
        read_only=False,
        kind="delete",
    )

    def paths(self, args: dict[str, Any]) -> list[str] | None:
        return [args["path"]]

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ws = ctx.workspace
        rel = ws.relative(args["path"])
        if ws.is_dir(rel):
            raise ToolError(f"{rel} is a directory; delete_file removes single files only. Use "
                            f"run_terminal with `rm -r {rel}` to remove a directory")
        if not ws.exists(rel):
            ws.stat(rel)  # raises "does not exist; did you mean ..."
        try:
            old_text: str | None = ws.read_text(rel)
        except (BinaryFileError, FileTooLargeError):
            old_text = None
        via = await ws.apply_delete(rel)
        _mark_changed(ctx, rel)
        ctx.state.get(READS_KEY, {}).pop(rel, None)
        data = {"path": rel, "diff": unified_diff(rel, old_text or "", ""), "old_text": old_text,
                "new_text": "", "applied_via": via}
        where = "in the editor" if via == "editor" else "from disk"
        return ToolResult(output=f"Deleted {rel} ({where}).", data=data)


def file_tools() -> list[Any]:
    """Fresh instances of the file tools (read_lints lives in agent.tools.lints)."""
    return [ReadFile(), EditFile(), WriteFile(), DeleteFile()]
