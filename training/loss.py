"""The RL objective: one loss, written as pure functions over packed tokens, every choice stated.

    adv_N = group_advantages(rewards_N, groups)                      # Dr. GRPO baseline, no std
    logp_T = token_logprobs(model, ids_BS, targets_BS, temperature, routing_BSLk)  # with grad
    out = policy_loss(LossInputs(logp_T, old_T, mu_T, adv_T, mask_T, sft_T), LossConfig(), counts)
    out.loss.backward(); out.metrics["clip_high"], ...

Legend: N samples, T packed tokens (every row of a micro-batch flattened), B rows, S positions,
V vocab, L layers, k experts per token. pi = the policy being trained, pi_old = the trainer's
policy when the batch's update began (detached), mu = the behaviour policy: the logprobs the
inference engine recorded when it sampled the token (temperature-scaled log_softmax before
top-p and the tool-call constraint; model/sampling.py states that convention and
`token_logprobs` computes the same quantity), pi_ref = an optional frozen reference.

The choices, each with its reason (../shared/reference/anchors-rl-swe.md, section 4):

1. **Group-relative advantages without std normalisation** (Dr. GRPO): A_i = R_i - mean_g(R)
   over the samples of the same task (group g). Dividing by the group's std (GRPO) up-weights
   groups whose rewards barely differ, i.e. tasks that are nearly all solved or all failed,
   and biases towards them; Dr. GRPO, DeepSWE and prime-rl drop it. A sample whose reward is
   masked (an infrastructure failure: NaN) takes no part in its group's mean and gets no
   advantage; a group of one has no baseline and gets A = 0 (it teaches nothing on-policy).
2. **Token-level normalisation** (DAPO `token-mean`): the policy term is the sum over every
   policy token of the batch divided by the number of policy tokens in the whole batch (all
   micro-batches and ranks: `LossCounts`), not a mean of per-sequence means. Every token weighs
   the same, so a long failing trajectory is not diluted (GRPO's per-sequence 1/|o| favours
   long wrong answers), and gradient accumulation gives the same gradient as one big batch.
3. **Asymmetric clipping** (DAPO clip-higher): r = pi/pi_old is clipped to
   [1 - eps_low, 1 + eps_high] with eps_high > eps_low (0.2 / 0.28), PPO's pessimistic min.
   The higher ceiling lets unlikely tokens with positive advantage grow, against entropy
   collapse; the floor stays conservative.
4. **Truncated importance sampling** (TIS) against mu: each token's term is weighted by
   w = min(pi_old / mu, C), detached. The engine's numbers differ from the trainer's (int4
   weights, another kernel order, a stale weight version in asynchronous runs); the weight
   corrects the sampling distribution, and the cap C bounds its variance. The ratio r stays
   centred on pi_old (decoupled PPO: the trust region is around the policy being updated, the
   correction around the one that sampled). Tokens without a recorded mu never get here (7.).
5. **Routing replay** (R3) for the MoE: `token_logprobs` runs the forward with the experts the
   engine routed each position to (`routing_BSLk`), so pi and mu are ratios of the same
   sub-network; the gates are recomputed from the router's logits over the given experts, so
   the router still learns. Without it ~10% of routes flip between engine and trainer and the
   ratio measures routing noise instead of the policy's change.
6. **Optional KL to a reference** (k3 estimator, `kl_coef`; default 0 as DAPO, DeepSWE and TRL):
   kl_t = exp(ref - logp) - (ref - logp) - 1, unbiased and non-negative, added per policy token
   under the same token normalisation. The reference is the policy the RL phase starts from (the
   warm start's result, kept beside the checkpoints: training/rl.py `keep_reference`), not the
   pretrained model, which after a warm start is the policy that made no tool call.
7. **Off-policy data: reward-filtered likelihood, never the ratio.** A sample whose behaviour
   policy is unknown or not comparable (a log of another model, an endpoint that returned no
   logprobs, a version older than `max_policy_age`) has no mu, so neither r nor w exists for
   it. Such samples do not enter the policy term at all: those whose reward passes a threshold
   contribute a supervised term -logp per token (`sft_mask`), scaled by `sft_coef` and
   normalised by its own token count (prime-rl normalises each loss component by its own
   count); the rest are dropped. The warm start is this term alone.
8. **Masks.** Only tokens the policy sampled carry loss: prompt tokens, tool outputs, harness
   messages and tokens forced by the tool-call constraint (its allowed set held one token, or
   the sampler's choice was replaced: the policy did not choose them) have mask 0.

Metrics (means over policy tokens): clip fractions low/high, the TIS weight and how often it was
truncated, |log pi_old - log mu| and the k3 mismatch KL between them, the reference KL.

Tests: .venv/bin/python -m pytest tests/training/test_loss.py
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from training.config import LossConfig


@dataclass
class LossInputs:
    """One micro-batch, every field (T,) over the same packed tokens."""

    logprobs: torch.Tensor
    """log pi(token), with gradient."""
    old_logprobs: torch.Tensor
    """log pi_old(token), detached (equal to logprobs.detach() when a batch is one update)."""
    behaviour_logprobs: torch.Tensor
    """log mu(token) as the engine recorded it; any value where `mask` is 0 (NaN is fine)."""
    advantages: torch.Tensor
    """A of the token's sample."""
    mask: torch.Tensor
    """bool: on-policy tokens the policy sampled (choice 8)."""
    sft_mask: torch.Tensor
    """bool: tokens of off-policy samples that passed the reward filter (choice 7)."""
    ref_logprobs: torch.Tensor | None = None
    """log pi_ref(token), detached; needed when kl_coef > 0."""


@dataclass(frozen=True)
class LossCounts:
    """Token counts over the whole batch (every micro-batch and rank): the denominators."""

    policy_tokens: int
    sft_tokens: int


@dataclass
class LossOutputs:
    loss: torch.Tensor
    """This micro-batch's share of the batch loss (sum over micro-batches = the batch loss)."""
    metrics: dict[str, torch.Tensor]
    """Sums over this micro-batch's tokens (divide by the counts named in METRIC_COUNTS)."""


METRIC_COUNTS = {
    "pg_loss": "policy_tokens", "sft_loss": "sft_tokens", "kl_ref": "policy_tokens",
    "clip_low": "policy_tokens", "clip_high": "policy_tokens", "is_weight": "policy_tokens",
    "is_truncated": "policy_tokens", "mismatch_abs": "policy_tokens", "mismatch_kl": "policy_tokens",
}
"""Which count each summed metric is a mean over."""


def group_advantages(rewards: Sequence[float], groups: Sequence[str]) -> list[float]:
    """A_i = R_i - mean of the finite rewards in i's group (choice 1). NaN rewards (masked:
    infrastructure failures) give NaN advantages; a group with one finite reward gives 0."""
    if len(rewards) != len(groups):
        raise ValueError(f"got {len(rewards)} rewards for {len(groups)} group ids")
    totals: dict[str, list[float]] = {}
    for reward, group in zip(rewards, groups):
        if reward == reward:  # not NaN
            totals.setdefault(group, []).append(float(reward))
    out = []
    for reward, group in zip(rewards, groups):
        if reward != reward:
            out.append(float("nan"))
            continue
        members = totals[group]
        out.append(0.0 if len(members) < 2 else float(reward) - sum(members) / len(members))
    return out


def policy_loss(inputs: LossInputs, config: LossConfig, counts: LossCounts) -> LossOutputs:
    """The objective of the module docstring on one micro-batch (choices 2-4, 6, 7)."""
    mask = inputs.mask.bool()
    sft_mask = inputs.sft_mask.bool()
    if bool((mask & sft_mask).any()):
        raise ValueError("a token is in both the on-policy mask and the off-policy likelihood mask")
    logp, old = inputs.logprobs, inputs.old_logprobs.detach()
    zero = logp.new_zeros(())
    metrics: dict[str, torch.Tensor] = {}
    if bool(mask.any()):
        lp, lo = logp[mask], old[mask]
        mu, adv = inputs.behaviour_logprobs.detach()[mask], inputs.advantages.detach()[mask]
        if not bool(torch.isfinite(mu).all()):
            raise ValueError("an on-policy token has no finite behaviour logprob; mark its sample off-policy")
        ratio = torch.exp(lp - lo)
        clipped = ratio.clamp(1.0 - config.eps_low, 1.0 + config.eps_high)
        log_w = lo - mu
        weight = torch.exp(log_w).clamp(max=config.tis_cap)
        pg = -weight * torch.minimum(ratio * adv, clipped * adv)
        metrics["pg_loss"] = pg.detach().sum()
        if config.kl_coef > 0:
            if inputs.ref_logprobs is None:
                raise ValueError(f"kl_coef is {config.kl_coef} but no reference logprobs were given")
            delta = inputs.ref_logprobs.detach()[mask] - lp
            kl = torch.exp(delta) - delta - 1.0
            pg = pg + config.kl_coef * kl
            metrics["kl_ref"] = kl.detach().sum()
        policy_term = pg.sum() / max(counts.policy_tokens, 1)
        metrics["clip_low"] = ((ratio < 1.0 - config.eps_low) & (adv < 0)).sum().float()
        metrics["clip_high"] = ((ratio > 1.0 + config.eps_high) & (adv > 0)).sum().float()
        metrics["is_weight"] = weight.detach().sum()
        metrics["is_truncated"] = (torch.exp(log_w) > config.tis_cap).sum().float()
        metrics["mismatch_abs"] = log_w.abs().sum()
        metrics["mismatch_kl"] = (torch.exp(-log_w) + log_w - 1.0).sum()  # k3 of KL(pi_old || mu)
    else:
        policy_term = zero
    if bool(sft_mask.any()):
        nll = -logp[sft_mask]
        sft_term = config.sft_coef * nll.sum() / max(counts.sft_tokens, 1)
        metrics["sft_loss"] = nll.detach().sum()
    else:
        sft_term = zero
    # `+ 0 * logp.sum()` keeps every micro-batch's loss connected to the graph, so a batch
    # whose tokens are all masked still runs backward (FSDP needs every rank to).
    return LossOutputs(policy_term + sft_term + 0.0 * logp.sum(), metrics)


def selected_logprobs(logits_TV: torch.Tensor, targets_T: torch.Tensor, temperature: float) -> torch.Tensor:
    """log_softmax(logits / T)[target]: the quantity model/sampling.py records as the
    behaviour logprob (T = 1 for greedy decoding). Computed in fp32."""
    scaled = logits_TV.float() / (temperature if temperature > 0 else 1.0)
    return scaled.gather(-1, targets_T.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
