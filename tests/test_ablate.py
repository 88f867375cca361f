"""bench/ablate.py on a fake trainer (no model): the report's numbers by hand, resume, failing
cells, --jobs 2, extra metrics, Ctrl-C; and the named grids against the entry points' parsers.

The fake trainer (written into tmp_path) writes summary.json and metrics.jsonl with numbers
that are functions of --seed, appends "<config>/seed<S>" to a counter file on every run, and
fails on demand; nothing here trains a model.
"""
import importlib.util
import json
import math
import os
import signal
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ablate  # noqa: E402

FAKE = r'''
import argparse, json, os, subprocess, sys, time
p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, required=True)
p.add_argument("--out", required=True)
p.add_argument("--counter", required=True)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--bonus", type=float, default=0.0)
p.add_argument("--fail-on", type=int, default=-1)
p.add_argument("--agents", action="store_true")
p.add_argument("--train", action="store_true")
p.add_argument("--needs", default="")
p.add_argument("--hang", default="")
a = p.parse_args()
cell = "/".join(os.path.normpath(a.out).split(os.sep)[-2:])
with open(a.counter, "a") as f:
    f.write(cell + "\n")
print("fake trainer", cell, flush=True)
if a.needs and not os.path.isfile(a.needs):
    sys.exit("missing " + a.needs)
if a.hang:       # a child in the same process group, then wait to be stopped
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    with open(a.hang + ".tmp", "w") as f:
        json.dump([os.getpid(), child.pid], f)
    os.rename(a.hang + ".tmp", a.hang)
    time.sleep(120)
rendezvous = os.environ.get("FAKE_RENDEZVOUS")
if rendezvous:   # wait until a second cell is running at the same time
    open(os.path.join(rendezvous, cell.replace("/", "_")), "w").close()
    deadline = time.time() + 60
    while len(os.listdir(rendezvous)) < 2:
        if time.time() > deadline:
            sys.exit("no second cell ran alongside")
        time.sleep(0.05)
if a.seed == a.fail_on:
    print("boom: seed", a.seed, flush=True)
    sys.exit(3)
s = a.seed
before = 0.1 + 0.02 * s
after = 0.3 + 0.05 * s + 0.03 * s * (s - 1) + a.bonus
key = "pass@1_after_turns" if a.agents else "pass@1"
rows = [{"phase": "sft", "step": 1, "nll": 1.0, "fgo_masked_share": 9.0},
        {"phase": "eval", "when": "before_rl", key: before}]
for i in range(1, a.steps + 1):
    rows.append({"phase": "rl", "step": i, "fgo_masked_share": 0.1 * i + 0.01 * s})
    if i == 2:
        rows.append({"phase": "eval", "when": "step_2", "step": 2, key: (before + after) / 2})
rows.append({"phase": "eval", "when": "after_rl", key: after})
rows.append({"phase": "eval", "when": "train_after_rl", "step": a.steps, key: 0.99})
with open(os.path.join(a.out, "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in rows)
summary = {"pass_at_1_before_rl": before, "pass_at_1_after_rl": after,
           "pass_at_1_gain": after - before, "wall_seconds": 10.0 * (s + 1), "seed": s,
           "steps": a.steps, "eval_k": 4, "pass_at_k_after_rl": after + 0.1}
if a.train:
    summary["train_pass_at_1_after_rl"] = after + 0.2
if a.agents:
    summary["before_rl"] = {"pass@1_coder_alone": 0.05, "pass@1_after_turns": before}
    summary["after_rl"] = {"pass@1_coder_alone": 0.1 * s, "pass@1_after_turns": after}
with open(os.path.join(a.out, "summary.json"), "w") as f:
    json.dump(summary, f)
'''

HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture
def env(tmp_path):
    fake = tmp_path / "fake_trainer.py"
    fake.write_text(FAKE)
    counter = tmp_path / "counter.txt"
    counter.touch()

    class Env:
        def cmd(self, *extra):
            return [str(fake), "--counter", str(counter), *extra]

        def grid(self, configs, name="grid"):
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(configs))
            return str(path)

        def runs(self):
            lines = counter.read_text().split()
            return {c: lines.count(c) for c in set(lines)}

        def main(self, grid, out, *flags):
            return ablate.main(["--grid", grid, "--out", str(tmp_path / out), *flags])

        def report(self, out):
            with open(tmp_path / out / "ablation.json") as f:
                return {c["name"]: c for c in json.load(f)["configs"]}

        def md(self, out):
            return (tmp_path / out / "ablation.md").read_text()

    e = Env()
    e.tmp = tmp_path
    return e


def test_mean_and_sample_std():
    assert ablate.mean_std([]) == {"mean": None, "std": None, "n": 0}
    assert ablate.mean_std([0.5]) == {"mean": 0.5, "std": None, "n": 1}
    s = ablate.mean_std([1.0, 2.0, 4.0])
    assert s["mean"] == pytest.approx(7 / 3)
    assert s["std"] == pytest.approx(math.sqrt((16 / 9 + 1 / 9 + 25 / 9) / 2))   # n - 1
    assert ablate.fmt({"mean": 0.25, "std": None, "n": 1}, signed=True) == "+0.250 ± -"


def test_report_numbers_match_hand_worked(env):
    grid = env.grid([{"name": "a", "group": "G", "cmd": env.cmd()},
                     {"name": "one", "group": "G", "cmd": env.cmd(), "seeds": [1]}])
    assert env.main(grid, "out") == 0
    r = env.report("out")
    st = r["a"]["stats"]
    # after = 0.30, 0.35, 0.46; before = 0.10, 0.12, 0.14; gain = 0.20, 0.23, 0.32
    assert st["pass_at_1_after_rl"]["mean"] == pytest.approx(0.37)
    assert st["pass_at_1_after_rl"]["std"] == pytest.approx(math.sqrt(0.0134 / 2))
    assert st["pass_at_1_before_rl"]["mean"] == pytest.approx(0.12)
    assert st["pass_at_1_before_rl"]["std"] == pytest.approx(0.02)
    assert st["pass_at_1_gain"]["mean"] == pytest.approx(0.25)
    assert st["pass_at_1_gain"]["std"] == pytest.approx(math.sqrt(0.0078 / 2))
    assert st["wall_seconds"]["mean"] == pytest.approx(20.0)
    assert st["train_pass_at_1_after_rl"]["n"] == 0
    assert r["a"]["per_seed"]["2"]["pass_at_1_after_rl"] == pytest.approx(0.46)
    assert r["a"]["seeds_done"] == 3 and r["a"]["k"] == 4
    # the curve: x from "step", before_rl -> 0, after_rl -> the summary's steps
    c = r["a"]["curve"]
    assert c["step"] == [0, 2, 4]
    assert c["mean"] == pytest.approx([0.12, (0.12 + 0.37) / 2, 0.37])
    assert c["min"][2] == pytest.approx(0.30) and c["max"][2] == pytest.approx(0.46)
    # the picture's curve: each seed's change since its own step 0 (gains .20, .23, .32)
    g = r["a"]["gain_curve"]
    assert g["step"] == [0, 2, 4] and g["mean"][0] == pytest.approx(0.0)
    assert g["mean"][2] == pytest.approx(0.25)
    assert g["min"][2] == pytest.approx(0.20) and g["max"][2] == pytest.approx(0.32)
    md = env.md("out")
    row = next(x for x in md.splitlines() if x.startswith("| G | a |"))
    assert "| 3/3 |" in row and "0.120 ± 0.020" in row and "0.370 ± 0.082" in row
    assert "+0.250 ± 0.062" in row and "0.470 ± 0.082 (k=4)" in row and "| 20 |" in row
    assert f"`python {env.cmd()[0]} --counter {env.cmd()[2]} --seed {{0,1,2}}`" in row
    assert "train pass@1" not in md        # no summary has it: the column is left out
    one = next(x for x in md.splitlines() if x.startswith("| G | one |"))
    assert "| 1/1 |" in one and "0.350 ± -" in one and "--seed 1`" in one
    if HAS_MPL:
        assert (env.tmp / "out" / "ablation.png").stat().st_size > 1000


def test_without_matplotlib_the_picture_is_skipped_with_one_line(env, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError
    grid = env.grid([{"name": "a", "cmd": env.cmd(), "seeds": [0]}])
    assert env.main(grid, "out") == 0
    out = capsys.readouterr().out
    assert sum("matplotlib is not installed" in line for line in out.splitlines()) == 1
    assert not (env.tmp / "out" / "ablation.png").exists()
    assert (env.tmp / "out" / "ablation.md").exists()


def test_resume_reruns_only_changed_and_unfinished_cells(env):
    cfgs = [{"name": "a", "group": "G", "cmd": env.cmd(), "seeds": [0, 1]},
            {"name": "b", "group": "G", "cmd": env.cmd(), "seeds": [0, 1]}]
    assert env.main(env.grid(cfgs), "out") == 0
    assert env.runs() == {"a/seed0": 1, "a/seed1": 1, "b/seed0": 1, "b/seed1": 1}
    # a/seed1 interrupted (cmd.json, no summary), b's command edited
    a1 = env.tmp / "out" / "cells" / "a" / "seed1"
    (a1 / "summary.json").unlink()
    (a1 / "stale.txt").write_text("from the interrupted run")
    cfgs[1]["cmd"] = env.cmd("--bonus", "0.5")
    assert env.main(env.grid(cfgs), "out") == 0
    assert env.runs() == {"a/seed0": 1, "a/seed1": 2, "b/seed0": 2, "b/seed1": 2}
    assert not (a1 / "stale.txt").exists()           # re-run from an emptied folder
    r = env.report("out")
    assert r["b"]["stats"]["pass_at_1_after_rl"]["mean"] == pytest.approx(0.325 + 0.5)
    assert "--bonus 0.5" in r["b"]["command"]
    # everything finished: a third run starts nothing; --report-only runs nothing either
    assert env.main(env.grid(cfgs), "out") == 0
    assert env.main(env.grid(cfgs), "out", "--report-only") == 0
    assert env.runs() == {"a/seed0": 1, "a/seed1": 2, "b/seed0": 2, "b/seed1": 2}


def test_failing_cell_is_reported_and_the_grid_goes_on(env):
    needs = "{out}/cells/flaky/seed{seed}/summary.json"   # placeholders filled per cell
    grid = env.grid([
        {"name": "flaky", "group": "G", "cmd": env.cmd("--fail-on", "1")},
        {"name": "after-flaky", "group": "G", "cmd": env.cmd("--needs", needs),
         "after": ["flaky"]},
        {"name": "ok", "group": "H", "cmd": env.cmd()}])
    assert env.main(grid, "out", "--jobs", "2") == 1          # some cell failed
    runs = env.runs()
    assert runs["flaky/seed1"] == 1 and "after-flaky/seed1" not in runs   # never started
    assert runs["after-flaky/seed0"] == 1 and runs["after-flaky/seed2"] == 1
    failed = json.loads((env.tmp / "out/cells/flaky/seed1/failed.json").read_text())
    assert failed["rc"] == 3 and failed["last_line"] == "boom: seed 1"
    r = env.report("out")
    assert r["flaky"]["seeds_done"] == 2 and r["flaky"]["failed"][0]["seed"] == 1
    assert r["flaky"]["stats"]["pass_at_1_after_rl"]["mean"] == pytest.approx((0.30 + 0.46) / 2)
    assert r["after-flaky"]["seeds_done"] == 2 and r["ok"]["seeds_done"] == 3
    md = env.md("out")
    assert "| G | flaky | 2/3 (1 failed) |" in md and "- flaky seed 1: rc 3: `boom: seed 1`" in md
    assert "- after-flaky seed 1: rc None: `not run: flaky seed 1 did not finish`" in md
    # the failed cells are not finished: the next run retries them (and only them)
    assert env.main(grid, "out") == 1
    runs = env.runs()
    assert runs["flaky/seed1"] == 2 and runs["flaky/seed0"] == 1 and runs["ok/seed0"] == 1


def test_jobs_2_runs_two_at_once_and_gives_the_same_report(env, monkeypatch):
    cfgs = [{"name": "a", "group": "G", "cmd": env.cmd()},
            {"name": "b", "group": "H", "cmd": env.cmd("--agents"),
             "metrics": ["after_rl.pass@1_coder_alone"]}]
    grid = env.grid(cfgs)
    assert env.main(grid, "one", "--jobs", "1") == 0
    meet = env.tmp / "rendezvous"
    meet.mkdir()
    # each cell waits until a second one runs beside it: fails unless two run at once
    monkeypatch.setenv("FAKE_RENDEZVOUS", str(meet))
    assert env.main(grid, "two", "--jobs", "2") == 0
    assert len(os.listdir(meet)) == 6
    assert env.report("one") == env.report("two")
    assert env.md("one") == env.md("two")


def test_nested_summary_keys_and_metrics_jsonl_means(env):
    metrics = ["after_rl.pass@1_coder_alone", "metrics.jsonl:fgo_masked_share",
               "after_rl.not_there"]
    grid = env.grid([{"name": "team", "group": "AT", "cmd": env.cmd("--agents"),
                      "metrics": metrics},
                     {"name": "plain", "group": "AT", "cmd": env.cmd("--train")}])
    assert env.main(grid, "out") == 0
    r = env.report("out")
    st = r["team"]["stats"]
    assert st["after_rl.pass@1_coder_alone"]["mean"] == pytest.approx(0.1)
    assert st["after_rl.pass@1_coder_alone"]["std"] == pytest.approx(0.1)
    # mean over rl steps 1..4 of 0.1 i + 0.01 s = 0.25 + 0.01 s, then over seeds 0, 1, 2
    assert st["metrics.jsonl:fgo_masked_share"]["mean"] == pytest.approx(0.26)
    assert st["metrics.jsonl:fgo_masked_share"]["std"] == pytest.approx(0.01)
    assert st["after_rl.not_there"]["n"] == 0
    assert r["team"]["curve"]["mean"][-1] == pytest.approx(0.37)   # pass@1_after_turns
    lines = env.md("out").splitlines()
    head = next(x for x in lines if x.startswith("| group |")).split(" | ")
    team = next(x for x in lines if x.startswith("| AT | team |")).split(" | ")
    plain = next(x for x in lines if x.startswith("| AT | plain |")).split(" | ")
    col = head.index("after_rl.pass@1_coder_alone")
    assert team[col] == "0.100 ± 0.100" and plain[col] == ""       # not asked for by plain
    assert team[head.index("metrics.jsonl:fgo_masked_share")] == "0.260 ± 0.010"
    assert team[head.index("after_rl.not_there")] == "-"
    col = head.index("train pass@1 after RL")
    assert plain[col] == "0.570 ± 0.082" and team[col] == "-"


def _stop_while_the_cell_runs(env, monkeypatch, stop) -> None:
    """Run a grid of one hanging cell; the runner's first wait after the cell is up records
    the cell's pids and calls stop() (in-process: a signal sent from outside races with a
    loaded machine's scheduling). Then: exit 130, the cell's whole process group (trainer and
    its child) is gone, the report is written with the cell unfinished."""
    hang = env.tmp / "pids.json"
    grid = env.grid([{"name": "slow", "group": "G", "cmd": env.cmd("--hang", str(hang)),
                      "seeds": [0]}])
    real_sleep, pids = time.sleep, []

    def sleep(seconds):
        if hang.exists() and not pids:
            # (pid, start time): pids wrap quickly on a busy machine, so "alive" must mean
            # the same process, not another one that got the number since.
            pids.extend((pid, start_time(pid)) for pid in json.loads(hang.read_text()))
            stop()
        real_sleep(seconds)
    monkeypatch.setattr(ablate.time, "sleep", sleep)
    assert env.main(grid, "out") == 130
    assert len(pids) == 2
    for pid, started in pids:  # the trainer and its child are gone (or zombies awaiting init)
        deadline = time.time() + 30
        while alive(pid, started) and time.time() < deadline:
            real_sleep(0.05)
        assert not alive(pid, started), pid
    assert (env.tmp / "out" / "ablation.md").exists()
    assert env.report("out")["slow"]["seeds_done"] == 0


def test_ctrl_c_stops_the_running_cells(env, monkeypatch):
    def ctrl_c():
        raise KeyboardInterrupt
    _stop_while_the_cell_runs(env, monkeypatch, ctrl_c)


def start_time(pid: int):
    """Field 22 of /proc/PID/stat (clock ticks since boot); None when there is no such pid."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def alive(pid: int, started=None) -> bool:
    """A running (not zombie) process with this pid and, when given, this start time."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
            return fields[0] != "Z" and (started is None or fields[19] == started)
    except OSError:
        return False


@pytest.mark.parametrize("bad, message", [
    (None, "no such grid"),
    ("[{", "not valid JSON"),
    ("[]", "non-empty JSON list"),
    ('[{"name": "a", "cmd": ["x.py"]}, {"name": "a", "cmd": ["y.py"]}]', "appears twice"),
    ('[{"name": "a/b", "cmd": ["x.py"]}]', "folder-safe"),
    ('[{"name": "a", "cmd": ["x.py", "--seed", "1"]}]', "must not set --seed"),
    ('[{"name": "a", "cmd": ["x.py"], "after": ["b"]}]', "not an earlier config"),
    ('[{"name": "a", "cmd": ["x.py"], "seed": [1]}]', "unknown keys"),
])
def test_grid_mistakes_are_one_line_exit_2(env, capsys, bad, message):
    grid = "no-such-grid" if bad is None else str(env.tmp / "bad.json")
    if bad is not None:
        (env.tmp / "bad.json").write_text(bad)
    with pytest.raises(SystemExit) as e:
        ablate.main(["--grid", grid, "--out", str(env.tmp / "out")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and err.count("\n") == 1
    assert not (env.tmp / "out").exists()


def test_only_matching_nothing_and_bad_flags_exit_2(env, capsys):
    grid = env.grid([{"name": "a", "cmd": env.cmd()}])
    for flags, message in ([["--only", "zzz"], "matches no config"],
                           [["--seeds", "0,x"], "comma list of integers"],
                           [["--jobs", "0"], "positive integer"]):
        with pytest.raises(SystemExit) as e:
            env.main(grid, "out", *flags)
        err = capsys.readouterr().err
        assert e.value.code == 2 and message in err and err.count("\n") == 1
    assert env.runs() == {}


def test_dry_run_and_only_select_cells_without_running(env, capsys):
    grid = env.grid([{"name": "alpha", "cmd": env.cmd()}, {"name": "beta", "cmd": env.cmd()}])
    assert env.main(grid, "out", "--dry-run", "--only", "bet", "--seeds", "4,5") == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all("OMP_NUM_THREADS=1" in x and "cells/beta/seed" in x for x in out)
    assert out[0].endswith(f"--seed 4 --out {env.tmp}/out/cells/beta/seed4")
    assert env.runs() == {} and not (env.tmp / "out").exists()


def test_only_with_equals_selects_one_name_exactly(env, capsys):
    # "ppo" is a substring of "ppo-fgo": the plain form takes both, =ppo only the first
    grid = env.grid([{"name": "ppo", "cmd": env.cmd()}, {"name": "ppo-fgo", "cmd": env.cmd()}])
    for only, dirs in (("ppo", {"ppo", "ppo-fgo"}), ("=ppo", {"ppo"}), ("=ppo-fgo", {"ppo-fgo"}),
                       ("=ppo,fgo", {"ppo", "ppo-fgo"})):
        assert env.main(grid, "out", "--dry-run", "--only", only, "--seeds", "0") == 0
        out = capsys.readouterr().out.splitlines()
        assert {line.split("/cells/")[1].split("/")[0] for line in out} == dirs, only
    with pytest.raises(SystemExit) as e:
        env.main(grid, "out", "--only", "=pp")
    assert e.value.code == 2 and "matches no config" in capsys.readouterr().err
    assert env.runs() == {}


# ----------------------------------------------------------------------------- the named grids

def test_named_grids_use_only_flags_the_entry_points_accept(tmp_path):
    """Every command of the named grids parses with its entry point's own parser (the preset
    logic and flag checks included): the test that catches a stale grid."""
    import agents
    import grpo
    import ppo_fgo
    entry = {"grpo.py": grpo, "ppo_fgo.py": ppo_fgo, "agents.py": agents}
    out = str(tmp_path / "grid")
    for name, grid in ablate.GRIDS.items():
        parsed = {}
        for cfg in ablate.validate(grid, [0, 1, 2]):
            script = cfg["cmd"][0]
            assert script in entry and os.path.isfile(os.path.join(ROOT, script)), (name, cfg)
            argv = ablate.cell_command(cfg, 2, out)[1:] + ["--out", str(tmp_path / cfg["name"])]
            args = entry[script].parse_args(argv)       # SystemExit(2) on an unknown flag
            assert args.seed == 2 and "{" not in " ".join(argv), cfg["name"]
            parsed[cfg["name"]] = args
        if name == "length":
            # DRIVE on the short chains: both stage-2 arms from stage 1's last checkpoint,
            # the same rollouts a step and steps; only the hard-focus arm filters and focuses
            cont, hard = parsed["drive-chain-continue"], parsed["drive-chain-hard"]
            assert cont.model == hard.model == os.path.join(
                out, "cells", "drive-chain-s1", "seed2", "step_40")
            assert parsed["drive-chain-s1"].save_every == parsed["drive-chain-s1"].steps == 40
            assert (cont.prompts_per_step * cont.group_size, cont.steps, cont.lr) == (
                hard.prompts_per_step * hard.group_size, hard.steps, hard.lr)
            assert hard.hard_focus and hard.offline_filter and not cont.hard_focus
            assert not cont.offline_filter and cont.eval_data == hard.eval_data
            # AT-GRPO on the short chains: shared and per-role from their own warm cell's
            # checkpoint, at the same budget, held out on length_test's chain_short
            for warm in ("agents-chain", "agents-chain600"):
                w = parsed[f"{warm}-warm"]
                sh, pr = parsed[f"{warm}-shared"], parsed[f"{warm}-per-role"]
                assert w.steps == 0 and w.save_every > 0 and w.sft_steps > 0
                assert sh.model == pr.model == os.path.join(
                    out, "cells", f"{warm}-warm", "seed2", "step_0")
                assert (sh.policy, pr.policy) == ("shared", "per-role")
                assert (sh.steps, sh.prompts_per_step, sh.group_size, sh.sft_steps) == (
                    pr.steps, pr.prompts_per_step, pr.group_size, pr.sft_steps) == (30, 4, 2, 0)
                assert sh.eval_data == pr.eval_data == w.eval_data == (
                    "tasks:length_test@chain_short")
            assert (parsed["agents-chain-warm"].sft_steps,
                    parsed["agents-chain600-warm"].sft_steps) == (200, 600)
        if name != "tiny-warm":
            continue
        assert all(a.train_data == "tasks:train" and a.eval_data == "tasks:test"
                   for a in parsed.values())
        warm = parsed.pop("warm")
        assert warm.steps == 0 and warm.save_every and warm.sft_steps > 0
        assert parsed["agents-no-rl"].steps == 0
        assert parsed["ppo-fgo"].fgo and not parsed["ppo"].fgo
        assert parsed["grpo-cccs"].curriculum == parsed["ppo-cccs"].curriculum == "cccs"
        assert parsed["drive-hard-focus"].hard_focus and not parsed["grpo"].hard_focus
        assert (parsed["agents-shared"].policy, parsed["agents-per-role"].policy) == (
            "shared", "per-role")
        # Every RL row of the single-agent methods starts from this seed's warm start, with
        # the same rollout budget and learning rate: the comparison is at equal budget.
        ckpt = os.path.join(out, "cells", "warm", "seed2", "step_0")
        rl = [a for n, a in parsed.items() if not n.startswith("agents")]
        assert all(a.model == ckpt and a.sft_steps == 0 for a in rl)
        # ... except grpo-160, the same GRPO for 4x the steps (the longer curve)
        longer = parsed["grpo-160"]
        assert longer.steps == 4 * parsed["grpo"].steps
        assert len({(a.steps, a.prompts_per_step, a.group_size, a.lr, a.max_new_tokens)
                    for a in rl if a is not longer}) == 1
        assert parsed["grpo-p128"].max_problems == parsed["grpo-cccs-p128"].max_problems == 128
        configs = {c["name"]: c for c in grid}
        assert all(configs[n].get("after") == ["warm"] for n in parsed if n in configs
                   and not n.startswith("agents"))


def test_module_docstring_names_the_tiny_warm_command():
    doc = textwrap.dedent(ablate.__doc__)
    assert "bench/ablate.py --grid tiny-warm" in doc and "Resume:" in doc


def test_sigterm_stops_the_grid_like_ctrl_c(env, monkeypatch):
    """`kill PID` (SIGTERM) on the runner: the same stop as Ctrl-C, and the runner's own
    handlers are put back after."""
    before = signal.getsignal(signal.SIGTERM)
    _stop_while_the_cell_runs(env, monkeypatch, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) is before


def test_each_cell_records_its_commit_and_the_report_says_when_they_differ(env):
    """cmd.json keeps the git commit of --workdir ("+dirty" with uncommitted changes); the
    report names one commit, or each commit with its cells when they differ (a finished cell
    is not re-run when only the code moved on)."""
    import subprocess as sp
    repo = env.tmp / "repo"
    repo.mkdir()

    def git(*args):
        return sp.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                       *args], capture_output=True, text=True, check=True).stdout.strip()
    git("init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    git("add", "code.py")
    git("commit", "-qm", "one")
    first = git("rev-parse", "--short=12", "HEAD")
    cfgs = [{"name": "a", "group": "G", "cmd": env.cmd(), "seeds": [0]},
            {"name": "b", "group": "G", "cmd": env.cmd(), "seeds": [0]}]
    assert env.main(env.grid(cfgs), "out", "--workdir", str(repo)) == 0
    cell = env.tmp / "out" / "cells" / "a" / "seed0" / "cmd.json"
    assert json.loads(cell.read_text())["commit"] == first
    assert f"every finished cell ran at commit {first}." in env.md("out")
    (repo / "code.py").write_text("x = 2\n")          # uncommitted: b re-runs "dirty"
    cfgs[1]["cmd"] = env.cmd("--bonus", "0.5")
    assert env.main(env.grid(cfgs), "out", "--workdir", str(repo)) == 0
    md = env.md("out")
    assert f"different commits (code defaults may differ): {first}: a seed 0; " \
           f"{first}+dirty: b seed 0." in md
    assert env.report("out")["b"]["commits"] == {"0": first + "+dirty"}


def test_only_keeps_every_config_with_finished_cells_in_the_report(env):
    """An --only run's report is never narrower than what it knows: a report copied over a
    fuller one must not lose rows (a length report once lost 9 of 14 that way)."""
    needs = "{out}/cells/a/seed{seed}/summary.json"
    cfgs = [{"name": "a", "group": "G", "cmd": env.cmd()},
            {"name": "b", "group": "G", "cmd": env.cmd("--bonus", "0.1"), "after": ["a"],
             "seeds": [1]},
            {"name": "c", "group": "H", "cmd": env.cmd("--needs", needs), "after": ["a"]}]
    assert env.main(env.grid(cfgs[:2]), "first") == 0          # a, b
    first = env.report("first")
    # the same --out, --only b: nothing runs, and a's row stays (finished on disk); c has no
    # finished cell and is not selected: no row
    assert env.main(env.grid(cfgs), "first", "--only", "b") == 0
    r = env.report("first")
    assert sorted(r) == ["a", "b"] and r["a"]["per_seed"] == first["a"]["per_seed"]
    assert sum(env.runs().values()) == 4                         # nothing ran again
    # a selected config with nothing finished keeps its row; a fresh --out knows nothing
    # finished of a or b
    assert env.main(env.grid(cfgs), "first", "--only", "c", "--report-only") == 0
    assert sorted(env.report("first")) == ["a", "b", "c"]
    assert env.main(env.grid(cfgs), "fresh", "--only", "c", "--report-only") == 0
    assert sorted(env.report("fresh")) == ["c"]
