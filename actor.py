"""The policy side of a step: Samples and their batches, the forward pass, the optimizer steps
(update / updates; update_and_sync, every step's tail: updates, the schedule, the weight sync
into the engine), the no-grad scores (score) and the SFT warm start (sft).

The update protocol (update(), one optimizer step over a rank's samples):

    forward(policy, batch) -> Forward(logp, entropy, values)          each [B, L-1]
    loss_fn(out: Forward, batch: Batch, denom: Denominators) -> (scalar loss, stats of floats)

The loss sees only its arguments: the forward's tensors, the batch's per-token tensors
(advantages, mask, response_mask and the typed per-token fields the method put on its
Samples: old_logp, ref_logp, sampler_logp, old_values, returns), and the global normalisers
of the step for batch.mask and batch.response_mask (every micro-batch on every rank), so that
the summed micro-batch losses are the loss of the unsplit batch and the gradient does not
depend on the split. The methods' loss_fn unpack these into losses.py's functions.
skip_zero_advantage=True (the caller says when it is exact: a zero advantage and no other
term, as in GRPO without KL) leaves those samples out of the forward/backward; they still
count in the normalisers.

Sequence layout (model.py): each row is prompt + response, right-padded to L; log-prob
position t scores token t+1, so per-token tensors are [B, L-1].
"""
from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

import data
from infra.metrics import Timer, progress
from infra.model import (
    Dist,
    Forward,
    PolicyLogprobs,
    UserError,
    all_reduce_sum,
    iter_full_params,
    reduce_sums,
    response_mask,
    warmup_cosine,
)
from losses import aggregate, local_denominator
from rollouts import prompt_text

# ----------------------------------------------------------------------------- loss normalisers

def global_denominator(masks: list[torch.Tensor], agg: str, max_len: int | None = None) -> float:
    """The divisor `aggregate` would use on the concatenation of `masks` (all micro-batches of
    this rank), summed over ranks (losses.local_denominator, all-reduced)."""
    return max(all_reduce_sum(local_denominator(masks, agg, max_len)), 1.0)


@dataclass(frozen=True)
class Denominators:
    """The global normalisers of one optimizer step (see global_denominator)."""
    mask: float        # of batch.mask: the policy loss
    response: float    # of batch.response_mask: losses over every response token (PPO's value)


# ----------------------------------------------------------------------------- samples, batches

# What a Sample / Batch may carry per response token beside its advantage (None: absent).
PER_TOKEN = ("old_logp", "ref_logp", "sampler_logp", "old_values", "returns")


@dataclass
class Sample:
    """One trained response: token ids, its advantage and an optional per-token loss mask.

    advantage: a float (GRPO, broadcast over tokens) or a list per response token (PPO).
    token_mask: 1/0 per response token (FGO, overlong filtering); None keeps every token.
    old_logp, ref_logp, sampler_logp, old_values, returns: optional lists per response token
    (the sampling policy's log-probs from a no-grad pass, the reference's, the engine's, the
    critic's values, PPO's value targets), collated like `advantage` into [B, L-1] tensors
    of the same names on the Batch.
    Functions that add to a Sample return a new one (with_scores, dataclasses.replace).
    """
    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float | list[float] = 0.0
    token_mask: list[int] | None = None
    reward: float = 0.0
    key: object = None
    old_logp: list[float] | None = None
    ref_logp: list[float] | None = None
    sampler_logp: list[float] | None = None
    old_values: list[float] | None = None
    returns: list[float] | None = None

    def __post_init__(self):
        self.prompt_ids, self.response_ids = list(self.prompt_ids), list(self.response_ids)


def with_scores(samples: list[Sample], **per_sample: list[list[float]]) -> list[Sample]:
    """New Samples with per-token fields set, e.g. with_scores(s, ref_logp=scores.ref_logp):
    each keyword (one of PER_TOKEN) gives one list per sample."""
    unknown = set(per_sample) - set(PER_TOKEN)
    if unknown:
        raise TypeError(f"with_scores: unknown per-token fields {sorted(unknown)}")
    return [dataclasses.replace(s, **{k: v[i] for k, v in per_sample.items()})
            for i, s in enumerate(samples)]


@dataclass
class Batch:
    """Right-padded rows of prompt + response (collate). input_ids, attention_mask [B, L];
    the rest [B, L-1] (position t scores token t+1): response_mask (the response tokens),
    mask (those kept by the Samples' token_mask: the policy-loss mask), advantages, and the
    per-token fields the Samples carry (None when they carry none)."""
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    old_logp: torch.Tensor | None = None       # sampling policy, no-grad pass (off-policy)
    ref_logp: torch.Tensor | None = None       # frozen reference (KL)
    sampler_logp: torch.Tensor | None = None   # the engine's, as it sampled (TIS, mismatch)
    old_values: torch.Tensor | None = None     # critic before the update (PPO)
    returns: torch.Tensor | None = None        # GAE value targets (PPO)


# (A reader may skip collate, max_over_ranks and micro_batches: padding into tensors, and the
# one-row padding batches that keep every FSDP rank in every collective.)

def collate(samples: list[Sample], pad_id: int, device) -> Batch:
    """Samples -> Batch, per-token values aligned with the log-prob positions (position t
    scores token t+1, see model.response_mask)."""
    rows = [s.prompt_ids + s.response_ids for s in samples]
    L = max(2, max(len(r) for r in rows))
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r)
        attn[i, :len(r)] = 1
    p = torch.tensor([len(s.prompt_ids) for s in samples])
    r = torch.tensor([len(s.response_ids) for s in samples])
    resp = response_mask(p, r, L).to(device)

    def per_token(values) -> torch.Tensor:                       # [B, L-1]
        t = torch.zeros(len(rows), L - 1)
        for i, (s, v) in enumerate(zip(samples, values)):
            start, n = len(s.prompt_ids) - 1, len(s.response_ids)
            if n:
                t[i, start:start + n] = torch.as_tensor(v, dtype=torch.float)
        return t.to(device)

    keep = per_token([1.0 if s.token_mask is None else s.token_mask for s in samples])
    return Batch(ids.to(device), attn.to(device), resp, keep * resp,
                 per_token([s.advantage for s in samples]),
                 **{k: per_token([getattr(s, k) for s in samples]) for k in PER_TOKEN
                    if getattr(samples[0], k) is not None})


def max_over_ranks(n: int, device) -> int:
    t = torch.tensor(n, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


def micro_batches(samples: list[Sample], size: int, pad_id: int, device):
    """Yield (samples, Batch) per micro-batch of `size`. Every rank yields the same number: a
    rank with fewer samples gets ([], a one-row padding batch), so all ranks join every FSDP
    collective of the forward and backward passes; its forward is run and thrown away."""
    chunks = [samples[i:i + size] for i in range(0, len(samples), size)]
    for k in range(max_over_ranks(len(chunks), device)):
        if k < len(chunks):
            yield chunks[k], collate(chunks[k], pad_id, device)
        else:
            yield [], collate([Sample([pad_id], [pad_id])], pad_id, device)


# ----------------------------------------------------------------------------- forward, update

def forward(policy: PolicyLogprobs, batch: Batch, temperature: float = 1.0,
            with_entropy: bool = False, with_values: bool = False) -> Forward:
    """Run the policy on a batch -> model.Forward (logp, and entropy / the value head's values
    when asked). A method with other values (PPO's separate critic) wraps this in its own
    forward_fn (update, score)."""
    return policy(batch.input_ids, batch.attention_mask, temperature=temperature,
                  with_entropy=with_entropy, with_values=with_values)


def update(policy, optimizer, samples: list[Sample], loss_fn, *, micro_batch: int, agg: str,
           max_len: int | None, pad_id: int, device, max_grad_norm: float,
           temperature: float = 1.0, forward_fn=None, also_train: Sequence[tuple] = (),
           skip_zero_advantage: bool = False) -> dict:
    """One optimizer step over `samples` (this rank's share), in micro-batches.

    loss_fn(Forward, Batch, Denominators) -> (loss, stats); see the module docstring. The loss
    is multiplied by the world size because FSDP averages gradients over ranks, so the summed
    gradient equals that of the unsplit batch. forward_fn(batch) -> Forward replaces the
    policy's own forward (with entropy) when the loss needs more (PPO: values); also_train,
    (name, module, optimizer) triples, are modules the same backward trains (PPO's separate
    critic): each is clipped and stepped after the policy, its norm logged as
    <name>_grad_norm. skip_zero_advantage: samples whose advantage is zero everywhere are
    left out of the forward/backward (only exact when their loss has no other term) but still
    count in the normalisers; the stats then describe the trained samples only, plus
    zero_adv_frac (the share skipped).
    Returns token-weighted means of the loss's stats and the entropy, and loss (the step's,
    summed), grad_norm, trained_tokens (and <name>_grad_norm of also_train).
    """
    world = dist.get_world_size() if dist.is_initialized() else 1
    whole = [collate(samples, pad_id, "cpu")] if samples else []     # normalisers: every sample
    denom = Denominators(global_denominator([b.mask for b in whole], agg, max_len),
                         global_denominator([b.response_mask for b in whole], agg, max_len))
    skipped = None
    if skip_zero_advantage:
        n_all = len(samples)
        samples = [s for s in samples if not _all_zero(s.advantage)]
        skipped = (all_reduce_sum(float(n_all - len(samples))), all_reduce_sum(float(n_all)))
    # Similar lengths together: less padding per micro-batch (the sum does not depend on order).
    samples = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.response_ids))
    if forward_fn is None:
        def forward_fn(batch):
            return forward(policy, batch, temperature, with_entropy=True)
    optimizer.zero_grad(set_to_none=True)
    for _, _, other_optimizer in also_train:
        other_optimizer.zero_grad(set_to_none=True)
    sums: dict[str, float] = {}
    loss_sum = tokens = 0.0
    for chunk, batch in micro_batches(samples, micro_batch, pad_id, device):
        out = forward_fn(batch)
        if not chunk:        # padding batch: join the backward's collectives with a zero loss
            (out.logp.sum() * 0 + (0 if out.values is None else out.values.sum() * 0)).backward()
            continue
        loss, stats = loss_fn(out, batch, denom)
        (loss * world).backward()
        loss_sum += float(loss.detach())      # global normaliser: the sum IS the step's loss
        n_tok = float(batch.mask.sum())
        stats["entropy"] = float((out.entropy.detach() * batch.mask).sum()) / max(n_tok, 1)
        for key, v in stats.items():          # token-weighted sums, averaged below
            sums[key] = sums.get(key, 0.0) + v * n_tok
        tokens += n_tok
    result = {"grad_norm": _clip_and_step(policy, optimizer, max_grad_norm)}
    for name, module, other_optimizer in also_train:
        result[f"{name}_grad_norm"] = _clip_and_step(module, other_optimizer, max_grad_norm)
    tokens = all_reduce_sum(tokens)
    result = {**{k: v / max(tokens, 1) for k, v in reduce_sums(sums).items()},
              "loss": all_reduce_sum(loss_sum), **result, "trained_tokens": tokens}
    if skipped is not None:
        result["zero_adv_frac"] = skipped[0] / max(skipped[1], 1.0)
    return result


def sampler_extras(completion, tis_cap: float) -> dict:
    """The engine's log-probs of a completion as Sample keyword arguments (sampler_logp), for
    the logged mismatch and TIS; {} when the engine gave none (then a TIS cap tis_cap > 0 is
    an error)."""
    if completion.logprobs is None:
        if tis_cap > 0:
            raise UserError("--tis-cap needs the engine's sampler log-probs, and this engine "
                            "returned none; use --engine hf or vllm, or drop --tis-cap.")
        return {}
    return {"sampler_logp": completion.logprobs}


def mini_batch_slices(samples: list, m: int) -> list[list]:
    """m consecutive slices of this rank's samples, sizes differing by at most one. With the
    samples dealt to ranks round-robin and each rank's share a multiple of m, the ranks' k-th
    slices together are the k-th slice of the whole batch: the split does not depend on the
    number of ranks."""
    n = len(samples)
    return [samples[k * n // m:(k + 1) * n // m] for k in range(m)]


def updates(policy, optimizer, samples: list[Sample], loss_fn, *, epochs: int = 1,
            mini_batches: int = 1, **update_kw) -> dict:
    """epochs x mini_batches optimizer steps on one rollout batch: each epoch passes over the
    samples in `mini_batches` consecutive slices (no reshuffle), each slice one update() with
    its own global normalisers. epochs = mini_batches = 1 is exactly one update(). From the
    second step on the policy is not the one that sampled, so the loss needs the old log-probs
    (Sample.old_logp, from a no-grad score() before the first step): ratio and clip act.
    Returns the mean of each stat over the steps that report it (a step whose samples all
    had zero advantage and were skipped trains nothing and reports no ratio or clip
    fraction: a zero there would dilute them), and updates (how many)."""
    steps = [update(policy, optimizer, part, loss_fn, **update_kw)
             for _ in range(epochs) for part in mini_batch_slices(samples, mini_batches)]
    keys = sorted(set().union(*steps))
    out = {k: statistics.fmean(s[k] for s in steps if k in s) for k in keys}
    if len(steps) > 1:   # the first step is on-policy by construction; the last one shows drift
        last = next((s for s in reversed(steps) if "clip_frac" in s), {})   # that trained
        out.update(updates=len(steps), clip_frac_last=last.get("clip_frac", 0.0),
                   approx_kl_last=last.get("approx_kl", 0.0))
    return out


def update_and_sync(policy, optimizer, scheduler, engine, samples: list[Sample], loss_fn,
                    timer: Timer, **update_kw) -> dict:
    """The tail of every method's step: updates() (timed "update"), the schedule's step, then
    the new weights into the generation engine (timed "sync"). update_kw: updates()'s and
    update()'s keywords. Returns updates()'s stats."""
    with timer("update"):
        stats = updates(policy, optimizer, samples, loss_fn, **update_kw)
        scheduler.step()
    with timer("sync"):
        sync_weights(policy, engine)
    return stats


def sync_weights(policy, engine) -> None:
    """Push the trainer's weights into the generation engine (every rank into its own)."""
    engine.load_weights(iter_full_params(policy))


def _all_zero(advantage) -> bool:
    """True when a Sample's advantage (a float, or a list per token) is zero everywhere."""
    if isinstance(advantage, (list, tuple)):
        return all(a == 0 for a in advantage)
    return advantage == 0


def _clip_and_step(module, optimizer, max_grad_norm: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(module.parameters(), max_grad_norm)
    optimizer.step()
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


@dataclass
class Scores:
    """Per sample, per response token (lists): the policy's log-probs, the reference's, the
    values (None where not asked)."""
    logp: list[list[float]] | None = None
    ref_logp: list[list[float]] | None = None
    values: list[list[float]] | None = None


@torch.no_grad()
def score(samples: list[Sample], *, micro_batch: int, pad_id: int, device,
          temperature: float = 1.0, policy=None, ref=None, forward_fn=None,
          with_values: bool = False, logp: bool = True) -> Scores:
    """No-grad pass before an update: log-probs of the sampled tokens under `policy` (the one
    that generated them) and `ref`, in micro-batches; with_values also the values of the
    policy's forward: forward_fn(batch) -> Forward when given (PPO: a separate critic's),
    else the policy's value head; logp False: the values alone (forward_fn's Forward has no
    log-probs: PPO on-policy, its critic's pass only). Every rank runs the same number of
    forwards."""
    if forward_fn is None:
        def forward_fn(batch):
            return forward(policy, batch, temperature, with_values=with_values)
    asked = [name for name, on in (("logp", policy is not None and logp),
                                   ("ref_logp", ref is not None),
                                   ("values", policy is not None and with_values)) if on]
    lists: dict[str, list] = {name: [] for name in asked}
    for chunk, batch in micro_batches(samples, micro_batch, pad_id, device):
        got = {}
        if policy is not None:
            out = forward_fn(batch)
            got.update(logp=out.logp, values=out.values)
        if ref is not None:
            got["ref_logp"] = forward(ref, batch, temperature).logp
        for i, s in enumerate(chunk):
            a, n = len(s.prompt_ids) - 1, len(s.response_ids)
            for name in asked:
                lists[name].append(got[name][i, a:a + n].tolist())
    return Scores(**lists)


# ----------------------------------------------------------------------------- SFT warm start

def sft_examples(tokenizer, problems) -> list[Sample]:
    """(prompt, reference answer + EOS) pairs from every reference solution."""
    out = []
    for p in problems:
        ids = tokenizer(prompt_text(tokenizer, p))["input_ids"]
        for sol in p.solutions:
            ans = tokenizer(data.format_answer(sol))["input_ids"] + [tokenizer.eos_token_id]
            out.append(Sample(ids, ans, 1.0))
    return out


def sft_loss(out: Forward, batch: Batch, denom: Denominators):
    """Supervised warm start: token-mean negative log-likelihood of the reference answers."""
    return aggregate(-out.logp, batch.mask, "token-mean", denom.mask), {}


def sft(policy, tokenizer, examples: list[Sample], d: Dist, log, *, steps: int, lr: float,
        batch: int, warmup_steps: int, micro_batch: int, max_grad_norm: float,
        seed: int) -> None:
    """Supervised warm start: `steps` optimizer steps on `examples` (sft_examples: the
    reference solutions), so RL starts from a policy that sometimes earns reward. The same
    function fine-tunes real models. Each step draws `batch` examples over all ranks (with
    replacement, from seed + 1); its own AdamW (lr, warm-up then cosine); RL starts with a
    fresh optimizer. log: the metrics sink (a row every 20 steps and the last)."""
    if not examples or steps <= 0:
        return
    rng = random.Random(seed + 1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=lr, weight_decay=0.0)
    sched = warmup_cosine(optimizer, warmup_steps, steps)
    bar = progress(range(steps), "sft", steps, enabled=d.main)
    for step in bar:
        drawn = [examples[rng.randrange(len(examples))] for _ in range(batch)]
        st = update(policy, optimizer, drawn[d.rank::d.world], sft_loss,
                    micro_batch=micro_batch, agg="token-mean", max_len=None,
                    pad_id=tokenizer.pad_token_id, device=d.device,
                    max_grad_norm=max_grad_norm)
        sched.step()
        bar.set_postfix(nll=f"{st['loss']:.3f}")
        if step % 20 == 0 or step == steps - 1:
            log({"phase": "sft", "step": step, "nll": st["loss"], "grad_norm": st["grad_norm"]})
