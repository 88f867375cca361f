"""bench/power.py: the seeds a paired comparison needs, from a grid's cells."""
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import power  # noqa: E402


def write_cell(path, pass_at_1, rates, n=4, seconds=3600.0):
    os.makedirs(path)
    json.dump({"pass_at_1_after_rl": pass_at_1, "wall_seconds": seconds},
              open(os.path.join(path, "summary.json"), "w"))
    json.dump({"rates_after_rl": rates}, open(os.path.join(path, "rates.json"), "w"))
    json.dump({"cmd": ["ppo_fgo.py", "--eval-n", str(n)]},
              open(os.path.join(path, "cmd.json"), "w"))


def test_sampling_variance_is_the_unbiased_binomial_variance_of_the_mean():
    # two problems at 0.5 and 1.0 with n = 4: (0.25/3 + 0) / 2^2, in points^2
    assert power.sampling_variance({"a": 0.5, "b": 1.0}, 4) == pytest.approx(0.25 / 3 / 4 * 1e4)
    with pytest.raises(ValueError):
        power.sampling_variance({"a": 0.5}, 1)


def test_paired_differences_give_the_seeds_an_effect_needs(tmp_path):
    rates = {f"p{i}": 0.5 for i in range(100)}
    # d by seed: +1, +2, +3 points -> sd 1; 7.84 / 1.5^2 -> 4 seeds for 1.5 points
    for k, (a, b) in enumerate([(0.31, 0.30), (0.32, 0.30), (0.33, 0.30)]):
        write_cell(tmp_path / "A" / f"seed{k}", a, rates)
        write_cell(tmp_path / "B" / f"seed{k}", b, rates)
    write_cell(tmp_path / "A" / "seed9", 0.9, rates)       # unpaired: left out
    r = power.analyse(str(tmp_path), "A", "B", [1.5, 10.0])
    assert r["seeds"] == ["seed0", "seed1", "seed2"] and r["mean_d"] == pytest.approx(2.0)
    assert r["sd_d"] == pytest.approx(1.0)
    assert [p["seeds"] for p in r["plans"]] == [math.ceil(2.8 ** 2 / 1.5 ** 2), 2]
    lo, hi = r["plans"][0]["seeds_80pct"]
    assert lo < r["plans"][0]["seeds"] < hi
    assert r["plans"][0]["cell_hours_total"] == pytest.approx(2 * 4 * 1.0)
    # 100 problems at 0.5, n 4, both arms: sqrt(2 * 100 * 0.25/3 / 100^2) * 100
    assert r["sd_if_independent_sampling"] == pytest.approx(
        math.sqrt(2 * 0.25 / 3 / 100) * 100, abs=1e-3)


def test_fewer_than_two_shared_seeds_is_an_error(tmp_path):
    write_cell(tmp_path / "A" / "seed0", 0.3, {"p": 0.5})
    write_cell(tmp_path / "B" / "seed0", 0.3, {"p": 0.5})
    with pytest.raises(SystemExit, match="share 1 seed"):
        power.analyse(str(tmp_path), "A", "B", [1.0])
