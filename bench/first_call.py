"""What a checkpoint's first move is on a task, against the gold script's (training/demos.py
`gold_turns`: grep for the function when the request does not name its file, else read it): a
leading indicator of what a warm start or RL taught, at seconds a task where a benchmark attempt
takes minutes, and one that tells a model that learned the harness's format from one that
learned the task.

For each task, the harness's real first prompt (the task run in its sandboxed environment by a
policy that records its prompt and answers "Done."), then for each checkpoint, served as
`training.eval` serves it (the in-process engine, int4 with a trained checkpoint's adapter beside
it, the tool-call constraint: agent.policy.EnginePolicy):

  tool       the greedy first call is the gold script's tool
  exact      ... with the gold script's arguments as well
  P(tool)    the probability of the gold tool name's first token after `<tool_call>\\n{"name": "`
             (teacher-forced; 20 alternatives are returned, so a probability below the 20th
             is reported as that bound)

    python bench/first_call.py --policy composer-mini --policy runs/cpu/final \\
        [--suite bugfix-heldout] [--tasks 20] [--quantize int4] [--no-write]
    python bench/first_call.py --policy runs/cpu/final --suite bugfix-train --seen 64   # its own demos

Writes bench/results/first_call[-SUITE].json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agent.policy import EnginePolicy  # noqa: E402
from bench.machine import machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.engine import Engine  # noqa: E402
from model.home import DEFAULT_MODEL, ensure_default_model  # noqa: E402
from model.sampling import MAX_TOP_LOGPROBS, SamplingParams  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402
from model.toolcalls import ToolCall  # noqa: E402
from training.demos import ScriptPolicy, gold_turns  # noqa: E402
from training.eval.suite import load_suite  # noqa: E402
from training.harness_rollout import ordered_tasks  # noqa: E402
from training.run import RunConfig, run_tasks  # noqa: E402
from training.tasks import Task  # noqa: E402

NAME_PREFIX = '<tool_call>\n{"name": "'
"""What every tool call's text starts with, up to the tool's name (model/toolcalls.py renders it)."""


class FirstPrompt(ScriptPolicy):
    """Records the first prompt the harness builds (token ids and tools), then answers "Done."."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer, [], model_id="first-prompt")
        self.prompt: list[int] | None = None
        self.tools: list[dict] = []

    async def complete(self, messages, tools, **kwargs):
        if self.prompt is None:
            ids = kwargs.get("prompt_ids")
            self.tools = list(tools)
            self.prompt = list(ids) if ids is not None else self.tokenizer.encode_chat(list(messages), tools=self.tools)
        return await super().complete(messages, tools, **kwargs)


def first_prompts(tasks: list[Task], tokenizer, work: Path) -> list[tuple[list[int], list[dict]]]:
    """Each task's first prompt and tools, as the harness builds them in the task's environment."""
    config = RunConfig(log_dir=work / "sessions", state_dir=str(work / "envs" / "state"),
                       base_dir=str(work / "envs" / "bases"))

    async def one(task: Task) -> tuple[list[int], list[dict]]:
        policy = FirstPrompt(tokenizer)
        await run_tasks([task], policy, config=config, parallel=1)
        if policy.prompt is None:
            raise RuntimeError(f"{task.instance_id}: the harness never called the policy (see {work}/sessions)")
        return policy.prompt, policy.tools

    async def all_of_them():
        return [await one(task) for task in tasks]

    return asyncio.run(all_of_them())


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


def first_move(engine: Engine, policy: EnginePolicy, prompt: list[int], tools: list[dict],
               gold: ToolCall) -> dict[str, Any]:
    """The greedy first reply's first call against `gold`, and P(gold tool) teacher-forced."""
    reply = asyncio.run(policy.complete(None, tools, max_tokens=128, prompt_ids=prompt))
    call = reply.tool_calls[0] if reply.tool_calls else None
    head = prompt + engine.tokenizer.encode(NAME_PREFIX)
    [forced] = engine.generate([head], SamplingParams(max_tokens=1, top_logprobs=MAX_TOP_LOGPROBS))
    alternatives = dict(forced.top_logprobs[0])
    token = gold_tool_token(engine.tokenizer, gold.name)
    below = token not in alternatives
    logprob = alternatives.get(token, min(alternatives.values()))
    return {"call": {"name": call.name, "arguments": call.arguments} if call else None,
            "tool": bool(call and call.name == gold.name),
            "exact": bool(call and call.name == gold.name and call.arguments == gold.arguments),
            "p_tool": math.exp(logprob), "p_tool_below": below}


def measure(path: str, quantize: str, prompts, golds: list[ToolCall]) -> dict[str, Any]:
    engine = Engine.from_pretrained(None if path == DEFAULT_MODEL else path, quantize=quantize)
    try:
        policy = EnginePolicy(engine, record_routing=False)
        moves = [first_move(engine, policy, prompt, tools, gold) for (prompt, tools), gold in zip(prompts, golds)]
    finally:
        engine.close()
    n = len(moves)
    return {"tasks": n, "tool": sum(m["tool"] for m in moves), "exact": sum(m["exact"] for m in moves),
            "p_tool": sum(m["p_tool"] for m in moves) / n,
            "first_tools": dict(collections.Counter(m["call"]["name"] if m["call"] else "(no call)" for m in moves)),
            "moves": moves}


def table(results: dict[str, Any]) -> str:
    lines = ["| checkpoint | first tool is the gold one | and its arguments | P(gold tool), mean | greedy first tools |",
             "| --- | --- | --- | --- | --- |"]
    for path, row in results["policies"].items():
        tools = ", ".join(f"{name} {k}" for name, k in sorted(row["first_tools"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {path} | {row['tool']} of {row['tasks']} | {row['exact']} of {row['tasks']} | "
                     f"{row['p_tool']:.3f} | {tools} |")
    gold = ", ".join(f"{name} {k}" for name, k in results["gold_tools"].items())
    return "\n".join(lines) + f"\n\nThe gold scripts' first tools: {gold}.\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", required=True, help="a checkpoint directory or composer-mini (repeat)")
    ap.add_argument("--suite", default="bugfix-heldout")
    ap.add_argument("--tasks", type=int, default=20, help="tasks spread evenly over the suite")
    ap.add_argument("--seen", type=int, default=0,
                    help="pick from the first N tasks of a training run's order (its warm start's demonstrations)")
    ap.add_argument("--seed", type=int, default=0, help="the training run's seed (with --seen)")
    ap.add_argument("--quantize", default="int4", choices=("int4", "none"))
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    tokenizer = Tokenizer.from_dir(ensure_default_model())
    tasks = picked(args.suite, args.tasks, args.seen, args.seed)
    golds = [gold_turns(task)[0][1][0] for task in tasks]
    with tempfile.TemporaryDirectory(prefix="first-call-") as work:
        prompts = first_prompts(tasks, tokenizer, Path(work))
    results: dict[str, Any] = {
        "machine": machine_line(), "suite": args.suite, "seen": args.seen, "quantize": args.quantize,
        "instances": [t.instance_id for t in tasks],
        "gold": [{"name": g.name, "arguments": g.arguments} for g in golds],
        "gold_tools": dict(collections.Counter(g.name for g in golds)),
        "policies": {path: measure(path, args.quantize, prompts, golds) for path in args.policy},
    }
    which = f"the first {args.seen} tasks of a run's order (seed {args.seed})" if args.seen else "the suite"
    meta = (f"{results['machine']}; {len(tasks)} `{args.suite}` tasks spread over {which}; the engine at "
            f"{args.quantize}, greedy, the tool-call constraint on; prompt lengths "
            f"{min(len(p) for p, _ in prompts)}-{max(len(p) for p, _ in prompts)} tokens.")
    name = "first_call" + ("" if args.suite == "bugfix-heldout" else f"-{args.suite}")
    publish(name, f"First moves: {args.suite}", results, table(results), meta, write=not args.no_write)
    print(json.dumps({p: r["first_tools"] for p, r in results["policies"].items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
