"""Tests for cccs.py: split points, stages, subtasks, the CCCS schedule, DRIVE's hard focus."""

import doctest
import json
import math

import pytest

import cccs
from cccs import (CCCSSchedule, HardFocusSchedule, PassRateTracker, completion_prompt,
                  lowest_pass_rate, make_subtask, offline_filter, parse_hard_focus,
                  rewarded_program, split_points, stage_starts)

SIGN = """\
def main():
    x = int(input())
    if x > 0:
        print("positive")
    elif x < 0:
        print("negative")
    else:
        print("zero")
    for i in range(3):
        while i > 5:
            i -= 1
        if i == 2:
            print(i)


main()
"""


def test_docstring_examples():
    assert doctest.testmod(cccs).failed == 0


def test_split_points_if_elif_nested():
    # line 3 if, line 5 elif (its own If node in the AST), line 12 if nested in a for loop
    assert split_points(SIGN) == [3, 5, 12]


def test_split_points_loops_option():
    assert split_points(SIGN, include_loops=True) == [3, 5, 9, 10, 12]


def test_split_points_ignore_conditional_expressions_and_try():
    code = "y = 1 if True else 2\ntry:\n    z = 1\nexcept Exception:\n    z = 2\nw = [a for a in y if a]\n"
    assert split_points(code) == []


def test_split_points_match_statement():
    code = "x = 1\nmatch x:\n    case 1:\n        pass\n"
    assert split_points(code) == [2]


def test_split_points_unparsable_code():
    assert split_points("if x >:\n    pass\n") == []
    assert stage_starts("if x >:\n    pass\n") == [None]


def _ifs(n: int) -> str:
    return "".join(f"if a == {i}:\n    print({i})\n" for i in range(n))


@pytest.mark.parametrize("n", range(0, 11))
def test_stage_count_is_ceil_sqrt_plus_final(n):
    starts = stage_starts(_ifs(n))
    assert len(starts) == math.ceil(math.sqrt(n)) + 1
    assert starts[-1] is None
    lines = starts[:-1]
    if n:
        assert lines[0] == 2 * n - 1  # the first stage starts at the last conditional
    assert lines == sorted(lines, reverse=True) and len(set(lines)) == len(lines)


def test_stages_spread_evenly_from_the_end():
    # if statements on lines 1, 3, ..., 19 (N=10, K=4): indices 9, 7, 4, 2
    assert stage_starts(_ifs(10)) == [19, 15, 9, 5, None]
    assert stage_starts(_ifs(4)) == [7, 3, None]


@pytest.mark.parametrize("start", [None, 1, 3, 5, 12, 16, 99])
def test_prefix_plus_remainder_is_the_program(start):
    prefix, remainder = make_subtask(SIGN, start)
    assert prefix + remainder == SIGN
    if start is not None and start <= SIGN.count("\n"):
        assert remainder.splitlines()[0] == SIGN.splitlines()[start - 1]


def test_make_subtask_lines_as_python_counts_them():
    # \r\n and a lone \r end lines for the tokenizer; a form feed inside a string does not
    code = "s = 'a\x0cb'\r\nt = 1\rif t:\n    pass\n"
    assert split_points(code) == [3]
    prefix, remainder = make_subtask(code, 3)
    assert remainder == "if t:\n    pass\n" and prefix + remainder == code


def test_make_subtask_rejects_line_zero():
    with pytest.raises(ValueError, match="1-based"):
        make_subtask(SIGN, 0)


def test_completion_prompt_holds_prefix_and_final_stage_is_plain():
    prefix, _ = make_subtask(SIGN, 5)
    prompt = completion_prompt("Print the sign of x.", prefix)
    assert prompt.startswith("Print the sign of x.")
    assert prefix in prompt and "Complete" in prompt
    assert "elif" not in prompt  # the remainder is not leaked
    assert completion_prompt("Print the sign of x.", "") == "Print the sign of x."
    # prefill: the answer is opened in the prompt, generation continues the program
    rendered = "### User\nPrint the sign of x.\n\n### Assistant\n"
    assert completion_prompt(rendered, prefix, prefill=True) == rendered + "```python\n" + prefix
    assert completion_prompt(rendered, "", prefill=True) == rendered


def test_rewarded_program_fenced_answer():
    prefix, remainder = make_subtask(SIGN, 5)
    # the block is the code; the indentation of its first line survives
    answer = "Sure:\n```python\n" + remainder + "```\nDone."
    assert rewarded_program(prefix, answer) == SIGN.rstrip("\n")
    # the model repeated the prefix: do not double it
    assert rewarded_program(prefix, "```python\n" + SIGN + "```") == SIGN.rstrip("\n")
    # no code block: no program (the trainer's "no code" reward), as at the final stage
    assert rewarded_program(prefix, remainder) is None
    assert rewarded_program("", "```python\nprint(1)\n```") == "print(1)"


def test_rewarded_program_prefill():
    prefix, remainder = make_subtask(SIGN, 5)
    program = rewarded_program(prefix, remainder + "```\nThis prints the sign.", prefill=True)
    assert program == SIGN.rstrip("\n")
    assert rewarded_program(prefix, remainder, prefill=True) == SIGN.rstrip("\n")  # cut off
    # final stage: no prefix was prefilled, the answer is an ordinary one
    assert rewarded_program("", "```python\nprint(1)\n```", prefill=True) == "print(1)"


def _schedule(**kw):
    return CCCSSchedule({"sign": SIGN, "flat": "print(1)\n"}, **kw)


def test_schedule_advances_at_threshold_and_resets_average():
    s = _schedule(threshold=0.8, span=2)
    assert s.start_line("sign") == 12  # N=3 -> stages [12, 5, None]
    assert s.update("sign", [1.0, 1.0]) is False  # only one update at this stage
    assert s.update("sign", [1.0, 0.0]) is False  # window mean (1.0 + 0.5) / 2 = 0.75 < 0.8
    assert s.update("sign", [1.0, 1.0]) is False  # (0.5 + 1.0) / 2 = 0.75
    assert s.update("sign", [1.0, 0.6]) is True  # (1.0 + 0.8) / 2 = 0.9 >= 0.8
    assert s.start_line("sign") == 5 and s.moving_average("sign") is None
    assert s.update("sign", [1.0]) is False  # the average restarted: one update only
    assert s.update("sign", [0.6]) is True  # exactly at the threshold: 0.8 >= 0.8
    assert s.start_line("sign") is None and s.is_final("sign")
    assert s.subtask("sign") == ("", SIGN)
    assert s.update("sign", [1.0]) is False and s.update("sign", [1.0]) is False  # stays final


def test_schedule_ema_needs_span_updates():
    s = _schedule(threshold=0.8, average="ema", span=3)  # alpha = 0.5
    assert s.update("sign", [0.0]) is False
    assert s.update("sign", [1.0]) is False  # ema 0.5
    assert s.update("sign", [1.0]) is False  # ema 0.75 < 0.8
    assert s.moving_average("sign") == pytest.approx(0.75)
    assert s.update("sign", [1.0]) is True  # ema 0.875


def test_schedule_problem_without_split_points_is_final():
    s = _schedule()
    assert s.is_final("flat") and s.subtask("flat") == ("", "print(1)\n")
    assert s.stage_counts() == {"final": 1, "final-2": 1}


def test_schedule_unknown_problem_and_bad_flags():
    with pytest.raises(KeyError, match="not in the CCCS schedule"):
        _schedule().update("nope", [1.0])
    with pytest.raises(ValueError, match="window"):
        _schedule(average="mean")


def test_schedule_state_dict_round_trip_resumes():
    s = _schedule(threshold=0.8, span=2)
    for rates in ([1.0], [1.0], [1.0]):  # advance once, then one update at stage 1
        s.update("sign", rates)
    state = json.loads(json.dumps(s.state_dict()))  # what a checkpoint stores
    resumed = _schedule(threshold=0.8, span=2)
    resumed.load_state_dict(state)
    assert resumed.start_line("sign") == 5 and resumed.history["sign"] == [1.0]
    # one more good step completes the window on both: the resumed one behaves identically
    assert resumed.update("sign", [1.0]) is True and s.update("sign", [1.0]) is True
    assert resumed.state_dict() == s.state_dict()


def test_schedule_state_keeps_integer_ids():
    s = CCCSSchedule({7: SIGN}, span=1)
    s.update(7, [1.0])
    resumed = CCCSSchedule({7: SIGN}, span=1)
    resumed.load_state_dict(json.loads(json.dumps(s.state_dict())))
    assert resumed.stage[7] == 1


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


# ----------------------------------------------------------------------------- the trainer's object

import argparse
import os
import subprocess
import sys

from data import Problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_IFS = "x = int(input())\nif x > 0:\n    print(1)\nif x < 0:\n    print(-1)\n"  # stages 4, 2, final


def _problem(pid, solution=TWO_IFS):
    return Problem(id=pid, source="test", question="q", starter_code="", fn_name=None,
                   tests=[{"input": "1\n", "output": "1\n"}],
                   solutions=[solution] if solution else [], difficulty="easy")


def _args(**kw):
    base = dict(curriculum="cccs", cccs_threshold=0.8, cccs_average="window", cccs_span=1,
                cccs_loops=False, hard_focus="", steps=10)
    return argparse.Namespace(**{**base, **kw})


def test_make_curriculum_off_without_flags():
    assert cccs.make_curriculum(_args(curriculum="none"), [_problem("a")], {}) is None


def test_curriculum_cccs_prefix_update_and_stats():
    problems = [_problem("a"), _problem("b"), _problem("nosol", solution=None),
                _problem("flat", solution="print(1)\n")]
    cur = cccs.make_curriculum(_args(), problems, {})
    assert cur.pool(problems, 0) == problems  # no hard focus: every problem
    assert cur.prefix(problems[0]) == "x = int(input())\nif x > 0:\n    print(1)\n"
    assert cur.prefix(problems[2]) == "" and cur.prefix(problems[3]) == ""
    assert cur.stats() == {"cccs_final": 1, "cccs_final-2": 2, "cccs_final_share": 1 / 3}
    cur.update("a", [1.0, 1.0, 0.0, 1.0])  # 0.75 < 0.8: stays
    assert cur.prefix(problems[0]).count("\n") == 3
    cur.update("a", [1.0, 1.0])  # 1.0 >= 0.8 with span 1: one stage earlier
    assert cur.prefix(problems[0]) == "x = int(input())\n"
    cur.update("nosol", [1.0])  # a problem CCCS lacks is still tracked, never an error
    assert cur.tracker.get("nosol") == 1.0 and cur.tracker.get("a") == 1.0
    assert cur.stats() == {"cccs_final": 1, "cccs_final-1": 1, "cccs_final-2": 1,
                           "cccs_final_share": 1 / 3}


def test_curriculum_hard_focus_seeded_from_rates_and_past_the_end():
    problems = [_problem(p) for p in "abcd"]
    rates = {"a": 0.9, "b": 0.0, "c": 0.5, "d": 0.25, "other": 0.0}
    cur = cccs.make_curriculum(_args(curriculum="none", hard_focus="3:2,1:1"), problems, rates)
    assert cur.tracker.rates == {"a": 0.9, "b": 0.0, "c": 0.5, "d": 0.25}  # only train ids
    assert [p.id for p in cur.pool(problems, 0)] == ["b", "c", "d"]
    assert cur.prefix(problems[1]) == ""  # hard focus alone: whole programs
    assert cur.stats() == {"hf_phase": 1, "hf_pool": 3, "hf_pool_pass_rate": 0.25}
    cur.update("b", [1.0, 1.0])  # b got solved in phase 1; phase 2 keeps the lowest: d
    assert [p.id for p in cur.pool(problems, 1)] == ["b", "c", "d"]
    assert [p.id for p in cur.pool(problems, 2)] == ["d"]
    assert [p.id for p in cur.pool(problems, 50)] == ["d"]  # past the schedule: last phase
    assert cur.stats()["hf_phase"] == 2
    # a filtered train set that lost every kept problem falls back to all of it
    assert cur.pool(problems[:2], 3) == problems[:2]


def test_curriculum_both_and_bad_spec():
    problems = [_problem("a"), _problem("b")]
    cur = cccs.make_curriculum(_args(hard_focus="1:1"), problems, {"a": 0.5, "b": 0.1})
    assert [p.id for p in cur.pool(problems, 0)] == ["b"] and cur.prefix(problems[1])
    assert set(cur.stats()) == {"cccs_final-2", "cccs_final_share", "hf_phase", "hf_pool",
                                "hf_pool_pass_rate"}
    with pytest.raises(SystemExit, match="--hard-focus"):
        cccs.make_curriculum(_args(hard_focus="2:1,5:1"), problems, {})


def test_curriculum_state_round_trip_continues_identically():
    problems = [_problem(p) for p in "abc"]
    args = _args(hard_focus="2:1,1:5", cccs_span=2)
    cur = cccs.make_curriculum(args, problems, {"a": 0.1, "b": 0.2, "c": 0.9})
    cur.pool(problems, 0)
    for pid, rs in (("a", [1.0]), ("a", [1.0]), ("b", [0.0]), ("a", [1.0])):
        cur.update(pid, rs)
    state = json.loads(json.dumps(cur.state_dict()))  # what trainer_state.json holds
    back = cccs.make_curriculum(args, problems, {"a": 0.0, "b": 0.0, "c": 0.0})  # resume seeds
    back.load_state_dict(state)
    assert back.state_dict() == cur.state_dict() and back.stats() == cur.stats()
    assert [back.prefix(p) for p in problems] == [cur.prefix(p) for p in problems]
    # the next phase ranks by the restored rates (b: 0.0 < a: 1.0), not the fresh seed
    assert [p.id for p in back.pool(problems, 1)] == [p.id for p in cur.pool(problems, 1)] == ["b"]
    # a checkpoint from a run without hard focus: its CCCS part still loads
    only = cccs.make_curriculum(_args(cccs_span=2), problems, {})
    only.load_state_dict(state)
    assert only.cccs.state_dict() == cur.cccs.state_dict()


def _grpo(out, *extra):
    cmd = [sys.executable, os.path.join(ROOT, "grpo.py"), "--curriculum", "cccs", "--cccs-loops",
           "--cccs-span", "1000", "--cccs-threshold", "2", "--save-every", "1",
           "--max-problems", "6", "--sft-steps", "2", "--group-size", "2",
           "--prompts-per-step", "4", "--eval-n", "1", "--max-new-tokens", "24",
           "--sandbox-workers", "1", "--engine", "hf", "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]


def _updates(out, step):
    """CCCS updates recorded so far: a span of 1000 and an unreachable threshold keep them all."""
    state = json.load(open(os.path.join(out, f"step_{step}", "trainer_state.json")))
    return sum(len(s["history"]) for _, s in state["curriculum"]["cccs"]["problems"])


def test_grpo_checkpoints_and_resumes_the_curriculum(tmp_path):
    _grpo(tmp_path, "--steps", "2")
    assert _updates(tmp_path, 1) == 4 and _updates(tmp_path, 2) == 8  # 4 groups a step
    _grpo(tmp_path, "--steps", "3", "--resume")
    assert _updates(tmp_path, 3) == 12  # continued from step 2's state (a fresh one: 4)
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3]
    assert all(r["cccs_final"] + r.get("cccs_final-1", 0) + r.get("cccs_final-2", 0) == 6
               for r in rl)
