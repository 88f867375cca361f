"""Hostile and honest programs for tests/test_sandbox.py and tests/test_isolation.py, one group
per class of attack.

Each entry is a job for sandbox.run_batch plus what a correct sandbox must say about it; each
hostile one gets another verdict from a sandbox without the defence its class tests. `python
tests/sandbox_programs.py` runs them all and prints, per program, what the sandbox said.
"""
import textwrap

ADD = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]
SHM_KEY = 0x5B0C5
KEY_DESC = b"sandbox-test-key"


def job(code, tests=ADD, **kw):
    kw.setdefault("timeout", 2.0)
    return dict(code=textwrap.dedent(code), tests=tests, **kw)


# ---- class 1: whatever a program writes to any fd or leaves in its workdir --------------------
# Each one writes a malformed harness message (fd 3) and exits 0: the parent must not raise.
MALFORMED_MESSAGES = [
    b'{"lines": ["x"]}',                       # int("x") in the parent
    b'{"lines": [1e400]}',                     # int(inf)
    b'{"lines": 7}',                           # not a list
    b'{"result_error": 5}',                    # not a string
    b'{"exception": {"a": 1}, "lines": [[1]]}',
    b'{"result": ' + b"[" * 990 + b"]" * 990 + b"}",   # depth: RecursionError somewhere
    b'{"result": 1, "lines": []}{"x": 1}',     # two messages
    b"\xff\xfe\x00garbage",
    b'{"result": 1, "pad": "' + b"a" * 200_000 + b'"}',
]


def malformed_message(msg: bytes, call_based: bool):
    if call_based:
        code = f"""
        import os
        def f(a, b):
            os.write(3, {msg!r})
            os._exit(0)
        """
        return job(code, [{"input": [1, 2], "output": 3}], fn_name="f")
    code = f"""
    import os, sys
    a, b = map(int, input().split())
    print(a + b); sys.stdout.flush()
    os.write(3, {msg!r})
    os._exit(0)
    """
    return job(code)


# Leaves a directory tree deeper than any recursive clean-up can walk, then answers correctly.
DEEP_TREE = job("""
import os
a, b = map(int, input().split())
for _ in range(3000):
    os.mkdir("d")
    os.chdir("d")
print(a + b)
""")
# Leaves files with no permissions, fills its tmpfs: the next test must still have room.
FILL_WORKDIR = job("""
import os
a, b = map(int, input().split())
try:
    with open("big", "wb") as f:
        for _ in range(60):
            f.write(b"x" * (1 << 20))
except OSError:
    pass
os.chmod(".", 0)
print(a + b)
""")

# ---- class 2: forged reports -------------------------------------------------------------------
FORGED_COMPILE_ERROR = job("""
import os
os.write(3, b'{"compile_error": "SyntaxError: forged"}')
os._exit(0)
""")
FORGED_LINES = job("""
import os, sys
a, b = map(int, input().split())
print(a + b); sys.stdout.flush()
os.write(3, b'{"lines": [1, 2, 3, 4, 999999]}')
os._exit(0)
""", coverage=True)

# ---- class 3: comparison cost (parent side; see test_sandbox) ---------------------------------
ADVERSARIAL_LINE = "1" * (1 << 20) + "x"          # against an expected decimal like "0.5"

# ---- class 4: state across tests ---------------------------------------------------------------
SHM_CREATE = job(f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
shmid = libc.shmget({SHM_KEY}, 4096, 0o1000 | 0o666)   # IPC_CREAT
a, b = map(int, input().split())
print(a + b)
""")
SHM_PROBE = job(f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
a, b = map(int, input().split())
print(a + b if libc.shmget({SHM_KEY}, 0, 0) == -1 else "leak: another test's segment")
""")
KEY_ADD = job(f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall(248, b"user", {KEY_DESC!r}, b"secret", 6, -4)   # add_key(..., KEY_SPEC_USER_KEYRING)
a, b = map(int, input().split())
print(a + b)
""")
KEY_PROBE = job(f"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
found = libc.syscall(250, 10, -4, b"user", {KEY_DESC!r}, 0)  # keyctl(KEYCTL_SEARCH, @u, ...)
a, b = map(int, input().split())
print(a + b if found == -1 else "leak: another test's key")
""")

# ---- class 5: the host -------------------------------------------------------------------------


def unix_socket_probe(path: str):
    return job(f"""
    import socket
    a, b = map(int, input().split())
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect({path!r})
        print("reached the host socket")
    except OSError:
        print(a + b)
    """)


def dgram_socket_probe(path: str):
    """A datagram socketpair can sendto() any bound datagram socket's path (e.g. /dev/log)."""
    return job(f"""
    import socket
    a, b = map(int, input().split())
    try:
        s, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"hello", {path!r})
        print("sent to the host socket")
    except OSError:
        print(a + b)
    """)


def host_cmdline_probe(marker: str):
    return job(f"""
    import os
    seen = False
    for p in os.listdir("/proc"):
        try:
            seen |= {marker!r}.encode() in open(f"/proc/{{p}}/cmdline", "rb").read()
        except OSError:
            pass
    a, b = map(int, input().split())
    print("saw a host process" if seen else a + b)
    """)


def setuid_probe(binary: str):
    return job(f"""
    import subprocess
    a, b = map(int, input().split())
    out = subprocess.run([{binary!r}], capture_output=True, text=True).stdout
    print("euid 0 via setuid" if "euid=0" in out else a + b)
    """)


USER_NAMESPACE = job("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
a, b = map(int, input().split())
print("made a user namespace" if libc.unshare(0x10000000) == 0 else a + b)
""")
PTRACE = job("""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
a, b = map(int, input().split())
print("ptrace allowed" if libc.ptrace(0, 0, None, None) == 0 else a + b)   # PTRACE_TRACEME
""")
NO_NEW_PRIVS = job("""
a, b = map(int, input().split())
status = open("/proc/self/status").read()
print(a + b if "NoNewPrivs:\\t1" in status else "no_new_privs not set")
""")

# ---- class 6: limits for the process tree ------------------------------------------------------
# 4 children hold 120 MiB each at once, each under a 200 MiB per-process limit.
TREE_MEMORY = job("""
import os, time
a, b = map(int, input().split())
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (120 << 20)
        time.sleep(0.5)
        os._exit(0)
    pids.append(pid)
ok = all(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) == 0 for p in pids)
print(a + b if ok else "a child failed")
""", tests=ADD[:1], memory_mb=200)
# 9 busy processes, each its own session (so the scheduler's autogroups do not pool them):
# with wall-clock judging, its neighbours starve.
CPU_HOG = job("""
import os
for _ in range(8):
    if os.fork() == 0:
        os.setsid()
        break
while True:
    pass
""", tests=ADD[:1], timeout=1.0)


def cpu_work(iterations: int, timeout: float):
    """An honest program that runs `iterations` loop steps (the test calibrates them)."""
    return job(f"""
    a, b = map(int, input().split())
    x = 0
    for i in range({iterations}):
        x += i
    print(a + b)
    """, tests=ADD[:1], timeout=timeout)


# ---- class 7: honest programs that CPython runs correctly --------------------------------------
HONEST_THREAD_MAIN = job("""
import sys, threading, time
def main():
    time.sleep(0.2)
    a, b = map(int, sys.stdin.readline().split())
    print(a + b)
sys.setrecursionlimit(1 << 16)
threading.stack_size(1 << 24)
threading.Thread(target=main).start()
""")
HONEST_ATEXIT = job("""
import atexit
a, b = map(int, input().split())
atexit.register(print, a + b)
""")
HONEST_CLOSES_STDOUT = job("""
import sys
a, b = map(int, input().split())
print(a + b)
sys.stdout.close()
""")
HONEST_RAW_FD = job("""
out = open(1, "w")
a, b = map(int, input().split())
out.write(f"{a + b}\\n")
""")
HONEST_MULTIPROCESSING = job("""
import multiprocessing as mp
def double(x):
    return 2 * x
if __name__ == "__main__":
    a, b = map(int, input().split())
    with mp.get_context("fork").Pool(2) as pool:     # semaphores live in /dev/shm
        print(sum(pool.map(double, [a, b])) // 2)
""")
HONEST_NUMPY = job("""
import numpy as np
a, b = map(int, input().split())
print(int(np.array([a, b]).sum()))
""")

# ---- class 8: value rules ----------------------------------------------------------------------
FLOAT_FOR_INT = job("""
def f(n):
    return float(round(n, -3))     # 1e12: within 1e-6 relative of 10**12 + 7, but not equal
""", [{"input": [10**12 + 7], "output": 10**12 + 7}], fn_name="f")
PRELUDE_MENTION = job("""
check = factorial(3) == 6
""", [{"input": [5], "output": 120}], fn_name="factorial")

# ---- class 9: coverage through the usual exits -------------------------------------------------
COVERAGE_OS_EXIT = job("""
import os, sys
a, b = map(int, input().split())
print(a + b)
sys.stdout.flush()
os._exit(0)
""", coverage=True)

# Stdin as CPython gives it on Linux: no newline translation, so a lone CR stays in the line.
HONEST_LONE_CR = job("""
import sys
print(repr(input()))
print(repr(sys.stdin.readline()))
""", [{"input": "a\rb\nc\r\n", "output": "'a\\rb'\n'c\\r\\n'"}])
HONEST_DEV_STDOUT = job("""
a, b = map(int, input().split())
with open("/dev/stdout", "w") as out:
    out.write(f"{a + b}\\n")
with open("/dev/stderr", "w") as err:
    err.write("done\\n")
""")
# Prints the CPU seconds it used itself as the last line of its stderr.
HONEST_CHATTY_STDERR = job("""
import sys, time
a, b = map(int, input().split())
for i in range(400000):
    sys.stderr.write(f"step {i}\\n")      # line buffered: one write(2) per line
print(a + b)
sys.stderr.write(f"{time.process_time()}\\n")
""", tests=ADD[:1], timeout=10.0)


def cpu_seconds_in(where: str, seconds: float, timeout: float):
    """An honest program that spins `seconds` of its own CPU time in the main thread or in a
    threading.Thread (the stack-size idiom of contest code), then answers."""
    work = f"""
    def main():
        a, b = map(int, input().split())
        while time.thread_time() < {seconds}:
            pass
        print(a + b)
    """
    start = "main()" if where == "main" else "threading.Thread(target=main).start()"
    return job("import threading, time\n" + textwrap.dedent(work) + start + "\n",
               tests=ADD[:1], timeout=timeout)


def equal_under_the_rules_but_long(lines: int):
    """Expected '0.5' per line; prints each as a long decimal with trailing spaces: equal under
    the comparison rules, about 8x the expected size."""
    return job(f"""
    import sys
    sys.stdout.write("0.50000000000000000000000   \\n" * {lines})
    """, [{"input": "", "output": "0.5\n" * lines}], timeout=5.0)


# ---- class 10: what one job leaves for the next ----------------------------------------------
# An earlier job prints MARKER_PREFIX + the digits of 7**40; a later job looks for that text
# without ever holding the whole of it itself (the prefix and the digits are separate objects).
MARKER_PREFIX = "QZXJ"
MARKER_JOB = job(f"""
a, b = map(int, input().split())
print("{MARKER_PREFIX}" + str(7 ** 40), a + b)
""")
_FIND_MARKER = f"""
PREFIX, DIGITS = b"{MARKER_PREFIX}", str(7 ** 40).encode()
def holds_marker(data) -> bool:
    i = data.find(PREFIX)
    while i >= 0:
        if data[i + len(PREFIX):i + len(PREFIX) + len(DIGITS)] == DIGITS:
            return True
        i = data.find(PREFIX, i + 1)
    return False
"""
# Walks every frame above it (the worker's loop) and every object gc knows.
PROBE_FRAMES_AND_GC = job(_FIND_MARKER + """
import gc, sys
def reaches(value, depth, seen):
    if id(value) in seen or depth > 8:
        return False
    seen.add(id(value))
    if isinstance(value, str):
        value = value.encode("utf-8", "replace")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return holds_marker(bytes(value))
    if isinstance(value, dict):
        return any(reaches(v, depth + 1, seen) for v in list(value.values()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(reaches(v, depth + 1, seen) for v in list(value))
    return False
a, b = map(int, input().split())
frame, found, seen = sys._getframe(), [], set()
while frame is not None:
    if reaches(dict(frame.f_locals), 0, seen):
        found.append("frame " + frame.f_code.co_name)
    frame = frame.f_back
found += ["gc"] if any(reaches(o, 7, seen) for o in gc.get_objects()) else []
print(f"leak: {found}" if found else a + b)
""")
# Reads every anonymous mapping of its own address space (the heap, arenas: what fork copied
# from the worker); /proc/self/mem is closed to the test uid, a pointer read is not.
PROBE_MEMORY = job(_FIND_MARKER + """
import ctypes
a, b = map(int, input().split())
found = []
for line in open("/proc/self/maps").read().splitlines():
    fields = line.split()
    if "r" not in fields[1] or (len(fields) > 5 and fields[5] not in ("[heap]", "[stack]")):
        continue
    start, end = (int(x, 16) for x in fields[0].split("-"))
    while start < end and not found:
        size = min(end - start, 1 << 22)
        if holds_marker(ctypes.string_at(start, size)):
            found.append(line)
        start += max(size - 64, 1)   # overlap: a marker across two reads
print(f"leak: {found}" if found else a + b)
""", timeout=5.0)
# Creates unnamed files (O_TMPFILE: no entry, no mtime change) in its working directory and
# /dev/shm and prints their inode numbers: a counter that another job could move.
PROBE_TMPFS = job("""
import os
a, b = map(int, input().split())
inodes = []
for where in (".", "/dev/shm"):
    for _ in range(20):
        fd = os.open(where, os.O_TMPFILE | os.O_RDWR, 0o600)
        inodes.append(os.fstat(fd).st_ino)
        os.close(fd)
print(a + b, min(inodes), max(inodes))
""", tests=ADD[:1])

# ---- class 11: a check test's expected values -------------------------------------------------
# The check code holds SECRET_PREFIX + the digits of 13**41, which the program returns only if
# it finds them: in its own memory (what fork copied from the job process), in the frames and
# objects gc knows, or in what /proc shows of every other process (memory, environment,
# command line, open fds: the checker's). It first finds a marker it planted in its own heap;
# if it cannot, it raises (runtime_error), so "wrong_answer" means it looked and found nothing.
SECRET_PREFIX = "KVPW"
SECRET_CHECK = f"""
def check(candidate):
    assert candidate() == "{SECRET_PREFIX}{13 ** 41}"
"""
PROBE_CHECK_SECRET = job(f"""
import ctypes, gc, os, sys
PREFIX = b"{SECRET_PREFIX}"

def digits_after_prefix(data, found):
    i = data.find(PREFIX)
    while i >= 0:
        j = k = i + len(PREFIX)
        while k < len(data) and 48 <= data[k] <= 57:
            k += 1
        if k - j >= 30:
            found.add(data[j:k].decode())
        i = data.find(PREFIX, i + 1)

def read_ranges(maps_lines, read, found):
    for line in maps_lines:
        fields = line.split()
        if "r" not in fields[1] or (len(fields) > 5 and fields[5] not in ("[heap]", "[stack]")):
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        while start < end:
            size = min(end - start, 1 << 22)
            try:
                digits_after_prefix(read(start, size), found)
            except (OSError, ValueError, OverflowError):
                break
            start += max(size - 64, 1)

def other_processes(found):
    for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        for name in ("environ", "cmdline"):
            try:
                digits_after_prefix(open(f"/proc/{{pid}}/{{name}}", "rb").read(), found)
            except OSError:
                pass
        try:
            with open(f"/proc/{{pid}}/mem", "rb", buffering=0) as mem:
                def read(start, size):
                    mem.seek(start)
                    return mem.read(size)
                read_ranges(open(f"/proc/{{pid}}/maps").read().splitlines(), read, found)
        except OSError:
            pass
        try:
            fds = os.listdir(f"/proc/{{pid}}/fd")
        except OSError:
            fds = []
        for fd in fds:
            try:
                opened = os.open(f"/proc/{{pid}}/fd/{{fd}}", os.O_RDONLY | os.O_NONBLOCK)
                digits_after_prefix(os.read(opened, 1 << 20), found)
                os.close(opened)
            except OSError:
                pass

def objects(found):
    for o in gc.get_objects():
        for value in (o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple))
                      else ()):
            if isinstance(value, (str, bytes)):
                digits_after_prefix(value.encode() if isinstance(value, str) else value, found)

def srt():
    planted = PREFIX + str(3 ** 70).encode()
    found = set()
    read_ranges(open("/proc/self/maps").read().splitlines(), ctypes.string_at, found)
    if str(3 ** 70) not in found:
        raise RuntimeError("the probe does not see its own memory")
    found.discard(str(3 ** 70))
    other_processes(found)
    objects(found)
    return "{SECRET_PREFIX}" + found.pop() if found else "not found"
""", [{"check": SECRET_CHECK}], fn_name="srt", source="humaneval", timeout=5.0)

HONEST = [job("a, b = map(int, input().split())\nprint(a + b)\n"),
          job("def f(a, b):\n    return a + b\n", [{"input": [1, 2], "output": 3}], fn_name="f"),
          HONEST_ATEXIT, HONEST_CLOSES_STDOUT, HONEST_RAW_FD, HONEST_THREAD_MAIN, HONEST_LONE_CR,
          HONEST_DEV_STDOUT]


def hostile(socket_path: str | None = None, marker: str | None = None,
            setuid_binary: str | None = None, dgram_path: str | None = None,
            cgroup: bool = True) -> list[tuple[dict, str]]:
    """Every hostile program above, with the verdict a correct sandbox gives it (the probes
    print the right answer only when what they try is blocked)."""
    pairs = [(malformed_message(m, c), "runtime_error")
             for m in MALFORMED_MESSAGES for c in (False, True)]
    pairs += [(DEEP_TREE, "pass"), (FILL_WORKDIR, "pass"),
              (FORGED_COMPILE_ERROR, "runtime_error"), (FORGED_LINES, "runtime_error"),
              (SHM_CREATE, "pass"), (SHM_PROBE, "pass"), (KEY_ADD, "pass"), (KEY_PROBE, "pass"),
              (USER_NAMESPACE, "pass"), (PTRACE, "pass"), (NO_NEW_PRIVS, "pass"),
              (TREE_MEMORY, "memory_limit" if cgroup else "pass"), (CPU_HOG, "timeout"),
              (FLOAT_FOR_INT, "wrong_answer"), (PRELUDE_MENTION, "runtime_error"),
              (MARKER_JOB, "wrong_answer"), (PROBE_FRAMES_AND_GC, "pass"), (PROBE_MEMORY, "pass"),
              (PROBE_CHECK_SECRET, "wrong_answer")]
    if socket_path:
        pairs.append((unix_socket_probe(socket_path), "pass"))
    if dgram_path:
        pairs.append((dgram_socket_probe(dgram_path), "pass"))
    if marker:
        pairs.append((host_cmdline_probe(marker), "pass"))
    if setuid_binary:
        pairs.append((setuid_probe(setuid_binary), "pass"))
    return pairs


if __name__ == "__main__":   # show what the sandbox says about each
    import os
    import sys
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import sandbox as sb
    named = {k: v for k, v in globals().items() if isinstance(v, dict) and "code" in v}
    named |= {f"malformed_{i}_{c}": malformed_message(m, c)
              for i, m in enumerate(MALFORMED_MESSAGES) for c in (False, True)}
    for name, j in named.items():
        try:
            r = sb.run_batch([j], workers=1)[0]
            print(f"{name:24s} {r.status:14s} {r.passed}/{r.total} "
                  f"lines={sorted(r.executed_lines)[:8]} err={r.error[:60]!r} "
                  f"out={[t.output[:30] for t in r.tests]}")
        except BaseException as e:
            print(f"{name:24s} RAISED {type(e).__name__}: {str(e)[:80]}")
