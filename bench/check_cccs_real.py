"""CCCS on real data: split points and stages of the APPS+ canonical solutions, and a sandbox
check that every stage's prefix + canonical remainder is the original program and passes.

    .venv/bin/python bench/check_cccs_real.py [--path $RL4CODE_DATA/apps_plus_valid_500.json]
                                              [--no-sandbox] [--workers 2]

Problems come from sources.load_problems("apps_plus"), the trainer's view: solutions[0] is the
runnable program, with the NAME() call appended for stdin problems. Every stage's program is
built the way the trainer builds it (rewarded_program of a fenced answer holding the canonical
remainder) and judged by sandbox.run_batch.
"""

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cccs import make_subtask, rewarded_program, split_points, stage_starts  # noqa: E402
from data import sandbox_job  # noqa: E402
from sandbox import run_batch  # noqa: E402
from world.sources import load_problems  # noqa: E402

DEFAULT_PATH = os.path.join(os.environ.get("RL4CODE_DATA", os.path.join(
    os.path.dirname(__file__), "..", "datasets", "samples")), "apps_plus_valid_500.json")


def load(path: str):
    """[(id, program, Problem)]: solutions[0] is the runnable program (the trainer's view)."""
    return [(p.id, p.solutions[0], p) for p in load_problems("apps_plus", path=path)]


def histogram(counter: Counter) -> str:
    return "  ".join(f"{k}:{v}" for k, v in sorted(counter.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default=DEFAULT_PATH, help="APPS+ JSON file")
    ap.add_argument("--no-sandbox", action="store_true", help="only the string checks")
    ap.add_argument("--workers", type=int, default=None, help="sandbox worker processes")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per program run")
    args = ap.parse_args()

    problems = load(args.path)
    raw = json.load(open(args.path))
    n = len(problems)
    print(f"{n} problems from {args.path}")

    # -- split points and stages
    n_points = [len(split_points(code)) for _, code, _ in problems]
    n_points_loops = [len(split_points(code, include_loops=True)) for _, code, _ in problems]
    stages = [len(stage_starts(code)) for _, code, _ in problems]
    print(f">= 1 split point (if/elif/match): {sum(k > 0 for k in n_points)}/{n}")
    print(f">= 1 split point (with loops):    {sum(k > 0 for k in n_points_loops)}/{n}")
    print(f"split points per program: median {statistics.median(n_points)}, "
          f"max {max(n_points)}; with loops: median {statistics.median(n_points_loops)}")
    print(f"stages incl. the final one -> problems: {histogram(Counter(stages))}")
    by_diff = {}
    for (_, _, problem), k in zip(problems, stages):
        by_diff.setdefault(problem.difficulty, []).append(k)
    for d, ks in sorted(by_diff.items()):
        print(f"  {d:13s} mean stages {statistics.mean(ks):.2f} (n={len(ks)})")

    # -- cross-check with APPS+'s own "If Statement Body" scopes (same source string)
    if len(raw) == n:
        agree = sum(
            set(split_points(row["canonical_solution"]))
            == {s[1] for s in row["scope"] if s[0] == "If Statement Body"}
            for row in raw)
        print(f"split points == APPS+ 'If Statement Body' starts: {agree}/{n}")

    # -- every stage: prefix + canonical remainder == program; share of code left to write
    subtasks, bad_identity, bad_first_line = [], 0, 0
    write_share = {}  # stages from the end -> fraction of lines the model writes
    for pid, code, problem in problems:
        starts = stage_starts(code)
        for j, start in enumerate(starts):
            prefix, rest = make_subtask(code, start)
            bad_identity += prefix + rest != code
            # model-style answers: the continuation of the prefilled prompt, closed or cut off
            # (extract_code drops the newlines around a block, which changes nothing); the
            # final stage's prompt is the ordinary one, so its answers are fenced blocks
            fenced = f"Here:\n```python\n{rest}\n```\n"
            answers = (f"{rest}\n```\nDone." if prefix else fenced, rest if prefix else fenced)
            programs = [rewarded_program(prefix, text) for text in answers]
            bad_identity += sum(p is None or p.strip("\n") != code.strip("\n") for p in programs)
            if start is not None and not rest.lstrip().startswith(("if", "elif", "match")):
                bad_first_line += 1
            left = len(starts) - 1 - j
            share = rest.count("\n") / max(code.count("\n"), 1)
            write_share.setdefault(left, []).append(share)
            subtasks.append((pid, j, programs[0], problem))
    print(f"subtasks (all stages of all problems): {len(subtasks)}")
    print(f"identity failures (prefix+remainder; rewarded_program of a closed / cut-off answer): "
          f"{bad_identity}")
    print(f"remainders not starting with if/elif/match: {bad_first_line}")
    for left in sorted(write_share, reverse=True):
        xs = write_share[left]
        name = "final" if left == 0 else f"final-{left}"
        print(f"  stage {name:8s} n={len(xs):4d}  median share of lines to write "
              f"{statistics.median(xs):.2f}")

    # -- sandbox: every stage's rewarded program on the problem's tests
    if args.no_sandbox:
        print("sandbox check: skipped")
        return
    jobs = [sandbox_job(p, prog, timeout=args.timeout) for _, _, prog, p in subtasks]
    t0 = time.time()
    results = run_batch(jobs, workers=args.workers)
    passed = [r.status == "pass" for r in results]
    print(f"sandbox: {sum(passed)}/{len(passed)} stage programs pass all tests "
          f"({100 * sum(passed) / len(passed):.1f}%) in {time.time() - t0:.0f}s")
    # a stage program is the original string, so a problem passes at all stages or at none
    per_problem = {}
    for (pid, _, _, _), ok in zip(subtasks, passed):
        per_problem.setdefault(pid, []).append(ok)
    all_ok = sum(all(v) for v in per_problem.values())
    mixed = sum(any(v) and not all(v) for v in per_problem.values())
    print(f"problems passing at every stage: {all_ok}/{len(per_problem)}; mixed: {mixed}")
    fails = Counter(r.status for r in results if r.status != "pass")
    if fails:
        print(f"failure statuses: {histogram(fails)}")


if __name__ == "__main__":
    main()
