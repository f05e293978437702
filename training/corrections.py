"""The person's corrections of the model's edits, as demonstrations.

When a person changes an edit the model proposed before accepting it (editable diff review,
agent/review.py), the session log keeps, on that edit's `tool_call` record, the call that would
have written the person's version from the file the model saw (`data.corrected_call`). That is a
demonstration from a stronger policy (the person) in the harness's own context: the model call's
prompt, token for token as the model read it, then the reply the model should have written, the
same text and calls with the corrected one in its place.

    lines = correction_lines(records, segments, session_line)   # training/data.py writes them
    sample = correction_sample(line, tokenizer)                 # the trainer's Sample

The context comes from the log's token ids (loss mask 0); the corrected reply is rendered with the
tokenizer as the warm start's demonstrations are (training/demos.py `rendered_ids`) and is all the
sample trains on. It is off-policy by construction (no behaviour logprobs: the person wrote it),
so it trains by reward-filtered likelihood with reward 1, the person's own verdict on their text.

Tests: .venv/bin/python -m pytest tests/training/test_corrections.py
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from training.buffer import Sample
from training.trajectories import Segment

REWARD = 1.0
OFF_POLICY = "the person's correction of the model's edit"


def call_fields(entry: dict[str, Any]) -> dict[str, Any]:
    """{name, arguments} of a logged call in OpenAI form (arguments may be a JSON string)."""
    function = entry.get("function") or entry
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        arguments = json.loads(arguments)
    return {"name": function["name"], "arguments": arguments}


def correction_lines(records: list[dict[str, Any]], segments: list[Segment], session_line: dict[str, Any],
                     usable: Callable[[Segment], bool] = lambda segment: True) -> Iterator[dict[str, Any]]:
    """A dataset line per model call with corrected edits, in a segment that is `usable`: the
    call's context ids and the corrected reply (`correction`: its text and calls, every corrected
    one in place), beside `session_line`'s fields."""
    replies = {r.get("call_id"): r for r in records if r.get("type") == "model_call"}
    found = {c["call_id"]: (i, c) for i, seg in enumerate(segments) for c in seg.calls}
    fixes: dict[str, dict[str, dict[str, Any]]] = {}
    for record in records:
        fix = (record.get("data") or {}).get("corrected_call") if record.get("type") == "tool_call" else None
        if isinstance(fix, dict):
            fixes.setdefault(record.get("model_call_id"), {})[record["call_id"]] = fix
    for made_by, fixed in fixes.items():
        if made_by not in found or made_by not in replies or not usable(segments[found[made_by][0]]):
            continue
        index, entry = found[made_by]
        reply = replies[made_by]
        calls = [fixed.get(c.get("id")) or call_fields(c) for c in reply.get("tool_calls") or []]
        yield {**session_line, "id": f"{session_line['session_id']}:{index}:correction:{made_by}",
               "start_reason": "correction", "token_ids": segments[index].token_ids[:entry["completion_start"]],
               "correction": {"text": reply.get("text") or "", "tool_calls": calls},
               "reward": REWARD, "reward_source": "correction", "off_policy": OFF_POLICY}


def correction_sample(line: dict[str, Any], tokenizer: Any) -> Sample:
    """The trainer's sample of a correction line: its context, then the corrected reply rendered
    as the model writes replies, which alone carries loss."""
    from model.toolcalls import ToolCall
    from training.demos import rendered_ids

    fix = line["correction"]
    reply = rendered_ids(tokenizer, fix["text"], [ToolCall(c["name"], c["arguments"]) for c in fix["tool_calls"]])
    context = list(line["token_ids"])
    return Sample(tokens=context + reply, mask=[False] * len(context) + [True] * len(reply),
                  behaviour_logprobs=[math.nan] * (len(context) + len(reply)), reward=REWARD,
                  weight_version=-1, off_policy=True, stats={"correction": 1})
