"""The math of the methods, with explicit inputs: tensors in, tensors (and floats) out.

Every function here takes tensors and keyword arguments (never a flags namespace, a batch
object or a run) and depends on torch alone, so it can be read, tested and reused without the
sandbox, the engines or the training loop. grpo.py and ppo_fgo.py unpack their batches into
these arguments; trainer.py's update aggregates with `aggregate`.

Shapes: B rows (responses), T positions (the per-token log-prob positions of the rows; t
scores token t+1), N responses for per-response quantities. m_t is the 0/1 loss mask.

    aggregation       token-mean               sum(m * l) / sum(m)
                      seq-mean-token-mean      sum_i [sum_t(m * l) / sum_t(m)] / B
                      seq-mean-token-sum-norm  sum(m * l) / (B * T)
    GRPO advantage    A_i = (r_i - mean_g r) / (std_g r + eps)   (or / batch std, or none)
    ratio             rho_t = exp(logp_t - old_t)
    clipped surrogate l_t = -w_t * min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
                            + beta * k3_t
    k3 KL             k3_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1
    TIS weight        w_t = min(exp(old_t - sampler_t), C)       (1 without --tis-cap)
    GAE               delta_t = r_t + gamma V_{t+1} - V_t,  A_t = delta_t + gamma lam A_{t+1}
    value loss        0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2)
"""
from __future__ import annotations

import torch

# ----------------------------------------------------------------------------- aggregation

AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def aggregate(loss_t: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean",
              denom: float | None = None) -> torch.Tensor:
    """Reduce per-token losses loss_t [B, T] under mask [B, T] to a scalar.

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


def local_denominator(masks: list[torch.Tensor], agg: str, max_len: int | None = None) -> float:
    """The divisor `aggregate` would use on the concatenation of `masks` [B_k, T_k] (this
    rank's micro-batches): sum(m), the number of rows B, or B * T with T = `max_len` (the
    response budget, so every rank agrees on it) or else the longest mask. Summed over ranks
    it is the global denominator of one optimizer step (actor.global_denominator)."""
    if agg == "token-mean":
        return sum(float(m.sum()) for m in masks)
    if agg == "seq-mean-token-mean":
        return sum(m.shape[0] for m in masks)
    return sum(m.shape[0] for m in masks) * (max_len or max((m.shape[1] for m in masks),
                                                            default=1))


# ----------------------------------------------------------------------------- GRPO advantages


def group_advantages(rewards: torch.Tensor, group_size: int | None = None,
                     scale: str = "group", group_ids: list | None = None,
                     eps: float = 1e-6) -> torch.Tensor:
    """One advantage per response from its group's rewards.

    rewards [N] -> advantages [N]. Groups are consecutive blocks of `group_size`, or given by
    `group_ids` (any hashable per response, e.g. (problem, turn, agent) in agents.py).
        scale "group":  A_i = (r_i - mean_g r) / (std_g r + eps)   (unbiased std, GRPO)
        scale "batch":  A_i = (r_i - mean_g r) / (std r + eps)     (std over all N)
        scale "none":   A_i = r_i - mean_g r                       (Dr. GRPO)
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


def dynamic_sampling_keep(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO's filter: rewards [N] -> a bool per group [N // group_size], True when its rewards
    differ (max - min > 1e-9)."""
    g = rewards.view(-1, group_size)
    return (g.max(dim=1).values - g.min(dim=1).values) > 1e-9


# ----------------------------------------------------------------------------- policy loss


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate, [B, T] -> [B, T]:
    k3 = exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def policy_loss(logp, old_logp, advantages, mask, *, eps_low: float = 0.2,
                eps_high: float = 0.28, ref_logp=None, beta: float = 0.0,
                agg: str = "token-mean", denom: float | None = None, weights=None):
    """Clipped surrogate loss (PPO / GRPO) with separate low/high clip and optional k3 KL:

        rho_t = exp(logp_t - old_t)
        l_t   = -w_t * min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t) + beta k3_t

    aggregated by `aggregate(l, mask, agg, denom)`.
    logp, old_logp, mask [B, T]; advantages [B, T] (GRPO: the sequence's scalar broadcast);
    ref_logp [B, T] (used when beta > 0); weights [B, T] (no grad): per-token importance
    weights w_t of the surrogate (tis_weights), None = 1.
    Returns (loss scalar, stats dict of floats: clip_frac, kl, ratio_mean, approx_kl).
    """
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    loss_t = -torch.min(unclipped, clipped)
    if weights is not None:
        loss_t = loss_t * weights
    kl = torch.zeros_like(logp)
    if ref_logp is not None and beta > 0:
        kl = k3_kl(logp, ref_logp)
        loss_t = loss_t + beta * kl
    loss = aggregate(loss_t, mask, agg, denom)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        # Share of tokens where the clipped branch is the active one (zero gradient).
        stats = {"clip_frac": float(((clipped < unclipped).float() * mask).sum() / n),
                 "kl": float((kl * mask).sum() / n),
                 "ratio_mean": float((ratio * mask).sum() / n),
                 # k3 estimate of KL(old || new) on the old policy's samples: >= 0
                 "approx_kl": float(((ratio - 1 - (logp - old_logp)) * mask).sum() / n)}
    return loss, stats


def tis_weights(old_logp: torch.Tensor, sampler_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance weights w_t = min(exp(old_t - sampler_t), cap), [B, T] -> [B, T],
    no grad: the trainer's old policy over the engine's sampling distribution, capped so that
    a token the sampler found much less likely than the trainer does not dominate the step.

    >>> tis_weights(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0]), 1.5)
    tensor([1.5000, 0.3679])
    """
    return torch.exp(old_logp - sampler_logp).clamp(max=cap).detach()


def sampler_correction(old_logp: torch.Tensor, sampler_logp: torch.Tensor | None,
                       mask: torch.Tensor, tis_cap: float) -> tuple[torch.Tensor | None, dict]:
    """TIS weights [B, T] (tis_cap > 0, else None) and the logged sampler/trainer mismatch
    sampler_logp_diff = sum(m * |old - sampler|) / sum(m), from the engine's log-probs
    sampler_logp [B, T]; (None, {}) when the engine gave none (sampler_logp None)."""
    if sampler_logp is None:
        return None, {}
    diff = float(((old_logp.detach() - sampler_logp).abs() * mask).sum()
                 / mask.sum().clamp(min=1))
    weights = tis_weights(old_logp, sampler_logp, tis_cap) if tis_cap > 0 else None
    return weights, {"sampler_logp_diff": diff}


def grpo_loss(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
              old_logp: torch.Tensor | None = None, sampler_logp: torch.Tensor | None = None,
              ref_logp: torch.Tensor | None = None, eps_low: float = 0.2,
              eps_high: float = 0.28, beta: float = 0.0, agg: str = "token-mean",
              denom: float | None = None, tis_cap: float = 0.0) -> tuple[torch.Tensor, dict]:
    """GRPO's loss of one micro-batch: the clipped surrogate (policy_loss) against old_logp
    (None: on-policy, old = logp.detach(), ratio 1), TIS weights against sampler_logp when
    tis_cap > 0, plus beta * k3 against ref_logp.

    logp, advantages, mask, old_logp, sampler_logp, ref_logp [B, T]; denom: the step's global
    normaliser of `mask`. Returns (loss, stats: policy_loss's and sampler_logp_diff).
    """
    old = logp.detach() if old_logp is None else old_logp
    weights, stats = sampler_correction(old, sampler_logp, mask, tis_cap)
    loss, pl = policy_loss(logp, old, advantages, mask, eps_low=eps_low, eps_high=eps_high,
                           ref_logp=ref_logp if beta > 0 else None, beta=beta, agg=agg,
                           denom=denom, weights=weights)
    return loss, {**pl, **stats}


# ----------------------------------------------------------------------------- PPO


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
        gamma: float = 1.0, lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over the valid positions of each row.

        delta_t = r_t + gamma * V_{t+1} - V_t
        A_t     = delta_t + gamma * lam * A_{t+1}          ret_t = A_t + V_t

    rewards, values, mask [B, T] -> advantages, returns [B, T] (0 where mask is 0).
    Runs from the end backwards; a masked position is skipped: it contributes neither its
    reward nor its value, and the next valid position's value and advantage carry over it.
    The last valid token of a row bootstraps from V = 0 (the episode ends there).

    Example (gamma 0.9, lam 0.5): rewards [0, 0, 1], values [0.5, 0.4, 0.8], mask [1, 1, 1]
      t=2: delta = 1 - 0.8 = 0.2                    A = 0.2
      t=1: delta = 0.9*0.8 - 0.4 = 0.32             A = 0.32 + 0.45*0.2  = 0.41
      t=0: delta = 0.9*0.4 - 0.5 = -0.14            A = -0.14 + 0.45*0.41 = 0.0445
    """
    mask = mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])   # [B]
    next_adv = torch.zeros_like(values[:, 0])     # [B]
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        advantages[:, t] = adv_t * m
        # Only valid positions move the carried state: masked ones are transparent.
        next_value = torch.where(m > 0, values[:, t], next_value)
        next_adv = torch.where(m > 0, adv_t, next_adv)
    returns = (advantages + values) * mask
    return advantages, returns


def whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
           eps: float = 1e-8) -> torch.Tensor:
    """x <- (x - mean) / sqrt(var + eps) over the valid tokens of x [B, T] (mask [B, T]); 0
    elsewhere.

    Population variance (divide by the number of valid tokens). shift_mean=False adds the
    mean back (only the scale changes). Statistics are over this batch: with data parallelism
    each rank whitens its own part.
    """
    mask = mask.to(x.dtype)
    n = mask.sum().clamp(min=1)
    mean = (x * mask).sum() / n
    var = (((x - mean) ** 2) * mask).sum() / n
    out = (x - mean) / torch.sqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, clip: float = 0.2, agg: str = "token-mean",
               denom: float | None = None) -> tuple[torch.Tensor, dict]:
    """Clipped value loss: 0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2).

    values, old_values, returns, mask [B, T] -> (scalar loss, stats). Aggregated like the
    policy loss (`aggregate`; `denom` = the step's global normaliser). The clip keeps one
    update from moving a value estimate more than `clip` away from the one that made the
    advantages. stats: vf_clip_frac (share of valid tokens where the clipped term is larger).
    """
    clipped_v = old_values + torch.clamp(values - old_values, -clip, clip)
    unclipped_err = (values - returns) ** 2
    clipped_err = (clipped_v - returns) ** 2
    loss_t = 0.5 * torch.maximum(unclipped_err, clipped_err)
    loss = aggregate(loss_t, mask, agg, denom)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        clip_frac = float(((clipped_err > unclipped_err).to(mask.dtype) * mask).sum() / n)
    return loss, {"vf_clip_frac": clip_frac}


def last_valid_index(mask: torch.Tensor) -> torch.Tensor:
    """mask [B, T] -> [B] index of the last 1 in each row (-1 for an empty row)."""
    T = mask.shape[1]
    pos = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask > 0, pos, torch.full_like(pos, -1)).max(dim=1).values


def kl_in_reward(score: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor,
                 mask: torch.Tensor, beta: float) -> torch.Tensor:
    """Per-token rewards [B, T]: r_t = -beta * (logp_t - ref_t) on valid tokens, score [B]
    added on the last valid token of each row (a row with no valid token gets nothing).

    logp - ref is the k1 estimate of KL(policy || ref) for the sampled token: its sum over a
    response is an unbiased estimate of the sequence KL, which is what the return penalises.
    """
    mask = mask.to(logp.dtype)
    rewards = -beta * (logp - ref_logp) * mask
    last = last_valid_index(mask)                                  # [B]
    rows = torch.nonzero(last >= 0).squeeze(1)
    rewards[rows, last[rows]] += score.to(rewards.dtype)[rows]
    return rewards


def ppo_loss(logp: torch.Tensor, values: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, response_mask: torch.Tensor, *,
             old_logp: torch.Tensor | None, old_values: torch.Tensor, returns: torch.Tensor,
             sampler_logp: torch.Tensor | None = None, eps_low: float = 0.2,
             eps_high: float = 0.2, vf_clip: float = 0.2, vf_coef: float = 1.0,
             agg: str = "token-mean", denom: float | None = None,
             value_denom: float | None = None,
             tis_cap: float = 0.0) -> tuple[torch.Tensor, dict]:
    """PPO's loss of one micro-batch: the clipped surrogate (policy_loss, no KL term: the KL
    is in the reward) over `mask` (FGO-kept tokens) + vf_coef * the clipped value loss over
    every response token (`response_mask`):

        L = policy_loss(logp, old_logp, A, mask) + vf_coef * value_loss(V, V_old, R, m_resp)

    All tensors [B, T]; old_logp None: on-policy (one optimizer step a batch), old =
    logp.detach(), ratio 1; denom / value_denom: the step's global normalisers of mask and
    response_mask. Returns (loss, stats: clip_frac, ratio_mean, approx_kl, vf_clip_frac,
    sampler_logp_diff when sampler_logp is given).
    """
    old_logp = logp.detach() if old_logp is None else old_logp
    weights, sampler_st = sampler_correction(old_logp, sampler_logp, mask, tis_cap)
    pl, st = policy_loss(logp, old_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high,
                         agg=agg, denom=denom, weights=weights)
    vl, vst = value_loss(values, old_values, returns, response_mask, clip=vf_clip, agg=agg,
                         denom=value_denom)
    st.pop("kl")      # policy_loss's k3 term is off here; the KL is in the reward
    return pl + vf_coef * vl, {**st, **vst, **sampler_st}
