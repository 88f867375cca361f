"""A step's rollouts and the evaluation: drawing the problems, generating completions and
scoring them in the sandbox, their sums over ranks, and pass@k on a problem set (evaluate).

Serially (the default) the engine generates every completion, then the sandbox judges them
all. With --overlap-reward (generate_while_scoring) each prompt's completions go to the
sandbox's workers as soon as the engine finishes them, so the sandbox works while the engine
generates the rest; the rollouts are the same, in the same order."""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

import cccs
import data
import sandbox
from infra.evalstats import by_family, family_labels, hardest_quarter, pass_at_k, standard_error
from infra.metrics import Timer
from infra.model import Dist, all_reduce_sum, gather_objects
from infra.samples import Trace

# ----------------------------------------------------------------------------- rollouts, rewards

def prompt_text(tokenizer, problem, prefix: str = "") -> str:
    """The coder prompt. With a CCCS prefix the answer is opened for the model
    ("```python\\n" + prefix) so it continues the canonical program (cccs.completion_prompt)."""
    return cccs.completion_prompt(data.render_prompt(tokenizer, data.coder_messages(problem)),
                                  prefix)


def score_completions(problems, texts: list[str], *, reward: str, test_timeout: float,
                      workers: int | None, prefixes=None, coverage=False):
    """Run each completion's program on its problem's tests in one sandbox batch.

    Returns (rewards, results, programs); a completion with no code gets reward 0 and result
    None (counted as no_code, never an error). With CCCS prefixes the rewarded program is
    prefix + completion (cccs.rewarded_program). reward: "binary" (all tests pass) or
    "fraction" (share of tests passed); test_timeout: seconds a test; workers: the sandbox's
    worker processes (None: its default).
    """
    programs, jobs, where = [], [], []
    for i, (p, t) in enumerate(zip(problems, texts)):
        code, job = completion_job(p, t, prefixes[i] if prefixes else "", reward=reward,
                                   test_timeout=test_timeout, coverage=coverage)
        programs.append(code)
        if job is not None:
            where.append(i)
            jobs.append(job)
    results = [None] * len(texts)
    for i, res in zip(where, sandbox.run_batch(jobs, workers=workers)):
        results[i] = res
    return [reward_of(r, reward) for r in results], results, programs


def completion_job(problem, text: str, prefix: str, *, reward: str, test_timeout: float,
                   coverage: bool) -> tuple[str | None, dict | None]:
    """One completion's rewarded program (cccs.rewarded_program) and its sandbox job on the
    problem's tests; (None, None) when it holds no code."""
    code = cccs.rewarded_program(prefix, text)
    if code is None:
        return None, None
    # Binary: the first failing test decides, the tests after it are not run (the sandbox runs
    # them all for FGO's coverage); the fraction reward counts each test, a timeout's too.
    binary = reward != "fraction"
    return code, data.sandbox_job(problem, code, timeout=test_timeout, coverage=coverage,
                                  stop_after_timeout=binary, stop_at_first_failure=binary)


def reward_of(result, reward: str) -> float:
    """A sandbox result's reward: --reward binary (all tests pass) or fraction (share of
    tests passed); 0 for a completion without code (result None)."""
    if result is None:
        return 0.0
    return result.pass_rate if reward == "fraction" else float(result.status == "pass")


# (A reader may skip generate_while_scoring: --overlap-reward's path, the same rollouts as
# engine.generate then score_completions, with the sandbox working while the engine generates.)

def generate_while_scoring(engine, prompts: list[str], problems: list, prefixes: list | None,
                           *, n: int, temperature: float, top_p: float, max_new_tokens: int,
                           seed: int, reward: str, test_timeout: float, coverage: bool,
                           workers: int | None, timer: Timer
                           ) -> tuple[list, list[float], list, list[str | None]]:
    """Sample n completions per prompt and judge them in the sandbox while the engine is
    still generating: each prompt's completions become sandbox jobs as soon as the engine
    finishes them (engine.generate_stream), and the sandbox's warm workers (one run_batch
    in a sandbox.BackgroundBatch) take them meanwhile. So a round costs about max(generate, sandbox)
    instead of their sum where cores allow. The same completions, rewards, results and
    programs, in the same order, as engine.generate then score_completions.

    problems / prefixes: one a completion, prompt by prompt ([P * n]), as score_completions'.
    timer: the engine's seconds go to "generate"; "reward" gets only the wait for the last
    verdicts after the engine is done (the sandbox's time not hidden behind generation).
    Returns (completions [P * n], rewards, results, programs), flat as score_completions'."""
    comps: list = [None] * (len(prompts) * n)
    programs: list[str | None] = [None] * len(comps)
    where: list[int] = []               # the completion of each sandbox job, in queue order
    judge = sandbox.BackgroundBatch(workers)   # judges jobs as they are queued
    try:
        with timer("generate"):
            for i, group in engine.generate_stream(prompts, n=n, temperature=temperature,
                                                   top_p=top_p, max_new_tokens=max_new_tokens,
                                                   seed=seed):
                for k, c in enumerate(group, start=i * n):
                    comps[k] = c
                    programs[k], job = completion_job(
                        problems[k], c.text, prefixes[k] if prefixes else "", reward=reward,
                        test_timeout=test_timeout, coverage=coverage)
                    if job is not None:
                        where.append(k)
                        judge.put(job)
    finally:
        with timer("reward"):
            judge.close()    # no more jobs: wait for the last verdicts
    results: list = [None] * len(comps)
    for k, res in zip(where, judge.results()):
        results[k] = res
    return comps, [reward_of(r, reward) for r in results], results, programs


def train_view(problem, max_tests: int):
    """The problem as RL's reward sees it under --max-train-tests N: its first N tests (APPS+
    ships 3 a problem for training; --train-tests says which N come first: world/train_tests.py).
    N = 0, or no more tests than N: the problem itself. Evaluation always judges on every
    test."""
    if not max_tests or len(problem.tests) <= max_tests:
        return problem
    return replace(problem, tests=problem.tests[:max_tests])


def false_passes(problems, programs, results, max_tests: int, *, test_timeout: float,
                 workers: int | None) -> list[bool]:
    """Per completion: it passed its problem's first max_tests tests (the train reward's) and
    fails one of the others: what the few tests let through. One sandbox batch over the
    passing programs of problems with more tests; False where there is nothing to check.
    test_timeout, workers: as score_completions'."""
    jobs, where = [], []
    for i, (p, code, res) in enumerate(zip(problems, programs, results)):
        if max_tests and res is not None and res.status == "pass" and \
                len(p.tests) > max_tests:
            where.append(i)
            jobs.append(data.sandbox_job(p, code, p.tests[max_tests:], timeout=test_timeout,
                                         stop_at_first_failure=True))
    out = [False] * len(programs)
    for i, res in zip(where, sandbox.run_batch(jobs, workers=workers)
                      if jobs else []):
        out[i] = res.status != "pass"
    return out


@dataclass
class Rollouts:
    """group_size completions per problem of a batch, with their sandbox verdicts; the
    flat lists are ordered problem by problem (completion j belongs to problem j // G)."""
    prompt_ids: list[list[int]]        # per problem
    completions: list                  # engines.Completion, [P * G]
    rewards: list[float]               # --reward of each completion
    results: list                      # sandbox results (None: no code)
    programs: list[str | None]         # the rewarded programs
    false_pass: list[bool] | None = None   # under --max-train-tests: false_passes, else None
    prompts: list[str] | None = None       # per problem: the prompt text the engine got


def generate_and_score(engine, tokenizer, batch, seed: int, *, group_size: int,
                       temperature: float, top_p: float, max_new_tokens: int,
                       max_train_tests: int, reward: str, test_timeout: float,
                       workers: int | None, prefixes=None, coverage: bool = False,
                       timer: Timer | None = None, overlap: bool = False) -> Rollouts:
    """Sample group_size completions per problem of `batch` (at temperature / top_p, at most
    max_new_tokens each, from the engine's `seed`) and run them on the tests (with line
    coverage when asked: FGO), the first max_train_tests of them when it is not 0 (train_view;
    then false_passes checks the passing programs on the rest). reward, test_timeout,
    workers: score_completions'. prefixes: a CCCS prefix per problem (None: none).
    timer: adds the engine's seconds to its "generate" phase, the sandbox's to "reward".
    overlap: the sandbox judges while the engine generates (generate_while_scoring; the same
    rollouts), "reward" then gets only the sandbox's time after generation."""
    G, timer = group_size, timer or Timer()
    prompts = [prompt_text(tokenizer, p, prefixes[i] if prefixes else "")
               for i, p in enumerate(batch)]
    flat = [p for p in batch for _ in range(G)]
    flat_prefix = [x for x in prefixes for _ in range(G)] if prefixes else None
    n = max_train_tests
    if overlap:
        comps, rewards, results, programs = generate_while_scoring(
            engine, prompts, [train_view(p, n) for p in flat], flat_prefix, n=G,
            temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
            reward=reward, test_timeout=test_timeout, coverage=coverage, workers=workers,
            timer=timer)
    else:
        with timer("generate"):
            outs = engine.generate(prompts, n=G, temperature=temperature, top_p=top_p,
                                   max_new_tokens=max_new_tokens, seed=seed)
        comps = [c for o in outs for c in o]
        with timer("reward"):
            rewards, results, programs = score_completions(
                [train_view(p, n) for p in flat], [c.text for c in comps], reward=reward,
                test_timeout=test_timeout, workers=workers, prefixes=flat_prefix,
                coverage=coverage)
    with timer("reward"):
        false_pass = false_passes(flat, programs, results, n, test_timeout=test_timeout,
                                  workers=workers) if n else None
    return Rollouts([tokenizer(t)["input_ids"] for t in prompts], comps, rewards, results,
                    programs, false_pass, prompts)


def draw_batch(pool: Sequence, rng: random.Random, per_rank: int, d: Dist,
               need: int | None = None, epoch_order: tuple[int, int] | None = None
               ) -> tuple[list, int]:
    """This rank's problems for one round of rollouts and its sampling seed. Every rank draws
    the same global batch (same rng), then takes its own slice (the first `need` of it).
    epoch_order=(seed, step): the problems come from epoch_batch (without replacement); rng
    is consumed as in the default, so both orders give a step the same sampling seed."""
    batch = [pool[rng.randrange(len(pool))] for _ in range(per_rank * d.world)]
    seed = rng.randrange(2**31)
    mine = batch[d.rank::d.world] if epoch_order is None else \
        epoch_batch(pool, per_rank, d, *epoch_order)
    return mine[:need], seed + d.rank


def epoch_order(prompt_order: str, seed: int, step: int) -> tuple[int, int] | None:
    """draw_batch's epoch_order for RL step `step`: (seed, step) under prompt_order "epoch"
    (without replacement), None under "replacement"."""
    return (seed, step) if prompt_order == "epoch" else None


def epoch_batch(pool: Sequence, per_rank: int, d: Dist, seed: int, step: int) -> list:
    """This rank's problems for RL step `step` when prompts are drawn without replacement, as
    TRL's sampler does: epoch e = step // S walks its own permutation of the pool (seeded by
    seed and e), S = len(pool) // (per_rank * world) steps an epoch, the partial batch at the
    end of an epoch dropped. A function of (seed, step) alone, so a resumed run draws what a
    straight one would (nothing to checkpoint); a pool smaller than a batch is cycled."""
    k = per_rank * d.world
    per_epoch = max(1, len(pool) // k)
    epoch, offset = divmod(step, per_epoch)
    order = list(range(len(pool)))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    order = order * math.ceil(k / len(order))
    batch = [pool[i] for i in order[offset * k:(offset + 1) * k]]
    return batch[d.rank::d.world]


def feed_curriculum(curriculum, updates: list[tuple]) -> None:
    """(problem id, rewards of its group) from every rank, in rank order, so that every rank's
    curriculum stays identical."""
    if curriculum is not None:
        for pid, rewards in gather_objects(updates):
            curriculum.update(pid, rewards)


def repeated_programs(programs: Sequence[str | None], group: int) -> int:
    """How many programs repeat an earlier one of their group (each `group` consecutive
    entries: one prompt's samples); None (no code) never counts. sandbox.run_batch judges a
    repeat on the same tests once, so this is the judging the sharing saves.

    >>> repeated_programs(["a", "b", "a", None,   "a", None, None, "c"], group=4)
    1
    """
    return sum(len(part) - len(set(part)) for part in
               ([p for p in programs[i:i + group] if p is not None]
                for i in range(0, len(programs), group)))


def rollout_sums(rollouts: Rollouts) -> dict:
    """Sums over this rank's completions for the step's metrics (rollout_means)."""
    rs, comps, programs = rollouts.rewards, rollouts.completions, rollouts.programs
    group = max(len(comps) // max(len(rollouts.prompt_ids), 1), 1)
    return {"samples": len(comps), "reward_sum": sum(rs), "reward_sq": sum(x * x for x in rs),
            "judged": sum(p is not None for p in programs),
            "repeated": repeated_programs(programs, group),
            "pass_sum": sum(r is not None and r.status == "pass" for r in rollouts.results),
            "len_sum": sum(len(c.token_ids) for c in comps),
            "truncated": sum(c.finish_reason == "length" for c in comps),
            "no_code": sum(p is None for p in rollouts.programs),
            **({"false_pass": sum(rollouts.false_pass)} if rollouts.false_pass is not None
               else {})}


def rollout_means(sums: dict) -> dict:
    """rollout_sums summed over ranks -> reward_mean / std, pass_rate, response_len,
    truncated_frac, no_code_frac, judge/duplicate_frac (the share of the programs with code
    that repeat one of their group: repeated_programs); under --max-train-tests also
    false_pass_frac, the share of the programs that passed the train tests and fail the full
    set."""
    n = max(sums["samples"], 1)
    mean = sums["reward_sum"] / n
    out = {"reward_mean": mean, "reward_std": max(sums["reward_sq"] / n - mean * mean, 0) ** 0.5,
           "pass_rate": sums["pass_sum"] / n, "response_len": sums["len_sum"] / n,
           "truncated_frac": sums["truncated"] / n, "no_code_frac": sums["no_code"] / n,
           "judge/duplicate_frac": sums["repeated"] / max(sums["judged"], 1)}
    if "false_pass" in sums:
        out["false_pass_frac"] = sums["false_pass"] / max(sums["pass_sum"], 1)
    return out


# ----------------------------------------------------------------------------- evaluation


def passes_train_tests(result, n: int) -> bool:
    """Whether a program judged on every test passed its first n (the train-style regime:
    APPS+ scores on a problem's few tests); n = 0: every test. No verdicts (no code, compile
    error): False."""
    if result is None or result.status == sandbox.PASS:
        return result is not None
    first = result.tests[:n]
    return 0 < n < result.total and len(first) == n and all(t.status == sandbox.PASS
                                                            for t in first)


def evaluate(engine, tokenizer, problems, d: Dist, *, n: int, temperature: float, top_p: float,
             max_new_tokens: int, seed: int, reward: str, test_timeout: float,
             workers: int | None, timer: Timer | None = None, overlap: bool = False,
             trace: list | None = None, train_tests: int = 0) -> dict:
    """pass@1 and pass@n (unbiased estimator) over `problems`, each rank sampling its share:
    n completions a problem at temperature / top_p, at most max_new_tokens each, from the
    engine seed seed + 7 (seed: the run's), judged as score_completions' (reward,
    test_timeout, workers).

    Returns {"pass@1", "pass@1_se", f"pass@{n}", "problems", "judge/duplicate_frac" (as
    rollout_means'), "rates": {problem id: solved share}}; pass@1_se is the standard error
    of pass@1 over the problems (standard_error, within families when the problems have
    them: the set's family mix is fixed);
    the per-problem rates feed --offline-filter and DRIVE's hard focus.
    timer, overlap: as generate_and_score's ("generate", "reward").
    trace: a list that gets a Trace of each of this rank's completions (the samples file).
    train_tests N > 0 (--max-train-tests) adds the train-style regime from the same verdicts:
    "pass@1_on_train_tests" (a sample counts when its problem's first N tests pass:
    passes_train_tests), its "_se", and "rates_on_train_tests" per problem.
    """
    mine, timer = problems[d.rank::d.world], timer or Timer()
    prompts = [prompt_text(tokenizer, p) for p in mine]
    flat_p = [p for p in mine for _ in range(n)]
    judging = dict(reward=reward, test_timeout=test_timeout, workers=workers)
    if overlap and mine:
        comps, rewards, results, programs = generate_while_scoring(
            engine, prompts, flat_p, None, n=n, temperature=temperature, top_p=top_p,
            max_new_tokens=max_new_tokens, seed=seed + 7, coverage=False, timer=timer,
            **judging)
    else:
        with timer("generate"):
            outs = engine.generate(prompts, n=n, temperature=temperature, top_p=top_p,
                                   max_new_tokens=max_new_tokens, seed=seed + 7) if mine else []
        comps = [c for o in outs for c in o]
        with timer("reward"):
            rewards, results, programs = score_completions(flat_p, [c.text for c in comps],
                                                           **judging)
    judged = all_reduce_sum(sum(p is not None for p in programs))
    repeated = all_reduce_sum(repeated_programs(programs, n) if n else 0)
    if trace is not None:
        trace += [Trace(flat_p[k], prompts[k // n], comps[k], programs[k], results[k],
                        rewards[k]) for k in range(len(comps))]
    # per problem: (id, solved on every test, solved on its first train_tests tests)
    rows = gather_objects([(p.id, *(sum(passes_train_tests(r, k) for r in results[i * n:i * n + n])
                                    for k in (0, train_tests))) for i, p in enumerate(mine)])
    counts = [(pid, c) for pid, c, _ in rows]
    total = max(len(counts), 1)
    by_id = dict(counts)
    labels = family_labels(problems, [pid for pid, _ in counts])
    out = {"pass@1": sum(pass_at_k(n, c, 1) for _, c in counts) / total,
           "pass@1_se": standard_error([c / n for _, c in counts], labels) if n else 0.0,
           f"pass@{n}": sum(pass_at_k(n, c, n) for _, c in counts) / total, "k": n,
           "problems": len(counts), **hardest_quarter(problems, by_id, n),
           **by_family(problems, by_id, n), "judge/duplicate_frac": repeated / max(judged, 1),
           "rates": {pid: c / n for pid, c in counts}}
    if train_tests and n:
        few = [c / n for _, _, c in rows]
        out.update({"pass@1_on_train_tests": sum(few) / total,
                    "pass@1_on_train_tests_se": standard_error(few, labels),
                    "rates_on_train_tests": {pid: c / n for pid, _, c in rows}})
    return out
