"""A step's rollouts and the evaluation: drawing the problems, generating completions and
scoring them in the sandbox, their sums over ranks, and pass@k on a problem set (evaluate).

Serially (the default) the engine generates every completion, then the sandbox judges them
all. With --overlap-reward (generate_while_scoring) each prompt's completions go to the
sandbox's workers as soon as the engine finishes them, so the sandbox works while the engine
generates the rest; the rollouts are the same, in the same order."""
from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch.distributed as dist

import cccs
import data
import sandbox
from infra.samples import clip
from metrics import Timer
from model import Dist, all_reduce_sum

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
    # The fraction reward counts each test on its own, so a test after a timeout is run, not
    # counted as failed (binary: the first failure decides, stop there).
    return code, data.sandbox_job(problem, code, timeout=test_timeout, coverage=coverage,
                                  stop_after_timeout=reward != "fraction")


def reward_of(result, reward: str) -> float:
    """A sandbox result's reward: --reward binary (all tests pass) or fraction (share of
    tests passed); 0 for a completion without code (result None)."""
    if result is None:
        return 0.0
    return result.pass_rate if reward == "fraction" else float(result.status == "pass")


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
    ships 3 a problem for training; tasks.py orders the base world's so that a first few
    need not run every branch). N = 0, or no more tests than N: the problem itself.
    Evaluation always judges on every test."""
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
            jobs.append(data.sandbox_job(p, code, p.tests[max_tests:],
                                         timeout=test_timeout))
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


def rollout_sums(rollouts: Rollouts) -> dict:
    """Sums over this rank's completions for the step's metrics (rollout_means)."""
    rs, comps = rollouts.rewards, rollouts.completions
    return {"samples": len(comps), "reward_sum": sum(rs), "reward_sq": sum(x * x for x in rs),
            "pass_sum": sum(r is not None and r.status == "pass" for r in rollouts.results),
            "len_sum": sum(len(c.token_ids) for c in comps),
            "truncated": sum(c.finish_reason == "length" for c in comps),
            "no_code": sum(p is None for p in rollouts.programs),
            **({"false_pass": sum(rollouts.false_pass)} if rollouts.false_pass is not None
               else {})}


def rollout_means(sums: dict) -> dict:
    """rollout_sums summed over ranks -> reward_mean / std, pass_rate, response_len,
    truncated_frac, no_code_frac; under --max-train-tests also false_pass_frac, the share of
    the programs that passed the train tests and fail the full set."""
    n = max(sums["samples"], 1)
    mean = sums["reward_sum"] / n
    out = {"reward_mean": mean, "reward_std": max(sums["reward_sq"] / n - mean * mean, 0) ** 0.5,
           "pass_rate": sums["pass_sum"] / n, "response_len": sums["len_sum"] / n,
           "truncated_frac": sums["truncated"] / n, "no_code_frac": sums["no_code"] / n}
    if "false_pass" in sums:
        out["false_pass_frac"] = sums["false_pass"] / max(sums["pass_sum"], 1)
    return out


def gather_objects(items: list) -> list:
    """Concatenate a Python list from every rank, in rank order (identity in a world of 1)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(items)
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def reduce_sums(sums: Mapping[str, float]) -> dict:
    """Sum each entry over ranks (keys may differ between ranks: their union, sorted)."""
    keys = sorted(set().union(*(set(k) for k in gather_objects([list(sums)]))))
    return {k: all_reduce_sum(sums.get(k, 0.0)) for k in keys}


# ----------------------------------------------------------------------------- evaluation

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def standard_error(values: Sequence[float], strata: Sequence | None = None) -> float:
    """Standard error of the mean of per-problem solve rates x_1..x_N:

        se = sqrt(s^2 / N),   s^2 = sum_i (x_i - mean)^2 / (N - 1)

    It holds both the spread between problems and each rate's sampling noise, so it says how
    far another draw of problems and samples could move pass@1 (0 for fewer than 2).
    strata (one label a problem, e.g. tasks.py's family): the set's mix of strata is fixed by
    design, so only the spread within each stratum h (N_h problems, variance s_h^2) counts:

        se = sqrt(sum_h (N_h / N)^2 s_h^2 / N_h)

    (a stratum of one problem adds nothing: its variance is unknown)."""
    def var_of_mean(xs):
        if len(xs) < 2:
            return 0.0
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)
    n = len(values)
    if n < 2:
        return 0.0
    if strata is None:
        return math.sqrt(var_of_mean(values))
    groups: dict = {}
    for v, h in zip(values, strata):
        groups.setdefault(h, []).append(v)
    return math.sqrt(sum((len(xs) / n) ** 2 * var_of_mean(xs) for xs in groups.values()))


def family_labels(problems, ids: Sequence) -> list | None:
    """The tasks.py family of each problem id in `ids` (standard_error's strata); None when
    one has none (other data sets)."""
    family = {p.id: p.metadata.get("family") for p in problems}
    labels = [family.get(i) for i in ids]
    return None if None in labels else labels


def hardest_problems(problems, ids) -> list:
    """The quarter (at least one) of the `problems` whose id is in `ids` with the highest
    difficulty score (tasks.py's metadata["score"]: lines + 2 branches + 2 loops + operations;
    ties keep the given order), hardest first. [] when none is in `ids` or one has no score
    (other data sets)."""
    scored = [p for p in problems if p.id in ids]
    if not scored or any("score" not in p.metadata for p in scored):
        return []
    return sorted(scored, key=lambda p: -p.metadata["score"])[:max(1, len(scored) // 4)]


def hardest_quarter(problems, solved: Mapping, n: int) -> dict:
    """pass@1 / pass@n on hardest_problems(problems, solved), from solved = {problem id:
    samples of n that passed}. DRIVE's claim is about this tail. {} when there is none."""
    hard = hardest_problems(problems, solved)
    if not hard:
        return {}
    counts = [solved[p.id] for p in hard]
    return {"pass@1_hardest_quarter": sum(counts) / (n * len(hard)),
            f"pass@{n}_hardest_quarter": sum(pass_at_k(n, c, n) for c in counts) / len(hard),
            "hardest_quarter_problems": len(hard),
            "hardest_quarter_min_score": hard[-1].metadata["score"]}


def by_family(problems, solved: Mapping, n: int) -> dict:
    """pass@1 per tasks.py family, {"pass@1_by_family": {family: sum of solved / (n * count)}},
    from solved = {problem id: samples of n that passed}: which families a gain comes from
    (the long, branchy ones are CCCS's and FGO's). {} when a problem has no family."""
    seen = [p for p in problems if p.id in solved]
    if not seen or any("family" not in p.metadata for p in seen):
        return {}
    counts: dict = {}
    for p in seen:
        counts.setdefault(p.metadata["family"], []).append(solved[p.id])
    return {"pass@1_by_family": {f: sum(c) / (n * len(c)) for f, c in sorted(counts.items())}}


def evaluate(engine, tokenizer, problems, d: Dist, *, n: int, temperature: float, top_p: float,
             max_new_tokens: int, seed: int, reward: str, test_timeout: float,
             workers: int | None, timer: Timer | None = None, overlap: bool = False,
             trace: list | None = None) -> dict:
    """pass@1 and pass@n (unbiased estimator) over `problems`, each rank sampling its share:
    n completions a problem at temperature / top_p, at most max_new_tokens each, from the
    engine seed seed + 7 (seed: the run's), judged as score_completions' (reward,
    test_timeout, workers).

    Returns {"pass@1", "pass@1_se", f"pass@{n}", "problems", "rates": {problem id: solved
    share}}; pass@1_se is the standard error of pass@1 over the problems (standard_error,
    within families when the problems have them: the set's family mix is fixed);
    the per-problem rates feed --offline-filter and DRIVE's hard focus.
    timer, overlap: as generate_and_score's ("generate", "reward").
    trace: a list that gets a Trace of each of this rank's completions (the samples file).
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
    if trace is not None:
        trace += [Trace(flat_p[k], prompts[k // n], comps[k], programs[k], results[k],
                        rewards[k]) for k in range(len(comps))]
    solved = [sum(r is not None and r.status == "pass" for r in results[i * n:(i + 1) * n])
              for i in range(len(mine))]
    counts = gather_objects([(p.id, c) for p, c in zip(mine, solved)])
    total = max(len(counts), 1)
    by_id = dict(counts)
    return {"pass@1": sum(pass_at_k(n, c, 1) for _, c in counts) / total,
            "pass@1_se": standard_error([c / n for _, c in counts],
                                        family_labels(problems, [pid for pid, _ in counts]))
            if n else 0.0,
            f"pass@{n}": sum(pass_at_k(n, c, n) for _, c in counts) / total, "k": n,
            "problems": len(counts), **hardest_quarter(problems, by_id, n),
            **by_family(problems, by_id, n),
            "rates": {pid: c / n for pid, c in counts}}


# ----------------------------------------------------------------------------- the samples file

@dataclass
class Trace:
    """One completion as its step judged it, kept for the samples file (sample_record)."""
    problem: data.Problem
    prompt: str                        # the text the engine continued
    completion: object                 # engines.Completion
    program: str | None                # the rewarded program (None: no code)
    result: object                     # its sandbox.Result (None: no code)
    reward: float                      # --reward's value
    prefix: str = ""                   # CCCS: the program's first lines, given in the prompt
    stage: str | None = None           # CCCS: the problem's stage ("final", "final-1", ...)
    false_pass: bool | None = None     # under --max-train-tests: false_passes'


def trace_of(ro: Rollouts, j: int, problem, prefix: str = "", stage: str | None = None) -> Trace:
    """The Trace of completion j of `ro` (a problem's completions are consecutive), whose
    problem, CCCS prefix and stage the rollout had."""
    group = len(ro.completions) // len(ro.prompt_ids)
    return Trace(problem, ro.prompts[j // group], ro.completions[j], ro.programs[j],
                 ro.results[j], ro.rewards[j], prefix, stage,
                 None if ro.false_pass is None else ro.false_pass[j])


def failing_test(problem, result) -> dict | None:
    """The first test a program failed: its index and verdict, the problem's input and expected
    output (a check test: its code as input), the program's output and stderr (the sandbox's
    tails), each cut by infra.samples.clip; None when no test failed or there was no code."""
    for i, t in enumerate(result.tests if result is not None else []):
        if t.status == "pass":
            continue
        test = problem.tests[i] if i < len(problem.tests) else {}
        out = {"index": i, "status": t.status}
        if "check" in test:
            out["input"] = clip(test["check"])
        else:
            out.update(input=clip(test.get("input")), expected=clip(test.get("output")))
        out["actual"] = clip(t.output)
        if t.stderr:
            out["stderr"] = clip(t.stderr)
        return out
    return None


def sample_record(t: Trace, reward: float | None = None, advantage=None) -> dict:
    """A samples-file record (infra.samples) of one Trace: problem, family, prompt, completion,
    program, verdict, tests passed, first failing test, reward (the Trace's --reward unless
    `reward`: what the loss saw, e.g. PPO's StepCoder score), advantage (a float, or one a
    token for PPO; None at an evaluation), and the CCCS stage and prefix and the false pass
    where the step had them."""
    res = t.result
    rec = {"problem": t.problem.id, "family": t.problem.metadata.get("family"),
           "prompt": t.prompt, "completion": t.completion.text, "program": t.program,
           "finish_reason": t.completion.finish_reason,
           "verdict": "no_code" if res is None else res.status,
           "passed": None if res is None else res.passed,
           "total": None if res is None else res.total,
           "failing_test": failing_test(t.problem, res),
           "reward": t.reward if reward is None else reward, "advantage": advantage}
    if res is not None and res.error:
        rec["error"] = clip(res.error)
    if t.stage is not None:
        rec.update(stage=t.stage, prefix=t.prefix)
    if t.false_pass is not None:
        rec["false_pass"] = t.false_pass
    return rec


def sample_records(traces: list[Trace] | None, picked: list[int], samples=None) -> list[dict]:
    """sample_record of traces[i] for each i in `picked`, with the reward and advantage of the
    training samples[i] (actor.Sample, one per trace) when given."""
    if not traces:
        return []
    if samples is None:
        return [sample_record(traces[i]) for i in picked]
    return [sample_record(traces[i], samples[i].reward, samples[i].advantage) for i in picked]
