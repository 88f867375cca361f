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
must be bound by the program itself. Standard-I/O programs get no prelude: they are whole
scripts, judged as a contest judge runs them.
Verdict per test: pass | wrong_answer | runtime_error | timeout | memory_limit | output_limit.
Verdict per program: compile_error if the code does not compile (no test runs), else pass when
every test passes, else the verdict of the first failing test. pass_rate = passed / total.

Comparison rules (outputs_match, values_match; the parent process applies them, never the child):
  standard I/O: split into lines; trailing whitespace of each line and trailing blank lines are
    ignored; the line counts must agree; each line is split on whitespace and compared token by
    token, in order. A token is equal if the strings are equal, or if the expected token is a
    decimal (has a '.' or an exponent) and the actual token is a number with
    |a - e| <= FLOAT_TOL * max(1, |e|). Integers compare as strings ("1" != "1.0").
    Unlike the original APPS checker: no reordering, no token sets, no rounding to 3 decimals.
  call-based: the child turns the return value into plain JSON data (tuples -> lists); only exact
    builtin types are accepted, so no object the program builds (an __eq__ that is always True, an
    int subclass) reaches the comparison. Then deep equality with tuples == lists, True == 1 (as in
    Python), floats within FLOAT_TOL as above, sets as sorted lists.

Architecture (why it is fast)
------------------------------
run_batch starts one worker per core: a fresh `python -I sandbox.py --worker` with an empty
environment, a few common modules pre-imported. Each worker is a fork server: per test it forks a
child, so a test costs a fork, not a Python start-up. The parent sends a worker only the code and
the test INPUTS; the expected outputs stay in the parent, which compares what comes back. Workers
and threads live for one run_batch call and are gone when it returns.
Cost per test (measured with perf on a 2-core VM): about 3 ms of CPU against about 10 ms for a
fresh interpreter. Most of it is the kernel's copy-on-write work for the fork: copying the
worker's page tables and ~750 page faults per test (~500 in the child, whose Python touches
object refcounts and type caches; ~250 in the worker, whose own writes fault again after every
fork). Python-level harness work is small: `resource` is preloaded, fds are closed with one
close_range(2), and LD_BIND_NOW spares each child the dynamic linker's GOT writes.

Isolation (as root; see isolation_report())
-------------------------------------------
worker: own network namespace (no network, not even loopback), own IPC namespace, own mount
  namespace where every filesystem is remounted read-only and an empty tmpfs covers /tmp,
  /var/tmp, /dev/shm and /run/lock (so files left in the host's /tmp, e.g. expected outputs,
  are invisible); PR_SET_CHILD_SUBREAPER so every orphan of a test is re-parented to the worker.
child (one per test): own session; rlimits AS (memory_mb), CPU, NPROC, NOFILE, FSIZE, no core;
  uid/gid = UID_BASE + worker pid (a uid no other live worker on the machine uses); a fresh
  working directory, removed afterwards; empty environment; stdin is a memfd holding the input
  (EOF after it); stdout/stderr are pipes read by the worker, stdout cut at the output limit.
cleanup: after each test the worker kills everything the uid owns (kill(-1, SIGKILL) from a
  helper running as that uid: one pass through the kernel's task list, so a fork bomb cannot
  outrun it) and reaps until it has no child left. Since it is a subreaper, "no child left"
  means no process the test started is alive, including ones that called setsid() or forked
  twice.
Without root (a laptop) the sandbox degrades: rlimits, timeouts, session kill and the subreaper
  tree kill still apply; no uid drop, no network/mount namespace; RLIMIT_NPROC is set to the
  user's current process count + NPROC_LIMIT. A program can then read your files, use the
  network and signal your processes. Use root (or a container) for training.

Tamper-resistance and residual risk
-----------------------------------
The child reports observations only (return value as data, exception type, covered lines) on a
pipe at fd 3, never a verdict. stdout is never parsed for markers. The program runs in the same
process as this harness code, so it CAN find fd 3 and write any message; all it can claim there
is "my function returned X", which is what returning X does anyway. It cannot see expected
outputs: they are neither in its memory nor on its filesystem. It sees the inputs of the other
tests of its job (they are in the worker's memory) and, for outputs over ~0.5 MB, an upper bound
of the expected length (the output cap).

Simplifications (documented choices)
------------------------------------
* After the first test that times out, the program's remaining tests are not run and count as
  timeout: a program that loops forever costs one timeout, not one per test. So a run is bounded
  by sum(test times) <= len(tests) * timeout, and in practice by about one timeout.
* A job with zero tests is an error (ValueError): "pass with 0 tests" would be a free reward.
* Coverage (sys.settrace, lines of the code object "<solution>" only) is reported by the child
  when it finishes; a test that times out, is killed, or calls os._exit contributes no lines.
* Huge ints (> 4300 digits) in a call-based return value are not serialisable: wrong_answer.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import re
import select
import selectors
import signal
import subprocess
import sys
import threading
import time
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
TMPFS_SIZE = "64m"          # all files a worker's programs may write at once
SOLUTION_FILENAME = "<solution>"
HARNESS_FD = 3
PRELOADED = ("math", "collections", "itertools", "functools", "heapq", "bisect", "re", "string",
             "random", "copy", "operator", "typing", "fractions", "decimal", "statistics",
             "datetime", "json", "io", "traceback", "array", "queue", "threading", "dataclasses",
             "enum", "tempfile")
# LeetCode-style call-based code is a fragment that the judge completes with its own imports
# (LiveCodeBench's harness: `from X import *` for these, then `import X`). Put the same names in
# the program's globals, not as source text, so line numbers and coverage stay exact.
PRELUDE_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                "random", "statistics", "itertools", "functools", "operator", "typing")
PRELUDE_MODULES = PRELUDE_STAR + ("io", "sys", "json", "array", "fractions", "decimal")


@dataclass
class TestResult:
    status: str
    time: float
    output: str = ""        # actual output, truncated (call-based: repr of the returned value)
    stderr: str = ""        # tail
    executed_lines: set[int] = field(default_factory=set)


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
# Comparison rules (pure functions, run in the parent)
# ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?")


def _close(expected: float, actual: float) -> bool:
    return abs(actual - expected) <= FLOAT_TOL * max(1.0, abs(expected))


def _tokens_match(expected: str, actual: str) -> bool:
    if expected == actual:
        return True
    if _DECIMAL.fullmatch(expected) and _NUMBER.fullmatch(actual):
        return _close(float(expected), float(actual))
    return False


def _lines(text: str) -> list[str]:
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
    exp_lines, act_lines = _lines(expected), _lines(actual)
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
    """Call-based rule on plain data: tuples == lists, floats within FLOAT_TOL, True == 1 as in
    Python (APPS+ ground truths rely on it: 2 canonical solutions return False for 0).

    >>> values_match([1, (2, 3.0)], [1, [2, 3.0000000001]]), values_match(True, 1)
    (True, True)
    """
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if isinstance(expected, int) and isinstance(actual, int):
            return expected == actual
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
                if worker is None or not worker.alive():
                    worker = _Worker()
                results[i] = worker.judge(jobs[i])
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
    worker = _Worker()
    try:
        return dict(worker.info)
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
    return job


def _output_cap(job: dict, test: dict) -> int:
    expected = test["output"]
    if job["fn_name"] is not None:
        expected = json.dumps(expected, default=str)
    return max(OUTPUT_LIMIT_MIN, 2 * len(expected) + (64 << 10))


class _Worker:
    """One fork-server process (python -I sandbox.py --worker) and its framed pipe protocol."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, "-I", os.path.abspath(__file__), "--worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            # LD_BIND_NOW: the worker resolves every libc symbol once, so its children do not
            # each write (copy-on-write fault) the GOT pages again on first calls.
            env=_minimal_env("/") | {"LD_BIND_NOW": "1"},
            close_fds=True, start_new_session=True, cwd="/")
        hello = self._read(time.monotonic() + 60)
        if hello is None:
            self.close()
            raise RuntimeError("sandbox: the worker process failed to start (see stderr above).")
        self.info = json.loads(hello)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def judge(self, job: dict) -> Result:
        """Send code + inputs (never outputs), wait for raw observations, judge them here."""
        request = dict(code=job["code"], inputs=[t["input"] for t in job["tests"]],
                       fn_name=job["fn_name"], timeout=float(job["timeout"]),
                       memory_mb=int(job["memory_mb"]), coverage=bool(job["coverage"]),
                       output_caps=[_output_cap(job, t) for t in job["tests"]])
        start = time.monotonic()
        deadline = start + len(job["tests"]) * (job["timeout"] + 2.0) + 30.0
        reply = None
        try:
            _write_frame(self.proc.stdin.fileno(), pickle.dumps(request))
            reply = self._read(deadline)
        except (BrokenPipeError, OSError):
            pass
        if reply is None:  # died (only a bug or, without root, the program killing it) or hung
            self.close()
            return Result(RUNTIME_ERROR, 0, len(job["tests"]), [], set(),
                          time.monotonic() - start, "the sandbox worker died or hung on this job")
        return _judge_job(job, json.loads(reply), time.monotonic() - start)

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
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        if not clean and os.geteuid() == 0:   # killed mid-test: its uid's processes live on
            _kill_uid_from_parent(UID_BASE + self.proc.pid)


def _kill_uid_from_parent(uid: int, limit_s: float = 5.0):
    """Kill every live process of `uid` after its worker died mid-test (quietly, never raises).

    First `kill -9 -1` as `uid` (procps kill: one atomic pass, so a fork bomb cannot outrun it;
    setuid happens in C, the trainer is never forked). Then, as a check and a fallback where that
    binary is missing, signal what is left from here through pidfds (a pid reused in between is
    not touched). Zombies are already dead: they only wait for their parent to reap them.
    """
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


def _judge_job(job: dict, report: dict, wall_time: float) -> Result:
    tests = job["tests"]
    if report.get("compile_error") is not None:
        return Result(COMPILE_ERROR, 0, len(tests), [], set(), wall_time,
                      report["compile_error"])
    judged = [_judge_test(raw, t["output"], job["fn_name"])
              for raw, t in zip(report["tests"], tests)]
    for _ in range(len(judged), len(tests)):   # not run: an earlier test timed out
        judged.append(TestResult(TIMEOUT, 0.0, "", "not run: an earlier test timed out"))
    failed = [t.status for t in judged if t.status != PASS]
    lines = set().union(*(t.executed_lines for t in judged))
    return Result(failed[0] if failed else PASS, len(judged) - len(failed), len(tests), judged,
                  lines, wall_time)


def _judge_test(raw: dict, expected, fn_name: str | None) -> TestResult:
    """Verdict of one test from the worker's raw observations (the only place verdicts are made)."""
    message = raw.get("message") or {}
    lines = {int(n) for n in message.get("lines", [])}
    stdout, stderr = raw["stdout"], raw["stderr"]
    shown = stdout[:SHOWN_OUTPUT]
    if fn_name is not None:
        shown = repr(message["result"])[:SHOWN_OUTPUT] if "result" in message else shown
    memory_hint = "MemoryError" in stderr or "Cannot allocate memory" in stderr
    if raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU:
        status = TIMEOUT
    elif raw["kind"] == "output_limit":
        status = OUTPUT_LIMIT
    elif message.get("exception") == "MemoryError" or (raw["exit_code"] != 0 and memory_hint):
        status = MEMORY_LIMIT
    elif raw["exit_code"] != 0:
        status = RUNTIME_ERROR
    elif fn_name is not None:
        if "result" in message:
            status = PASS if values_match(expected, message["result"]) else WRONG_ANSWER
        elif "result_error" in message:
            status, shown = WRONG_ANSWER, message["result_error"][:SHOWN_OUTPUT]
        else:   # exited (sys.exit, os._exit) before the function returned
            status = RUNTIME_ERROR
    else:
        status = PASS if outputs_match(expected, stdout) else WRONG_ANSWER
    return TestResult(status, raw["time"], shown, stderr[-STDERR_TAIL:], lines)


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

_LIBC = None   # the worker's handle on libc (prctl, mount, unshare), inherited by children


def _worker_main():
    global _LIBC
    import ctypes
    import resource    # noqa: F401  (the children's imports are then dictionary look-ups)
    import shutil      # noqa: F401
    import tempfile    # noqa: F401
    import types       # noqa: F401
    libc = _LIBC = ctypes.CDLL(None, use_errno=True)
    # The protocol moves off fds 0/1 so that nothing printed by accident corrupts it.
    cmd_fd, reply_fd = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    libc.prctl(1, signal.SIGKILL)        # PR_SET_PDEATHSIG: die with the parent
    info = _isolate_worker(libc)
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
            _write_frame(reply_fd, json.dumps(report).encode())
    finally:
        if info["workdir_root"] != "/tmp":
            import shutil
            shutil.rmtree(info["workdir_root"], ignore_errors=True)


_PRELUDE: dict = {}   # filled once per worker, shared copy-on-write by its children


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


def _isolate_worker(libc) -> dict:
    """Namespaces and subreaper for this worker; returns what it got (see module docstring)."""
    libc.prctl(36, 1)                    # PR_SET_CHILD_SUBREAPER: orphans of tests come to us
    info = dict(root=os.geteuid() == 0, uid=None, network_namespace=False,
                mount_namespace=False, workdir_root=None)
    if info["root"]:
        info["uid"] = UID_BASE + os.getpid()
        CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWIPC = 0x20000, 0x40000000, 0x8000000
        if libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) == 0:
            info["network_namespace"] = True
        if libc.unshare(CLONE_NEWNS) == 0 and _private_filesystem(libc):
            info["mount_namespace"] = True
            info["workdir_root"] = "/tmp"
    if info["workdir_root"] is None:
        import tempfile
        info["workdir_root"] = tempfile.mkdtemp(prefix="sandbox-")
    return info


def _private_filesystem(libc) -> bool:
    """In our mount namespace: everything read-only, empty tmpfs over the world-writable dirs."""
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
    MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

    def mount(source, target, fstype, flags, data=None) -> bool:
        enc = (lambda s: None if s is None else s.encode())
        return libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) == 0

    if not mount(None, "/", None, MS_REC | MS_PRIVATE):
        return False   # without this, our mounts would leak into the host
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split() for line in f]
    for fields in mounts:
        target = fields[4].replace("\\040", " ")
        options = fields[5].split(",")
        if "ro" in options or target.startswith(("/proc", "/sys", "/dev")):
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        flags |= sum(f for o, f in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV),
                                    ("noexec", MS_NOEXEC)) if o in options)
        mount(None, target, None, flags)
    ok = mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_SIZE},mode=0755")
    for path in ("/var/tmp", "/dev/shm", "/run/lock"):
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=64k,mode=0755")
    # Cover home and project directories with an empty tmpfs, then bind the Python installation
    # back in: the program sees the interpreter and its packages, not your files. This also
    # opens a Python that lives under a 0700 directory (e.g. /root/.pyenv) to the test uid.
    for hidden, keep in _hidden_dirs().items():
        handles = [os.open(p, os.O_PATH) for p in keep]   # reachable after `hidden` is covered
        if not mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755"):
            continue
        for path, handle in zip(keep, handles):
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
            os.close(handle)
        mount(None, hidden, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    return ok


HIDDEN_DIRS = ("/root", "/home", "/work", "/workspace", "/srv", "/data")


def _hidden_dirs() -> dict[str, list[str]]:
    """{directory to cover: Python paths under it to bind back}."""
    needed = {os.path.realpath(p) for p in
              [sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path] if p and os.path.isdir(p)}
    needed = sorted(p for p in needed
                    if not any(p.startswith(q + "/") for q in needed))   # outermost only
    blockers = {d for d in HIDDEN_DIRS if os.path.isdir(d) and not os.path.islink(d)}
    for path in needed:   # a 0700 ancestor would keep the test uid out of the interpreter
        parts = path.split("/")
        for i in range(2, len(parts)):
            ancestor = "/".join(parts[:i])
            if not os.stat(ancestor).st_mode & 0o001:
                blockers.add(ancestor)
                break
    blockers = {b for b in blockers if not any(b.startswith(c + "/") for c in blockers)}
    return {b: [p for p in needed if p.startswith(b + "/")]
            for b in sorted(blockers) if b not in needed}


def _run_job(job: dict, info: dict) -> dict:
    tests = []
    for i, test_input in enumerate(job["inputs"]):
        raw = _run_one_test(job, test_input, job["output_caps"][i], info)
        if raw.get("compile_error") is not None:
            return {"compile_error": raw["compile_error"], "tests": []}
        tests.append(raw)
        if raw["kind"] == "timeout":
            break
    return {"compile_error": None, "tests": tests}


def _run_one_test(job: dict, test_input, output_cap: int, info: dict) -> dict:
    import shutil
    import tempfile
    uid = info["uid"]
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
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(job, test_input, workdir, uid, info, (stdin_fd, out_w, err_w, msg_w))
        finally:
            os._exit(111)
    for fd in (stdin_fd, out_w, err_w, msg_w):
        os.close(fd)
    raw = _watch(pid, uid, start, job["timeout"], output_cap, out_r, err_r, msg_r)
    shutil.rmtree(workdir, ignore_errors=True)
    return raw


def _write_all(fd: int, data: bytes):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _watch(pid, uid, start, timeout, output_cap, out_r, err_r, msg_r) -> dict:
    """Collect a child's stdout/stderr/harness message until it exits, times out or floods."""
    pidfd = os.pidfd_open(pid)
    sel = selectors.DefaultSelector()
    buffers = {out_r: bytearray(), err_r: bytearray(), msg_r: bytearray()}
    for fd in buffers:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    sel.register(pidfd, selectors.EVENT_READ)
    kind, deadline = "exited", start + timeout

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

    exited = False
    while not exited:
        left = deadline - time.monotonic()
        if left <= 0:
            kind = "timeout"
            break
        for key, _ in sel.select(left):
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
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    _kill_leftovers(uid)
    if kind == "exited":   # every writer is dead now: read the rest up to EOF
        drain_until = time.monotonic() + 1.0
        for fd in list(buffers):
            while (fd in sel.get_map() and drain(fd) and len(buffers[fd]) <= 2 * output_cap
                   and time.monotonic() < drain_until):
                pass
    for fd in buffers:
        os.close(fd)
    sel.close()
    message = None
    if kind == "exited" and buffers[msg_r]:
        try:
            message = json.loads(bytes(buffers[msg_r]))
        except Exception:   # malformed, too deep, huge ints: the program wrote it; ignore it
            message = None
    if isinstance(message, dict) and "compile_error" in message:
        return {"compile_error": str(message["compile_error"])}
    if not isinstance(message, dict):
        message = None
    return dict(kind=kind, time=round(elapsed, 4),
                exit_code=os.waitstatus_to_exitcode(status),
                signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                stdout=bytes(buffers[out_r][:output_cap]).decode("utf-8", "replace"),
                stderr=bytes(buffers[err_r][-STDERR_TAIL:]).decode("utf-8", "replace"),
                message=message)


def _kill_leftovers(uid: int | None, limit_s: float = 10.0):
    """Kill and reap every process the test started. We are a subreaper, so once we have no
    child left, nothing the test started is alive."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
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
                    os._exit(0)
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


def _child(job, test_input, workdir, uid, info, fds):
    """In the forked child: lock down, run the program, report observations on HARNESS_FD."""
    import builtins
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
    cpu = math.ceil(job["timeout"]) + 1
    limits = [(resource.RLIMIT_AS, job["memory_mb"] << 20), (resource.RLIMIT_CPU, cpu),
              (resource.RLIMIT_NOFILE, NOFILE_LIMIT), (resource.RLIMIT_FSIZE, FSIZE_LIMIT),
              (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, _nproc_limit(uid))]
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _LIBC.prctl(1, signal.SIGKILL)   # after setuid, which clears it
    os.environ.clear()
    os.environ.update(_minimal_env(workdir))
    import tempfile
    tempfile.tempdir = None
    sys.stdin = sys.__stdin__ = open(0, "r", encoding="utf-8", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", encoding="utf-8", errors="backslashreplace",
                                       closefd=False, buffering=1)
    sys.argv = ["solution.py"]
    send = _make_sender(HARNESS_FD, json.dumps, os.write)
    try:
        compiled = compile(job["code"], SOLUTION_FILENAME, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as e:
        send({"compile_error": f"{type(e).__name__}: {e}"})
        os._exit(0)
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins
    if job["fn_name"] is not None:   # a LeetCode fragment; a stdio program is a whole script
        module.__dict__.update(_PRELUDE)
    sys.modules["__main__"] = module
    lines: set[int] = set()
    tracer = _make_tracer(lines, SOLUTION_FILENAME)
    message: dict = {}
    exit_code = 0
    try:
        if job["coverage"]:
            threading.settrace(tracer)
            sys.settrace(tracer)
        exec(compiled, module.__dict__)
        if job["fn_name"] is not None:
            if (job["fn_name"] not in compiled.co_names and job["fn_name"] in _PRELUDE
                    and module.__dict__.get(job["fn_name"]) is _PRELUDE[job["fn_name"]]):
                raise NameError(f"the program defines no function named {job['fn_name']!r} "
                                "(the prelude's one does not count)")
            value = _find_function(module.__dict__, job["fn_name"])(*test_input)
            sys.settrace(None)
            message.update(_to_plain_message(value))
    except SystemExit as e:
        exit_code = _exit_code(e)
    except BaseException as e:
        sys.settrace(None)
        message["exception"] = type(e).__name__
        exit_code = 1
        try:   # the program's frames only, not the harness frame
            import traceback
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        except BaseException:
            pass
    sys.settrace(None)
    for stream in (sys.stdout, sys.stderr, sys.__stdout__):
        try:
            stream.flush()
        except BaseException:
            exit_code = exit_code or 1
    message["lines"] = sorted(lines)
    send(message)
    os._exit(exit_code)


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


def _find_function(namespace: dict, fn_name: str):
    solution = namespace.get("Solution")
    if isinstance(solution, type) and hasattr(solution, fn_name):
        return getattr(solution(), fn_name)
    if callable(namespace.get(fn_name)):
        return namespace[fn_name]
    raise NameError(f"the program defines no function or Solution method named {fn_name!r}")


_PLAIN_SCALARS = (type(None), bool, int, float, str)


def _to_plain(value, depth: int = 0):
    """Exact builtin types only; raises TypeError for anything the program could have forged."""
    kind = type(value)
    if depth > 100:
        raise TypeError("nested deeper than 100 levels")
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
        return {"result_error": f"return value not comparable as data: {e}"}


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def _load_tests(path: str) -> tuple[list[dict], str | None]:
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and "inputs" in data:   # APPS input_output style
        tests = [{"input": i, "output": o} for i, o in zip(data["inputs"], data["outputs"])]
        return tests, data.get("fn_name")
    if isinstance(data, list):
        return data, None
    raise SystemExit(f"{path}: expected a JSON list of {{'input', 'output'}} objects or an "
                     "object with 'inputs' and 'outputs' lists.")


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description="Run a Python program on unit tests in the "
                                     "sandbox and print the verdict as JSON.")
    parser.add_argument("program", help="path of the Python program to judge")
    parser.add_argument("tests", help="JSON file: a list of {'input', 'output'} objects, or an "
                        "APPS-style object {'inputs': [...], 'outputs': [...], 'fn_name'?}")
    parser.add_argument("--fn-name", default=None, help="call-based tests: the function (or "
                        "Solution method) to call with each input list; default: standard I/O")
    parser.add_argument("--timeout", type=float, default=4.0, help="wall-clock seconds per test")
    parser.add_argument("--memory-mb", type=int, default=1024, help="address-space limit, MiB")
    parser.add_argument("--coverage", action="store_true", help="also report executed lines")
    args = parser.parse_args(argv)
    try:
        with open(args.program) as f:
            code = f.read()
        tests, fn_name = _load_tests(args.tests)
    except (OSError, ValueError) as e:
        raise SystemExit(f"cannot read the program or the tests: {e}")
    result = run_tests(code, tests, args.fn_name or fn_name, args.timeout, args.memory_mb,
                       args.coverage)
    out = dict(status=result.status, passed=result.passed, total=result.total,
               wall_time=round(result.wall_time, 3), error=result.error,
               executed_lines=sorted(result.executed_lines),
               tests=[dict(t.__dict__, executed_lines=sorted(t.executed_lines))
                      for t in result.tests])
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
    else:
        main()
