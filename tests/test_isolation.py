"""Tests for infra/isolation.py: what confines a worker and each test (uid, namespaces,
cgroup, seccomp, private mounts, rlimits) and the cleanup after it, through the sandbox's judge
and directly. Most need root (the training setup); the programs are in tests/sandbox_programs.py."""
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox_programs as P  # noqa: E402

import sandbox as sb  # noqa: E402
from infra import isolation, sandbox_pool  # noqa: E402

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="uid/namespace isolation needs root")
T = 1.0   # small per-test timeout keeps the file fast


def run(code, tests, **kw):
    kw.setdefault("timeout", T)
    return sb.run_tests(textwrap.dedent(code), tests, **kw)


def _batch(jobs, workers=1):
    return sb.run_batch(jobs, workers=workers)


def _children() -> set[int]:
    return set(isolation._descendants(os.getpid()))


# --- the test's process: environment, files, processes it leaves ----------------------------

def test_file_size_and_workdir_and_env():
    code = """
        import os
        open('small.txt', 'w').write('x' * 1000)
        print(os.path.getsize('small.txt'), sorted(k for k in os.environ if k not in
              ('PATH', 'HOME', 'TMPDIR', 'LANG')))
        open('big.bin', 'wb').write(b'x' * (64 << 20))
    """
    os.environ["SANDBOX_TEST_SECRET"] = "hunter2"
    try:
        r = run(code, [{"input": "", "output": "1000 []"}], memory_mb=512)
    finally:
        del os.environ["SANDBOX_TEST_SECRET"]
    assert r.tests[0].output.startswith("1000 []")     # no inherited variables
    assert r.status == "runtime_error"                  # the 64 MiB file hits RLIMIT_FSIZE
    r = run("import os\nprint(len(os.listdir('.')))", [{"input": "", "output": "0"}] * 2)
    assert r.status == "pass"                           # a fresh empty directory per test


@needs_root
def test_fork_bomb_is_contained_and_cleaned_up():
    code = """
        import os
        print(os.getuid(), flush=True)
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """
    r = run(code, [{"input": "", "output": "x"}], timeout=0.5)
    assert r.status in ("timeout", "wrong_answer", "runtime_error")
    ok = run("print(sum(range(10)))", [{"input": "", "output": "45"}])
    assert ok.status == "pass"                          # the machine still works
    assert isolation._live_pids_of(int(r.tests[0].output.split()[0])) == []


def test_escaped_children_are_dead_after_return(tmp_path):
    code = """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                print(os.getuid(), flush=True)
                time.sleep(60)
            os._exit(0)
        time.sleep(0.3)
    """
    r = run(code, [{"input": "", "output": "x"}])
    assert r.tests[0].output.strip()
    if ROOT:   # a uid of its own: none of its processes lives on
        assert isolation._live_pids_of(int(r.tests[0].output.split()[0])) == []


@needs_root
def test_worker_killed_mid_test_is_cleaned_up_quietly(monkeypatch, capfd):
    """The parent's fallback cleanup (pidfds, no `kill` binary on PATH) kills the test's
    processes, and nothing is printed (no traceback from the pool's threads)."""
    import signal
    import threading
    monkeypatch.setattr(isolation, "minimal_env",
                        lambda home: {"PATH": "/nonexistent", "HOME": home})
    workers: list[int] = []

    def kill_worker():
        deadline = time.monotonic() + 20
        while not workers and time.monotonic() < deadline:
            workers.extend(p for p in _children() if b"--worker" in _cmdline(p))
            time.sleep(0.05)
        time.sleep(0.5)                                  # the test is running by now
        for pid in workers:
            os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_worker)
    killer.start()
    code = "import os, time\nif os.fork() == 0:\n    os.setsid()\ntime.sleep(30)\n"
    r = run(code, [{"input": "", "output": ""}], timeout=20)
    killer.join()
    assert workers and r.status == "runtime_error" and "worker died" in r.error
    assert all(isolation._live_pids_of(isolation.UID_BASE + w) == [] for w in workers)
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


# --- the host and the worker --------------------------------------------------------------------

@needs_root
def test_killing_the_parent_fails_only_the_program():
    code = """
        import os, signal
        for pid in (os.getppid(), os.getpgid(os.getppid())):
            try:
                if pid > 0:   # 0 would be its own process group
                    os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        print(3)
    """
    tests = [{"input": "", "output": "3"}]
    hostile, good = sb.run_batch([dict(code=textwrap.dedent(code), tests=tests, timeout=T),
                                  dict(code="print(3)", tests=tests, timeout=T)], workers=1)
    assert hostile.status == "pass" and hostile.error == ""   # the worker survived; kill(-1)
    # spares its caller, so the program itself lives on and prints the right answer
    assert good.status == "pass"


@needs_root
def test_no_network_no_writes_outside_workdir():
    code = """
        import socket, os
        for path in ('/tmp/x', '/var/tmp/x', '/x', '/usr/x', os.path.expanduser('~/../x')):
            try:
                open(path, 'w'); print('wrote', path)
            except OSError:
                pass
        try:
            socket.create_connection(('127.0.0.1', 22), timeout=0.5); print('net')
        except OSError:
            print('no net')
    """
    r = run(code, [{"input": "", "output": "no net"}])
    assert r.status == "pass", r.tests[0].output


# --- state that must not cross tests ------------------------------------------------------------

def test_workdir_leftovers_do_not_lose_jobs():
    honest = P.HONEST[0]
    results = _batch([P.DEEP_TREE, P.FILL_WORKDIR, honest, P.DEEP_TREE, honest])
    assert [r.status for r in results] == ["pass"] * 5      # a recursive cleanup would die
    assert all(r.error == "" for r in results)


@needs_root
def test_no_ipc_object_or_key_crosses_tests(worker_uids):
    results = _batch([P.SHM_CREATE, P.SHM_PROBE, P.KEY_ADD, P.KEY_PROBE])
    assert [r.status for r in results] == ["pass"] * 4      # a probe prints what leaked
    uids = worker_uids["uids"]
    assert uids and _test_uid_keys(uids) == [] and _test_uid_ipc(uids) == []


def _test_uid_keys(uids) -> list[str]:
    """Key users among uids (a keyring of a test uid must not outlive the sandbox)."""
    with open("/proc/key-users") as f:
        return [line for line in f if int(line.split(":")[0]) in uids]


def _test_uid_ipc(uids) -> list[str]:
    found = []
    for kind in ("shm", "sem", "msg"):
        with open(f"/proc/sysvipc/{kind}") as f:
            header, *rows = [line.split() for line in f]
        cols = [header.index(c) for c in ("uid", "cuid")]
        found += [r for r in rows if any(int(r[c]) in uids for c in cols)]
    return found


@pytest.fixture
def host_bait(tmp_path):
    """A unix socket anyone may connect to, a setuid copy of `id`, a host process with a marker."""
    import shutil
    import socket
    bait = f"/run/sandbox-test-{os.getpid()}"
    os.makedirs(bait, mode=0o755, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(f"{bait}/s")
    server.listen(8)
    os.chmod(f"{bait}/s", 0o777)
    dgram = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dgram.bind(f"{bait}/d")
    os.chmod(f"{bait}/d", 0o777)
    shutil.copy("/usr/bin/id", f"{bait}/id")
    os.chmod(f"{bait}/id", 0o4755)
    marker = f"sandbox-marker-{os.getpid()}"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        yield dict(socket_path=f"{bait}/s", setuid_binary=f"{bait}/id", marker=marker,
                   dgram_path=f"{bait}/d")
    finally:
        sleeper.kill()
        sleeper.wait()
        server.close()
        dgram.close()
        shutil.rmtree(bait, ignore_errors=True)


@needs_root
def test_host_is_unreachable(host_bait):
    b = host_bait
    jobs = [P.unix_socket_probe(b["socket_path"]), P.dgram_socket_probe(b["dgram_path"]),
            P.setuid_probe(b["setuid_binary"]),
            P.host_cmdline_probe(b["marker"]), P.USER_NAMESPACE, P.PTRACE, P.NO_NEW_PRIVS]
    results = _batch(jobs, workers=2)    # each prints what it reached instead of a + b
    assert [r.status for r in results] == ["pass"] * len(jobs), [r.tests[0].output for r in results]
    report = sb.isolation_report()
    assert report["pid_namespace"] and report["seccomp"] and report["no_new_privs"]


# --- limits of the process tree ---------------------------------------------------------------

def _cgroup():
    return sb.isolation_report()["cgroup"] if ROOT else None


@pytest.mark.skipif(not ROOT, reason="a limit per process tree needs a cgroup (root)")
def test_memory_is_limited_per_process_tree():
    if _cgroup() is None:
        pytest.skip("no usable cgroup here: RLIMIT_AS per process only (documented fallback)")
    r = _batch([P.TREE_MEMORY])[0]
    assert r.status == "memory_limit"        # RLIMIT_AS alone: pass (4 x 120 MiB, 200 MiB each)
    ok = _batch([dict(P.TREE_MEMORY, code=P.TREE_MEMORY["code"].replace("120 << 20", "20 << 20"))])
    assert ok[0].status == "pass"            # 4 x 20 MiB fit


# --- the interpreter stays reachable ---------------------------------------------------------

def test_numpy_imports_from_a_python_under_tmp(tmp_path):
    pytest.importorskip("numpy")
    venv = tmp_path / "venv"        # a symlinked venv under /tmp, like a snapshot clone's
    venv.symlink_to(sys.prefix)
    (tmp_path / "p.py").write_text(P.HONEST_NUMPY["code"])
    (tmp_path / "t.json").write_text(json.dumps(P.ADD))
    proc = subprocess.run([str(venv / "bin" / "python"), sb.__file__, str(tmp_path / "p.py"),
                           str(tmp_path / "t.json")], capture_output=True, text=True)
    assert json.loads(proc.stdout)["status"] == "pass", proc.stdout[-500:]   # not bound back:
    assert proc.returncode == 0                                   # No module named 'numpy'


# --- the whole zoo at once ----------------------------------------------------------------------

@pytest.fixture
def worker_uids(monkeypatch):
    """uids and cgroup directories of every worker started while the test runs."""
    seen, real_init = dict(uids=[], dirs=[]), sandbox_pool.Worker.__init__

    def recording_init(self):
        real_init(self)
        seen["uids"].append(self.info["uid"])
        seen["dirs"].extend(self.info["cgroup_dirs"])
    monkeypatch.setattr(sandbox_pool.Worker, "__init__", recording_init)
    return seen


@pytest.mark.skipif(not ROOT, reason="uids, namespaces and cgroups need root")
def test_200_jobs_hostile_and_honest_mixed(host_bait, worker_uids):
    pairs = P.hostile(**host_bait, cgroup=_cgroup() is not None)
    jobs, expected = [], []
    for i in range(100):   # every hostile program at least twice, each followed by an honest one
        job, status = pairs[i % len(pairs)]
        jobs += [job, P.HONEST[i % len(P.HONEST)]]
        expected += [status, "pass"]
    results = sb.run_batch(jobs, workers=2)
    assert [r.status for r in results] == expected      # every verdict, in order
    assert all(r.total == len(j["tests"]) for j, r in zip(jobs, results))
    uids = worker_uids["uids"]
    assert uids and all(isolation._live_pids_of(u) == [] for u in uids)
    assert _test_uid_keys(uids) == [] and _test_uid_ipc(uids) == []
    assert not any(os.path.exists(d) for d in worker_uids["dirs"])   # cgroups removed
    args = [a for u in uids for a in ("-uid", str(u), "-o")][:-1]
    found = subprocess.run(["find", "/tmp", "/var/tmp", "/dev/shm", "/run", "-xdev", "(", *args,
                            ")", "-print", "-quit"], capture_output=True, text=True).stdout
    assert found == ""                                       # no file of a test uid


# --- the seccomp filter --------------------------------------------------------------------------

def _seccomp_decision(prog, nr, arch=0xC000003E, arg0=0, arg1=0):
    """Run the classic-BPF filter on one seccomp_data, as the kernel does."""
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:
            acc, pc = {0: nr, 4: arch, 16: arg0, 24: arg1}[k], pc + 1
        elif code == 0x06:
            return k
        elif code == 0x54:
            acc, pc = acc & k, pc + 1
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def test_seccomp_filter_decisions():
    prog = isolation._seccomp_instructions()
    allow, eperm, enosys, kill = 0x7FFF0000, 0x50001, 0x50026, 0x80000000
    deny = set(isolation.SECCOMP_DENY_X86_64.values())
    for nr in range(512):
        expected = eperm if nr in deny else enosys if nr == 435 else allow
        assert _seccomp_decision(prog, nr) == expected, nr
    assert _seccomp_decision(prog, 56, arg0=0x10000000 | 17) == eperm   # clone(CLONE_NEWUSER)
    assert _seccomp_decision(prog, 56, arg0=0x003D0F00) == allow        # a thread's clone
    assert _seccomp_decision(prog, 41, arg0=1) == eperm                 # socket(AF_UNIX)
    assert _seccomp_decision(prog, 41, arg0=2) == allow                 # socket(AF_INET)
    assert _seccomp_decision(prog, 53, 0xC000003E, 1, 2 | 0x80000) == eperm   # dgram pair
    assert _seccomp_decision(prog, 53, 0xC000003E, 1, 1 | 0x80000) == allow   # stream pair
    assert _seccomp_decision(prog, 0x40000000 + 1) == eperm             # x32 ABI
    assert _seccomp_decision(prog, 1, arch=0x40000003) == kill          # i386 ABI


@needs_root
def test_workdir_and_shm_are_fresh_for_every_test():
    code = """
        import os
        print(sorted(os.listdir('.')), sorted(os.listdir('/dev/shm')), oct(os.stat('.').st_mode))
        open('left', 'w').write('x')
        open('/dev/shm/left', 'w').write('x')
        os.chmod('.', 0o755)
    """
    r = run(code, [{"input": "", "output": "[] [] 0o40700"}] * 3)
    assert r.status == "pass", [t.output for t in r.tests]
    quiet = "import os\nprint(sorted(os.listdir('.')))\n"
    r = run(quiet, [{"input": "", "output": "[]"}] * 3)   # an untouched tmpfs is reused
    assert r.status == "pass"


# --- what one job leaves for the next ------------------------------------------------------------

def test_a_later_job_reaches_no_output_of_an_earlier_one_through_frames_or_gc():
    results = _batch([P.MARKER_JOB, P.PROBE_FRAMES_AND_GC], workers=1)
    assert P.MARKER_PREFIX in results[0].tests[0].output
    assert results[1].status == "pass", [t.output for t in results[1].tests]


def test_a_later_job_finds_no_output_of_an_earlier_one_in_its_memory():
    results = _batch([P.MARKER_JOB, P.HONEST[0], P.PROBE_MEMORY], workers=1)
    assert results[2].status == "pass", [t.output for t in results[2].tests]
    printing = f'print("{P.MARKER_PREFIX}" + str(7 ** 40))\n'   # held in its stdout buffer
    marker_then_probe = dict(P.PROBE_MEMORY, code=printing + P.PROBE_MEMORY["code"])
    own = _batch([marker_then_probe])[0].tests[0].output   # the scan does find a marker
    assert "leak" in own.splitlines()[-1], own


@needs_root
def test_a_check_tests_program_cannot_find_the_check_code():
    # The job process reads the check code only after forking the program's process, and the
    # checker that holds it runs as another process the program cannot read: the probe returns
    # the expected value only if it finds it (tests/sandbox_programs.py, class 11).
    r = _batch([P.PROBE_CHECK_SECRET])[0]
    assert r.status == "wrong_answer", r.tests[0].stderr
    leaked = f'LEAK = "{P.SECRET_PREFIX}" + str(13 ** 41)\n'   # in the program's own memory
    r = _batch([dict(P.PROBE_CHECK_SECRET, code=leaked + P.PROBE_CHECK_SECRET["code"])])[0]
    assert r.status == "pass"   # the probe does find the value where it can be read


@needs_root
def test_each_job_gets_a_fresh_tmpfs():
    # Each probe makes 20 unnamed files in its workdir and in /dev/shm: on a tmpfs reused from
    # the job before, their inode numbers would continue where that job's stopped.
    outputs = [r.tests[0].output for r in _batch([P.PROBE_TMPFS] * 3, workers=1)]
    assert outputs[0] == outputs[1] == outputs[2], outputs
