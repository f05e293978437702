"""What a checkpoint does at two decisions of a task, against the gold script's
(training/demos.py `gold_turns`): its first move (grep for the function when the request names
it, else read the file) and its edit once the function or the file is read. A leading indicator of what a
warm start or RL taught, at seconds a task where a benchmark attempt takes minutes, and one that
tells a model that learned the harness's format from one that learned the task.

For each task, the harness's real prompts (the gold script played in the task's sandboxed
environment by a policy that records each prompt), then for each checkpoint, served as
`training.eval` serves it (the in-process engine, int4 with a trained checkpoint's adapter beside
it, the tool-call constraint: agent.policy.EnginePolicy), greedy:

  first: tool     the first call is the gold script's tool
         exact    ... with the gold script's arguments as well
         P(tool)  the probability of the gold tool name's first token after
                  `<tool_call>\\n{"name": "` (teacher-forced; 20 alternatives are returned, so a
                  probability below the 20th is reported as that bound)
  edit:  applies  given the gold script's turns up to its edit, the reply's edit_file calls all
                  apply, by edit_file's own rule (agent/tools/files.py plan_edit)
         fixes    ... and leave the files as the gold patch does
         quoted   both again with old_string quoted from the file as the agent loop quotes it
                  (the files read: model/constrained_quote.py), in the same run

    python bench/gold_moves.py --policy composer-mini --policy runs/cpu/final \\
        [--suite bugfix-heldout] [--tasks 16] [--quantize int4] [--no-write]
    python bench/gold_moves.py --policy runs/cpu/final --suite bugfix-train --seen 64   # its own demos

Writes bench/results/gold_moves[-SUITE].json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agent.policy import EnginePolicy  # noqa: E402
from agent.tools.base import ToolError  # noqa: E402
from agent.tools.files import plan_edit  # noqa: E402
from bench.machine import machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.home import DEFAULT_MODEL, ensure_default_model  # noqa: E402
from model.sampling import MAX_TOP_LOGPROBS, SamplingParams  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402
from model.toolcalls import ToolCall  # noqa: E402
from training.demos import ScriptPolicy, gold_turns, run_config_in, starting_texts  # noqa: E402
from training.eval.suite import load_suite  # noqa: E402
from training.harness_rollout import ordered_tasks  # noqa: E402
from training.run import run_tasks  # noqa: E402
from training.tasks import Task  # noqa: E402

NAME_PREFIX = '<tool_call>\n{"name": "'
"""What every tool call's text starts with, up to the tool's name (model/toolcalls.py renders it)."""


class RecordingScript(ScriptPolicy):
    """Plays a script's turns and records the prompt (token ids) and tools of each."""

    def __init__(self, tokenizer, turns) -> None:
        super().__init__(tokenizer, turns, model_id="gold-prompts")
        self.prompts: list[list[int]] = []
        self.tools: list[dict] = []

    async def complete(self, messages, tools, **kwargs):
        ids = kwargs.get("prompt_ids")
        self.tools = list(tools)
        self.prompts.append(list(ids) if ids is not None else self.tokenizer.encode_chat(list(messages), tools=self.tools))
        return await super().complete(messages, tools, **kwargs)


@dataclass
class Scene:
    """One task as the bench poses it: the gold script, the harness's prompt before each of its
    turns, the tools, and the changed files' text before and after the gold edits."""

    task: Task
    turns: list
    prompts: list[list[int]]
    tools: list[dict]
    before: dict[str, str]
    after: dict[str, str]

    @property
    def edit_turn(self) -> int:
        return next(i for i, (_, calls) in enumerate(self.turns) if any(c.name == "edit_file" for c in calls))


def scenes(tasks: list[Task], tokenizer, work: Path) -> list[Scene]:
    """Each task's gold script played in its environment, its prompts recorded."""
    config = run_config_in(work)

    async def one(task: Task) -> Scene:
        turns = gold_turns(task)
        policy = RecordingScript(tokenizer, list(turns))
        await run_tasks([task], policy, config=config, parallel=1)
        if len(policy.prompts) < len(turns):
            raise RuntimeError(f"{task.instance_id}: the harness stopped the gold script early (see {work}/sessions)")
        edits = [c for _, calls in turns for c in calls if c.name == "edit_file"]
        before = starting_texts(task, sorted({c.arguments["path"] for c in edits}))
        after = edited(before, edits)
        if after is None:
            raise RuntimeError(f"{task.instance_id}: the gold script's edits do not apply")
        return Scene(task, turns, policy.prompts, policy.tools, before, after)

    async def all_of_them():
        out = []
        for i, task in enumerate(tasks, 1):
            out.append(await one(task))
            print(f"scene {i}/{len(tasks)}: {task.instance_id}", file=sys.stderr, flush=True)
        return out

    return asyncio.run(all_of_them())


def edited(texts: dict[str, str], calls: list[ToolCall]) -> dict[str, str] | None:
    """`texts` after `calls` (edit_file only), each applied by the tool's own rule
    (agent.tools.files.plan_edit: once verbatim, else once ignoring whitespace; new_string
    different); None when one does not apply."""
    out = dict(texts)
    for call in calls:
        path, old, new = (call.arguments.get(k) for k in ("path", "old_string", "new_string"))
        if not isinstance(old, str) or not isinstance(new, str) or path not in out or not old or old == new:
            return None
        try:
            out[path] = plan_edit(out[path], old, new, bool(call.arguments.get("replace_all")), path).new_text
        except ToolError:
            return None
    return out


def picked(suite: str, count: int, seen: int, seed: int) -> list[Task]:
    """`count` tasks spread evenly over the suite, or over the first `seen` of a training run's
    order (the tasks its warm start acted out) when `seen` is set."""
    tasks = ordered_tasks(suite, seed)[:seen] if seen else load_suite(suite).tasks()
    step = max(1, len(tasks) // count)
    return tasks[::step][:count]


def gold_tool_token(tokenizer, name: str) -> int:
    """The first token of `name` after the tool call's opening, as the model's tokens split it."""
    head, full = tokenizer.encode(NAME_PREFIX), tokenizer.encode(NAME_PREFIX + name)
    if full[: len(head)] != head:
        raise ValueError(f"the tokenizer merges {name!r} into the tool call's opening")
    return full[len(head)]


def first_move(engine: Engine, policy: EnginePolicy, scene: Scene) -> dict[str, Any]:
    """The greedy first reply's first call against the gold one, and P(gold tool) teacher-forced."""
    gold = scene.turns[0][1][0]
    reply = asyncio.run(policy.complete(None, scene.tools, max_tokens=128, prompt_ids=scene.prompts[0]))
    call = reply.tool_calls[0] if reply.tool_calls else None
    head = scene.prompts[0] + engine.tokenizer.encode(NAME_PREFIX)
    [forced] = engine.generate([head], SamplingParams(max_tokens=1, top_logprobs=MAX_TOP_LOGPROBS))
    alternatives = dict(forced.top_logprobs[0])
    token = gold_tool_token(engine.tokenizer, gold.name)
    below = token not in alternatives
    logprob = alternatives.get(token, min(alternatives.values()))
    return {"call": {"name": call.name, "arguments": call.arguments} if call else None,
            "tool": bool(call and call.name == gold.name),
            "exact": bool(call and call.name == gold.name and call.arguments == gold.arguments),
            "p_tool": math.exp(logprob), "p_tool_below": below}


def edit_move(policy: EnginePolicy, scene: Scene, max_tokens: int, quoted: bool = False) -> dict[str, Any]:
    """The greedy reply to the prompt before the gold edit: whether its edits apply, and fix;
    `quoted`: with old_string kept a piece of the file read, as the agent loop asks it."""
    at = scene.edit_turn
    quotes = {"edit_file": {"old_string": dict(scene.before)}} if quoted else None
    reply = asyncio.run(policy.complete(None, scene.tools, max_tokens=max_tokens, prompt_ids=scene.prompts[at],
                                        quotes=quotes))
    edits = [c for c in reply.tool_calls if c.name == "edit_file"]
    result = edited(scene.before, edits) if edits else None
    return {"calls": [{"name": c.name, "arguments": c.arguments} for c in reply.tool_calls],
            "applies": result is not None, "fixes": result == scene.after,
            "exact": [c.arguments for c in edits] == [c.arguments for c in scene.turns[at][1]]}


def measure(path: str, quantize: str, cases: list[Scene], edit_tokens: int) -> dict[str, Any]:
    engine = Engine.from_pretrained(None if path == DEFAULT_MODEL else path, quantize=quantize)
    try:
        policy = EnginePolicy(engine, record_routing=False)
        firsts = [first_move(engine, policy, scene) for scene in cases]
        edits = [edit_move(policy, scene, edit_tokens) for scene in cases]
        quoted = [edit_move(policy, scene, edit_tokens, quoted=True) for scene in cases]
    finally:
        engine.close()
    n = len(cases)
    return {"tasks": n, "tool": sum(m["tool"] for m in firsts), "exact": sum(m["exact"] for m in firsts),
            "p_tool": sum(m["p_tool"] for m in firsts) / n,
            "first_tools": dict(collections.Counter(m["call"]["name"] if m["call"] else "(no call)" for m in firsts)),
            "edit_applies": sum(m["applies"] for m in edits), "edit_fixes": sum(m["fixes"] for m in edits),
            "edit_exact": sum(m["exact"] for m in edits), "quoted_applies": sum(m["applies"] for m in quoted),
            "quoted_fixes": sum(m["fixes"] for m in quoted), "firsts": firsts, "edits": edits, "quoted_edits": quoted}


def table(results: dict[str, Any]) -> str:
    lines = ["| checkpoint | first tool is the gold one | and its arguments | P(gold tool), mean | greedy first tools "
             "| edit applies | edit fixes | edit is the gold one | quoted: applies | quoted: fixes |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path, row in results["policies"].items():
        n = row["tasks"]
        tools = ", ".join(f"{name} {k}" for name, k in sorted(row["first_tools"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {path} | {row['tool']} of {n} | {row['exact']} of {n} | {row['p_tool']:.3f} | {tools} | "
                     f"{row['edit_applies']} of {n} | {row['edit_fixes']} of {n} | {row['edit_exact']} of {n} | "
                     f"{row['quoted_applies']} of {n} | {row['quoted_fixes']} of {n} |")
    gold = ", ".join(f"{name} {k}" for name, k in results["gold_tools"].items())
    return "\n".join(lines) + (f"\n\nThe gold scripts' first tools: {gold}; their edits quote "
                               f"{results['gold_edit_lines']} lines of old_string in all.\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", required=True, help="a checkpoint directory or composer-mini (repeat)")
    ap.add_argument("--suite", default="bugfix-heldout")
    ap.add_argument("--tasks", type=int, default=16, help="tasks spread evenly over the suite")
    ap.add_argument("--seen", type=int, default=0,
                    help="pick from the first N tasks of a training run's order (its warm start's demonstrations)")
    ap.add_argument("--seed", type=int, default=0, help="the training run's seed (with --seen)")
    ap.add_argument("--quantize", default="int4", choices=("int4", "none"))
    ap.add_argument("--edit-tokens", type=int, default=384, help="max_tokens of the edit reply")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    tokenizer = Tokenizer.from_dir(ensure_default_model())
    tasks = picked(args.suite, args.tasks, args.seen, args.seed)
    with tempfile.TemporaryDirectory(prefix="gold-moves-") as work:
        cases = scenes(tasks, tokenizer, Path(work))
    firsts = [scene.turns[0][1][0] for scene in cases]
    results: dict[str, Any] = {
        "machine": machine_line(), "suite": args.suite, "seen": args.seen, "quantize": args.quantize,
        "instances": [t.instance_id for t in tasks],
        "gold": [[{"name": c.name, "arguments": c.arguments} for _, calls in s.turns for c in calls] for s in cases],
        "gold_tools": dict(collections.Counter(g.name for g in firsts)),
        "gold_edit_lines": sum(c.arguments["old_string"].count("\n") + 1
                               for s in cases for c in s.turns[s.edit_turn][1]),
        "policies": {path: measure(path, args.quantize, cases, args.edit_tokens) for path in args.policy},
    }
    which = f"the first {args.seen} tasks of a run's order (seed {args.seed})" if args.seen else "the suite"
    lengths = [len(p) for s in cases for p in (s.prompts[0], s.prompts[s.edit_turn])]
    meta = (f"{results['machine']}; {len(tasks)} `{args.suite}` tasks spread over {which}; the engine at "
            f"{args.quantize}, greedy, the tool-call constraint on; prompt lengths {min(lengths)}-{max(lengths)} tokens.")
    name = "gold_moves" + ("" if args.suite == "bugfix-heldout" else f"-{args.suite}")
    publish(name, f"Gold moves: {args.suite}", results, table(results), meta, write=not args.no_write)
    print(json.dumps({p: {k: r[k] for k in ("tool", "exact", "edit_applies", "edit_fixes", "quoted_applies", "quoted_fixes")}
                      for p, r in results["policies"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
