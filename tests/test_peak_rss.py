"""bench/peak_rss.py: the process tree it sums and what it reads from /proc (a fake /proc),
and one real command watched."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import peak_rss  # noqa: E402


def fake_proc(tmp_path, procs):
    """procs: {pid: (comm, ppid, rss_kb, pss_kb[, private_kb])} -> a directory laid out as
    /proc (Pss_Anon: half the PSS; private pages: the PSS unless given)."""
    for pid, (comm, ppid, rss, pss, *private) in procs.items():
        private = private[0] if private else pss
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} 0 0 -1\n")
        (d / "smaps_rollup").write_text(
            f"00400000-7fff [rollup]\nRss:            {rss} kB\nPss:            {pss} kB\n"
            f"Pss_Anon:       {pss // 2} kB\nShared_Clean:      0 kB\n"
            f"Private_Clean:      {private // 4} kB\nPrivate_Dirty: {private - private // 4} kB\n")
    (tmp_path / "self").mkdir()          # not a pid: skipped
    return str(tmp_path)


def test_the_tree_is_the_root_and_its_descendants_only():
    parents = {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1, 21: 20}
    assert peak_rss.tree(10, parents) == {10, 11, 12, 13}
    assert peak_rss.tree(13, parents) == {13}
    assert peak_rss.tree(1, parents) == set(parents)


def test_a_sample_sums_rss_and_pss_over_the_tree(tmp_path):
    """A trainer (10) with two workers, one of them with a child; a stranger (20) beside it.
    A comm with spaces and parentheses does not shift the parent's field."""
    proc = fake_proc(tmp_path, {1: ("init", 0, 1, 1), 10: ("python", 1, 2000, 1500),
                                11: ("w (1) x", 10, 300, 100), 12: ("worker", 10, 300, 100),
                                13: ("prog", 12, 50, 50), 20: ("other", 1, 9000, 9000)})
    assert peak_rss.parent_map(proc) == {1: 0, 10: 1, 11: 10, 12: 10, 13: 12, 20: 1}
    sums, per = peak_rss.sample(10, proc)
    assert sums == (2650, 1750, 2000, 875) and per == {10: 1500, 11: 100, 12: 100, 13: 50}
    rollup = "Rss: 7 kB\nPss: 3 kB\nPss_Dirty: 2 kB\nPss_Anon: 1 kB\n"
    assert peak_rss.rollup_kb(rollup) == (7, 3, 1, 0)
    assert peak_rss.rollup_kb("Rss: 7 kB\nPss: 3 kB\n") == (7, 3, 0, 0)     # an older kernel


def test_a_child_in_its_parents_memory_is_not_counted_twice(tmp_path):
    """Between vfork and exec a child runs in its parent's memory: /proc shows it the parent's
    figures, private pages included (read a moment later: a few kB off). A fork's child
    shares pages copy-on-write: private to neither, each counted with its split PSS."""
    proc = fake_proc(tmp_path, {10: ("python", 1, 2000, 1500, 1400),
                                11: ("python", 10, 2003, 1502, 1401),     # vfork: skipped
                                13: ("worker", 11, 300, 100),
                                20: ("python", 1, 2000, 750, 50),         # a fork's twins:
                                21: ("python", 20, 2000, 750, 50)})       # both counted
    sums, per = peak_rss.sample(10, proc)
    assert sums == (2300, 1600, 2000, 800) and set(per) == {10, 13}
    sums, per = peak_rss.sample(20, proc)
    assert sums == (4000, 1500, 2000, 750) and set(per) == {20, 21}
    rollup = "Rss: 9 kB\nPss: 5 kB\nPrivate_Clean: 1 kB\nPrivate_Dirty: 3 kB\n"
    assert peak_rss.rollup_kb(rollup) == (9, 5, 0, 4)


def test_a_moment_of_double_counting_is_a_peak_but_not_a_held_peak():
    """A fork caught between two reads doubles one sample; the held peak is what two samples
    in a row reached."""
    samples = [(100, 90, 100), (1000, 950, 1000), (2000, 1000, 1000), (1100, 1000, 1000),
               (1200, 1000, 1000), (500, 400, 500)]
    assert peak_rss.peaks(samples) == ((2000, 1000, 1000), (1100, 1000, 1000))
    assert peak_rss.peaks([(5, 4, 3)]) == ((5, 4, 3), (0, 0, 0))
    assert peak_rss.peaks([]) == ((0, 0, 0), (0, 0, 0))


def test_watch_samples_a_real_tree_and_passes_its_exit_status_on():
    """A child that holds ~100 MB in its own child for a while: the tree's peak sees it (the
    largest process alone does too); the command's exit status comes back."""
    hold = "b = bytearray(100 * 2**20); import time; time.sleep(1.5)"
    code = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', {hold!r}]); "
            "sys.exit(3)")
    out = peak_rss.watch([sys.executable, "-c", code], every=0.05,
                         stdout=subprocess.DEVNULL)
    assert out["returncode"] == 3 and out["samples"] >= 2
    assert out["peak_pss_tree_held_mb"] >= 90 and out["peak_rss_process_mb"] >= 90
    assert out["peak_rss_tree_mb"] >= out["peak_rss_process_mb"]
    assert 90 <= out["peak_anon_tree_held_mb"] <= out["peak_pss_tree_held_mb"]   # the bytearray
