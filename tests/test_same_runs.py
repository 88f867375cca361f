"""bench/same_runs.py: two runs' figures compared row by row, timings left out."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import same_runs  # noqa: E402


def _run(root, name, rows, summary, rates):
    run = root / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "rates.json").write_text(json.dumps(rates))
    return str(run)


ROWS = [{"phase": "eval", "step": 0, "pass@1": 0.25, "pass@1_by_family": {"arith": 0.5},
         "time/eval": 7.3},
        {"phase": "rl", "step": 1, "loss": -0.002, "judge/duplicate_frac": 0.4,
         "time/step": 6.7}]
SUMMARY = {"pass_at_1_before_rl": 0.25, "wall_seconds": 91.4}
RATES = {"rates_before_rl": {"p1": 0.5}}


def test_timings_differ_only_so_identical(tmp_path, capsys):
    a = _run(tmp_path, "a", ROWS, SUMMARY, RATES)
    b = _run(tmp_path, "b", [{**ROWS[0], "time/eval": 9.9}, {**ROWS[1], "time/step": 1.0}],
             {**SUMMARY, "wall_seconds": 120.0}, RATES)
    assert same_runs.main([a, b]) == 0
    assert capsys.readouterr().out.strip() == "identical"


def test_a_changed_figure_is_named_with_its_row_and_values(tmp_path, capsys):
    """The loss of step 1 moved in its last bit, a family rate moved inside the nested dict,
    and the summary lost a key: three differences, exit 1."""
    a = _run(tmp_path, "a", ROWS, SUMMARY, RATES)
    b = _run(tmp_path, "b", [{**ROWS[0], "pass@1_by_family": {"arith": 0.75}},
                             {**ROWS[1], "loss": -0.0020000000000000005}],
             {"wall_seconds": 91.4}, RATES)
    assert same_runs.main([a, b]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "metrics.jsonl row 1 (eval 0): pass@1_by_family: {'arith': 0.5} vs {'arith': 0.75}",
        "metrics.jsonl row 2 (rl 1): loss: -0.002 vs -0.0020000000000000005",
        "summary.json: pass_at_1_before_rl: 0.25 vs None"]


def test_ignore_pattern_and_a_missing_row(tmp_path, capsys):
    """--ignore 'judge/*' drops a key only one run logs; a row only one run has still differs."""
    a = _run(tmp_path, "a", ROWS, SUMMARY, RATES)
    b = _run(tmp_path, "b", [ROWS[0], {k: v for k, v in ROWS[1].items()
                                       if k != "judge/duplicate_frac"}], SUMMARY, RATES)
    assert same_runs.main([a, b]) == 1
    assert "judge/duplicate_frac: 0.4 vs None" in capsys.readouterr().out
    assert same_runs.main([a, b, "--ignore", "judge/*"]) == 0
    c = _run(tmp_path, "c", ROWS[:1], SUMMARY, RATES)
    assert same_runs.main([a, c, "--ignore", "judge/*"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "metrics.jsonl: 2 rows vs 1"


def test_a_folder_without_metrics_is_a_usage_error(tmp_path, capsys):
    a = _run(tmp_path, "a", ROWS, SUMMARY, RATES)
    assert same_runs.main([a, str(tmp_path)]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
