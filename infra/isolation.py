"""Isolation for the sandbox: how a worker and each test process are confined.

sandbox.py judges programs; this module is everything between a program and the host: Linux
namespaces, a cgroup, a seccomp filter, private mounts, resource limits and the cleanup after
each test. The judge calls it at these points and reads nothing else:

    info = confine_worker(fds)          a fresh worker, once: confines it, returns what this
                                        machine gives (sandbox.isolation_report prints it)
    confine_job()                       in the job process the worker forks for each job
                                        (it forks the job's tests)
    workdir = test_workdir(info)        before each test: a fresh, empty working directory
    own_pipes(uid, fds)                 before each test: its stdout/stderr pipes are the uid's
    confine_test(workdir, uid, ...)     in the forked test child, before the program runs
    hide_process()                      in a check test's checker, after confine_test
    kill_leftovers(uid, tasks0)         after the test's main process ended
    clear_workdir(info, workdir)        after the test: whatever it wrote is gone
    end_job(info)                       in the worker, after the job process ended
    cgroup()                            the worker's cgroup (CPU time, OOM kills, tasks), or None
    leave_worker(info)                  the worker's last call
and in the parent: minimal_env (the environment of every process started here) and
release_worker (after a worker ended: kill what its tests left, remove its cgroup).

Threat model: what is enforced, how, and what remains
------------------------------------------------------
The program is hostile: it may write anything to any fd, fork, spin, fill memory and disk, call
any syscall. confine_worker says what this machine gives; as root (the training setup):
* Per worker: own pid namespace (the fork server is its pid 1, /proc remounted: host processes
  are invisible, and when the worker dies the kernel kills every process it left), network
  namespace (no network, not even loopback; abstract unix sockets are per namespace), IPC
  namespace, mount namespace in which every filesystem is remounted read-only, nosuid, nodev;
  /tmp, /var/tmp, /run/lock, /dev/shm and the home/project directories (HIDDEN_DIRS) are
  covered by empty tmpfs; the interpreter's prefix and sys.path directories are bound back
  read-only (also when they live under /tmp or a 0700 home), so numpy etc. import.
* Per job: a process of its own, forked by the worker (which never reads a job's request or
  result: sandbox_worker._serve_one_job), in which the job's tests are forked; fresh tmpfs for its
  working directory and /dev/shm (end_job: none is reused from an earlier job).
* Per test: uid/gid = UID_BASE + worker pid (no other live worker has it), own session, empty
  environment, stdin a memfd, stdout/stderr pipes owned by the test uid (/dev/stdout opens as
  under `python3 sol.py`); a fresh tmpfs as working directory and another as /dev/shm
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
  bomb cannot outrun it), reap until no child is left (the job process is a subreaper: no
  child left means no process of the test lives), unmount the test's tmpfs. After each job the
  worker (pid 1 of the namespace) reaps and kills what outlived the job process.
What remains: the program runs in the same process as the harness code, so it can write any
message on the harness fd (all it can claim is "my function returned X", which returning X does
anyway); it sees the inputs and its own outputs of the other tests of its job (they are in the
job process's memory), never anything of another job, and,
for outputs over ~0.5 MB, an upper bound of the expected length (the output cap). A check test's
program runs beside its checker as the same uid: the job process reads the check code only
after forking the program, and the checker is not dumpable (hide_process), so the program can
read neither the check code nor the checker's pipes; it can kill the checker, which fails it.
The program can read the world-readable files of the host (read-only) and /sys. A CPU hog takes a
core from its neighbours until it is stopped at `timeout` CPU seconds (verdicts do not depend
on it, wall times do). Timing side channels and kernel bugs are out of scope.
Without root (a laptop) the sandbox degrades: no uid drop, no namespaces, no cgroup; rlimits
(memory per process, RLIMIT_NPROC = the user's process count + NPROC_LIMIT), CPU time of the
main process, wall cap, session kill and the subreaper tree kill still apply, and so do
no_new_privs and the seccomp filter (no ptrace of your processes, no keyrings, no SysV IPC). A
program can then read your files and signal your processes. Use root (or a container) for
training.

Cost: nothing here adds a fork or an exec per test: a seccomp filter load (binary search, so
the kernel's per-syscall pre-evaluation at load is short), reads of already-open cgroup files,
and two tmpfs mounts only after a test that wrote something (an untouched tmpfs is reused
within a job). Per job: one fork (the job process) and two tmpfs unmounts and mounts.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

UID_BASE = 100_000          # test uid = UID_BASE + worker pid
NPROC_LIMIT = 64            # processes + threads per test uid (a fork bomb stops here)
NOFILE_LIMIT = 64
FSIZE_LIMIT = 16 << 20      # largest file a program may write, bytes
TMPFS_SIZE = "64m"          # all files one test may write in its working directory
SHM_SIZE = "16m"            # the test's own /dev/shm
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
PR_SET_DUMPABLE = 4
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x8000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE, MNT_DETACH = 32, 4096, 16384, 1 << 18, 2
WORKDIR, SHMDIR = "/tmp/work", "/dev/shm"

# The worker's state, set by confine_worker and inherited by every test child it forks.
_LIBC = None      # handle on libc (prctl, mount, unshare)
_SECCOMP = None   # the seccomp program (ctypes sock_fprog), loaded by each test child
_CGROUP = None    # the worker's Cgroup, or None
_TMPFS: dict = {}   # path -> what os.stat said right after mounting it
_REAL_EXIT = os._exit   # the program may replace os._exit; the harness's own exits use this


# ---------------------------------------------------------------------------------------------
# The interface: what sandbox.py calls
# ---------------------------------------------------------------------------------------------

def confine_worker(protocol_fds) -> dict:
    """Cgroup, namespaces, filesystem, seccomp for this fresh worker process; returns what it
    got (see the module docstring). With a pid namespace, this process forks the namespace's
    pid 1, which returns from here and serves; this one stays behind only to wait for it (and
    closes protocol_fds, the worker's ends of the judge's pipes)."""
    global _LIBC, _SECCOMP, _CGROUP
    import ctypes
    libc = _LIBC = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)        # die with the parent
    info = dict(root=os.geteuid() == 0, uid=None, network_namespace=False,
                mount_namespace=False, pid_namespace=False, ipc_namespace_per_test=False,
                seccomp=False, no_new_privs=True, cgroup=None, cgroup_dirs=[],
                memory_limit="per process (RLIMIT_AS)", workdir_root=None)
    if info["root"]:
        info["uid"] = UID_BASE + os.getpid()
        _CGROUP = Cgroup.join(os.getpid())
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


def cgroup() -> Cgroup | None:
    """The worker's cgroup (CPU seconds, OOM kills, tasks of its process tree), or None."""
    return _CGROUP


def end_job(info: dict) -> None:
    """In the worker, after a job's process ended: every tmpfs a test of that job used is
    unmounted, so the next job's first test mounts fresh ones (not one reused across jobs: even
    an untouched tmpfs carries its inode counter, which O_TMPFILE moves without a trace in the
    directory)."""
    if info["mount_namespace"]:
        for path in (WORKDIR, SHMDIR):
            while _LIBC.umount2(path.encode(), MNT_DETACH) == 0:   # EINVAL: none left
                pass
            _TMPFS.pop(path, None)


def confine_job() -> None:
    """In a job process, forked by the worker for one job: it dies with the worker, and the
    orphans its tests leave come to it (so "no child left" means no process of a test lives)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1)


def test_workdir(info: dict) -> str:
    """A fresh, empty working directory for the next test, owned by the test uid: with a mount
    namespace a tmpfs on WORKDIR (and a fresh one on /dev/shm), else a temporary directory."""
    uid = info["uid"]
    if info["mount_namespace"]:
        _test_tmpfs(WORKDIR, f"size={TMPFS_SIZE},nr_inodes=16384,mode=0700,uid={uid},gid={uid}")
        _test_tmpfs(SHMDIR, f"size={SHM_SIZE},nr_inodes=1024,mode=1777")
        return WORKDIR
    import tempfile
    workdir = tempfile.mkdtemp(dir=info["workdir_root"])
    if uid is not None:
        os.chown(workdir, uid, uid)
    return workdir


def own_pipes(uid: int | None, fds) -> None:
    """The test uid owns the pipes of its stdout and stderr, as the user of `python3 sol.py |
    ...` owns the shell's: opening /dev/stdout (a reopen through /proc/self/fd) then works."""
    if uid is not None:
        for fd in fds:
            os.fchown(fd, uid, uid)


def clear_workdir(info: dict, workdir: str) -> None:
    """After the test's processes are dead: remove whatever it wrote."""
    if info["mount_namespace"]:
        for path in (WORKDIR, SHMDIR):
            if not _untouched(path):   # one unmount removes whatever tree the test left
                _LIBC.umount2(path.encode(), MNT_DETACH)
                del _TMPFS[path]
    else:
        _remove_tree(workdir)


def confine_test(workdir: str, uid: int | None, memory_mb: int, timeout: float,
                 keep_fds: int) -> None:
    """In the forked test child, before the program runs: its own session, no fd from keep_fds
    on, `workdir` as working directory, resource limits, the test uid (root), no_new_privs and
    the seccomp filter, the minimal environment. Exits with status 112 if the filter fails."""
    import resource
    os.setsid()
    top = resource.getrlimit(resource.RLIMIT_NOFILE)[0]   # no fd of ours is at or above it
    os.closerange(keep_fds, top if 0 < top < (1 << 20) else 1 << 20)   # close_range(2)
    os.chdir(workdir)
    cpu = math.ceil(timeout) + 1   # a backstop: the worker judges the tree's CPU time
    limits = [(resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu),
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
    os.environ.update(minimal_env(workdir))


def hide_process() -> None:
    """In a check test's checker, which runs as the test uid beside the program: not dumpable,
    so the program's processes cannot open its /proc files (its memory: the check code and the
    expected values; its fds: the pipes of the calls), also without the uid drop."""
    _LIBC.prctl(PR_SET_DUMPABLE, 0)


def release_worker(pid: int, info: dict, clean: bool) -> None:
    """In the parent, after worker `pid` ended (clean: it exited with status 0 on EOF): kill
    what its test uid left if it did not end cleanly, remove its cgroup directories."""
    if not clean and os.geteuid() == 0:   # killed mid-test: its uid's processes may live on
        _kill_uid_from_parent(UID_BASE + pid)
    for path in info.get("cgroup_dirs", []):   # empty once its processes are gone
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


def minimal_env(home: str) -> dict:
    """The whole environment of a worker, a test and the parent's `kill`."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": home,
            "LANG": "C.UTF-8"}


def leave_worker(info: dict) -> None:
    """The worker's last call: remove its temporary directory (none with a mount namespace)."""
    if info["workdir_root"] != "/tmp":
        _remove_tree(info["workdir_root"])


def _remove_tree(path: str):
    """Remove a directory tree whatever the program did to it (depth, permissions)."""
    import shutil
    try:
        shutil.rmtree(path)
    except BaseException:   # RecursionError on deep trees, EACCES on chmod 0 directories
        subprocess.run(["chmod", "-R", "u+rwx", path], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["rm", "-rf", path], stderr=subprocess.DEVNULL, check=False)


# ---------------------------------------------------------------------------------------------
# The worker: pid namespace, cgroup
# ---------------------------------------------------------------------------------------------

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


class Cgroup:
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
    def join(cls, pid: int) -> Cgroup | None:
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


# --- tmpfs of a test ----------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Killing what a test left
# ---------------------------------------------------------------------------------------------

def kill_leftovers(uid: int | None, tasks0: int = 0, limit_s: float = 10.0):
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
                           env=minimal_env("/"), check=False, cwd="/",
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
