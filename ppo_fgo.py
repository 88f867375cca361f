"""PPO with GAE and a critic, StepCoder's compiler-feedback rewards, and FGO masking.

Paper: Dou et al. 2024, "StepCoder: Improving Code Generation with Reinforcement Learning from
Compiler Feedback" (ACL 2024). StepCoder is PPO (Schulman et al. 2017) with GAE (Schulman et
al. 2015) on a reward computed by running the program on unit tests, plus two additions: CCCS
(a curriculum, cccs.py) and FGO (fine-grained optimization, here).

The equations (per response; t runs over its response tokens, m_t the 0/1 response mask):

    reward        r_t = -beta_kl * (logp_t - ref_t)  +  [t == last valid token] * R
                  R   = stepcoder_reward(sandbox verdict): pass +1, wrong answer -0.3,
                        runtime error / timeout -0.6, compile error -1
    GAE           delta_t = r_t + gamma * V_{t+1} - V_t
                  A_t     = delta_t + gamma * lambda * A_{t+1}        (backwards, valid t only)
                  ret_t   = A_t + V_t
    whitening     A <- (A - mean(A)) / (std(A) + 1e-8)   over the valid tokens of the batch
    policy loss   losses.policy_loss (clipped surrogate), with per-token A_t and mask m_t * f_t
    value loss    0.5 * max((V - ret)^2, (clip(V, V_old - c, V_old + c) - ret)^2)
    FGO           f_t = 0 if token t lies on a code line that no unit test executed, else 1

FGO. The sandbox runs each test a second time under a line tracer and reports the program's
executed lines (union over tests; the verdict comes from the untraced run). A line counts as
"not executed" only if it is executable: it has bytecode (some code object's co_lines() names
it), which is exactly the set of lines sys.settrace can report. Lines without bytecode (blank
lines, comments, `else:`, `try:`, `finally:`, a function's docstring, the closing bracket of a
multi-line call) are neutral and resolved by `fgo_line_mask`: a statement spread over several
lines takes one status for all its lines; a neutral non-blank line takes the status of the
next code line below it (a comment describes, an `else:` opens, what follows), so an unreached
`else:` branch is masked whole, keyword included; blank lines and anything after the last code
line are kept. A test that hit a limit has unknown coverage (executed_lines None), so those
runs (and compile errors) mask nothing.
Tokens outside the code (the fence, prose around it) are kept: FGO only removes code that did
not influence the reward.
A token whose characters touch several lines is masked only if all of them are masked (it also
wrote part of code that ran). Compile errors mask nothing: the whole program earned the -1.

Simplifications and choices (the paper leaves these open):
- The value loss is NOT FGO-masked by default. The critic predicts the return from every
  response state, and GAE bootstraps through all of them (V_{t+1} of a masked token enters the
  advantage of the token before it); leaving those values untrained would corrupt the
  advantages of the executed code around them. FGO only decides which tokens the policy is
  pushed on. --fgo-value-mask masks the value loss with the same f_t (what StepCoder's
  authors' PPO harness does): value loss over m_t * f_t, normalised by their global sum.
- Masked positions of `gae` are skipped (the recursion jumps over them) and get advantage 0;
  responses are right-padded, so for a contiguous response this is the usual GAE with
  V = 0 after the last token (the episode ends there).
- memory_limit and output_limit are runtime failures the program caused: -0.6, like a
  runtime error. A response with no extractable code gets -1, like a compile error (there is
  no program to run).
- The critic defaults to a separate copy of the policy's body (`--critic separate`):
  StepCoder trains it with its own learning rate (critic 1.5e-6 vs policy 5e-7), and
  value-loss gradients through a shared body would move the policy. `--critic shared` puts
  the value head on the policy's own body instead (model.PolicyLogprobs(value_head=True),
  inside the policy's FSDP root): one body in memory instead of two and one forward per
  micro-batch, at the price that vf_coef * value loss also moves the policy's body, at the
  policy's learning rate. The head alone gets --critic-lr (its own AdamW param group,
  constant); the gradient clip covers body and head together. Either way the value loss is
  not FGO-masked unless --fgo-value-mask (above).
- The loop (train: trainer.prepare_run, the critic and the optimizers, trainer.first_step,
  then ppo_step per step: rollout -> StepCoder reward table -> no-grad log-probs and values
  -> KL-in-reward, GAE -> policy + critic update -> weight sync; the math in losses.py):
  the reference and the critic start from the
  policy after the SFT warm start (StepCoder's SFT model) and are saved with every checkpoint
  (ref.pt, critic.pt); advantages are whitened over the tokens the policy loss sees
  (FGO-kept); the critic's learning rate is constant; one PPO epoch by default (--epochs,
  with --mini-batches: actor.updates, the mechanism GRPO uses too), so the ratio is 1 and
  the clip only acts from the second optimizer step on a batch. --tis-cap weights the policy
  loss by truncated importance weights against the engine's log-probs, as in grpo.py.
- FGO trusts coverage only where the sandbox vouches for it: the verdict comes from an
  untraced run and the lines from a separate traced one, and Result.executed_lines is None
  (unknown) when any test's traced run could not account for every line it ran (a limit hit,
  the tracer removed, a thread or fork unreported). Unknown coverage masks nothing and is
  counted (fgo_coverage_unknown_frac).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import math

import torch

import actor
import losses
import rollouts
import trainer
from actor import Sample
from infra import flags
from infra.bookkeeping import policy_optimizer
from infra.model import Forward, critic_like, reduce_sums, reference_like
from infra.samples import sample_records, trace_of
from losses import gae, kl_in_reward, whiten
from sandbox import executable_lines

# ----------------------------------------------------------------------------- rewards

# StepCoder's table (paper, section 3; -0.6 for a timeout is the same authors' harness).
STEPCODER_REWARDS = {
    "pass": 1.0,
    "wrong_answer": -0.3,
    "runtime_error": -0.6,
    "timeout": -0.6,
    "memory_limit": -0.6,   # ours: the program ran and crashed, like a runtime error
    "output_limit": -0.6,   # ours: same
    "compile_error": -1.0,
    "no_code": -1.0,        # ours: nothing to run, like a program that does not compile
}


def stepcoder_reward(status: str | None, table: dict | None = None) -> float:
    """Reward of one response from its sandbox verdict; status None (no code extracted) is
    "no_code". `table` overrides entries of STEPCODER_REWARDS."""
    rewards = {**STEPCODER_REWARDS, **(table or {})}
    key = "no_code" if status is None else status
    if key not in rewards:
        raise ValueError(f"unknown sandbox status {status!r}; expected one of {sorted(rewards)}")
    return float(rewards[key])


# ----------------------------------------------------------------------------- FGO: lines


def _statement_units(tree: ast.AST) -> list[range]:
    """Line ranges that share one status: each simple statement (lineno..end_lineno) and each
    compound statement's header (from its first line to the line before its body)."""
    units = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        inner = [c.lineno if isinstance(c, ast.stmt) else c.pattern.lineno
                 for c in ast.iter_child_nodes(node) if isinstance(c, (ast.stmt, ast.match_case))]
        last = max(node.lineno, min(inner) - 1) if inner else node.end_lineno
        units.append(range(node.lineno, last + 1))
    return units


def fgo_line_mask(program: str, executed_lines: set[int]) -> list[int]:
    """Per line of `program` (index i = line i+1): 0 = code no test executed, 1 = keep.

    See the module docstring for the rules. A program that does not compile keeps every line.
    Example: executed {1, 2, 3} of
        1 def sign(x):
        2     if x >= 0:
        3         return 1
        4     else:            <- neutral, takes line 5's status
        5         return -1    <- executable, not executed
    gives [1, 1, 1, 0, 0].
    """
    lines = program.splitlines()
    runnable = executable_lines(program)
    if not runnable:
        return [1] * len(lines)
    executed = set(executed_lines)
    status: dict[int, int] = {}
    for unit in _statement_units(ast.parse(program)):
        if runnable.intersection(unit):
            ran = int(bool(executed.intersection(unit)))
            for line in unit:
                status[line] = ran
    for line in runnable - status.keys():   # e.g. `except E:` (an ExceptHandler, not a stmt)
        status[line] = int(line in executed)
    mask, below = [1] * len(lines), 1
    for line in range(len(lines), 0, -1):   # backwards: neutral lines look at the code below
        if line in status:
            below = mask[line - 1] = status[line]
        elif lines[line - 1].strip():
            mask[line - 1] = below
    return mask


# ----------------------------------------------------------------------------- FGO: tokens


def token_char_spans(tokenizer, token_ids, window: int = 8) -> list[tuple[int, int]]:
    """Character span (start, end) of each generated token in its decoded text.

    The text is tokenizer.decode(token_ids, skip_special_tokens=True,
    clean_up_tokenization_spaces=False); the spans tile it. Works on the sampled ids (no
    re-tokenisation, which can split the text differently). Incremental: each token's text is
    decode(window + token) minus decode(window), with a window of up to `window` earlier tokens
    (byte-level BPE decodes locally). A token that ends inside a multi-byte character
    (decodes to U+FFFD) waits; it and the tokens completing the character share its span.
    Special tokens get an empty span.
    """
    ids = [int(i) for i in token_ids]

    def decode(part):
        return tokenizer.decode(part, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    spans, done, end = [], 0, 0   # tokens [done, i] have no span yet; `end` chars are placed
    for i in range(len(ids)):
        lo = max(0, done - window)
        prev, cur = decode(ids[lo:done]), decode(ids[lo:i + 1])
        if cur.endswith("\ufffd") and i < len(ids) - 1:
            continue
        piece = cur[len(prev):] if cur.startswith(prev) else cur[len(prev.rstrip("\ufffd")):]
        spans += [(end, end + len(piece))] * (i + 1 - done)
        end += len(piece)
        done = i + 1
    return spans


def code_char_span(response_text: str, code: str | None) -> tuple[int, int] | None:
    """(start, end) of the extracted code (data.extract_code's result) in the response text;
    None if there is no code or it is not a verbatim substring."""
    if not code:
        return None
    start = response_text.rfind(code)
    return None if start < 0 else (start, start + len(code))


def fgo_token_mask(response_text: str, token_char_spans: list[tuple[int, int]],
                   code_span: tuple[int, int] | None, executed_lines: set[int] | None) -> list[int]:
    """0/1 FGO mask over the response tokens (one entry per span).

    code_span: (start, end) of the rewarded program inside response_text (None: keep
    everything); executed_lines: its 1-based lines that ran (None: no coverage, keep). For a
    CCCS prefix, response_text starts with the prefix (completion_fgo_mask), and the spans
    cover the completion only: prefix lines have no tokens to mask.
    """
    keep = [1] * len(token_char_spans)
    if code_span is None or executed_lines is None:
        return keep
    cs, ce = code_span
    code = response_text[cs:ce]
    line_mask = fgo_line_mask(code, executed_lines)
    line_of_char = []                       # 1-based code line of each code character
    for k, text in enumerate(code.splitlines(keepends=True), start=1):
        line_of_char += [k] * len(text)
    for t, (s, e) in enumerate(token_char_spans):
        chars = range(max(s, cs) - cs, min(e, ce) - cs)
        if not chars:
            continue                        # fence, prose, special token
        # Whitespace belongs to whichever line it sits on only if the token has nothing else.
        touched = {line_of_char[c] for c in chars if not code[c].isspace()} or \
                  {line_of_char[c] for c in chars}
        if all(line_mask[k - 1] == 0 for k in touched):
            keep[t] = 0
    return keep


# Verdicts whose coverage can be complete. A test that hit a time, memory or output limit has
# unknown coverage (the sandbox reports executed_lines None): FGO would mask code that may
# well have run, so it keeps all.
FGO_STATUSES = frozenset({"pass", "wrong_answer", "runtime_error"})


def fgo_executed_lines(status: str | None, executed_lines: set[int] | None) -> set[int] | None:
    """The executed lines FGO may trust for this verdict, or None (mask nothing, counted as
    fgo_coverage_unknown_frac when the sandbox said unknown). The lines come from a separate
    traced run of each test (sandbox.py's "Coverage"); None = unknown: some test's traced run
    could not vouch for every line it ran. An empty set (no line known to have run) is no
    coverage either: masking every line it "did not run" would mask code that may have run."""
    return executed_lines if status in FGO_STATUSES and executed_lines else None


# ----------------------------------------------------------------------------- rollouts


def completion_fgo_mask(tokenizer, completion, prefix: str, program: str | None,
                        result) -> list[int] | None:
    """FGO mask over completion.token_ids, or None (nothing to mask: no code, no trusted
    coverage, or the decoded tokens do not reproduce the text the reward was computed on).

    The rewarded program is data.extract_code of head + text, head = "```python\\n" + prefix
    for a CCCS prefix (cccs.rewarded_program) and "" otherwise; the token spans
    are shifted by len(head), so prefix lines simply have no tokens.
    """
    executed = fgo_executed_lines(result.status, result.executed_lines) if result else None
    if executed is None or program is None:
        return None
    text = tokenizer.decode(completion.token_ids, skip_special_tokens=True,
                            clean_up_tokenization_spaces=False)
    if text != completion.text:
        return None
    head = f"```python\n{prefix}" if prefix else ""
    full = head + text
    spans = [(s + len(head), e + len(head))
             for s, e in token_char_spans(tokenizer, completion.token_ids)]
    return fgo_token_mask(full, spans, code_char_span(full, program), executed)


def ppo_rollout(engine, tokenizer, problems, rng, d, sampling: dict, *, prompts_per_step: int,
                fgo: bool, reward_table: dict | None, tis_cap: float, epoch_order=None,
                curriculum=None, step: int = 0, timer=None, trace: list | None = None):
    """Sample G = sampling["group_size"] responses for this rank's share of prompts_per_step
    problems, run them on the tests, and build Samples with the StepCoder reward
    (stepcoder_reward with reward_table's overrides) and, with fgo, the FGO token mask.
    Returns (samples, sums for the metrics: rollout_log).
    sampling: generate_and_score's keywords (flags.sampling). tis_cap: actor.sampler_extras'.
    epoch_order: draw_batch's (rollouts.epoch_order; None: with replacement).
    curriculum, step: as grpo.rollout_step's.
    timer (metrics.Timer): gets the engine's and the sandbox's seconds ("generate", "reward").
    trace: a list that gets each Sample's infra.samples.Trace, in the Samples' order (the samples
    file), with the CCCS stage the prefix came from."""
    G = sampling["group_size"]
    pool = curriculum.pool(problems, step) if curriculum else problems
    per_rank = max(1, prompts_per_step // d.world)
    batch, seed = rollouts.draw_batch(pool, rng, per_rank, d, epoch_order=epoch_order)
    prefixes = [curriculum.prefix(p) for p in batch] if curriculum else None
    ro = rollouts.generate_and_score(engine, tokenizer, batch, seed, prefixes=prefixes,
                                     coverage=fgo, timer=timer, **sampling)
    table = reward_table
    scores = [stepcoder_reward(r.status if r is not None else None, table) for r in ro.results]
    sums = {**rollouts.rollout_sums(dataclasses.replace(ro, rewards=scores)),
            "fgo_tokens": sum(len(c.token_ids) for c in ro.completions), "fgo_masked": 0,
            "fgo_samples": 0, "coverage_unknown": 0}
    samples = []
    for j, (c, res) in enumerate(zip(ro.completions, ro.results)):
        g = j // G
        mask = None
        if fgo:
            mask = completion_fgo_mask(tokenizer, c, prefixes[g] if prefixes else "",
                                       ro.programs[j], res)
            sums["fgo_samples"] += mask is not None
            sums["coverage_unknown"] += res is not None and res.executed_lines is None
            sums["fgo_masked"] += 0 if mask is None else len(mask) - sum(mask)
        samples.append(Sample(ro.prompt_ids[g], c.token_ids, 0.0, mask, scores[j],
                              key=(batch[g].id, j), **actor.sampler_extras(c, tis_cap)))
        status = "no_code" if res is None else res.status
        sums[f"status/{status}"] = sums.get(f"status/{status}", 0) + 1
        if trace is not None:     # the samples file: the sample as the step saw it
            trace.append(trace_of(ro, j, batch[g], prefixes[g] if prefixes else "",
                                           curriculum.stage(batch[g]) if curriculum else None))
    # The curricula see --reward (binary / fraction), not the StepCoder score.
    rollouts.feed_curriculum(curriculum, [(p.id, ro.rewards[g * G:(g + 1) * G])
                                          for g, p in enumerate(batch)])
    return samples, sums


def masked_lines(tokenizer, completion, prefix: str, program: str | None,
                 mask: list[int] | None) -> list[int]:
    """The 1-based lines of the rewarded `program` whose every token the FGO `mask` (over
    completion.token_ids, completion_fgo_mask's) took out of the loss: what a reader sees as
    FGO's cut. A line's whitespace does not count, and a CCCS prefix's lines have no tokens,
    so they are never listed; [] without a mask.
    Example: the completion writing fgo_line_mask's `sign` with lines 4-5 masked -> [4, 5]."""
    if mask is None or program is None:
        return []
    head = f"```python\n{prefix}" if prefix else ""
    full = head + completion.text
    span = code_char_span(full, program)
    if span is None:
        return []
    start, end = span
    line_of_char = []                       # 1-based program line of each program character
    for k, text in enumerate(program.splitlines(keepends=True), start=1):
        line_of_char += [k] * len(text)
    masked, kept = set(), set()
    for (s, e), keep in zip(token_char_spans(tokenizer, completion.token_ids), mask):
        for c in range(max(s + len(head), start), min(e + len(head), end)):
            if not program[c - start].isspace():
                (kept if keep else masked).add(line_of_char[c - start])
    return sorted(masked - kept)


def fgo_records(tokenizer, traces: list | None, samples: list[Sample],
                picked: list[int]) -> list[dict]:
    """rollouts.sample_records of the picked samples (their StepCoder reward, per-token
    advantage, CCCS stage) with FGO's masked_lines (masked_lines of the Sample's token_mask,
    the loss's) and masked_tokens."""
    records = sample_records(traces, picked, samples)
    for rec, i in zip(records, picked):
        t, mask = traces[i], samples[i].token_mask
        if mask is not None:
            rec["masked_tokens"] = len(mask) - sum(mask)
            rec["masked_lines"] = masked_lines(tokenizer, t.completion, t.prefix, t.program, mask)
    return records


def _padded(rows: list[list[float]]) -> torch.Tensor:
    out = torch.zeros(len(rows), max([len(r) for r in rows] + [1]))
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=torch.float)
    return out


def ppo_advantages(samples: list[Sample], scores: actor.Scores, *, kl_coef: float,
                   gamma: float, lam: float, whiten_advantages: bool):
    """KL-in-reward (kl_coef), GAE (gamma, lam) and, with whiten_advantages, whitening over
    the trained tokens, from the no-grad scores of the samples (response tokens only, right
    padded to [N, T]; no reference: KL 0). Returns (new Samples with their per-token
    advantage, old_logp, old_values and returns; sums for the log: kl, values, returns,
    explained-variance inputs)."""
    lens = torch.tensor([len(s.response_ids) for s in samples])
    T = max(int(lens.max()) if len(samples) else 1, 1)
    resp = (torch.arange(T)[None] < lens[:, None]).float()                    # [N, T]
    keep = _padded([[1.0] * len(s.response_ids) if s.token_mask is None else s.token_mask
                    for s in samples])[:, :T] * resp
    values = _padded(scores.values)[:, :T]
    # on-policy without a reference (values_only): no log-probs were scored, the KL is 0
    logp = values * 0 if scores.logp is None else _padded(scores.logp)[:, :T]
    ref = _padded(scores.ref_logp)[:, :T] if scores.ref_logp is not None else logp
    score = torch.tensor([s.reward for s in samples], dtype=torch.float)
    rewards = kl_in_reward(score, logp, ref, resp, kl_coef)
    adv, ret = gae(rewards, values, resp, gamma=gamma, lam=lam)
    adv = whiten(adv, keep) if whiten_advantages else adv * keep
    out = []
    for i, s in enumerate(samples):
        n = len(s.response_ids)
        out.append(dataclasses.replace(s, advantage=adv[i, :n].tolist(),
                                       old_logp=None if scores.logp is None else scores.logp[i],
                                       old_values=scores.values[i],
                                       returns=ret[i, :n].tolist()))
    m = resp
    return out, {"tok": float(m.sum()), "kl_sum": float(((logp - ref) * m).sum()),
                 "value_sum": float((values * m).sum()), "ret_sum": float((ret * m).sum()),
                 "ret_sq": float((ret ** 2 * m).sum()),
                 "err_sq": float(((ret - values) ** 2 * m).sum())}


def rollout_log(st: dict, adv_st: dict, fgo: bool) -> dict:
    """The step's rollout metrics from sums over ranks (model.reduce_sums)."""
    n = max(st["samples"], 1)
    tok = max(adv_st["tok"], 1)
    ret_mean = adv_st["ret_sum"] / tok
    ret_var = max(adv_st["ret_sq"] / tok - ret_mean ** 2, 1e-12)
    row = {**rollouts.rollout_means(st), "kl_ref": adv_st["kl_sum"] / tok,
           "value_mean": adv_st["value_sum"] / tok, "return_mean": ret_mean,
           # 1 - Var(ret - V) / Var(ret), with the mean error counted (E[(ret - V)^2]).
           "vf_explained_var": 1 - adv_st["err_sq"] / tok / ret_var}
    row.update({k: v / n for k, v in st.items() if k.startswith("status/")})
    if fgo:
        row["fgo_masked_share"] = st["fgo_masked"] / max(st["fgo_tokens"], 1)
        row["fgo_covered_frac"] = st["fgo_samples"] / n
        row["fgo_coverage_unknown_frac"] = st["coverage_unknown"] / n   # FGO masks nothing there
    return row


# ----------------------------------------------------------------------------- the PPO step


def update_loss(*, eps_low: float, eps_high: float, vf_clip: float, vf_coef: float, agg: str,
                tis_cap: float = 0.0, fgo_value_mask: bool = False):
    """The loss actor.update calls on each micro-batch: losses.ppo_loss on the batch's
    tensors: the clipped policy loss over batch.mask (FGO-kept tokens) against
    batch.old_logp (None: on-policy, logp.detach()) + vf_coef * the clipped value loss
    against batch.old_values and batch.returns, over every response token
    (batch.response_mask, its own global normaliser) or, fgo_value_mask, over the FGO-kept
    tokens too (batch.mask, the policy's normaliser). One backward trains the policy and the
    critic (separate, or the policy's value head)."""
    def loss(out: Forward, batch: actor.Batch, denom: actor.Denominators):
        value_mask, value_denom = ((batch.mask, denom.mask) if fgo_value_mask
                                   else (batch.response_mask, denom.response))
        return losses.ppo_loss(out.logp, out.values, batch.advantages, batch.mask,
                               value_mask, old_logp=batch.old_logp,
                               old_values=batch.old_values, returns=batch.returns,
                               sampler_logp=batch.sampler_logp, eps_low=eps_low,
                               eps_high=eps_high, vf_clip=vf_clip, vf_coef=vf_coef, agg=agg,
                               denom=denom.mask, value_denom=value_denom, tis_cap=tis_cap)
    return loss


def forward_with_values(policy, critic, temperature: float, with_entropy: bool = False):
    """forward_fn for actor.score / update: the policy's Forward with values [B, L-1] from
    the separate critic (value at position t = the state after token t) or, critic None
    (--critic shared), from the policy's own value head in the same forward."""
    def forward_fn(batch: actor.Batch) -> Forward:
        out = actor.forward(policy, batch, temperature, with_entropy,
                            with_values=critic is None)
        if critic is not None:
            out.values = critic(batch.input_ids, batch.attention_mask)[:, :-1]
        return out
    return forward_fn


def values_only(critic):
    """forward_fn for actor.score(logp=False): the separate critic's values [B, L-1] alone."""
    def forward_fn(batch: actor.Batch) -> Forward:
        return Forward(logp=None, values=critic(batch.input_ids, batch.attention_mask)[:, :-1])
    return forward_fn


def scores_values_only(args, r: trainer.Run) -> bool:
    """Whether the no-grad pass before the update can skip the policy: one optimizer step a
    batch (flags.off_policy False: the ratio is 1 and the update's own forward gives the old
    log-probs, logp.detach()), no reference (--kl-coef 0: no KL to compute) and a separate
    critic (its values come from its own forward)."""
    return not flags.off_policy(args) and r.ref is None and r.critic is not None


def critic_training(r: trainer.Run) -> list[tuple]:
    """actor.update's also_train: the separate critic and its optimizer (none when shared:
    the value head is in the policy and its optimizer)."""
    return [] if r.critic is None else [("critic", r.critic, r.critic_optimizer)]


def make_critic(r: trainer.Run) -> None:
    """The separate critic (--critic separate: the policy's body after SFT + a zero head, its
    own AdamW at --critic-lr, constant) and the reference (--kl-coef > 0), both from the
    warm-started policy."""
    a = r.args
    if a.critic == "separate":
        r.critic = critic_like(r.policy, r.model_path, r.d.device, a.grad_checkpointing)
        r.critic_optimizer = torch.optim.AdamW(r.critic.parameters(), lr=a.critic_lr,
                                               betas=(0.9, 0.99), weight_decay=a.weight_decay)
    if a.kl_coef > 0:
        r.ref = reference_like(r.policy, r.model_path, r.d.device)


def ppo_step(r: trainer.Run, step: int) -> dict:
    """One PPO step; returns its metrics (train's end_step adds lr, timings, curriculum)."""
    args = r.args
    # --- generate, reward, FGO masks (timed "generate", "reward") --------------------------------
    trace = [] if r.sample_log.on else None      # the samples file (--log-samples)
    samples, sums = ppo_rollout(
        r.engine, r.tokenizer, r.train_problems, r.rng, r.d, flags.sampling(args),
        prompts_per_step=args.prompts_per_step, fgo=args.fgo,
        reward_table=json.loads(args.reward_table) if args.reward_table else None,
        tis_cap=args.tis_cap, epoch_order=rollouts.epoch_order(args.prompt_order, args.seed, step),
        curriculum=r.curriculum, step=step, timer=r.timer, trace=trace)
    r.engine.sleep()        # GPU: free the engine's memory for scoring and the update
    # --- values, and old log-probs / reference where needed; KL-in-reward, GAE -------------
    with r.timer("score"):
        alone = scores_values_only(args, r)
        scores = r.score(samples, policy=r.policy, ref=r.ref, with_values=True, logp=not alone,
                         forward_fn=values_only(r.critic) if alone else
                         forward_with_values(r.policy, r.critic, args.temperature))
        samples, adv_sums = ppo_advantages(samples, scores, kl_coef=args.kl_coef,
                                           gamma=args.gamma, lam=args.lam,
                                           whiten_advantages=args.whiten)
    if trace is not None:   # what the update trains on: score, advantages, the FGO mask
        with r.timer("samples"):
            trainer.log_samples(r, step + 1, "train", fgo_records(
                r.tokenizer, trace, samples, r.sample_log.pick(len(samples))))
    # --- PPO update: policy + critic (--epochs x --mini-batches optimizer steps), weight sync -
    loss = update_loss(eps_low=args.eps_low, eps_high=args.eps_high, vf_clip=args.vf_clip,
                       vf_coef=args.vf_coef, agg=args.agg, tis_cap=args.tis_cap,
                       fgo_value_mask=args.fgo_value_mask)
    stats = actor.update_and_sync(r.policy, r.optimizer, r.scheduler, r.engine, samples, loss,
                                  r.timer, also_train=critic_training(r),
                                  forward_fn=forward_with_values(r.policy, r.critic,
                                                                 args.temperature, True),
                                  **r.update_settings())
    return {**rollout_log(reduce_sums(sums), reduce_sums(adv_sums), args.fgo),
            **stats}


def train(args) -> dict:
    """The run: SFT warm start -> eval -> PPO steps (StepCoder reward, optional FGO) -> eval."""
    r = trainer.start(args, "ppo", value_head=args.critic == "shared", coder_prompts=True)
    ckpt = trainer.prepare_run(r)          # resume point, or SFT warm start + pass@k before RL
    if r.summary is not None:              # --eval-only: evaluated, finished
        return r.summary
    # Critic, reference and optimizers from the warm-started policy; a resume restores them.
    make_critic(r)
    r.optimizer, r.scheduler = policy_optimizer(r.policy, **flags.optimizer(args),
                                                        head_lr=args.critic_lr)
    trainer.first_step(r, ckpt)            # step-0 checkpoint, or the resumed state
    for step in trainer.rl_steps(r):
        metrics = ppo_step(r, step)        # rollouts -> GAE -> update -> weight sync
        trainer.end_step(r, step, metrics) # metrics row, --eval-every, --save-every
    return trainer.end_run(r)              # pass@k after RL, summary.json


# ----------------------------------------------------------------------------- flags

PRESETS = flags.merge_presets(flags.COMMON_PRESETS, {
    # CPU default: the shipped base on tasks:rl / tasks:eval (trainer.py); PPO's symmetric clip 0.2.
    "cpu": dict(eps_high=0.2),
    # StepCoder's reported settings (the StepCoder paper), GPU scale.
    "gpu": dict(out="runs/ppo-gpu", eps_high=0.2, lr=5e-7, critic_lr=1.5e-6, temperature=0.8,
                top_p=0.9, max_new_tokens=1024),
})


def build_parser() -> argparse.ArgumentParser:
    p = flags.new_parser(
        "ppo_fgo.py", "PPO with GAE and a critic on StepCoder's compiler-feedback reward, with "
                      "optional FGO (policy loss only on code the tests executed). CPU "
                      "default: the shipped base model on tasks:rl; held-out pass@1 before and "
                      "after RL.")
    flags.add_common_flags(p, "ppo", aggregations=losses.AGGREGATIONS)
    g = p.add_argument_group("PPO (StepCoder)")
    g.add_argument("--fgo", action="store_true",
                   help="FGO: mask the policy loss of code lines no unit test executed")
    g.add_argument("--fgo-value-mask", action="store_true",
                   help="with --fgo, mask the value loss with the same mask (StepCoder's "
                        "authors' PPO harness); default: the critic learns every token")
    g.add_argument("--critic", choices=["separate", "shared"], default="separate",
                   help="critic body: a separate copy of the policy (default, StepCoder: own "
                        "weights and lr, the value loss never moves the policy) or the "
                        "policy's own body with a value head (half the memory; the value "
                        "loss also trains the policy's body at its lr)")
    g.add_argument("--critic-lr", type=flags.LEARNING_RATE, default=6e-5,
                   help="critic learning rate, constant (StepCoder 1.5e-6 = 3x the policy's); "
                        "with --critic shared it applies to the value head only")
    g.add_argument("--kl-coef", type=flags.NON_NEGATIVE, default=0.05,
                   help="beta of the per-token KL penalty in the reward, to the post-SFT "
                        "policy (StepCoder 0.05; 0 = no reference model)")
    g.add_argument("--gamma", type=flags.SHARE, default=1.0, help="GAE discount")
    g.add_argument("--lam", type=flags.SHARE, default=0.95, help="GAE lambda")
    g.add_argument("--vf-clip", type=flags.POSITIVE, default=0.2, help="value clip range c")
    g.add_argument("--vf-coef", type=flags.NON_NEGATIVE, default=1.0,
                   help="weight of the value loss in the summed loss (separate critic: only "
                        "scales the critic's gradient before clipping; shared: also how hard "
                        "the value loss pulls on the policy's body)")
    g.add_argument("--no-whiten", dest="whiten", action="store_false",
                   help="do not whiten advantages over the batch's trained tokens")
    g.add_argument("--reward-table", default="",
                   help="JSON overriding StepCoder's rewards, e.g. '{\"wrong_answer\": -0.5}' "
                        "(keys: pass, wrong_answer, runtime_error, timeout, memory_limit, "
                        "output_limit, compile_error, no_code)")
    trainer.add_curriculum_flags(p)
    return p


def parse_args(argv=None):
    parser = build_parser()
    args = flags.parse_flags(parser, PRESETS, argv)
    if args.fgo_value_mask and not args.fgo:
        parser.error("--fgo-value-mask masks the value loss with FGO's mask: add --fgo")
    if args.reward_table:
        try:
            table = json.loads(args.reward_table)
        except ValueError:
            parser.error(f"--reward-table {args.reward_table!r} is not JSON")
        if not isinstance(table, dict):
            parser.error("--reward-table must be a JSON object {verdict: reward}")
        for k, v in table.items():
            if k not in STEPCODER_REWARDS:
                parser.error(f"--reward-table: unknown key {k!r}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                parser.error(f"--reward-table: {k!r} must map to a finite number, got {v!r}")
    return args


def main(argv=None):
    with flags.entry_point():      # one-line errors for the user's mistakes, clean exit
        train(parse_args(argv))


if __name__ == "__main__":
    main()
