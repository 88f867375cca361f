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
- With beta 0 a zero advantage means a zero gradient, so samples of groups whose rewards are
  all equal skip the forward/backward (they still count in the token-mean normaliser; the
  share is logged as zero_adv_frac: 8% of the samples in the CPU default, where groups of 16
  rarely agree; with small groups or easy/hard problems it is much more).

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
        local = sum(m.shape[0] for m in masks) * (max_len or max((m.shape[1] for m in masks),
                                                                 default=1))
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
        # Share of tokens where the clipped branch is the active one (zero gradient).
        stats = {"clip_frac": float(((clipped < unclipped).float() * mask).sum() / n),
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


# ----------------------------------------------------------------------------- batches

class Sample:
    """One trained response: token ids, its advantage and an optional per-token loss mask.

    advantage: a float (GRPO, broadcast over tokens) or a list per response token (PPO).
    token_mask: 1/0 per response token (FGO, overlong filtering); None keeps every token.
    extras: per-response-token lists (e.g. PPO's old values and returns), collated like
    `advantage` into [B, L-1] tensors under the same names.
    """
    __slots__ = ("prompt_ids", "response_ids", "advantage", "token_mask", "reward", "key",
                 "extras")

    def __init__(self, prompt_ids, response_ids, advantage=0.0, token_mask=None, reward=0.0,
                 key=None, extras=None):
        self.prompt_ids, self.response_ids = list(prompt_ids), list(response_ids)
        self.advantage, self.token_mask, self.reward, self.key = (advantage, token_mask,
                                                                 reward, key)
        self.extras = extras or {}


def collate(samples: list[Sample], pad_id: int, device) -> dict:
    """Right-padded prompt+response rows -> a batch dict:
    input_ids, attention_mask [B, L]; response_mask (the response tokens), mask (response
    tokens kept by token_mask: the policy-loss mask), advantages and every extras key
    [B, L-1], aligned with the log-prob positions (see model.response_mask)."""
    from model import response_mask
    rows = [s.prompt_ids + s.response_ids for s in samples]
    L = max(2, max(len(r) for r in rows))
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        attn[i, :len(r)] = 1
    p = torch.tensor([len(s.prompt_ids) for s in samples])
    r = torch.tensor([len(s.response_ids) for s in samples])
    resp = response_mask(p, r, L)
    per_token = {"advantages": [s.advantage for s in samples], "mask": [
        1.0 if s.token_mask is None else s.token_mask for s in samples]}
    for key in samples[0].extras:
        per_token[key] = [s.extras[key] for s in samples]
    batch = {"input_ids": ids.to(device), "attention_mask": attn.to(device),
             "response_mask": resp.to(device)}
    for key, values in per_token.items():
        t = torch.zeros(len(rows), L - 1)
        for i, (s, v) in enumerate(zip(samples, values)):
            start, n = len(s.prompt_ids) - 1, len(s.response_ids)
            if n:
                t[i, start:start + n] = torch.as_tensor(v, dtype=torch.float)
        batch[key] = t.to(device)
    batch["mask"] = batch["mask"] * batch["response_mask"]
    return batch


def train_on_samples(policy, optimizer, samples: list[Sample], loss_fn, *, micro_batch: int,
                     agg: str, max_len: int | None, pad_id: int, device, max_grad_norm: float,
                     temperature: float = 1.0, extra_modules=()):
    """One optimizer step over `samples` (this rank's share), in micro-batches.

    loss_fn(logp [B, L-1], batch dict (see collate), denom) -> (loss, stats). `denom` is the
    global normaliser of batch["mask"] for `agg` (all micro-batches, all ranks); the loss is
    multiplied by the world size because FSDP averages gradients over ranks, so the summed
    gradient equals that of the unsplit batch. batch["denom_response"] is the same for the
    plain response mask (PPO's value loss). Ranks with fewer micro-batches run empty ones, so
    every rank joins every collective.
    extra_modules: (module, optimizer, max_grad_norm) triples trained by the same backward
    (PPO's critic, whose loss_fn adds the value loss).
    When loss_fn.zero_advantage_is_inert is True (GRPO with beta = 0), samples whose advantage
    is zero are left out of the forward/backward (exact: their gradient is zero) but still count
    in the normalisers; the stats then describe the trained samples only, plus zero_adv_frac
    (the share of samples skipped).
    Returns a dict of stats (token-weighted means, loss, entropy, grad_norm).
    """
    from model import all_reduce_sum
    world = dist.get_world_size() if dist.is_initialized() else 1
    # The normalisers count every sample, including those skipped below.
    whole = [collate(samples, pad_id, "cpu")] if samples else []
    denom = global_denominator([b["mask"] for b in whole], agg, max_len)
    denom_response = global_denominator([b["response_mask"] for b in whole], agg, max_len)
    if getattr(loss_fn, "zero_advantage_is_inert", False):
        # On-policy GRPO without KL: a zero advantage is a zero loss and a zero gradient, so
        # these samples (groups whose rewards are all equal) need no forward/backward at all.
        n_all = len(samples)
        samples = [s for s in samples if not _all_zero(s.advantage)]
        skipped = (all_reduce_sum(float(n_all - len(samples))), all_reduce_sum(float(n_all)))
    else:
        skipped = None
    # Similar lengths together: less padding per micro-batch (the sum does not depend on order).
    samples = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.response_ids))
    batches = [b for _, b in micro_batches(samples, micro_batch, pad_id, device)]
    for opt in [optimizer] + [e[1] for e in extra_modules]:
        opt.zero_grad(set_to_none=True)
    sums: dict[str, float] = {}
    loss_sum = 0.0
    for batch in batches:
        batch["denom_response"] = denom_response
        logp, ent = policy(batch["input_ids"], batch["attention_mask"],
                           temperature=temperature, with_entropy=True)
        loss, stats = loss_fn(logp, batch, denom)
        (loss * world).backward()
        loss_sum += float(loss.detach())      # global normaliser: the sum IS the step's loss
        mask = batch["mask"]
        n_tok = float(mask.sum())
        stats["entropy"] = float((ent.detach() * mask).sum()) / max(n_tok, 1)
        for key, v in stats.items():          # token-weighted sums, averaged below
            sums[key] = sums.get(key, 0.0) + v * n_tok
        sums["_tokens"] = sums.get("_tokens", 0.0) + n_tok
    grad_norm = _clip_and_step(policy, optimizer, max_grad_norm)
    extra_norms = {f"grad_norm_extra{i}": _clip_and_step(m, opt, max_norm)
                   for i, (m, opt, max_norm) in enumerate(extra_modules)}
    tokens = all_reduce_sum(sums.pop("_tokens", 0.0))
    out = {k: all_reduce_sum(v) / max(tokens, 1) for k, v in sorted(sums.items())}
    out.update(loss=all_reduce_sum(loss_sum), grad_norm=grad_norm, trained_tokens=tokens,
               **extra_norms)
    if skipped is not None:
        out["zero_adv_frac"] = skipped[0] / max(skipped[1], 1.0)
    return out


def _all_zero(advantage) -> bool:
    """True when a Sample's advantage (a float, or a list per token) is zero everywhere."""
    return all(a == 0 for a in advantage) if isinstance(advantage, (list, tuple)) else \
        advantage == 0


def _clip_and_step(module, optimizer, max_grad_norm: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
    optimizer.step()
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def max_over_ranks(n: int, device) -> int:
    t = torch.tensor(n, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


class _EmptyBatch(dict):
    """A one-row batch whose every per-token tensor is zero: no loss, only collectives."""

    def __missing__(self, key):
        return torch.zeros(1, 1, device=self["input_ids"].device)


def micro_batches(samples: list[Sample], size: int, pad_id: int, device):
    """Yield (samples, collated batch) per micro-batch of `size`. Every rank yields the same
    number: a rank with fewer samples gets empty batches, so all ranks join every FSDP
    collective of the forward and backward passes."""
    chunks = [samples[i:i + size] for i in range(0, len(samples), size)]
    for k in range(max_over_ranks(len(chunks), device)):
        if k < len(chunks):
            yield chunks[k], collate(chunks[k], pad_id, device)
        else:
            ids = torch.full((1, 2), pad_id, dtype=torch.long, device=device)
            yield [], _EmptyBatch(input_ids=ids, attention_mask=torch.ones_like(ids))


def grpo_loss_fn(args, ref=None):
    """The GRPO loss for train_on_samples (on-policy: old = logp.detach())."""
    def fn(logp, batch, denom):
        ref_logp = None
        if ref is not None and args.beta > 0:
            with torch.no_grad():
                ref_logp = ref(batch["input_ids"], batch["attention_mask"],
                               temperature=args.temperature)
        return policy_loss(logp, logp.detach(), batch["advantages"], batch["mask"],
                           eps_low=args.eps_low,
                           eps_high=args.eps_high, ref_logp=ref_logp, beta=args.beta,
                           agg=args.agg, denom=denom)
    # Zero advantage -> zero loss and gradient, unless the KL term gives every token one.
    fn.zero_advantage_is_inert = ref is None or args.beta == 0
    return fn


def sft_loss_fn(args):
    """Supervised warm start: token-mean negative log-likelihood of the reference answers."""
    def fn(logp, batch, denom):
        return aggregate(-logp, batch["mask"], "token-mean", denom), {}
    return fn


# ----------------------------------------------------------------------------- rollouts

def prompt_text(tokenizer, problem, prefix: str = "") -> str:
    """The coder prompt. With a CCCS prefix the answer is opened for the model
    ("```python\n" + prefix) so it continues the canonical program (cccs.completion_prompt)."""
    import cccs
    import data
    return cccs.completion_prompt(data.render_prompt(tokenizer, data.coder_messages(problem)),
                                  prefix, prefill=True)


def score_completions(problems, texts: list[str], args, prefixes=None, coverage=False):
    """Run each completion's program on its problem's tests in one sandbox batch.

    Returns (rewards, results, programs); a completion with no code gets reward 0 and result
    None (counted as no_code, never an error). With CCCS prefixes the rewarded program is
    prefix + completion (cccs.rewarded_program).
    """
    import cccs
    import sandbox
    programs, jobs, where = [], [], []
    for i, (p, t) in enumerate(zip(problems, texts)):
        code = cccs.rewarded_program(prefixes[i] if prefixes else "", t, prefill=True)
        programs.append(code)
        if code is not None:
            where.append(i)
            jobs.append(dict(code=code, tests=p.tests, fn_name=p.fn_name,
                             timeout=args.test_timeout, coverage=coverage))
    results = [None] * len(texts)
    for i, res in zip(where, sandbox.run_batch(jobs, workers=args.sandbox_workers)):
        results[i] = res
    rewards = [0.0 if r is None else
               (r.pass_rate if args.reward == "fraction" else float(r.status == "pass"))
               for r in results]
    return rewards, results, programs


def evaluate(engine, tokenizer, problems, args, d, n: int, temperature: float) -> dict:
    """pass@1 and pass@n (unbiased estimator) over `problems`, each rank sampling its share.

    Returns {"pass@1", f"pass@{n}", "problems", "rates": {problem id: solved share}}; the
    per-problem rates feed --offline-filter and DRIVE's hard focus.
    """
    mine = problems[d.rank::d.world]
    outs = engine.generate([prompt_text(tokenizer, p) for p in mine], n=n,
                           temperature=temperature, top_p=args.top_p,
                           max_new_tokens=args.max_new_tokens, seed=args.seed + 7) if mine else []
    flat_p = [p for p in mine for _ in range(n)]
    _, results, _ = score_completions(flat_p, [c.text for o in outs for c in o], args)
    solved = [sum(r is not None and r.status == "pass" for r in results[i * n:(i + 1) * n])
              for i in range(len(mine))]
    counts = gather_objects([(p.id, c) for p, c in zip(mine, solved)])
    total = max(len(counts), 1)
    return {"pass@1": sum(pass_at_k(n, c, 1) for _, c in counts) / total,
            f"pass@{n}": sum(pass_at_k(n, c, n) for _, c in counts) / total,
            "problems": len(counts), "rates": {pid: c / n for pid, c in counts}}


# ----------------------------------------------------------------------------- the trainer

def load_problem_sets(args):
    """Train and eval problems from --train-data / --eval-data (NAME or NAME:PATH[,...])."""
    import data
    def load(spec):
        out = []
        for part in spec.split(","):
            name, _, path = part.partition(":")
            split = "train" if spec is args.train_data else "test"
            out += data.load_problems(name, split=split, path=path or None)
        return out
    train = load(args.train_data)
    evals = train if args.eval_data == args.train_data else load(args.eval_data)
    if args.max_problems:
        train, evals = train[:args.max_problems], evals[:args.max_problems]
    if not train:
        raise SystemExit(f"--train-data {args.train_data!r} gave no problems with tests.")
    return train, evals


def generate_and_score(engine, tokenizer, batch, args, seed: int, prefixes=None,
                       coverage: bool = False):
    """Sample args.group_size completions per problem of `batch` and run them on the tests.

    Returns (prompt_ids per problem, completions [P * G], rewards, results, programs), the
    flat lists ordered problem by problem. Shared with ppo_fgo.py (which asks for coverage).
    """
    G = args.group_size
    prompts = [prompt_text(tokenizer, p, prefixes[i] if prefixes else "")
               for i, p in enumerate(batch)]
    outs = engine.generate(prompts, n=G, temperature=args.temperature, top_p=args.top_p,
                           max_new_tokens=args.max_new_tokens, seed=seed)
    comps = [c for o in outs for c in o]
    flat = [p for p in batch for _ in range(G)]
    flat_prefix = [x for x in prefixes for _ in range(G)] if prefixes else None
    rewards, results, programs = score_completions(flat, [c.text for c in comps], args,
                                                   flat_prefix, coverage)
    prompt_ids = [tokenizer(t)["input_ids"] for t in prompts]
    return prompt_ids, comps, rewards, results, programs


def rollout_step(engine, tokenizer, problems, rng, args, d, curriculum=None, step: int = 0):
    """Generate args.group_size responses for this rank's prompts, score them, compute group
    advantages; with --dynamic-sampling, drop constant groups and sample more prompts
    (at most --max-resample extra rounds). Returns (samples, stats).

    curriculum (cccs.py): .pool(problems, step) narrows the problems (DRIVE hard focus),
    .prefix(problem) gives a CCCS prefix, .update(problem_id, rewards) sees every group's
    rewards -- gathered from all ranks so every rank's schedule stays identical.
    """
    G = args.group_size
    pool = curriculum.pool(problems, step) if curriculum else problems
    per_rank = max(1, args.prompts_per_step // d.world)
    samples, rewards_all, lengths, truncated, no_code, kept, seen = [], [], [], 0, 0, 0, 0
    updates = []
    for attempt in range(1 + (args.max_resample if args.dynamic_sampling else 0)):
        need = per_rank - kept
        if need <= 0:
            break
        # Every rank draws the same global batch (same rng), then takes its own slice.
        batch = [pool[rng.randrange(len(pool))] for _ in range(per_rank * d.world)]
        seed = rng.randrange(2**31)
        batch = batch[d.rank::d.world][:need]
        prefixes = [curriculum.prefix(p) for p in batch] if curriculum else None
        prompt_ids, comps, rewards, _, programs = generate_and_score(
            engine, tokenizer, batch, args, seed + d.rank, prefixes)
        r = torch.tensor(rewards)
        adv = group_advantages(r, G, args.adv_scale)
        keep = dynamic_sampling_keep(r, G) if args.dynamic_sampling else \
            torch.ones(len(batch), dtype=torch.bool)
        for g, problem in enumerate(batch):
            seen += 1
            updates.append((problem.id, rewards[g * G:(g + 1) * G]))
            if not keep[g]:
                continue
            kept += 1
            for j in range(g * G, (g + 1) * G):
                c = comps[j]
                mask = [0] * len(c.token_ids) if (args.overlong_filter and
                                                   c.finish_reason == "length") else None
                samples.append(Sample(prompt_ids[g], c.token_ids, float(adv[j]), mask,
                                      rewards[j], key=(problem.id, j)))
        rewards_all += rewards
        lengths += [len(c.token_ids) for c in comps]
        truncated += sum(c.finish_reason == "length" for c in comps)
        no_code += sum(p is None for p in programs)
    if curriculum is not None:
        for pid, rs in gather_objects(updates):
            curriculum.update(pid, rs)
    stats = {"reward_sum": sum(rewards_all), "reward_sq": sum(x * x for x in rewards_all),
             "pass_sum": sum(x >= 1.0 for x in rewards_all), "samples": len(rewards_all),
             "len_sum": sum(lengths), "truncated": truncated, "no_code": no_code,
             "groups_seen": seen, "groups_kept": kept}
    return samples, stats


def gather_objects(items: list) -> list:
    """Concatenate a Python list from every rank, in rank order (identity in a world of 1)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(items)
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def reduce_rollout_stats(s: dict) -> dict:
    from model import all_reduce_sum
    t = {k: all_reduce_sum(v) for k, v in s.items()}
    n = max(t["samples"], 1)
    mean = t["reward_sum"] / n
    return {"reward_mean": mean, "reward_std": max(t["reward_sq"] / n - mean * mean, 0) ** 0.5,
            "pass_rate": t["pass_sum"] / n, "response_len": t["len_sum"] / n,
            "truncated_frac": t["truncated"] / n, "no_code_frac": t["no_code"] / n,
            "groups_kept_frac": t["groups_kept"] / max(t["groups_seen"], 1)}


def sft_examples(tokenizer, problems):
    """(prompt, reference answer + EOS) pairs from every reference solution."""
    import data
    out = []
    for p in problems:
        ids = tokenizer(prompt_text(tokenizer, p))["input_ids"]
        for sol in p.solutions:
            ans = tokenizer(data.format_answer(sol))["input_ids"] + [tokenizer.eos_token_id]
            out.append(Sample(ids, ans, 1.0))
    return out


def sft(policy, tokenizer, problems, args, d, log, examples=None):
    """Supervised warm start (--sft-steps) on the reference solutions, so RL starts from a
    policy that sometimes earns reward. Same function fine-tunes real models. It has its own
    AdamW (lr --sft-lr, warm-up then cosine); RL starts with a fresh optimizer.
    `examples` (Samples) replaces the single-agent coder examples (agents.py's roles)."""
    from model import warmup_cosine
    examples = sft_examples(tokenizer, problems) if examples is None else examples
    if not examples or args.sft_steps <= 0:
        return
    rng = random.Random(args.seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.sft_lr, weight_decay=0.0)
    sched = warmup_cosine(optimizer, args.warmup_steps, args.sft_steps)
    from tqdm import tqdm
    bar = tqdm(range(args.sft_steps), desc="sft", disable=not d.main, dynamic_ncols=True)
    for step in bar:
        batch = [examples[rng.randrange(len(examples))] for _ in range(args.sft_batch)]
        st = train_on_samples(policy, optimizer, batch[d.rank::d.world], sft_loss_fn(args),
                              micro_batch=args.micro_batch, agg="token-mean", max_len=None,
                              pad_id=tokenizer.pad_token_id, device=d.device,
                              max_grad_norm=args.max_grad_norm)
        sched.step()
        bar.set_postfix(nll=f"{st['loss']:.3f}")
        if step % 20 == 0 or step == args.sft_steps - 1:
            log({"phase": "sft", "step": step, "nll": st["loss"], "grad_norm": st["grad_norm"]})


def setup_policy(args, d, value_head: bool = False):
    """Model path, tokenizer, FSDP-sharded policy (and frozen reference when beta > 0), engine.
    value_head: give the policy a scalar head inside its FSDP root (PPO's shared critic)."""
    from engines import make_engine
    from model import PolicyLogprobs, load_causal_lm, load_tokenizer, resolve_model, shard_model
    if d.device.type == "cpu" and args.cpu_threads > 0:
        # Tiny models are overhead-bound: extra threads only fight the sandbox's workers.
        torch.set_num_threads(args.cpu_threads)
    path = resolve_model(args.model, seed=args.model_seed)
    tokenizer = load_tokenizer(path)
    # The engine first: on GPU vLLM checks at start-up that its share of memory is free.
    engine = make_engine(args.engine, path, d.device, seed=args.seed + d.rank,
                         tensor_parallel_size=args.engine_tp,
                         gpu_memory_utilization=args.engine_mem, sleep_level=args.sleep_level,
                         max_model_len=args.max_model_len)
    policy = shard_model(PolicyLogprobs(load_causal_lm(path, d.device), args.logprob_chunk,
                                        value_head=value_head),
                         d.device, args.grad_checkpointing)
    ref = None
    if args.beta > 0:
        ref = shard_model(PolicyLogprobs(load_causal_lm(path, d.device), args.logprob_chunk),
                          d.device).eval().requires_grad_(False)
    return path, tokenizer, policy, ref, engine


def sync_weights(policy, engine, d):
    """Push the trainer's weights into the generation engine (every rank into its own)."""
    from model import iter_full_params
    engine.load_weights(iter_full_params(policy, d.device))


class MetricsLog:
    """Rank 0 appends one JSON object a line to <out>/metrics.jsonl."""

    def __init__(self, out_dir: str, main: bool):
        self.path = os.path.join(out_dir, "metrics.jsonl") if main else None

    def __call__(self, row: dict):
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps({k: (round(v, 6) if isinstance(v, float) else v)
                                    for k, v in row.items()}) + "\n")


def run_eval(engine, tokenizer, problems, args, d, log, say, when: str) -> dict:
    res = evaluate(engine, tokenizer, problems, args, d, args.eval_n, args.eval_temperature)
    n = args.eval_n
    say(f"[grpo] {when.replace('_', ' ')}: pass@1 {res['pass@1']:.3f}  pass@{n} {res[f'pass@{n}']:.3f}"
        f"  ({res['problems']} problems, {n} samples each, T={args.eval_temperature})")
    log({"phase": "eval", "when": when, **{k: v for k, v in res.items() if k != "rates"}})
    return res


def train(args) -> dict:
    """SFT warm start -> eval -> GRPO steps -> eval, with checkpoints and metrics."""
    from tqdm import tqdm
    from model import (Timer, init_distributed, latest_checkpoint, load_checkpoint,
                       seed_everything, warmup_cosine)
    d = init_distributed()
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = MetricsLog(args.out, d.main)
    say = print if d.main else (lambda *a, **k: None)
    t0 = time.time()
    train_p, eval_p = load_problem_sets(args)
    path, tokenizer, policy, ref, engine = setup_policy(args, d)
    say(f"[grpo] model {args.model} ({path}), engine {engine.name}, {d.world} rank(s) on "
        f"{d.device.type}, {len(train_p)} train / {len(eval_p)} eval problems")

    ckpt = latest_checkpoint(args.out) if args.resume else None
    if args.resume and ckpt is None:
        say(f"[grpo] --resume: no checkpoint in {args.out}; starting from scratch")
    state, rates = {}, {}
    if ckpt is None:
        sft(policy, tokenizer, train_p, args, d, log)
        sync_weights(policy, engine, d)
        if args.eval_n > 0:
            before = run_eval(engine, tokenizer, eval_p, args, d, log, say, "before_rl")
            state["pass_at_1_before_rl"] = before["pass@1"]
            rates = before["rates"]
        if args.eval_only:
            return finish_run(args, d, state, t0, say)
    if (args.offline_filter or args.hard_focus) and ckpt is None:
        # Per-problem solve rates of the starting policy on the TRAIN problems.
        if not set(p.id for p in train_p) <= set(rates):
            rates = evaluate(engine, tokenizer, train_p, args, d, max(args.eval_n, 4),
                             args.temperature)["rates"]
    if args.offline_filter and ckpt is None:
        import cccs
        kept = set(cccs.offline_filter({p.id: rates[p.id] for p in train_p}))
        say(f"[grpo] --offline-filter kept {len(kept)}/{len(train_p)} train problems "
            f"(dropped those every sample or no sample solved)")
        state["train_ids"] = sorted(kept, key=str)
    if "train_ids" in state:
        keep = set(state["train_ids"])
        train_p = [p for p in train_p if p.id in keep] or train_p
    curriculum = make_curriculum(args, train_p, rates)

    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, betas=(0.9, 0.99),
                                  weight_decay=args.weight_decay)
    scheduler = warmup_cosine(optimizer, args.warmup_steps, args.steps, args.min_lr_ratio)
    rng = random.Random(args.seed)
    start = 0
    if ckpt is None:
        # step_0 = the warm-started policy: --resume skips SFT, and it can seed other runs.
        save_step(args, 0, policy, tokenizer, optimizer, scheduler, state, rng, curriculum, d)
    if ckpt is not None:
        state = load_checkpoint(ckpt, policy, optimizer, scheduler, d)
        start = state["step"]
        rng.setstate(rng_state_from_json(state["rng"]))
        if curriculum is not None and "curriculum" in state:
            curriculum.load_state_dict(state["curriculum"])
        if "train_ids" in state:
            keep = set(state["train_ids"])
            train_p = [p for p in train_p if p.id in keep] or train_p
        sync_weights(policy, engine, d)
        say(f"[grpo] resumed from {ckpt} at step {start}")

    timer = Timer()
    bar = tqdm(range(start, args.steps), desc="grpo", disable=not d.main, dynamic_ncols=True,
               initial=start, total=args.steps)
    for step in bar:
        # --- generate, reward, advantages -------------------------------------------------
        with timer("generate+reward"):
            samples, rs = rollout_step(engine, tokenizer, train_p, rng, args, d, curriculum,
                                       step)
        rs = reduce_rollout_stats(rs)
        engine.sleep()        # GPU: free the engine's memory for the update (no-op on CPU)
        # --- policy update (reference log-probs inside the loss when beta > 0) -------------
        with timer("update"):
            st = train_on_samples(policy, optimizer, samples, grpo_loss_fn(args, ref),
                                  micro_batch=args.micro_batch, agg=args.agg,
                                  max_len=args.max_new_tokens, pad_id=tokenizer.pad_token_id,
                                  device=d.device, max_grad_norm=args.max_grad_norm,
                                  temperature=args.temperature)
            scheduler.step()
        # --- weight sync --------------------------------------------------------------------
        with timer("sync"):
            sync_weights(policy, engine, d)
        row = {"phase": "rl", "step": step + 1, **rs, **st, "lr": scheduler.get_last_lr()[0],
               **timer.pop(), **(curriculum.stats() if curriculum else {})}
        log(row)
        bar.set_postfix(reward=f"{rs['reward_mean']:.3f}", len=f"{rs['response_len']:.0f}")
        # --- checkpoint ---------------------------------------------------------------------
        save_step(args, step + 1, policy, tokenizer, optimizer, scheduler, state, rng,
                  curriculum, d)
    if args.eval_n > 0:
        after = run_eval(engine, tokenizer, eval_p, args, d, log, say, "after_rl")
        state["pass_at_1_after_rl"] = after["pass@1"]
    engine.close()        # vLLM's teardown also ends the process group it joined
    return finish_run(args, d, state, t0, say)


def save_step(args, step, policy, tokenizer, optimizer, scheduler, state, rng, curriculum, d,
              extras=None) -> None:
    """Checkpoint after `step` when --save-every asks (every N steps, step 0 and the last),
    with the data position (rng) and the curriculum's state in trainer_state.json."""
    from model import save_checkpoint
    if not args.save_every or (step % args.save_every and step != args.steps):
        return
    state.update(rng=rng.getstate())
    if curriculum is not None:
        state["curriculum"] = curriculum.state_dict()
    save_checkpoint(args.out, step, policy, tokenizer, optimizer, scheduler, state, d,
                    extras=extras)


def make_curriculum(args, problems, rates):
    """--curriculum cccs and/or --hard-focus -> the object rollout_step consults (cccs.py)."""
    if args.curriculum == "none" and not args.hard_focus:
        return None
    import cccs
    return cccs.make_curriculum(args, problems, rates)


def rng_state_from_json(x):
    """JSON turns random.getstate()'s tuples into lists; setstate wants tuples back."""
    return tuple(rng_state_from_json(v) for v in x) if isinstance(x, list) else x


def finish_run(args, d, state, t0, say):
    summary = {k: v for k, v in state.items() if k not in ("rng", "curriculum", "train_ids")}
    summary.update(wall_seconds=round(time.time() - t0, 1), model=args.model, seed=args.seed,
                   steps=args.steps)
    if "pass_at_1_before_rl" in summary and "pass_at_1_after_rl" in summary:
        summary["pass_at_1_gain"] = summary["pass_at_1_after_rl"] - summary["pass_at_1_before_rl"]
    if d.main:
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        say(f"[grpo] summary: {json.dumps(summary)}  -> {args.out}/summary.json")
    if dist.is_initialized():
        dist.barrier()
    return summary


# ----------------------------------------------------------------------------- flags

PRESETS = {
    # The CPU default: everything offline on a 2-core machine in minutes.
    "cpu": {},
    # A real run (run.sh on a GPU machine): AT-GRPO/DRIVE-like settings at 1.7B scale.
    "gpu": dict(model="Qwen/Qwen3-1.7B", train_data="apps,code_contests",
                eval_data="livecodebench", sft_steps=0, steps=200, prompts_per_step=64,
                group_size=8, max_new_tokens=4096, lr=1e-6, warmup_steps=10,
                micro_batch=4, temperature=1.0, eval_temperature=0.6, top_p=1.0,
                eval_n=4, max_problems=0, grad_checkpointing=True, save_every=20,
                test_timeout=6.0, logprob_chunk=512, out="runs/grpo-gpu"),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpo.py", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="GRPO on code problems with sandbox rewards. CPU default: tiny model, "
                    "built-in problems, SFT warm start, then GRPO; prints pass@1 before and "
                    "after RL. Launch on GPUs with torchrun --nproc_per_node N grpo.py "
                    "--preset gpu.")
    a = p.add_argument
    a("--preset", choices=sorted(PRESETS), default="cpu",
      help="defaults for a setting; explicit flags override them")
    g = p.add_argument_group("model and data")
    g.add_argument("--model", default="tiny",
                   help="'tiny' (offline Qwen2-architecture model built here), a hub id or a "
                        "local path (e.g. Qwen/Qwen3-1.7B as in AT-GRPO)")
    g.add_argument("--model-seed", type=int, default=0, help="seed of the tiny model's weights")
    g.add_argument("--train-data", default="builtin",
                   help="comma list of NAME or NAME:PATH (apps, apps_plus, code_contests, "
                        "livecodebench, builtin); no path = Hugging Face hub")
    g.add_argument("--eval-data", default="builtin", help="same format as --train-data")
    g.add_argument("--max-problems", type=int, default=0, help="keep the first N problems (0 = all)")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="generation engine: vLLM (auto: when it imports and starts) or "
                        "transformers' generate (always works)")
    g.add_argument("--engine-tp", type=int, default=1,
                   help="vLLM tensor-parallel size: consecutive ranks share one engine "
                        "(1 for 1.7B; 2 for 8B on 40-48 GB GPUs; 4 for 32B)")
    g.add_argument("--engine-mem", type=float, default=0.4,
                   help="vLLM gpu_memory_utilization: share of the device's memory it reserves")
    g.add_argument("--sleep-level", type=int, choices=[1, 2], default=1,
                   help="vLLM sleep between generation and update on GPU: 1 offloads weights, "
                        "2 discards them (they are reloaded by the weight sync)")
    g.add_argument("--max-model-len", type=int, default=None,
                   help="vLLM context length (default: prompt budget + --max-new-tokens)")
    g = p.add_argument_group("GRPO")
    g.add_argument("--steps", type=int, default=130, help="RL optimizer steps (DRIVE stage 1: 32 at their scale)")
    g.add_argument("--prompts-per-step", type=int, default=8, help="prompts per step over all ranks (AT-GRPO: 128)")
    g.add_argument("--group-size", type=int, default=16, help="samples per prompt G (code recipes 8-16; DRIVE stage 2: 64)")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature, also applied to the trainer's logits (papers: 1.0)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling (1.0 keeps sampler and trainer log-probs consistent)")
    g.add_argument("--max-new-tokens", type=int, default=96, help="response budget (AT-GRPO 4096; DRIVE 24k in stage 1)")
    g.add_argument("--reward", choices=["binary", "fraction"], default="binary",
                   help="binary: 1 when every test passes; fraction: share of tests passed")
    g.add_argument("--adv-scale", choices=["group", "batch", "none"], default="group",
                   help="advantage normalisation: group std (GRPO), batch std, none (Dr. GRPO)")
    g.add_argument("--agg", choices=AGGREGATIONS, default="token-mean",
                   help="loss aggregation: token-mean (DAPO), seq-mean-token-mean (GRPO), "
                        "seq-mean-token-sum-norm (Dr. GRPO)")
    g.add_argument("--eps-low", type=float, default=0.2, help="lower clip (PPO/GRPO 0.2)")
    g.add_argument("--eps-high", type=float, default=0.28, help="upper clip (DAPO clip-higher 0.28)")
    g.add_argument("--beta", type=float, default=0.0, help="k3 KL weight to the initial policy (code recipes: 0)")
    g.add_argument("--dynamic-sampling", action="store_true",
                   help="DAPO: drop groups whose rewards are all equal and sample more prompts")
    g.add_argument("--max-resample", type=int, default=2, help="extra sampling rounds for --dynamic-sampling")
    g.add_argument("--overlong-filter", action="store_true",
                   help="mask the loss of responses cut at --max-new-tokens (DAPO)")
    g = p.add_argument_group("curricula (cccs.py)")
    g.add_argument("--curriculum", choices=["none", "cccs"], default="none",
                   help="cccs: StepCoder's curriculum of code completion subtasks")
    g.add_argument("--cccs-threshold", type=float, default=0.8,
                   help="moving-average pass rate at which a problem moves to its next stage")
    g.add_argument("--cccs-average", choices=["window", "ema"], default="window",
                   help="moving average of the pass rate: last --cccs-span updates, or EMA")
    g.add_argument("--cccs-span", type=int, default=4, help="window length (or EMA span) of that average")
    g.add_argument("--cccs-loops", action="store_true", help="also split at for/while loops")
    g.add_argument("--hard-focus", default="",
                   help="DRIVE stage 2: KEEP:STEPS phases, e.g. 72:64,50:32,25:32 keeps the 72 "
                        "lowest-pass-rate problems for 64 steps, then 50 for 32, then 25 for 32")
    g.add_argument("--offline-filter", action="store_true",
                   help="before RL, drop train problems every sample solves or none does "
                        "(Skywork/AceReason; DRIVE's data curation)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--lr", type=float, default=1.5e-4, help="RL learning rate (AT-GRPO 1e-6 at 1.7B-8B)")
    g.add_argument("--min-lr-ratio", type=float, default=1.0, help="cosine floor as a share of --lr (1.0 = constant after warm-up)")
    g.add_argument("--weight-decay", type=float, default=0.0, help="AdamW weight decay (AT-GRPO 0.01)")
    g.add_argument("--warmup-steps", type=int, default=3, help="linear LR warm-up steps (SFT and RL)")
    g.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping")
    g.add_argument("--micro-batch", type=int, default=32, help="sequences per forward/backward (gradient accumulation)")
    g.add_argument("--grad-checkpointing", action="store_true", help="recompute activations in backward")
    g.add_argument("--logprob-chunk", type=int, default=256, help="positions per chunk of the log-prob computation")
    g = p.add_argument_group("warm start and evaluation")
    g.add_argument("--sft-steps", type=int, default=200, help="supervised steps on reference solutions before RL (0 = none)")
    g.add_argument("--sft-lr", type=float, default=1e-3, help="SFT learning rate")
    g.add_argument("--sft-batch", type=int, default=32, help="SFT examples per step over all ranks")
    g.add_argument("--eval-n", type=int, default=8, help="samples per problem for pass@1/pass@n (0 = no evaluation)")
    g.add_argument("--eval-temperature", type=float, default=1.0, help="evaluation temperature (AT-GRPO 0.6)")
    g.add_argument("--eval-only", action="store_true", help="evaluate (after --sft-steps, if any) and stop")
    g = p.add_argument_group("sandbox")
    g.add_argument("--test-timeout", type=float, default=2.0, help="seconds per test")
    g.add_argument("--sandbox-workers", type=int, default=None, help="sandbox processes (default: one per core)")
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling, data order and SFT")
    g.add_argument("--cpu-threads", type=int, default=1,
                   help="torch threads per process on CPU (0 = torch default); on 2 cores "
                        "1 was 3-5x faster than 2 for the tiny model on a loaded machine")
    g.add_argument("--out", default="runs/grpo", help="output dir: metrics.jsonl, summary.json, step_N/ checkpoints")
    g.add_argument("--save-every", type=int, default=0, help="checkpoint every N steps and at the end (0 = never)")
    g.add_argument("--resume", action="store_true", help="continue from <out>/latest")
    return p


def parse_args(argv=None):
    parser = build_parser()
    pre, _ = parser.parse_known_args(argv)
    parser.set_defaults(**PRESETS[pre.preset])
    return parser.parse_args(argv)


def run_entry_point(train_fn, parse_fn, argv=None):
    """main() of grpo.py, ppo_fgo.py and agents.py: quiet the libraries' own progress output,
    parse the flags, train, leave the process group."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")   # keep our progress bar readable
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    from model import close_distributed
    finished = False
    try:
        train_fn(parse_fn(argv))
        finished = True
    finally:
        close_distributed(wait=finished)


def main(argv=None):
    run_entry_point(train, parse_args, argv)


if __name__ == "__main__":
    main()
