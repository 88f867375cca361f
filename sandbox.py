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
A test ends the way the interpreter ends: non-daemon threads are joined, atexit handlers run,
sys.stdout/sys.stderr and file objects left in the program's globals are flushed; os._exit ends
at once (buffered output is lost, as in CPython) but still reports coverage.
Time: a test is a timeout when its process tree used more than `timeout` seconds of CPU, or
when it ran longer than a wall cap of WALL_FACTOR * timeout + WALL_SLACK seconds (a sleeping or
blocked program). The cap does not count the time the test's main process spent runnable but
waiting for a CPU (its schedstat run delay), up to HARD_CAP_FACTOR times the cap. Neither CPU
time nor that wall time depends on how loaded the machine is, so the same program gets the same
verdict idle and busy unless it is within noise of the limit.

Comparison rules (outputs_match, values_match; the parent process applies them, never the child):
  standard I/O: split into lines; trailing whitespace of each line and trailing blank lines are
    ignored; the line counts must agree; each line is split on whitespace and compared token by
    token, in order. A token is equal if the strings are equal, or if the expected token is a
    decimal (has a '.' or an exponent) and the actual token is a plain ASCII number
    ([+-]digits[.digits][e[+-]digits]) with |a - e| <= FLOAT_TOL * max(1, |e|). Integers compare
    as strings ("1" != "1.0"). Unlike the original APPS checker: no reordering, no token sets,
    no rounding to 3 decimals. Cost is linear in the output: no regex touches program output.
  call-based: the child turns the return value into plain JSON data (tuples -> lists); only exact
    builtin types are accepted, so no object the program builds (an __eq__ that is always True, an
    int subclass) reaches the comparison. Then deep equality with tuples == lists, True == 1 (as in
    Python), integers exact (an expected int equals only a value that == it exactly, so 1e12 is
    not 10**12 + 7), floats within FLOAT_TOL as above, sets as sorted lists.

Architecture (why it is fast)
------------------------------
run_batch starts one worker per core: a fresh `python -I sandbox.py --worker` with an empty
environment, a few common modules pre-imported. Each worker is a fork server: per test it forks a
child, so a test costs a fork, not a Python start-up. The parent compiles the code first (compile
errors are decided there), then sends a worker only the code and the test INPUTS; the worker
compiles it once per job, before forking. The expected outputs stay in the parent, which judges
what comes back. Workers and threads live for one run_batch call and are gone when it returns;
a worker that fails to start is retried (its stderr is printed), one that dies is replaced.
Cost per test (measured with perf on a 2-core VM): about 3 ms of CPU against about 10 ms for a
fresh interpreter. Most of it is the kernel's copy-on-write work for the fork: copying the
worker's page tables and ~700 page faults per test. The hardening below adds no fork or exec per
test: a seccomp filter load (binary search, so the kernel's per-syscall pre-evaluation at load is
short), reads of already-open cgroup files, and two tmpfs mounts only after a test that wrote
something (an untouched tmpfs is reused). The interpreter-like exit steps run only when there is
something to do (threads, atexit handlers, file objects), since each object touched after the
fork costs a page copy.

Threat model: what is enforced, how, and what remains
------------------------------------------------------
The program is hostile: it may write anything to any fd, fork, spin, fill memory and disk, call
any syscall. isolation_report() says what this machine gives; as root (the training setup):
* Result channel. The child reports observations only (return value as data, exception type,
  covered lines) on fd 3; the parent decides every verdict. The parent treats that message as
  hostile: JSON with a fixed set of keys, each typed and size-bounded (result: plain data, depth
  <= 100; lines: ints that are executable lines of the compiled code; exception/result_error:
  short strings); anything else makes that test a runtime_error. Compile errors are decided by
  the parent, so a report cannot claim one. stdout is never parsed for markers. Any failure while
  judging one job becomes that job's runtime_error; a worker that dies is replaced: run_batch
  returns a verdict for every job whatever a program writes (run_batch raises only for invalid
  jobs or when no worker can be started at all).
* Per worker: own pid namespace (the fork server is its pid 1, /proc remounted: host processes
  are invisible, and when the worker dies the kernel kills every process it left), network
  namespace (no network, not even loopback; abstract unix sockets are per namespace), IPC
  namespace, mount namespace in which every filesystem is remounted read-only, nosuid, nodev;
  /tmp, /var/tmp, /run/lock, /dev/shm and the home/project directories (HIDDEN_DIRS) are
  covered by empty tmpfs; the interpreter's prefix and sys.path directories are bound back
  read-only (also when they live under /tmp or a 0700 home), so numpy etc. import.
* Per test: uid/gid = UID_BASE + worker pid (no other live worker has it), own session, empty
  environment, stdin a memfd; a fresh tmpfs as working directory and another as /dev/shm
  (size-bounded, unmounted after the test: whatever tree the program leaves, it is gone);
  PR_SET_NO_NEW_PRIVS (setuid binaries do not raise privileges) and a seccomp filter written here
  in BPF (x86_64) that makes these calls fail with EPERM: unshare, setns, clone with namespace
  flags (clone3 gets ENOSYS so libc falls back to clone), ptrace, process_vm_readv/writev, kcmp,
  pidfd_getfd, keyctl/add_key/request_key (no keyring access), SysV IPC and POSIX message queues
  (no IPC object can be created, so none crosses tests), socket(AF_UNIX) and datagram
  socketpairs (host unix sockets are not reachable; stream socketpairs, which asyncio and
  multiprocessing use, stay allowed), mount family, chroot, io_uring, bpf, perf_event_open,
  userfaultfd, module/kexec/reboot/swap calls. Any other architecture is killed.
  Without the filter (not x86_64), each test gets its own IPC namespace instead.
* Limits: the worker and everything its tests start live in one cgroup (v2 where the memory
  controller is delegated, else v1 memory+pids+cpuacct, as on this VM): memory of the whole
  process tree of a test <= memory_mb (over the worker's own usage; OOM kill = memory_limit),
  processes + threads <= NPROC_LIMIT (also RLIMIT_NPROC on the uid), CPU time of the tree read
  from the cgroup. Per process as well: RLIMIT_AS = memory_mb, RLIMIT_CPU, NOFILE, FSIZE, core 0.
* Cleanup after each test: kill(-1) as the test uid (one pass through the task list, so a fork
  bomb cannot outrun it), reap until no child is left (pid 1 of the namespace and subreaper: no
  child left means no process of the test lives), unmount the test's tmpfs.
What remains: the program runs in the same process as the harness code, so it can write any
message on fd 3 (all it can claim is "my function returned X", which returning X does anyway);
it sees the inputs of the other tests of its job (they are in the worker's memory) and, for
outputs over ~0.5 MB, an upper bound of the expected length (the output cap). It can read the
world-readable files of the host (read-only) and /sys. A CPU hog still takes a core from its
neighbours until it is stopped at `timeout` CPU seconds (verdicts do not depend on it, wall
times do). Timing side channels and kernel bugs are out of scope.
Without root (a laptop) the sandbox degrades: no uid drop, no namespaces, no cgroup; rlimits
(memory per process, RLIMIT_NPROC = the user's process count + NPROC_LIMIT), CPU time of the
main process, wall cap, session kill and the subreaper tree kill still apply, and so do
no_new_privs and the seccomp filter (no ptrace of your processes, no keyrings, no SysV IPC). A
program can then read your files and signal your processes. Use root (or a container) for
training.

Simplifications (documented choices)
------------------------------------
* After the first test that times out, the program's remaining tests are not run and count as
  timeout: a program that loops forever costs one timeout, not one per test.
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

PASS, WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT, COMPILE_ERROR = (
    "pass", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit",
    "compile_error")

FLOAT_TOL = 1e-6            # absolute for |e| <= 1, relative above
OUTPUT_LIMIT_MIN = 1 << 20  # stdout cap per test: max(this, 2 * len(expected) + 64 KiB) bytes
STDERR_TAIL = 2000          # characters of stderr kept per test
SHOWN_OUTPUT = 1000         # characters of actual output kept in TestResult.output
UID_BASE = 100_000          # test uid = UID_BASE + worker pid
NPROC_LIMIT = 64            # processes + threads per test uid (a fork bomb stops here)
NOFILE_LIMIT = 64
FSIZE_LIMIT = 16 << 20      # largest file a program may write, bytes
TMPFS_SIZE = "64m"          # all files one test may write in its working directory
SHM_SIZE = "16m"            # the test's own /dev/shm
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

    Each job is a dict with code, tests and optionally fn_name, timeout, memory_mb, coverage.
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
                    results[i] = worker.judge(jobs[i], prepared)
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


def isolation_report() -> dict:
    """What isolation a worker gets on this machine (starts and stops one worker)."""
    worker = _start_worker()
    try:
        return {k: v for k, v in worker.info.items() if k != "cgroup_dirs"}
    finally:
        worker.close()


def _check_job(job: dict, index: int) -> dict:
    job = dict(fn_name=None, timeout=4.0, memory_mb=1024, coverage=False) | dict(job)
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
            lines, todo = set(), [self.code_object]
            while todo:
                code = todo.pop()
                lines.update(n for _, _, n in code.co_lines() if n)   # 0: no source line
                todo.extend(c for c in code.co_consts if hasattr(c, "co_lines"))
            self._lines = frozenset(lines)
        return self._lines


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
    """One fork-server process (python -I sandbox.py --worker) and its framed pipe protocol."""
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
            env=_minimal_env("/") | {"LD_BIND_NOW": "1"},
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

    def judge(self, job: dict, prepared: _Prepared) -> Result:
        """Send code + inputs (never outputs), wait for raw observations, judge them here."""
        request = dict(code=job["code"], inputs=[t["input"] for t in job["tests"]],
                       fn_name=job["fn_name"], timeout=float(job["timeout"]),
                       memory_mb=int(job["memory_mb"]), coverage=bool(job["coverage"]),
                       binds_fn=prepared.binds_fn, opens_files=prepared.opens_files,
                       output_caps=[_output_cap(job, t) for t in job["tests"]])
        start = time.monotonic()
        deadline = start + len(job["tests"]) * (
            HARD_CAP_FACTOR * _wall_cap(job["timeout"]) + 2.0) + 30.0
        reply = None
        try:
            _write_frame(self.proc.stdin.fileno(), pickle.dumps(request))
            reply = self._read(deadline)
        except (BrokenPipeError, OSError):
            pass
        if reply is None:  # died (a bug, or the host killed it) or hung: replaced for the next job
            self.close()
            return Result(RUNTIME_ERROR, 0, len(job["tests"]), [], set(),
                          time.monotonic() - start, "the sandbox worker died or hung on this job")
        return _judge_job(job, prepared, pickle.loads(reply), time.monotonic() - start)

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
        if not clean and os.geteuid() == 0:   # killed mid-test: its uid's processes may live on
            _kill_uid_from_parent(UID_BASE + self.proc.pid)
        for path in self.info.get("cgroup_dirs", []):   # empty once its processes are gone
            for _ in range(50):
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def _worker_command() -> list[str]:
    return [sys.executable, "-I", os.path.abspath(__file__), "--worker"]


def _wall_cap(timeout: float) -> float:
    return WALL_FACTOR * timeout + WALL_SLACK


def _kill_uid_from_parent(uid: int, limit_s: float = 5.0):
    """Kill every live process of `uid` after its worker died mid-test (quietly, never raises).

    With a pid namespace the kernel already kills them when the worker's pid 1 dies; this is the
    check, and the cleanup without one. First `kill -9 -1` as `uid` (procps kill: one atomic
    pass, so a fork bomb cannot outrun it; setuid happens in C, the trainer is never forked).
    Then, as a check and a fallback where that binary is missing, signal what is left from here
    through pidfds (a pid reused in between is not touched). Zombies are already dead.
    """
    if _live_pids_of(uid):
        try:
            subprocess.run(["kill", "-9", "-1"], user=uid, group=uid, extra_groups=[],
                           env=_minimal_env("/"), check=False, cwd="/",
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    deadline = time.monotonic() + limit_s
    while (pids := _live_pids_of(uid)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:   # still that process, pinned by pidfd
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(pidfd)
        time.sleep(0.005)


def _live_pids_of(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit() and _owner(name) == uid:
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                pids.append(int(name))
    return pids


def _judge_job(job: dict, prepared: _Prepared, report: dict, wall_time: float) -> Result:
    tests = job["tests"]
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


def _minimal_env(home: str) -> dict:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
            "LANG": "C.UTF-8"}


# ---------------------------------------------------------------------------------------------
# Worker side: runs in `python -I sandbox.py --worker`
# ---------------------------------------------------------------------------------------------

_LIBC = None      # the worker's handle on libc (prctl, mount, unshare), inherited by children
_SECCOMP = None   # the worker's seccomp program (ctypes sock_fprog), loaded by each test child
_CGROUP = None    # the worker's _Cgroup, or None
_REAL_EXIT = os._exit
_PRELUDE: dict = {}   # filled once per worker, shared copy-on-write by its children
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 32, 4096, 16384, 1 << 18, 2
WORKDIR, SHMDIR = "/tmp/work", "/dev/shm"


def _worker_main():
    global _LIBC
    import atexit  # noqa: F401  (the children's imports are then dictionary look-ups)
    import ctypes
    import io  # noqa: F401
    import resource  # noqa: F401
    import shutil  # noqa: F401
    import tempfile  # noqa: F401
    import types  # noqa: F401
    libc = _LIBC = ctypes.CDLL(None, use_errno=True)
    # The protocol moves off fds 0/1 so that nothing printed by accident corrupts it.
    cmd_fd, reply_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)        # die with the parent
    info = _isolate_worker(libc, (cmd_fd, reply_fd))   # from here on: the pid namespace's pid 1
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
        while (payload := _read_frame(cmd_fd)) is not None:
            report = _run_job(pickle.loads(payload), info)
            _write_frame(reply_fd, pickle.dumps(report, protocol=5))
    finally:
        if info["workdir_root"] != "/tmp":
            _remove_tree(info["workdir_root"])


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


def _isolate_worker(libc, protocol_fds) -> dict:
    """Cgroup, namespaces, filesystem, seccomp for this worker; returns what it got (see the
    module docstring). With a pid namespace, this process forks the namespace's pid 1, which
    returns from here and serves; this one stays behind only to wait for it."""
    global _SECCOMP, _CGROUP
    info = dict(root=os.geteuid() == 0, uid=None, network_namespace=False,
                mount_namespace=False, pid_namespace=False, ipc_namespace_per_test=False,
                seccomp=False, no_new_privs=True, cgroup=None, cgroup_dirs=[],
                memory_limit="per process (RLIMIT_AS)", workdir_root=None)
    if info["root"]:
        info["uid"] = UID_BASE + os.getpid()
        _CGROUP = _Cgroup.join(os.getpid())
        if _CGROUP is not None:
            info.update(cgroup=_CGROUP.version, cgroup_dirs=_CGROUP.dirs,
                        memory_limit="per test process tree (cgroup) and per process")
        if libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) == 0:
            info["network_namespace"] = True
        mount_ns = libc.unshare(CLONE_NEWNS) == 0
        if libc.unshare(CLONE_NEWPID) == 0:
            host_pid = os.getpid()
            server = os.fork()
            if server:
                _wait_for_server(server, protocol_fds)   # never returns
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() == 0 and not os.path.exists(f"/proc/{host_pid}"):
                _REAL_EXIT(1)   # the parent died before PDEATHSIG was set
            info["pid_namespace"] = True
        if mount_ns and _private_filesystem(libc, new_proc=info["pid_namespace"]):
            info["mount_namespace"] = True
            info["workdir_root"] = "/tmp"
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1)   # orphans of tests come to us (pid 1 gets them anyway)
    if info["workdir_root"] is None:
        import tempfile
        info["workdir_root"] = tempfile.mkdtemp(prefix="sandbox-")
    _SECCOMP = _seccomp_program()
    if _SECCOMP is not None and not _seccomp_works(libc):
        _SECCOMP = None
    info["seccomp"] = _SECCOMP is not None
    info["ipc_namespace_per_test"] = info["root"] and _SECCOMP is None
    return info


def _wait_for_server(server: int, protocol_fds):
    """Outside the pid namespace: wait for its pid 1; if this process dies (the parent killed
    it), PDEATHSIG kills pid 1 and with it every process of the namespace."""
    for fd in protocol_fds:
        os.close(fd)
    while True:
        try:
            _, status = os.waitpid(server, 0)
            break
        except InterruptedError:
            continue
    _REAL_EXIT(os.waitstatus_to_exitcode(status) & 0x7F)


class _Cgroup:
    """The worker's own cgroup (v2, or v1 memory + pids + cpuacct). The worker joins it at start
    and every test inherits it; only one test runs at a time, so its usage over the worker's idle
    usage is the test's process tree. Files are opened once and read with pread."""
    V1 = {"memory": ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.oom_control"),
          "pids": ("pids.max", "pids.current"), "cpuacct": ("cpuacct.usage",)}
    V2 = ("memory.max", "memory.current", "memory.events", "pids.max", "pids.current", "cpu.stat")

    def __init__(self, version: str, dirs: list[str], files: dict[str, str]):
        self.version, self.dirs = version, dirs
        self.fds = {name: os.open(path, os.O_RDWR if name.endswith(("max", "limit_in_bytes"))
                                  else os.O_RDONLY) for name, path in files.items()}
        self.limit = None

    @classmethod
    def join(cls, pid: int) -> _Cgroup | None:
        made: list[str] = []
        try:
            mounts, member = _cgroup_mounts(), _cgroup_membership()
            v2 = next((m for m in mounts if m[0] == "cgroup2"), None)
            if v2 and "" in member:
                base = _cgroup_dir(v2, member[""])
                with open(os.path.join(base, "cgroup.subtree_control")) as f:
                    enabled = f.read().split()
                if {"memory", "pids"} <= set(enabled):
                    made.append(_make_cgroup(base, pid))
                    files = {n: os.path.join(made[0], n) for n in cls.V2}
                    group = cls("v2", made, files)
                    _write_file(os.path.join(made[0], "memory.swap.max"), "0", missing_ok=True)
                    group._setup_and_enter(pid)
                    return group
            files = {}
            for controller, names in cls.V1.items():
                mount = next((m for m in mounts if m[0] == "cgroup" and controller in m[3]), None)
                path = next((p for c, p in member.items() if controller in c.split(",")), None)
                if mount is None or path is None:
                    return cls._undo(made)
                made.append(_make_cgroup(_cgroup_dir(mount, path), pid))
                files.update({n: os.path.join(made[-1], n) for n in names})
            group = cls("v1", made, files)
            group._setup_and_enter(pid)
            return group
        except OSError:
            return cls._undo(made)

    @staticmethod
    def _undo(made: list[str]) -> None:
        for path in made:
            try:
                os.rmdir(path)
            except OSError:
                pass
        return None

    def _setup_and_enter(self, pid: int):
        os.pwrite(self.fds["pids.max"], str(NPROC_LIMIT + 16).encode(), 0)
        for path in self.dirs:
            _write_file(os.path.join(path, "cgroup.procs"), str(pid))
        try:   # OOM in the cgroup: a test dies, not the worker (needs CAP_SYS_RESOURCE)
            _write_file("/proc/self/oom_score_adj", "-1000")
        except OSError:
            pass

    def _read(self, name: str) -> str:
        return os.pread(self.fds[name], 4096, 0).decode()

    def _field(self, name: str, key: str) -> int:
        for line in self._read(name).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
        return 0

    def cpu(self) -> float:
        if self.version == "v2":
            return self._field("cpu.stat", "usage_usec") / 1e6
        return int(self._read("cpuacct.usage")) / 1e9

    def memory(self) -> int:
        return int(self._read("memory.current" if self.version == "v2" else
                              "memory.usage_in_bytes"))

    def ooms(self) -> int:
        return self._field("memory.events" if self.version == "v2" else "memory.oom_control",
                           "oom_kill")

    def tasks(self) -> int:
        return int(self._read("pids.current"))

    def set_memory_limit(self, test_bytes: int):
        """Limit = the worker's usage now + what the test may use."""
        limit = self.memory() + test_bytes
        if self.limit is None or abs(limit - self.limit) > (4 << 20):
            name = "memory.max" if self.version == "v2" else "memory.limit_in_bytes"
            os.pwrite(self.fds[name], str(limit).encode(), 0)
            self.limit = limit


def _cgroup_mounts() -> list[tuple[str, str, str, list[str]]]:
    """(fstype, root, mount point, super options) of every cgroup mount."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            if fields[sep + 1] in ("cgroup", "cgroup2"):
                out.append((fields[sep + 1], fields[3], fields[4], fields[sep + 3].split(",")))
    return out


def _cgroup_membership() -> dict[str, str]:
    """{controllers ('' for v2): path} of this process."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            out[controllers] = path
    return out


def _cgroup_dir(mount, path: str) -> str:
    _, root, mount_point, _ = mount
    if root != "/" and path.startswith(root):
        path = path[len(root):]
    return mount_point + path.rstrip("/")


def _make_cgroup(base: str, pid: int) -> str:
    for name in os.listdir(base):   # left by workers killed with their trainer: remove
        if name.startswith("sandbox-") and not os.path.exists(f"/proc/{name[8:]}"):
            try:
                os.rmdir(os.path.join(base, name))
            except OSError:
                pass
    path = os.path.join(base, f"sandbox-{pid}")
    os.mkdir(path)
    return path


def _write_file(path: str, text: str, missing_ok: bool = False):
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        if missing_ok:
            return
        raise
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- seccomp -----------------------------------------------------------------------------------
# x86_64 numbers of the calls a test may not make (they fail with EPERM).
SECCOMP_DENY_X86_64 = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
    "pidfd_getfd": 438, "perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
    "keyctl": 250, "add_key": 248, "request_key": 249, "unshare": 272, "setns": 308,
    "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "mount_setattr": 442, "open_by_handle_at": 304, "name_to_handle_at": 303,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171,
    "iopl": 172, "ioperm": 173, "init_module": 175, "delete_module": 176, "finit_module": 313,
    "kexec_load": 246, "kexec_file_load": 320, "acct": 163, "quotactl": 179, "syslog": 103,
    "lookup_dcookie": 212, "vhangup": 153,
    "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65,
    "semctl": 66, "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71,
    "mq_open": 240, "mq_unlink": 241, "mq_timedsend": 242, "mq_timedreceive": 243,
    "mq_notify": 244, "mq_getsetattr": 245,
}
SECCOMP_CLONE, SECCOMP_CLONE3, SECCOMP_SOCKET, SECCOMP_SOCKETPAIR = 56, 435, 41, 53
CLONE_NAMESPACE_FLAGS = 0x7E020000   # NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET
AF_UNIX = 1


def _seccomp_instructions() -> list[tuple[int, int, int, int]]:
    """The filter as classic BPF (code, jt, jf, k) over struct seccomp_data {nr, arch, ip,
    args[6]}: wrong arch -> kill; x32 numbers, denied calls, clone with namespace flags,
    socket(AF_UNIX), socketpair(SOCK_DGRAM) -> EPERM; clone3 -> ENOSYS (libc then uses clone);
    everything else allowed.
    The syscall number is found by binary search (about 12 instructions for an allowed call):
    the kernel emulates the filter once per syscall number when it is loaded, for each test."""
    LD, JEQ, JGE, JSET, RET, AND = 0x20, 0x15, 0x35, 0x45, 0x06, 0x54
    ALLOW, KILL, ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
    EPERM, ENOSYS = 1, 38
    ARCH_X86_64, NR, ARCH, ARG0, ARG1 = 0xC000003E, 0, 4, 16, 24
    SOCK_DGRAM, SOCK_TYPE_MASK = 2, 0xF
    targets = {n: "eperm" for n in SECCOMP_DENY_X86_64.values()}
    targets.update({SECCOMP_CLONE3: "enosys", SECCOMP_CLONE: "clone", SECCOMP_SOCKET: "socket",
                    SECCOMP_SOCKETPAIR: "socketpair"})

    def search(items):   # sorted [(nr, label)] -> instructions; every path ends in a return
        if len(items) <= 4:
            return [(JEQ, nr, label) for nr, label in items] + [(RET, 0, 0, ALLOW)]
        mid = len(items) // 2
        left, right = search(items[:mid]), search(items[mid:])
        return [(JGE, len(left), 0, items[mid][0])] + left + right   # >= pivot: skip left

    prog: list = [(LD, 0, 0, ARCH), (JEQ, 1, 0, ARCH_X86_64), (RET, 0, 0, KILL), (LD, 0, 0, NR),
                  (JGE, 0x40000000, "eperm")]
    prog += search(sorted(targets.items()))
    labels = {"clone": len(prog)}
    prog += [(LD, 0, 0, ARG0), (JSET, CLONE_NAMESPACE_FLAGS, "eperm"), (RET, 0, 0, ALLOW)]
    labels["socket"] = len(prog)
    prog += [(LD, 0, 0, ARG0), (JEQ, AF_UNIX, "eperm"), (RET, 0, 0, ALLOW)]
    labels["socketpair"] = len(prog)   # a datagram pair could sendto() a host socket's path
    prog += [(LD, 0, 0, ARG1), (AND, 0, 0, SOCK_TYPE_MASK), (JEQ, SOCK_DGRAM, "eperm"),
             (RET, 0, 0, ALLOW)]
    labels["eperm"] = len(prog)
    prog += [(RET, 0, 0, ERRNO | EPERM)]
    labels["enosys"] = len(prog)
    prog += [(RET, 0, 0, ERRNO | ENOSYS)]
    out = []
    for i, ins in enumerate(prog):
        if len(ins) == 3:   # a conditional jump to a label when true, else fall through
            code, k, label = ins
            ins = (code, labels[label] - i - 1, 0, k)
        assert 0 <= ins[1] < 256 and 0 <= ins[2] < 256
        out.append(ins)
    return out


def _seccomp_program():
    """A ctypes struct sock_fprog for PR_SET_SECCOMP, or None where the filter does not apply."""
    import ctypes
    import platform
    if platform.machine() != "x86_64" or sys.maxsize < 2 ** 32:
        return None

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    instructions = _seccomp_instructions()
    array = (SockFilter * len(instructions))(*[SockFilter(*i) for i in instructions])
    prog = SockFprog(len(instructions), array)
    prog._keep = array   # the array must live as long as the program
    return prog


def _load_seccomp(libc) -> bool:
    import ctypes
    return (libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
            and (_SECCOMP is None or libc.prctl(PR_SET_SECCOMP, 2, ctypes.byref(_SECCOMP)) == 0))


def _seccomp_works(libc) -> bool:
    """Load the filter in a throw-away child and check that it denies unshare."""
    pid = os.fork()
    if pid == 0:
        ok = _load_seccomp(libc) and libc.unshare(0x10000000) == -1   # CLONE_NEWUSER
        _REAL_EXIT(0 if ok else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


# --- filesystem ---------------------------------------------------------------------------------
HIDDEN_DIRS = ("/root", "/home", "/work", "/workspace", "/srv", "/data")
COVERED_DIRS = ("/tmp", "/var/tmp", "/run/lock", "/dev/shm") + HIDDEN_DIRS


def _private_filesystem(libc, new_proc: bool) -> bool:
    """In our mount namespace: every mount read-only, nosuid, nodev (except /dev's devices);
    /proc of our pid namespace; empty tmpfs over COVERED_DIRS with the Python installation
    bound back read-only."""

    def mount(source, target, fstype, flags, data=None) -> bool:
        args = [None if s is None else s.encode() for s in (source, target, fstype)]
        return libc.mount(*args, flags, None if data is None else data.encode()) == 0

    if not mount(None, "/", None, MS_REC | MS_PRIVATE):
        return False   # without this, our mounts would leak into the host
    if new_proc and not mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC):
        return False
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        target = fields[4].replace("\\040", " ")
        options = fields[5].split(",")
        if target.startswith(("/proc", "/sys")):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID
        flags |= MS_NOEXEC if "noexec" in options else 0
        flags |= 0 if target.startswith("/dev") else MS_NODEV
        mount(None, target, None, flags)
    needed = _python_paths()
    covers = _covers(needed)
    # Handles first: each needed path stays reachable after its ancestor is covered.
    handles = {p: os.open(p, os.O_PATH) for keep in covers.values() for p in keep}
    ok = True
    for cover, keep in covers.items():
        if not mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755"):
            ok = ok and cover != "/tmp"
            continue
        for path in keep:
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{handles[path]}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        if cover == "/tmp":
            os.makedirs(WORKDIR, exist_ok=True)
        mount(None, cover, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for handle in handles.values():
        os.close(handle)
    return ok and "/tmp" in covers and os.path.isdir(WORKDIR)


def _outermost(paths) -> list[str]:
    paths = set(paths)
    return sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths))


def _python_paths() -> list[str]:
    """The interpreter's directories, as written (a venv under /tmp is reached by that path)
    and resolved (its symlinks point into the base installation)."""
    literal = {os.path.abspath(p) for p in [sys.prefix, sys.base_prefix, sys.exec_prefix,
                                            os.path.dirname(sys.executable), *sys.path]
               if p and os.path.isdir(p)}
    return _outermost(literal | {os.path.realpath(p) for p in literal})


def _covers(needed: list[str]) -> dict[str, list[str]]:
    """{directory to cover with an empty tmpfs: needed paths under it to bind back}."""
    covers = {d for d in COVERED_DIRS if os.path.isdir(d) and not os.path.islink(d)}
    for path in needed:   # a 0700 ancestor would keep the test uid out of the interpreter
        parts = path.split("/")
        for i in range(2, len(parts)):
            ancestor = "/".join(parts[:i])
            if not os.stat(ancestor).st_mode & 0o001:
                covers.add(ancestor)
                break
    covers = {c for c in _outermost(covers)
              if not any(n == c or c.startswith(n + "/") for n in needed)}
    return {c: [n for n in needed if n.startswith(c + "/")] for c in sorted(covers)}


def _remove_tree(path: str):
    """Remove a directory tree whatever the program did to it (depth, permissions)."""
    import shutil
    try:
        shutil.rmtree(path)
    except BaseException:   # RecursionError on deep trees, EACCES on chmod 0 directories
        subprocess.run(["chmod", "-R", "u+rwx", path], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["rm", "-rf", path], stderr=subprocess.DEVNULL, check=False)


# --- jobs and tests -----------------------------------------------------------------------------

def _run_job(job: dict, info: dict) -> dict:
    try:
        compiled = _compile_quietly(job["code"])
    except Exception as e:   # the parent compiled it; only a resource failure gets here
        return {"tests": [], "error": f"the worker could not compile the code: {e}"[:500]}
    if _CGROUP is not None:
        _CGROUP.set_memory_limit(job["memory_mb"] << 20)
    tests = []
    for i, test_input in enumerate(job["inputs"]):
        raw = _run_one_test(job, compiled, test_input, job["output_caps"][i], info)
        tests.append(raw)
        if raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU or (
                raw["cpu"] > job["timeout"]):
            break
    return {"tests": tests}


def _run_one_test(job: dict, compiled, test_input, output_cap: int, info: dict) -> dict:
    uid = info["uid"]
    if info["mount_namespace"]:   # a fresh tmpfs (see _test_tmpfs)
        workdir = WORKDIR
        _test_tmpfs(WORKDIR, f"size={TMPFS_SIZE},nr_inodes=16384,mode=0700,uid={uid},gid={uid}")
        _test_tmpfs(SHMDIR, f"size={SHM_SIZE},nr_inodes=1024,mode=1777")
    else:
        import tempfile
        workdir = tempfile.mkdtemp(dir=info["workdir_root"])
        if uid is not None:
            os.chown(workdir, uid, uid)
    stdin_fd = os.memfd_create("stdin")
    if job["fn_name"] is None:
        _write_all(stdin_fd, test_input.encode())
        os.lseek(stdin_fd, 0, os.SEEK_SET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    msg_r, msg_w = os.pipe()
    cg = _CGROUP
    cpu0, oom0, tasks0 = (cg.cpu(), cg.ooms(), cg.tasks()) if cg else (0.0, 0, 0)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(job, compiled, test_input, workdir, uid, (stdin_fd, out_w, err_w, msg_w))
        finally:
            _REAL_EXIT(111)
    for fd in (stdin_fd, out_w, err_w, msg_w):
        os.close(fd)
    raw = _watch(pid, uid, tasks0, start, job, output_cap, out_r, err_r, msg_r, cpu0)
    if cg:
        raw["cpu"] = round(cg.cpu() - cpu0, 4)   # the whole tree, now that it is gone
        raw["oom"] = cg.ooms() > oom0
    if info["mount_namespace"]:
        for path in (WORKDIR, SHMDIR):
            if not _untouched(path):   # one unmount removes whatever tree the test left
                _LIBC.umount2(path.encode(), MNT_DETACH)
                del _TMPFS[path]
    else:
        _remove_tree(workdir)
    return raw


_TMPFS: dict = {}   # path -> what os.stat said right after mounting it


def _test_tmpfs(path: str, options: str):
    """Mount a tmpfs on path unless the one there is untouched since it was mounted (most
    programs write no file: unmounting costs an expedited RCU grace period each time)."""
    if path in _TMPFS:
        return
    MS_NOATIME = 1024   # atime could carry a bit from one test to the next
    if _LIBC.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOATIME,
                   options.encode()) != 0:
        raise OSError(f"cannot mount a tmpfs on {path}")
    _TMPFS[path] = _stat_key(path)


def _stat_key(path: str) -> tuple:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid, st.st_nlink,
            st.st_mtime_ns, st.st_ctime_ns, st.st_atime_ns)


def _untouched(path: str) -> bool:
    """Empty, no extended attribute, and the same inode metadata as when mounted: any entry
    made, chmod, utime or xattr changes ctime/mtime or shows up here (checked after the test's
    processes are dead)."""
    try:
        return (_stat_key(path) == _TMPFS[path] and not os.listdir(path)
                and not os.listxattr(path))
    except OSError:
        return False


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


def _run_delay(pid: int) -> float:
    """Seconds the process spent runnable but waiting for a CPU (/proc/PID/schedstat)."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _watch(pid, uid, tasks0, start, job, output_cap, out_r, err_r, msg_r, cpu0) -> dict:
    """Collect a child's stdout/stderr/harness message until it exits, floods, uses its CPU
    time or reaches the wall cap. CPU is polled only when the tree could have used it all:
    the first look is at timeout / cores, then at (what is left) / cores."""
    timeout = job["timeout"]
    cores = max(1, len(os.sched_getaffinity(0)))
    cpu_used = ((lambda: _CGROUP.cpu() - cpu0) if _CGROUP else (lambda: _process_cpu(pid)))
    pidfd = os.pidfd_open(pid)
    sel = selectors.DefaultSelector()
    buffers = {out_r: bytearray(), err_r: bytearray(), msg_r: bytearray()}
    for fd in buffers:
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
        buf = buffers[fd]
        buf += chunk
        if fd == err_r and len(buf) > 4 * STDERR_TAIL:
            del buf[:-STDERR_TAIL]
        return True

    cap = _wall_cap(timeout)
    exited, hard_deadline = False, start + HARD_CAP_FACTOR * cap
    while not exited:
        now = time.monotonic()
        if now >= wall_deadline:   # the cap counts time not spent waiting for a CPU
            left = cap - (now - start - _run_delay(pid))
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
        for key, _ in sel.select(min(wall_deadline, next_check) - now):
            if key.fd == pidfd:
                exited = True
            else:
                drain(key.fd)
        if len(buffers[out_r]) > output_cap or len(buffers[msg_r]) > 2 * output_cap:
            kind = "output_limit"
            break
    elapsed = time.monotonic() - start
    if not exited:
        os.kill(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    os.close(pidfd)
    _kill_leftovers(uid, tasks0)
    if kind == "exited":   # every writer is dead now: read the rest up to EOF
        drain_until = time.monotonic() + 1.0
        for fd in list(buffers):
            while (fd in sel.get_map() and drain(fd) and len(buffers[fd]) <= 2 * output_cap
                   and time.monotonic() < drain_until):
                pass
    for fd in buffers:
        os.close(fd)
    sel.close()
    return dict(kind=kind, time=round(elapsed, 4), cpu=round(usage.ru_utime + usage.ru_stime, 4),
                oom=False, exit_code=os.waitstatus_to_exitcode(status),
                signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                stdout=bytes(buffers[out_r][:output_cap]),
                stderr=bytes(buffers[err_r][-STDERR_TAIL:]),
                message=bytes(buffers[msg_r]) if kind == "exited" else b"")


def _kill_leftovers(uid: int | None, tasks0: int = 0, limit_s: float = 10.0):
    """Kill and reap every process the test started. We are the namespace's pid 1 (or a
    subreaper), so once we have no child left, nothing the test started is alive. With a
    cgroup, a task count back at its idle value says so without a scan."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        if _CGROUP is not None and _CGROUP.tasks() <= tasks0:
            return
        if uid is not None:
            killer = os.fork()
            if killer == 0:
                try:
                    os.setgroups([])
                    os.setgid(uid)
                    os.setuid(uid)
                    os.kill(-1, signal.SIGKILL)   # everything this uid owns, except the killer
                finally:
                    _REAL_EXIT(0)
            os.waitpid(killer, 0)
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _child(job, compiled, test_input, workdir, uid, fds):
    """In the forked child: lock down, run the program, end as the interpreter ends, report
    observations on HARNESS_FD."""
    import atexit
    import builtins
    import io
    import resource
    import types
    stdin_fd, out_w, err_w, msg_w = fds
    os.setsid()
    os.dup2(stdin_fd, 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(msg_w, HARNESS_FD)
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]   # no fd of ours is at or above it
    os.closerange(HARNESS_FD + 1, top if 0 < top < (1 << 20) else 1 << 20)   # close_range(2)
    os.chdir(workdir)
    cpu = math.ceil(job["timeout"]) + 1   # a backstop: the worker judges the tree's CPU time
    limits = [(resource.RLIMIT_AS, job["memory_mb"] << 20), (resource.RLIMIT_CPU, cpu),
              (resource.RLIMIT_NOFILE, NOFILE_LIMIT), (resource.RLIMIT_FSIZE, FSIZE_LIMIT),
              (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, _nproc_limit(uid))]
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    if uid is not None:
        try:
            _write_file("/proc/self/oom_score_adj", "1000")   # the test first, not the worker
        except OSError:
            pass
        if _SECCOMP is None:
            _LIBC.unshare(CLONE_NEWIPC)   # no filter to deny IPC: a fresh namespace per test
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)   # after setuid, which clears it
    if not _load_seccomp(_LIBC):
        _REAL_EXIT(112)
    os.environ.clear()
    os.environ.update(_minimal_env(workdir))
    import tempfile
    tempfile.tempdir = None
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
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
        try:   # the program's frames only, not the harness frame
            import traceback
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
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


def _nproc_limit(uid: int | None) -> int:
    if uid is not None:
        return NPROC_LIMIT    # this uid is ours alone
    me = os.getuid()          # shared with the user's other processes: leave them room
    count = sum(1 for p in os.listdir("/proc") if p.isdigit() and _owner(p) == me)
    return count + NPROC_LIMIT


def _owner(pid: str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


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
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
    else:
        sys.exit(main())
