"""bench/claims.py: paired differences between grid cells, pass@k from solved counts, verdicts."""
import itertools
import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import claims  # noqa: E402
import grids  # noqa: E402
import stepcoder_gates  # noqa: E402

from infra import samples  # noqa: E402
from world import sources  # noqa: E402


def test_pass_at_k_curve_matches_counting_subsets():
    """pass@k from c of n solved = the share of k-subsets of the n samples holding a success."""
    solved = {"a": 2, "b": 0, "c": 5}
    n = 6
    curve = claims.pass_at_k_curve(solved, n, [1, 2, 3])
    for k in (1, 2, 3):
        brute = []
        for c in solved.values():
            samples = [1] * c + [0] * (n - c)
            subsets = list(itertools.combinations(samples, k))
            brute.append(sum(any(s) for s in subsets) / len(subsets))
        assert math.isclose(curve[k], sum(brute) / 3)


def test_paired_difference_and_verdict():
    a = {"p1": 1.0, "p2": 0.5, "p3": 0.25, "p4": 0.0}
    b = {"p1": 0.5, "p2": 0.5, "p3": 0.0, "p4": 0.0, "only_b": 1.0}   # only shared ids count
    d, se = claims.paired(a, b, {})
    assert math.isclose(d, (0.5 + 0 + 0.25 + 0) / 4)
    diffs = [0.5, 0.0, 0.25, 0.0]
    m = sum(diffs) / 4
    assert math.isclose(se, math.sqrt(sum((x - m) ** 2 for x in diffs) / 3 / 4))
    assert claims.verdict({"mean": 0.05, "se": 0.01}, +1) == "shown"
    assert claims.verdict({"mean": -0.05, "se": 0.01}, +1) == "reversed"
    assert claims.verdict({"mean": 0.015, "se": 0.01}, +1) == "not shown"
    assert claims.verdict({"mean": -0.05, "se": 0.01}, -1) == "shown"
    assert claims.verdict({"mean": 0.05, "se": None}, +1) == "one seed"
    assert claims.verdict({"mean": -0.05, "se": 0.01}, 0) == "B higher"
    assert claims.verdict({"mean": 0.01, "se": 0.01}, 0) == "no difference"


def test_a_pair_compares_the_seeds_both_cells_finished(tmp_path):
    """One config ran 5 seeds, the other 3 (one of them unfinished): the pair is over the 2
    seeds both finished; each config alone over all it finished."""
    rates = {"p": 0.5}
    for s in range(5):
        _cell(tmp_path, "five", s, rates, rates)
    for s in range(2):
        _cell(tmp_path, "three", s, rates, rates)
    (tmp_path / "cells" / "three" / "seed2").mkdir()          # started, no summary
    grid = claims.Grid(str(tmp_path))
    assert grid.seeds("five") == [0, 1, 2, 3, 4]
    assert grid.seeds("five", "three") == [0, 1]
    assert grid.seeds("missing") == [] and grid.seeds("five", "missing") == []


def _cell(root, name, seed, before, after, n=4):
    cell = root / "cells" / name / f"seed{seed}"
    cell.mkdir(parents=True)
    summary = {"pass_at_1_before_rl": sum(before.values()) / len(before)}
    rates = {"rates_before_rl": before}
    if after is not None:
        summary["pass_at_1_after_rl"] = sum(after.values()) / len(after)
        rates["rates_after_rl"] = after
    (cell / "summary.json").write_text(json.dumps(summary))
    (cell / "rates.json").write_text(json.dumps(rates))


def test_measure_pairs_each_seed_on_the_same_problems(tmp_path, capsys):
    """Three seeds of grpo, each +0.25 on every problem after RL: the claim "RL raises held-out
    pass@1" is +25 points with se 0 over seeds... and the table and json are written."""
    ids = [p.id for p in sources.load_problems("tasks", split="eval")[:8]]
    for seed in range(3):
        before = {i: 0.25 * (j % 3) for j, i in enumerate(ids)}
        after = {i: v + 0.25 + 0.25 * (seed == 2 and j == 0) for j, (i, v)
                 in enumerate(before.items())}
        _cell(tmp_path, "grpo", seed, before, after)
    rows = {c["claim"]: c for c in claims.measure(claims.Grid(str(tmp_path)))}
    rl = rows["RL raises held-out pass@1 (GRPO, run.sh's 80 steps)"]
    assert rl["seeds"] == pytest.approx([0.25, 0.25, 0.25 + 0.25 / 8])
    assert rl["mean"] == pytest.approx(0.25 + 0.25 / 24)
    assert rl["se"] == pytest.approx(0.25 / 8 / math.sqrt(3) / math.sqrt(3))
    assert rl["verdict"] == "shown"
    assert "PPO raises pass@1 (held out)" not in rows   # no sc-ppo cells: no row
    out = tmp_path / "report"
    assert claims.main(["--grid-out", str(tmp_path), "--out", str(out)]) == 0
    assert "RL raises held-out pass@1" in (out / "claims.md").read_text()
    assert json.loads((out / "claims.json").read_text())["claims"][0]["verdict"] == "shown"


def test_missing_grid_folder_is_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        claims.main(["--grid-out", str(tmp_path / "nope")])
    assert e.value.code == 2 and "run bench/ablate.py --grid claims first" in (
        capsys.readouterr().err)
    (tmp_path / "cells").mkdir()
    with pytest.raises(SystemExit) as e:
        claims.main(["--grid-out", str(tmp_path), "--stepcoder-gates", str(tmp_path / "x.json")])
    assert e.value.code == 2 and "x.json: no such file" in capsys.readouterr().err


def test_pool_metrics_stage_moves_false_passes_and_preconditions(tmp_path):
    """The StepCoder claims read the pool's rates beside the held-out ones and the chain_long
    subset; a training metric is compared by its mean over the last RL rows; the CCCS stages of
    the first and the last RL row are reported (a stage that moved shows as two different
    dicts); the false-pass rate early and late; and each group's precondition line reads the
    base's figures and the cells' own."""
    problems = sources.load_problems("tasks", split="eval")
    chain = [p.id for p in problems if p.metadata["family"] == "chain_long"][:2]
    held = [p.id for p in problems if p.metadata["family"] == "tiers"][:2] + chain
    for seed in range(3):
        for name, gain in (("sc-ppo", 0.0), ("sc-cccs", 0.25), ("sc-fgo", 0.0)):
            after = {i: 0.5 + (gain if i in chain else 0.0) for i in held}
            _cell(tmp_path, name, seed, {i: 0.5 for i in held}, after)
            cell = tmp_path / "cells" / name / f"seed{seed}"
            rates = json.loads((cell / "rates.json").read_text())
            rates["train_rates_before_rl"] = {"t1": 0.25, "t2": 0.5}
            rates["train_rates_after_rl"] = {"t1": 0.25 + gain, "t2": 0.5 + gain}
            (cell / "rates.json").write_text(json.dumps(rates))
            # 20 RL rows: false passes 0.3 for the first 10, 0.1 (FGO: 0.2) for the last 10
            late = 0.2 if name == "sc-fgo" else 0.1
            rows = [{"phase": "eval", "step": 0}] + [
                {"phase": "rl", "step": t, "false_pass_frac": 0.3 if t <= 10 else late,
                 **({"fgo_masked_share": 0.12} if name == "sc-fgo" else {})}
                for t in range(1, 21)]
            if name == "sc-cccs":   # no problem at the final stage at step 1: no cccs_final key
                rows[1].update({"cccs_final-1": 4, "cccs_final_share": 0.0})
                rows[-1].update({"cccs_final": 3, "cccs_final-1": 1, "cccs_final_share": 0.75})
            (cell / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    grid = claims.Grid(str(tmp_path))
    rows = {c["claim"]: c for c in claims.measure(grid)}
    assert rows["ours: CCCS vs PPO (held out)"]["mean"] == pytest.approx(0.125)
    assert rows["ours: CCCS vs PPO on the exploration family chain_long (held out)"][
        "mean"] == pytest.approx(0.25)
    pool = rows["ours: CCCS vs PPO (pool)"]
    assert pool["metric"] == "train pass@1" and pool["mean"] == pytest.approx(0.25)
    fp = rows["FGO changes what 3 tests let through: false-pass rate over the last 10 RL "
              "steps, FGO vs PPO"]
    assert fp["seeds"] == pytest.approx([0.1, 0.1, 0.1]) and fp["verdict"] == "A higher"
    moves = claims.curriculum_moves(grid)
    assert [(m["cell"], m["seed"]) for m in moves] == [("sc-cccs", s) for s in range(3)]
    assert moves[0]["first"] == {"cccs_final-1": 4}
    assert moves[0]["last"] == {"cccs_final": 3, "cccs_final-1": 1}
    passes = {r["cell"]: r for r in claims.early_late(grid, "sc-", "false_pass_frac", 10)}
    assert passes["sc-fgo"]["first"]["mean"] == pytest.approx(0.3)
    assert passes["sc-fgo"]["last"]["mean"] == pytest.approx(0.2)
    base = tmp_path / "preconditions.json"
    base.write_text(json.dumps({
        "room": {"pass@1": 0.4, "pass@8": 0.5, "pass@1_by_family": {"tiers": 0.5}},
        "cccs": {"whole_pass@8": 0.0, "last_stage_pass@8": 0.8},
        "drive": {"share_solved": 0.4}}))
    pre = claims.preconditions(grid, str(base), str(tmp_path / "no-gates.json"))
    assert pre["room"] == "room pass@8 - pass@1 0.100 (>= 0.15: NOT met)"
    assert pre["fgo"] == "tokens masked 12.0% in the FGO cells (>= 10%: met)"
    assert pre["cccs"].endswith("(met); stages moved in 3 of 3 CCCS cells")
    assert "(>= 0.5: NOT met)" in pre["drive"] and "game" not in pre   # no agents cells
    md = claims.markdown([], [], {}, moves,
                         trends=claims.early_late(grid, "sc-", "false_pass_frac", 10))
    assert "| sc-cccs | 0 | final-1 4 | final 3, final-1 1 | 0.38 |" in md
    assert "| sc-fgo | false_pass_frac | 3 | 0.300 (first 10) | 0.200 (last 10) |" in md


def test_each_cccs_problems_trajectory_is_read_from_the_runs_state_records(tmp_path):
    """A CCCS cell's samples.jsonl state records (one a step per drawn problem) give each
    pool problem's path through its stages, its draws per stage and the share of its late
    draws at the whole program; the chain_long share stands in the CCCS precondition."""
    _cell(tmp_path, "sc-cccs", 0, {"x": 0.5}, {"x": 0.5})
    log = samples.SampleLog(str(tmp_path / "cells" / "sc-cccs" / "seed0"), 0, states=True)
    chain, tiers = "tasks/chain_long/rl/0", "tasks/tiers/rl/3"
    stages = ["final-2", "final-2", "final-1", "final", "final", "final", "final"]
    for step, stage in enumerate(stages, start=1):
        problems = [{"problem": chain, "drawn_stage": stage, "step_pass_rate": step / 10,
                     "draws": 1, "stage": stage}]
        if step == 7:   # tiers drawn once, twice in one step, at its first stage
            problems.append({"problem": tiers, "drawn_stage": "final-1", "step_pass_rate": 0.5,
                             "draws": 2, "stage": "final-1"})
        log.state(step, {"problems": problems})
    _cell(tmp_path, "sc-ppo", 0, {"x": 0.5}, {"x": 0.5})          # not a CCCS cell: skipped
    grid = claims.Grid(str(tmp_path))
    rows = {r["problem"]: r for r in claims.stage_trajectories(grid)}
    assert set(rows) == {chain, tiers}
    c = rows[chain]
    assert (c["cell"], c["seed"], c["family"]) == ("sc-cccs", 0, "chain_long")
    assert c["path"] == [["final-2", 2, 0.15], ["final-1", 1, 0.3], ["final", 4, 0.55]]
    assert c["draws"] == {"final-2": 2, "final-1": 1, "final": 4} and c["final_draws"] == 4
    assert c["last_final"] == pytest.approx(4 / 5)                 # steps 3-7: 4 of 5 at final
    assert rows[tiers]["draws"] == {"final-1": 2} and rows[tiers]["last_final"] == 0.0
    md = claims.trajectories_markdown(claims.stage_trajectories(grid))
    path = "final-2 (2, 0.15) -> final-1 (1, 0.30) -> final (4, 0.55)"
    assert f"| sc-cccs | 0 | {chain} | {path} |" in md
    assert "| sc-cccs | chain_long | 1 | 1 | 0.80 |" in md
    assert "| sc-cccs | tiers | 1 | 0 | 0.00 |" in md
    assert "chain_long's draws at the whole program, last 5 steps 0.80 (>= 0.25: met)" in \
        claims.cccs_gates(grid, {})


def test_hard_coded_outputs_are_counted_per_cell(tmp_path):
    """A final program holding a valid shown test's output as a literal counts as hard-coding;
    an invalid test's output, an output of 0/1, a computed answer or unparsable text does not."""
    shown = [{"input": "5\n", "output": "113\n"}, {"input": "2\n", "output": "7\n"}]
    assert claims.embeds_seen_output("print(113)", shown, [True, False]) is True
    assert claims.embeds_seen_output("print('113')", shown, [True, False]) is True
    assert claims.embeds_seen_output("print(7)", shown, [True, False]) is False   # invalid test
    assert claims.embeds_seen_output("print(int(input()) * 2)", shown, [True, True]) is False
    assert claims.embeds_seen_output("print(1)", [{"input": "", "output": "1"}], [True]) is False
    assert claims.embeds_seen_output("def f(:", shown, [True, True]) is None
    assert claims.embeds_seen_output(None, shown, [True, True]) is None
    cell = tmp_path / "cells" / "agents-shared" / "seed0"
    cell.mkdir(parents=True)
    (cell / "summary.json").write_text(json.dumps({"steps": 20}))
    episodes = [{"program": "print(113)", "tests": shown, "valid": [True, False]},
                {"program": "x = (", "tests": shown, "valid": [True, True]},
                {"program": "print(input())", "tests": [], "valid": []}]
    (cell / "eval_after_rl.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    rows = claims.hard_coding(claims.Grid(str(tmp_path)))
    assert rows == [{"cell": "agents-shared", "when": "after_rl", "episodes": 3, "parsable": 2,
                     "shown_valid_tests": 1, "embeds_seen_output": 1}]


def test_stepcoder_rows_compare_what_the_paper_compares_in_both_regimes(tmp_path):
    """The paper's three comparisons are full StepCoder (sc-cccs-fgo) against PPO, against
    itself without FGO (= sc-cccs) and without CCCS (= sc-fgo); each part against PPO is ours,
    labelled so. Held out each is read on every test and on the 3 train-style tests (the
    cells' rates_on_train_tests); the CCCS precondition reads the gates' first stage under
    the cells' own --train-tests and ladder."""
    ids = [p.id for p in sources.load_problems("tasks", split="eval")[:4]]
    # solved shares after RL (4 samples a problem), every test / the 3 train-style tests
    arms = {"sc-ppo": (0.0, 0.5), "sc-fgo": (0.25, 0.5), "sc-cccs": (0.5, 1.0),
            "sc-cccs-fgo": (1.0, 0.75)}
    for seed in range(2):
        for name, (every, few) in arms.items():
            _cell(tmp_path, name, seed, {i: 0.1 for i in ids}, {i: every for i in ids})
            cell = tmp_path / "cells" / name / f"seed{seed}"
            rates = json.loads((cell / "rates.json").read_text())
            rates["rates_on_train_tests_after_rl"] = {i: few for i in ids}
            (cell / "rates.json").write_text(json.dumps(rates))
            (cell / "cmd.json").write_text(json.dumps({"cmd": [
                "ppo_fgo.py", *grids.STEPCODER_CELL, "--seed", str(seed)]}))
    rows = {c["claim"]: c for c in claims.measure(claims.Grid(str(tmp_path)))}

    def diff(claim):
        return rows[f"{claim} (held out)"]["mean"]
    assert diff("StepCoder (CCCS + FGO) vs PPO") == pytest.approx(1.0)
    assert diff("StepCoder vs StepCoder without FGO, i.e. CCCS alone: what FGO adds") == \
        pytest.approx(0.5)
    assert diff("StepCoder vs StepCoder without CCCS, i.e. FGO alone: what CCCS adds") == \
        pytest.approx(0.75)
    assert diff("ours: FGO vs PPO") == pytest.approx(0.25)
    assert diff("ours: CCCS vs PPO") == pytest.approx(0.5)
    row = rows["StepCoder vs StepCoder without CCCS, i.e. FGO alone: what CCCS adds (held out)"]
    assert row["paper"].startswith("+1.5") and row["a"].startswith("sc-cccs-fgo")
    assert row["b"].startswith("sc-fgo") and row["metric"] == "pass@1"
    assert rows["ours: FGO vs PPO (held out)"]["paper"].startswith("not reported")
    few = "held out, 3 train-style tests"
    assert rows[f"StepCoder vs StepCoder without FGO, i.e. CCCS alone: what FGO adds ({few})"][
        "mean"] == pytest.approx(-0.25)                     # 0.75 - 1.0 on the 3 tests
    assert rows[f"StepCoder (CCCS + FGO) vs PPO ({few})"]["metric"] == \
        "pass@1, 3 train-style tests"
    assert "ours: FGO vs PPO (pool)" not in rows            # no train sample in these cells
    assert not any("> PPO" in claim for claim in rows)       # the old labels are gone
    gates = tmp_path / "gates.json"
    gates.write_text(json.dumps({
        "coverage": {"pool": {"every/drawn": {"all": {"1": {"mean": 0.92, "zero": 0,
                                                             "stages": 25}}},
                              "sqrt/first": {"all": {"1": {"mean": 0.63, "zero": 6,
                                                            "stages": 25}}}}}}))
    base = tmp_path / "pre.json"
    base.write_text(json.dumps({"cccs": {"whole_pass@8": 0.0, "last_stage_pass@8": 0.8}}))
    pre = claims.preconditions(claims.Grid(str(tmp_path)), str(base), str(gates))
    assert ("first stage's new code run by the 3 drawn train tests 0.92, none in 0 of 25 pool "
            "problems (met); 23 draws a pool problem, 2 x rungs + 10 (met)") in pre["cccs"]
    # the grid of 2026-12-04: 25 steps of 8 prompts, StepCoder's sqrt ladder
    old = ["--max-problems", "25", "--steps", "25", "--cccs-span", "2",
           "--train-data", stepcoder_gates.flag_value(grids.STEPCODER, "--train-data")]
    budget = claims.ladder_budget(["ppo_fgo.py", *old])
    assert budget["chain_long"] == {"stages": 3, "need": 16, "draws": 8.0, "ok": False}
