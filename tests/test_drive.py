"""Tests for drive.py: DRIVE's pass-rate tracker, hard-focus schedule and offline filter."""

import doctest
import json

import pytest

import drive
from drive import (
    HardFocusSchedule,
    PassRateTracker,
    lowest_pass_rate,
    offline_filter,
    parse_hard_focus,
)


def test_docstring_examples():
    assert doctest.testmod(drive).failed == 0


def test_pass_rate_tracker_last_and_ema():
    last = PassRateTracker()
    last.update("a", [1, 0, 0, 0])
    last.update("a", [1, 1])
    assert last.get("a") == 1.0 and last.get("b") is None
    ema = PassRateTracker(decay=0.5)
    ema.update("a", [0.0])
    ema.update("a", [1.0])
    assert ema.get("a") == 0.5
    back = PassRateTracker(decay=0.5)
    back.load_state_dict(json.loads(json.dumps(ema.state_dict())))
    assert back.rates == {"a": 0.5}


def test_parse_hard_focus():
    assert parse_hard_focus("72:64,50:32,25:32") == [(72, 64), (50, 32), (25, 32)]
    assert parse_hard_focus(" 8:2 ") == [(8, 2)]
    for bad in ("", "72", "72:64;50:32", "0:5", "5:0", "a:b", "10:1,20:1"):
        with pytest.raises(ValueError, match="--hard-focus"):
            parse_hard_focus(bad)


def test_lowest_pass_rate_ties_and_unseen():
    rates = {"a": 0.2, "b": 0.9, "c": 0.2, "d": 0.0}
    assert lowest_pass_rate(list("abcd"), rates, 2) == ["a", "d"]  # d=0.0, then a beats c (tie)
    assert lowest_pass_rate(list("abcde"), rates, 1) == ["e"]  # unseen counts as hardest


def test_hard_focus_picks_lowest_and_switches_phases_at_the_right_steps():
    pids = list(range(6))
    rates = {0: 0.9, 1: 0.1, 2: 0.5, 3: 0.0, 4: 0.7, 5: 0.3}
    hf = HardFocusSchedule(parse_hard_focus("4:3,2:2,1:1"), pids)
    assert hf.total_steps == 6
    assert [hf.phase_at(s) for s in range(6)] == [0, 0, 0, 1, 1, 2]
    assert hf.problems(0, rates) == [1, 2, 3, 5]
    rates[1] = 1.0  # problem 1 got solved during phase 0; the set stays fixed inside a phase
    assert hf.problems(2, rates) == [1, 2, 3, 5]
    rates[4] = 0.0  # problem 4 was dropped: it cannot come back (nested phases)
    assert hf.problems(3, rates) == [3, 5]
    rates[3] = 0.8
    assert hf.problems(4, rates) == [3, 5]
    assert hf.problems(5, rates) == [5]
    with pytest.raises(ValueError, match="past the hard-focus schedule"):
        hf.problems(6, rates)


def test_hard_focus_state_round_trip():
    rates = {"a": 0.5, "b": 0.1, "c": 0.3}
    hf = HardFocusSchedule([(2, 1), (1, 1)], ["a", "b", "c"])
    hf.problems(0, rates)
    back = HardFocusSchedule([(2, 1), (1, 1)], ["a", "b", "c"])
    back.load_state_dict(json.loads(json.dumps(hf.state_dict())))
    assert back.problems(0, rates) == ["b", "c"]  # no re-rank inside the resumed phase
    assert back.problems(1, {"b": 0.9, "c": 0.2}) == ["c"]


def test_offline_filter():
    rates = {"solved": [1.0, 1.0, 1.0], "never": [0.0, 0.0], "mixed": [1.0, 0.0, 0.0],
             "mean": 0.25, "mean1": 1.0, "empty": []}
    assert offline_filter(rates) == ["mixed", "mean"]
