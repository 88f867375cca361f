"""Inside a test's process: run the program, end as the interpreter ends, report observations.

stdin, stdout and stderr are those CPython makes on Linux under the test's LANG=C.UTF-8 (UTF-8
with surrogateescape; stdin translates no newline, so a lone CR stays inside its line; stderr
line-buffered, backslashreplace); /dev/stdout and /dev/stderr open as under `python3 sol.py`.
A test ends the way the interpreter ends: non-daemon threads are joined, atexit handlers run,
sys.stdout/sys.stderr and file objects left in the program's globals are flushed; os._exit ends
at once (buffered output is lost, as in CPython) but still reports coverage.
The child reports observations only (return value as data, exception type, covered lines) on
HARNESS_FD; the parent decides every verdict (sandbox_wire.parse_message reads the report).

Check tests (HumanEval's check(candidate)): the program's process serves calls of its function
(serve_calls); a second process, the checker, forked only after it (so the program's process of
the verdict run never holds the check code or its expected values; a traced run for coverage,
which decides no verdict, is forked later), runs check(candidate), where candidate(*args) sends the
arguments over a pipe and returns the reply rebuilt as exact builtin values (a returned
generator or other builtin iterator: an iterator over its items). The checker's exit status
says how check() ended (CHECK_*): nothing the program writes can set it. Its CPU time counts
with the program's, as the benchmark's time limit covers both.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from infra import isolation
from infra.sandbox_coverage import Coverage
from infra.sandbox_prepare import SOLUTION_FILENAME
from infra.sandbox_verdicts import MEMORY_LIMIT, OUTPUT_LIMIT, PASS, RUNTIME_ERROR, WRONG_ANSWER
from infra.sandbox_wire import (
    MAX_RESULT_DEPTH,
    from_wire,
    read_exactly,
    read_frame,
    to_wire,
    valid_wire,
    wire_message,
    write_frame,
)

HARNESS_FD = 3
REAL_EXIT = os._exit   # the program may replace os._exit; the harness's own exits use this
PRELUDE: dict = {}   # filled once per worker, shared copy-on-write by its children


def run_child(job, compiled, test_input, workdir, uid, fds, serve=None, preamble=None):
    """In the forked child: lock down, run the program, end as the interpreter ends, report
    observations on HARNESS_FD. serve: a check test's (calls, replies) pipes, which become fds
    CALLS_FD and REPLIES_FD (_serve_calls). preamble: compiled code run first in the program's
    namespace (HumanEval's prompt, as its harness runs it). job["trace"]: the nonce of a traced
    run (sandbox_coverage), whose reports add the lines that ran."""
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
        module.__dict__.update(PRELUDE)
    sys.modules["__main__"] = module
    coverage = None
    if job.get("trace"):
        coverage = Coverage(SOLUTION_FILENAME, lambda data: _write_all(HARNESS_FD, data),
                            job["trace"])
    message: dict = {}
    me, sent = os.getpid(), []

    def report():   # the verdict's observations once, from this process only (not a fork)
        if coverage is not None:
            coverage.report(message if os.getpid() == me else None)
        elif os.getpid() == me and not sent:
            sent.append(True)
            send(message)

    def _exit(status):   # os._exit ends at once, as in CPython, but coverage is reported
        report()
        REAL_EXIT(status)
    os._exit = _exit
    exit_code = 0
    try:
        if preamble is not None:
            exec(preamble, module.__dict__)
        if coverage is not None:
            coverage.start()
        exec(compiled, module.__dict__)
        if serve:
            _serve_calls(_find_function(module.__dict__, job["fn_name"], job["binds_fn"]))
        elif job["fn_name"] is not None:
            function = _find_function(module.__dict__, job["fn_name"], job["binds_fn"])
            message.update(wire_message(function(*test_input)))
    except SystemExit as e:
        exit_code = _exit_code(e)
    except BaseException as e:
        message["exception"] = type(e).__name__[:100]
        exit_code = 1
        _print_program_error(e)
    exit_code = _finish_like_the_interpreter(module, exit_code, io, job["opens_files"])
    report()
    REAL_EXIT(exit_code)


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
        judge = os.path.dirname(__file__) + os.sep
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not f.filename.startswith(judge)]
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
    write_frame(REPLIES_FD, b'{"ready": true}')
    while (call := read_frame(CALLS_FD)) is not None:
        args, kwargs = from_wire(json.loads(call))
        try:
            value = function(*args, **kwargs)
            iterator = type(value).__module__ == "builtins" and hasattr(type(value), "__next__")
            if iterator:
                value = list(value)
        except Exception as e:   # the checker raises it inside check(), as the harness would
            _print_program_error(e)
            reply = {"exception": type(e).__name__[:100]}
        else:
            reply = wire_message(value)
            if iterator and "result" in reply:
                reply = {"iterator": reply["result"]}
        write_frame(REPLIES_FD, json.dumps(reply).encode())


def _valid_reply(key: str, value) -> bool:
    """Is this the one key of a reply of the program's process (_serve_calls), with its value?"""
    if key == "ready":
        return value is True
    if key in ("exception", "result_error"):
        return type(value) is str
    if key == "iterator" and type(value) is not list:
        return False
    return key in ("result", "iterator") and valid_wire(value, MAX_RESULT_DEPTH + 2)


class _CheckEnded(BaseException):
    """Ends check() from inside a call: the program cannot answer (a BaseException, so that an
    `except Exception` in the check code does not swallow it)."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status, self.why = status, why


def start_checker(check_code: str, job: dict, workdir: str, uid, fds, output_cap: int) -> int:
    """Fork the checker of a check test (fds: the calls pipe's write end, the replies pipe's
    read end, the test's stderr); the job process keeps none of the three. Its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            _checker(check_code, job, workdir, uid, fds, output_cap)
        finally:
            REAL_EXIT(111)
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
        header = read_exactly(4, 8, None)
        if header is None:
            raise _CheckEnded(PROGRAM_ENDED, "the program ended (or failed) without answering")
        if int.from_bytes(header, "big") > output_cap:
            raise _CheckEnded(TOO_LARGE, f"a returned value is over {output_cap} bytes")
        data = read_exactly(4, int.from_bytes(header, "big"), None)
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
            call = json.dumps(to_wire([list(args), kwargs])).encode()
        except (TypeError, ValueError) as e:
            raise _CheckEnded(CHECK_UNUSABLE, f"check() passed an argument that is not plain "
                                              f"data ({e})") from None
        try:
            write_frame(3, call)
        except OSError:   # the program's process is gone
            raise _CheckEnded(PROGRAM_ENDED, "the program ended before the call") from None
        message = reply()
        if "result" in message or "iterator" in message:
            try:
                if "iterator" in message:
                    return iter(from_wire(message["iterator"]))
                return from_wire(message["result"])
            except TypeError:   # an unhashable set member or key: not what to_wire sends
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
        REAL_EXIT(CHECK_UNUSABLE)
    check = namespace.get("check")
    if not callable(check):
        say("the check code defines no check(candidate)")
        REAL_EXIT(CHECK_UNUSABLE)
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
    REAL_EXIT(status)


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
                    if isinstance(v, io.IOBase) and v is not PRELUDE.get(k)]
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


def _write_all(fd: int, data: bytes):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


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
    if callable(value) and (binds_fn or PRELUDE.get(fn_name) is not value):
        return value
    raise NameError(f"the program defines no function or Solution method named {fn_name!r}"
                    + (" (the prelude's one does not count)" if fn_name in PRELUDE else ""))

