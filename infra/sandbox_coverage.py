"""Line coverage of a program, measured in a run of its own, and whether it is complete.

The verdict of a test comes from a run without a tracer. With coverage asked, the job process
runs the test a second time under a line tracer, with COVERAGE_TIME_FACTOR times the limit
(tracing makes Python code ~4x slower); that run decides nothing but the lines. Its lines are
trusted only when the traced run behaved as the verdict run did (same stdout, exit status and
reported result) and every process that ran the program reported its lines intact, as below;
otherwise coverage is unknown (None), never a partial set taken as complete.

In the traced process (and in each process it forks) the tracer counts what it sees, and at the
end the process reports its lines only with the checks that show none were lost:
  - the tracer is still this process's trace function (sys.settrace(None), a tracer of the
    program's, or an error raised inside the tracer, e.g. RecursionError at the recursion limit,
    all remove it) and nothing called sys.settrace / threading.settrace with another function;
  - every frame of the program that the tracer saw start has returned or is still on a stack
    (a frame whose tracer was removed, or whose f_trace was cleared, sends no return event);
  - no frame returned with its line events switched off (frame.f_trace_lines = False);
  - the set holds exactly the lines the tracer added (a line added from outside it, or removed,
    breaks the count);
  - every thread started through threading or _thread ran under the tracer from its first line
    and ended with it in place, and none is still running;
  - every fork reported too (multiprocessing's workers included: they report at os._exit),
    counted by the process that forked it. A fork killed by a signal does not report: Pool's
    terminate() (the end of `with Pool() as p:`) kills the workers still alive with SIGTERM, so
    such a run's coverage may be unknown; pool.close() and pool.join() let them end and report.
    (A SIGTERM handler that reported first could delay a worker's death indefinitely, when the
    signal arrives while it waits inside C code that does not run Python handlers.)
Each report is one line on the harness fd, prefixed by a nonce of the job process's.

What this does not guarantee: the tracer runs inside the program's interpreter, so a program
that reaches the judge's objects there (gc, frames, closures, ctypes) can still edit the line
set and its counters together, or write a report with the nonce itself. Such a program gains
nothing in a verdict (coverage never decides one); FGO then trains on tokens of lines that did
not run. Lines run in a process the program exec's (subprocess) are not counted.
"""

from __future__ import annotations

import _thread
import json
import os
import sys
import threading

COVERAGE_TIME_FACTOR = 5.0   # the traced run's CPU limit: this many times the test's
REAL_SETTRACE, REAL_GETTRACE = sys.settrace, sys.gettrace   # the program may replace both
REAL_START_THREAD = _thread.start_new_thread


class Coverage:
    """The line tracer of one traced process and its end-of-run checks (see the module
    docstring). start() installs it; report() sends this process's report once (the main
    process adds `verdict`, the observations the verdict run also reports)."""

    def __init__(self, filename: str, send_line, nonce: str):
        self.filename, self.send_line, self.nonce = filename, send_line, nonce
        self.lines: set[int] = set()
        self.problems: list[str] = []
        self.forks = 0          # forks this process made; each must report
        self.threads = 0        # threads started and not yet ended
        self.threads_lock = _thread.allocate_lock()
        self.reported = False
        self.tracer, self.counts = self._make_tracer()

    def _make_tracer(self):
        lines, filename, problems = self.lines, self.filename, self.problems
        added = calls = returns = 0

        def local(frame, event, arg):
            nonlocal added, returns
            if event == "line":
                n = frame.f_lineno
                if n not in lines:
                    lines.add(n)
                    added += 1
            elif event == "return":
                returns += 1
                if not frame.f_trace_lines:
                    problems.append("a frame's line events were switched off")
            return local

        def global_(frame, event, arg):
            nonlocal calls
            if frame.f_code.co_filename == filename:
                calls += 1
                return local
            return None

        def counts() -> tuple[int, int, int]:
            return added, calls, returns
        return global_, counts

    def start(self):
        """Trace this thread and every thread started from now on; watch for forks and for
        another tracer."""
        tracer, problems = self.tracer, self.problems

        def settrace(function):
            if function is not tracer:
                problems.append("the program called sys.settrace")
            REAL_SETTRACE(function)

        real_threading_settrace = threading.settrace

        def threading_settrace(function):
            problems.append("the program called threading.settrace")
            real_threading_settrace(function)

        def start_new_thread(function, args, kwargs=None):
            def traced():
                REAL_SETTRACE(tracer)
                try:
                    function(*args, **(kwargs or {}))
                finally:
                    if REAL_GETTRACE() is not tracer:
                        problems.append("a thread lost the tracer")
                    self._count_thread(-1)
            self._count_thread(1)
            try:
                return REAL_START_THREAD(traced, ())
            except BaseException:
                self._count_thread(-1)
                raise

        sys.settrace, threading.settrace = settrace, threading_settrace
        _thread.start_new_thread = _thread.start_new = start_new_thread
        threading._start_new_thread = start_new_thread
        os.register_at_fork(after_in_parent=self._forked, after_in_child=self._in_fork)
        REAL_SETTRACE(tracer)

    def _count_thread(self, change: int):
        with self.threads_lock:
            self.threads += change

    def _forked(self):
        self.forks += 1

    def _in_fork(self):
        self.forks, self.threads, self.reported = 0, 0, False
        self.threads_lock = _thread.allocate_lock()   # (another thread may have held it)

    def complete(self) -> bool:
        """Are this process's lines all the lines it ran? (Call before stopping the tracer.)"""
        added, calls, returns = self.counts()
        return (REAL_GETTRACE() is self.tracer and not self.problems and self.threads == 0
                and added == len(self.lines) and calls - returns == self._frames_running())

    def _frames_running(self) -> int:
        """Frames of the program on any thread's stack now (they have not returned yet)."""
        running = 0
        for frame in sys._current_frames().values():
            while frame is not None:
                running += frame.f_code.co_filename == self.filename
                frame = frame.f_back
        return running

    def report(self, verdict: dict | None = None):
        """Send this process's report once: its lines, whether they are complete, its forks."""
        if self.reported:
            return
        self.reported = True
        complete = self.complete()
        REAL_SETTRACE(None)
        report = {"pid": os.getpid(), "lines": sorted(self.lines), "complete": complete,
                  "forks": self.forks}
        if verdict is not None:
            report["verdict"] = verdict
        try:
            self.send_line((self.nonce + json.dumps(report) + "\n").encode())
        except BaseException:   # unsent: the job process counts it missing
            pass


def covered_lines(data: bytes, nonce: str, pid: int, verdict_message: bytes) -> list[int] | None:
    """The job process's reading of a traced run's reports (data: all its process tree wrote
    on the harness fd; pid: the traced process; verdict_message: what the verdict run's process
    reported). The sorted lines that ran, or None (unknown) unless every report is well formed
    and complete, one came from `pid` with the verdict run's observations, and every fork
    reported."""
    try:
        verdict = json.loads(verdict_message) if verdict_message else {}
        text, prefix = data.decode(), nonce
        if not text.endswith("\n"):
            return None
        reports = []
        for line in text[:-1].split("\n"):
            if not line.startswith(prefix):
                return None
            reports.append(json.loads(line[len(prefix):]))
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    lines, pids, forks = set(), set(), 0
    for r in reports:
        if not (type(r) is dict and type(r.get("pid")) is int and r.get("complete") is True
                and type(r.get("forks")) is int and r["forks"] >= 0
                and type(r.get("lines")) is list and all(type(n) is int for n in r["lines"])):
            return None
        pids.add(r["pid"])
        forks += r["forks"]
        lines.update(r["lines"])
    main = [r for r in reports if r["pid"] == pid]
    if (len(main) != 1 or len(pids) != len(reports) or len(reports) != 1 + forks
            or main[0].get("verdict") != verdict):
        return None
    return sorted(lines)
