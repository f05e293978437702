"""Warm-start demonstrations from the tasks' gold patches: each train task's fix, acted out in the
agent harness as read -> edit -> test -> answer, recorded in the harness's exact token format.
(`act_out` and `rendered_ids` serve the stronger-model source too: training/teacher.py.)

    samples = await gold_demonstrations(tasks, tokenizer, run_dir / "demos")
    trainer.update([Group(-1, -1, samples)], step)      # training.rl's warm start
    samples = cached_demonstrations(run_dir / "demos",                     # built once per run
                                    lambda d: gold_demonstrations(tasks, tokenizer, d))

A scripted, token-native policy (`ScriptPolicy`) plays the model: its replies are what the model
would write (content, then each call as a `<tool_call>` block, then the token the chat template ends
a reply with), encoded by the model's tokenizer. The real harness runs them through
training/run.py's `run_task` on the task's environment: it builds every prompt (system prompt,
tools, tool results) exactly as for the model, executes the calls, grades the result with the hidden
tests and logs it all, token for token. So a demonstration is a trajectory the policy could have
sampled, in its own format; the trainer reads it back from the log like any rollout.

The script of a task (`gold_turns`) is one the policy could follow from what it sees: every
argument is in the request or in an earlier tool result, never only in the gold patch (a script
that reads a file the request does not name teaches the model to invent a path):
  1. grep for `def FUNCTION`, the function the request's failing check calls (the task's
     metadata, else the first `def` of the patch's first hunk), when the request names it;
  2. read the `READ_WINDOW` lines from that `def` on (its line number is in the grep result), or
     the whole file when the fix reaches past them, the request names no function, or the patch
     changes several files (the path is in the request or the grep result). A window keeps the
     lines to choose from few and near: the warm start on whole files learned the format and to
     copy a quoted line, but not which line to quote (docs/benchmarks.md, edit likelihood);
  3. one edit_file per hunk: its changed lines and as few context lines as make old_string
     unique in the file (`smallest_edits`), so the policy quotes one line where it can;
  4. run the request's failing check, then the workspace's tests (`check_command`: the hidden
     tests are not in the workspace, so the visible suite alone would pass whatever the edit;
     the check says whether the fix works, and the answer's "tests pass" is backed by the log);
  5. a final answer naming the function and file.
One task in `RETRY_EVERY` gets a script that recovers from a wrong fix (`gold_script`): step 3
first changes the broken line another way (one of its own mutations that leaves the check
failing), the check fails, and the gold edit then quotes the line as the wrong fix left it. The
wrong edit is acted out but not trained on; what trains is running the check after it and
fixing the line on seeing it fail, so a policy whose first fix is wrong (most of the warm-started
model's) tries again instead of answering. Only resolved demonstrations are kept.

Demonstrations have no behaviour logprobs: they are off-policy samples, trained by the
reward-filtered likelihood term (training/loss.py choice 7), never mixed into the policy ratio.
Held-out tasks never reach this module: training.harness_rollout.train_tasks refuses them.

Tests: .venv/bin/python -m pytest tests/training/test_demos.py
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.policy import Reply
from agent.session_log import read_session
from agent.unidiff import FileDiff, parse_diff
from model.toolcalls import ToolCall, render_tool_calls
from training.buffer import Sample
from training.mutations import find_mutations, parses
from training.rewards import efficiency, score
from training.run import RunConfig, TaskRun, run_tasks
from training.tasks import Task, materialize
from training.trajectories import session_segments

Turn = tuple[str, list[ToolCall]]
TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"
"""The demonstrations' test run: the whole visible suite, a command the policy can always write."""
RETRY_EVERY = 2
"""One task in this many (by a hash of its id) gets the retry script when its bug allows one."""
WRONG_FIX_KINDS = ("operator_swap", "wrong_comparison", "off_by_one", "missing_negation", "swapped_args",
                   "wrong_constant")
"""Mutations a wrong fix may be: small changes that leave the line's other text in place (not
`wrong_return` or `dropped_condition`, after which the gold line cannot be copied from the old)."""
CHECK_TIMEOUT_S = 20.0
"""A wrong fix whose check runs longer than this (a loop) is not used."""
DEF = re.compile(r"\s*(?:async\s+)?def\s+(\w+)")
READ_WINDOW = 30
"""Lines a script reads from the fixed function's `def` on: one fixed number, as the policy
cannot know the function's length before it reads it."""


@dataclass(frozen=True)
class Script:
    """A task's turns, and the indices of those acted out but not trained on."""

    turns: list[Turn]
    untrained: frozenset[int] = frozenset()


def gold_script(task: Task) -> Script:
    """`task`'s demonstration: the retry script for one task in `RETRY_EVERY` whose bug has a
    wrong fix to try first, else the straight one (module docstring)."""
    retry = zlib.crc32(task.instance_id.encode()) % RETRY_EVERY == 0
    turns = gold_turns(task, retry=retry)
    edit_turns = [i for i, (_, calls) in enumerate(turns) if any(c.name == "edit_file" for c in calls)]
    return Script(turns, frozenset(edit_turns[:1]) if len(edit_turns) > 1 else frozenset())


def gold_turns(task: Task, *, retry: bool = False) -> list[Turn]:
    """The script of `task`'s gold patch, every argument visible to the policy (module docstring);
    with `retry`, a wrong fix of the broken line and its failing check first, when there is one."""
    files = [f for f in parse_diff(task.patch) if f.hunks and not f.created and not f.deleted]
    if not files:
        raise ValueError(f"{task.instance_id}: its gold patch changes no existing file")
    function = fixed_function(task, files[0])
    named = bool(function) and function in task.problem_statement
    if not named and any(f.path not in task.problem_statement for f in files):
        raise ValueError(f"{task.instance_id}: the request names neither {files[0].path} nor a function "
                         "to find it by, so no script could reach the file from what the policy sees")
    texts = starting_texts(task, [f.path for f in files])
    edits = [(f.path, old, new) for f in files for old, new in smallest_edits(f, texts[f.path])]
    turns: list[Turn] = [("", [ToolCall("grep", {"pattern": f"def {function}"})])] if named else []
    start = window_start(texts[files[0].path], function, [old for _, old, _ in edits]) if named and len(files) == 1 else 0
    reads = ([ToolCall("read_file", {"path": files[0].path, "offset": start, "limit": READ_WINDOW})] if start
             else [ToolCall("read_file", {"path": f.path}) for f in files])
    turns.append(("", reads))
    check = ("", [ToolCall("run_terminal", {"command": check_command(task)})])
    wrong = wrong_fix(task, texts[files[0].path], edits[0]) if retry and len(edits) == 1 else None
    if wrong is not None:
        path, old, new = edits[0]
        turns += [("", [ToolCall("edit_file", {"path": path, "old_string": old, "new_string": wrong})]), check]
        edits = [(path, wrong, new)]
    turns.append(("", [ToolCall("edit_file", {"path": path, "old_string": old, "new_string": new})
                       for path, old, new in edits]))
    turns.append(check)
    what = f"`{function}` in `{files[0].path}`" if function else ", ".join(f"`{f.path}`" for f in files)
    turns.append((f"Fixed {what}. The tests pass.", []))
    return turns


def check_source(task: Task) -> str:
    """Python that runs the request's failing check (the task's `metadata.check.statement`) with
    the names of its test module (the first FAIL_TO_PASS test's file); "" when the task has none."""
    statement = (task.metadata.get("check") or {}).get("statement")
    if not statement or not task.FAIL_TO_PASS:
        return ""
    module = task.FAIL_TO_PASS[0].split("::", 1)[0].removesuffix(".py").replace("/", ".")
    return f"from {module} import *\n{statement}"


def check_command(task: Task) -> str:
    """The shell command a script runs after its edit: the request's check, then the visible tests
    (`TEST_COMMAND` alone when the task has no check). It fails, printing the assertion's
    traceback, until the check passes."""
    source = check_source(task)
    if not source:
        return TEST_COMMAND
    quoted = source.replace("'", "'\\''")
    return f"python -c '{quoted}' && {TEST_COMMAND}"


def wrong_fix(task: Task, text: str, edit: tuple[str, str, str]) -> str | None:
    """Another change of the edit's broken line: the old_string with one small mutation
    (`WRONG_FIX_KINDS`) of the task's mutated line that parses, is neither the broken nor the gold
    text, and leaves the request's check failing in the task's workspace. Mutations of the bug's
    own span come first (a wrong fix of the right spot, as `3` for a `2` that should be `1`), each
    group in a seeded order; None when there is none (or the task names no check or mutated line)."""
    path, old, new = edit
    bug = task.metadata.get("mutation") or {}
    line = bug.get("line")
    source = check_source(task)
    if not line or not source or text.count(old) != 1:
        return None
    data, quote = text.encode(), old.encode()
    start = data.index(quote)
    candidates: dict[str, bool] = {}  # variant -> whether it changes the bug's own text
    for m in find_mutations(data, path):
        if (m.kind not in WRONG_FIX_KINDS or m.line != line or not (start <= m.start and m.end <= start + len(quote))
                or not parses(m, data)):
            continue
        variant = (quote[:m.start - start] + m.new.encode() + quote[m.end - start:]).decode()
        if variant not in (old, new) and text.replace(old, variant).count(variant) == 1:
            candidates[variant] = candidates.get(variant, False) or m.old == bug.get("new")
    order = sorted(candidates, key=lambda v: (not candidates[v], zlib.crc32(f"{task.instance_id}:{v}".encode())))
    with tempfile.TemporaryDirectory(prefix="composer-wrong-fix-") as scratch:
        root = materialize(task, Path(scratch) / "workspace")
        for variant in order:
            (root / path).write_text(text.replace(old, variant), encoding="utf-8")
            try:
                ran = subprocess.run([sys.executable, "-c", source], cwd=root, capture_output=True,
                                     timeout=CHECK_TIMEOUT_S, check=False)
            except subprocess.TimeoutExpired:
                continue
            if ran.returncode != 0:
                return variant
    return None


def window_start(text: str, function: str, quotes: list[str]) -> int:
    """The 1-based line of `def function` in `text` when the `READ_WINDOW` lines from it hold
    every one of `quotes` (the edits' old_strings), else 0."""
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        found = DEF.match(line)
        if found and found.group(1) == function:
            window = "\n".join(lines[number - 1 : number - 1 + READ_WINDOW])
            return number if all(quote in window for quote in quotes) else 0
    return 0


def starting_texts(task: Task, paths: list[str]) -> dict[str, str]:
    """The text of each of `paths` in the task's starting workspace (built in a scratch directory)."""
    with tempfile.TemporaryDirectory(prefix="composer-demo-") as scratch:
        root = materialize(task, Path(scratch) / "workspace")
        return {path: (root / path).read_text(encoding="utf-8") for path in paths}


def smallest_edits(changed: FileDiff, text: str) -> list[tuple[str, str]]:
    """(old_string, new_string) for each hunk of `changed`, applied in order to `text`: the
    changed lines, widened by context lines (one below, then one above, ...) until old_string
    occurs once in the file as it stands. The fewer lines an edit quotes, the fewer tokens the
    policy must copy exactly from what it read (quoting whole 7-line hunks, the warm-started
    model wrote old_strings that were not in the file in 24 of 31 edits)."""
    edits = []
    for hunk in changed.hunks:
        lines = hunk.lines
        marked = [i for i, line in enumerate(lines) if line[:1] in "+-"]
        lo, hi = marked[0], marked[-1] + 1
        while True:
            old = "\n".join(line[1:] for line in lines[lo:hi] if line[:1] in " -")
            if (old.strip() and text.count(old) == 1) or (lo == 0 and hi == len(lines)):
                break
            below, above = hi - 1 - marked[-1], marked[0] - lo
            if hi < len(lines) and (below <= above or lo == 0):
                hi += 1
            else:
                lo -= 1
        new = "\n".join(line[1:] for line in lines[lo:hi] if line[:1] in " +")
        edits.append((old, new))
        text = text.replace(old, new, 1)
    return edits


def fixed_function(task: Task, changed: FileDiff) -> str:
    """The name of the function the patch fixes: the task's metadata (`package.module.function`),
    else the first `def` in the first hunk's old lines; "" when neither names one."""
    if task.metadata.get("function"):
        return str(task.metadata["function"]).rsplit(".", 1)[-1]
    found = next((m for line in changed.hunks[0].old if (m := DEF.match(line))), None)
    return found.group(1) if found else ""


def rendered_ids(tokenizer, content: str, calls: Sequence[ToolCall]) -> list[int]:
    """A reply's completion as the model writes it: the content, then each call as a
    `<tool_call>` block, then the token the chat template ends a reply with."""
    text = "\n".join(part for part in (content, render_tool_calls(list(calls))) if part)
    return [*tokenizer.encode(text), tokenizer.reply_end_id]


class ScriptPolicy:
    """A token-native policy that replies with a script's turns, encoded as the model writes
    them; no logprobs (the log marks it as not sampled by the policy)."""

    token_native = True

    def __init__(self, tokenizer, turns: Sequence[Turn], *, model_id: str = "gold-patch",
                 context_window: int = 8192) -> None:
        self.tokenizer, self.turns = tokenizer, list(turns)
        self.model_id, self.context_window = model_id, context_window

    def count_tokens(self, messages, tools) -> int:
        return len(self.tokenizer.encode_prompt(messages, tools))

    async def complete(self, messages, tools, *, max_tokens, temperature=0.0, top_p=1.0, seed=None,
                       on_text=None, prompt_ids=None) -> Reply:
        content, calls = self.turns.pop(0) if self.turns else ("Done.", [])
        ids = rendered_ids(self.tokenizer, content, calls)
        if on_text is not None and content:
            on_text(content)
        prompt = list(prompt_ids or [])
        return Reply(content=content, tool_calls=list(calls), finish_reason="tool_calls" if calls else "stop",
                     prompt_token_ids=prompt, completion_token_ids=ids, prompt_tokens=len(prompt),
                     completion_tokens=len(ids), weight_version=-1, sampler={"temperature": 0.0, "top_p": 1.0, "seed": None})


def demonstration_samples(run: TaskRun, untrained: frozenset[int] = frozenset()) -> list[Sample]:
    """A resolved demonstration's Samples: every completion token of every model call trains (the
    likelihood term) but the calls whose order in the session is in `untrained`; prompts and tool
    outputs do not; [] when it did not resolve."""
    if not run.grade.resolved or run.log_path is None:
        return []
    records = read_session(run.log_path)
    reward = score(records, run.grade).reward
    eff = efficiency(records)
    segments, _ = session_segments(records)
    out, order = [], 0
    for seg in segments:
        mask = [False] * len(seg.token_ids)
        for call in seg.calls:
            if order not in untrained:
                mask[call["completion_start"]:call["end"]] = [True] * (call["end"] - call["completion_start"])
            order += 1
        out.append(Sample(tokens=list(seg.token_ids), mask=mask, behaviour_logprobs=[math.nan] * len(mask),
                          reward=float(reward), weight_version=-1, off_policy=True,
                          stats={"turns": eff.turns, "tool_calls": eff.tool_calls,
                                 "parallel_calls": eff.parallel_calls}))
    return out


def run_config_in(run_dir: Path) -> RunConfig:
    """Runs whose logs, environment state and bases all live under `run_dir`."""
    return RunConfig(log_dir=run_dir / "sessions", state_dir=str(run_dir / "envs" / "state"),
                     base_dir=str(run_dir / "envs" / "bases"))


async def act_out(tasks: Sequence[Task], policy_for: Callable[[Task], Any], run_dir: Path, *, parallel: int = 2,
                  what: str = "demonstration",
                  untrained: Callable[[Task], frozenset[int]] = lambda task: frozenset()) -> list[Sample]:
    """Runs `policy_for(task)` on every task in the harness (logs under `run_dir`/sessions) and
    returns the resolved runs' Samples, less each task's `untrained(task)` model calls; ValueError
    when none resolved."""
    config = run_config_in(Path(run_dir))
    gate = asyncio.Semaphore(parallel)

    async def one(task: Task) -> list[Sample]:
        async with gate:
            runs = await run_tasks([task], policy_for(task), config=config, parallel=1)
        return [s for run in runs for s in demonstration_samples(run, untrained(task))]

    samples = [s for batch in await asyncio.gather(*(one(t) for t in tasks)) for s in batch]
    if not samples:
        raise ValueError(f"no {what} of {len(tasks)} tasks resolved; see the logs in {run_dir}/sessions")
    return samples


async def gold_demonstrations(tasks: Sequence[Task], tokenizer, run_dir: Path, *, parallel: int = 2,
                              context_window: int = 8192) -> list[Sample]:
    """Every task's gold patch acted out in the harness (`act_out`)."""
    scripts = {t.instance_id: gold_script(t) for t in tasks}
    return await act_out(tasks, lambda t: ScriptPolicy(tokenizer, scripts[t.instance_id].turns, context_window=context_window),
                         run_dir, parallel=parallel, what="gold demonstration",
                         untrained=lambda t: scripts[t.instance_id].untrained)


def cached_demonstrations(directory: Path, build: Callable[[Path], Awaitable[list[Sample]]]) -> list[Sample]:
    """`await build(directory)`'s demonstrations, kept in `directory`/demonstrations.jsonl
    (written atomically) so a resumed run reads them instead of acting them out again."""
    path = Path(directory) / "demonstrations.jsonl"
    if path.is_file():
        return [Sample.from_json(json.loads(line)) for line in path.read_text().splitlines() if line]
    samples = asyncio.run(build(Path(directory)))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(s.to_json()) + "\n" for s in samples))
    os.replace(tmp, path)
    return samples
