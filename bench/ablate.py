"""A grid of trainer configurations x seeds, run resumably, summarised as a table and a picture.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/ablate.py --grid tiny-warm \\
        --out runs/ablate-tiny-warm --jobs 2        # 14 configs x 3 seeds
    .venv/bin/python bench/ablate.py --grid tiny-warm --dry-run         # the commands only
    .venv/bin/python bench/ablate.py --grid tiny-warm --out runs/ablate-tiny-warm --report-only
    .venv/bin/python bench/ablate.py --grid my_grid.json --only ppo --seeds 0,1  # ppo, ppo-fgo
    .venv/bin/python bench/ablate.py --grid my_grid.json --only =ppo             # ppo alone

A grid is a list of configs (the named grids live in bench/grids.py; --grid FILE.json reads a
list of the same shape):

    {"name": "ppo-fgo",                 unique; the cell folders are named after it
     "group": "PPO/FGO/CCCS",           rows compared together (one panel of the picture)
     "cmd": ["ppo_fgo.py", "--fgo"],    argv after the python interpreter; any script path
     "seeds": [0, 1, 2],                optional (default: --seeds)
     "metrics": ["metrics.jsonl:fgo_masked_share"],   optional extra columns, see below
     "after": ["other-config"]}         optional: seed S of this config starts only when seed
                                        S of each named (earlier) config has finished

In "cmd", the literal text {seed} becomes the cell's seed and {out} the grid's --out folder
(absolute), so a config can start from another config's checkpoint, e.g. DRIVE's stage 2:
"--model", "{out}/cells/drive-stage1/seed{seed}/step_40" with "after": ["drive-stage1"].

Each cell (config, seed) runs, from --workdir (default: the repository root),

    OMP_NUM_THREADS=1 python <cmd...> --seed S --out <OUT>/cells/<name>/seed<S>

with stdout and stderr in <cell>/log.txt, --jobs cells at a time. Ctrl-C or SIGTERM (`kill PID`)
stops the running cells (SIGTERM to each cell's process group, SIGKILL after 10 s), writes the
report of what had finished and exits 130. (SIGINT is re-armed at start: a job started with `&`
from a script inherits it ignored, and `kill -INT` would do nothing.)

Resume: a cell is finished when its summary.json exists, it has no failed.json, and its
cmd.json (written when it starts) holds the same command (cmd with {seed}/{out} filled in, plus
--seed S; --out is the cell's folder either way). A finished cell is never re-run; any other
cell (never started, interrupted, failed, or its command edited since) is run again from
scratch: its folder is emptied first. A cell that exits non-zero (or with no summary.json) gets
<cell>/failed.json (rc and the last line of its log); the grid goes on, and the report lists it.
cmd.json also records the git commit of --workdir; it is not compared (the code may move on
under a finished cell), but ablation.md says which commits the cells ran at.

The report (<OUT>/ablation.json, ablation.md, ablation.png) is written at the end of every run
and by --report-only, from the finished cells only. It covers the configs --only selects and
every other config of the grid with a finished cell, so a report written by an --only run is
never narrower than the cells it knows about:
- numbers from each cell's summary.json: pass_at_1_before_rl / _after_rl / _gain (held-out),
  train_pass_at_1_*, pass_at_k_* (k = eval_k or eval_n), wall_seconds; any key may be
  missing ("-").
  A config's "metrics" add columns: a dotted key into summary.json (agents.py:
  "after_rl.pass@1_coder_alone"), or "metrics.jsonl:KEY", the mean of KEY over the
  "phase": "rl" rows of the cell's metrics.jsonl (e.g. ppo_fgo.py's fgo_masked_share).
- each number as mean +- sample standard deviation over the finished seeds (n - 1 in the
  denominator; "-" when fewer than 2 seeds finished).
- the curve: the "phase": "eval" rows of metrics.jsonl, x = their "step" (else from "when":
  before_rl = 0, step_N = N, after_rl = the summary's steps), y = "pass@1" (agents.py's rows:
  "pass@1_after_turns"). The picture, one panel a group, draws each seed's gain since its own
  first point: per config the mean over seeds with a min-max band.
  matplotlib is a benchmark-only dependency (requirements-bench.txt): without it the picture is
  skipped with one line.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from grids import GRIDS  # the named grids (bench/grids.py)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (summary.json key, column of ablation.md or None = ablation.json only)
STANDARD = [("pass_at_1_before_rl", "held-out pass@1 before RL"),
            ("pass_at_1_after_rl", "after RL"),
            ("pass_at_1_gain", "gain"),
            ("train_pass_at_1_before_rl", None),
            ("train_pass_at_1_after_rl", "train pass@1 after RL"),
            ("pass_at_k_before_rl", None),
            ("pass_at_k_after_rl", "pass@k after RL"),
            ("wall_seconds", "wall (s)")]
OPTIONAL_COLUMNS = {"train_pass_at_1_after_rl", "pass_at_k_after_rl"}  # dropped when all "-"
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class GridError(Exception):
    """A mistake in the grid or the flags: one line, exit 2."""


# ----------------------------------------------------------------------------- grid and cells

def validate(configs, seeds: list[int]) -> list[dict]:
    """The grid's configs with their defaults filled in; GridError names the first mistake."""
    if not isinstance(configs, list) or not configs:
        raise GridError("a grid is a non-empty JSON list of configs")
    out, names = [], set()
    for i, c in enumerate(configs):
        if not isinstance(c, dict):
            raise GridError(f"config {i} is not an object")
        unknown = set(c) - {"name", "group", "cmd", "seeds", "metrics", "after"}
        if unknown:
            raise GridError(f"config {i}: unknown keys {sorted(unknown)}")
        name = c.get("name")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise GridError(f"config {i}: 'name' must be a folder-safe string, got {name!r}")
        if name in names:
            raise GridError(f"config name {name!r} appears twice")
        cmd, group = c.get("cmd"), c.get("group", "")
        if not isinstance(cmd, list) or not cmd or not all(isinstance(x, str) for x in cmd):
            raise GridError(f"config {name}: 'cmd' must be a non-empty list of strings")
        if "--seed" in cmd or "--out" in cmd:
            raise GridError(f"config {name}: 'cmd' must not set --seed or --out (ablate.py does)")
        if not isinstance(group, str):
            raise GridError(f"config {name}: 'group' must be a string")
        s = c.get("seeds", seeds)
        if not isinstance(s, list) or not s or not all(type(x) is int for x in s):
            raise GridError(f"config {name}: 'seeds' must be a non-empty list of integers")
        metrics, after = c.get("metrics", []), c.get("after", [])
        for key, val in (("metrics", metrics), ("after", after)):
            if not isinstance(val, list) or not all(isinstance(x, str) for x in val):
                raise GridError(f"config {name}: {key!r} must be a list of strings")
        for dep in after:
            if dep not in names:
                raise GridError(f"config {name}: 'after' names {dep!r}, which is not an earlier "
                                "config of the grid")
        names.add(name)
        out.append({"name": name, "group": group or name, "cmd": list(cmd),
                    "seeds": sorted(set(s)), "metrics": list(metrics), "after": list(after)})
    return out


def load_grid(spec: str, seeds: list[int]) -> list[dict]:
    """--grid: a name in GRIDS, or a JSON file holding a list of configs."""
    if spec in GRIDS:
        return validate(GRIDS[spec], seeds)
    if not (spec.endswith(".json") or os.path.isfile(spec)):
        raise GridError(f"--grid {spec}: no such grid; choose from {sorted(GRIDS)} or pass a "
                        "FILE.json")
    try:
        with open(spec) as f:
            configs = json.load(f)
    except OSError as e:
        raise GridError(f"--grid {spec}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise GridError(f"--grid {spec}: not valid JSON ({e})") from None
    return validate(configs, seeds)


def select(configs: list[dict], only: str) -> list[dict]:
    """--only A,B: the configs whose name contains A or B (all when empty); =A: named A exactly.

    The exact form exists because names nest: "length-ppo" is also in "length-ppo-cccs", so
    without it one config cannot be run beside a process that runs the other.
    """
    parts = [p for p in only.split(",") if p]
    if not parts:
        return configs

    def wanted(name: str, part: str) -> bool:
        return name == part[1:] if part.startswith("=") else part in name

    chosen = [c for c in configs if any(wanted(c["name"], p) for p in parts)]
    if not chosen:
        raise GridError(f"--only {only}: matches no config of the grid "
                        f"({', '.join(c['name'] for c in configs)})")
    return chosen


def report_configs(grid: list[dict], selected: list[dict], out: str) -> list[dict]:
    """The configs a report covers, in grid order: the selected ones, and every other config
    of the grid with a finished cell under `out`. So a run with --only never writes a report
    narrower than what it knows: copying that report over a fuller one loses no rows."""
    names = {c["name"] for c in selected}
    return [c for c in grid if c["name"] in names
            or any(is_finished(x) for x in cells_of([c], out))]


def fill(token: str, seed: int, out: str) -> str:
    # str.replace, not str.format: a flag's value may be JSON with braces (--reward-table).
    return token.replace("{seed}", str(seed)).replace("{out}", out)


def cell_command(cfg: dict, seed: int, out: str) -> list[str]:
    """The cell's command after the interpreter, without --out: what resume compares."""
    return [fill(t, seed, out) for t in cfg["cmd"]] + ["--seed", str(seed)]


def display_command(cfg: dict) -> str:
    """The config's command line with every seed at once: `python grpo.py ... --seed {0,1,2}`."""
    seeds = ",".join(map(str, cfg["seeds"]))
    seed = f"{{{seeds}}}" if len(cfg["seeds"]) > 1 else seeds
    return " ".join(["python", *map(shlex.quote, cfg["cmd"]), "--seed", seed])


@dataclass
class Cell:
    name: str
    seed: int
    dir: str
    cmd: list[str]           # after the interpreter, without --out
    deps: list[tuple[str, int]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return (self.name, self.seed)

    @property
    def argv(self) -> list[str]:
        return [*self.cmd, "--out", self.dir]


def cells_of(configs: list[dict], out: str) -> list[Cell]:
    return [Cell(c["name"], s, os.path.join(out, "cells", c["name"], f"seed{s}"),
                 cell_command(c, s, out), [(d, s) for d in c["after"]])
            for c in configs for s in c["seeds"]]


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def is_finished(cell: Cell) -> bool:
    """summary.json there, no failed.json, and cmd.json records this very command."""
    started = read_json(os.path.join(cell.dir, "cmd.json"))
    return (isinstance(started, dict) and started.get("cmd") == cell.cmd
            and os.path.isfile(os.path.join(cell.dir, "summary.json"))
            and not os.path.exists(os.path.join(cell.dir, "failed.json")))


def last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 8192))
            lines = [x for x in f.read().decode("utf-8", "replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[-300:] if lines else ""


# ----------------------------------------------------------------------------- running

def say(msg: str) -> None:
    print(f"[ablate] {msg}", flush=True)


def code_version(workdir: str) -> str | None:
    """The git commit the cell's code is at ("+dirty" with uncommitted changes to tracked
    files), None outside a git checkout. Recorded, not compared: a finished cell stays
    finished when the code moves on, so the report says which commits its cells ran at
    (a changed code default is not in the command)."""
    def git(*args):
        return subprocess.run(["git", "-C", workdir, *args], capture_output=True, text=True,
                              timeout=30)
    try:
        head = git("rev-parse", "--short=12", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def start_cell(cell: Cell, python: str, workdir: str) -> tuple[subprocess.Popen, float]:
    """Empty the cell's folder, record its command, start it in its own process group."""
    shutil.rmtree(cell.dir, ignore_errors=True)
    os.makedirs(cell.dir)
    with open(os.path.join(cell.dir, "cmd.json"), "w") as f:
        json.dump({"cmd": cell.cmd, "argv": [python, *cell.argv], "workdir": workdir,
                   "commit": code_version(workdir)}, f, indent=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(os.path.join(cell.dir, "log.txt"), "wb") as log:
        # its own session: a trainer's sandbox workers and engine are stopped with it
        proc = subprocess.Popen([python, *cell.argv], cwd=workdir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc, time.time()


def record_failure(cell: Cell, rc, reason: str) -> None:
    os.makedirs(cell.dir, exist_ok=True)
    with open(os.path.join(cell.dir, "failed.json"), "w") as f:
        json.dump({"rc": rc, "last_line": reason, "cmd": cell.cmd}, f, indent=2)


def stop(procs: list[subprocess.Popen], grace: float = 10.0) -> None:
    """SIGTERM each cell's process group, wait up to `grace` seconds for the trainers, then
    SIGKILL the groups: also when a trainer exited at once, since its sandbox workers or
    engine processes may outlive it (they are in its group, and may handle SIGTERM)."""
    def signal_groups(sig) -> None:
        for p in procs:
            try:
                os.killpg(p.pid, sig)   # the group outlives its leader while members remain
            except ProcessLookupError:
                pass
    signal_groups(signal.SIGTERM)
    deadline = time.time() + grace
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        time.sleep(0.1)
    signal_groups(signal.SIGKILL)
    for p in procs:
        p.wait()


def run_cells(todo: list[Cell], done: set, jobs: int, python: str, workdir: str) -> dict:
    """Run the unfinished cells, --jobs at a time, each after its dependencies.

    `done`: keys of the finished cells (this run's and any on disk). Returns {key: "done" |
    "failed"} for the cells run here. A cell whose dependency failed (or is not finished and
    not in this run, e.g. left out by --only) fails without running."""
    status = {c.key: "pending" for c in todo}
    running: dict[tuple, tuple[Cell, subprocess.Popen, float]] = {}
    pending = list(todo)
    try:
        while pending or running:
            for cell in list(pending):
                if len(running) >= jobs:
                    break
                states = ["done" if d in done else status.get(d, "missing") for d in cell.deps]
                if any(s in ("pending", "running") for s in states):
                    continue
                pending.remove(cell)
                bad = [f"{n} seed {s}" for (n, s), st in zip(cell.deps, states) if st != "done"]
                if bad:
                    record_failure(cell, None, f"not run: {', '.join(bad)} did not finish")
                    status[cell.key] = "failed"
                    say(f"{cell.name} seed {cell.seed}: not run ({', '.join(bad)} did not finish)")
                    continue
                say(f"start {cell.name} seed {cell.seed}: {shlex.join(cell.argv)}")
                proc, t0 = start_cell(cell, python, workdir)
                running[cell.key] = (cell, proc, t0)
                status[cell.key] = "running"
            finished = [(k, v) for k, v in running.items() if v[1].poll() is not None]
            for key, (cell, proc, t0) in finished:
                del running[key]
                rc, secs = proc.returncode, time.time() - t0
                has_summary = os.path.isfile(os.path.join(cell.dir, "summary.json"))
                if rc == 0 and has_summary:
                    status[key] = "done"
                    done.add(key)
                    say(f"done {cell.name} seed {cell.seed} ({secs:.0f} s)")
                else:
                    line = last_line(os.path.join(cell.dir, "log.txt"))
                    if rc == 0:
                        line = f"exited 0 without summary.json; log: {line}"
                    record_failure(cell, rc, line)
                    status[key] = "failed"
                    say(f"FAILED {cell.name} seed {cell.seed} (rc {rc}, {secs:.0f} s): {line}")
            if not finished and running:
                time.sleep(0.2)
    except KeyboardInterrupt:
        say(f"interrupted: stopping {len(running)} running cell(s)")
        stop([proc for _, proc, _ in running.values()])
        raise
    return status


# ----------------------------------------------------------------------------- numbers

def mean_std(values: list[float]) -> dict:
    """{"mean", "std" (sample, n - 1; None when n < 2), "n"}; mean None when n = 0."""
    n = len(values)
    return {"mean": statistics.fmean(values) if n else None,
            "std": statistics.stdev(values) if n >= 2 else None, "n": n}


def number(x) -> float | None:
    ok = isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return float(x) if ok else None


def read_rows(path: str) -> list[dict]:
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue    # a line cut by an interrupted run
                if isinstance(row, dict):
                    rows.append(row)
    except OSError:
        pass
    return rows


def metric(summary: dict, rows: list[dict], key: str) -> float | None:
    """A dotted key into summary.json, or metrics.jsonl:KEY = mean of KEY over the rl rows."""
    if key.startswith("metrics.jsonl:"):
        k = key.split(":", 1)[1]
        vals = [v for r in rows if r.get("phase") == "rl" if (v := number(r.get(k))) is not None]
        return statistics.fmean(vals) if vals else None
    x = summary
    for part in key.split("."):
        if not isinstance(x, dict) or part not in x:
            return None
        x = x[part]
    return number(x)


def curve(summary: dict, rows: list[dict]) -> dict[int, float]:
    """Held-out pass@1 by RL step from the eval rows of metrics.jsonl (when = before_rl,
    step_N or after_rl; the train sample's train_* rows are not the held-out curve)."""
    rl_steps = [int(r["step"]) for r in rows if r.get("phase") == "rl" and number(r.get("step"))]
    last = number(summary.get("steps"))
    last = int(last) if last is not None else max(rl_steps, default=0)
    out = {}
    for r in rows:
        if r.get("phase") != "eval":
            continue
        when = str(r.get("when", ""))
        m = re.fullmatch(r"step_(\d+)", when)
        if when not in ("before_rl", "after_rl") and not m:
            continue        # e.g. train_before_rl: the train sample, not the held-out curve
        y = number(r.get("pass@1", r.get("pass@1_after_turns")))
        x = number(r.get("step"))
        if x is None:
            x = 0 if when == "before_rl" else last if when == "after_rl" else int(m.group(1))
        if y is not None:
            out[int(x)] = y
    return out


def cell_numbers(cell_dir: str, cfg: dict) -> dict:
    """One finished cell: {key: value or None} for the standard keys and the config's metrics,
    eval_n, and its curve."""
    summary = read_json(os.path.join(cell_dir, "summary.json")) or {}
    rows = read_rows(os.path.join(cell_dir, "metrics.jsonl"))
    vals = {k: metric(summary, rows, k) for k, _ in STANDARD}
    if vals["pass_at_1_gain"] is None and None not in (vals["pass_at_1_before_rl"],
                                                       vals["pass_at_1_after_rl"]):
        vals["pass_at_1_gain"] = vals["pass_at_1_after_rl"] - vals["pass_at_1_before_rl"]
    vals.update({k: metric(summary, rows, k) for k in cfg["metrics"]})
    k = summary.get("eval_k", summary.get("eval_n"))
    return {"values": vals, "k": k, "curve": curve(summary, rows)}


def config_report(cfg: dict, out: str) -> dict:
    """Per seed: status and numbers; per key: mean/std over the finished seeds; the curve."""
    per_seed, failed, curves, ks, commits = {}, [], {}, set(), {}
    for cell in cells_of([cfg], out):
        seed = str(cell.seed)
        if is_finished(cell):
            nums = cell_numbers(cell.dir, cfg)
            per_seed[seed] = nums["values"]
            commits[seed] = read_json(os.path.join(cell.dir, "cmd.json")).get("commit")
            curves[seed] = nums["curve"]
            ks.add(nums["k"])
            continue
        f = read_json(os.path.join(cell.dir, "failed.json"))
        if isinstance(f, dict) and f.get("cmd") == cell.cmd:
            failed.append({"seed": cell.seed, "rc": f.get("rc"), "last_line": f.get("last_line")})
    keys = [k for k, _ in STANDARD] + cfg["metrics"]
    stats = {k: mean_std([v[k] for v in per_seed.values() if v.get(k) is not None])
             for k in keys}
    # The gain curve: each seed's change since its own first point (the seeds' warm starts
    # differ by more than RL moves them, so an absolute band hides the effect).
    gains = [{x: c[x] - c[min(c)] for x in c} for c in curves.values() if c]
    gain_band = {k: v for k, v in band(gains).items() if k != "seeds"}
    return {"name": cfg["name"], "group": cfg["group"], "command": display_command(cfg),
            "cmd": cfg["cmd"], "seeds": cfg["seeds"], "seeds_done": len(per_seed),
            "failed": failed, "k": ks.pop() if len(ks) == 1 else None,
            "metrics": cfg["metrics"], "per_seed": per_seed, "stats": stats,
            "commits": commits,
            "curves": {s: {str(x): y for x, y in sorted(c.items())} for s, c in curves.items()},
            "curve": band(list(curves.values())), "gain_curve": gain_band}


def band(curves: list[dict]) -> dict:
    """Per-seed curves {step: value} -> {"step", "mean", "min", "max", "seeds"} over the
    union of their steps (each point over the seeds that have it)."""
    xs = sorted({x for c in curves for x in c})
    at = [[c[x] for c in curves if x in c] for x in xs]
    return {"step": xs, "mean": [statistics.fmean(v) for v in at],
            "min": [min(v) for v in at], "max": [max(v) for v in at],
            "seeds": [len(v) for v in at]}


def fmt(stat: dict, signed: bool = False, digits: int = 3) -> str:
    if not stat["n"]:
        return "-"
    spec = f"{'+' if signed else ''}.{digits}f"
    std = "-" if stat["std"] is None else format(stat["std"], f".{digits}f")
    return f"{format(stat['mean'], spec)} ± {std}"


def markdown(reports: list[dict], title: str) -> str:
    """ablation.md: one row per config, grouped; extra metric columns as the configs ask."""
    cols = [(k, head) for k, head in STANDARD if head is not None and not (
        k in OPTIONAL_COLUMNS and not any(r["stats"][k]["n"] for r in reports))]
    extra = list(dict.fromkeys(m for r in reports for m in r["metrics"]))
    head = ["group", "config", "seeds", *(h for _, h in cols), *extra, "command"]
    lines = [f"# {title}", "",
             "Held-out pass@1 unless marked train; mean ± sample std over the finished seeds "
             "(n - 1; \"-\" for one seed). Each cell runs the command with `--out "
             "<dir>/cells/<config>/seed<S>`, OMP_NUM_THREADS=1.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(reports, key=lambda r: [x["group"] for x in reports].index(r["group"])):
        seeds = f"{r['seeds_done']}/{len(r['seeds'])}"
        if r["failed"]:
            seeds += f" ({len(r['failed'])} failed)"
        row = [r["group"], r["name"], seeds]
        for k, _ in cols:
            s = r["stats"][k]
            if k == "wall_seconds":
                row.append("-" if not s["n"] else f"{s['mean']:.0f}")
            elif k == "pass_at_k_after_rl" and s["n"] and r["k"]:
                row.append(f"{fmt(s)} (k={r['k']})")
            else:
                row.append(fmt(s, signed=k == "pass_at_1_gain"))
        row += [fmt(r["stats"][m]) if m in r["stats"] else "" for m in extra]
        row.append("`" + r["command"].replace("|", "\\|") + "`")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", code_line(reports)]
    failures = [(r["name"], f) for r in reports for f in r["failed"]]
    if failures:
        lines += ["", "Failed cells (not in the numbers above):", ""]
        lines += [f"- {n} seed {f['seed']}: rc {f['rc']}: `{f['last_line']}`" for n, f in failures]
    return "\n".join(lines) + "\n"


def code_line(reports: list[dict]) -> str:
    """Which commits the finished cells ran at: one, or each commit with its cells (a code
    default may differ between them even where the commands are the same)."""
    at: dict[str, list[str]] = {}      # commit: ["<config> seed(s) 0/1", ...]
    for r in reports:
        seeds_of: dict[str, list[str]] = {}
        for seed, commit in r["commits"].items():
            seeds_of.setdefault(commit or "unknown", []).append(seed)
        for commit, seeds in seeds_of.items():
            at.setdefault(commit, []).append(
                f"{r['name']} seed{'s' if len(seeds) > 1 else ''} {'/'.join(seeds)}")
    if not at:
        return "Code: no finished cell."
    if len(at) == 1:
        return f"Code: every finished cell ran at commit {next(iter(at))}."
    return "Code: the cells ran at different commits (code defaults may differ): " + "; ".join(
        f"{c}: {', '.join(cells)}" for c, cells in at.items()) + "."


def picture(reports: list[dict], path: str) -> bool:
    """ablation.png: a panel per group, a line per config: held-out pass@1 gain since the
    seed's own step 0 (mean over seeds), min-max band over the seeds."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("matplotlib is not installed (pip install -r requirements-bench.txt): "
            "no ablation.png")
        return False
    # Groups with a curve (>= 2 points): a warm start alone is a number, not a line.
    groups = list(dict.fromkeys(r["group"] for r in reports
                                if len(r["gain_curve"]["step"]) >= 2 or not r["seeds_done"]))
    if not groups:
        say("no configuration has a learning curve yet: no ablation.png")
        return False
    ncol = min(3, len(groups))
    nrow = math.ceil(len(groups) / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(5 * ncol, 3.6 * nrow), squeeze=False)
    for ax, group in zip(axes.flat, groups):
        for r in (r for r in reports if r["group"] == group):
            c = r["gain_curve"]
            if len(c["step"]) < 2:      # a warm start alone has no curve
                continue
            line, = ax.plot(c["step"], c["mean"], marker="o", ms=3,
                            label=f"{r['name']} ({r['seeds_done']} seed"
                                  f"{'' if r['seeds_done'] == 1 else 's'})")
            ax.fill_between(c["step"], c["min"], c["max"], color=line.get_color(), alpha=0.2)
        ax.set_title(group)
        ax.set_xlabel("RL step")
        ax.set_ylabel("held-out pass@1 gain since step 0")
        ax.axhline(0.0, color="grey", lw=0.6)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no finished cell", ha="center", transform=ax.transAxes)
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_report(configs: list[dict], out: str, title: str) -> list[dict]:
    reports = [config_report(c, out) for c in configs]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "ablation.json"), "w") as f:
        json.dump({"grid": title, "configs": reports}, f, indent=2)
    with open(os.path.join(out, "ablation.md"), "w") as f:
        f.write(markdown(reports, title))
    drew = picture(reports, os.path.join(out, "ablation.png"))
    say(f"report: {out}/ablation.md, ablation.json" + (", ablation.png" if drew else ""))
    return reports


# ----------------------------------------------------------------------------- command line

class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        fail(message)


def fail(message: str):
    print(f"ablate.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def seed_list(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers") from None
    if not seeds:
        raise argparse.ArgumentTypeError("give at least one seed")
    return seeds


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="ablate.py", description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--grid", default="tiny-warm",
                   help=f"a named grid ({', '.join(sorted(GRIDS))}) or FILE.json with a list "
                        "of configs (keys: see above)")
    p.add_argument("--out", default=None,
                   help="results folder: cells/<config>/seed<S>/ and the ablation.* report; "
                        "None: runs/ablate/<grid name>")
    p.add_argument("--seeds", type=seed_list, default="0,1,2",
                   help="comma list of seeds for configs that do not list their own")
    p.add_argument("--jobs", type=positive, default=1,
                   help="cells run at a time (each trainer uses one thread)")
    p.add_argument("--only", default="",
                   help="comma list of substrings: run only the configs whose name contains "
                        "one of them; =NAME selects the config named NAME only (names nest: "
                        "ppo is in ppo-fgo). The report also keeps every other config of the "
                        "grid with finished cells")
    p.add_argument("--workdir", default=ROOT,
                   help="folder the cells run in (relative script paths in cmd start here)")
    p.add_argument("--python", default=sys.executable, help="interpreter that runs the cells")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true",
                      help="print each cell's command and whether it is finished; run nothing, "
                           "write nothing")
    mode.add_argument("--report-only", action="store_true",
                      help="run nothing; write the report from the finished cells")
    return p


def interrupt(signum, frame):
    """SIGTERM handler: stop the grid the way Ctrl-C does (run_cells stops the cells)."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        grid = load_grid(a.grid, a.seeds)
        configs = select(grid, a.only)
    except GridError as e:
        fail(str(e))
    if not os.path.isdir(a.workdir):
        fail(f"--workdir {a.workdir}: not a folder")
    title = a.grid if a.grid in GRIDS else os.path.splitext(os.path.basename(a.grid))[0]
    out = os.path.abspath(a.out or os.path.join(ROOT, "runs", "ablate", title))
    if os.path.exists(out) and not os.path.isdir(out):
        fail(f"--out {a.out}: is a file")
    # dependencies may sit outside --only: their finished state comes from disk
    every = cells_of(grid, out)
    done = {c.key for c in every if is_finished(c)}
    cells = cells_of(configs, out)
    todo = [c for c in cells if c.key not in done]
    if a.dry_run:
        for c in cells:
            state = "finished" if c.key in done else "to run"
            print(f"[{state}] cd {shlex.quote(a.workdir)} && OMP_NUM_THREADS=1 "
                  f"{shlex.quote(a.python)} {shlex.join(c.argv)}")
        return 0
    rc = 0
    if not a.report_only:
        say(f"{len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run, "
            f"--jobs {a.jobs}; results in {out}")
        handlers = (signal.signal(signal.SIGINT, signal.default_int_handler),
                    signal.signal(signal.SIGTERM, interrupt))
        try:
            status = run_cells(todo, done, a.jobs, a.python, os.path.abspath(a.workdir))
            rc = 1 if "failed" in status.values() else 0
        except KeyboardInterrupt:
            rc = 130
        finally:  # main() is also called in-process (the tests): put the old handlers back
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
    write_report(report_configs(grid, configs, out), out, title)
    return rc


if __name__ == "__main__":
    sys.exit(main())
