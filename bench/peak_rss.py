"""Peak memory of a command's whole process tree (GNU time's maximum RSS is its largest process
only: a training's sandbox workers and torchrun's ranks are left out).

    .venv/bin/python bench/peak_rss.py [--every 0.5] [--out FILE] [--trace FILE] -- CMD [ARGS...]

Every --every seconds it reads /proc for the command and every process descended from it.
RSS counts the pages that processes share (a forked worker's copy of its parent) once in each;
PSS splits each shared page between its sharers (/proc/PID/smaps_rollup), so the PSS sum is
the tree's real footprint. Both count library code (libtorch's pages: file-backed, shared
with every other torch process on the machine, so PSS moves with how many run); Pss_Anon
counts only what the processes allocated (heaps, tensors, caches): its sum over the tree, the
anon figure, is what a framework's work decides, whatever else runs. A sample reads one
process after the other, so a fork or an exec between two reads can count shared pages twice
for a moment (a 1 GB trainer that starts a small worker looks 1.5 GB): the *_held figures are
the largest values that two consecutive samples both reached, which such a moment does not.
Prints one JSON line (and writes it to --out): peak_{pss,rss,anon}_tree_mb and each one's
*_held_mb, peak_rss_process_mb, samples, wall_s, returncode; exits with the command's status.
A process born and gone between two samples is missed: sample faster for short ones.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


def parent_map(proc: str = "/proc") -> dict[int, int]:
    """{pid: parent pid} of every process now running."""
    out = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as f:
                stat = f.read()
        except OSError:          # gone since listdir
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        out[int(name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    return out


def tree(root: int, parents: dict[int, int]) -> set[int]:
    """root and every process descended from it, from a {pid: parent pid} map."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


ROLLUP_FIELDS = ("Rss", "Pss", "Pss_Anon", "Private_Clean", "Private_Dirty")


def rollup_kb(rollup: str) -> tuple[int, int, int, int]:
    """(Rss, Pss, Pss_Anon, Private_Clean + Private_Dirty) in kB from the text of
    /proc/PID/smaps_rollup (0 for a field it lacks)."""
    fields = {}
    for line in rollup.splitlines():
        key, _, rest = line.partition(":")
        if key in ROLLUP_FIELDS:
            fields[key] = int(rest.split()[0])
    rss, pss, anon, clean, dirty = (fields.get(k, 0) for k in ROLLUP_FIELDS)
    return rss, pss, anon, clean + dirty


def same_memory(child: tuple, parent: tuple, tol: float = 0.01) -> bool:
    """Whether a child's rollup (rollup_kb) is its parent's own memory: a child between vfork
    and exec (how subprocess starts a program) runs in its parent's address space, so /proc
    shows it the parent's pages, private ones included, and summing both counts them twice.
    Its RSS and private pages match the parent's (to tol, as the two are read a moment apart)
    and most of its pages are private. A fork's child shares its parent's pages copy-on-write:
    they are private to neither, and it is counted."""
    rss, _, _, private = child
    close = all(abs(c - p) <= tol * max(p, 1) for c, p in ((rss, parent[0]),
                                                           (private, parent[3])))
    return close and private > rss / 2


def sample(root: int, proc: str = "/proc") -> tuple[tuple[int, int, int, int], dict[int, int]]:
    """((RSS summed over the tree, PSS summed, the largest process's RSS, Pss_Anon summed),
    {pid: its PSS}), in kB; a child in its parent's memory (same_memory) is left out."""
    parents = parent_map(proc)
    read = {}
    for pid in tree(root, parents):
        try:
            with open(os.path.join(proc, str(pid), "smaps_rollup")) as f:
                read[pid] = rollup_kb(f.read())
        except OSError:          # gone, or a kernel thread
            continue
    rss_sum = pss_sum = rss_max = anon_sum = 0
    per = {}
    for pid, figures in read.items():
        parent = read.get(parents.get(pid)) if pid != root else None
        if parent and same_memory(figures, parent):
            continue
        rss, pss, anon, _ = figures
        rss_sum, pss_sum, rss_max = rss_sum + rss, pss_sum + pss, max(rss_max, rss)
        anon_sum += anon
        per[pid] = pss
    return (rss_sum, pss_sum, rss_max, anon_sum), per


def largest(per: dict[int, int], n: int = 3, proc: str = "/proc") -> str:
    """The n processes with the most PSS, "name:MB" each (name from /proc/PID/comm)."""
    out = []
    for pid, pss in sorted(per.items(), key=lambda x: -x[1])[:n]:
        try:
            with open(os.path.join(proc, str(pid), "comm")) as f:
                name = f.read().strip()
        except OSError:
            name = str(pid)
        out.append(f"{name}:{pss // 1024}")
    return " ".join(out)


def peaks(samples: list[tuple]) -> tuple[tuple, tuple]:
    """(the largest value of each field over the samples, the largest value of each field that
    two consecutive samples both reached); zeros for no samples."""
    width = len(samples[0]) if samples else 3
    peak = tuple(max((s[i] for s in samples), default=0) for i in range(width))
    held = tuple(max((min(x[i], y[i]) for x, y in zip(samples, samples[1:])), default=0)
                 for i in range(width))
    return peak, held


def watch(cmd: list[str], every: float = 0.5, trace: str | None = None, **popen) -> dict:
    """Run cmd (popen: subprocess.Popen's keywords, e.g. cwd) and sample its process tree
    every `every` seconds until it exits -> the peaks in MB (see the module's docstring),
    samples, wall_s and returncode. trace: a line a sample to this file."""
    t0 = time.monotonic()
    child = subprocess.Popen(cmd, **popen)
    samples = []
    log = open(trace, "w") if trace else None
    try:
        while child.poll() is None:
            now, per = sample(child.pid)
            samples.append(now)
            if log:
                log.write(f"{time.monotonic() - t0:.2f} {now[0] // 1024} {now[1] // 1024} "
                          f"{now[3] // 1024} {largest(per)}\n")
            time.sleep(every)
    finally:
        if log:
            log.close()
        if child.poll() is None:     # interrupted: do not leave the command running
            child.kill()
            child.wait()
    peak, held = peaks(samples)
    mb = 1024.0
    return dict(peak_pss_tree_mb=round(peak[1] / mb, 1),
                peak_pss_tree_held_mb=round(held[1] / mb, 1),
                peak_rss_tree_mb=round(peak[0] / mb, 1),
                peak_rss_tree_held_mb=round(held[0] / mb, 1),
                peak_anon_tree_mb=round(peak[3] / mb, 1),
                peak_anon_tree_held_mb=round(held[3] / mb, 1),
                peak_rss_process_mb=round(peak[2] / mb, 1), samples=len(samples),
                wall_s=round(time.monotonic() - t0, 1), returncode=child.returncode)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--every", type=float, default=0.5, help="seconds between samples")
    p.add_argument("--out", default=None, help="also write the JSON line here")
    p.add_argument("--trace", default=None,
                   help="write a line a sample here: seconds, RSS, PSS and Pss_Anon of the tree "
                        "(MB), the 3 processes with the most PSS")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    a = p.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command: peak_rss.py [--every S] -- CMD [ARGS...]")
    result = watch(cmd, every=a.every, trace=a.trace)
    line = json.dumps(result)
    print(line, file=sys.stderr, flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    return result["returncode"]


if __name__ == "__main__":
    sys.exit(main())
