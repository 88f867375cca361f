"""StepCoder's preconditions, measured from one model before its claims: can the train tests
check each CCCS stage, how much do 3 tests let through at each stage, what FGO masks, and can
chain_long's ladder be climbed.

    .venv/bin/python bench/stepcoder_gates.py --model base --out bench/results/stepcoder-gates

Problems: the claims grid's CCCS pool (bench/grids.py: the first --pool problems of
tasks:rl@STEPCODER_FAMILIES, as `--max-problems` cuts them) and held out (the first
--held-out-per-family of each family in tasks:eval). Each measure is taken for both choices of
the 3 train tests (world/train_tests.py): "first", the stored order (few_tests_first: the first
3 run two paths), and "drawn", 3 drawn per problem.

  coverage   from the reference: the share of each stage's new code (stage_lines: the lines
             its completion adds to the previous stage's) that the train tests run
             (executable lines, the sandbox's coverage), per family and stage; a stage none of
             whose new code runs is no stage: the reward cannot check it
  pass       the model completes every problem from every split point (rungs of one
             conditional, and the whole program), n samples each at T = 1; each program is
             judged ONCE on every test with coverage, and every regime is read from those
             verdicts: all tests, the first 3 ("first"), the 3 drawn ("drawn"); the gap between
             3 tests and all is what the few tests let through at that stage
  fgo        FGO's mask (ppo_fgo.completion_fgo_mask) of those samples under each choice's
             train tests: masked tokens / all tokens, whole programs and stage completions
  ladder     chain_long's pass rate per rung (r = 1: its last guarded step; r: its last r
             steps), and the draws a problem gets against what climbing needs
             (draws_to_climb) for the claims grid's StepCoder settings

Writes <out>/results.json and prints the tables the README quotes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grids  # noqa: E402

import cccs  # noqa: E402
import data  # noqa: E402
import ppo_fgo  # noqa: E402
import rollouts  # noqa: E402
import sandbox  # noqa: E402
from world import sources  # noqa: E402
from world.train_tests import CHOICES, train_test_order  # noqa: E402

FAMILIES = tuple(grids.STEPCODER_FAMILIES.split("+"))


# ----------------------------------------------------------------------------- pure helpers

def stage_lines(starts, n_lines: int) -> list[range]:
    """The lines each stage adds to the completion the stage before it asked for (its new
    code), 1-based, for cccs.stage_starts' `starts` of an n_lines program: stage 0 from its
    start to the end, stage j from its start to the line before stage j-1's start, the final
    stage (None) the lines above the earliest split point.

    >>> stage_lines([5, 3, None], 6)
    [range(5, 7), range(3, 5), range(1, 3)]
    """
    out, end = [], n_lines + 1
    for start in starts:
        first = 1 if start is None else start
        out.append(range(first, end))
        end = first
    return out


def new_code_shares(code: str, starts, executed: set[int]) -> list[float | None]:
    """Per stage of `starts`: the share of its new code's executable lines that `executed`
    holds (None: the stage adds no executable line)."""
    runnable = sandbox.executable_lines(code)
    out = []
    for region in stage_lines(starts, len(cccs.physical_lines(code))):
        lines = runnable.intersection(region)
        out.append(len(lines & executed) / len(lines) if lines else None)
    return out


def train_verdict(result, idx: list[int]):
    """What the reward would have seen had the program been judged on the tests `idx` only,
    in that order, from its verdicts on every test: .status (the first failing verdict, or
    pass) and .executed_lines (their union; None unless every one's coverage is known), the
    fields ppo_fgo.completion_fgo_mask reads. A program without test verdicts (compile error)
    keeps its own."""
    if len(result.tests) < result.total or not idx:
        return SimpleNamespace(status=result.status, executed_lines=None)
    tests = [result.tests[i] for i in idx]
    status = next((t.status for t in tests if t.status != sandbox.PASS), sandbox.PASS)
    known = all(t.coverage_known for t in tests)
    return SimpleNamespace(status=status, executed_lines=set().union(
        *(t.executed_lines for t in tests)) if known else None)


def draws_to_climb(stages: int, span: int, slack: int = 10) -> int:
    """Draws a problem needs to climb its ladder: `span` updates at each of its `stages`
    stages below the whole program (the fewest that move it up: cccs.CCCSSchedule.update),
    plus `slack` for draws that fail and draws at the top.

    >>> draws_to_climb(6, 2)       # chain_long's longest ladder at rungs of one conditional
    22
    """
    return span * stages + slack


def flag_value(argv: list[str], flag: str, default=None):
    """The value after `flag` in an argv list (the last one), else default."""
    idx = [i for i, x in enumerate(argv) if x == flag]
    return argv[idx[-1] + 1] if idx else default


def ladder_budget(problems, argv: list[str]) -> dict:
    """For a trainer's argv (a grid's StepCoder command): draws a pool problem gets (steps x
    prompts per step / pool size, epoch order) against draws_to_climb of its ladder, per
    family: {family: {"stages": most stages below the whole program, "need", "draws", "ok"}}."""
    steps = int(flag_value(argv, "--steps", 40))
    per_step = int(flag_value(argv, "--prompts-per-step", 8))
    span = int(flag_value(argv, "--cccs-span", 4))
    rungs = flag_value(argv, "--cccs-rungs", "sqrt")
    draws = steps * per_step / max(len(problems), 1)
    out: dict = {}
    for p in problems:
        stages = len(cccs.stage_starts(p.solutions[0], rungs=rungs)) - 1
        fam = out.setdefault(p.metadata["family"], {"stages": 0})
        fam["stages"] = max(fam["stages"], stages)
    for fam in out.values():
        fam.update(need=draws_to_climb(fam["stages"], span), draws=round(draws, 1))
        fam["ok"] = fam["draws"] >= fam["need"]
    return dict(sorted(out.items()))


def mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.fmean(values) if values else None


# ----------------------------------------------------------------------------- measurements

def pool_and_held_out(pool: int, per_family: int) -> dict[str, list]:
    """The claims grid's CCCS pool (its --train-data cut by --max-problems) and held out (the
    first per_family of each family of its --eval-data)."""
    spec = "@" + grids.STEPCODER_FAMILIES
    held, taken = [], {}
    for p in sources.load_problems("tasks", split="eval", path="eval" + spec):
        fam = p.metadata["family"]
        if taken.get(fam, 0) < per_family:
            taken[fam] = taken.get(fam, 0) + 1
            held.append(p)
    return {"pool": sources.load_problems("tasks", split="rl", path="rl" + spec)[:pool],
            "held_out": held}


def train_idx(problem, n_tests: int) -> dict[str, list[int]]:
    """{choice: indices of the problem's n_tests train tests}."""
    return {c: train_test_order(problem, c)[:n_tests] for c in CHOICES}


def reference_coverage(problems, n_tests: int, workers) -> list[dict]:
    """Per problem, per ladder (rungs "sqrt": today's CCCS, "every": one conditional a
    rung) and per train test choice: the new-code shares of its stages below the whole
    program (new_code_shares), from one coverage run of the reference on every test."""
    jobs = [data.sandbox_job(p, p.solutions[0], coverage=True, timeout=4.0,
                             stop_after_timeout=False) for p in problems]
    out = []
    for p, res in zip(problems, sandbox.run_batch(jobs, workers=workers)):
        code = p.solutions[0]
        row = {"id": p.id, "family": p.metadata["family"]}
        for choice, idx in train_idx(p, n_tests).items():
            executed = set().union(*(res.tests[i].executed_lines for i in idx))
            for rungs in cccs.RUNGS:
                starts = cccs.stage_starts(code, rungs=rungs)
                row[f"{rungs}/{choice}"] = new_code_shares(code, starts, executed)[:-1]
        out.append(row)
    return out


def sample_stages(engine, tok, problems, n: int, n_tests: int, max_new_tokens: int, seed: int,
                  workers) -> list[dict]:
    """Per (problem, rung): n completions from the rung's split point (rungs "every"; rung
    r = the last r conditionals; "whole" = the whole program), each judged once on every test
    with coverage; per sample its verdict on every test, on each choice's train tests, and its
    FGO mask counts under each choice."""
    prompts = []
    for p in problems:
        starts = cccs.stage_starts(p.solutions[0], rungs="every")
        for r, start in enumerate(starts, start=1):
            prefix = cccs.make_subtask(p.solutions[0], start)[0]
            prompts.append((p, "whole" if start is None else r, len(starts) - 1, prefix))
    outs = engine.generate([rollouts.prompt_text(tok, p, x) for p, _, _, x in prompts], n=n,
                           temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, seed=seed)
    flat = [(q, c, cccs.rewarded_program(q[3], c.text)) for q, o in zip(prompts, outs) for c in o]
    jobs = [data.sandbox_job(q[0], code, coverage=True, timeout=2.0, stop_after_timeout=False)
            for q, _, code in flat if code is not None]
    results = iter(sandbox.run_batch(jobs, workers=workers))
    rows = []
    for (p, rung, n_points, prefix), c, code in flat:
        res = next(results) if code is not None else None
        row = {"id": p.id, "family": p.metadata["family"], "rung": rung, "points": n_points,
               "all": rollouts.passes_train_tests(res, 0), "tokens": len(c.token_ids)}
        for choice, idx in train_idx(p, n_tests).items():
            seen = train_verdict(res, idx) if res is not None else None
            row[choice] = seen is not None and seen.status == sandbox.PASS
            mask = ppo_fgo.completion_fgo_mask(tok, c, prefix, code, seen) if seen else None
            row[f"masked/{choice}"] = 0 if mask is None else len(mask) - sum(mask)
        rows.append(row)
    return rows


# ----------------------------------------------------------------------------- summaries

def coverage_summary(rows: list[dict]) -> dict:
    """{ladder/choice: {family: {stage: {"mean", "zero", "stages"}}}}, stage = "1", "2", ...
    counted from the first stage (the last conditional); "zero" counts the stages with no new
    code run (no stage); family "all" pools them."""
    out: dict = {}
    for key in (f"{r}/{c}" for r in cccs.RUNGS for c in CHOICES):
        per: dict = {}
        for row in rows:
            for j, share in enumerate(row[key], start=1):
                if share is not None:
                    for fam in (row["family"], "all"):
                        per.setdefault(fam, {}).setdefault(str(j), []).append(share)
        out[key] = {fam: {s: {"mean": mean(v), "zero": sum(x == 0 for x in v), "stages": len(v)}
                          for s, v in sorted(stages.items(), key=lambda kv: int(kv[0]))}
                    for fam, stages in sorted(per.items())}
    return out


def pass_summary(rows: list[dict], ladder: str) -> dict:
    """{family: {stage: {"samples", "all", "first", "drawn", "gap/first", "gap/drawn"}}}: the
    pass rates per stage of `ladder` ("every": rung r; "sqrt": today's CCCS stage j, whose
    rung is floor(j N / K) + 1 of N split points, K = ceil(sqrt(N))) and the gap (3 tests
    minus every test)."""
    per: dict = {}
    for row in rows:
        stage = row["rung"]
        if ladder == "sqrt" and stage != "whole":
            n = row["points"]     # the sqrt ladder's split points, as rungs from the end
            rungs = [n - point + 1 for point in cccs.spread_from_end(range(1, n + 1))]
            if stage not in rungs:
                continue
            stage = rungs.index(stage) + 1
        for fam in (row["family"], "all"):
            per.setdefault(fam, {}).setdefault(str(stage), []).append(row)
    out = {}
    for fam, stages in sorted(per.items()):
        out[fam] = {}
        for s, rs in sorted(stages.items(), key=lambda kv: (kv[0] == "whole", kv[0].zfill(3))):
            cell = {"samples": len(rs), "all": mean(r["all"] for r in rs)}
            for c in CHOICES:
                cell[c] = mean(r[c] for r in rs)
                cell[f"gap/{c}"] = cell[c] - cell["all"]
            out[fam][s] = cell
    return out


def fgo_summary(rows: list[dict]) -> dict:
    """{choice: {"whole": masked share of whole-program tokens, "stages": of stage
    completions' tokens}}."""
    out = {}
    for c in CHOICES:
        out[c] = {}
        for part, keep in (("whole", lambda r: r["rung"] == "whole"),
                           ("stages", lambda r: r["rung"] != "whole")):
            rs = [r for r in rows if keep(r)]
            out[c][part] = sum(r[f"masked/{c}"] for r in rs) / max(sum(r["tokens"] for r in rs), 1)
    return out


def fmt(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def tables(res: dict) -> str:
    """The README's tables from results.json's content."""
    lines = []
    for part in ("pool", "held_out"):
        cov = res["coverage"][part]
        lines += ["", f"### {part.replace('_', ' ')}: share of each stage's new code the 3 train "
                  "tests run (reference; stages with none run / stages)", "",
                  "| family | ladder | stage | first | drawn |", "|---|---|---|---|---|"]
        for rungs in cccs.RUNGS:
            first, drawn = cov[f"{rungs}/first"], cov[f"{rungs}/drawn"]
            for fam in first:
                for s, cell in first[fam].items():
                    d = drawn[fam][s]
                    lines.append(f"| {fam} | {rungs} | {s} | {fmt(cell['mean'])} "
                                 f"({cell['zero']}/{cell['stages']}) | {fmt(d['mean'])} "
                                 f"({d['zero']}/{d['stages']}) |")
        ps = res["pass"][part]["sqrt"]
        lines += ["", f"### {part.replace('_', ' ')}: pass rate per stage of today's CCCS ladder "
                  "(sqrt), every test vs the 3 train tests", "",
                  "| family | stage | samples | every test | first 3 | gap | drawn 3 | gap |",
                  "|---|---|---|---|---|---|---|---|"]
        for fam, stages in ps.items():
            for s, c in stages.items():
                lines.append(f"| {fam} | {s} | {c['samples']} | {fmt(c['all'])} | "
                             f"{fmt(c['first'])} | {fmt(c['gap/first'], 2)} | {fmt(c['drawn'])} | "
                             f"{fmt(c['gap/drawn'], 2)} |")
        rung = res["pass"][part]["every"].get("chain_long", {})
        lines += ["", f"### {part.replace('_', ' ')}: chain_long per rung (every test)", "",
                  "| rung | " + " | ".join(rung) + " |", "|---" * (len(rung) + 1) + "|",
                  "| pass rate | " + " | ".join(fmt(c["all"]) for c in rung.values()) + " |",
                  "| samples | " + " | ".join(str(c["samples"]) for c in rung.values()) + " |"]
        f = res["fgo"][part]
        lines += ["", f"FGO masked share ({part.replace('_', ' ')}): whole programs first "
                  f"{f['first']['whole']:.1%} / drawn {f['drawn']['whole']:.1%}; stage "
                  f"completions first {f['first']['stages']:.1%} / drawn "
                  f"{f['drawn']['stages']:.1%}."]
    lines += ["", "### ladder budget (the claims grid's StepCoder pool and settings)", "",
              "| family | most stages below the whole program | draws needed | draws a problem "
              "gets | met |", "|---|---|---|---|---|"]
    lines += [f"| {fam} | {b['stages']} | {b['need']} | {b['draws']} | "
              f"{'yes' if b['ok'] else 'NO'} |" for fam, b in res["budget"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="base", help="'base' (models/base) or a model folder")
    p.add_argument("--out", default="bench/results/stepcoder-gates")
    p.add_argument("--pool", type=int, default=int(flag_value(grids.STEPCODER, "--max-problems")),
                   help="the CCCS pool's size (default: the claims grid's --max-problems)")
    p.add_argument("--held-out-per-family", type=int, default=16)
    p.add_argument("--n", type=int, default=8, help="samples per problem and rung")
    p.add_argument("--train-tests", type=int, default=3, help="N of --max-train-tests")
    p.add_argument("--max-new-tokens", type=int, default=112)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sandbox-workers", type=int, default=None)
    a = p.parse_args(argv)
    import torch  # noqa: E402 (heavy: only when measuring)

    from infra.engines import make_engine
    from infra.model import load_tokenizer, resolve_model
    t0 = time.time()
    path = resolve_model(a.model)
    tok = load_tokenizer(path)
    engine = make_engine("auto", path, torch.device("cpu"), seed=a.seed)
    sets = pool_and_held_out(a.pool, a.held_out_per_family)
    res: dict = {"model": path, "sets": {k: len(v) for k, v in sets.items()},
                 "coverage": {}, "pass": {}, "fgo": {}}
    try:
        for part, problems in sets.items():
            cov = reference_coverage(problems, a.train_tests, a.sandbox_workers)
            res["coverage"][part] = coverage_summary(cov)
            rows = sample_stages(engine, tok, problems, a.n, a.train_tests, a.max_new_tokens,
                                 a.seed + 17, a.sandbox_workers)
            res["pass"][part] = {ladder: pass_summary(rows, ladder) for ladder in cccs.RUNGS}
            res["fgo"][part] = fgo_summary(rows)
            print(f"[gates {time.time() - t0:5.0f}s] {part}: {len(problems)} problems, "
                  f"{len(rows)} samples", flush=True)
    finally:
        engine.close()
    res["budget"] = ladder_budget(sets["pool"], grids.STEPCODER_CELL)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    res.update(date=time.strftime("%Y-%m-%d"), commit=commit, seconds=round(time.time() - t0),
               command="python bench/stepcoder_gates.py " + " ".join(
                   sys.argv[1:] if argv is None else argv))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(tables(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
