"""The RL objective (training/loss.py): every term against values computed by hand."""

from __future__ import annotations

import math

import pytest
import torch

from model.sampling import Sampler, SamplingParams
from training.config import LossConfig
from training.loss import LossCounts, LossInputs, group_advantages, policy_loss, selected_logprobs

NAN = float("nan")

pytestmark = pytest.mark.usefixtures("one_thread")


def inputs(logp, *, old=None, mu=None, adv=None, mask=None, sft=None, ref=None):
    lp = torch.tensor(logp, dtype=torch.float64, requires_grad=True)
    n = len(logp)
    t = lambda v, default: torch.tensor(v if v is not None else default, dtype=torch.float64)  # noqa: E731
    return lp, LossInputs(
        logprobs=lp,
        old_logprobs=t(old, logp),
        behaviour_logprobs=t(mu, old if old is not None else logp),
        advantages=t(adv, [0.0] * n),
        mask=torch.tensor(mask if mask is not None else [True] * n),
        sft_mask=torch.tensor(sft if sft is not None else [False] * n),
        ref_logprobs=None if ref is None else t(ref, ref),
    )


def run(lp, inp, config=None, policy_tokens=None, sft_tokens=0):
    counts = LossCounts(policy_tokens if policy_tokens is not None else int(inp.mask.sum()), sft_tokens)
    out = policy_loss(inp, config or LossConfig(), counts)
    out.loss.backward()
    return out, lp.grad.tolist()


def test_group_advantages_subtract_the_group_mean_without_dividing_by_std():
    rewards = [1, 0, 0, 1, 1, 1, NAN, 0.5, 0, 0.7]
    groups = list("aaaabbcccd")
    adv = group_advantages(rewards, groups)
    assert adv[:4] == [0.5, -0.5, -0.5, 0.5]  # std would have made these +-1
    assert adv[4:6] == [0.0, 0.0]
    assert math.isnan(adv[6]) and adv[7:9] == [0.25, -0.25]  # the masked sample is not in the mean
    assert adv[9] == 0.0  # a group of one has no baseline
    with pytest.raises(ValueError, match="3 rewards for 2 group ids"):
        group_advantages([1, 2, 3], ["a", "b"])


def test_on_policy_term_is_minus_advantage_times_ratio_over_the_token_count():
    lp, inp = inputs([-1.0, -2.0, -0.5], adv=[1.0, -1.0, 2.0])
    out, grad = run(lp, inp)
    assert out.loss.item() == pytest.approx(-2 / 3)
    assert grad == pytest.approx([-1 / 3, 1 / 3, -2 / 3])  # d(-r A)/dlogp = -r A at r = 1


def test_asymmetric_clip_zeroes_the_gradient_only_where_the_min_takes_the_clipped_side():
    old = [0.0] * 4
    logp = [math.log(1.5), math.log(1.5), math.log(0.5), math.log(0.5)]
    lp, inp = inputs(logp, old=old, mu=old, adv=[1.0, -1.0, 1.0, -1.0])
    out, grad = run(lp, inp)
    # min(rA, clip(r, 0.8, 1.28) A) = [1.28, -1.5, 0.5, -0.8]; the loss is minus their mean.
    assert out.loss.item() == pytest.approx(-(1.28 - 1.5 + 0.5 - 0.8) / 4)
    assert grad == pytest.approx([0.0, 1.5 / 4, -0.5 / 4, 0.0])
    assert out.metrics["clip_high"].item() == 1 and out.metrics["clip_low"].item() == 1
    # The ceiling is higher than the floor: r = 1.25 with A > 0 is not clipped, r = 0.75 with A < 0 is.
    lp, inp = inputs([math.log(1.25), math.log(0.75)], old=[0.0, 0.0], mu=[0.0, 0.0], adv=[1.0, -1.0])
    out, grad = run(lp, inp)
    assert grad == pytest.approx([-1.25 / 2, 0.0])


def test_truncated_importance_weight_against_the_behaviour_logprobs():
    logp = [math.log(0.5), math.log(0.5)]
    lp, inp = inputs(logp, mu=[math.log(0.1), math.log(0.4)], adv=[1.0, 1.0])
    out, grad = run(lp, inp)
    # pi/mu = [5, 1.25]; capped at 2 -> w = [2, 1.25]
    assert out.loss.item() == pytest.approx(-(2 + 1.25) / 2)
    assert grad == pytest.approx([-1.0, -0.625])
    assert out.metrics["is_truncated"].item() == 1
    assert out.metrics["is_weight"].item() == pytest.approx(3.25)
    assert out.metrics["mismatch_abs"].item() == pytest.approx(math.log(5) + math.log(1.25))
    k3 = sum(1 / r + math.log(r) - 1 for r in (5, 1.25))
    assert out.metrics["mismatch_kl"].item() == pytest.approx(k3)
    # The weight is a constant: without the cap the gradient would be -5/2 on the first token.
    lp, inp = inputs(logp, mu=[math.log(0.1), math.log(0.4)], adv=[1.0, 1.0])
    _, grad = run(lp, inp, LossConfig(tis_cap=100.0))
    assert grad == pytest.approx([-2.5, -0.625])


def test_kl_to_the_reference_is_the_k3_estimator():
    lp, inp = inputs([math.log(0.5)], ref=[math.log(0.25)])
    out, grad = run(lp, inp, LossConfig(kl_coef=0.1))
    kl = 0.5 - math.log(0.5) - 1  # exp(d) - d - 1 with d = log(0.25 / 0.5)
    assert out.loss.item() == pytest.approx(0.1 * kl)
    assert grad == pytest.approx([0.1 * (1 - 0.5)])
    assert out.metrics["kl_ref"].item() == pytest.approx(kl)
    lp, inp = inputs([math.log(0.5)])
    with pytest.raises(ValueError, match="no reference logprobs"):
        policy_loss(inp, LossConfig(kl_coef=0.1), LossCounts(1, 0))


def test_off_policy_tokens_get_likelihood_normalised_by_their_own_count_and_no_ratio():
    # Token 0 is on-policy; tokens 1 and 2 come from another model's log (no mu: NaN).
    lp, inp = inputs([-1.0, -1.0, -3.0], mu=[-1.0, NAN, NAN], adv=[1.0, 5.0, 5.0],
                     mask=[True, False, False], sft=[False, True, True])
    out, grad = run(lp, inp, LossConfig(sft_coef=0.5), sft_tokens=2)
    assert out.loss.item() == pytest.approx(-1.0 + 0.5 * (1 + 3) / 2)
    # The off-policy tokens' advantage (5) is ignored: their gradient is the likelihood's alone.
    assert grad == pytest.approx([-1.0, -0.25, -0.25])
    assert out.metrics["sft_loss"].item() == pytest.approx(4.0)


def test_an_on_policy_token_without_behaviour_logprob_or_in_both_masks_is_refused():
    _, inp = inputs([-1.0, -1.0], mu=[-1.0, NAN])
    with pytest.raises(ValueError, match="mark its sample off-policy"):
        policy_loss(inp, LossConfig(), LossCounts(2, 0))
    _, inp = inputs([-1.0], sft=[True])
    with pytest.raises(ValueError, match="both"):
        policy_loss(inp, LossConfig(), LossCounts(1, 1))


def test_token_level_normalisation_accumulates_to_the_whole_batch_gradient():
    logp, adv = [-1.0, -2.0, -0.5], [1.0, -1.0, 2.0]
    lp, whole = inputs(logp, adv=adv)
    _, grad_whole = run(lp, whole)
    grads = []
    for part in ([0, 1], [2]):
        lp, inp = inputs([logp[i] for i in part], adv=[adv[i] for i in part])
        _, g = run(lp, inp, policy_tokens=3)
        grads += g
    assert grads == pytest.approx(grad_whole)
    # Per-sequence means would weigh the lone token of the second part 3/2 times as much.
    assert grad_whole[2] == pytest.approx(-2 / 3)


def test_masked_tokens_carry_no_gradient_but_the_loss_stays_connected():
    lp, inp = inputs([-1.0, -2.0], adv=[1.0, 1.0], mask=[False, False])
    out, grad = run(lp, inp, policy_tokens=0)
    assert out.loss.item() == 0.0 and grad == [0.0, 0.0]


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_selected_logprobs_are_what_the_sampler_records(temperature):
    torch.manual_seed(0)
    logits = torch.randn(5, 11)
    sampler = Sampler(SamplingParams(temperature=temperature, seed=0))
    choices = [sampler.choose(logits[t], tokens_left=10) for t in range(5)]
    got = selected_logprobs(logits, torch.tensor([c.token for c in choices]), temperature)
    assert got.tolist() == pytest.approx([c.logprob for c in choices], abs=1e-6)
