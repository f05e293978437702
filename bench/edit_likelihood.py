"""How likely a checkpoint is to write the gold edit, teacher-forced: at the harness's real prompt
before the gold script's edit (bench/gold_moves.py's scenes), the trainer's logprobs
(model.transformer.completion_logprobs, full precision, T = 1: the sampling distribution RL
explores) of the gold edit turn's tokens, summed over three spans:

  old_string   the quoted line(s), copied from the file the policy just read
  new_string   the fixed line(s)
  format       everything else: the tool call's opening, name, path, closing, end of turn

and two parts of old_string: its first token (which line to quote starts there) and its tokens
after the first word, where the line is chosen and what is left is copying it. The whole turn's
probability is the chance one sample writes exactly the gold edit.

Where the fix departs: the first new_string token where the model's likeliest token is not the
gold one (before it, the gold line is what the model would write: mostly the copied old line),
the gold token's rank there (0 would be the likeliest; 1 the runner-up), and whether that position
is the one of the value where the model is least sure (the smallest gap between its first and
second choice). A fix ranked 1 at the least sure position is one search step from greedy.

    python bench/edit_likelihood.py --policy composer-mini --policy runs/cpu/final [--tasks 16] [--no-write]

Writes bench/results/edit_likelihood.json and its block in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.gold_moves import Scene, picked, scenes  # noqa: E402
from bench.machine import machine_line  # noqa: E402
from bench.report import publish  # noqa: E402
from model.hf import load_model  # noqa: E402
from model.home import DEFAULT_MODEL, ensure_default_model  # noqa: E402
from model.tokenizer import Tokenizer  # noqa: E402
from model.transformer import completion_distributions  # noqa: E402
from training.demos import rendered_ids  # noqa: E402

OLD, NEW = '"old_string": "', '"new_string": "'


def spans(tokenizer, ids: list[int]) -> tuple[list[int], list[int]]:
    """The positions of the tokens that start inside the (first) edit's old_string value and
    inside its new_string value (a token that starts at a value's closing quote counts in)."""
    starts = [len(tokenizer.decode(ids[:k])) for k in range(len(ids))]
    text = tokenizer.decode(ids)
    old_at, new_key = text.index(OLD) + len(OLD), text.index(NEW)
    new_at, new_end = new_key + len(NEW), text.rindex('"}}')
    return ([k for k, at in enumerate(starts) if old_at <= at < new_key],
            [k for k, at in enumerate(starts) if new_at <= at < new_end])


def likelihood(model, tokenizer, scene: Scene) -> dict[str, Any]:
    content, calls = scene.turns[scene.edit_turn]
    ids = rendered_ids(tokenizer, content, calls)
    with torch.no_grad():
        logprobs_CV = completion_distributions(model, scene.prompts[scene.edit_turn], ids)
    lp = logprobs_CV.gather(-1, torch.tensor(ids).unsqueeze(-1)).squeeze(-1).tolist()
    old, new = spans(tokenizer, ids)
    word = next(i for i, k in enumerate(old) if tokenizer.decode([ids[k]]).strip())
    copied = old[word + 1:]
    row = {"whole": sum(lp), "old_string": sum(lp[k] for k in old), "new_string": sum(lp[k] for k in new),
           "old_first": lp[old[0]], "old_copied": sum(lp[k] for k in copied), "old_tokens": len(old),
           "copied_tokens": len(copied), "new_tokens": len(new),
           "old_token_nats": [[tokenizer.decode([ids[k]]), round(-lp[k], 3)] for k in old]}
    row["format"] = row["whole"] - row["old_string"] - row["new_string"]
    return row | departure(logprobs_CV[new], [ids[k] for k in new])


def departure(logprobs_NV: torch.Tensor, gold: list[int]) -> dict[str, Any]:
    """Where the gold new_string first departs from the model's likeliest token: that token's
    index in the value, the gold token's rank there, and whether it is the value's least sure
    position (smallest gap between the first and second choice). None: greedy writes it all."""
    best_N = logprobs_NV.argmax(-1).tolist()
    at = next((i for i, (b, g) in enumerate(zip(best_N, gold, strict=True)) if b != g), None)
    if at is None:
        return {"departure": None, "departure_rank": None, "departure_least_sure": None}
    top2_N2 = logprobs_NV.topk(2, -1).values
    gaps_N = top2_N2[:, 0] - top2_N2[:, 1]
    rank = int((logprobs_NV[at] > logprobs_NV[at, gold[at]]).sum())
    return {"departure": at, "departure_rank": rank, "departure_least_sure": int(gaps_N.argmin()) == at}


def measure(path: str, tokenizer, cases: list[Scene]) -> dict[str, Any]:
    model = load_model(ensure_default_model() if path == DEFAULT_MODEL else Path(path)).float().eval()
    rows = []
    for i, scene in enumerate(cases, 1):
        rows.append(likelihood(model, tokenizer, scene))
        print(f"{path}: {i}/{len(cases)} {scene.task.instance_id}", file=sys.stderr, flush=True)
    mean = {key: statistics.fmean(r[key] for r in rows) for key in ("whole", "old_string", "new_string", "format", "old_first")}
    return {**mean, "p_whole_median": math.exp(statistics.median(r["whole"] for r in rows)),
            "old_nats_per_token": per_token(rows, "old_string", "old_tokens"),
            "copied_nats_per_token": per_token(rows, "old_copied", "copied_tokens"),
            "greedy_fixes": sum(r["departure"] is None for r in rows),
            "runner_up": sum(r["departure_rank"] == 1 for r in rows),
            "top_5": sum(r["departure_rank"] is not None and r["departure_rank"] < 5 for r in rows),
            "least_sure": sum(bool(r["departure_least_sure"]) for r in rows), "rows": rows}


def per_token(rows: list[dict[str, Any]], nats: str, tokens: str) -> float:
    """Nats per token of a span over all rows; NaN when the span is empty in every row (every
    quote a single word has no copied tokens)."""
    count = sum(r[tokens] for r in rows)
    return -sum(r[nats] for r in rows) / count if count else math.nan


def table(results: dict[str, Any]) -> str:
    lines = ["| checkpoint | whole edit turn | old_string | new_string | format | first old_string token "
             "| old_string per token | after its first word, per token | P(the gold edit), median "
             "| new_string needs no departure | the fix's token at its departure: the runner-up | in the top 5 "
             "| departure at the least sure position |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path, r in results["policies"].items():
        lines.append(f"| {path} | {-r['whole']:.1f} | {-r['old_string']:.1f} | {-r['new_string']:.1f} | "
                     f"{-r['format']:.2f} | {-r['old_first']:.2f} | {r['old_nats_per_token']:.2f} | "
                     f"{r['copied_nats_per_token']:.2f} | "
                     f"{r['p_whole_median']:.1e} | {r['greedy_fixes']} | {r['runner_up']} | {r['top_5']} | "
                     f"{r['least_sure']} |")
    return "\n".join(lines) + ("\n\nNats (negative logprobs) summed over each span, mean over the tasks; the last "
                               "four columns count tasks.\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", action="append", required=True, help="a checkpoint directory or composer-mini (repeat)")
    ap.add_argument("--suite", default="bugfix-heldout")
    ap.add_argument("--tasks", type=int, default=16, help="tasks spread evenly over the suite")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    tokenizer = Tokenizer.from_dir(ensure_default_model())
    tasks = picked(args.suite, args.tasks, 0, 0)
    with tempfile.TemporaryDirectory(prefix="edit-likelihood-") as work:
        cases = scenes(tasks, tokenizer, Path(work))
    results = {"machine": machine_line(), "suite": args.suite, "instances": [t.instance_id for t in tasks],
               "policies": {path: measure(path, tokenizer, cases) for path in args.policy}}
    meta = (f"{results['machine']}; {len(tasks)} `{args.suite}` tasks spread over the suite (bench/gold_moves.py's); "
            "full precision, T = 1.")
    publish("edit_likelihood", f"Edit likelihood: {args.suite}", results, table(results), meta, write=not args.no_write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
