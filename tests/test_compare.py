"""bench/compare.py: a fork's two-arm comparison, paired by seed, from the runs' rates.json."""
import json
import math
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import compare  # noqa: E402


def _run(root, name, after):
    run = root / name
    run.mkdir()
    (run / "rates.json").write_text(json.dumps({"rates_after_rl": after}))
    return str(run)


def test_paired_over_seeds_and_the_printed_line(tmp_path, capsys):
    """Seed 0: B is 0.5 below A on p1 only (d = 0.25); seed 1: 0.5 below on both (d = 0.5).
    Over the two seeds: mean 0.375, se = sd / sqrt(2) = |0.5 - 0.25| / 2."""
    a = [_run(tmp_path, "a0", {"p1": 1.0, "p2": 0.5}),
         _run(tmp_path, "a1", {"p1": 0.75, "p2": 0.75})]
    b = [_run(tmp_path, "b0", {"p1": 0.5, "p2": 0.5, "other": 1.0}),
         _run(tmp_path, "b1", {"p1": 0.25, "p2": 0.25})]
    assert compare.main(["--a", *a, "--b", *b]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("+25.0 ± 25.0 points")         # {other} is not in both: left out
    assert out[-1] == "A - B over 2 seed(s): +37.5 ± 12.5 points"
    stat = compare.over_seeds([0.25, 0.5])
    assert math.isclose(stat["se"], 0.25 / 2) and stat["seeds"] == [0.25, 0.5]


def test_within_strata_se_and_user_errors(tmp_path, capsys):
    d, se = compare.paired({"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.0}, {"x": "f", "y": "g"})
    assert d == 0.5 and se == 0.0        # one problem a stratum: no spread within strata
    with pytest.raises(ValueError, match="share no problem id"):
        compare.paired({"x": 1.0}, {"y": 1.0})
    a = _run(tmp_path, "a", {"p": 1.0})
    for argv, msg in ((["--a", a, "--b", str(tmp_path / "missing")], "does not exist"),
                      (["--a", a, a, "--b", a], "pair them by seed"),
                      (["--a", a, "--b", a, "--key", "rates_before_rl"], "has no")):
        with pytest.raises(SystemExit) as e:
            compare.main(argv)
        assert e.value.code == 2 and msg in capsys.readouterr().err
