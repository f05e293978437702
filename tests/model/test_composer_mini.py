"""The engine on the real composer-mini: our forward pass against transformers' Mixtral on the
same checkpoint, speculative against plain greedy decoding, streaming, constrained tool calls
from the real (untrained for tools) model, and the training forward with routing replay
reproducing a sampled rollout's logprobs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from model.engine import Engine
from model.sampling import SamplingParams
from model.toolcalls import parse_tool_calls
from model.transformer import completion_logprobs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.workloads import READ_FILE_TOOL, chat_prompt, edit_rewrite_prompt

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def engine(composer_mini_dir) -> Engine:
    engine = Engine.from_pretrained(composer_mini_dir, max_batch=4)
    yield engine
    engine.close()


def test_forward_matches_transformers_mixtral(engine, composer_mini_dir):
    import transformers

    reference = transformers.MixtralForCausalLM.from_pretrained(composer_mini_dir, dtype=torch.float32).eval()
    ids = torch.tensor([engine.tokenizer.encode_chat(chat_prompt())])
    with torch.no_grad():
        ours = engine.model(ids).logits
        theirs = reference(ids).logits
    del reference
    torch.testing.assert_close(ours, theirs, atol=2e-4, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_speculative_greedy_equals_plain_greedy(engine):
    tok = engine.tokenizer
    prompts = [tok.encode_chat(chat_prompt()), edit_rewrite_prompt(tok)]
    plain = engine.generate(prompts, SamplingParams(max_tokens=48, speculative=False))
    spec = engine.generate(prompts, SamplingParams(max_tokens=48))
    assert [o.token_ids for o in spec] == [o.token_ids for o in plain]
    assert sum(o.num_accepted_draft_tokens for o in spec) > 0


async def test_streamed_text_equals_generated_text(engine):
    prompt = engine.tokenizer.encode_chat(chat_prompt())
    params = SamplingParams(max_tokens=40, stop=["\n\n"])
    [done] = engine.generate([prompt], params)
    events = [e async for e in engine.stream(prompt, params)]
    assert "".join(e.text for e in events) == done.text and done.text.strip()


def test_constrained_tool_call_from_the_real_model(engine):
    tok = engine.tokenizer
    messages = [{"role": "user", "content": "Show me what is in setup.py"}]
    prompt = tok.encode_chat(messages, tools=[READ_FILE_TOOL])
    for max_tokens in (200, 64):  # ample, and a budget that forces the call to close early
        params = SamplingParams(max_tokens=max_tokens, constraint=engine.tool_call_constraint([READ_FILE_TOOL], "required"))
        [out] = engine.generate([prompt], params)
        parsed = parse_tool_calls(out.text)
        assert not [e for e in parsed.errors], (out.text, parsed.errors)
        assert [c.name for c in parsed.tool_calls] == ["read_file"], out.text


def test_training_forward_with_replay_reproduces_rollout_logprobs(engine):
    """fp32, temperature 1, top_p 1: within 1e-4 with the rollout's routing. composer-mini's experts
    are still identical copies, so routing barely matters here; the figures without replay (and
    the share of (position, layer) routes the training forward picks differently) are printed."""
    prompt = engine.tokenizer.encode_chat(chat_prompt())
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=1.0, seed=0, return_routing=True)
    [out] = engine.generate([prompt], params)
    rollout = torch.tensor(out.logprobs)
    fed = torch.tensor([prompt + out.token_ids[:-1]])
    with torch.no_grad():
        replayed = completion_logprobs(engine.model, prompt, out.token_ids, out.routed_experts)
        plain = completion_logprobs(engine.model, prompt, out.token_ids)
        own = engine.model(fed, return_routing=True).routing_BSLk[0]
    differ = (own.sort(-1).values != out.routed_experts.long().sort(-1).values).any(-1).float().mean()
    replay_err, plain_err = float((replayed - rollout).abs().max()), float((plain - rollout).abs().max())
    print(f"\ncomposer-mini fp32, {len(out.token_ids)} sampled tokens: max |logprob difference| with replay "
          f"{replay_err:.2e}, without {plain_err:.2e}; routes chosen differently {float(differ):.1%}")
    assert replay_err < 1e-4
