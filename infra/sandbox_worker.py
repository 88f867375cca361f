"""Inside a worker: the fork server, the job process, and the watch over each test.

Each worker is a fork server: per job it forks a job process, which forks a child per test, so a
test costs a fork, not a Python start-up. The fork server itself never reads a job nor sees a
result (the job process does, and exits after replying), so the memory every job is forked from
holds nothing of an earlier job: no program can find a sibling sample's answer in it, not even
in freed buffers. The job process compiles the code once, before forking the tests.
Cost per test (measured with perf on a 2-core VM): about 3 ms of CPU against about 10 ms for a
fresh interpreter. Most of it is the kernel's copy-on-write work for the fork: copying the
worker's page tables and ~700 page faults per test. The isolation adds no fork or exec per test;
the job process adds one fork per job (about 2.5 ms of CPU).

Time: a test is a timeout when its process tree used more than `timeout` seconds of CPU (not
counting the job process's own work for it: forking it, draining its pipes), or when it ran
longer than a wall cap of WALL_FACTOR * timeout + WALL_SLACK seconds (a sleeping or blocked
program). The cap does not count the time the threads of the test's main process spent runnable
but waiting for a CPU (their schedstat run delays, summed: the work may be in a
threading.Thread while the main thread sits in join()), up to HARD_CAP_FACTOR times the cap.
Neither CPU time nor that wall time depends on how loaded the machine is.
Output: stdout past its cap is kept as the line rule reads it (sandbox_rules.CompactText);
output_limit when it is over the cap even so, or after RAW_OUTPUT_FACTOR times the cap.
"""

from __future__ import annotations

import json
import os
import pickle
import selectors
import signal
import time

from infra import isolation
from infra.sandbox_child import PRELUDE, REAL_EXIT, run_child, start_checker
from infra.sandbox_coverage import COVERAGE_TIME_FACTOR, covered_lines
from infra.sandbox_pool import GO_ON, HARD_CAP_FACTOR, wall_cap
from infra.sandbox_prepare import compile_quietly, leetcode_prelude
from infra.sandbox_rules import CompactText
from infra.sandbox_wire import STDERR_TAIL, read_frame, write_frame

RAW_OUTPUT_FACTOR = 16      # ... past the cap it is compacted (CompactText), up to 16x raw
PRELOADED = ("math", "collections", "itertools", "functools", "heapq", "bisect", "re", "string",
             "random", "copy", "operator", "typing", "fractions", "decimal", "statistics",
             "datetime", "json", "io", "traceback", "array", "queue", "threading", "dataclasses",
             "enum", "tempfile", "atexit")


def worker_main():
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
    PRELUDE.update(leetcode_prelude())
    import gc
    gc.freeze()   # children never scan (and so never copy) the worker's objects
    write_frame(reply_fd, json.dumps(info).encode())
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
            if (payload := read_frame(cmd_fd)) is not None:
                report = _run_job(pickle.loads(payload), info, cmd_fd, reply_fd)
                write_frame(reply_fd, pickle.dumps(report, protocol=5))
                status = JOB_SERVED
        finally:
            REAL_EXIT(status)
    _, status = os.waitpid(pid, 0)
    isolation.kill_leftovers(info["uid"], tasks0)   # what outlived the job process
    isolation.end_job(info)
    return os.waitstatus_to_exitcode(status) == JOB_SERVED


# --- jobs and tests -----------------------------------------------------------------------------

def _run_job(job: dict, info: dict, cmd_fd: int, reply_fd: int) -> dict:
    """Each test in a forked child (_run_one_test); a check job's check code is the next frame
    on cmd_fd, read by _run_one_test at its moment (and here, unused, if nothing runs). With
    coverage, each test's raw observations also hold "coverage": the lines a second, traced run
    ran, or None (_traced_lines). stop_at_first_failure: each test but the last is sent as it
    ends ({"asks": raw} on reply_fd) and the next runs only when the parent says GO_ON on
    cmd_fd (sandbox_pool.Worker.run); the reply then holds the tests not sent."""
    check_code = []

    def read_check() -> str:   # read once; a traced run's checker gets it again
        if not check_code:
            check_code.append((read_frame(cmd_fd) or b"").decode("utf-8", "replace"))
        return check_code[0]
    try:
        compiled = compile_quietly(job["code"])
        preamble = (compile(job["preamble"], "<preamble>", "exec", dont_inherit=True)
                    if job["preamble"] else None)
    except Exception as e:   # the parent compiled it; only a resource failure gets here
        if job["check"]:
            read_check()   # so that the next job process does not take it for its request
        return {"tests": [], "error": f"the worker could not compile the code: {e}"[:500]}
    cg = isolation.cgroup()
    if cg is not None:
        cg.set_memory_limit(job["memory_mb"] << 20)
    tests, last = [], len(job["inputs"]) - 1
    for i, test_input in enumerate(job["inputs"]):
        raw = _run_one_test(job, compiled, test_input, job["output_caps"][i], info, read_check,
                            preamble)
        if job["coverage"]:
            raw["coverage"] = _traced_lines(job, compiled, test_input, job["output_caps"][i],
                                            info, read_check, preamble, raw)
        del raw["pid"]
        timed_out = (raw["kind"] == "timeout" or raw["signal"] == signal.SIGXCPU
                     or raw["cpu"] > job["timeout"])
        stop = timed_out and job["stop_after_timeout"]   # the rest count as timeouts
        if job["stop_at_first_failure"] and i < last and not stop:
            write_frame(reply_fd, pickle.dumps({"asks": raw}, protocol=5))
            if read_frame(cmd_fd) != GO_ON:
                break
            continue
        tests.append(raw)
        if stop:
            break
    return {"tests": tests}


def _traced_lines(job: dict, compiled, test_input, output_cap: int, info: dict, read_check,
                  preamble, verdict_raw: dict) -> list[int] | None:
    """The lines of the program a second run of the test, under the line tracer and with
    COVERAGE_TIME_FACTOR times the limit, ran (sandbox_coverage); None (unknown) when the verdict
    run did not end by itself within its limits, or when the traced run did not end as it did
    (stdout, exit status, reported observations, the checker's exit status). A check test's
    traced program process is forked after this process read the check code: that run decides
    no verdict (the verdict run's program process never held the check code)."""
    limits_hit = (verdict_raw["kind"] != "exited" or verdict_raw["oom"]
                  or verdict_raw["signal"] == signal.SIGXCPU or verdict_raw["cpu"] > job["timeout"])
    if limits_hit:
        return None
    nonce = os.urandom(16).hex()
    traced_job = dict(job, trace=nonce, timeout=job["timeout"] * COVERAGE_TIME_FACTOR)
    raw = _run_one_test(traced_job, compiled, test_input, output_cap, info, read_check, preamble)
    same = (not raw["oom"] and raw["cpu"] <= traced_job["timeout"]
            and all(raw[k] == verdict_raw[k]
                    for k in ("kind", "exit_code", "signal", "stdout", "check_status")))
    if not same:
        return None
    return covered_lines(raw["message"], nonce, raw["pid"], verdict_raw["message"])


def _run_one_test(job: dict, compiled, test_input, output_cap: int, info: dict,
                  read_check=None, preamble=None) -> dict:
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
            run_child(job, compiled, test_input, workdir, uid, (stdin_fd, out_w, err_w, msg_w),
                      (calls_r, replies_w) if job["check"] else None, preamble)
        finally:
            REAL_EXIT(111)
    for fd in (stdin_fd, out_w, msg_w, calls_r, replies_w):
        if fd is not None:
            os.close(fd)
    checker = None
    if job["check"]:
        checker = start_checker(read_check(), job, workdir, uid, (calls_w, replies_r, err_w),
                                 output_cap)
    os.close(err_w)
    cpu_used = tree_cpu or (lambda: _process_cpu(pid) + (_process_cpu(checker) if checker else 0))
    raw = _watch(pid, uid, tasks0, start, job, output_cap, (out_r, err_r, msg_r), cpu_used,
                 checker)
    if cg:
        raw["cpu"] = round(tree_cpu(), 4)   # the whole tree, now that it is gone
        raw["oom"] = cg.ooms() > oom0
    isolation.clear_workdir(info, workdir)
    raw["pid"] = pid
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
    kind, wall_deadline, next_check = "exited", start + wall_cap(timeout), start + timeout / cores

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

    cap, delays, running = wall_cap(timeout), {}, set(pidfds)
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
    as CompactText, so an output that is long only in what the line rule ignores still fits
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
            self.compact = CompactText()
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

