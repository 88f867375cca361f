"""Benchmark and real-data check of sandbox.py.

1. Every canonical solution of APPS+ (apps_plus_valid_500.json in --data-dir) through
   sandbox.run_batch, and through a baseline that starts a fresh Python process per test (what
   several public graders do), same worker count, same comparison rules, in the same run.
   Prints tests/s of both (wall clock, and CPU seconds of all processes, which stays meaningful
   on a shared machine), the speed-up, whether the verdicts agree, the share of canonical
   solutions that pass and every failure, the slowest tests on both sides, and the best speed-up
   any per-test harness could reach given the programs' own run time (Amdahl).
2. Per-test overhead: --trivial N tests of `print(input())` (jobs of 10 tests), sandbox vs the
   same fresh-Python baseline, in the same run.
3. The three LiveCodeBench samples, whose "canonical_solution" is `import sys; sys.exit(0)`:
   it must fail every test.

    python bench/bench_sandbox.py [--data-dir DIR] [--workers N] [--limit N]
                                  [--trivial N] [--coverage] [--skip-baseline]
"""
import argparse
import ast
import base64
import io
import json
import os
import pickle
import re
import resource
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sandbox as sb  # noqa: E402
from infra.sandbox_prepare import PRELUDE_MODULES, PRELUDE_STAR  # noqa: E402


def parse_literal(value):
    """APPS+ call-based values are mostly literal strings ('"abc"', '[1, 2]'), some plain values."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        try:
            return json.loads(value)
        except ValueError:
            return value


def apps_plus_jobs(path: str, timeout: float) -> list[dict]:
    """APPS+ rows -> sandbox jobs (what data.py does for training)."""
    jobs = []
    for row in json.load(open(path)):
        starter = row["starter_code"]
        name = re.search(r"def (\w+)\(", starter).group(1)
        if not re.search(r"def \w+\(\):", starter):
            # call-based (a function or a Solution method): literal arguments, [value] output
            tests = [{"input": [parse_literal(a) for a in args],
                      "output": parse_literal(out[0] if isinstance(out, list) and len(out) == 1
                                              else out)}
                     for args, out in zip(row["inputs"], row["outputs"])]
            jobs.append(dict(code=row["canonical_solution"], tests=tests,
                             fn_name=name, timeout=timeout))
        else:        # standard I/O inside `def NAME():`, which must be called
            tests = [{"input": i, "output": o} for i, o in zip(row["inputs"], row["outputs"])]
            jobs.append(dict(code=row["canonical_solution"] + f"\n\n{name}()\n", tests=tests,
                             fn_name=None, timeout=timeout))
    return jobs


# The baseline gives call-based programs the same LeetCode prelude as the sandbox (LiveCodeBench
# does it with text before the program; here it is exec'd first, so line numbers agree).
CALL_RUNNER = """
import json, sys, builtins
args = json.load(open(sys.argv[2]))
ns = {"__name__": "__main__"}
exec("".join(f"from {m} import *\\n" for m in %r), ns)
for name in [n for n in ns if hasattr(builtins, n) and not n.startswith("__")]:
    del ns[name]
exec("".join(f"import {m}\\n" for m in %r), ns)
exec(compile(open(sys.argv[1]).read(), "solution.py", "exec"), ns)
fn = getattr(ns["Solution"](), sys.argv[3]) if "Solution" in ns else ns[sys.argv[3]]
value = fn(*args)
open(sys.argv[4], "w").write(json.dumps(value))
""" % (PRELUDE_STAR, PRELUDE_MODULES)


def baseline_test(code_path: str, job: dict, test: dict, tmp: str, k: int) -> str:
    """One test in a fresh interpreter; the same verdict rules as the sandbox."""
    try:
        if job["fn_name"] is None:
            proc = subprocess.run([sys.executable, code_path], input=test["input"].encode(),
                                  capture_output=True, timeout=job["timeout"])
            if proc.returncode != 0:
                return sb.MEMORY_LIMIT if b"MemoryError" in proc.stderr else sb.RUNTIME_ERROR
            ok = sb.outputs_match(test["output"], proc.stdout.decode("utf-8", "replace"))
            return sb.PASS if ok else sb.WRONG_ANSWER
        args_path, out_path = f"{tmp}/args{k}.json", f"{tmp}/out{k}.json"
        with open(args_path, "w") as f:
            json.dump(test["input"], f)
        proc = subprocess.run([sys.executable, "-c", CALL_RUNNER, code_path, args_path,
                               job["fn_name"], out_path], capture_output=True,
                              timeout=job["timeout"])
        if proc.returncode != 0 or not os.path.exists(out_path):
            return sb.RUNTIME_ERROR
        with open(out_path) as f:
            ok = sb.values_match(test["output"], json.load(f))
        return sb.PASS if ok else sb.WRONG_ANSWER
    except subprocess.TimeoutExpired:
        return sb.TIMEOUT


def run_baseline(jobs: list[dict], workers: int) -> tuple[list[list[str]], list[list[float]]]:
    """Verdicts and wall seconds per test, one fresh interpreter per test."""
    def one(i: int, j: int) -> tuple[str, float]:
        start = time.monotonic()
        verdict = baseline_test(paths[i], jobs[i], jobs[i]["tests"][j], tmp, i * 1000 + j)
        return verdict, time.monotonic() - start

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, job in enumerate(jobs):
            paths.append(f"{tmp}/p{i}.py")
            with open(paths[-1], "w") as f:
                f.write(job["code"])
        work = [(i, j) for i, job in enumerate(jobs) for j in range(len(job["tests"]))]
        with ThreadPoolExecutor(workers) as pool:
            outcomes = list(pool.map(lambda ij: one(*ij), work))
    verdicts, times = [[] for _ in jobs], [[] for _ in jobs]
    for (i, _), (v, t) in zip(work, outcomes):
        verdicts[i].append(v)
        times[i].append(t)
    return verdicts, times


def cpu_seconds() -> float:
    """User + system CPU of this process and every child it has reaped (workers, tests)."""
    return sum(getattr(resource.getrusage(who), f) for who in
               (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) for f in ("ru_utime", "ru_stime"))


def timed(fn):
    """(fn(), wall seconds, CPU seconds)."""
    cpu, start = cpu_seconds(), time.monotonic()
    out = fn()
    return out, time.monotonic() - start, cpu_seconds() - cpu


def report_speed(label: str, n_tests: int, ours: tuple, base: tuple):
    (sb_wall, sb_cpu), (b_wall, b_cpu) = ours, base
    print(f"{label}: sandbox  {sb_wall:7.2f} s wall {n_tests / sb_wall:8.1f} tests/s, "
          f"CPU {1000 * sb_cpu / n_tests:6.2f} ms/test")
    print(f"{label}: baseline {b_wall:7.2f} s wall {n_tests / b_wall:8.1f} tests/s, "
          f"CPU {1000 * b_cpu / n_tests:6.2f} ms/test (fresh Python per test)")
    print(f"{label}: speed-up {b_wall / sb_wall:.1f}x wall, {b_cpu / sb_cpu:.1f}x CPU")


def trivial_check(n: int, workers: int, baseline_workers: int):
    """Per-test overhead: n tests of `print(input())`, jobs of 10 tests, both harnesses."""
    print(f"\n== per-test overhead: {n} tests of print(input()), {workers} workers "
          f"(baseline: {baseline_workers}) ==")
    jobs = [dict(code="print(input())", timeout=10.0, fn_name=None,
                 tests=[{"input": f"{k}\n", "output": f"{k}\n"}
                        for k in range(start, min(start + 10, n))])
            for start in range(0, n, 10)]
    results, sb_wall, sb_cpu = timed(lambda: sb.run_batch(jobs, workers=workers))
    (verdicts, _), b_wall, b_cpu = timed(lambda: run_baseline(jobs, baseline_workers))
    ok = all(r.status == sb.PASS for r in results) and all(v == sb.PASS for vs in verdicts
                                                           for v in vs)
    report_speed("trivial", n, (sb_wall, sb_cpu), (b_wall, b_cpu))
    print("all passed on both sides:", ok)


class RestrictedUnpickler(pickle.Unpickler):
    """Plain containers and strings only: unpickling downloaded data must not run code."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def livecodebench_check(path: str) -> bool:
    print("\n== LiveCodeBench samples: the `import sys; sys.exit(0)` 'solution' ==")
    all_failed = True
    for line in open(path):
        row = json.loads(line)
        packed = zlib.decompress(base64.b64decode(row["test"]))
        blob = RestrictedUnpickler(io.BytesIO(packed)).load()
        io_spec = json.loads(blob["input_output"])
        fn_name = io_spec.get("fn_name")
        if fn_name:   # functional: one JSON argument per input line, JSON output
            tests = [{"input": [json.loads(a) for a in i.strip().split("\n")],
                      "output": json.loads(o)}
                     for i, o in zip(io_spec["inputs"], io_spec["outputs"])]
        else:
            tests = [{"input": i, "output": o}
                     for i, o in zip(io_spec["inputs"], io_spec["outputs"])]
        r = sb.run_tests(row["canonical_solution"], tests, fn_name=fn_name, timeout=4.0)
        labels = json.loads(row["labels"])
        print(f"{labels.get('task_id', '?'):>24}  fn_name={fn_name!s:18} tests={r.total:3d} "
              f"passed={r.passed}  status={r.status}")
        all_failed &= r.passed == 0
    print("every test failed:", all_failed)
    return all_failed


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.path.join(here, "..", "..", "shared", "data"),
                        help="folder with apps_plus_valid_500.json and the LiveCodeBench samples")
    parser.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)),
                        help="parallel workers for both the sandbox and the baseline")
    parser.add_argument("--baseline-workers", type=int, default=None,
                        help="workers of the baseline only (default: --workers; 1 = tests one "
                             "after another, as a grader without a pool runs them)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N problems")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per test")
    parser.add_argument("--skip-baseline", action="store_true", help="sandbox only")
    parser.add_argument("--coverage", action="store_true",
                        help="the sandbox also measures line coverage (as FGO's rollouts ask)")
    parser.add_argument("--trivial", type=int, default=1000,
                        help="tests of print(input()) for the per-test overhead check (0: skip)")
    args = parser.parse_args()
    path = os.path.join(args.data_dir, "apps_plus_valid_500.json")
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: pass --data-dir pointing at the shared data folder.")
    jobs = [dict(job, coverage=args.coverage)
            for job in apps_plus_jobs(path, args.timeout)[:args.limit]]
    args.baseline_workers = args.baseline_workers or args.workers
    n_tests = sum(len(j["tests"]) for j in jobs)
    print(f"APPS+: {len(jobs)} canonical solutions, {n_tests} tests, {args.workers} workers "
          f"(baseline: {args.baseline_workers})")

    results, sandbox_s, sandbox_cpu = timed(lambda: sb.run_batch(jobs, workers=args.workers))
    print(f"sandbox : {sandbox_s:7.2f} s  {n_tests / sandbox_s:8.1f} tests/s, CPU "
          f"{1000 * sandbox_cpu / n_tests:6.2f} ms/test, coverage "
          f"{'on' if args.coverage else 'off'}")
    passed = sum(r.status == sb.PASS for r in results)
    print(f"canonical solutions passing: {passed}/{len(jobs)} = {passed / len(jobs):.1%}")
    for i, (job, r) in enumerate(zip(jobs, results)):
        if r.status != sb.PASS:
            bad = next((t for t in r.tests if t.status != sb.PASS), None)
            detail = r.error or (
                f"out={bad.output[:60]!r} err={bad.stderr[-120:]!r}" if bad else "")
            print(f"  problem {i:3d} fn={job['fn_name']}: {r.status} {r.passed}/{r.total} {detail}")

    if not args.skip_baseline:
        (base, base_times), base_s, base_cpu = timed(
            lambda: run_baseline(jobs, args.baseline_workers))
        report_speed("APPS+", n_tests, (sandbox_s, sandbox_cpu), (base_s, base_cpu))
        differ = [(i, [t.status for t in r.tests], b) for i, (r, b) in enumerate(zip(results, base))
                  if r.status != sb.COMPILE_ERROR and [t.status for t in r.tests] != b]
        print(f"verdicts differing per test: {len(differ)} problems")
        for i, ours, theirs in differ:
            print(f"  problem {i}: sandbox {ours} baseline {theirs}")
        # Where the time goes: the programs' own run time bounds any harness (Amdahl).
        rows = sorted(((t.time, base_times[i][j], i, j) for i, r in enumerate(results)
                       for j, t in enumerate(r.tests) if j < len(base_times[i])), reverse=True)
        child_s = sum(row[0] for row in rows)
        slow = [row for row in rows if row[0] > 0.1]
        print(f"child run time (fork to exit) summed over tests: {child_s:.1f} s; "
              f"{len(slow)} tests over 100 ms take {sum(r[0] for r in slow):.1f} s of it")
        print("slowest tests (sandbox child s, baseline s incl. start-up):",
              ", ".join(f"p{i}/t{j} {a:.2f}/{b:.2f}" for a, b, i, j in rows[:8]))
        if slow:
            slow_s = sum(r[0] for r in slow)
            print(f"bound: a harness with zero per-test cost still runs those {slow_s:.1f} s "
                  f"of program compute on {args.workers} workers: speed-up <= "
                  f"{base_s / (slow_s / args.workers):.1f}x")

    if args.trivial:
        trivial_check(args.trivial, args.workers, args.baseline_workers)

    lcb = os.path.join(args.data_dir, "livecodebench_v1_samples_3.jsonl")
    if os.path.exists(lcb):
        livecodebench_check(lcb)


if __name__ == "__main__":
    main()
