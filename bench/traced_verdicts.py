"""Does measuring coverage change a verdict? FGO's rollouts judged as the judge used to, and now.

ppo_fgo.py --fgo asks the sandbox for line coverage. The judge used to run each test once,
under the line tracer, at the same --test-timeout: the verdict came from the traced run, which
a tracer makes several times slower, so a program near its limit that PPO rewards +1 got
PPO + FGO's -0.6 (timeout). Now the verdict comes from a run without the tracer, and the
lines from a second run with COVERAGE_TIME_FACTOR times the limit (sandbox.py). This script
samples programs from a model on the problems the FGO arm trains on and judges each both ways:

  old   every test's only run under the tracer, at the limit: the sandbox's workers with their
        verdict run traced (OLD_JUDGE_BOOT: the run's own report of its observations is
        judged, exactly as an untraced run's report is; today's tracer)
  new   sandbox.run_batch with coverage, as ppo_fgo.py --fgo judges now

and writes the share of programs whose verdict changed (and which into which), the same for
the reward (binary, and StepCoder's table that PPO trains on), and the tracer's cost: each
test's CPU seconds traced over untraced.

    python bench/traced_verdicts.py --problems 24 --samples 8 \
        --out bench/results/traced-verdicts
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ppo_fgo  # noqa: E402
import rollouts  # noqa: E402
import sandbox  # noqa: E402
from infra import flags, sandbox_pool  # noqa: E402
from infra.engines import make_engine  # noqa: E402
from infra.model import init_distributed, load_tokenizer, resolve_model  # noqa: E402
from world import sources  # noqa: E402

# A worker whose verdict runs are traced runs at the test's own limit: the judge before the
# verdict and the coverage came from separate runs. The traced run's report on the harness fd
# is its coverage report, which carries the observations an untraced run reports ("verdict");
# those become the run's message, so the parent judges the traced run as it judges any run.
OLD_JUDGE_BOOT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[2])
import infra.sandbox_worker as w
del sys.path[0]
[sys.modules.pop(m) for m in list(sys.modules) if m == 'infra' or m.startswith('infra.')]
run_one_test = w._run_one_test

def traced_at_the_limit(job, *args, **kwargs):
    nonce = os.urandom(16).hex()
    raw = run_one_test(dict(job, trace=nonce), *args, **kwargs)
    verdict = None
    for line in raw["message"].decode("utf-8", "replace").split("\n"):
        if line.startswith(nonce):
            try:
                report = json.loads(line[len(nonce):])
            except ValueError:
                continue
            if isinstance(report, dict) and report.get("pid") == raw["pid"]:
                verdict = report.get("verdict")
    raw["message"] = b"" if verdict is None else json.dumps(verdict).encode()
    return raw

w._run_one_test = traced_at_the_limit
w.worker_main()
"""


@contextlib.contextmanager
def old_judge():
    """run_batch's workers, while inside, judge every test by one traced run at its limit."""
    real = sandbox_pool.worker_command

    def command():
        return [*real()[:2], "-c", OLD_JUDGE_BOOT, *real()[4:]]
    sandbox_pool.worker_command = command
    try:
        yield
    finally:
        sandbox_pool.worker_command = real


def judge_both(jobs: list[dict], workers: int | None) -> tuple[list, list]:
    """(old results, new results) of the same jobs (coverage asked in the new ones only: the old
    judge's verdict run is the traced run)."""
    new = sandbox.run_batch([dict(j, coverage=True) for j in jobs], workers=workers)
    with old_judge():
        old = sandbox.run_batch([dict(j, coverage=False) for j in jobs], workers=workers)
    return old, new


def compare(old: list, new: list, limit: float) -> dict:
    """The figures of one judged batch: programs whose verdict / binary reward / StepCoder
    reward changed, the transitions, the tracer's CPU factor (traced over untraced CPU seconds
    of the tests that ended alike both ways, from 1 ms untraced: per test, and summed), and
    the programs with a test whose untraced CPU times the median factor passes the limit."""
    changed = Counter()
    for o, n in zip(old, new):
        if o.status != n.status:
            changed[f"{n.status} -> {o.status}"] += 1
    pairs, near = [], 0
    for o, n in zip(old, new):
        for to, tn in zip(o.tests, n.tests):
            if to.status == tn.status and tn.cpu_time >= 0.001 and to.status != "timeout":
                pairs.append((to.cpu_time, tn.cpu_time))
    factors = [a / b for a, b in pairs]
    median = statistics.median(factors) if factors else None
    for n in new:
        near += any(t.cpu_time * (median or 1.0) > limit for t in n.tests)
    slowest = max((t.cpu_time for n in new for t in n.tests if t.status != "timeout"),
                  default=None)
    programs = len(new)
    return {
        "programs": programs,
        "verdict_changed": sum(changed.values()),
        "verdict_changed_share": sum(changed.values()) / max(programs, 1),
        "transitions (new -> old)": dict(sorted(changed.items())),
        "binary_reward_changed": sum((o.status == "pass") != (n.status == "pass")
                                     for o, n in zip(old, new)),
        "stepcoder_reward_changed": sum(ppo_fgo.stepcoder_reward(o.status)
                                        != ppo_fgo.stepcoder_reward(n.status)
                                        for o, n in zip(old, new)),
        "verdicts_new": dict(Counter(r.status for r in new)),
        "verdicts_old": dict(Counter(r.status for r in old)),
        "coverage_unknown_new": sum(r.executed_lines is None for r in new),
        "tracer_cpu_factor": {"tests": len(factors), "median": median,
                              "p10": _quantile(factors, 0.1), "p90": _quantile(factors, 0.9),
                              "summed": (sum(a for a, _ in pairs) / sum(b for _, b in pairs)
                                         if pairs else None)},
        "programs_with_a_test_near_the_limit": near,
        "slowest_test_untraced_cpu_seconds": slowest,
    }


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def readme(res: dict) -> str:
    f, s = res["figures"], res["settings"]
    t = f["tracer_cpu_factor"]
    def fmt(x):
        return "-" if x is None else f"{x:.2f}"
    lines = [
        f"# Verdicts traced and untraced: FGO's rollouts on the shipped base ({res['date']})",
        "",
        f"Commit {res['commit']}. Command:",
        "",
        f"    {res['command']}",
        "",
        f"{s['problems']} tasks:rl problems (a seeded sample) x {s['samples']} samples from "
        f"--model {s['model']} ({s['engine']} engine, T {s['temperature']}, top-p "
        f"{s['top_p']}, {s['max_new_tokens']} new tokens, seed {s['seed']}): "
        f"{f['programs']} programs with code, each judged on the problem's tests at "
        f"--test-timeout {s['test_timeout']} s (ppo_fgo.py's defaults) two ways:",
        "",
        "- old: each test's only run under the line tracer, at the limit (the judge before the "
        "verdict and the coverage came from separate runs; emulated with today's tracer: the "
        "sandbox's workers with their verdict run traced, bench/traced_verdicts.py "
        "OLD_JUDGE_BOOT);",
        "- new: sandbox.run_batch with coverage, as ppo_fgo.py --fgo judges now (the verdict "
        "from an untraced run, the lines from a traced one with 5x the limit).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| programs whose verdict changed | {f['verdict_changed']} of {f['programs']} "
        f"({100 * f['verdict_changed_share']:.1f}%) |",
        f"| ... binary reward changed | {f['binary_reward_changed']} |",
        f"| ... StepCoder reward (PPO's) changed | {f['stepcoder_reward_changed']} |",
        f"| transitions (new -> old) | {f['transitions (new -> old)'] or 'none'} |",
        f"| verdicts, new | {f['verdicts_new']} |",
        f"| verdicts, old | {f['verdicts_old']} |",
        f"| coverage unknown (new) | {f['coverage_unknown_new']} programs |",
        f"| tracer CPU factor (traced / untraced CPU s of a test; {t['tests']} tests of >= 1 "
        f"ms that ended alike) | median {fmt(t['median'])}, p10 {fmt(t['p10'])}, p90 "
        f"{fmt(t['p90'])}, summed over them {fmt(t['summed'])} |",
        f"| programs with a test whose untraced CPU x the median factor exceeds the limit | "
        f"{f['programs_with_a_test_near_the_limit']} |",
        f"| slowest test, untraced CPU (timeouts aside) | "
        f"{1000 * (f['slowest_test_untraced_cpu_seconds'] or 0):.1f} ms |",
        "",
        "A test's CPU seconds are its process tree's, the fork and the harness included, so "
        "on programs this short the factor is mostly the tracer's fixed cost, not the 3-5x it "
        "costs a loop; a verdict changes only where a test's traced run passes the limit.",
        "",
        f"CPU seconds of this script and its children: {res['cpu_seconds']:.0f} "
        f"({res['wall_seconds']:.0f} s wall, on the shared 2-core machine).",
        "",
    ]
    return "\n".join(lines)


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None):
    defaults = ppo_fgo.parse_args([])   # what the FGO arm samples and judges with
    p = flags.new_parser("bench/traced_verdicts.py", __doc__.split("\n\n")[0])
    p.add_argument("--model", default="base")
    p.add_argument("--problems", type=flags.POSITIVE_INT, default=24,
                   help="tasks:rl problems, a seeded sample")
    p.add_argument("--samples", type=flags.POSITIVE_INT, default=8, help="programs a problem")
    p.add_argument("--seed", type=flags.SEED, default=0)
    p.add_argument("--engine", default="hf", choices=["auto", "vllm", "hf"])
    p.add_argument("--test-timeout", type=flags.TEST_TIMEOUT, default=defaults.test_timeout)
    p.add_argument("--sandbox-workers", type=flags.POSITIVE_INT, default=None)
    p.add_argument("--out", default=None, help="folder for README.md and results.json")
    a = p.parse_args(argv)
    t0 = time.time()
    d = init_distributed()
    path = resolve_model(a.model)
    tok = load_tokenizer(path)
    pool = sources.load_problems("tasks", split="rl")
    problems = random.Random(a.seed).sample(pool, min(a.problems, len(pool)))
    engine = make_engine(a.engine, path, d.device, seed=a.seed)
    outs = engine.generate([rollouts.prompt_text(tok, q) for q in problems], n=a.samples,
                           temperature=defaults.temperature, top_p=defaults.top_p,
                           max_new_tokens=defaults.max_new_tokens, seed=a.seed)
    engine.close()
    jobs = []
    for q, group in zip(problems, outs):
        for c in group:
            _, job = rollouts.completion_job(rollouts.train_view(q, defaults.max_train_tests),
                                             c.text, "", reward=defaults.reward,
                                             test_timeout=a.test_timeout, coverage=True)
            if job is not None:
                jobs.append(job)
    print(f"[traced-verdicts] {len(jobs)} programs with code of {a.problems * a.samples}; "
          f"judging ({time.time() - t0:.0f} s)", flush=True)
    old, new = judge_both(jobs, a.sandbox_workers)
    usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    res = {"date": datetime.date.today().isoformat(), "commit": commit(),
           "command": "python bench/traced_verdicts.py " + " ".join(
               sys.argv[1:] if argv is None else argv),
           "settings": {"model": a.model, "problems": len(problems), "samples": a.samples,
                        "seed": a.seed, "engine": engine.name,
                        "temperature": defaults.temperature, "top_p": defaults.top_p,
                        "max_new_tokens": defaults.max_new_tokens,
                        "test_timeout": a.test_timeout, "reward": defaults.reward},
           "figures": compare(old, new, a.test_timeout),
           "cpu_seconds": sum(u.ru_utime + u.ru_stime for u in usage),
           "wall_seconds": time.time() - t0}
    print(readme(res))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1)
        with open(os.path.join(a.out, "README.md"), "w") as f:
            f.write(readme(res))
    return res


if __name__ == "__main__":
    main()
