"""GRPO for code: group-relative advantages on sandbox rewards, and the trainer behind
`torchrun --nproc_per_node N grpo.py`.

The method (Shao et al. 2024, with the DAPO and Dr. GRPO variants), per prompt q with G
sampled responses o_1..o_G and rewards r_i from running each program on the tests:

    A_i    = (r_i - mean_j r_j) / (std_j r_j + eps)        scale "group"  (GRPO)
           = (r_i - mean_j r_j)                            scale "none"   (Dr. GRPO)
           = (r_i - mean_j r_j) / (std over the batch)     scale "batch"
    ratio  = exp(logp - old)
    loss_t = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * k3_t
    k3_t   = exp(ref - logp) - (ref - logp) - 1

and the per-token losses are aggregated by token-mean (DAPO), seq-mean-token-mean (GRPO) or
seq-mean-token-sum-norm (Dr. GRPO), always with the GLOBAL normaliser of the step (all
micro-batches on all ranks), so that the gradient does not depend on how the batch is split.

Simplifications, stated up front:
- On-policy: one optimizer step per batch of rollouts, so old = logp.detach() (ratio 1, the
  gradient is the policy gradient). The trainer recomputes logp itself, with the sampling
  temperature applied, rather than trusting the sampler's log-probs.
- No KL by default (beta 0, as the code-RL recipes do); the reference model is loaded only
  when beta > 0.
- Rewards are binary (all tests pass) or the fraction of tests passed.

Loop order (each section is marked in train()): generate -> reward -> advantages ->
(reference log-probs) -> policy update -> weight sync into the engine -> log / checkpoint.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.distributed as dist

# ----------------------------------------------------------------------------- the math


def group_advantages(rewards: torch.Tensor, group_size: int | None = None,
                     scale: str = "group", group_ids: list | None = None,
                     eps: float = 1e-6) -> torch.Tensor:
    """One advantage per response from its group's rewards.

    rewards [N] -> advantages [N]. Groups are consecutive blocks of `group_size`, or given by
    `group_ids` (any hashable per response, e.g. (problem, turn, agent) in agents.py).
    A group whose rewards are all equal gets advantage 0 (it carries no signal).

    >>> group_advantages(torch.tensor([1., 0., 0., 0.]), 2, "none")
    tensor([ 0.5000, -0.5000,  0.0000,  0.0000])
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be group, batch or none, not {scale!r}")
    r = rewards.double()
    if group_ids is None:
        if group_size is None or len(r) % group_size:
            raise ValueError(f"{len(r)} rewards do not split into groups of {group_size}")
        group_ids = [i // group_size for i in range(len(r))]
    keys = {k: i for i, k in enumerate(dict.fromkeys(group_ids))}
    idx = torch.tensor([keys[k] for k in group_ids])
    count = torch.zeros(len(keys), dtype=r.dtype).index_add_(0, idx, torch.ones_like(r))
    mean = torch.zeros(len(keys), dtype=r.dtype).index_add_(0, idx, r) / count
    centred = r - mean[idx]
    if scale == "group":
        var = torch.zeros(len(keys), dtype=r.dtype).index_add_(0, idx, centred ** 2)
        std = (var / (count - 1).clamp(min=1)).sqrt()           # unbiased, like torch.std
        adv = centred / (std[idx] + eps)
    elif scale == "batch":
        adv = centred / (r.std() + eps) if len(r) > 1 else centred
    else:
        adv = centred
    # Exactly zero for constant groups, whatever the rounding.
    adv[(centred.abs() < 1e-12)] = 0.0
    return adv.to(rewards.dtype)


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate(loss_t: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean",
              denom: float | None = None) -> torch.Tensor:
    """Reduce per-token losses [B, T] to a scalar.

    token-mean               sum(m * l) / sum(m)
    seq-mean-token-mean      sum_i [sum_t(m * l) / sum_t(m)] / B
    seq-mean-token-sum-norm  sum(m * l) / (B * T)          (T = max length, Dr. GRPO)
    `denom` replaces the divisor (sum(m), B or B*T) by the global one of the whole step, so
    that summing the results of micro-batches and ranks equals the unsplit loss.
    """
    if agg == "token-mean":
        return (loss_t * mask).sum() / (denom if denom is not None else mask.sum().clamp(min=1))
    if agg == "seq-mean-token-mean":
        per_seq = (loss_t * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_seq.sum() / (denom if denom is not None else loss_t.shape[0])
    if agg == "seq-mean-token-sum-norm":
        return (loss_t * mask).sum() / (denom if denom is not None else mask.numel())
    raise ValueError(f"agg must be one of {AGGREGATIONS}, not {agg!r}")


def global_denominator(masks: list[torch.Tensor], agg: str, max_len: int | None = None) -> float:
    """The divisor `aggregate` would use on the concatenation of `masks` (all micro-batches of
    this rank), summed over ranks. For seq-mean-token-sum-norm, T is `max_len` (the response
    budget) so every rank agrees on it."""
    from model import all_reduce_sum
    if agg == "token-mean":
        local = sum(float(m.sum()) for m in masks)
    elif agg == "seq-mean-token-mean":
        local = sum(m.shape[0] for m in masks)
    else:
        local = sum(m.shape[0] for m in masks) * (max_len or max(m.shape[1] for m in masks))
    return max(all_reduce_sum(local), 1.0)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate k3 = exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def policy_loss(logp, old_logp, advantages, mask, *, eps_low: float = 0.2,
                eps_high: float = 0.28, ref_logp=None, beta: float = 0.0,
                agg: str = "token-mean", denom: float | None = None):
    """Clipped surrogate loss (PPO / GRPO) with separate low/high clip and optional k3 KL.

    logp, old_logp, mask [B, T]; advantages [B, T] (GRPO: the sequence's scalar broadcast).
    Returns (loss scalar, stats dict of floats: clip_frac, kl, ratio_mean).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    loss_t = -torch.min(unclipped, clipped)
    kl = torch.zeros_like(logp)
    if ref_logp is not None and beta > 0:
        kl = k3_kl(logp, ref_logp)
        loss_t = loss_t + beta * kl
    loss = aggregate(loss_t, mask, agg, denom)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats = {"clip_frac": float(((unclipped != clipped).float() * mask).sum() / n),
                 "kl": float((kl * mask).sum() / n),
                 "ratio_mean": float((ratio * mask).sum() / n)}
    return loss, stats


def dynamic_sampling_keep(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO's filter: a bool per group [N // group_size], True when its rewards differ."""
    g = rewards.view(-1, group_size)
    return (g.max(dim=1).values - g.min(dim=1).values) > 1e-9


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))
