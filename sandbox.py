"""Run untrusted Python programs on unit tests, fast and safe: the reward of every method here.

Method
------
A program is judged on a list of tests. Two kinds:
  standard I/O   {"input": str, "output": str}    the program reads stdin and prints;
  call-based     {"input": [args], "output": v}   fn_name names a top-level function or a
                                                   method of `class Solution` (LeetCode style).
Prelude: a call-based program is a LeetCode-style fragment that its judge completes with
imports (`List`, `defaultdict`, `heapq` are used without importing them). Its globals start with
LiveCodeBench's import list (PRELUDE_STAR names, then PRELUDE_MODULES; builtins are never
shadowed). It is put in the namespace, not prepended as text, so line numbers and coverage are
those of the submitted code. A prelude name is never taken as the program's function: fn_name
must be defined (def, class, assignment or import) by the program itself. Standard-I/O programs
get no prelude: they are whole scripts, judged as a contest judge runs them.
Verdict per test: pass | wrong_answer | runtime_error | timeout | memory_limit | output_limit.
Verdict per program: compile_error if the code does not compile (decided here, in the parent; no
test runs), else pass when every test passes, else the verdict of the first failing test.
pass_rate = passed / total.
stdin, stdout and stderr are those CPython makes on Linux under the test's LANG=C.UTF-8 (UTF-8
with surrogateescape; stdin translates no newline, so a lone CR stays inside its line; stderr
line-buffered, backslashreplace); /dev/stdout and /dev/stderr open as under `python3 sol.py`.
A test ends the way the interpreter ends: non-daemon threads are joined, atexit handlers run,
sys.stdout/sys.stderr and file objects left in the program's globals are flushed; os._exit ends
at once (buffered output is lost, as in CPython) but still reports coverage.
Time: a test is a timeout when its process tree used more than `timeout` seconds of CPU (not
counting the worker's own work for it: forking it, draining its pipes), or when it ran longer
than a wall cap of WALL_FACTOR * timeout + WALL_SLACK seconds (a sleeping or blocked program).
The cap does not count the time the threads of the test's main process spent runnable but
waiting for a CPU (their schedstat run delays, summed: the work may be in a threading.Thread
while the main thread sits in join()), up to HARD_CAP_FACTOR times the cap. Neither CPU time
nor that wall time depends on how loaded the machine is, so the same program gets the same
verdict idle and busy unless it is within noise of the limit.

Comparison rules (outputs_match, values_match; the parent process applies them, never the child):
  standard I/O: split into lines; trailing whitespace of each line and trailing blank lines are
    ignored; the line counts must agree; each line is split on whitespace and compared token by
    token, in order. A token is equal if the strings are equal, or if the expected token is a
    decimal (has a '.' or an exponent) and the actual token is a plain ASCII number
    ([+-]digits[.digits][e[+-]digits]) with |a - e| <= FLOAT_TOL * max(1, |e|). Integers compare
    as strings ("1" != "1.0"). Unlike the original APPS checker: no reordering, no token sets,
    no rounding to 3 decimals. Cost is linear in the output: no regex touches program output.
  output cap: stdout past max(OUTPUT_LIMIT_MIN, 2 * len(expected) + 64 KiB) bytes is kept as
    the rule above reads it (_CompactText: single spaces, no trailing whitespace or blank
    lines, decimals longer than any float's repr as that repr), which the rule judges the same
    way against any expected text. So an output that is long only in what the rule ignores
    (trailing spaces, 30-digit decimals for "0.5") is judged; output_limit when it is over the
    cap even so, or when RAW_OUTPUT_FACTOR times the cap was printed (a flood). (The worker
    cannot compare: it never sees the expected output.)
  call-based: the child turns the return value into plain JSON data (tuples -> lists); only exact
    builtin types are accepted, so no object the program builds (an __eq__ that is always True, an
    int subclass) reaches the comparison. Then deep equality with tuples == lists, True == 1 (as in
    Python), integers exact (an expected int equals only a value that == it exactly, so 1e12 is
    not 10**12 + 7), floats within FLOAT_TOL as above, sets as sorted lists.

One test, from run_batch to its verdict
---------------------------------------
  run_batch(jobs)                  parent: one thread per worker takes the next job
    _prepare(job)                  compiles it here (a compile error needs no worker)
    _Worker.run(job)               sends code + test inputs to a worker process, which forks
      _serve_one_job                 a process for the job, which reads it and runs
      _run_job -> _run_one_test      each test in a forked child (_child runs the program) and
                                     _watch-es it: stdout, stderr, the child's report, CPU, wall
    _judge_job(job, report)        parent: _judge_test makes each test's verdict from those
                                   observations; the first failing verdict is the program's
Where the program runs is confined by isolation.py (see "Isolation" below).

Architecture (why it is fast)
------------------------------
run_batch starts one worker per core: a fresh `python -I` running _worker_main with an empty
environment, a few common modules pre-imported. Each worker is a fork server: per job it forks a
job process, which forks a child per test, so a test costs a fork, not a Python start-up. The
fork server itself never reads a job nor sees a result (the job process does, and exits after
replying), so the memory every job is forked from holds nothing of an earlier job: no program
can find a sibling sample's answer in it, not even in freed buffers. The parent compiles the
code first (compile errors are decided there), then sends a worker only the code and the test
INPUTS; the job process compiles it once, before forking the tests. The expected outputs stay
in the parent, which judges what comes back. Workers and threads live for one run_batch call
and are gone when it returns; a worker that fails to start is retried (its stderr is printed),
one that dies is replaced.
Cost per test (measured with perf on a 2-core VM): about 3 ms of CPU against about 10 ms for a
fresh interpreter. Most of it is the kernel's copy-on-write work for the fork: copying the
worker's page tables and ~700 page faults per test. The isolation adds no fork or exec per test;
the job process adds one fork per job (about 2.5 ms of CPU: a one-test job costs about twice
what it did when tests were forked from the fork server itself).
The interpreter-like exit steps run only when there is something to do (threads, atexit
handlers, file objects), since each object touched after the fork costs a page copy.

The result channel: the parent trusts nothing the program can write
---------------------------------------------------------------------
The child reports observations only (return value as data, exception type, covered lines) on
fd 3; the parent decides every verdict. The parent treats that message as hostile: JSON with a
fixed set of keys, each typed and size-bounded (result: plain data, depth <= 100; lines: ints
that are executable lines of the compiled code; exception/result_error: short strings); anything
else makes that test a runtime_error. Compile errors are decided by the parent, so a report
cannot claim one. stdout is never parsed for markers. Any failure while judging one job becomes
that job's runtime_error; a worker that dies is replaced: run_batch returns a verdict for every
job whatever a program writes (run_batch raises only for invalid jobs or when no worker can be
started at all). The program runs in the same process as the harness code, so it can write any
message on fd 3: all it can claim is "my function returned X", which returning X does anyway.

Isolation
---------
isolation.py confines each worker and each test; its docstring holds the threat model. As root
(the training setup) a test runs as a uid of its own, in the worker's pid, network, IPC and mount
namespaces (no network, host processes and home directories invisible, the filesystem
read-only but for a fresh tmpfs as working directory), under a seccomp filter, rlimits and a
cgroup that bounds the memory and tasks of its whole process tree and measures its CPU time;
every process it started is killed after the test. Without root it degrades to rlimits, the
seccomp filter and the tree kill. isolation_report() says what this machine gives.

Simplifications (documented choices)
------------------------------------
* After the first test that times out, the program's remaining tests are not run and count as
  timeout: a program that loops forever costs one timeout, not one per test. A job with
  stop_after_timeout=False runs every test instead (each costs at most its own timeout): then
  each test's verdict is its own, whatever tests come before it in the list (a pass rate that
  must not depend on the order of the tests needs it; pass/fail of the whole job does not).
* A job with zero tests is an error (ValueError): "pass with 0 tests" would be a free reward.
* Coverage (sys.settrace/threading.settrace, lines of code objects named "<solution>") is
  reported by the child when it ends, also through sys.exit and os._exit; a test that times
  out or is killed contributes no lines. Consumers: an empty set means "no coverage known".
* Huge ints (> 4300 digits) in a call-based return value are not serialisable: wrong_answer.
* multiprocessing works (fork, pipes, semaphores in the test's own /dev/shm) except what needs
  AF_UNIX sockets (Manager, Listener).
"""

from __future__ import annotations

import argparse
import ast
import codecs
import json
import math
import os
import pickle
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import isolation

PASS, WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT, COMPILE_ERROR = (
    "pass", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit",
    "compile_error")

FLOAT_TOL = 1e-6            # absolute for |e| <= 1, relative above
OUTPUT_LIMIT_MIN = 1 << 20  # stdout cap per test: max(this, 2 * len(expected) + 64 KiB) bytes
RAW_OUTPUT_FACTOR = 16      # ... past the cap it is compacted (_CompactText), up to 16x raw
FLOAT_REPR_MAX = 24         # no repr(float) is longer: a longer decimal token can only shrink
STDERR_TAIL = 2000          # characters of stderr kept per test
SHOWN_OUTPUT = 1000         # characters of actual output kept in TestResult.output
WALL_FACTOR, WALL_SLACK = 3.0, 1.0   # wall cap per test = WALL_FACTOR * timeout + WALL_SLACK
HARD_CAP_FACTOR = 4.0       # ... not counting time spent waiting for a CPU, up to 4x that
WORKER_START_TRIES = 3
MESSAGE_KEYS = frozenset({"result", "result_error", "exception", "lines"})
MAX_RESULT_DEPTH = 100
SOLUTION_FILENAME = "<solution>"
HARNESS_FD = 3
PRELOADED = ("math", "collections", "itertools", "functools", "heapq", "bisect", "re", "string",
             "random", "copy", "operator", "typing", "fractions", "decimal", "statistics",
             "datetime", "json", "io", "traceback", "array", "queue", "threading", "dataclasses",
             "enum", "tempfile", "atexit")
# LeetCode-style call-based code is a fragment that the judge completes with its own imports
# (LiveCodeBench's harness: `from X import *` for these, then `import X`). Put the same names in
# the program's globals, not as source text, so line numbers and coverage stay exact.
PRELUDE_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                "random", "statistics", "itertools", "functools", "operator", "typing")
PRELUDE_MODULES = PRELUDE_STAR + ("io", "sys", "json", "array", "fractions", "decimal")


@dataclass
class TestResult:
    status: str
    time: float             # wall seconds
    output: str = ""        # actual output, truncated (call-based: repr of the returned value)
    stderr: str = ""        # tail
    executed_lines: set[int] = field(default_factory=set)
    cpu_time: float = 0.0   # CPU seconds of the test's process tree (what timeouts judge)


@dataclass
class Result:
    status: str
    passed: int
    total: int
    tests: list[TestResult]
    executed_lines: set[int]
    wall_time: float
    error: str = ""         # compile error message, sandbox trouble

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0


# ---------------------------------------------------------------------------------------------
# Comparison rules (pure functions, run in the parent; linear in the size of their inputs)
# ---------------------------------------------------------------------------------------------

def _close(expected: float, actual: float) -> bool:
    return abs(actual - expected) <= FLOAT_TOL * max(1.0, abs(expected))


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def _plain_number(token: str) -> bool:
    """[+-]? (d+ | d+. | d+.d+ | .d+) ([eE][+-]?d+)?, ASCII only; str methods, no regex."""
    if token[:1] in "+-":
        token = token[1:]
    mantissa, e, exponent = token.replace("E", "e").partition("e")
    if e:
        if exponent[:1] in "+-":
            exponent = exponent[1:]
        if not _digits(exponent):
            return False
    whole, dot, frac = mantissa.partition(".")
    if not dot:
        return _digits(whole)
    return (whole == "" or _digits(whole)) and (frac == "" or _digits(frac)) and bool(whole + frac)


def _is_decimal(token: str) -> bool:
    """A number with a '.' or an exponent (the tokens compared within FLOAT_TOL)."""
    return _plain_number(token) and ("." in token or "e" in token or "E" in token)


def _tokens_match(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if _is_decimal(expected) and _plain_number(actual):
        return _close(float(expected), float(actual))
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


class _CompactText:
    """Program output rewritten as outputs_match reads it, so that it equals the original under
    that rule against ANY expected text: one space between the tokens of a line, no trailing
    whitespace, no trailing blank lines, and a decimal token longer than any float's repr
    written as repr(float(token)) (its float, hence every comparison with it, is unchanged; an
    expected token equal to either form is a decimal with that float). The worker uses it for
    stdout past its byte cap (_StdoutBuffer). Fed bytes in chunks, decoded as the parent
    decodes them (UTF-8, invalid bytes replaced); `text` holds the compacted form.

    >>> c = _CompactText(); c.feed(b"1   2  \\n\\n0.50000000000000000000000001\\n\\n\\n")
    >>> c.feed(b"", final=True); bytes(c.text)
    b'1 2\\n\\n0.5'
    """

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = bytearray()
        self.partial = ""             # the last token of the unfinished line, maybe unfinished
        self.newlines = 0             # line ends not written yet: dropped if no token follows
        self.line_has_tokens = False

    def feed(self, data, final: bool = False):
        *lines, last = (self.partial + self.decoder.decode(data, final)).split("\n")
        for line in lines:
            self._add_tokens(line.split())
            self.newlines += 1
            self.line_has_tokens = False
        tokens = last.split()
        self.partial = "" if final or not tokens or last[-1].isspace() else tokens.pop()
        self._add_tokens(tokens)

    def size(self) -> int:
        return len(self.text) + len(self.partial)

    def _add_tokens(self, tokens: list[str]):
        if not tokens:
            return
        if max(map(len, tokens)) > FLOAT_REPR_MAX:
            tokens = [_short_decimal(t) for t in tokens]
        self.text += b"\n" * self.newlines + (b" " if self.line_has_tokens else b"")
        self.text += " ".join(tokens).encode()
        self.newlines, self.line_has_tokens = 0, True


def _short_decimal(token: str) -> str:
    if len(token) > FLOAT_REPR_MAX and _is_decimal(token):
        value = float(token)
        if math.isfinite(value):
            return repr(value)
    return token


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
        return expected == actual or _close(float(expected), float(actual))
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


# ---------------------------------------------------------------------------------------------
# Parent side: the public API
# ---------------------------------------------------------------------------------------------

def run_tests(code: str, tests: list[dict], fn_name: str | None = None, timeout: float = 4.0,
              memory_mb: int = 1024, coverage: bool = False) -> Result:
    """Judge one program (see the module docstring). Starts one worker; prefer run_batch."""
    return run_batch([dict(code=code, tests=tests, fn_name=fn_name, timeout=timeout,
                           memory_mb=memory_mb, coverage=coverage)], workers=1)[0]


def run_batch(jobs: list[dict], workers: int | None = None) -> list[Result]:
    """Judge many programs on a pool of warm workers; results in the order of jobs.

    Each job is a dict with code, tests and optionally fn_name, timeout, memory_mb, coverage,
    stop_after_timeout (default True: the tests after a timeout are not run and count as timeouts;
    False: every test is run and judged on its own).
    Raises ValueError for a malformed job, RuntimeError when no worker starts; whatever the
    programs do, every job gets a Result.
    """
    jobs = [_check_job(job, i) for i, job in enumerate(jobs)]
    if not jobs:
        return []
    workers = workers or len(os.sched_getaffinity(0))
    results: list[Result | None] = [None] * len(jobs)
    next_job = iter(range(len(jobs)))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def serve():
        worker = None
        try:
            while True:
                with lock:
                    i = next(next_job, None)
                if i is None or errors:
                    return
                start = time.monotonic()
                try:
                    prepared = _prepare(jobs[i])
                    if prepared.compile_error is not None:
                        results[i] = Result(COMPILE_ERROR, 0, len(jobs[i]["tests"]), [], set(),
                                            time.monotonic() - start, prepared.compile_error)
                        continue
                    if worker is None or not worker.alive():
                        if worker is not None:
                            worker.close()
                        worker = _start_worker()
                    sent = time.monotonic()
                    report = worker.run(jobs[i], prepared)   # observations, never a verdict
                    results[i] = _judge_job(jobs[i], prepared, report, time.monotonic() - sent)
                except (RuntimeError, KeyboardInterrupt):
                    raise
                except Exception as e:   # a sandbox bug must not lose the batch: this job only
                    results[i] = Result(RUNTIME_ERROR, 0, len(jobs[i]["tests"]), [], set(),
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

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(workers, len(jobs)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def executable_lines(program: str) -> set[int]:
    """1-based lines of `program` that hold bytecode: the lines its coverage can report (the
    program compiled as the sandbox compiles it). Blank lines, comments, `else:`, `try:` hold
    none. Empty when the program does not compile.

    >>> sorted(executable_lines("def sign(x):\\n    if x >= 0:\\n        return 1\\n    else:\\n"
    ...                         "        return -1\\n\\nprint(sign(3))\\n"))
    [1, 2, 3, 5, 7]
    """
    try:
        code = _compile_quietly(program)
    except Exception:   # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return set()
    return _code_lines(code)


def isolation_report() -> dict:
    """What isolation a worker gets on this machine (starts and stops one worker)."""
    worker = _start_worker()
    try:
        return {k: v for k, v in worker.info.items() if k != "cgroup_dirs"}
    finally:
        worker.close()


# ---------------------------------------------------------------------------------------------
# Parent side: verdicts (the only place they are made)
# ---------------------------------------------------------------------------------------------

def _judge_job(job: dict, prepared: _Prepared, report: dict | None, wall_time: float) -> Result:
    """The program's verdict from the worker's report: each test judged by _judge_test, the
    first failing verdict wins; tests not run after a timeout (stop_after_timeout) count as
    timeouts."""
    tests = job["tests"]
    if report is None:
        return Result(RUNTIME_ERROR, 0, len(tests), [], set(), wall_time,
                      "the sandbox worker died or hung on this job")
    if report.get("error"):   # the worker could not run the job at all
        return Result(RUNTIME_ERROR, 0, len(tests), [], set(), wall_time, report["error"])
    judged = []
    for raw, t in zip(report["tests"], tests):
        try:
            judged.append(_judge_test(raw, t["output"], job, prepared))
        except Exception as e:   # never expected: judging is total on validated data
            judged.append(TestResult(RUNTIME_ERROR, 0.0, "",
                                     f"sandbox: could not judge: {type(e).__name__}"))
    for _ in range(len(judged), len(tests)):   # not run: an earlier test timed out
        judged.append(TestResult(TIMEOUT, 0.0, "", "not run: an earlier test timed out"))
    failed = [t.status for t in judged if t.status != PASS]
    lines = set().union(*(t.executed_lines for t in judged))
    return Result(failed[0] if failed else PASS, len(judged) - len(failed), len(tests), judged,
                  lines, wall_time)


def _parse_message(data: bytes, job: dict, prepared: _Prepared) -> dict | None:
    """The child's report, checked field by field; None when it is malformed (the program wrote
    on the harness fd). An empty report (the program closed fd 3) is {}."""
    if not data:
        return {}
    try:
        message = json.loads(data)
    except Exception:   # invalid UTF-8/JSON, too deep (RecursionError), huge ints (ValueError)
        return None
    if not isinstance(message, dict) or not message.keys() <= MESSAGE_KEYS:
        return None
    if "exception" in message and not (isinstance(message["exception"], str)
                                       and len(message["exception"]) <= 200):
        return None
    if "result_error" in message and not (isinstance(message["result_error"], str)
                                          and len(message["result_error"]) <= SHOWN_OUTPUT):
        return None
    if "result" in message and (job["fn_name"] is None or "result_error" in message
                                or not _plain_data(message["result"], MAX_RESULT_DEPTH + 2)):
        return None
    lines = message.get("lines", [])
    if not isinstance(lines, list) or any(type(n) is not int for n in lines):
        return None
    if lines:
        if not job["coverage"] or not set(lines) <= prepared.executable_lines():
            return None
    message["lines"] = set(lines)
    return message


def _plain_data(value, depth: int) -> bool:
    kind = type(value)
    if kind in (type(None), bool, int, float, str):
        return True
    if depth <= 0:
        return False
    if kind is list:
        return all(_plain_data(v, depth - 1) for v in value)
    if kind is dict:
        return all(type(k) is str and _plain_data(v, depth - 1) for k, v in value.items())
    return False


def _judge_test(raw: dict, expected, job: dict, prepared: _Prepared) -> TestResult:
    """Verdict of one test from the worker's raw observations (the only place verdicts are made)."""
    fn_name = job["fn_name"]
    stdout = raw["stdout"].decode("utf-8", "replace")
    stderr = raw["stderr"].decode("utf-8", "replace")[-STDERR_TAIL:]
    message = _parse_message(raw["message"], job, prepared) if raw["kind"] == "exited" else {}
    shown = stdout[:SHOWN_OUTPUT]
    memory_hint = "MemoryError" in stderr or "Cannot allocate memory" in stderr
    timed_out = (raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU
                 or raw["cpu"] > job["timeout"])
    lines = message.get("lines", set()) if message else set()
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
    elif raw["exit_code"] != 0:
        status = RUNTIME_ERROR
    elif fn_name is not None:
        if "result" in message:
            shown = repr(message["result"])[:SHOWN_OUTPUT]
            status = PASS if values_match(expected, message["result"]) else WRONG_ANSWER
        elif "result_error" in message:
            status, shown = WRONG_ANSWER, message["result_error"]
        else:   # exited (sys.exit, os._exit) before the function returned
            status = RUNTIME_ERROR
    else:
        status = PASS if outputs_match(expected, stdout) else WRONG_ANSWER
    return TestResult(status, raw["time"], shown, stderr, lines, raw["cpu"])


# ---------------------------------------------------------------------------------------------
# Parent side: jobs and workers
# ---------------------------------------------------------------------------------------------

def _check_job(job: dict, index: int) -> dict:
    job = dict(fn_name=None, timeout=4.0, memory_mb=1024, coverage=False,
               stop_after_timeout=True) | dict(job)
    tests = job.get("tests")
    if not isinstance(job.get("code"), str):
        raise ValueError(f"job {index}: 'code' must be a string of Python source.")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"job {index}: 'tests' must be a non-empty list of "
                         "{'input': ..., 'output': ...} dicts (drop problems without tests).")
    for t in tests:
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise ValueError(f"job {index}: every test needs an 'input' and an 'output' key.")
        if job["fn_name"] is None and not (isinstance(t["input"], str)
                                           and isinstance(t["output"], str)):
            raise ValueError(f"job {index}: standard-I/O tests need string input and output "
                             "(join lists of lines with '\\n'); pass fn_name for call-based tests.")
        if job["fn_name"] is not None and not isinstance(t["input"], (list, tuple)):
            raise ValueError(f"job {index}: call-based tests need 'input' as a list of arguments.")
    if job["fn_name"] is not None and not isinstance(job["fn_name"], str):
        raise ValueError(f"job {index}: 'fn_name' must be a string or None.")
    if not (isinstance(job["timeout"], (int, float)) and 0 < job["timeout"] < 1e6):
        raise ValueError(f"job {index}: 'timeout' must be a positive number of seconds.")
    if not (isinstance(job["memory_mb"], int) and 0 < job["memory_mb"] < 1 << 30):
        raise ValueError(f"job {index}: 'memory_mb' must be a positive integer.")
    return job


def _output_cap(job: dict, test: dict) -> int:
    expected = test["output"]
    if job["fn_name"] is not None:
        expected = json.dumps(expected, default=str)
    return max(OUTPUT_LIMIT_MIN, 2 * len(expected) + (64 << 10))


@dataclass
class _Prepared:
    """What the parent knows about a job's code before any test runs."""
    compile_error: str | None = None
    code_object: object = None
    binds_fn: bool = False          # the program itself binds fn_name (def/class/assign/import)
    opens_files: bool = False       # it names open/fdopen/an io class: flush its file objects
    _lines: frozenset | None = None

    def executable_lines(self) -> frozenset:
        """Every line number a line event of the compiled code can carry."""
        if self._lines is None:
            self._lines = frozenset(_code_lines(self.code_object))
        return self._lines


def _code_lines(code) -> set[int]:
    """Line numbers that hold bytecode in a code object and the functions and classes in it."""
    lines, todo = set(), [code]
    while todo:
        c = todo.pop()
        lines.update(n for _, _, n in c.co_lines() if n)   # 0 or None: no source line
        todo.extend(k for k in c.co_consts if hasattr(k, "co_lines"))
    return lines


def _compile_quietly(source: str):
    """compile() without its SyntaxWarnings ("invalid decimal literal", ...): they would go to
    the trainer's stderr, once per sample; they never change a verdict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(source, SOLUTION_FILENAME, "exec", dont_inherit=True)


def _prepare(job: dict) -> _Prepared:
    try:
        code = _compile_quietly(job["code"])
    except Exception as e:   # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return _Prepared(compile_error=f"{type(e).__name__}: {e}"[:STDERR_TAIL])
    binds = False
    if job["fn_name"] is not None and job["fn_name"] in _prelude_names():
        binds = _binds_name(job["code"], job["fn_name"])
    return _Prepared(code_object=code, binds_fn=binds, opens_files=_names_any(code, FILE_MAKERS))


FILE_MAKERS = frozenset({"open", "fdopen", "FileIO", "BufferedWriter", "BufferedRandom",
                         "TextIOWrapper", "BufferedRWPair"})


def _names_any(code, names: frozenset) -> bool:
    """Does the code (or a function in it) name any of `names`?"""
    todo = [code]
    while todo:
        c = todo.pop()
        if not names.isdisjoint(c.co_names):
            return True
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return False


_PRELUDE_NAMES: set | None = None


def _prelude_names() -> set:
    global _PRELUDE_NAMES
    if _PRELUDE_NAMES is None:
        _PRELUDE_NAMES = set(_leetcode_prelude())
    return _PRELUDE_NAMES


def _binds_name(source: str, name: str) -> bool:
    """Does the program bind `name` anywhere (def, class, assignment target, import)?"""
    try:
        tree = ast.parse(source)
    except Exception:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id == name:
                return True
        elif isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == name:
            return True
    return False


def _start_worker() -> _Worker:
    """A worker that fails to start (e.g. a slow start on a loaded machine) is tried again; each
    failure is printed with the worker's own stderr."""
    for attempt in range(1, WORKER_START_TRIES + 1):
        try:
            return _Worker()
        except RuntimeError as e:
            print(f"sandbox: worker start failed (try {attempt}/{WORKER_START_TRIES}): {e}",
                  file=sys.stderr, flush=True)
            if attempt == WORKER_START_TRIES:
                raise
            time.sleep(0.2 * attempt)


class _Worker:
    """One fork-server process (_worker_command) and its framed pipe protocol."""
    START_TIMEOUT = 60.0

    def __init__(self):
        import tempfile
        self.errors = tempfile.TemporaryFile()   # the worker's stderr: shown when it fails
        self.info = {}
        self.proc = subprocess.Popen(
            _worker_command(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
            # LD_BIND_NOW: the worker resolves every libc symbol once, so its children do not
            # each write (copy-on-write fault) the GOT pages again on first calls.
            env=isolation.minimal_env("/") | {"LD_BIND_NOW": "1"},
            close_fds=True, start_new_session=True, cwd="/")
        hello = self._read(time.monotonic() + self.START_TIMEOUT)
        if hello is None:
            errors = self.stderr_tail()
            self.close()
            raise RuntimeError(f"the worker process did not start (exit status "
                               f"{self.proc.returncode}); its stderr: {errors!r}")
        self.info = json.loads(hello)

    def stderr_tail(self, n: int = 2000) -> str:
        try:
            self.errors.seek(0)
            return self.errors.read().decode("utf-8", "replace")[-n:]
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: dict, prepared: _Prepared) -> dict | None:
        """Send code + inputs (never outputs); the worker's raw observations of each test
        (_run_job), or None when it died or hung (it is closed, and replaced for the next job)."""
        request = dict(code=job["code"], inputs=[t["input"] for t in job["tests"]],
                       fn_name=job["fn_name"], timeout=float(job["timeout"]),
                       memory_mb=int(job["memory_mb"]), coverage=bool(job["coverage"]),
                       stop_after_timeout=bool(job["stop_after_timeout"]),
                       binds_fn=prepared.binds_fn, opens_files=prepared.opens_files,
                       output_caps=[_output_cap(job, t) for t in job["tests"]])
        deadline = time.monotonic() + len(job["tests"]) * (
            HARD_CAP_FACTOR * _wall_cap(job["timeout"]) + 2.0) + 30.0
        reply = None
        try:
            _write_frame(self.proc.stdin.fileno(), pickle.dumps(request))
            reply = self._read(deadline)
        except (BrokenPipeError, OSError):
            pass
        if reply is None:  # died (a bug, or the host killed it) or hung
            self.close()
            return None
        return pickle.loads(reply)

    def _read(self, deadline: float) -> bytes | None:
        return _read_frame(self.proc.stdout.fileno(), deadline)

    def close(self):
        clean = False
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()   # EOF: the worker exits
                clean = self.proc.wait(timeout=5) == 0
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.errors):
            try:
                f.close()
            except OSError:
                pass
        isolation.release_worker(self.proc.pid, self.info, clean)


def _worker_command() -> list[str]:
    """A fresh interpreter in isolated mode (-I: no environment variables, no user site, no
    script folder on sys.path) running _worker_main. This folder is on its sys.path only while
    sandbox and isolation import: a program cannot import either."""
    boot = ("import sys; sys.path.insert(0, sys.argv[2]); import sandbox; "
            "del sys.path[0], sys.modules['sandbox'], sys.modules['isolation']; "
            "sandbox._worker_main()")
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-I", "-c", boot, "--worker", here]


def _wall_cap(timeout: float) -> float:
    return WALL_FACTOR * timeout + WALL_SLACK


# ---------------------------------------------------------------------------------------------
# Framed pipe protocol (8-byte length + payload)
# ---------------------------------------------------------------------------------------------

def _write_frame(fd: int, payload: bytes):
    data = len(payload).to_bytes(8, "big") + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int, deadline: float | None = None) -> bytes | None:
    header = _read_exactly(fd, 8, deadline)
    return None if header is None else _read_exactly(fd, int.from_bytes(header, "big"), deadline)


# ---------------------------------------------------------------------------------------------
# Worker side: the fork server (see _worker_command)
# ---------------------------------------------------------------------------------------------

_REAL_EXIT = os._exit   # the program may replace os._exit; the harness's own exits use this
_PRELUDE: dict = {}   # filled once per worker, shared copy-on-write by its children


def _worker_main():
    import atexit  # noqa: F401  (the children's imports are then dictionary look-ups)
    import ctypes  # noqa: F401
    import io  # noqa: F401
    import resource  # noqa: F401
    import shutil  # noqa: F401
    import tempfile  # noqa: F401
    import types  # noqa: F401
    # The protocol moves off fds 0/1 so that nothing printed by accident corrupts it.
    cmd_fd, reply_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    info = isolation.confine_worker((cmd_fd, reply_fd))   # from here on: the pid namespace's pid 1
    for name in PRELOADED:               # warm imports, shared copy-on-write by every child
        try:
            __import__(name)
        except ImportError:
            pass
    _PRELUDE.update(_leetcode_prelude())
    import gc
    gc.freeze()   # children never scan (and so never copy) the worker's objects
    _write_frame(reply_fd, json.dumps(info).encode())
    try:
        while _serve_one_job(cmd_fd, reply_fd, info):
            pass
    finally:
        isolation.leave_worker(info)


JOB_SERVED = 0   # exit status of a job process that replied (anything else: stop the worker)


def _serve_one_job(cmd_fd: int, reply_fd: int, info: dict) -> bool:
    """Fork a job process that waits for one request, runs its tests, replies and exits. The
    fork server never reads a request nor sees a result, so the memory every later job is forked
    from holds no data of an earlier job (a program cannot find a sibling's answer in it, freed
    or not). The job process is forked before its request comes, so the fork and the clean-up of
    the last job cost the parent no waiting. False at EOF, or when the job process died (the
    parent then sees EOF and replaces this worker)."""
    cg = isolation.cgroup()
    tasks0 = cg.tasks() if cg else 0
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            isolation.confine_job()
            if (payload := _read_frame(cmd_fd)) is not None:
                report = _run_job(pickle.loads(payload), info)
                _write_frame(reply_fd, pickle.dumps(report, protocol=5))
                status = JOB_SERVED
        finally:
            _REAL_EXIT(status)
    _, status = os.waitpid(pid, 0)
    isolation.kill_leftovers(info["uid"], tasks0)   # what outlived the job process
    isolation.end_job(info)
    return os.waitstatus_to_exitcode(status) == JOB_SERVED


def _leetcode_prelude() -> dict:
    """{name: object} a call-based program finds in its globals (LiveCodeBench's import list).

    Order of precedence as in that harness: module names > builtins > star-imported names, so
    `pow`, `open`, `compile` stay the builtins and `random`, `copy`, `datetime` are the modules.
    Not `from sys import *` / `from io import *`: their stdin/stdout/open would be stale objects.
    """
    import builtins
    names: dict = {}
    for name in PRELUDE_STAR:
        try:
            module = __import__(name)
        except ImportError:
            continue
        public = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        names.update({n: getattr(module, n) for n in public if hasattr(module, n)})
    names = {n: v for n, v in names.items() if not hasattr(builtins, n)}
    for name in PRELUDE_MODULES:
        try:
            names[name] = __import__(name)
        except ImportError:
            pass
    return names


# --- jobs and tests -----------------------------------------------------------------------------

def _run_job(job: dict, info: dict) -> dict:
    try:
        compiled = _compile_quietly(job["code"])
    except Exception as e:   # the parent compiled it; only a resource failure gets here
        return {"tests": [], "error": f"the worker could not compile the code: {e}"[:500]}
    cg = isolation.cgroup()
    if cg is not None:
        cg.set_memory_limit(job["memory_mb"] << 20)
    tests = []
    for i, test_input in enumerate(job["inputs"]):
        raw = _run_one_test(job, compiled, test_input, job["output_caps"][i], info)
        tests.append(raw)
        timed_out = (raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU
                     or raw["cpu"] > job["timeout"])
        if timed_out and job["stop_after_timeout"]:
            break
    return {"tests": tests}


def _run_one_test(job: dict, compiled, test_input, output_cap: int, info: dict) -> dict:
    """Fork a child that runs the program on one input; its raw observations (no verdict)."""
    uid = info["uid"]
    workdir = isolation.test_workdir(info)
    stdin_fd = os.memfd_create("stdin")
    if job["fn_name"] is None:
        _write_all(stdin_fd, test_input.encode())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    msg_r, msg_w = os.pipe()
    isolation.own_pipes(uid, (out_w, err_w))
    cg = isolation.cgroup()
    oom0, tasks0 = (cg.ooms(), cg.tasks()) if cg else (0, 0)
    tree_cpu = _cgroup_cpu_meter(cg) if cg else None
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(job, compiled, test_input, workdir, uid, (stdin_fd, out_w, err_w, msg_w))
        finally:
            _REAL_EXIT(111)
    for fd in (stdin_fd, out_w, err_w, msg_w):
        os.close(fd)
    cpu_used = tree_cpu or (lambda: _process_cpu(pid))
    raw = _watch(pid, uid, tasks0, start, job, output_cap, (out_r, err_r, msg_r), cpu_used)
    if cg:
        raw["cpu"] = round(tree_cpu(), 4)   # the whole tree, now that it is gone
        raw["oom"] = cg.ooms() > oom0
    isolation.clear_workdir(info, workdir)
    return raw


def _cgroup_cpu_meter(cg):
    """CPU seconds of a test's process tree from now on: its cgroup's usage less this process's
    own. This job process is in the same cgroup, and the time it spends forking the test and
    draining its pipes (a chatty stderr: thousands of reads) is not the program's."""
    cpu0, own0 = cg.cpu(), time.process_time()
    return lambda: (cg.cpu() - cpu0) - (time.process_time() - own0)


def _write_all(fd: int, data: bytes):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _process_cpu(pid: int) -> float:
    """CPU seconds of a live process (all its threads, and its reaped children)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _run_delay(pid: int, per_thread: dict) -> float:
    """Seconds the test's main process spent runnable but waiting for a CPU, summed over its
    threads (/proc/PID/task/TID/schedstat): the stack-size idiom does its work in a thread
    while the main thread sleeps in join(). per_thread keeps each thread's last value, so a
    thread that has ended still counts."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                per_thread[tid] = int(f.read().split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            pass
    return sum(per_thread.values())


def _watch(pid, uid, tasks0, start, job, output_cap, pipes, cpu_used) -> dict:
    """Collect a child's stdout/stderr/harness message until it exits, floods, uses its CPU
    time or reaches the wall cap. CPU is polled only when the tree could have used it all:
    the first look is at timeout / cores, then at (what is left) / cores."""
    timeout = job["timeout"]
    cores = max(1, len(os.sched_getaffinity(0)))
    out_r, err_r, msg_r = pipes
    pidfd = os.pidfd_open(pid)
    sel = selectors.DefaultSelector()
    stdout, stderr, message = _StdoutBuffer(output_cap), bytearray(), bytearray()
    for fd in pipes:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    kind, wall_deadline, next_check = "exited", start + _wall_cap(timeout), start + timeout / cores

    def drain(fd) -> bool:   # False at EOF
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return True
        if not chunk:
            sel.unregister(fd)
            return False
        if fd == out_r:
            stdout.add(chunk)
        elif fd == err_r:
            stderr.extend(chunk)
            if len(stderr) > 4 * STDERR_TAIL:
                del stderr[:-STDERR_TAIL]
        else:
            message.extend(chunk)
        return True

    def flooded() -> bool:
        return stdout.over_limit() or len(message) > 2 * output_cap

    cap, delays = _wall_cap(timeout), {}
    exited, hard_deadline = False, start + HARD_CAP_FACTOR * cap
    while not exited:
        now = time.monotonic()
        if now >= wall_deadline:   # the cap counts time not spent waiting for a CPU
            left = cap - (now - start - _run_delay(pid, delays))
            if left < 0.001 or now >= hard_deadline:
                kind = "timeout"
                break
            wall_deadline = min(now + left, hard_deadline)
        if now >= next_check:
            used = cpu_used()
            if used >= timeout:
                kind = "timeout"
                break
            next_check = now + max((timeout - used) / cores, 0.005)
            _run_delay(pid, delays)   # a thread that ends before the cap still counts
        for key, _ in sel.select(min(wall_deadline, next_check) - now):
            if key.fd == pidfd:
                exited = True
            else:
                drain(key.fd)
        if flooded():
            kind = "output_limit"
            break
    elapsed = time.monotonic() - start
    if not exited:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    isolation.kill_leftovers(uid, tasks0)
    if kind == "exited":   # every writer is dead now: read the rest up to EOF
        drain_until = time.monotonic() + 1.0
        for fd in pipes:
            while (fd in sel.get_map() and drain(fd) and not flooded()
                   and time.monotonic() < drain_until):
                pass
        kind = "output_limit" if flooded() else kind
    for fd in pipes:
        os.close(fd)
    sel.close()
    return dict(kind=kind, time=round(elapsed, 4), cpu=round(usage.ru_utime + usage.ru_stime, 4),
                oom=False, exit_code=os.waitstatus_to_exitcode(status),
                signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                stdout=stdout.value(), stderr=bytes(stderr[-STDERR_TAIL:]),
                message=bytes(message) if kind == "exited" else b"")


class _StdoutBuffer:
    """A test's stdout as the worker keeps it: its bytes, up to the cap; past the cap, all of it
    as _CompactText, so an output that is long only in what the comparison rules ignore still
    fits. over_limit: over the cap even compacted, or RAW_OUTPUT_FACTOR x the cap of bytes."""

    def __init__(self, cap: int):
        self.cap, self.raw, self.seen, self.compact = cap, bytearray(), 0, None

    def add(self, chunk: bytes):
        self.seen += len(chunk)
        if self.compact is not None:
            self.compact.feed(chunk)
            return
        self.raw += chunk
        if len(self.raw) > self.cap:
            self.compact = _CompactText()
            self.compact.feed(self.raw)
            self.raw = bytearray()

    def over_limit(self) -> bool:
        return self.seen > RAW_OUTPUT_FACTOR * self.cap or (
            self.compact is not None and self.compact.size() > self.cap)

    def value(self) -> bytes:
        if self.compact is None:
            return bytes(self.raw[:self.cap])
        self.compact.feed(b"", final=True)
        return bytes(self.compact.text[:self.cap])


def _child(job, compiled, test_input, workdir, uid, fds):
    """In the forked child: lock down, run the program, end as the interpreter ends, report
    observations on HARNESS_FD."""
    import atexit
    import builtins
    import io
    import types
    stdin_fd, out_w, err_w, msg_w = fds
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(msg_w, HARNESS_FD)
    isolation.confine_test(workdir, uid, job["memory_mb"], job["timeout"], HARNESS_FD + 1)
    import tempfile
    tempfile.tempdir = None
    # As CPython makes them on Linux under LANG=C.UTF-8: stdin does not translate newlines.
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", errors="surrogateescape",
                                     newline="\n", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", errors="surrogateescape",
                                       closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",
                                       closefd=False, buffering=1)
    sys.argv = ["solution.py"]
    atexit._clear()   # the worker's handlers are not the program's
    send = _make_sender(HARNESS_FD, json.dumps, os.write)
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins
    if job["fn_name"] is not None:   # a LeetCode fragment; a stdio program is a whole script
        module.__dict__.update(_PRELUDE)
    sys.modules["__main__"] = module
    lines: set[int] = set()
    tracer = _make_tracer(lines, SOLUTION_FILENAME)
    message: dict = {}
    me = os.getpid()

    def report():   # once, from this process only (a fork of the program must not report)
        if os.getpid() == me and "lines" not in message:
            sys.settrace(None)
            message["lines"] = sorted(lines)
            send(message)

    def _exit(status):   # os._exit ends at once, as in CPython, but coverage is reported
        report()
        _REAL_EXIT(status)
    os._exit = _exit
    exit_code = 0
    try:
        if job["coverage"]:
            threading.settrace(tracer)
            sys.settrace(tracer)
        exec(compiled, module.__dict__)
        if job["fn_name"] is not None:
            function = _find_function(module.__dict__, job["fn_name"], job["binds_fn"])
            value = function(*test_input)
            sys.settrace(None)
            message.update(_to_plain_message(value))
    except SystemExit as e:
        exit_code = _exit_code(e)
    except BaseException as e:
        sys.settrace(None)
        message["exception"] = type(e).__name__[:100]
        exit_code = 1
        # The program's frames only, none of the judge's: their path and line numbers differ
        # between checkouts and are none of the program's business.
        try:
            import traceback
            judge = _find_function.__code__.co_filename
            frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != judge]
            head = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
            sys.stderr.write("".join((head if frames else [])
                                     + traceback.format_exception_only(type(e), e)))
        except BaseException:
            pass
    exit_code = _finish_like_the_interpreter(module, exit_code, io, job["opens_files"])
    report()
    _REAL_EXIT(exit_code)


def _finish_like_the_interpreter(module, exit_code: int, io, opens_files: bool) -> int:
    """What Py_FinalizeEx does before the process ends: join non-daemon threads, run atexit
    handlers, flush sys.stdout/sys.stderr (120 if that fails, as CPython), then flush file
    objects the program left in its globals (CPython does it when it clears the module)."""
    import atexit
    try:   # (each step only when there is something to do: touching objects costs page copies)
        if threading._shutdown_locks or threading._threading_atexits:
            threading._shutdown()
        if atexit._ncallbacks():
            atexit._run_exitfuncs()
    except BaseException:
        pass
    sys.settrace(None)
    threading.settrace(None)
    for stream in (sys.stdout, sys.stderr):
        try:
            if not stream.closed:
                stream.flush()
        except BaseException:
            exit_code = exit_code or 120
    left = []
    if opens_files:
        try:
            left = [v for k, v in module.__dict__.items()
                    if isinstance(v, io.IOBase) and v is not _PRELUDE.get(k)]
        except BaseException:
            pass
    for f in left + [sys.__stdout__]:
        try:
            if not f.closed:
                f.flush()
        except BaseException:
            pass
    return exit_code


def _make_sender(fd, dumps, write):
    def send(message: dict):
        try:
            data = dumps(message).encode()
            view = memoryview(data)
            while view:
                view = view[write(fd, view):]
        except BaseException:
            pass
    return send


def _make_tracer(lines: set, filename: str):
    add = lines.add

    def local(frame, event, arg):
        if event == "line":
            add(frame.f_lineno)
        return local

    def global_(frame, event, arg):
        return local if frame.f_code.co_filename == filename else None
    return global_


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    try:
        print(e.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _find_function(namespace: dict, fn_name: str, binds_fn: bool):
    """The program's function: a Solution method, or a top-level callable the program bound
    itself (a prelude object is accepted only if the program binds the name, e.g. imports it)."""
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, fn_name):
        return getattr(solution(), fn_name)
    value = namespace.get(fn_name)
    if callable(value) and (binds_fn or _PRELUDE.get(fn_name) is not value):
        return value
    raise NameError(f"the program defines no function or Solution method named {fn_name!r}"
                    + (" (the prelude's one does not count)" if fn_name in _PRELUDE else ""))


_PLAIN_SCALARS = (type(None), bool, int, float, str)


def _to_plain(value, depth: int = 0):
    """Exact builtin types only; raises TypeError for anything the program could have forged."""
    kind = type(value)
    if depth > MAX_RESULT_DEPTH:
        raise TypeError(f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if kind in _PLAIN_SCALARS:
        return value
    if kind is list or kind is tuple:
        return [_to_plain(v, depth + 1) for v in value]
    if kind is dict:
        if not all(type(k) is str for k in value):
            raise TypeError("a dict with non-string keys")
        return {k: _to_plain(v, depth + 1) for k, v in value.items()}
    if kind is set or kind is frozenset:
        return sorted(_to_plain(v, depth + 1) for v in value)
    raise TypeError(f"a value of type {kind.__name__}")


def _to_plain_message(value) -> dict:
    try:
        plain = _to_plain(value)
        json.dumps(plain)
        return {"result": plain}
    except (TypeError, ValueError, RecursionError) as e:
        return {"result_error": f"return value not comparable as data: {e}"[:SHOWN_OUTPUT]}


# ---------------------------------------------------------------------------------------------
# Command line: exit 0 when every test passes, 1 when not, 2 for a usage error (one line)
# ---------------------------------------------------------------------------------------------

class UsageError(Exception):
    """A mistake the user can fix (bad path, bad JSON): one line on stderr, exit status 2."""


def _load_tests(path: str) -> tuple[list[dict], str | None]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read the tests file {path!r}: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise UsageError(f"the tests file {path!r} is not valid JSON: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("inputs"), list) and isinstance(
            data.get("outputs"), list):   # APPS input_output style
        if len(data["inputs"]) != len(data["outputs"]):
            raise UsageError(f"the tests file {path!r} has {len(data['inputs'])} inputs but "
                             f"{len(data['outputs'])} outputs") from None
        tests = [{"input": i, "output": o} for i, o in zip(data["inputs"], data["outputs"])]
        return tests, data.get("fn_name")
    if isinstance(data, list):
        return data, None
    raise UsageError(f"the tests file {path!r} must hold a JSON list of {{'input', 'output'}} "
                     "objects or an object with 'inputs' and 'outputs' lists") from None


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, not the usage block
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(description="Run a Python program on unit tests in the "
                                     "sandbox and print the verdict as JSON. Exit status: 0 "
                                     "when every test passes, 1 when one does not, 2 for a "
                                     "usage error.")
    parser.add_argument("program", help="path of the Python program to judge")
    parser.add_argument("tests", help="JSON file: a list of {'input', 'output'} objects, or an "
                        "APPS-style object {'inputs': [...], 'outputs': [...], 'fn_name'?}")
    parser.add_argument("--fn-name", default=None, help="call-based tests: the function (or "
                        "Solution method) to call with each input list; default: standard I/O")
    parser.add_argument("--timeout", type=_positive(float), default=4.0,
                        help="CPU seconds per test (the wall cap is 3x this + 1 s)")
    parser.add_argument("--memory-mb", type=_positive(int), default=1024,
                        help="memory limit per test, MiB")
    parser.add_argument("--coverage", action="store_true", help="also report executed lines")
    args = parser.parse_args(argv)
    try:
        try:
            with open(args.program, "rb") as f:
                code = f.read().decode("utf-8")
        except OSError as e:
            raise UsageError(
                f"cannot read the program {args.program!r}: {e.strerror or e}") from None
        except UnicodeDecodeError:
            raise UsageError(f"the program {args.program!r} is not UTF-8 text") from None
        tests, fn_name = _load_tests(args.tests)
        try:
            result = run_tests(code, tests, args.fn_name or fn_name, args.timeout,
                               args.memory_mb, args.coverage)
        except ValueError as e:   # a malformed test list (run_batch's _check_job)
            reason = str(e).removeprefix("job 0: ")
            raise UsageError(f"the tests file {args.tests!r}: {reason}") from None
    except UsageError as e:
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    out = dict(status=result.status, passed=result.passed, total=result.total,
               wall_time=round(result.wall_time, 3), error=result.error,
               executed_lines=sorted(result.executed_lines),
               tests=[dict(t.__dict__, executed_lines=sorted(t.executed_lines))
                      for t in result.tests])
    print(json.dumps(out, indent=1))
    return 0 if result.status == PASS else 1


if __name__ == "__main__":
    sys.exit(main())
