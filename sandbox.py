"""The judge: run an untrusted Python program on unit tests, under limits, and give a verdict.

What it protects against (each test, as root, the training setup; infra/isolation.py holds the
threat model and what degrades without root):
  - a program that loops, sleeps, floods stdout or allocates without bound: a CPU-time limit, a
    wall cap, an output cap and a memory limit per test, each its own verdict;
  - a program that reads or writes outside its test: a uid of its own, no network, a read-only
    filesystem but for a fresh working directory, a seccomp filter; every process it started is
    killed after the test;
  - a program that lies about its result: it never sees the expected outputs (the parent
    compares), and its report is typed, bounded data, never a verdict.
What it does not protect against:
  - a bug in the kernel or in CPython that lets a program out of its uid, namespaces or filter;
  - a program that reads the judge's objects in its own interpreter (gc, frames, ctypes): all it
    can learn there is its own test's input; it cannot reach the expected output.

Method
------
A program is judged on a list of tests. Three kinds:
  standard I/O   {"input": str, "output": str}    the program reads stdin and prints;
  call-based     {"input": [args], "output": v}   fn_name names a top-level function or a
                                                   method of `class Solution` (LeetCode style);
  check          {"check": code}                  HumanEval's test code: its check(candidate)
                                                   is called with the program's function fn_name
                                                   and passes when it raises nothing.
Verdict per test: pass | wrong_answer | runtime_error | timeout | memory_limit | output_limit.
Verdict per program: compile_error if the code does not compile (decided here, no test runs),
else pass when every test passes, else the verdict of the first failing test. After the first
test that times out the rest are not run and count as timeouts (stop_after_timeout=False runs
each one); stop_at_first_failure=True (not with coverage) runs none after the first failing
test (not_run): the worker waits after each test for its verdict from here (_judge_test).
A job with zero tests is an error: "pass with 0 tests" would be a free reward.
A returned int over 4300 digits cannot be sent: wrong_answer. multiprocessing works (fork,
pipes, semaphores) except what needs AF_UNIX sockets (Manager, Listener).

What "equal output" means is a rule per data source (RULES): the project's own rules are
outputs_match and values_match below; a benchmark's source gets its harness's own rule
(infra/sandbox_rules.py). A call-based value reaches the parent as JSON data that keeps tuples,
sets and dicts apart (infra/sandbox_wire.py), built only from exact builtin types.

Coverage (coverage=True) never changes a verdict: the verdict comes from a run without a
tracer, the lines from a second run of the test under a line tracer with more time (lines of
code objects named "<solution>"). Result.executed_lines is None (unknown) unless every test's
traced run ended as its verdict run did and showed that no line escaped the tracer: it was not
removed (sys.settrace(None), an error inside it such as RecursionError), every thread and fork
(multiprocessing too) reported, and the line set holds only what the tracer added (the checks:
infra/sandbox_coverage.py). A test that hit a limit has unknown coverage.
Not guaranteed: the tracer lives in the program's interpreter, so a program that reaches the
judge's objects there (gc, frames, ctypes) and edits both the lines and the checks' counters,
or writes the report itself, can forge its coverage; lines run in a process it exec's are not
counted. Coverage is FGO's mask, never a reward or a verdict.

One test, from run_batch to its verdict: run_batch compiles the job here (prepare), sends its
code and test inputs to a worker (infra/sandbox_pool.py), whose job process forks a child per
test (infra/sandbox_worker.py), which runs the program (infra/sandbox_child.py); the worker
sends back what it observed (stdout, stderr, exit, CPU time, the child's report), and
_judge_test makes each verdict from those observations here.
"""

from __future__ import annotations

import math
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from infra import sandbox_cli, sandbox_pool, sandbox_prepare, sandbox_rules, sandbox_wire
from infra.sandbox_child import CHECK_VERDICTS
from infra.sandbox_prepare import Prepared, distinct_jobs, each_distinct_once
from infra.sandbox_rules import floats_close, is_decimal, plain_number
from infra.sandbox_verdicts import (  # the verdicts, also sandbox.PASS, ...
    COMPILE_ERROR,
    MEMORY_LIMIT,
    NOT_RUN,
    OUTPUT_LIMIT,
    PASS,
    RUNTIME_ERROR,
    TIMEOUT,
    WRONG_ANSWER,
)
from infra.sandbox_wire import SHOWN_OUTPUT, STDERR_TAIL


@dataclass
class TestResult:
    status: str
    time: float             # wall seconds
    output: str = ""        # actual output, truncated (call-based: repr of the returned value)
    stderr: str = ""        # tail
    executed_lines: set[int] = field(default_factory=set)   # empty unless coverage_known
    cpu_time: float = 0.0   # CPU seconds of the test's process tree (what timeouts judge)
    coverage_known: bool = False   # coverage asked, and this test's lines are all it ran


@dataclass
class Result:
    status: str
    passed: int
    total: int
    tests: list[TestResult]
    executed_lines: set[int] | None   # None: coverage asked but unknown for some test
    wall_time: float
    error: str = ""         # compile error message, sandbox trouble
    coverage_unknown: int = 0   # tests whose coverage is unknown (coverage asked)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


# ---------------------------------------------------------------------------------------------
# What "equal output" means: the project's own rules (pure functions, run in the parent)
# ---------------------------------------------------------------------------------------------

def _tokens_match(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if is_decimal(expected) and plain_number(actual):
        return floats_close(float(expected), float(actual))
    return False


def _output_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def outputs_match(expected: str, actual: str) -> bool:
    """Standard-I/O rule: per line, token by token, in order; decimals within FLOAT_TOL.

    >>> outputs_match("1 2\\n0.5\\n\\n", "1  2   \\n0.50000001")
    True
    >>> outputs_match("2 1", "1 2"), outputs_match("1", "1.0"), outputs_match("0.333", "0.3333")
    (False, False, False)
    """
    exp_lines, act_lines = _output_lines(expected), _output_lines(actual)
    if len(exp_lines) != len(act_lines):
        return False
    for exp_line, act_line in zip(exp_lines, act_lines):
        exp_tokens, act_tokens = exp_line.split(), act_line.split()
        if len(exp_tokens) != len(act_tokens):
            return False
        if not all(_tokens_match(e, a) for e, a in zip(exp_tokens, act_tokens)):
            return False
    return True

def values_match(expected, actual) -> bool:
    """Call-based rule on plain data: tuples == lists, integers exact, floats within FLOAT_TOL,
    True == 1 as in Python (APPS+ ground truths rely on it: 2 canonical solutions return False
    for 0).

    >>> values_match([1, (2, 3.0)], [1, [2, 3.0000000001]]), values_match(True, 1)
    (True, True)
    >>> values_match(10**12 + 7, 1e12), values_match(2, 2.0)
    (False, True)
    """
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, int):
            return expected == actual   # an int expected: exact (2.0 == 2, 1e12 != 10**12 + 7)
        if math.isnan(expected) or math.isnan(actual):
            return math.isnan(expected) and math.isnan(actual)
        return expected == actual or floats_close(float(expected), float(actual))
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(expected) == len(actual) and all(map(values_match, expected, actual))
    if isinstance(expected, (set, frozenset)):   # a set expected: compare as sorted lists
        try:
            return values_match(sorted(expected), actual)
        except TypeError:
            return False
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(
            values_match(expected[k], actual[k]) for k in expected)
    return type(expected) is type(actual) and expected == actual


def own_values_match(expected, actual) -> bool:
    """tasks, builtin (and a source not named in RULES): the project's own call-based rule,
    values_match on the value as JSON data (tuples as lists, sets as sorted lists, floats within
    FLOAT_TOL, True == 1). Both the tests and the references are ours, and they return ints,
    strings, lists and dicts; the shipped base model and every result were judged by it.
    Raises TypeError when the value is no JSON data (a dict with non-string keys, a set whose
    items do not sort): the verdict is then wrong_answer."""
    return values_match(expected, sandbox_wire.as_json_data(actual))


# Which rule judges a source's tests: source -> (standard-I/O rule, call-based rule). The
# sources are data.py's Problem.source; one not named here gets the project's own rule.
# HumanEval's tests are check tests ({"check": code}): its check() compares, with `==`.
RULES = {
    "tasks": (outputs_match, own_values_match),
    "builtin": (outputs_match, own_values_match),
    "apps": (outputs_match, sandbox_rules.apps_values_match),
    "apps_plus": (outputs_match, sandbox_rules.apps_values_match),
    "code_contests": (sandbox_rules.code_contests_outputs_match,
                      sandbox_rules.python_values_match),
    "livecodebench": (sandbox_rules.livecodebench_outputs_match,
                      sandbox_rules.livecodebench_values_match),
    "humaneval": (outputs_match, sandbox_rules.python_values_match),
}
OWN_RULE = RULES["tasks"]


def rule_for(source: str | None) -> tuple:
    """(standard-I/O rule, call-based rule) of a data source (see RULES)."""
    return RULES.get(source, OWN_RULE)


# ---------------------------------------------------------------------------------------------
# Parent side: the public API
# ---------------------------------------------------------------------------------------------

def part_of(result: Result, indices: Sequence[int], coverage: bool = False) -> Result:
    """The Result of the program on the tests at `indices` of the job that gave `result`, a
    job that ran every test (stop_after_timeout=False, no stop at a first failure): each test's
    verdict is its own (a fresh process, its own limits), so the program's is the first failing
    one of these. A result without per-test verdicts (a compile error, the worker's trouble) is
    the same for any part. coverage: whether the job asked for it."""
    if not result.tests:
        return replace(result, passed=0, total=len(indices))
    tests = [result.tests[i] for i in indices]
    failed = [t.status for t in tests if t.status != PASS]
    unknown = sum(not t.coverage_known for t in tests) if coverage else 0
    lines = set().union(*(t.executed_lines for t in tests))
    return replace(result, status=failed[0] if failed else PASS, passed=len(tests) - len(failed),
                   total=len(tests), tests=tests, executed_lines=None if unknown else lines,
                   coverage_unknown=unknown)


def run_tests(code: str, tests: list[dict], fn_name: str | None = None, timeout: float = 4.0,
              memory_mb: int = 1024, coverage: bool = False, source: str | None = None) -> Result:
    """Judge one program (see the module docstring). Starts one worker; prefer run_batch."""
    return run_batch([dict(code=code, tests=tests, fn_name=fn_name, timeout=timeout,
                           memory_mb=memory_mb, coverage=coverage, source=source)], workers=1)[0]


def run_batch(jobs: Iterable[dict], workers: int | None = None) -> list[Result]:
    """Judge many programs on a pool of warm workers; results in the order of jobs.

    Each job is a dict with code, tests and optionally fn_name, timeout, memory_mb, coverage,
    stop_after_timeout (default True: the tests after a timeout are not run and count as timeouts;
    False: every test is run and judged on its own), stop_at_first_failure (default False; True:
    none after the first failing test, not_run), source (the data source whose comparison
    rules judge the outputs, see RULES; default: the project's own), preamble (source run in the
    program's namespace before it, as HumanEval's harness runs its prompt; data.sandbox_job).
    jobs: a list (checked whole before any runs), or an iterator that may block until its next
    job exists, e.g. one fed while the completions are still being generated
    (rollouts.generate_while_scoring): the workers judge the first jobs meanwhile.
    Raises ValueError for a malformed job, RuntimeError when no worker starts; whatever the
    programs do, every job gets a Result. Jobs that are the same (distinct_jobs) run once in
    the call and share one Result object.
    """
    workers = workers or len(os.sched_getaffinity(0))
    owner: list[int] = []   # per job: its distinct job, the one that runs (distinct_jobs)
    if isinstance(jobs, Sequence):
        jobs, owner = distinct_jobs(jobs)
        if not jobs:
            return []
        workers = min(workers, len(jobs))
    else:
        jobs = each_distinct_once(jobs, owner)
    results: dict[int, Result] = {}
    next_job = enumerate(jobs)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def serve():
        worker = None
        try:
            while True:
                with lock:   # one thread waits for the iterator's next job, the others here
                    i, job = next(next_job, (None, None))
                if i is None or errors:
                    return
                start = time.monotonic()
                try:
                    prepared = sandbox_prepare.prepare(job)
                    if prepared.compile_error is not None:
                        results[i] = Result(COMPILE_ERROR, 0, len(job["tests"]), [], set(),
                                            time.monotonic() - start, prepared.compile_error)
                        continue
                    if worker is None or not worker.alive():
                        if worker is not None:
                            worker.close()
                        worker = sandbox_pool.start_worker()
                    sent = time.monotonic()
                    # Past its byte cap stdout is compacted (CompactText), which only the line
                    # rule reads the same way; a call-based test's stdout is never compared.
                    compact = (job["fn_name"] is not None
                               or rule_for(job["source"])[0] is outputs_match)
                    report = worker.run(job, prepared, compact,   # observations, never a verdict
                                        _judge_test if job["stop_at_first_failure"] else None)
                    results[i] = _judge_job(job, prepared, report, time.monotonic() - sent)
                    if results[i].status == NOT_RUN:   # stopped after a pass (a bug): run all
                        results[i] = _judge_job(job, prepared, worker.run(job, prepared, compact),
                                                time.monotonic() - sent)
                except (RuntimeError, KeyboardInterrupt):
                    raise
                except Exception as e:   # a sandbox bug must not lose the batch: this job only
                    results[i] = Result(RUNTIME_ERROR, 0, len(job["tests"]), [], set(),
                                        time.monotonic() - start,
                                        f"sandbox error: {type(e).__name__}: {e}"[:500])
        except BaseException as e:  # re-raised in the calling thread
            errors.append(e)
        finally:
            if worker is not None:
                try:
                    worker.close()
                except Exception:   # best effort already; a thread must not print a traceback
                    pass

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [results[k] for k in owner]


class BackgroundBatch:
    """run_batch in a thread of its own, fed job by job while the caller does other work
    (e.g. the engine generating the next completions): put(job) queues one, close() says
    there are no more and waits for the last verdict, results() (after close) returns the
    results in put order, or raises in the caller's thread what run_batch raised."""

    def __init__(self, workers: int | None = None):
        self._jobs: queue.Queue = queue.Queue()
        self._out: dict = {}
        self._thread = threading.Thread(target=self._judge, args=(workers,), daemon=True)
        self._thread.start()

    def _judge(self, workers):
        try:
            self._out["results"] = run_batch(iter(self._jobs.get, None), workers=workers)
        except BaseException as e:   # re-raised by results(), in the caller's thread
            self._out["error"] = e

    def put(self, job: dict) -> None:
        self._jobs.put(job)

    def close(self) -> None:
        if self._thread.is_alive():
            self._jobs.put(None)     # the end of the jobs: run_batch returns after them
            self._thread.join()

    def results(self) -> list[Result]:
        self.close()
        if "error" in self._out:
            raise self._out["error"]
        return self._out["results"]


def executable_lines(program: str) -> set[int]:
    """1-based lines of `program` that hold bytecode: the lines its coverage can report (the
    program compiled as the sandbox compiles it). Blank lines, comments, `else:`, `try:` hold
    none. Empty when the program does not compile.

    >>> sorted(executable_lines("def sign(x):\\n    if x >= 0:\\n        return 1\\n    else:\\n"
    ...                         "        return -1\\n\\nprint(sign(3))\\n"))
    [1, 2, 3, 5, 7]
    """
    try:
        code = sandbox_prepare.compile_quietly(program)
    except Exception:   # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return set()
    return sandbox_prepare.code_lines(code)


def isolation_report() -> dict:
    """What isolation a worker gets on this machine (starts and stops one worker)."""
    worker = sandbox_pool.start_worker()
    try:
        return {k: v for k, v in worker.info.items() if k != "cgroup_dirs"}
    finally:
        worker.close()


# ---------------------------------------------------------------------------------------------
# Parent side: verdicts (the only place they are made)
# ---------------------------------------------------------------------------------------------

def _judge_job(job: dict, prepared: Prepared, report: dict | None, wall_time: float) -> Result:
    """The program's verdict from the worker's report: each test judged by _judge_test, the
    first failing verdict wins; tests not run after a timeout (stop_after_timeout) count as
    timeouts, after another failure (stop_at_first_failure) as not_run."""
    tests = job["tests"]
    if report is None:
        return Result(RUNTIME_ERROR, 0, len(tests), [], set(), wall_time,
                      "the sandbox worker died or hung on this job")
    if report.get("error"):   # the worker could not run the job at all
        return Result(RUNTIME_ERROR, 0, len(tests), [], set(), wall_time, report["error"])
    judged = []
    for raw, t in zip(report["tests"], tests):
        try:
            judged.append(_judge_test(raw, t.get("output"), job, prepared))
        except Exception as e:   # never expected: judging is total on validated data
            judged.append(TestResult(RUNTIME_ERROR, 0.0, "",
                                     f"sandbox: could not judge: {type(e).__name__}"))
    not_run = (TestResult(TIMEOUT, 0.0, "", "not run: an earlier test timed out")
               if judged and judged[-1].status == TIMEOUT and job["stop_after_timeout"] else
               TestResult(NOT_RUN, 0.0, "", "not run: an earlier test failed"))
    judged += [not_run] * (len(tests) - len(judged))
    failed = [t.status for t in judged if t.status != PASS]
    lines = set().union(*(t.executed_lines for t in judged))
    unknown = sum(not t.coverage_known for t in judged) if job["coverage"] else 0
    return Result(failed[0] if failed else PASS, len(judged) - len(failed), len(tests), judged,
                  None if unknown else lines, wall_time, coverage_unknown=unknown)


def _judge_test(raw: dict, expected, job: dict, prepared: Prepared) -> TestResult:
    """Verdict of one test from the worker's raw observations (the only place verdicts are made)."""
    fn_name = job["fn_name"]
    stdout = raw["stdout"].decode("utf-8", "replace")
    stderr = raw["stderr"].decode("utf-8", "replace")[-STDERR_TAIL:]
    exited = raw["kind"] == "exited"
    message = sandbox_wire.parse_message(raw["message"], job) if exited else {}
    shown = stdout[:SHOWN_OUTPUT]
    memory_hint = "MemoryError" in stderr or "Cannot allocate memory" in stderr
    timed_out = (raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU
                 or raw["cpu"] > job["timeout"])
    lines = raw.get("coverage")   # the traced run's lines (infra/sandbox_coverage.py) or None
    known = lines is not None and set(lines) <= prepared.executable_lines()
    if timed_out:
        status = TIMEOUT
    elif raw["kind"] == "output_limit":
        status = OUTPUT_LIMIT
    elif raw["oom"] or (message or {}).get("exception") == "MemoryError" or (
            raw["exit_code"] != 0 and memory_hint):
        status = MEMORY_LIMIT
    elif message is None:
        status = RUNTIME_ERROR
        stderr = (stderr + "\nsandbox: malformed harness report (written by the program?)")[
            -STDERR_TAIL:]
    elif job["check"]:   # the checker's exit status says how check(candidate) ended
        status = CHECK_VERDICTS.get(raw["check_status"], RUNTIME_ERROR)
    elif raw["exit_code"] != 0:
        status = RUNTIME_ERROR
    elif fn_name is not None:
        if "result" in message:
            status, shown = _judge_value(job, expected, message["result"])
        elif "result_error" in message:
            status, shown = WRONG_ANSWER, message["result_error"]
        else:   # exited (sys.exit, os._exit) before the function returned
            status = RUNTIME_ERROR
    else:
        stdio_rule = rule_for(job["source"])[0]
        status = PASS if stdio_rule(expected, stdout) else WRONG_ANSWER
    return TestResult(status, raw["time"], shown, stderr, set(lines) if known else set(),
                      raw["cpu"], known)


def _judge_value(job: dict, expected, wire) -> tuple[str, str]:
    """(verdict, shown output) of a call-based test under its source's rule."""
    values_rule = rule_for(job["source"])[1]
    try:
        ok = values_rule(expected, wire)
    except TypeError as e:   # the own rule: not JSON data
        return WRONG_ANSWER, f"return value not comparable as data: {e}"[:SHOWN_OUTPUT]
    return (PASS if ok else WRONG_ANSWER), sandbox_wire.wire_repr(wire)


# ---------------------------------------------------------------------------------------------
# Command line: exit 0 when every test passes, 1 when not, 2 for a usage error (one line)
# ---------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    args = sandbox_cli.parse_args(argv, RULES)
    try:
        code = sandbox_cli.read_program(args.program)
        tests, fn_name = sandbox_cli.load_tests(args.tests)
        try:
            result = run_tests(code, tests, args.fn_name or fn_name, args.timeout,
                               args.memory_mb, args.coverage, args.source)
        except ValueError as e:   # a malformed test list (run_batch's check_job)
            reason = str(e).removeprefix("job 0: ")
            raise sandbox_cli.UsageError(f"the tests file {args.tests!r}: {reason}") from None
    except sandbox_cli.UsageError as e:
        print(f"sandbox.py: error: {e}", file=sys.stderr)
        return 2
    print(sandbox_cli.result_json(result))
    return 0 if result.status == PASS else 1


if __name__ == "__main__":
    sys.exit(main())
