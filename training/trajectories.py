"""One session log's model calls -> token-exact trajectory segments (what training/data.py
writes and the RL trainer reads).

A segment is one token stream the engine extended call by call: each call's prompt is the
previous call's prompt and completion plus new ids (schema version 2: `parent`, `prefix_len`,
`prompt_token_ids`). A call whose prompt does not extend its parent exactly (`prefix_break`, a
shorter prefix, a text-only call, a parent that is not the segment's last call) starts a new
segment: its shared prefix is carried over as context (loss mask 0) and only its own calls train.

    segments, dropped = session_segments(read_session(path))
    segment.token_ids, segment.loss_mask, segment.logprobs, segment.routed_experts, segment.calls

Per token: `loss_mask` is 1 for a completion token the model sampled, under exactly the logged
context, with its behaviour logprob; 0 for prompt, tool-output and harness tokens, for tokens the
tool-call constraint forced (their behaviour probability is the constraint's, not the model's),
for tokens without a logprob, and for a redacting call's tokens after the model saw the secret
(the context it sampled them in is not in the log). `logprobs` holds the behaviour logprob of
every completion token (null elsewhere), in the sampling convention (model/sampling.py);
`routed_experts[p]` the experts position p was routed to when the engine fed it (null where the
log has none: the trainer's router decides there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Segment:
    start_reason: str | None
    """Why this segment begins where it does: None (a session's first prompt) or the first call's
    prefix break (context_shortened, redaction, rebuilt_from_text, text_only, ...)."""
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    routed_experts: list[Any] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    text_only: bool = False
    missing_logprobs: bool = False

    def context(self, length: int, reason: str | None) -> Segment:
        """A new segment that starts with this one's first `length` tokens as context only."""
        return Segment(reason, self.token_ids[:length], [0] * length, [None] * length,
                       list(self.routed_experts[:length]))

    @property
    def trainable(self) -> int:
        return sum(self.loss_mask)


def _completion_mask(record: dict[str, Any], logprobs: list[Any], forced: list[int]) -> tuple[list[int], str | None]:
    n = len(record.get("completion_token_ids") or [])
    if record.get("text_only"):
        return [0] * n, "text_only"
    mask = [int(lp is not None and not f) for lp, f in zip(logprobs, forced)]
    spans = record.get("redactions") or {}
    if spans.get("prompt"):
        return [0] * n, "redaction"
    if spans.get("completion"):
        first = min(a for a, _ in spans["completion"])
        return mask[:first] + [0] * (n - first), "redaction"
    return mask, None


def _extend(segment: Segment, record: dict[str, Any]) -> dict[str, Any]:
    """Appends `record`'s new prompt ids and completion to `segment`; returns the call's entry."""
    prompt = record.get("prompt_token_ids") or []
    completion = record.get("completion_token_ids") or []
    prompt_start = len(segment.token_ids)
    segment.token_ids += prompt
    segment.loss_mask += [0] * len(prompt)
    segment.logprobs += [None] * len(prompt)
    logprobs = record.get("logprobs")
    if logprobs is None:
        segment.missing_logprobs = segment.missing_logprobs or bool(completion)
        logprobs = [None] * len(completion)
    forced = record.get("forced") or [0] * len(completion)
    mask, masked = _completion_mask(record, logprobs, forced)
    completion_start = len(segment.token_ids)
    segment.token_ids += completion
    segment.loss_mask += mask
    segment.logprobs += logprobs
    segment.routed_experts += [None] * (len(segment.token_ids) - len(segment.routed_experts))
    rows = record.get("routed_experts")
    if rows is not None:
        start = record.get("routed_experts_start", record.get("prefix_len") or 0)
        for i, row in enumerate(rows[: max(0, len(segment.token_ids) - start)]):
            segment.routed_experts[start + i] = row
    segment.text_only = segment.text_only or bool(record.get("text_only"))
    entry = {
        "call_id": record.get("call_id"), "prompt_start": prompt_start, "completion_start": completion_start,
        "end": len(segment.token_ids), "weight_version": record.get("weight_version"),
        "sampler": record.get("sampler"), "finish_reason": record.get("finish_reason"),
        "forced": sum(forced), "masked": masked,
    }
    segment.calls.append(entry)
    return entry


NO_IDS = "no token ids"
"""Why a call is left out of the segments when the log holds none of its ids (a chat API's)."""


def session_segments(records: list[dict[str, Any]]) -> tuple[list[Segment], list[dict[str, str]]]:
    """The trajectory segments of one session's records, and the calls that could not be placed
    ({"call_id", "reason", "detail"})."""
    segments: list[Segment] = []
    ends: dict[str, tuple[int, int]] = {}  # call id -> (segment, its length after the call)
    dropped: list[dict[str, str]] = []
    for record in (r for r in records if r.get("type") == "model_call"):
        call_id = str(record.get("call_id", ""))
        if record.get("version", 1) < 2:
            dropped.append({"call_id": call_id, "reason": "schema version 1", "detail": "whole prompts, ids not redacted"})
            continue
        if not (record.get("prompt_token_ids") or record.get("completion_token_ids")):
            dropped.append({"call_id": call_id, "reason": NO_IDS, "detail": ""})
            continue
        parent, prefix = record.get("parent"), record.get("prefix_len") or 0
        break_ = (record.get("prefix_break") or {}).get("reason")
        if parent is None:
            segments.append(Segment(break_ or ("text_only" if record.get("text_only") else None)))
        elif parent not in ends:
            dropped.append({"call_id": call_id, "reason": "parent call not in the log", "detail": str(parent)})
            continue
        else:
            index, length = ends[parent]
            last = segments[index]
            exact = (break_ is None and prefix == length and index == len(segments) - 1
                     and length == len(last.token_ids) and not record.get("text_only") and not last.text_only)
            if not exact:
                if prefix > length:
                    dropped.append({"call_id": call_id, "reason": "prefix beyond the parent's ids",
                                    "detail": f"prefix_len {prefix}, parent {length} ids"})
                    continue
                segments.append(last.context(prefix, break_ or "prefix_mismatch"))
        _extend(segments[-1], record)
        ends[call_id] = (len(segments) - 1, len(segments[-1].token_ids))
    return segments, dropped
