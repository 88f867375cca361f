"""The parent's side of the worker pool: start a worker process, send it a job, read its reply.

run_batch (sandbox.py) starts one worker per core: a fresh `python -I` running
sandbox_worker.worker_main with an empty environment, a few common modules pre-imported. The
parent sends a worker only the code and the test INPUTS (never the expected outputs, which stay
in the parent) as a pickled request frame, and reads back the raw observations of each test as
one frame. A worker that fails to start is retried (its stderr is printed); one that dies or
hangs is closed, and run_batch replaces it.
A job judged stop_at_first_failure talks per test: the job process sends each test's raw
observations as it ends and waits for the parent's word, GO_ON when the parent's verdict of
that test is pass, else STOP (the rest are not run). The worker so learns whether a test
passed, never what was expected.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable

from infra import isolation
from infra.sandbox_prepare import Prepared, output_cap
from infra.sandbox_verdicts import PASS
from infra.sandbox_wire import read_frame, write_frame

WALL_FACTOR, WALL_SLACK = 3.0, 1.0   # wall cap per test = WALL_FACTOR * timeout + WALL_SLACK
HARD_CAP_FACTOR = 4.0       # ... not counting time spent waiting for a CPU, up to 4x that
WORKER_START_TRIES = 3
GO_ON, STOP = b"go on", b"stop"   # the parent's word after each test (stop_at_first_failure)


def start_worker() -> Worker:
    """A worker that fails to start (e.g. a slow start on a loaded machine) is tried again; each
    failure is printed with the worker's own stderr."""
    for attempt in range(1, WORKER_START_TRIES + 1):
        try:
            return Worker()
        except RuntimeError as e:
            print(f"sandbox: worker start failed (try {attempt}/{WORKER_START_TRIES}): {e}",
                  file=sys.stderr, flush=True)
            if attempt == WORKER_START_TRIES:
                raise
            time.sleep(0.2 * attempt)


class Worker:
    """One fork-server process (worker_command) and its framed pipe protocol."""
    START_TIMEOUT = 60.0

    def __init__(self):
        import tempfile
        self.errors = tempfile.TemporaryFile()   # the worker's stderr: shown when it fails
        self.info = {}
        self.proc = subprocess.Popen(
            worker_command(),
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

    def run(self, job: dict, prepared: Prepared, compact_output: bool,
            judge_test: Callable | None = None) -> dict | None:
        """Send code + inputs (never outputs); the worker's raw observations of each test
        (_run_job), or None when it died or hung (it is closed, and replaced for the next job).
        A check test's code goes in a frame of its own, after the request: the job process
        reads it only once the program's process is forked (_run_one_test). compact_output:
        stdout past its byte cap may be kept compacted (sandbox_rules.CompactText).
        judge_test: None, every test runs (but those after a timeout, stop_after_timeout);
        else the parent's verdict of a test, judge_test(raw, expected output, job, prepared)
        (sandbox._judge_test), asked after each test but the last: the tests after the first
        whose verdict is not pass are not run. A verdict that raises counts as a pass (running
        on changes no verdict)."""
        request = dict(code=job["code"], inputs=[t.get("input") for t in job["tests"]],
                       fn_name=job["fn_name"], timeout=float(job["timeout"]),
                       memory_mb=int(job["memory_mb"]), coverage=bool(job["coverage"]),
                       stop_after_timeout=bool(job["stop_after_timeout"]),
                       stop_at_first_failure=judge_test is not None,
                       binds_fn=prepared.binds_fn, opens_files=prepared.opens_files,
                       output_caps=[output_cap(job, t) for t in job["tests"]],
                       compact_output=compact_output, check=job["check"],
                       preamble=job["preamble"])
        deadline = time.monotonic() + len(job["tests"]) * (
            HARD_CAP_FACTOR * wall_cap(job["timeout"]) + 2.0) + 30.0
        report, asked = None, []   # asked: the tests sent one by one (judge_test)
        try:
            write_frame(self.proc.stdin.fileno(), pickle.dumps(request))
            if job["check"]:
                write_frame(self.proc.stdin.fileno(), job["tests"][0]["check"].encode())
            while (reply := self._read(deadline)) is not None:
                report = pickle.loads(reply)
                if "asks" not in report:   # the job's last frame: the tests not sent yet
                    break
                asked.append(report["asks"])
                passed = _passes(judge_test, report["asks"], job, prepared, len(asked) - 1)
                write_frame(self.proc.stdin.fileno(), GO_ON if passed else STOP)
            else:
                report = None
        except (BrokenPipeError, OSError):
            report = None
        if report is None:  # died (a bug, or the host killed it) or hung
            self.close()
            return None
        return dict(report, tests=asked + report["tests"])

    def _read(self, deadline: float) -> bytes | None:
        return read_frame(self.proc.stdout.fileno(), deadline)

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


def _passes(judge_test: Callable, raw: dict, job: dict, prepared: Prepared, k: int) -> bool:
    """Is test k's verdict pass? One that cannot be judged runs on, as without the flag."""
    try:
        return judge_test(raw, job["tests"][k].get("output"), job, prepared).status == PASS
    except Exception:
        return True


def worker_command() -> list[str]:
    """A fresh interpreter in isolated mode (-I: no environment variables, no user site, no
    script folder on sys.path) running sandbox_worker.worker_main. The repository's folder is
    on its sys.path only while infra's modules import, and they leave sys.modules then: a
    program can import neither infra nor anything else of the repository (sandbox, data)."""
    boot = ("import sys; sys.path.insert(0, sys.argv[2]); import infra.sandbox_worker as w; "
            "del sys.path[0]; [sys.modules.pop(m) for m in list(sys.modules) "
            "if m == 'infra' or m.startswith('infra.')]; w.worker_main()")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [sys.executable, "-I", "-c", boot, "--worker", here]


def wall_cap(timeout: float) -> float:
    return WALL_FACTOR * timeout + WALL_SLACK

