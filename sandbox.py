"""Run untrusted Python programs on unit tests, fast and safe: the reward of every method here.

Method
------
A program is judged on a list of tests. Three kinds:
  standard I/O   {"input": str, "output": str}    the program reads stdin and prints;
  call-based     {"input": [args], "output": v}   fn_name names a top-level function or a
                                                   method of `class Solution` (LeetCode style);
  check          {"check": code}                  HumanEval's test code: it defines
                                                   check(candidate), which is called with the
                                                   program's function fn_name and passes when it
                                                   raises nothing (every assert, Python's `==`).
A job's `source` (a data source of data.py: "apps", "humaneval", ...) picks the comparison
rules of its benchmark (RULES, below).
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

Comparison rules, per source (RULES; the parent process applies them, never the child). Each
benchmark is judged as its own harness judges, except where a docstring says why not:
  tasks, builtin (our own): outputs_match and values_match below, tolerant of tuples for lists,
    sets for sorted lists and floats within FLOAT_TOL; they judged every shipped result.
  apps, apps_plus: outputs_match; call-based Python `==`, but a returned tuple (or list of
    tuples) is a list, as APPS's checker has it: its answers are JSON (apps_values_match).
  code_contests: its checker's tokens, case-insensitive, numbers within 1e-5
    (code_contests_outputs_match).
  livecodebench: lines, each equal or equal as Decimals, no tolerance; call-based `==` after a
    returned tuple is made a list (livecodebench_outputs_match, livecodebench_values_match).
  humaneval: check tests, so check() itself compares, with `==`.
The project's own rules in detail:
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
  call-based: the child sends the return value as JSON that keeps tuples, sets and dicts
    apart (_to_wire); only exact builtin types are accepted, so no object the program builds
    (an __eq__ that is always True, an int subclass) reaches the comparison. The own rule then
    compares it as JSON data: tuples == lists, True == 1 (as in Python), integers exact (an
    expected int equals only a value that == it exactly, so 1e12 is not 10**12 + 7), floats
    within FLOAT_TOL as above, sets as sorted lists.
  check: the program's process serves calls of its function; a second process, the checker,
    forked only after it (so the program never holds the check code or its expected values),
    runs check(candidate), where candidate(*args) sends the arguments over a pipe and returns
    the reply rebuilt as exact builtin values (a returned generator or other builtin iterator:
    an iterator over its items). The checker's exit status says how check()
    ended (CHECK_*): nothing the program writes can set it. Its CPU time counts with the
    program's, as the benchmark's time limit covers both.

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
fixed set of keys, each typed and size-bounded (result: wire data, depth <= 100; lines: ints
that are executable lines of the compiled code; exception/result_error: short strings); anything
else makes that test a runtime_error. Compile errors are decided by the parent, so a report
cannot claim one. stdout is never parsed for markers. Any failure while judging one job becomes
that job's runtime_error; a worker that dies is replaced: run_batch returns a verdict for every
job whatever a program writes (run_batch raises only for invalid jobs or when no worker can be
started at all). The program runs in the same process as the harness code, so it can write any
message on fd 3: all it can claim is "my function returned X", which returning X does anyway.
The same holds for a check test's replies to the checker; the checker's verdict is its exit
status. The parent builds no set or dict from a returned value (_python_equal walks it along
the expected one), so crafted hash collisions cannot slow the judge.

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
import decimal
import hashlib
import json
import math
import os
import pickle
import queue
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import isolation

PASS, WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT, COMPILE_ERROR = (
    "pass", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit",
    "compile_error")

FLOAT_TOL = 1e-6            # absolute for |e| <= 1, relative above
CC_FLOAT_TOL = 1e-5         # CodeContests' checker: any two numbers within this, absolute
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
_PLAIN_SCALARS = (type(None), bool, int, float, str)
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


# --- comparison rules per data source ---------------------------------------------------------
# A call-based return value reaches the parent "on the wire" (_to_wire): JSON in which lists and
# scalars are themselves and a tuple, set, frozenset or dict is tagged ({"tuple": [...]},
# {"set": [...]}, {"frozenset": [...]}, {"dict": [[key, value], ...]}), so a rule can tell a
# tuple from a list and a set from a sorted list, as Python's `==` does. Each benchmark's rule
# says which of those differences it forgives; its docstring cites the benchmark's own harness.

def own_values_match(expected, actual) -> bool:
    """tasks, builtin (and a source not named in RULES): the project's own call-based rule,
    values_match on the value as JSON data (tuples as lists, sets as sorted lists, floats within
    FLOAT_TOL, True == 1). Both the tests and the references are ours, and they return ints,
    strings, lists and dicts; the shipped base model and every result were judged by it.
    Raises TypeError when the value is no JSON data (a dict with non-string keys, a set whose
    items do not sort): the verdict is then wrong_answer."""
    return values_match(expected, _as_json_data(actual))


def apps_values_match(expected, actual) -> bool:
    """APPS and APPS+ (refined from APPS; its own harness is not public), call-based: APPS's
    checker (eval/testing_util.py) compares with Python's `==` after making a returned tuple a
    list ("ground truth sequences are not tuples": its answers are JSON), and also accepts a
    list whose items are tuples once each item is made a list. So True == 1 and 2 == 2.0 as in
    Python; a float must be exact, a set is not a list, a tuple deeper down is not a list.
    Not taken: its fallback `output == expected[0]`, meant for answers stored as [value] (data.py
    unwraps those): for a longer list it would pass a program returning only the first item.

    >>> apps_values_match([1, 2], _to_wire((1, 2))), apps_values_match([[1, 2]], _to_wire([(1, 2)]))
    (True, True)
    >>> apps_values_match(0.3, _to_wire(0.1 + 0.2)), apps_values_match([1, 3], _to_wire({1, 3}))
    (False, False)
    """
    tag, items = _wire_tag(actual)
    if tag == "tuple":
        actual = items
    if _python_equal(expected, actual):
        return True
    if type(actual) is list and actual and _wire_tag(actual[0])[0] == "tuple":
        as_lists = [_wire_tag(item)[1] if _wire_tag(item)[0] == "tuple"
                    else list(item) if type(item) is str else item for item in actual]
        return all(type(item) is list for item in as_lists) and _python_equal(expected, as_lists)
    return False


def livecodebench_values_match(expected, actual) -> bool:
    """LiveCodeBench functional tests (lcb_runner/evaluation/testing_util.py, grade_call_based):
    the expected output is JSON; a returned tuple is made a list ("don't penalize model if it
    produces tuples instead of lists"), then Python's `==`: no float tolerance, a nested tuple is
    not a list, a set is not a list.

    >>> livecodebench_values_match([1, 2], _to_wire((1, 2))), livecodebench_values_match(
    ...     [[1, 2]], _to_wire([(1, 2)]))
    (True, False)
    """
    tag, items = _wire_tag(actual)
    return _python_equal(expected, items if tag == "tuple" else actual)


def python_values_match(expected, actual) -> bool:
    """Python's `expected == actual`, nothing forgiven: HumanEval's rule (its harness runs
    `check(candidate)`, whose asserts use `==`), for call-based tests of a source that has no
    JSON answers.

    >>> python_values_match([1, 2], _to_wire((1, 2))), python_values_match(0.5, _to_wire(0.5000001))
    (False, False)
    >>> python_values_match((1, {2}), _to_wire((1, {2}))), python_values_match(1, _to_wire(True))
    (True, True)
    """
    return _python_equal(expected, actual)


_CC_SEPARATORS = str.maketrans("\n\t\r\v", "    ")       # with " ": absl::ByAnyChar(" \n\t\r\v")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def code_contests_outputs_match(expected: str, actual: str) -> bool:
    """CodeContests (execution/tester_sandboxer.cc, OutputsMatch): both texts are split on
    spaces, newlines, tabs, CRs and vertical tabs (so line structure does not count) and
    lowercased (ASCII); equal token lists match; else, with as many tokens, each pair must match:
    if either is not a number the strings must be equal, else the two numbers (whatever
    absl::SimpleAtod reads: [+-]digits[.digits][e[+-]digits], inf, nan; an integer reads as one
    too) must be within CC_FLOAT_TOL = 1e-5, absolute. So "YES" == "yes", "1" == "1.0", and
    integers past 2**53 compare as the doubles they round to, as in the benchmark.

    >>> code_contests_outputs_match("YES\\n0.5 2", "yes 0.500009 2.0"), code_contests_outputs_match(
    ...     "0.5", "0.50002")
    (True, False)
    """
    exp_tokens, act_tokens = _cc_tokens(expected), _cc_tokens(actual)
    if exp_tokens == act_tokens:
        return True
    return len(exp_tokens) == len(act_tokens) and all(map(_cc_tokens_match, exp_tokens,
                                                          act_tokens))


def _cc_tokens(text: str) -> list[str]:
    return [t for t in text.translate(_CC_SEPARATORS).translate(_ASCII_LOWER).split(" ") if t]


def _cc_number(token: str) -> float | None:
    """The double absl::SimpleAtod reads from a token, or None (a leading '+' is dropped, then
    std::from_chars: '-'?, decimal digits with '.' and exponent, inf, infinity or nan)."""
    unsigned = token[1:] if token[:1] in "+-" else token
    if unsigned in ("inf", "infinity", "nan") or (
            _plain_number(unsigned) and unsigned[:1] not in "+-"):
        return float(token)
    return None


def _cc_tokens_match(expected: str, actual: str) -> bool:
    e, a = _cc_number(expected), _cc_number(actual)
    if e is None or a is None:
        return expected == actual
    return abs(e - a) < CC_FLOAT_TOL


def livecodebench_outputs_match(expected: str, actual: str) -> bool:
    """LiveCodeBench standard I/O (lcb_runner/evaluation/testing_util.py, grade_stdio): both
    texts stripped and split on "\\n", each line stripped; the line counts must agree; a line
    matches when equal, or when every whitespace-separated token of both lines reads as a
    Decimal and the two lists are equal. Exact: "0.50" == "0.5" and "1" == "1.0", but no float
    tolerance, and two words are equal only with the same spacing.

    >>> livecodebench_outputs_match("\\n1 2\\n0.5\\n", "1  2\\n0.50 "), livecodebench_outputs_match(
    ...     "0.5", "0.5000001"), livecodebench_outputs_match("a b", "a  b")
    (True, False, False)
    """
    exp_lines, act_lines = _stripped_lines(expected), _stripped_lines(actual)
    if len(exp_lines) != len(act_lines):
        return False
    for e, a in zip(exp_lines, act_lines):
        if e == a:
            continue
        exp_numbers, act_numbers = _decimals(e), _decimals(a)
        try:
            if exp_numbers is None or act_numbers is None or exp_numbers != act_numbers:
                return False
        except ArithmeticError:   # decimal.InvalidOperation: a signalling NaN compared
            return False
    return True


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list | None:
    try:
        return [decimal.Decimal(token) for token in line.split()]
    except (ArithmeticError, ValueError):
        return None


# Which rule judges a source's tests: source -> (standard-I/O rule, call-based rule). The
# sources are data.py's Problem.source; one not named here gets the project's own rule.
# HumanEval's tests are check tests ({"check": code}): its check() compares, with `==`.
RULES = {
    "tasks": (outputs_match, own_values_match),
    "builtin": (outputs_match, own_values_match),
    "apps": (outputs_match, apps_values_match),
    "apps_plus": (outputs_match, apps_values_match),
    "code_contests": (code_contests_outputs_match, python_values_match),
    "livecodebench": (livecodebench_outputs_match, livecodebench_values_match),
    "humaneval": (outputs_match, python_values_match),
}
OWN_RULE = RULES["tasks"]


def rule_for(source: str | None) -> tuple:
    """(standard-I/O rule, call-based rule) of a data source (see RULES)."""
    return RULES.get(source, OWN_RULE)


# --- values on the wire -------------------------------------------------------------------------

_WIRE_TAGS = ("tuple", "set", "frozenset", "dict")


def _to_wire(value, depth: int = 0):
    """Exact builtin data -> the wire form (see above); TypeError for anything else, so no
    object the program builds (an __eq__ that is always True, an int subclass) is sent."""
    kind = type(value)
    if depth > MAX_RESULT_DEPTH:
        raise TypeError(f"nested deeper than {MAX_RESULT_DEPTH} levels")
    if kind in _PLAIN_SCALARS:
        return value
    if kind is list:
        return [_to_wire(v, depth + 1) for v in value]
    if kind is tuple or kind is set or kind is frozenset:
        return {kind.__name__: [_to_wire(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[_to_wire(k, depth + 1), _to_wire(v, depth + 1)]
                         for k, v in value.items()]}
    raise TypeError(f"a value of type {kind.__name__}")


def _from_wire(wire):
    """The wire form -> the Python value (in the checker and the program's process, whose own
    CPU time pays for it; the parent never builds a set or dict from the program's data)."""
    tag, items = _wire_tag(wire)
    if tag is None:
        return [_from_wire(v) for v in wire] if type(wire) is list else wire
    if tag == "dict":
        return {_from_wire(k): _from_wire(v) for k, v in items}
    return {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](map(_from_wire, items))


def _wire_tag(wire) -> tuple[str | None, list | None]:
    """("tuple" | "set" | "frozenset" | "dict", its items) for a tagged value, else (None, None)."""
    if type(wire) is dict:
        ((tag, items),) = wire.items()
        return tag, items
    return None, None


def _valid_wire(wire, depth: int) -> bool:
    """Is this JSON (from the program's process) a well-formed wire value, nested at most
    `depth` levels?"""
    kind = type(wire)
    if kind in _PLAIN_SCALARS:
        return True
    if depth <= 0:
        return False
    if kind is list:
        return all(_valid_wire(v, depth - 1) for v in wire)
    if kind is not dict or len(wire) != 1:
        return False
    tag, items = next(iter(wire.items()))
    if tag not in _WIRE_TAGS or type(items) is not list:
        return False
    if tag == "dict":
        return all(type(p) is list and len(p) == 2 and _valid_wire(p[0], depth - 1)
                   and _valid_wire(p[1], depth - 1) for p in items)
    return all(_valid_wire(v, depth - 1) for v in items)


def _as_json_data(wire):
    """The own rule's view of a returned value: tuples as lists, sets as sorted lists, dicts
    with string keys only (TypeError otherwise, as for a set whose items do not sort)."""
    tag, items = _wire_tag(wire)
    if tag is None:
        return [_as_json_data(v) for v in wire] if type(wire) is list else wire
    if tag == "tuple":
        return [_as_json_data(v) for v in items]
    if tag == "dict":
        if not all(type(k) is str for k, _ in items):
            raise TypeError("a dict with non-string keys")
        return {k: _as_json_data(v) for k, v in items}
    return sorted(_as_json_data(v) for v in items)


def _python_equal(expected, actual) -> bool:
    """Python's `expected == actual` for `actual` on the wire, walked along `expected` (a value
    of the benchmark's): bool, int and float compare as numbers, a list equals only a list, a
    tuple only a tuple, a set or frozenset only a set or frozenset with the same members, a dict
    only a dict with the same items. No set or dict is built from the program's data: its items
    are looked up in the expected one (crafted hash collisions cannot make judging quadratic)."""
    kind = type(expected)
    if kind in (bool, int, float):
        return type(actual) in (bool, int, float) and expected == actual
    if kind is str or expected is None:
        return type(actual) is kind and expected == actual
    if kind is list:
        return (type(actual) is list and len(actual) == len(expected)
                and all(map(_python_equal, expected, actual)))
    tag, items = _wire_tag(actual)
    if kind is tuple:
        return (tag == "tuple" and len(items) == len(expected)
                and all(map(_python_equal, expected, items)))
    if kind is set or kind is frozenset:
        return tag in ("set", "frozenset") and _same_members(expected, items)
    if kind is dict:
        return tag == "dict" and _same_members(expected, items)
    return False


def _same_members(expected, items: list) -> bool:
    """A set (items: wire members) or dict (items: wire [key, value] pairs) against the
    expected one: as many members, each found in it once (by hash, as Python finds it)."""
    if len(items) != len(expected):
        return False
    keys = list(expected)
    index = {k: i for i, k in enumerate(keys)}
    limit = _largest_frozenset(keys)
    seen = set()
    for item in items:
        key, value = item if type(expected) is dict else (item, None)
        try:
            i = index.get(_wire_key(key, limit))
        except TypeError:   # unhashable, or a frozenset larger than any it could equal
            return False
        if i is None or i in seen:
            return False
        if type(expected) is dict and not _python_equal(expected[keys[i]], value):
            return False
        seen.add(i)
    return True


def _wire_key(wire, limit: int):
    """A set member or dict key from the wire, as the hashable Python value; a frozenset only up
    to `limit` members (no expected one is larger), so building it costs at most what the
    benchmark's own data does."""
    tag, items = _wire_tag(wire)
    if tag is None:
        return wire   # a list stays a list: unhashable, TypeError at the lookup
    if tag == "tuple":
        return tuple(_wire_key(v, limit) for v in items)
    if tag == "frozenset" and len(items) <= limit:
        return frozenset(_wire_key(v, limit) for v in items)
    raise TypeError("not a possible member")


def _largest_frozenset(values) -> int:
    largest = 0
    for v in values:
        if isinstance(v, (tuple, frozenset)):
            largest = max(largest, len(v) if isinstance(v, frozenset) else 0,
                          _largest_frozenset(v))
    return largest


def _wire_repr(wire, budget: int = SHOWN_OUTPUT) -> str:
    """repr() of a wire value as Python prints the value, cut at `budget` characters (without
    building the value)."""
    parts: list[str] = []
    size = 0

    def emit(text: str):
        nonlocal size
        parts.append(text)
        size += len(text)

    def add(w):
        if size > budget:
            return
        tag, items = _wire_tag(w)
        if tag is None and type(w) is not list:
            emit(repr(w))
        elif tag == "dict":
            emit("{")
            for i, (k, v) in enumerate(items):
                emit(", " if i else "")
                add(k)
                emit(": ")
                add(v)
            emit("}")
        elif tag in ("set", "frozenset") and not items:
            emit(f"{tag}()")
        else:
            items = w if tag is None else items
            opening, closing = {None: "[]", "tuple": "()", "set": "{}", "frozenset": "{}"}[tag]
            emit(("frozenset(" if tag == "frozenset" else "") + opening)
            for i, v in enumerate(items):
                emit(", " if i else "")
                add(v)
            emit(("," if tag == "tuple" and len(items) == 1 else "") + closing
                 + (")" if tag == "frozenset" else ""))

    add(wire)
    return "".join(parts)[:budget]


# ---------------------------------------------------------------------------------------------
# Parent side: the public API
# ---------------------------------------------------------------------------------------------

def run_tests(code: str, tests: list[dict], fn_name: str | None = None, timeout: float = 4.0,
              memory_mb: int = 1024, coverage: bool = False, source: str | None = None) -> Result:
    """Judge one program (see the module docstring). Starts one worker; prefer run_batch."""
    return run_batch([dict(code=code, tests=tests, fn_name=fn_name, timeout=timeout,
                           memory_mb=memory_mb, coverage=coverage, source=source)], workers=1)[0]


def run_batch(jobs: Iterable[dict], workers: int | None = None) -> list[Result]:
    """Judge many programs on a pool of warm workers; results in the order of jobs.

    Each job is a dict with code, tests and optionally fn_name, timeout, memory_mb, coverage,
    stop_after_timeout (default True: the tests after a timeout are not run and count as timeouts;
    False: every test is run and judged on its own), source (the data source whose comparison
    rules judge the outputs, see RULES; default: the project's own).
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
        jobs = _each_distinct_once(jobs, owner)
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
                    prepared = _prepare(job)
                    if prepared.compile_error is not None:
                        results[i] = Result(COMPILE_ERROR, 0, len(job["tests"]), [], set(),
                                            time.monotonic() - start, prepared.compile_error)
                        continue
                    if worker is None or not worker.alive():
                        if worker is not None:
                            worker.close()
                        worker = _start_worker()
                    sent = time.monotonic()
                    report = worker.run(job, prepared)   # observations, never a verdict
                    results[i] = _judge_job(job, prepared, report, time.monotonic() - sent)
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


def distinct_jobs(jobs: Iterable[dict]) -> tuple[list[dict], list[int]]:
    """The distinct jobs among `jobs` (checked, defaults filled in) and, per job, the index of
    its distinct job: run_batch runs each distinct job once and gives its Result to every copy.

    >>> a = dict(code="print(1)", tests=[dict(input="", output="1")])
    >>> unique, owner = distinct_jobs([a, dict(a, timeout=2.0), dict(a), dict(a, timeout=4.0)])
    >>> len(unique), owner          # timeout 4.0 is the default: the same job as `a`
    (2, [0, 1, 0, 0])

    Two jobs are the same when every field is (job_key): program, tests, fn_name, source (its
    comparison rules), limits, coverage, stop_after_timeout, anything else a caller put in.
    A deterministic program's verdict is a function of its job, so one run changes nothing.
    Where the verdict is not (a program within noise of its time limit; one that reads
    random, the clock or id()), the one run is a draw from the same distribution each copy's
    own run would draw from: each sample's expected reward and pass@1 are unchanged; only
    the copies now agree, as copies of a program do under any deterministic judge (figures
    that combine copies, a group's spread or pass@k for k > 1, see one draw, not several).
    Sharing lasts one call: nothing is kept between calls."""
    owner: list[int] = []
    return list(_each_distinct_once(jobs, owner)), owner


def _each_distinct_once(jobs: Iterable[dict], owner: list[int]) -> Iterator[dict]:
    """distinct_jobs as the jobs come (run_batch's jobs may be a queue still being fed): yields
    each distinct job, checked, the first time it comes, and appends to `owner`, per job, the
    index of its distinct job among those yielded."""
    first: dict = {}
    for i, job in enumerate(jobs):
        job = _check_job(job, i)
        key = job_key(job) or ("not shared", i)
        new = key not in first
        owner.append(first.setdefault(key, len(first)))
        if new:
            yield job


def job_key(job: dict) -> bytes | None:
    """A checked job's identity: a digest of every field (pickle keeps 1, 1.0 and True, tuples
    and lists apart). Equal keys, same job; two equal jobs whose fields differ in dict order
    or object sharing may get two keys, which only runs one of them again. None when a field
    does not pickle (the job is then shared with none)."""
    try:
        return hashlib.sha256(pickle.dumps(sorted(job.items()), protocol=5)).digest()
    except Exception:   # pickle's errors vary by object (PicklingError, TypeError, ...)
        return None


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
            judged.append(_judge_test(raw, t.get("output"), job, prepared))
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
    if "result" in message and (job["fn_name"] is None or job["check"] or "result_error" in message
                                or not _valid_wire(message["result"], MAX_RESULT_DEPTH + 2)):
        return None
    lines = message.get("lines", [])
    if not isinstance(lines, list) or any(type(n) is not int for n in lines):
        return None
    if lines:
        if not job["coverage"] or not set(lines) <= prepared.executable_lines():
            return None
    message["lines"] = set(lines)
    return message


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
    return TestResult(status, raw["time"], shown, stderr, lines, raw["cpu"])


def _judge_value(job: dict, expected, wire) -> tuple[str, str]:
    """(verdict, shown output) of a call-based test under its source's rule."""
    values_rule = rule_for(job["source"])[1]
    try:
        ok = values_rule(expected, wire)
    except TypeError as e:   # the own rule: not JSON data
        return WRONG_ANSWER, f"return value not comparable as data: {e}"[:SHOWN_OUTPUT]
    return (PASS if ok else WRONG_ANSWER), _wire_repr(wire)


# ---------------------------------------------------------------------------------------------
# Parent side: jobs and workers
# ---------------------------------------------------------------------------------------------

def _check_job(job: dict, index: int) -> dict:
    job = dict(fn_name=None, timeout=4.0, memory_mb=1024, coverage=False,
               stop_after_timeout=True, source=None) | dict(job)
    tests = job.get("tests")
    if not isinstance(job.get("code"), str):
        raise ValueError(f"job {index}: 'code' must be a string of Python source.")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"job {index}: 'tests' must be a non-empty list of "
                         "{'input': ..., 'output': ...} dicts (drop problems without tests).")
    if job["source"] is not None and not isinstance(job["source"], str):
        raise ValueError(f"job {index}: 'source' must be a data source's name (see "
                         "sandbox.RULES) or None.")
    job["check"] = any(isinstance(t, dict) and "check" in t for t in tests)
    if job["check"]:
        if len(tests) != 1 or not isinstance(tests[0]["check"], str):
            raise ValueError(f"job {index}: a check test {{'check': code}} is the job's only "
                             "test (its check(candidate) holds every assert), with code a string.")
        if not isinstance(job["fn_name"], str):
            raise ValueError(f"job {index}: a check test needs fn_name, the function that "
                             "check(candidate) gets as candidate.")
        tests = []
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
    """The byte cap of a test's stdout; for a check test also of each value the candidate
    returns."""
    expected = test.get("output", "")
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
        (_run_job), or None when it died or hung (it is closed, and replaced for the next job).
        A check test's code goes in a frame of its own, after the request: the job process
        reads it only once the program's process is forked (_run_one_test)."""
        # Past the byte cap stdout is compacted (_CompactText), which only the line rule reads
        # the same way; a call-based or check test's stdout is never compared.
        compact = job["fn_name"] is not None or rule_for(job["source"])[0] is outputs_match
        request = dict(code=job["code"], inputs=[t.get("input") for t in job["tests"]],
                       fn_name=job["fn_name"], timeout=float(job["timeout"]),
                       memory_mb=int(job["memory_mb"]), coverage=bool(job["coverage"]),
                       stop_after_timeout=bool(job["stop_after_timeout"]),
                       binds_fn=prepared.binds_fn, opens_files=prepared.opens_files,
                       output_caps=[_output_cap(job, t) for t in job["tests"]],
                       compact_output=compact, check=job["check"])
        deadline = time.monotonic() + len(job["tests"]) * (
            HARD_CAP_FACTOR * _wall_cap(job["timeout"]) + 2.0) + 30.0
        reply = None
        try:
            _write_frame(self.proc.stdin.fileno(), pickle.dumps(request))
            if job["check"]:
                _write_frame(self.proc.stdin.fileno(), job["tests"][0]["check"].encode())
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
    import fcntl  # noqa: F401
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
                report = _run_job(pickle.loads(payload), info, cmd_fd)
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

def _run_job(job: dict, info: dict, cmd_fd: int) -> dict:
    """Each test in a forked child (_run_one_test); a check job's check code is the next frame
    on cmd_fd, read by _run_one_test at its moment (and here, unused, if nothing runs)."""
    def read_check() -> str:
        return (_read_frame(cmd_fd) or b"").decode("utf-8", "replace")
    try:
        compiled = _compile_quietly(job["code"])
    except Exception as e:   # the parent compiled it; only a resource failure gets here
        if job["check"]:
            read_check()   # so that the next job process does not take it for its request
        return {"tests": [], "error": f"the worker could not compile the code: {e}"[:500]}
    cg = isolation.cgroup()
    if cg is not None:
        cg.set_memory_limit(job["memory_mb"] << 20)
    tests = []
    for i, test_input in enumerate(job["inputs"]):
        raw = _run_one_test(job, compiled, test_input, job["output_caps"][i], info, read_check)
        tests.append(raw)
        timed_out = (raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU
                     or raw["cpu"] > job["timeout"])
        if timed_out and job["stop_after_timeout"]:
            break
    return {"tests": tests}


def _run_one_test(job: dict, compiled, test_input, output_cap: int, info: dict,
                  read_check=None) -> dict:
    """Fork a child that runs the program on one input; its raw observations (no verdict).
    A check test forks two processes: the program's, which serves calls of its function
    (_serve_calls), then the checker, which runs check(candidate) (_checker). The check code is
    read only between the two forks, so the program's process never held it."""
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
    # a check test's pipes: calls go checker -> program, replies program -> checker
    calls_r, calls_w, replies_r, replies_w = (
        (*os.pipe(), *os.pipe()) if job["check"] else (None,) * 4)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(job, compiled, test_input, workdir, uid, (stdin_fd, out_w, err_w, msg_w),
                   (calls_r, replies_w) if job["check"] else None)
        finally:
            _REAL_EXIT(111)
    for fd in (stdin_fd, out_w, msg_w, calls_r, replies_w):
        if fd is not None:
            os.close(fd)
    checker = None
    if job["check"]:
        checker = _start_checker(read_check(), job, workdir, uid, (calls_w, replies_r, err_w),
                                 output_cap)
    os.close(err_w)
    cpu_used = tree_cpu or (lambda: _process_cpu(pid) + (_process_cpu(checker) if checker else 0))
    raw = _watch(pid, uid, tasks0, start, job, output_cap, (out_r, err_r, msg_r), cpu_used,
                 checker)
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


def _watch(pid, uid, tasks0, start, job, output_cap, pipes, cpu_used, checker=None) -> dict:
    """Collect a child's stdout/stderr/harness message until it exits (and the checker of a
    check test too), floods, uses its CPU time or reaches the wall cap. CPU is polled only when
    the tree could have used it all: the first look is at timeout / cores, then at (what is
    left) / cores."""
    timeout = job["timeout"]
    cores = max(1, len(os.sched_getaffinity(0)))
    out_r, err_r, msg_r = pipes
    processes = [pid] + ([checker] if checker else [])
    pidfds = {os.pidfd_open(p): p for p in processes}
    sel = selectors.DefaultSelector()
    stdout = _StdoutBuffer(output_cap, job["compact_output"])
    stderr, message = bytearray(), bytearray()
    for fd in pipes:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    for pidfd in pidfds:
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

    def run_delay() -> float:
        return sum(_run_delay(p, delays) for p in processes)

    cap, delays, running = _wall_cap(timeout), {}, set(pidfds)
    exited, hard_deadline = False, start + HARD_CAP_FACTOR * cap
    while not exited:
        now = time.monotonic()
        if now >= wall_deadline:   # the cap counts time not spent waiting for a CPU
            left = cap - (now - start - run_delay())
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
            run_delay()   # a thread that ends before the cap still counts
        for key, _ in sel.select(min(wall_deadline, next_check) - now):
            if key.fd in running:
                running.discard(key.fd)
                sel.unregister(key.fd)
                exited = not running
            elif key.fd not in pidfds:
                drain(key.fd)
        if flooded():
            kind = "output_limit"
            break
    elapsed = time.monotonic() - start
    ends = {}
    for pidfd, p in pidfds.items():   # (reaped before kill_leftovers, which would reap them)
        if pidfd in running:
            os.kill(p, signal.SIGKILL)   # not reaped yet: the pid is still this process
        ends[p] = os.wait4(p, 0)[1:]
        os.close(pidfd)
    isolation.kill_leftovers(uid, tasks0)
    status, usage = ends[pid]
    cpu = sum(u.ru_utime + u.ru_stime for _, u in ends.values())
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
    return dict(kind=kind, time=round(elapsed, 4), cpu=round(cpu, 4),
                oom=False, exit_code=os.waitstatus_to_exitcode(status),
                signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                stdout=stdout.value(), stderr=bytes(stderr[-STDERR_TAIL:]),
                message=bytes(message) if kind == "exited" else b"",
                check_status=os.waitstatus_to_exitcode(ends[checker][0]) if checker else None)


class _StdoutBuffer:
    """A test's stdout as the worker keeps it: its bytes, up to the cap; past the cap, all of it
    as _CompactText, so an output that is long only in what the line rule ignores still fits
    (compacts=False, for a source whose rule reads spacing otherwise: over the cap is over).
    over_limit: over the cap even compacted, or RAW_OUTPUT_FACTOR x the cap of bytes."""

    def __init__(self, cap: int, compacts: bool = True):
        self.cap, self.raw, self.seen, self.compact = cap, bytearray(), 0, None
        self.compacts = compacts

    def add(self, chunk: bytes):
        self.seen += len(chunk)
        if self.compact is not None:
            self.compact.feed(chunk)
            return
        self.raw += chunk
        if len(self.raw) > self.cap and self.compacts:
            self.compact = _CompactText()
            self.compact.feed(self.raw)
            self.raw = bytearray()

    def over_limit(self) -> bool:
        if not self.compacts:
            return self.seen > self.cap
        return self.seen > RAW_OUTPUT_FACTOR * self.cap or (
            self.compact is not None and self.compact.size() > self.cap)

    def value(self) -> bytes:
        if self.compact is None:
            return bytes(self.raw[:self.cap])
        self.compact.feed(b"", final=True)
        return bytes(self.compact.text[:self.cap])


def _child(job, compiled, test_input, workdir, uid, fds, serve=None):
    """In the forked child: lock down, run the program, end as the interpreter ends, report
    observations on HARNESS_FD. serve: a check test's (calls, replies) pipes, which become fds
    CALLS_FD and REPLIES_FD (_serve_calls)."""
    import atexit
    import builtins
    import io
    import types
    stdin_fd, out_w, err_w, msg_w = fds
    targets = {0: stdin_fd, 1: out_w, 2: err_w, HARNESS_FD: msg_w}
    if serve:
        targets |= {CALLS_FD: serve[0], REPLIES_FD: serve[1]}
    _place_fds(targets)
    isolation.confine_test(workdir, uid, job["memory_mb"], job["timeout"], max(targets) + 1)
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
    if job["fn_name"] is not None and not serve:
        # a LeetCode fragment; a stdio program is a whole script, and so is HumanEval's
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
        if serve:
            _serve_calls(_find_function(module.__dict__, job["fn_name"], job["binds_fn"]))
        elif job["fn_name"] is not None:
            function = _find_function(module.__dict__, job["fn_name"], job["binds_fn"])
            value = function(*test_input)
            sys.settrace(None)
            message.update(_wire_message(value))
    except SystemExit as e:
        exit_code = _exit_code(e)
    except BaseException as e:
        sys.settrace(None)
        message["exception"] = type(e).__name__[:100]
        exit_code = 1
        _print_program_error(e)
    exit_code = _finish_like_the_interpreter(module, exit_code, io, job["opens_files"])
    report()
    _REAL_EXIT(exit_code)


def _place_fds(targets: dict[int, int]):
    """dup2 each fd onto its number (targets: number -> fd), none clobbering another: every fd
    is first copied above all the numbers (confine_test closes those copies)."""
    import fcntl
    above = max(targets) + 1
    lifted = {n: fcntl.fcntl(fd, fcntl.F_DUPFD, above) for n, fd in targets.items()}
    for n, fd in lifted.items():
        os.dup2(fd, n)


def _print_program_error(e: BaseException):
    """The traceback on stderr, with the program's frames only, none of the judge's: their path
    and line numbers differ between checkouts and are none of the program's business."""
    try:
        import traceback
        judge = _find_function.__code__.co_filename
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename != judge]
        head = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        sys.stderr.write("".join((head if frames else [])
                                 + traceback.format_exception_only(type(e), e)))
    except BaseException:
        pass


# --- check tests: the program's process serves calls, the checker runs check(candidate) --------

CALLS_FD, REPLIES_FD = HARNESS_FD + 1, HARNESS_FD + 2   # in the program's process
# How check(candidate) ended: the checker's exit status, which nothing the program does can set.
CHECK_PASSED = 0          # check() returned
CHECK_FAILED = 10         # an assert failed
CHECK_RAISED = 11         # check() raised on what the candidate returned (a TypeError, ...)
NOT_DATA = 12             # the candidate returned what is not plain data (a generator, an object)
CANDIDATE_RAISED = 13     # the candidate raised, and check() did not catch it
CANDIDATE_MEMORY = 14     # ... a MemoryError
PROGRAM_ENDED = 15        # the program failed before check() or ended inside a call
TOO_LARGE = 16            # a returned value was over the output cap
MALFORMED_REPLY = 17      # the program's process sent what the protocol does not allow
CHECK_UNUSABLE = 18       # the check code defines no check(), or sends an argument not data
CHECK_VERDICTS = {CHECK_PASSED: PASS, CHECK_FAILED: WRONG_ANSWER, CHECK_RAISED: WRONG_ANSWER,
                  NOT_DATA: WRONG_ANSWER, CANDIDATE_RAISED: RUNTIME_ERROR,
                  CANDIDATE_MEMORY: MEMORY_LIMIT, PROGRAM_ENDED: RUNTIME_ERROR,
                  TOO_LARGE: OUTPUT_LIMIT, MALFORMED_REPLY: RUNTIME_ERROR,
                  CHECK_UNUSABLE: RUNTIME_ERROR}


def _serve_calls(function):
    """The program's side of a check test: call `function` with each call the checker sends
    (wire arguments on CALLS_FD) and reply on REPLIES_FD with its value on the wire, or the name
    of the exception it raised, until the checker is done (EOF). The first reply says that the
    program ran and defines the function. A returned builtin iterator (a generator, map, ...)
    is sent as its items, and the checker gets an iterator over them: check() may take tuple()
    of it, as HumanEval/33 and /37 do, and `==` still finds it unequal to a list."""
    _write_frame(REPLIES_FD, b'{"ready": true}')
    while (call := _read_frame(CALLS_FD)) is not None:
        args, kwargs = _from_wire(json.loads(call))
        try:
            value = function(*args, **kwargs)
            iterator = type(value).__module__ == "builtins" and hasattr(type(value), "__next__")
            if iterator:
                value = list(value)
        except Exception as e:   # the checker raises it inside check(), as the harness would
            _print_program_error(e)
            reply = {"exception": type(e).__name__[:100]}
        else:
            reply = _wire_message(value)
            if iterator and "result" in reply:
                reply = {"iterator": reply["result"]}
        _write_frame(REPLIES_FD, json.dumps(reply).encode())


def _valid_reply(key: str, value) -> bool:
    """Is this the one key of a reply of the program's process (_serve_calls), with its value?"""
    if key == "ready":
        return value is True
    if key in ("exception", "result_error"):
        return type(value) is str
    if key == "iterator" and type(value) is not list:
        return False
    return key in ("result", "iterator") and _valid_wire(value, MAX_RESULT_DEPTH + 2)


class _CheckEnded(BaseException):
    """Ends check() from inside a call: the program cannot answer (a BaseException, so that an
    `except Exception` in the check code does not swallow it)."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


def _start_checker(check_code: str, job: dict, workdir: str, uid, fds, output_cap: int) -> int:
    """Fork the checker of a check test (fds: the calls pipe's write end, the replies pipe's
    read end, the test's stderr); the job process keeps none of the three. Its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            _checker(check_code, job, workdir, uid, fds, output_cap)
        finally:
            _REAL_EXIT(111)
    for fd in fds[:2]:
        os.close(fd)
    return pid


def _checker(check_code: str, job: dict, workdir: str, uid, fds, output_cap: int):
    """In the checker process: confined as a test (same uid, limits, seccomp) and not dumpable,
    so the program's processes can neither read its memory (the check code, the expected
    values) nor write to its pipes. Runs the check code in a namespace of its own, binds
    fn_name there to the candidate too (a check may call the function by name, as HumanEval/33
    does: in the benchmark's harness that name is the program's function), calls
    check(candidate), and exits with how it ended (CHECK_*). candidate(*args) sends the
    arguments to the program's process and returns its reply, rebuilt as exact builtin values;
    an exception the program raised is raised again (its builtin type, else RuntimeError)."""
    import builtins
    calls_w, replies_r, err_w = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    _place_fds({0: devnull, 1: err_w, 2: err_w, 3: calls_w, 4: replies_r})
    isolation.confine_test(workdir, uid, job["memory_mb"], job["timeout"], 5)
    isolation.hide_process()
    raised = []   # the exception objects candidate() raised for the program

    def say(text: str):
        try:
            os.write(2, f"check: {text}\n".encode("utf-8", "replace"))
        except OSError:
            pass

    def reply() -> dict:
        header = _read_exactly(4, 8, None)
        if header is None:
            raise _CheckEnded(PROGRAM_ENDED, "the program ended (or failed) without answering")
        if int.from_bytes(header, "big") > output_cap:
            raise _CheckEnded(TOO_LARGE, f"a returned value is over {output_cap} bytes")
        data = _read_exactly(4, int.from_bytes(header, "big"), None)
        try:
            message = json.loads(data)
            ok = (type(message) is dict and len(message) == 1
                  and _valid_reply(*next(iter(message.items()))))
        except Exception:   # not JSON, not UTF-8, too deep
            ok = False
        if not ok:
            raise _CheckEnded(MALFORMED_REPLY, "the program's process sent a malformed reply")
        return message

    def candidate(*args, **kwargs):
        try:
            call = json.dumps(_to_wire([list(args), kwargs])).encode()
        except (TypeError, ValueError) as e:
            raise _CheckEnded(CHECK_UNUSABLE, f"check() passed an argument that is not plain "
                                              f"data ({e})") from None
        try:
            _write_frame(3, call)
        except OSError:   # the program's process is gone
            raise _CheckEnded(PROGRAM_ENDED, "the program ended before the call") from None
        message = reply()
        if "result" in message or "iterator" in message:
            try:
                if "iterator" in message:
                    return iter(_from_wire(message["iterator"]))
                return _from_wire(message["result"])
            except TypeError:   # an unhashable set member or key: not what _to_wire sends
                raise _CheckEnded(MALFORMED_REPLY, "an unhashable set member or key") from None
        if "result_error" in message:
            raise _CheckEnded(NOT_DATA, message["result_error"][:200])
        kind = getattr(builtins, message.get("exception", ""), None)
        error = (kind if isinstance(kind, type) and issubclass(kind, Exception)
                 else RuntimeError)(f"raised by the candidate: {message.get('exception')}")
        raised.append(error)
        raise error

    namespace = {"__name__": "__check__", "__builtins__": builtins}
    try:
        exec(compile(check_code, "<check>", "exec", dont_inherit=True), namespace)
    except BaseException as e:
        say(f"the check code does not run: {type(e).__name__}: {e}"[:300])
        _REAL_EXIT(CHECK_UNUSABLE)
    check = namespace.get("check")
    if not callable(check):
        say("the check code defines no check(candidate)")
        _REAL_EXIT(CHECK_UNUSABLE)
    try:
        if reply().get("ready") is not True:
            raise _CheckEnded(MALFORMED_REPLY, "the program's process did not say it is ready")
        namespace[job["fn_name"]] = candidate
        check(candidate)
        status = CHECK_PASSED
    except _CheckEnded as e:
        status = e.status
        say(e.why)
    except BaseException as e:
        import traceback
        line = next((f.lineno for f in traceback.extract_tb(e.__traceback__)
                     if f.filename == "<check>"), "?")
        if any(e is r for r in raised):
            status = CANDIDATE_MEMORY if isinstance(e, MemoryError) else CANDIDATE_RAISED
            say(f"the candidate raised {type(e).__name__} (check line {line})")
        elif isinstance(e, AssertionError):
            status = CHECK_FAILED
            say(f"an assert failed (check line {line})")
        else:
            status = CHECK_RAISED
            say(f"check() raised {type(e).__name__} (check line {line})")
    _REAL_EXIT(status)


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


def _wire_message(value) -> dict:
    """The child's report of a returned value: on the wire, or why it cannot be."""
    try:
        wire = _to_wire(value)
        json.dumps(wire)   # ints over 4300 digits do not serialise
        return {"result": wire}
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
    parser.add_argument("tests", help="JSON file: a list of {'input', 'output'} objects (or "
                        "one {'check': code}, with --fn-name), or an APPS-style object "
                        "{'inputs': [...], 'outputs': [...], 'fn_name'?}")
    parser.add_argument("--fn-name", default=None, help="call-based tests: the function (or "
                        "Solution method) to call with each input list; default: standard I/O")
    parser.add_argument("--timeout", type=_positive(float), default=4.0,
                        help="CPU seconds per test (the wall cap is 3x this + 1 s)")
    parser.add_argument("--memory-mb", type=_positive(int), default=1024,
                        help="memory limit per test, MiB")
    parser.add_argument("--coverage", action="store_true", help="also report executed lines")
    parser.add_argument("--source", choices=sorted(RULES), default=None,
                        help="compare outputs as this benchmark does (see RULES); default: the "
                             "project's own rules")
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
                               args.memory_mb, args.coverage, args.source)
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
