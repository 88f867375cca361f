"""The papers' claims on the shipped base: paired differences between cells of the claims grid.

    OMP_NUM_THREADS=1 .venv/bin/python bench/ablate.py --grid claims --out runs/claims --jobs 2
    .venv/bin/python bench/claims.py --grid-out runs/claims --out bench/results/claims

Every arm of the grid starts from the same policy (models/base) and RL seed S of one arm is
compared with seed S of the other on the same held-out problems, so each claim is a paired
difference. For one seed, over the N held-out problems with solved shares a_i (arm A) and
b_i (arm B):

    d = mean_i (a_i - b_i),    se(d) = standard error of the a_i - b_i within families

(evalstats.standard_error: the set's family mix is fixed). Over seeds s = 1..S:

    D = mean_s d_s,            se(D) = sd_s(d_s) / sqrt(S)

which holds the RL seed's noise as well as the evaluation's. A claim is "shown" when D has
the paper's sign and |D| > 2 se(D), "reversed" when it has the other sign and |D| > 2 se(D),
else "not shown".

pass@k for every k <= n comes from each problem's c = share * n solved samples (evalstats.pass_at_k,
unbiased); the hardest quarter is evalstats.hardest_problems's (world/tasks.py's difficulty score).
Beside each claim stands its group's precondition (preconditions(): the figure measured from the
base, and the cells' own where they measure it): a claim "not shown" where its precondition is NOT
met says nothing about the method. Reads <cell>/summary.json, rates.json and metrics.jsonl; writes
claims.json (every per-seed number), claims.md (the table) and claims.png (pass@k to 64 and the
paired differences) under --out."""
from __future__ import annotations

import argparse
import ast
import json
import os
import statistics
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ablate  # noqa: E402
import stepcoder_gates  # noqa: E402
from compare import over_seeds, paired  # noqa: E402
from grids import STEPCODER_FAMILIES  # noqa: E402

from infra import evalstats, samples  # noqa: E402
from world import sources  # noqa: E402
from world.tasks import CCCS_FAMILY  # noqa: E402

STEPCODER_BRANCHY = tuple(STEPCODER_FAMILIES.split("+"))


# ----------------------------------------------------------------------------- pure helpers

def counts(rates: dict, n: int) -> dict:
    """{problem id: solved share} -> {problem id: solved samples of n}."""
    return {pid: round(share * n) for pid, share in rates.items()}


def pass_at_k_curve(solved: dict, n: int, ks) -> dict:
    """{k: mean over problems of the unbiased pass@k} from {problem id: solved of n}."""
    return {k: sum(evalstats.pass_at_k(n, c, k) for c in solved.values()) / len(solved)
            for k in ks}


def per_problem(rates: dict, n: int, k: int) -> dict:
    """{problem id: pass@k of that problem} (k = 1: the solved share)."""
    return {pid: evalstats.pass_at_k(n, c, k) for pid, c in counts(rates, n).items()}


def verdict(stat: dict, sign: int) -> str:
    """shown / reversed / not shown: |mean| > 2 se, with the paper's sign (+1 or -1); for a
    comparison the paper makes no claim on (sign 0): A higher / B higher / no difference."""
    if stat["se"] is None:
        return "one seed"
    if abs(stat["mean"]) <= 2 * stat["se"]:
        return "no difference" if sign == 0 else "not shown"
    if sign == 0:
        return "A higher" if stat["mean"] > 0 else "B higher"
    return "shown" if stat["mean"] * sign > 0 else "reversed"


# ----------------------------------------------------------------------------- cells

class Grid:
    """The finished cells of one grid folder: summary, rates and metrics rows per (name, seed)."""

    def __init__(self, root: str):
        self.root = root

    def cell(self, name: str, seed: int) -> str:
        return os.path.join(self.root, "cells", name, f"seed{seed}")

    def summary(self, name: str, seed: int) -> dict | None:
        path = os.path.join(self.cell(name, seed), "summary.json")
        return json.load(open(path)) if os.path.isfile(path) else None

    def rates(self, name: str, seed: int, when: str, train: bool = False,
              regime: str = "every test") -> dict | None:
        """{problem id: solved share} of the held-out set (train: the train problems scored
        beside it) at `when` (before_rl / after_rl), judged on every test or (regime
        "train tests", cells run with --max-train-tests N) on each problem's N train-style
        tests, read from the same samples' verdicts."""
        path = os.path.join(self.cell(name, seed), "rates.json")
        if not os.path.isfile(path):
            return None
        kind = "rates_on_train_tests" if regime == "train tests" else "rates"
        return json.load(open(path)).get(f"{'train_' if train else ''}{kind}_{when}")

    def rl_mean(self, name: str, seed: int, key: str, last: int | None = None) -> float | None:
        """The mean of KEY over the cell's RL rows of metrics.jsonl (ablate.metric); over the
        last `last` RL rows when given."""
        rows = [r for r in ablate.read_rows(os.path.join(self.cell(name, seed), "metrics.jsonl"))
                if r.get("phase") == "rl"]
        return ablate.metric({}, rows[-last:] if last else rows, f"metrics.jsonl:{key}")

    def command(self, name: str) -> list[str]:
        """The command of `name`'s first finished seed (cmd.json); [] when there is none."""
        for seed in self.seeds(name):
            path = os.path.join(self.cell(name, seed), "cmd.json")
            if os.path.isfile(path):
                return json.load(open(path))["cmd"]
        return []

    def flag(self, name: str, flag: str, default: str) -> str:
        """The value of `flag` in the command of `name` (its last one), else default."""
        return stepcoder_gates.flag_value(self.command(name), flag, default)

    def names(self) -> list[str]:
        """The configs that have a cell folder, sorted."""
        return sorted(os.listdir(os.path.join(self.root, "cells")))

    def seeds(self, *names: str) -> list[int]:
        """The seeds every named cell has finished (a config may run more seeds than
        another: a pair compares the seeds both have)."""
        def started(name):
            folder = os.path.join(self.root, "cells", name)
            found = os.listdir(folder) if os.path.isdir(folder) else []
            return {int(f[4:]) for f in found if f.startswith("seed") and f[4:].isdigit()}
        common = set.intersection(*(started(n) for n in names)) if names else set()
        return sorted(s for s in common if all(self.summary(n, s) for n in names))


# ----------------------------------------------------------------------------- the claims

def family_ids(problems, family: str):
    """A subset function for compare(): the ids of `family`'s problems."""
    ids = {p.id for p in problems if p.metadata.get("family") == family}
    return lambda rates: ids


def measure(grid: Grid, pre: dict | None = None) -> list[dict]:
    """One record per claim: arms, the paper's figure, per-seed paired differences, verdict,
    and the group's precondition (`pre`, else preconditions() from the default files)."""
    problems = sources.load_problems("tasks", split="eval")
    labels = {p.id: p.metadata.get("family") for p in problems}
    pre = preconditions(grid) if pre is None else pre
    out = []

    def compare(claim, paper, sign, a, b, when_a="after_rl", when_b="after_rl", n=4, k=1,
                subset=None, note="", train=False, precondition=None, regime="every test"):
        seeds = grid.seeds(a, b)
        per_seed, within = [], []
        for s in seeds:
            ra, rb = (grid.rates(a, s, when_a, train, regime),
                      grid.rates(b, s, when_b, train, regime))
            if ra is None or rb is None:
                continue
            if subset is not None:
                keep = subset(ra)
                ra = {i: v for i, v in ra.items() if i in keep}
                rb = {i: v for i, v in rb.items() if i in keep}
            if not ra:
                continue
            d, se = paired(per_problem(ra, n, k), per_problem(rb, n, k), labels)
            per_seed.append(d)
            within.append(se)
        if not per_seed:
            return
        stat = over_seeds(per_seed)
        metric = f"{'train ' if train else ''}pass@{k}" + (
            ", 3 train-style tests" if regime == "train tests" else "")
        out.append({"claim": claim, "paper": paper, "a": f"{a} ({when_a})",
                    "b": f"{b} ({when_b})", "metric": metric, "regime": regime,
                    **stat, "within_seed_se": within, "verdict": verdict(stat, sign),
                    "note": note, "precondition": precondition})

    hard = lambda rates: {p.id for p in evalstats.hardest_problems(problems, rates)}  # noqa: E731
    # GRPO: learning or sharpening. The RL arm at T = 1 against the base sampled at lower
    # temperatures, both at the same lower temperature, and pass@k to 64.
    room = pre.get("room")
    compare("RL raises held-out pass@1 (GRPO, run.sh's 80 steps)", "+", 1, "grpo", "grpo",
            when_b="before_rl", precondition=room)
    compare("RL raises the train sample's pass@1 (GRPO)", "+", 1, "grpo", "grpo",
            when_b="before_rl", train=True, precondition=room)
    for t in ("0.5", "greedy"):
        arm = "greedy" if t == "greedy" else "t" + t
        compare(f"RL (T 1) beats the base sampled at T {t}", "+", 1, "grpo", f"base-{arm}",
                when_b="before_rl", precondition=room)
        compare(f"RL beats the base, both sampled at T {t}", "+", 1, f"grpo-{arm}",
                f"base-{arm}", when_a="before_rl", when_b="before_rl", precondition=room)
    for k in (1, 4, 16, 64):
        compare(f"pass@{k} after RL vs the base (70 held out x 64)",
                "- at large k (Yue et al.)" if k >= 16 else "+", 1 if k < 16 else -1,
                "grpo-pass64", "base-pass64", when_a="before_rl", when_b="before_rl", n=64, k=k,
                precondition=room)
    # StepCoder on the branchy families with 3 train tests. The paper's comparisons (its
    # Table: StepCoder 36.1, PPO 31.7; ablations: without FGO 35.5, without CCCS 34.6) are
    # full StepCoder against PPO and against itself less one part; each part against PPO is
    # ours (the ablations imply +2.9 and +3.8). Held out in both regimes (APPS+ scores a
    # problem on its few tests; every test is what those let through), the pool beside.
    fgo, cccs = pre.get("fgo"), pre.get("cccs")
    both = "; ".join(x for x in (fgo, cccs) if x) or None
    stepcoder = (
        ("StepCoder (CCCS + FGO) vs PPO", "+4.4 (36.1 vs 31.7, APPS+)", 1, "sc-cccs-fgo",
         "sc-ppo", both),
        ("StepCoder vs StepCoder without FGO, i.e. CCCS alone: what FGO adds",
         "+0.6 (36.1 vs 35.5)", 1, "sc-cccs-fgo", "sc-cccs", fgo),
        ("StepCoder vs StepCoder without CCCS, i.e. FGO alone: what CCCS adds",
         "+1.5 (36.1 vs 34.6)", 1, "sc-cccs-fgo", "sc-fgo", cccs),
        ("ours: FGO vs PPO", "not reported; implied +2.9 (34.6 vs 31.7)", 1, "sc-fgo",
         "sc-ppo", fgo),
        ("ours: CCCS vs PPO", "not reported; implied +3.8 (35.5 vs 31.7)", 1, "sc-cccs",
         "sc-ppo", cccs),
        ("ours: StepCoder with FGO's mask on the value loss too vs StepCoder",
         "the authors' harness masks it", 0, "sc-cccs-fgo-vmask", "sc-cccs-fgo", fgo))
    for train, regime in ((False, "every test"), (False, "train tests"), (True, "every test")):
        where = "pool" if train else "held out" + (
            ", 3 train-style tests" if regime == "train tests" else "")
        compare(f"PPO raises pass@1 ({where})", "+", 1, "sc-ppo", "sc-ppo", when_b="before_rl",
                train=train, precondition=pre.get("branchy"), regime=regime)
        for claim, paper, sign, a, b, precondition in stepcoder:
            compare(f"{claim} ({where})", paper, sign, a, b, train=train, regime=regime,
                    precondition=precondition)
        compare(f"ours: CCCS vs PPO on the exploration family chain_long ({where})", "+",
                1, "sc-cccs", "sc-ppo", train=train, subset=family_ids(problems, CCCS_FAMILY),
                precondition=cccs, regime=regime)
    out += metric_claims(grid, "FGO changes what 3 tests let through: false-pass rate over "
                         "the last 10 RL steps, FGO vs PPO", "", "sc-fgo", "sc-ppo",
                         "false_pass_frac", sign=0, last=10, precondition=fgo)
    # DRIVE: stage 2 vs continuing stage 1 at equal rollouts
    drive = pre.get("drive")
    compare("DRIVE: stage 2 > continuing stage 1, hardest quarter pass@1",
            "+7.0 (LCB v5 .627 -> .697)", 1, "drive-hard", "drive-continue", subset=hard,
            precondition=drive)
    compare("DRIVE: stage 2 > continuing stage 1, hardest quarter pass@4", "+", 1,
            "drive-hard", "drive-continue", subset=hard, k=4, precondition=drive)
    compare("DRIVE: stage 2 vs continuing stage 1, all held out", "+", 1, "drive-hard",
            "drive-continue", precondition=drive)
    out += agent_claims(grid, pre.get("game"))
    return out


def ladder_budget(cmd: list[str]) -> dict:
    """stepcoder_gates.ladder_budget for a CCCS cell's command: its pool (--train-data cut by
    --max-problems) and its flags; {} for no command."""
    if not cmd:
        return {}
    pool = []
    for part in stepcoder_gates.flag_value(cmd, "--train-data", "tasks:rl").split(","):
        name, _, path = part.partition(":")
        pool += sources.load_problems(name, split="train", path=path or None)
    n = int(stepcoder_gates.flag_value(cmd, "--max-problems", 0))
    return stepcoder_gates.ladder_budget(pool[:n] if n else pool, cmd)


def cccs_gates(grid: Grid, gates: dict, trajectories: list[dict] | None = None) -> str:
    """The CCCS ladder's own preconditions as one clause: from the base
    (bench/stepcoder_gates.py's results: the pool's first stage under the train tests and
    the ladder the CCCS cells ran with), the cells' budget (ladder_budget of their command)
    and the cells' share of draws at the whole-program stage over their last 5 RL steps
    (target >= 0.25)."""
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    choice = grid.flag("sc-cccs", "--train-tests", "first")
    rungs = grid.flag("sc-cccs", "--cccs-rungs", "sqrt")
    parts = []
    if cov := gates.get("coverage", {}).get("pool", {}).get(f"{rungs}/{choice}"):
        first = cov["all"]["1"]
        parts.append(f"first stage's new code run by the 3 {choice} train tests "
                     f"{first['mean']:.2f}, none in {first['zero']} of {first['stages']} pool "
                     f"problems ({met(first['zero'] == 0)})")
    if budget := ladder_budget(grid.command("sc-cccs")):
        short = [f for f, b in budget.items() if not b["ok"]]
        draws = next(iter(budget.values()))["draws"]
        parts.append(f"{draws:g} draws a pool problem, " + (
            f"short of 2 x rungs + 10 in {', '.join(short)} (NOT met)" if short
            else "2 x rungs + 10 (met)"))
    final = [v for name in ("sc-cccs", "sc-cccs-fgo") for s in grid.seeds(name)
             if (v := grid.rl_mean(name, s, "cccs_draws_final_share", last=5)) is not None]
    if final:
        share = statistics.fmean(final)
        parts.append(f"draws at the whole program, last 5 steps {share:.2f} "
                     f"(>= 0.25: {met(share >= 0.25)})")
    if trajectories is None:
        trajectories = stage_trajectories(grid)
    late = [r["last_final"] for r in trajectories
            if r["family"] == CCCS_FAMILY and r["last_final"] is not None]
    if late:
        share = statistics.fmean(late)
        parts.append(f"{CCCS_FAMILY}'s draws at the whole program, last 5 steps {share:.2f} "
                     f"(>= 0.25: {met(share >= 0.25)})")
    return "; ".join(parts)


def preconditions(grid: Grid, path: str | None = None, gates_path: str | None = None,
                  trajectories: list[dict] | None = None) -> dict:
    """Each group's precondition as one line: the figure measured from the base
    (bench/results/preconditions/preconditions.json, `path`; for CCCS also
    bench/results/stepcoder-gates/results.json, `gates_path`: cccs_gates), with the target and
    met / NOT met, and where the grid's own cells measure it (FGO's masked share, CCCS's stage
    moves and draws at the whole program, the tester's valid share) that figure beside it. A
    missing file or cell: that part is left out."""
    path = path or os.path.join(ROOT, "bench", "results", "preconditions", "preconditions.json")
    gates_path = gates_path or os.path.join(ROOT, "bench", "results", "stepcoder-gates",
                                            "results.json")
    base = json.load(open(path)) if os.path.isfile(path) else {}
    gates = json.load(open(gates_path)) if os.path.isfile(gates_path) else {}
    met = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    out = {}
    if room := base.get("room"):
        gap = room["pass@8"] - room["pass@1"]
        out["room"] = f"room pass@8 - pass@1 {gap:.3f} (>= 0.15: {met(gap >= 0.15)})"
        fam = room["pass@1_by_family"]
        branchy = {f: fam[f] for f in STEPCODER_BRANCHY if f in fam}
        inside = all(0.1 <= v <= 0.7 for f, v in branchy.items() if f != CCCS_FAMILY)
        out["branchy"] = ("base pass@1 " + ", ".join(f"{f} {v:.2f}" for f, v in branchy.items())
                          + f" (0.1-0.7 but chain_long: {met(inside)})")
    masked = [v for name in ("sc-fgo", "sc-cccs-fgo") for s in grid.seeds(name)
              if (v := grid.rl_mean(name, s, "fgo_masked_share")) is not None]
    if masked:
        share = statistics.fmean(masked)
        out["fgo"] = f"tokens masked {share:.1%} in the FGO cells (>= 10%: {met(share >= 0.10)})"
    if c := base.get("cccs"):
        ok = c["whole_pass@8"] <= 0.05 and c["last_stage_pass@8"] >= 0.3
        stages = curriculum_moves(grid)
        moved = [r for r in stages if r["first"] != r["last"]]
        cells = len(stages)
        out["cccs"] = (f"chain_long whole pass@8 {c['whole_pass@8']:.2f}, from its last split "
                       f"point {c['last_stage_pass@8']:.2f} ({met(ok)})"
                       + (f"; stages moved in {len(moved)} of {cells} CCCS cells" if cells else "")
                       + (f"; {ladder}" if (ladder := cccs_gates(grid, gates, trajectories))
                          else ""))
    if d := base.get("drive"):
        out["drive"] = (f"hardest quarter with pass@64 > 0: {d['share_solved']:.2f} "
                        f"(>= 0.5: {met(d['share_solved'] >= 0.5)})")
    valid = [v for name in ("agents-shared", "agents-per-role") for s in grid.seeds(name)
             if (v := ablate.metric(grid.summary(name, s) or {}, [],
                                    "before_rl.tester_valid_share")) is not None]
    if valid:
        share = statistics.fmean(valid)
        out["game"] = f"tester's valid share {share:.2f} before RL (>= 0.5: {met(share >= 0.5)})"
    return out


def agent_claims(grid: Grid, precondition: str | None = None) -> list[dict]:
    """AT-GRPO's claims from agents.py's summaries (pass@1 over episodes, no per-problem
    record): per seed the difference of two figures, over seeds its mean and se."""
    out = []

    def compare(claim, paper, a, key_a, b, key_b, sign=1):
        per_seed = []
        for s in grid.seeds(a, b):
            x, y = (ablate.metric(grid.summary(a, s), [], key_a),
                    ablate.metric(grid.summary(b, s), [], key_b))
            if x is not None and y is not None:
                per_seed.append(x - y)
        if per_seed:
            stat = over_seeds(per_seed)
            out.append({"claim": claim, "paper": paper, "a": f"{a} ({key_a})",
                        "b": f"{b} ({key_b})", "metric": "pass@1", **stat,
                        "verdict": verdict(stat, sign), "note": "",
                        "precondition": precondition})

    alone, turns = "pass@1_coder_alone", "pass@1_after_turns"
    compare("AT-GRPO: turns help before RL (system vs coder alone)", "+", "agents-shared",
            f"before_rl.{turns}", "agents-shared", f"before_rl.{alone}")
    for policy in ("shared", "per-role"):
        compare(f"AT-GRPO: turns help after RL ({policy})", "+", f"agents-{policy}",
                f"after_rl.{turns}", f"agents-{policy}", f"after_rl.{alone}")
    compare("AT-GRPO: RL raises the system (shared)", "+9.3 (LCB 1.7B 11.6 -> 20.9)",
            "agents-shared", f"after_rl.{turns}", "agents-shared", f"before_rl.{turns}")
    compare("AT-GRPO: RL raises the system (per-role)", "+12.4 (LCB 1.7B 11.6 -> 24.0)",
            "agents-per-role", f"after_rl.{turns}", "agents-per-role", f"before_rl.{turns}")
    compare("AT-GRPO: per-role > shared after RL", "+3.1 (LCB 1.7B 24.0 vs 20.9)",
            "agents-per-role", f"after_rl.{turns}", "agents-shared", f"after_rl.{turns}")
    compare("AT-GRPO: catch bonus 1 vs 0, system after RL", "+", "agents-shared",
            f"after_rl.{turns}", "agents-shared-catch0", f"after_rl.{turns}")
    # does the tester learn to write catching tests: the share over training, bonus 1 vs 0
    out += metric_claims(grid, "AT-GRPO: the catch bonus raises the tester's catching tests",
                         "+", "agents-shared", "agents-shared-catch0", "tester_catch_share_mean",
                         precondition=precondition)
    return out


def metric_claims(grid: Grid, claim: str, paper: str, a: str, b: str, key: str,
                  sign: int = 1, last: int | None = None,
                  precondition: str | None = None) -> list[dict]:
    """[the claim record] for a training metric: per seed the difference of KEY's mean over
    the RL rows of metrics.jsonl (the last `last` rows when given; arm a - arm b); [] when no
    seed has both."""
    per_seed = []
    for s in grid.seeds(a, b):
        x, y = grid.rl_mean(a, s, key, last), grid.rl_mean(b, s, key, last)
        if x is not None and y is not None:
            per_seed.append(x - y)
    if not per_seed:
        return []
    stat = over_seeds(per_seed)
    steps = f"last {last} RL steps" if last else "RL steps"
    return [{"claim": claim, "paper": paper, "a": a, "b": b,
             "metric": f"{key} (mean over {steps})", **stat, "verdict": verdict(stat, sign),
             "note": "", "precondition": precondition}]


def early_late(grid: Grid, prefix: str, key: str, window: int) -> list[dict]:
    """Per cell whose name starts with `prefix`: KEY averaged over its first and its last
    `window` RL rows of metrics.jsonl, each the mean over seeds (cells with fewer than
    2 x window such rows are left out). The StepCoder cells' false_pass_frac (of the rollouts
    passing the 3 train tests, the share failing the full set): what the few tests let
    through early and late in RL; the AT-GRPO cells' tester shares: does the tester learn?"""
    out = []
    for name in (n for n in grid.names() if n.startswith(prefix)):
        first, last = [], []
        for s in grid.seeds(name):
            rows = [r for r in ablate.read_rows(os.path.join(grid.cell(name, s), "metrics.jsonl"))
                    if r.get("phase") == "rl" and ablate.number(r.get(key)) is not None]
            if len(rows) >= 2 * window:
                first.append(statistics.fmean(r[key] for r in rows[:window]))
                last.append(statistics.fmean(r[key] for r in rows[-window:]))
        if first:
            out.append({"cell": name, "key": key, "window": window, "seeds": len(first),
                        "first": over_seeds(first), "last": over_seeds(last)})
    return out


def curriculum_moves(grid: Grid) -> list[dict]:
    """Per CCCS cell and seed: the train problems at each stage (cccs_final-J: J stages
    before the whole program; a problem without conditionals is at "final" from the start)
    at the first and the last RL step (a stage with no problem has no key), and the mean over
    RL steps of the share at the final stage, from metrics.jsonl. Equal dicts: no stage
    moved."""
    out = []
    for name in (n for n in grid.names() if "cccs" in n):
        for s in grid.seeds(name):
            rows = [r for r in ablate.read_rows(os.path.join(grid.cell(name, s), "metrics.jsonl"))
                    if "cccs_final_share" in r]
            if not rows:
                continue
            stages = lambda r: {k: v for k, v in r.items()  # noqa: E731
                                if k.startswith("cccs_final") and k != "cccs_final_share"}
            out.append({"cell": name, "seed": s, "first": stages(rows[0]),
                        "last": stages(rows[-1]), "final_share_mean": statistics.fmean(
                            r["cccs_final_share"] for r in rows)})
    return out


def family_of(pid: str) -> str:
    """A tasks problem's family from its id (tasks/<family>/<split>/<n>); "-" otherwise."""
    parts = str(pid).split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tasks" else "-"


def stage_trajectories(grid: Grid, last: int = 5) -> list[dict]:
    """Per CCCS cell, seed and pool problem, its trajectory as the run logged it (the state
    records of the cell's samples.jsonl, written every step a curriculum draws a problem):
    "path" the runs of consecutive steps at one drawn stage [[stage, steps, mean pass rate]],
    "draws" per stage, "final_draws" and "last_final" (the share of its draws over the cell's
    last `last` RL steps at the whole-program stage). A cell without states is left out."""
    out = []
    for name in (n for n in grid.names() if "cccs" in n):
        for s in grid.seeds(name):
            if not os.path.isfile(os.path.join(grid.cell(name, s), samples.FILE)):
                continue                       # a cell from before the state records
            _, _, states = samples.load(grid.cell(name, s))
            end = max((st["step"] for st in states), default=0)
            by_problem: dict[str, list] = {}
            for st in states:
                for p in st.get("problems", []):
                    if p.get("drawn_stage") is not None:
                        by_problem.setdefault(str(p["problem"]), []).append(
                            (st["step"], p["drawn_stage"], p["step_pass_rate"], p["draws"]))
            for pid, rows in by_problem.items():
                path: list[list] = []
                for _, stage, rate, _ in rows:
                    if path and path[-1][0] == stage:
                        path[-1][1] += 1
                        path[-1][2].append(rate)
                    else:
                        path.append([stage, 1, [rate]])
                draws: dict[str, int] = {}
                for _, stage, _, n in rows:
                    draws[stage] = draws.get(stage, 0) + n
                late = [(stage, n) for step, stage, _, n in rows if step > end - last]
                out.append({"cell": name, "seed": s, "problem": pid, "family": family_of(pid),
                            "path": [[st, k, round(statistics.fmean(r), 3)] for st, k, r in path],
                            "draws": draws, "final_draws": draws.get("final", 0),
                            "last_final": (sum(n for st, n in late if st == "final")
                                           / sum(n for _, n in late)) if late else None})
    return out


def trajectories_markdown(rows: list[dict]) -> str:
    """One line per (cell, seed, problem): its stages in order, each with the steps it was
    drawn there and their mean pass rate; then per cell and family the share of problems
    ever drawn at the whole program and the mean late share of draws there."""
    if not rows:
        return ""
    lines = ["## CCCS: each pool problem's stages, as logged", "",
             "| cell | seed | problem | stages drawn (steps, mean pass rate) |",
             "|---|---|---|---|"]
    for r in rows:
        path = " -> ".join(f"{st} ({k}, {rate:.2f})" for st, k, rate in r["path"])
        lines.append(f"| {r['cell']} | {r['seed']} | {r['problem']} | {path} |")
    lines += ["", "| cell | family | problems x seeds | ever drawn whole | draws at the whole "
              "program, last 5 steps |", "|---|---|---|---|---|"]
    groups: dict[tuple, list] = {}
    for r in rows:
        groups.setdefault((r["cell"], r["family"]), []).append(r)
    for (cell, fam), rs in sorted(groups.items()):
        late = [r["last_final"] for r in rs if r["last_final"] is not None]
        share = f"{statistics.fmean(late):.2f}" if late else "-"
        lines.append(f"| {cell} | {fam} | {len(rs)} | {sum(r['final_draws'] > 0 for r in rs)} "
                     f"| {share} |")
    return "\n".join(lines) + "\n"


def embeds_seen_output(program: str | None, tests: list[dict], valid: list[bool]) -> bool | None:
    """Whether `program` holds, as a literal, the expected output of a valid test it was shown
    (hard-coding what it saw); None when there is no program or it does not parse. Outputs
    "", "0" and "1" are too common in real programs to count."""
    if not program:
        return None
    try:
        with warnings.catch_warnings():     # a garbled program's "1st" is not our warning
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(program)
    except (SyntaxError, ValueError):   # ValueError: NUL bytes
        return None
    literals = {str(n.value).strip() for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and n.value is not None}
    seen = {str(t["output"]).strip() for t, ok in zip(tests, valid) if ok} - {"", "0", "1"}
    return bool(seen & literals)


def hard_coding(grid: Grid) -> list[dict]:
    """Per AT-GRPO cell and evaluation (eval_<when>.jsonl, over its finished seeds): episodes,
    final programs that parse, of those the ones shown a valid test, and of those the ones
    holding a shown test's output as a literal (embeds_seen_output)."""
    out = []
    for name in (n for n in grid.names() if n.startswith("agents")):
        for when in ("before_rl", "after_rl", "train_before_rl", "train_after_rl"):
            row = {"cell": name, "when": when, "episodes": 0, "parsable": 0,
                   "shown_valid_tests": 0, "embeds_seen_output": 0}
            for s in grid.seeds(name):
                for e in ablate.read_rows(os.path.join(grid.cell(name, s), f"eval_{when}.jsonl")):
                    row["episodes"] += 1
                    valid = e.get("valid") or []
                    hit = embeds_seen_output(e.get("program"), e.get("tests") or [], valid)
                    if hit is None:
                        continue
                    row["parsable"] += 1
                    row["shown_valid_tests"] += any(valid)
                    row["embeds_seen_output"] += hit
            if row["episodes"]:
                out.append(row)
    return out


def temperatures(grid: Grid) -> list[dict]:
    """The base's held-out pass@1 at each evaluation temperature (mean over seeds)."""
    rows = []
    for name, label, key in (("grpo", "1.0", "pass_at_1_before_rl"),
                             ("base-t0.5", "0.5", "pass_at_1_before_rl"),
                             ("base-greedy", "0 (greedy)", "pass_at_1_before_rl"),
                             ("grpo", "1.0 after RL", "pass_at_1_after_rl"),
                             ("grpo-t0.5", "0.5 after RL", "pass_at_1_before_rl"),
                             ("grpo-greedy", "0 (greedy) after RL", "pass_at_1_before_rl")):
        vals = [grid.summary(name, s)[key] for s in grid.seeds(name)]
        if vals:
            rows.append({"temperature": label, **over_seeds(vals)})
    return rows


def pass_curves(grid: Grid, ks) -> dict:
    """{"base-pass64" / "grpo-pass64": {k: mean over seeds of pass@k}}."""
    curves = {}
    for name in ("base-pass64", "grpo-pass64"):
        per = [pass_at_k_curve(counts(r, 64), 64, ks)
               for s in grid.seeds(name) if (r := grid.rates(name, s, "before_rl"))]
        if per:
            curves[name] = {k: statistics.fmean(c[k] for c in per) for k in ks}
    return curves


def timeline(grid: Grid) -> list[dict]:
    """Every finished cell with its start (cmd.json written) and end (summary.json written)
    times, in start order: which cells ran side by side, and the grid's wall time."""
    rows = []
    cells = os.path.join(grid.root, "cells")
    for name in grid.names():
        for seed_dir in sorted(os.listdir(os.path.join(cells, name))):
            cell = os.path.join(cells, name, seed_dir)
            start, end = (os.path.join(cell, f) for f in ("cmd.json", "summary.json"))
            if os.path.isfile(start) and os.path.isfile(end):
                rows.append({"cell": f"{name} {seed_dir}", "start": os.path.getmtime(start),
                             "end": os.path.getmtime(end)})
    return sorted(rows, key=lambda r: r["start"])


def timeline_markdown(rows: list[dict]) -> str:
    if not rows:
        return ""
    t0 = min(r["start"] for r in rows)
    clock = lambda t: time.strftime("%H:%M", time.gmtime(t))  # noqa: E731
    lines = [f"Wall time from the first start to the last end: "
             f"{(max(r['end'] for r in rows) - t0) / 60:.0f} min "
             f"({clock(t0)} - {clock(max(r['end'] for r in rows))} UTC).", "",
             "| cell | start (UTC) | end | minutes |", "|---|---|---|---|"]
    lines += [f"| {r['cell']} | {clock(r['start'])} | {clock(r['end'])} | "
              f"{(r['end'] - r['start']) / 60:.1f} |" for r in rows]
    return "\n".join(lines) + "\n"


def fmt(x, signed=True, scale=100.0) -> str:
    return "-" if x is None else (f"{x * scale:+.1f}" if signed else f"{x * scale:.1f}")


def markdown(claims: list[dict], temps: list[dict], curves: dict, stages=(),
             coded=(), trends=()) -> str:
    lines = ["| claim | the paper's figure | ours (points, mean ± se over RL seeds) | per RL seed "
             "| verdict | precondition |", "|---|---|---|---|---|---|"]
    for c in claims:
        per = " / ".join(fmt(v) for v in c["seeds"])
        lines.append(f"| {c['claim']}: {c['a']} - {c['b']}, {c['metric']} | {c['paper']} | "
                     f"{fmt(c['mean'])} ± {fmt(c['se'], signed=False)} | {per} | "
                     f"{c['verdict']} | {c.get('precondition') or '-'} |")
    lines += ["", "| evaluation temperature | held-out pass@1 (mean ± se over seeds) |",
              "|---|---|"]
    lines += [f"| {t['temperature']} | {t['mean']:.3f} ± {t['se'] or 0:.3f} |" for t in temps]
    if curves:
        ks = sorted(next(iter(curves.values())))
        lines += ["", "| k | " + " | ".join(curves) + " |", "|---" * (len(curves) + 1) + "|"]
        lines += [f"| {k} | " + " | ".join(f"{c[k]:.3f}" for c in curves.values()) + " |"
                  for k in ks]
    if stages:
        lines += ["", "| CCCS cell | seed | problems per stage, first RL step | last RL step | "
                  "share at the final stage, mean over steps |", "|---|---|---|---|---|"]
        show = lambda d: ", ".join(f"{k[5:]} {v}" for k, v in sorted(d.items()))  # noqa: E731
        lines += [f"| {r['cell']} | {r['seed']} | {show(r['first'])} | {show(r['last'])} | "
                  f"{r['final_share_mean']:.2f} |" for r in stages]
    if trends:
        lines += ["", "| cell | metric | seeds | first RL steps (mean over seeds) "
                  "| last RL steps |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['cell']} | {r['key']} | {r['seeds']} | {r['first']['mean']:.3f} "
                  f"(first {r['window']}) | {r['last']['mean']:.3f} (last {r['window']}) |"
                  for r in trends]
    if coded:
        lines += ["", "| AT-GRPO cell | evaluation | episodes | final programs that parse | "
                  "shown a valid test | holding a shown test's output |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['cell']} | {r['when']} | {r['episodes']} | {r['parsable']} | "
                  f"{r['shown_valid_tests']} | {r['embeds_seen_output']} |" for r in coded]
    return "\n".join(lines) + "\n"


def picture(claims: list[dict], curves: dict, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("[claims] matplotlib is not installed (requirements-bench.txt): no picture")
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5),
                                      gridspec_kw={"width_ratios": [1, 1.6]})
    for name, curve in curves.items():
        ks = sorted(curve)
        left.plot(ks, [curve[k] for k in ks], marker="o", label=name.replace("-pass64", ""))
    left.set_xscale("log", base=2)
    left.set_xlabel("k")
    left.set_ylabel("held-out pass@k (70 problems x 64 samples)")
    left.set_title("pass@k before (base) and after GRPO")
    if curves:
        left.legend()
    shown = [c for c in claims if c["se"] is not None]
    y = list(range(len(shown)))
    colors = {"shown": "tab:green", "not shown": "tab:gray", "reversed": "tab:red"}
    means = [c["mean"] * 100 for c in shown]
    # The axis holds the small differences; a bar past it is cut and its value written.
    lim = max([8.0, *(abs(m) + 2 * c["se"] * 100 for m, c in zip(means, shown) if abs(m) < 15)])
    right.barh(y, [max(-lim, min(lim, m)) for m in means],
               xerr=[2 * c["se"] * 100 if abs(m) < lim else 0 for m, c in zip(means, shown)],
               color=[colors.get(c["verdict"], "tab:gray") for c in shown])
    for i, m in enumerate(means):
        if abs(m) >= lim:
            right.text(-lim * 0.98 if m < 0 else lim * 0.5, i, f"{m:+.1f}", va="center",
                       fontsize=7, color="white")
    right.set_xlim(-lim, lim)
    right.set_yticks(y, [f"{c['claim'][:60]} ({c['metric'].split()[0]})" for c in shown],
                     fontsize=6.5)
    right.axvline(0, color="black", lw=0.8)
    right.invert_yaxis()
    right.set_xlabel("paired difference, points (bars: 2 se over seeds)")
    right.set_title("each claim (green: shown, red: reversed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--grid-out", default="runs/claims",
                   help="the --out folder of `bench/ablate.py --grid claims`")
    p.add_argument("--out", default="bench/results/claims",
                   help="where claims.json, claims.md and claims.png go")
    p.add_argument("--preconditions", default=None, metavar="FILE",
                   help="the base's preconditions.json (bench/preconditions.py; default: "
                        "bench/results/preconditions/preconditions.json, the shipped base's)")
    p.add_argument("--stepcoder-gates", default=None, metavar="FILE",
                   help="the base's bench/stepcoder_gates.py results.json (default: "
                        "bench/results/stepcoder-gates/results.json, the shipped base's)")
    a = p.parse_args(argv)
    if not os.path.isdir(os.path.join(a.grid_out, "cells")):
        p.error(f"{a.grid_out}/cells does not exist: run bench/ablate.py --grid claims first")
    for path in (a.preconditions, a.stepcoder_gates):
        if path is not None and not os.path.isfile(path):
            p.error(f"{path}: no such file")
    grid = Grid(a.grid_out)
    paths = stage_trajectories(grid)
    pre = preconditions(grid, a.preconditions, a.stepcoder_gates, paths)
    claims, temps, stages = measure(grid, pre), temperatures(grid), curriculum_moves(grid)
    coded = hard_coding(grid)
    trends = (early_late(grid, "sc-", "false_pass_frac", 10)
              + [r for key in ("tester_valid_share_mean", "tester_catch_share_mean")
                 for r in early_late(grid, "agents-", key, 5)])
    curves = pass_curves(grid, [1, 2, 4, 8, 16, 32, 64])
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "claims.json"), "w") as f:
        json.dump({"claims": claims, "temperatures": temps, "pass_at_k": curves,
                   "cccs_stages": stages, "cccs_trajectories": paths, "hard_coding": coded,
                   "early_late": trends, "preconditions": pre}, f, indent=1)
    md = (markdown(claims, temps, curves, stages, coded, trends) + "\n"
          + trajectories_markdown(paths) + "\n" + timeline_markdown(timeline(grid)))
    with open(os.path.join(a.out, "claims.md"), "w") as f:
        f.write(md)
    picture(claims, curves, os.path.join(a.out, "claims.png"))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
