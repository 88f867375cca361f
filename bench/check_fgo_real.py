"""How much of a correct program do its own unit tests run? The headroom of FGO on real data.

Runs each APPS+ canonical solution on its own tests in the sandbox with line coverage and
reports the distribution (mean, quartiles) over problems of

    line share      |executed ∩ executable| / |executable|        (ppo_fgo.executable_lines)

for the union over the problem's tests and for each single test, and the share of the code's
non-blank characters that FGO would mask (ppo_fgo.fgo_line_mask) given the union. StepCoder's
motivating example: one test input executes about 75% of a canonical solution.

    .venv/bin/python bench/check_fgo_real.py [--path $RL4CODE_DATA/apps_plus_valid_500.json]

Standard-input programs are run as the data loader prepares them, canonical solution + a call
`NAME()` appended (one extra line, always executed).
"""
import argparse
import os
import statistics
import sys
import time
from collections import Counter, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import data  # noqa: E402
import sandbox  # noqa: E402
from ppo_fgo import fgo_line_mask  # noqa: E402
from sandbox import executable_lines  # noqa: E402
from world import sources


def line_share(executed, runnable) -> float:
    return len(set(executed) & runnable) / len(runnable)


def masked_char_share(code: str, executed) -> float:
    """Share of the non-whitespace characters of `code` on lines FGO masks."""
    lines = code.splitlines()
    chars = [sum(not c.isspace() for c in line) for line in lines]
    masked = sum(n for n, keep in zip(chars, fgo_line_mask(code, executed)) if not keep)
    return masked / max(1, sum(chars))


def describe(values: list[float]) -> str:
    if len(values) < 2:
        return f"n={len(values)}"
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (f"n={len(values):4d}  mean {statistics.mean(values):.3f}  "
            f"q1 {q1:.3f}  median {q2:.3f}  q3 {q3:.3f}  min {min(values):.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", default=os.path.join(os.environ.get("RL4CODE_DATA", os.path.join(
        os.path.dirname(__file__), "..", "datasets", "samples")), "apps_plus_valid_500.json"),
                    help="APPS+ file (the StepCoder authors' JSON list format)")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only")
    ap.add_argument("--timeout", type=float, default=4.0, help="seconds per test")
    args = ap.parse_args()

    problems = sources.load_problems("apps_plus", path=args.path, need_solution=True)
    problems = problems[:args.limit] if args.limit else problems
    jobs = [data.sandbox_job(p, p.solutions[0], timeout=args.timeout, memory_mb=1024,
                             coverage=True) for p in problems]
    t0 = time.time()
    results = sandbox.run_batch(jobs)
    print(f"{len(problems)} problems, {sum(len(p.tests) for p in problems)} tests, "
          f"{time.time() - t0:.0f}s in the sandbox")
    print("verdicts:", dict(Counter(r.status for r in results)))

    union, single, masked = defaultdict(list), defaultdict(list), defaultdict(list)
    for p, r in zip(problems, results):
        runnable = executable_lines(p.solutions[0])
        if not runnable or r.executed_lines is None:
            continue
        for group in ("all", "passing" if r.status == "pass" else "failing", p.difficulty):
            union[group].append(line_share(r.executed_lines, runnable))
            single[group] += [line_share(t.executed_lines, runnable) for t in r.tests
                              if t.executed_lines is not None]
            masked[group].append(masked_char_share(p.solutions[0], r.executed_lines))

    groups = ["all", "passing", "failing", "introductory", "interview", "competition"]
    for title, table in (("executable lines run, union over a problem's tests", union),
                         ("executable lines run by one test (each problem x test)", single),
                         ("FGO-masked share of non-blank code characters (union)", masked)):
        print(f"\n{title}:")
        for g in groups:
            if table.get(g):
                print(f"  {g:13s} {describe(table[g])}")


if __name__ == "__main__":
    main()
