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
micro-batches on all ranks: losses.aggregate), so that the gradient does not depend on how
the batch is split.

Simplifications, stated up front:
- On-policy by default: one optimizer step per batch of rollouts, so old = logp.detach()
  (ratio 1, the gradient is the policy gradient, the clip never acts). With --mini-batches M
  and/or --epochs E the batch makes M x E optimizer steps (actor.updates, as verl's
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

The loop (train): trainer.start -> trainer.prepare_run (SFT warm start, pass@k before) -> the
optimizer (and reference) -> trainer.first_step (step-0 checkpoint or resume) -> for each step
grpo_step: draw -> generate -> reward -> advantages (rollout_step) -> (old / reference
log-probs) -> policy update -> weight sync into the engine (actor.update_and_sync); the row,
the --eval-every point, the checkpoint -> pass@k after, summary.json. The math (advantages, the
clipped surrogate, TIS, aggregation) is in losses.py, on tensors and keyword arguments.
"""
from __future__ import annotations

import argparse

import torch

import actor
import losses
import rollouts
import trainer
from actor import Sample
from infra import flags
from infra.bookkeeping import policy_optimizer
from infra.model import Forward, reduce_sums, reference_like
from infra.samples import sample_records, trace_of
from losses import dynamic_sampling_keep, group_advantages

# ----------------------------------------------------------------------------- rollouts


def rollout_step(engine, tokenizer, problems, rng, d, sampling: dict, *, prompts_per_step: int,
                 adv_scale: str, adv_eps: float, dynamic_sampling: bool, max_resample: int,
                 overlong_filter: bool, tis_cap: float, epoch_order=None, curriculum=None,
                 step: int = 0, timer=None, trace: list | None = None):
    """Generate G = sampling["group_size"] responses for this rank's share of
    prompts_per_step prompts, score them, compute group advantages (losses.group_advantages
    with adv_scale, adv_eps); with dynamic_sampling, drop constant groups and sample more
    prompts (at most max_resample extra rounds); with overlong_filter, mask the loss of
    responses cut at the token budget. Returns (Samples, sums for the metrics: rollout_log).

    sampling: generate_and_score's keywords (flags.sampling). tis_cap: actor.sampler_extras'.
    epoch_order: draw_batch's for the step's first round (rollouts.epoch_order; None: with
    replacement; resampling rounds always draw with replacement).
    curriculum (trainer.Curriculum): .pool(problems, step) narrows the problems (DRIVE hard
    focus), .prefix(problem) gives a CCCS prefix, and it sees every group's rewards.
    timer (metrics.Timer): gets the engine's and the sandbox's seconds ("generate", "reward").
    trace: a list that gets each Sample's infra.samples.Trace, in the Samples' order (the samples
    file), with the CCCS stage the prefix came from.
    """
    G = sampling["group_size"]
    pool = curriculum.pool(problems, step) if curriculum else problems
    per_rank = max(1, prompts_per_step // d.world)
    samples, updates, sums = [], [], {"groups_seen": 0, "groups_kept": 0}
    for round_ in range(1 + (max_resample if dynamic_sampling else 0)):
        need = per_rank - sums["groups_kept"]
        if need <= 0:
            break
        # --prompt-order epoch: the step's first round walks the epoch; resampling rounds
        # (dynamic sampling) draw with replacement.
        epoch = epoch_order if round_ == 0 else None
        batch, seed = rollouts.draw_batch(pool, rng, per_rank, d, need, epoch)
        prefixes = [curriculum.prefix(p) for p in batch] if curriculum else None
        ro = rollouts.generate_and_score(engine, tokenizer, batch, seed, prefixes=prefixes,
                                         timer=timer, **sampling)
        r = torch.tensor(ro.rewards)
        adv = group_advantages(r, G, adv_scale, eps=adv_eps)                  # [P * G]
        keep = dynamic_sampling_keep(r, G) if dynamic_sampling else \
            torch.ones(len(batch), dtype=torch.bool)                         # [P]
        for g, problem in enumerate(batch):
            updates.append((problem.id, ro.rewards[g * G:(g + 1) * G]))
            if not keep[g]:
                continue
            for j in range(g * G, (g + 1) * G):
                c = ro.completions[j]
                cut = overlong_filter and c.finish_reason == "length"
                samples.append(Sample(ro.prompt_ids[g], c.token_ids, float(adv[j]),
                                      [0] * len(c.token_ids) if cut else None,
                                      ro.rewards[j], key=(problem.id, j),
                                      **actor.sampler_extras(c, tis_cap)))
                if trace is not None:     # the samples file: the sample as the step saw it
                    trace.append(trace_of(
                        ro, j, problem, prefixes[g] if prefixes else "",
                        curriculum.stage(problem) if curriculum else None))
        sums["groups_seen"] += len(batch)
        sums["groups_kept"] += int(keep.sum())
        for k, v in rollouts.rollout_sums(ro).items():
            sums[k] = sums.get(k, 0) + v
    rollouts.feed_curriculum(curriculum, updates)
    return samples, sums


def rollout_log(sums: dict) -> dict:
    """The step's rollout metrics from sums over ranks (model.reduce_sums)."""
    return {**rollouts.rollout_means(sums),
            "groups_kept_frac": sums["groups_kept"] / max(sums["groups_seen"], 1)}


# ----------------------------------------------------------------------------- the step


def update_loss(*, eps_low: float, eps_high: float, beta: float, agg: str,
                off_policy: bool = False, tis_cap: float = 0.0):
    """The loss actor.update calls on each micro-batch: losses.grpo_loss on the batch's
    tensors (the clipped surrogate against batch.old_logp when off_policy, several updates per
    batch, else logp.detach(); TIS weights against batch.sampler_logp when tis_cap > 0; beta
    * k3 against batch.ref_logp)."""
    def loss(out: Forward, batch: actor.Batch, denom: actor.Denominators):
        return losses.grpo_loss(out.logp, batch.advantages, batch.mask,
                                old_logp=batch.old_logp if off_policy else None,
                                sampler_logp=batch.sampler_logp, ref_logp=batch.ref_logp,
                                eps_low=eps_low, eps_high=eps_high, beta=beta, agg=agg,
                                denom=denom.mask, tis_cap=tis_cap)
    return loss


def zero_advantage_is_inert(beta: float) -> bool:
    """Without KL (beta 0) a zero advantage is a zero loss and a zero gradient, on- or
    off-policy: those samples (groups whose rewards are all equal) need no forward/backward."""
    return beta == 0


def grpo_step(r: trainer.Run, step: int) -> dict:
    """One GRPO step; returns its metrics (train's end_step adds lr, timings, curriculum)."""
    args = r.args
    # --- draw -> generate -> reward -> advantages (rollout_step; timed "generate", "reward") --
    trace = [] if r.sample_log.on else None      # the samples file (--log-samples)
    samples, sums = rollout_step(
        r.engine, r.tokenizer, r.train_problems, r.rng, r.d, flags.sampling(args),
        prompts_per_step=args.prompts_per_step, adv_scale=args.adv_scale, adv_eps=args.adv_eps,
        dynamic_sampling=args.dynamic_sampling, max_resample=args.max_resample,
        overlong_filter=args.overlong_filter, tis_cap=args.tis_cap,
        epoch_order=rollouts.epoch_order(args.prompt_order, args.seed, step),
        curriculum=r.curriculum, step=step, timer=r.timer, trace=trace)
    if trace is not None:   # what the update trains on: rewards, advantages, CCCS stages
        with r.timer("samples"):
            trainer.log_samples(r, step + 1, "train", sample_records(
                trace, r.sample_log.pick(len(samples)), samples))
    rollout = rollout_log(reduce_sums(sums))
    r.engine.sleep()        # GPU: free the engine's memory for the update (no-op on CPU)
    # --- old log-probs (several updates per batch), reference log-probs (beta > 0) -------------
    old = flags.off_policy(args)
    if old or r.ref is not None:
        with r.timer("score"):
            scores = r.score(samples, policy=r.policy if old else None, ref=r.ref)
        if old:
            samples = actor.with_scores(samples, old_logp=scores.logp)
        if r.ref is not None:
            samples = actor.with_scores(samples, ref_logp=scores.ref_logp)
    # --- policy update (--epochs x --mini-batches optimizer steps), weight sync ---------------
    loss = update_loss(eps_low=args.eps_low, eps_high=args.eps_high, beta=args.beta,
                       agg=args.agg, off_policy=old, tis_cap=args.tis_cap)
    stats = actor.update_and_sync(r.policy, r.optimizer, r.scheduler, r.engine, samples, loss,
                                  r.timer, skip_zero_advantage=zero_advantage_is_inert(args.beta),
                                  **r.update_settings())
    return {**rollout, **stats}


def train(args) -> dict:
    """The run: SFT warm start -> eval -> GRPO steps -> eval, with checkpoints and metrics."""
    r = trainer.start(args, "grpo", coder_prompts=True)  # process group, problems, policy, engine
    ckpt = trainer.prepare_run(r)          # resume point, or SFT warm start + pass@k before RL
    if r.summary is not None:              # --eval-only: evaluated, finished
        return r.summary
    # The optimizer trains the warm-started policy, and a resume restores its state into it.
    r.optimizer, r.scheduler = policy_optimizer(r.policy, **flags.optimizer(args))
    if args.beta > 0:                      # the frozen reference of the KL term
        r.ref = reference_like(r.policy, r.model_path, r.d.device)
    trainer.first_step(r, ckpt)            # step-0 checkpoint, or the resumed state
    for step in trainer.rl_steps(r):
        metrics = grpo_step(r, step)       # rollouts -> update -> weight sync
        trainer.end_step(r, step, metrics) # metrics row, --eval-every, --save-every
    return trainer.end_run(r)              # pass@k after RL, summary.json


# ----------------------------------------------------------------------------- flags
# (A reader may skip to the end: the command line. The flags every method shares, and their
# presets, are infra/flags.py's.)

# CPU: 80 steps from the shipped base; its held-out curve (350 problems, lr 5e-5) rose to step 50
# and held to 75 (.433 -> .443 / .471 / .469 at 25 / 50 / 75), and 80 fit ./run.sh's minutes.
PRESETS = flags.merge_presets(flags.COMMON_PRESETS,
                              {"cpu": dict(steps=80), "gpu": dict(out="runs/grpo-gpu")})


def build_parser() -> argparse.ArgumentParser:
    p = flags.new_parser(
        "grpo.py", "GRPO on code problems with sandbox rewards. CPU default: the shipped "
                   "base model (models/base), GRPO on tasks:rl; prints held-out pass@1 before "
                   "and after RL. Launch on GPUs with torchrun --nproc_per_node N grpo.py "
                   "--preset gpu.")
    flags.add_common_flags(p, "grpo", aggregations=losses.AGGREGATIONS)
    g = p.add_argument_group("GRPO")
    flags.add_adv_scale_flag(g)
    g.add_argument("--adv-eps", type=flags.POSITIVE, default=1e-6,
                   help="epsilon in (r - mean) / (std + eps) (TRL: 1e-4; with binary rewards "
                        "and G=16 the two differ by < 4e-4 relative)")
    g.add_argument("--beta", type=flags.NON_NEGATIVE, default=0.0,
                   help="k3 KL weight to the policy after the warm start (code recipes: 0)")
    g.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO: drop groups whose rewards are all equal and sample more prompts")
    g.add_argument("--max-resample", type=flags.COUNT, default=2,
                   help="extra sampling rounds for --dynamic-sampling")
    g.add_argument("--overlong-filter", action="store_true",
                   help="mask the loss of responses cut at --max-new-tokens (DAPO)")
    trainer.add_curriculum_flags(p)
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = flags.parse_flags(parser, PRESETS, argv)
    if args.group_size < 2:
        parser.error(f"--group-size {args.group_size}: group advantages need >= 2 samples per "
                     "prompt (the group mean of one sample is the sample itself)")
    return args


def main(argv=None):
    with flags.entry_point():      # one-line errors for the user's mistakes, clean exit
        train(parse_args(argv))


if __name__ == "__main__":
    main()
