"""GRPO for code: group-relative advantages on sandbox rewards (`torchrun grpo.py`).

The method (Shao et al. 2024, with the DAPO and Dr. GRPO variants), per prompt q with G
sampled responses o_1..o_G and rewards r_i from running each program on the tests:

    A_i    = (r_i - mean_j r_j) / (std_j r_j + eps)        scale "group"  (GRPO)
           = (r_i - mean_j r_j)                            scale "none"   (Dr. GRPO)
           = (r_i - mean_j r_j) / (std over the batch)     scale "batch"
    ratio  = exp(logp - old)
    loss_t = -w_t * min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) + beta * k3_t
    k3_t   = exp(ref - logp) - (ref - logp) - 1
    w_t    = min(exp(old - sampler), C)   (truncated importance sampling, --tis-cap C; else 1)

and the per-token losses are aggregated by token-mean (DAPO), seq-mean-token-mean (GRPO) or
seq-mean-token-sum-norm (Dr. GRPO), always with the GLOBAL normaliser of the step (all
micro-batches on all ranks: trainer.aggregate), so that the gradient does not depend on how
the batch is split.

Simplifications, stated up front:
- On-policy by default: one optimizer step per batch of rollouts, so old = logp.detach()
  (ratio 1, the gradient is the policy gradient, the clip never acts). With --mini-batches M
  and/or --epochs E the batch makes M x E optimizer steps (trainer.updates, as verl's
  ppo_mini_batch_size / TRL's num_iterations): old comes from one no-grad pass of the policy
  that sampled, and from the second step on ratio, clip and clip-higher (--eps-high) act;
  clip_frac, ratio_mean and approx_kl (k3 of KL(old || new)) are logged, averaged over the
  steps, with the last step's clip_frac_last / approx_kl_last.
- The trainer recomputes logp itself, with the sampling temperature applied, rather than
  trusting the sampler's log-probs; the sampler's (the engine's) are kept: their mean absolute
  difference to the trainer's old log-probs is logged as sampler_logp_diff, and --tis-cap C
  weights each token's surrogate by w_t above (stop-gradient), the published fix for a bf16
  or otherwise different sampler (verl / TRL; C = 2). Equal log-probs give w = 1: inert.
- No KL by default (beta 0, as the code-RL recipes do); the reference (a frozen copy of the
  policy after the warm start) is made only when beta > 0.
- Rewards are binary (all tests pass) or the fraction of tests passed.
- With beta 0 a zero advantage means a zero gradient, so samples of groups whose rewards are
  all equal skip the forward/backward (they still count in the token-mean normaliser; the
  share is logged as zero_adv_frac: 8% of the samples in the CPU default, where groups of 16
  rarely agree; with small groups or easy/hard problems it is much more).

One step (grpo_step): generate -> reward -> advantages -> (reference log-probs) -> policy
update -> weight sync into the engine. Around it trainer.run: SFT warm start, pass@k before
and after, checkpoints, metrics.
"""
from __future__ import annotations

import argparse

import torch

import trainer
from model import reference_like
from trainer import Sample, aggregate

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

def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate k3 = exp(ref - logp) - (ref - logp) - 1 >= 0."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def policy_loss(logp, old_logp, advantages, mask, *, eps_low: float = 0.2,
                eps_high: float = 0.28, ref_logp=None, beta: float = 0.0,
                agg: str = "token-mean", denom: float | None = None, weights=None):
    """Clipped surrogate loss (PPO / GRPO) with separate low/high clip and optional k3 KL.

    logp, old_logp, mask [B, T]; advantages [B, T] (GRPO: the sequence's scalar broadcast);
    weights [B, T] (no grad): per-token importance weights of the surrogate (tis_weights).
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
    """Truncated importance weights min(exp(old - sampler), cap), [B, T] -> [B, T], no grad:
    the trainer's old policy over the engine's sampling distribution, capped so that a token
    the sampler found much less likely than the trainer does not dominate the step.

    >>> tis_weights(torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0]), 1.5)
    tensor([1.5000, 0.3679])
    """
    return torch.exp(old_logp - sampler_logp).clamp(max=cap).detach()


def sampler_correction(old_logp, batch: trainer.Batch,
                       tis_cap: float) -> tuple[torch.Tensor | None, dict]:
    """TIS weights (tis_cap > 0) and the logged sampler/trainer mismatch, from the engine's
    log-probs (batch.extras["sampler_logp"], present when the engine returned them)."""
    if "sampler_logp" not in batch.extras:
        return None, {}
    sampler, m = batch.extras["sampler_logp"], batch.mask
    diff = float(((old_logp.detach() - sampler).abs() * m).sum() / m.sum().clamp(min=1))
    weights = tis_weights(old_logp, sampler, tis_cap) if tis_cap > 0 else None
    return weights, {"sampler_logp_diff": diff}


def dynamic_sampling_keep(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """DAPO's filter: a bool per group [N // group_size], True when its rewards differ."""
    g = rewards.view(-1, group_size)
    return (g.max(dim=1).values - g.min(dim=1).values) > 1e-9


# ----------------------------------------------------------------------------- rollouts


def rollout_step(engine, tokenizer, problems, rng, args, d, curriculum=None, step: int = 0):
    """Generate args.group_size responses for this rank's prompts, score them, compute group
    advantages; with --dynamic-sampling, drop constant groups and sample more prompts
    (at most --max-resample extra rounds); with --overlong-filter, mask the loss of responses
    cut at --max-new-tokens. Returns (Samples, sums for the metrics: rollout_log).

    curriculum (trainer.Curriculum): .pool(problems, step) narrows the problems (DRIVE hard
    focus), .prefix(problem) gives a CCCS prefix, and it sees every group's rewards.
    """
    G = args.group_size
    pool = curriculum.pool(problems, step) if curriculum else problems
    per_rank = max(1, args.prompts_per_step // d.world)
    samples, updates, sums = [], [], {"groups_seen": 0, "groups_kept": 0}
    for round_ in range(1 + (args.max_resample if args.dynamic_sampling else 0)):
        need = per_rank - sums["groups_kept"]
        if need <= 0:
            break
        # --prompt-order epoch: the step's first round walks the epoch; resampling rounds
        # (dynamic sampling) draw with replacement.
        epoch = trainer.epoch_order(args, step) if round_ == 0 else None
        batch, seed = trainer.draw_batch(pool, rng, per_rank, d, need, epoch)
        prefixes = [curriculum.prefix(p) for p in batch] if curriculum else None
        ro = trainer.generate_and_score(engine, tokenizer, batch, args, seed, prefixes)
        r = torch.tensor(ro.rewards)
        adv = group_advantages(r, G, args.adv_scale, eps=args.adv_eps)      # [P * G]
        keep = dynamic_sampling_keep(r, G) if args.dynamic_sampling else \
            torch.ones(len(batch), dtype=torch.bool)                         # [P]
        for g, problem in enumerate(batch):
            updates.append((problem.id, ro.rewards[g * G:(g + 1) * G]))
            if not keep[g]:
                continue
            for j in range(g * G, (g + 1) * G):
                c = ro.completions[j]
                cut = args.overlong_filter and c.finish_reason == "length"
                samples.append(Sample(ro.prompt_ids[g], c.token_ids, float(adv[j]),
                                      [0] * len(c.token_ids) if cut else None,
                                      ro.rewards[j], key=(problem.id, j),
                                      extras=trainer.sampler_extras(c, args)))
        sums["groups_seen"] += len(batch)
        sums["groups_kept"] += int(keep.sum())
        for k, v in trainer.rollout_sums(ro).items():
            sums[k] = sums.get(k, 0) + v
    trainer.feed_curriculum(curriculum, updates)
    return samples, sums


def rollout_log(sums: dict) -> dict:
    """The step's rollout metrics from sums over ranks (trainer.reduce_sums)."""
    return {**trainer.rollout_means(sums),
            "groups_kept_frac": sums["groups_kept"] / max(sums["groups_seen"], 1)}


# ----------------------------------------------------------------------------- the step


def grpo_loss(args, *, off_policy: bool = False, tis_cap: float = 0.0):
    """The loss trainer.update calls on each micro-batch: the clipped surrogate (args.eps_low,
    eps_high, agg) against old = batch.extras["old_logp"] (off_policy: several updates per
    batch) or logp.detach() (one on-policy update), TIS weights when tis_cap > 0, plus
    args.beta * k3 against batch.extras["ref_logp"]."""
    def loss(out: trainer.Forward, batch: trainer.Batch, denom: trainer.Denominators):
        old = batch.extras["old_logp"] if off_policy else out.logp.detach()
        weights, stats = sampler_correction(old, batch, tis_cap)
        ref_logp = batch.extras["ref_logp"] if args.beta > 0 else None
        loss, pl = policy_loss(out.logp, old, batch.advantages, batch.mask,
                               eps_low=args.eps_low, eps_high=args.eps_high, ref_logp=ref_logp,
                               beta=args.beta, agg=args.agg, denom=denom.mask, weights=weights)
        return loss, {**pl, **stats}
    return loss


def zero_advantage_is_inert(args) -> bool:
    """On-policy without KL a zero advantage is a zero loss and a zero gradient: those samples
    (groups whose rewards are all equal) need no forward/backward at all."""
    return args.beta == 0


def build(r: trainer.Run) -> None:
    """The policy's optimizer, and the frozen reference when --beta > 0."""
    trainer.build_policy_optimizer(r)
    if r.args.beta > 0:
        r.ref = reference_like(r.policy, r.model_path, r.d.device)


def grpo_step(r: trainer.Run, step: int) -> dict:
    """One GRPO step; returns its metrics (trainer.run adds lr, timings, curriculum)."""
    args = r.args
    # --- generate, reward, advantages ---------------------------------------------------------
    with r.timer("generate+reward"):
        samples, sums = rollout_step(r.engine, r.tokenizer, r.train_problems, r.rng, args, r.d,
                                     r.curriculum, step)
    rollout = rollout_log(trainer.reduce_sums(sums))
    r.engine.sleep()        # GPU: free the engine's memory for the update (no-op on CPU)
    # --- old log-probs (several updates per batch), reference log-probs (beta > 0) -------------
    old = trainer.off_policy(args)
    if old or r.ref is not None:
        with r.timer("score"):
            scores = r.score(samples, policy=r.policy if old else None, ref=r.ref)
        if old:
            samples = trainer.with_extras(samples, old_logp=scores.logp)
        if r.ref is not None:
            samples = trainer.with_extras(samples, ref_logp=scores.ref_logp)
    # --- policy update: --epochs x --mini-batches optimizer steps -----------------------------
    with r.timer("update"):
        loss = grpo_loss(args, off_policy=old, tis_cap=args.tis_cap)
        stats = trainer.updates(r.policy, r.optimizer, samples, loss,
                                skip_zero_advantage=zero_advantage_is_inert(args),
                                **r.update_settings())
        r.scheduler.step()
    # --- weight sync --------------------------------------------------------------------------
    with r.timer("sync"):
        trainer.sync_weights(r.policy, r.engine, r.d)
    return {**rollout, **stats}


def train(args) -> dict:
    """SFT warm start -> eval -> GRPO steps -> eval, with checkpoints and metrics."""
    return trainer.run(args, "grpo", grpo_step, build)


# ----------------------------------------------------------------------------- flags

# CPU: 80 steps from the shipped base; its held-out curve (350 problems, lr 5e-5) rose to step 50
# and held to 75 (.433 -> .443 / .471 / .469 at 25 / 50 / 75), and 80 fit ./run.sh's minutes.
PRESETS = trainer.merge_presets(trainer.COMMON_PRESETS,
                                {"cpu": dict(steps=80), "gpu": dict(out="runs/grpo-gpu")})


def build_parser() -> argparse.ArgumentParser:
    p = trainer.new_parser(
        "grpo.py", "GRPO on code problems with sandbox rewards. CPU default: tiny model, "
                   "procedural train problems, SFT warm start, then GRPO; prints pass@1 before and "
                   "after RL. Launch on GPUs with torchrun --nproc_per_node N grpo.py "
                   "--preset gpu.")
    trainer.add_common_flags(p, "grpo")
    g = p.add_argument_group("GRPO")
    g.add_argument("--adv-scale", choices=["group", "batch", "none"], default="group",
                   help="advantage normalisation: group std (GRPO), batch std, none (Dr. GRPO)")
    g.add_argument("--adv-eps", type=trainer.POSITIVE, default=1e-6,
                   help="epsilon in (r - mean) / (std + eps) (TRL: 1e-4; with binary rewards "
                        "and G=16 the two differ by < 4e-4 relative)")
    g.add_argument("--beta", type=trainer.NON_NEGATIVE, default=0.0,
                   help="k3 KL weight to the policy after the warm start (code recipes: 0)")
    g.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO: drop groups whose rewards are all equal and sample more prompts")
    g.add_argument("--max-resample", type=trainer.COUNT, default=2,
                   help="extra sampling rounds for --dynamic-sampling")
    g.add_argument("--overlong-filter", action="store_true",
                   help="mask the loss of responses cut at --max-new-tokens (DAPO)")
    trainer.add_curriculum_flags(p)
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = trainer.parse_flags(parser, PRESETS, argv)
    if args.group_size < 2:
        parser.error(f"--group-size {args.group_size}: group advantages need >= 2 samples per "
                     "prompt (the group mean of one sample is the sample itself)")
    return args


def main(argv=None):
    trainer.run_entry_point(train, parse_args, argv)


if __name__ == "__main__":
    main()
