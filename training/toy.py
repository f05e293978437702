"""A task family small enough to learn in seconds, for the trainer's tests, the `debug` preset and
the resume-after-kill test (`--rollout.tasks toy`): the request is "Call the edit tool.", four
tools are offered, and the reward is 1 when the reply's first tool call is `edit`.

It runs on the tiny random model of `ModelConfig.debug()` with a byte-level tokenizer (plus
single tokens for the tool-call tags), through the engine, the chat template and the tool-call
constraint the harness uses ("required" mode: the reply opens with a call). A random model puts
~1/260 of its mass on each byte, so nearly every constrained choice would be forced (masked); a
warm start on `demonstrations()` (a call of each tool for the request "Call a tool.", reward 1)
first teaches the format, after which the tool's first letter is a real choice, about 1/4 each,
and RL has something to learn.

    tokenizer = byte_tokenizer()
    engine = Engine(Transformer(ModelConfig.debug(vocab_size=tokenizer.vocab_size)), tokenizer)
    group = toy_rollout(engine, job=0, group_size=4, version=0, config=cfg.rollout, seed=0)
"""

from __future__ import annotations

import math

import tokenizers
from tokenizers import AddedToken, decoders, models, pre_tokenizers

from model.sampling import SamplingParams
from model.tokenizer import Tokenizer, _byte_decoder
from model.toolcalls import CLOSE_TAG, OPEN_TAG, parse_tool_calls
from training.buffer import Group, Sample
from training.config import RolloutConfig

TOOLS = ("read", "edit", "test", "done")
TARGET = "edit"
"""The one right call."""
SYSTEM = "Answer with one tool call."
SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def byte_tokenizer() -> Tokenizer:
    """Byte-level BPE without merges (one token per byte), the ChatML specials, and the two
    tool-call tags as single ordinary tokens: 261 ids."""
    vocab = {ch: byte for ch, byte in _byte_decoder().items()}
    backend = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(list(SPECIALS))
    backend.add_tokens([AddedToken(OPEN_TAG, special=False), AddedToken(CLOSE_TAG, special=False)])
    return Tokenizer(backend, pad_token=None, unk_token="<|endoftext|>")


def tool_schemas() -> list[dict]:
    return [
        {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
        for name in TOOLS
    ]


def _prompt(tokenizer: Tokenizer, request: str) -> list[int]:
    # The tools go to the constraint, not into the prompt: the tiny model would not read them,
    # and a short prompt keeps the test in seconds.
    return tokenizer.encode_chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}])


def demonstrations(tokenizer: Tokenizer) -> list[Sample]:
    """One call of each tool for "Call a tool." (each solves it: reward 1), as another model's
    logs would arrive: no behaviour logprobs, so off-policy (training/loss.py choice 7)."""
    prompt = _prompt(tokenizer, "Call a tool.")
    out = []
    for name in TOOLS:
        completion = tokenizer.encode(f'{OPEN_TAG}{{"name":"{name}","arguments":{{}}}}{CLOSE_TAG}<|im_end|>')
        out.append(Sample(
            tokens=prompt + completion, mask=[False] * len(prompt) + [True] * len(completion),
            behaviour_logprobs=[math.nan] * (len(prompt) + len(completion)), reward=1.0,
            weight_version=-1, off_policy=True,
        ))
    return out


def toy_rollout(engine, job: int, group_size: int, version: int, config: RolloutConfig, seed: int) -> Group:
    """`group_size` samples of one job; every sampler is seeded by (seed, job, index), tokens
    the constraint forced carry no loss."""
    tools = tool_schemas()
    prompt = _prompt(engine.tokenizer, f"Call the {TARGET} tool.")
    params = [
        SamplingParams(
            max_tokens=config.max_tokens, temperature=config.temperature, top_p=config.top_p,
            seed=(seed * 1_000_003 + job) * 64 + i, constraint=engine.tool_call_constraint(tools, mode="required"),
        )
        for i in range(group_size)
    ]
    samples = []
    for completion in engine.generate([prompt] * group_size, params):
        calls = parse_tool_calls(completion.text, tools).tool_calls
        forced = getattr(completion, "forced", None) or [False] * len(completion.token_ids)
        samples.append(Sample(
            tokens=prompt + completion.token_ids,
            mask=[False] * len(prompt) + [not f for f in forced],
            behaviour_logprobs=[math.nan] * len(prompt) + list(completion.logprobs),
            reward=1.0 if calls and calls[0].name == TARGET else 0.0,
            weight_version=version, temperature=config.temperature or 1.0,
            stats={"turns": 1, "tool_calls": len(calls), "parallel_calls": 0},
        ))
    return Group(job, version, samples)
