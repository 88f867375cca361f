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

import data  # noqa: E402


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
    ids = [p.id for p in data.load_problems("tasks", split="eval")[:8]]
    for seed in range(3):
        before = {i: 0.25 * (j % 3) for j, i in enumerate(ids)}
        after = {i: v + 0.25 + 0.25 * (seed == 2 and j == 0) for j, (i, v)
                 in enumerate(before.items())}
        _cell(tmp_path, "grpo", seed, before, after)
    rows = {c["claim"]: c for c in claims.measure(claims.Grid(str(tmp_path)))}
    rl = rows["RL raises held-out pass@1 (GRPO)"]
    assert rl["seeds"] == pytest.approx([0.25, 0.25, 0.25 + 0.25 / 8])
    assert rl["mean"] == pytest.approx(0.25 + 0.25 / 24)
    assert rl["se"] == pytest.approx(0.25 / 8 / math.sqrt(3) / math.sqrt(3))
    assert rl["verdict"] == "shown"
    assert "PPO + GAE + critic raises held-out pass@1" not in rows   # no ppo cells: no row
    out = tmp_path / "report"
    assert claims.main(["--grid-out", str(tmp_path), "--out", str(out)]) == 0
    assert "RL raises held-out pass@1" in (out / "claims.md").read_text()
    assert json.loads((out / "claims.json").read_text())["claims"][0]["verdict"] == "shown"


def test_missing_grid_folder_is_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        claims.main(["--grid-out", str(tmp_path / "nope")])
    assert e.value.code == 2 and "run bench/ablate.py --grid claims first" in (
        capsys.readouterr().err)


def test_train_pool_metrics_and_stage_moves(tmp_path):
    """The branchy-pool claims read the train rates beside the held-out ones, a training
    metric is compared by its mean over the RL rows, and the CCCS stages of the first and the
    last RL row are reported (a stage that moved shows as two different dicts)."""
    held = [p.id for p in data.load_problems("tasks", split="eval")[:4]]
    for seed in range(3):
        for name, gain in (("branchy-ppo", 0.0), ("branchy-ppo-cccs", 0.25)):
            _cell(tmp_path, name, seed, {i: 0.5 for i in held}, {i: 0.5 for i in held})
            cell = tmp_path / "cells" / name / f"seed{seed}"
            rates = json.loads((cell / "rates.json").read_text())
            rates["train_rates_before_rl"] = {"t1": 0.25, "t2": 0.5}
            rates["train_rates_after_rl"] = {"t1": 0.25 + gain, "t2": 0.5 + gain}
            (cell / "rates.json").write_text(json.dumps(rates))
        for name, entropy in (("clip-binds-eps0.28", 0.6), ("clip-binds-eps0.2", 0.4)):
            _cell(tmp_path, name, seed, {i: 0.5 for i in held}, {i: 0.5 for i in held})
            rows = [{"phase": "eval", "step": 0},
                    {"phase": "rl", "step": 1, "entropy": entropy},
                    {"phase": "rl", "step": 2, "entropy": entropy + 0.1 * seed}]
            (tmp_path / "cells" / name / f"seed{seed}" / "metrics.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in rows))
        # no problem at the final stage at step 1: the row has no cccs_final key
        stage_rows = [{"phase": "rl", "step": 1, "cccs_final-1": 4, "cccs_final_share": 0.0},
                      {"phase": "rl", "step": 2, "cccs_final": 3, "cccs_final-1": 1,
                       "cccs_final_share": 0.75}]
        (tmp_path / "cells" / "branchy-ppo-cccs" / f"seed{seed}" / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in stage_rows))
    grid = claims.Grid(str(tmp_path))
    rows = {c["claim"]: c for c in claims.measure(grid)}
    assert rows["Branchy pool: CCCS > PPO (held out)"]["mean"] == 0.0
    train = rows["Branchy pool: CCCS > PPO (train pool)"]
    assert train["metric"] == "train pass@1" and train["mean"] == pytest.approx(0.25)
    entropy = rows["Clip-higher at lr 5e-4 keeps entropy: eps_high .28 vs .2"]
    assert entropy["seeds"] == pytest.approx([0.2, 0.2, 0.2])
    moves = claims.curriculum_moves(grid)
    assert [(m["cell"], m["seed"]) for m in moves] == [("branchy-ppo-cccs", s) for s in range(3)]
    assert moves[0]["first"] == {"cccs_final-1": 4}
    assert moves[0]["last"] == {"cccs_final": 3, "cccs_final-1": 1}
    assert moves[0]["final_share_mean"] == pytest.approx(0.375)
    md = claims.markdown([], [], {}, moves)
    assert "| branchy-ppo-cccs | 0 | final-1 4 | final 3, final-1 1 | 0.38 |" in md


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
