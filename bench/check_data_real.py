"""Real-data check for data.py: load the real sample files (the folder
$RL4CODE_DATA, default datasets/samples) and run reference
programs in the sandbox.

    python bench/check_data_real.py [--data-dir DIR] [--workers 2] [--limit N]

Prints: problems loaded per file (and per test kind), the pass rate of APPS+ canonical
solutions (overall, per difficulty, per test kind, status counts), the pass rates of the
built-in set and of the tasks splits (world/tasks.py), and that LiveCodeBench's placeholder
canonical_solution (sys.exit(0)) fails every test.
"""

import argparse
import json
import os
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import data  # noqa: E402
from world import sources


def pass_rates(problems, workers, timeout):
    import sandbox

    jobs = [
        data.sandbox_job(p, p.solutions[0], timeout=timeout)
        for p in problems
    ]
    start = time.time()
    results = sandbox.run_batch(jobs, workers=workers)
    return results, time.time() - start


def report(title, problems, results, seconds):
    ok = [r.status == "pass" for r in results]
    print(
        f"{title}: {sum(ok)}/{len(ok)} pass ({100 * sum(ok) / max(1, len(ok)):.1f}%) "
        f"in {seconds:.0f} s"
    )
    for key, name in (
        (lambda p: p.difficulty, "difficulty"),
        (lambda p: "stdio" if p.fn_name is None else "call", "kind"),
    ):
        groups = Counter(key(p) for p in problems)
        passed = Counter(key(p) for p, o in zip(problems, ok) if o)
        print(
            f"  by {name}: " + ", ".join(f"{g} {passed[g]}/{n}" for g, n in sorted(groups.items()))
        )
    print("  statuses:", dict(Counter(r.status for r in results)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("RL4CODE_DATA", os.path.join(os.path.dirname(__file__), "..",
                                                               "datasets", "samples")),
        help="folder with the real sample files",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="sandbox processes (default: all cores)"
    )
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds per test")
    parser.add_argument("--limit", type=int, default=None, help="only the first N APPS+ problems")
    parser.add_argument("--failures", type=int, default=5, help="APPS+ failures to print")
    args = parser.parse_args()
    d = args.data_dir

    files = [
        ("apps_plus", "apps_plus_valid_500.json"),
        ("code_contests", "code_contests_test_165.json"),
        ("code_contests", "code_contests_samples_20.jsonl"),
        ("livecodebench", "livecodebench_v1_samples_3.jsonl"),
    ]
    loaded = {}
    for name, f in files:
        stats = Counter()
        start = time.time()
        ps = sources.load_problems(name, path=os.path.join(d, f), stats=stats)
        kinds = Counter("stdio" if p.fn_name is None else "call" for p in ps)
        tests = sum(len(p.tests) for p in ps)
        print(
            f"{f}: {len(ps)} problems ({dict(kinds)}), {tests} tests, "
            f"{len(ps) and sum(bool(p.solutions) for p in ps)} "
            f"with a reference, stats {dict(stats)}, {time.time() - start:.2f} s"
        )
        loaded[f] = ps

    try:
        import sandbox  # noqa: F401
    except ImportError:
        print("sandbox.py not found: no pass rates")
        return
    apps_plus = loaded["apps_plus_valid_500.json"][: args.limit]
    results, secs = pass_rates(apps_plus, args.workers, args.timeout)
    report("APPS+ canonical solutions", apps_plus, results, secs)
    shown = 0
    for p, r in zip(apps_plus, results):
        if r.status != "pass" and shown < args.failures:
            shown += 1
            first = next((t for t in r.tests if getattr(t, "status", t) != "pass"), None)
            print(
                f"  FAIL {p.id} {p.difficulty} {'call' if p.fn_name else 'stdio'}: {r.status} "
                f"{r.passed}/{r.total}; first failing test: {json.dumps(first, default=str)[:300]}"
            )

    builtin = sources.builtin_problems()
    results, secs = pass_rates(builtin, args.workers, args.timeout)
    report("built-in canonical solutions", builtin, results, secs)
    for split in ("train", "test", "heldout"):
        problems = sources.load_problems("tasks", split=split)
        results, secs = pass_rates(problems, args.workers, args.timeout)
        report(f"tasks {split} references", problems, results, secs)

    import sandbox

    lcb = loaded["livecodebench_v1_samples_3.jsonl"]
    jobs = [
        data.sandbox_job(p, "import sys; sys.exit(0)", timeout=args.timeout)
        for p in lcb
    ]
    res = sandbox.run_batch(jobs, workers=args.workers)
    print(
        "LiveCodeBench placeholder sys.exit(0):", [f"{r.status} {r.passed}/{r.total}" for r in res]
    )


if __name__ == "__main__":
    main()
