"""Tests for cccs.py: split points, stages, subtasks, the CCCS schedule; CCCS in a GRPO run."""

import doctest
import json
import math
import os
import subprocess
import sys

import pytest

import cccs
from cccs import (
    CCCSSchedule,
    completion_prompt,
    make_subtask,
    rewarded_program,
    split_points,
    stage_starts,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    code = ("y = 1 if True else 2\ntry:\n    z = 1\nexcept Exception:\n    z = 2\n"
            "w = [a for a in y if a]\n")
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


def test_completion_prompt_opens_the_answer_with_the_prefix_and_final_stage_is_plain():
    prefix, _ = make_subtask(SIGN, 5)
    rendered = "### User\nPrint the sign of x.\n\n### Assistant\n"
    prompt = completion_prompt(rendered, prefix)
    assert prompt == rendered + "```python\n" + prefix   # generation continues the program
    assert "elif" not in prompt  # the remainder is not leaked
    assert completion_prompt(rendered, "") == rendered


def test_rewarded_program_is_prefix_plus_continuation():
    prefix, remainder = make_subtask(SIGN, 5)
    # the indentation of the first completed line survives
    program = rewarded_program(prefix, remainder + "```\nThis prints the sign.")
    assert program == SIGN.rstrip("\n")
    assert rewarded_program(prefix, remainder) == SIGN.rstrip("\n")  # cut off before the fence
    # final stage: no prefix was prefilled, the answer is an ordinary one
    assert rewarded_program("", "```python\nprint(1)\n```") == "print(1)"
    # no code block at the final stage: no program (the trainer's "no code" reward)
    assert rewarded_program("", "print(1)") is None


def _schedule(**kw):
    return CCCSSchedule({"sign": SIGN, "flat": "print(1)\n"}, **kw)


@pytest.mark.parametrize("n", range(0, 8))
def test_rungs_every_gives_a_stage_at_each_split_point_last_first(n):
    """Rungs of one conditional: N split points -> N stages + the whole program, each one
    conditional earlier than the one before, so a 6-step chain is climbed step by step."""
    starts = stage_starts(_ifs(n), rungs="every")
    assert starts == [2 * i - 1 for i in range(n, 0, -1)] + [None]
    assert set(stage_starts(_ifs(n))) <= set(starts)      # StepCoder's stages are among them
    with pytest.raises(ValueError, match="every"):
        stage_starts(_ifs(n), rungs="all")


def test_schedule_climbs_rungs_of_one_conditional():
    s = CCCSSchedule({"sign": SIGN}, threshold=0.5, span=1, rungs="every")
    assert s.starts["sign"] == [12, 5, 3, None]    # if i == 2, elif x < 0, if x > 0, whole
    assert s.stage_label("sign") == "final-3"
    assert s.update("sign", [1.0, 0.0]) and s.start_line("sign") == 5
    assert s.update("sign", [0.5]) and s.start_line("sign") == 3
    assert s.stage_label("sign") == "final-1"


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


# ----------------------------------------------------------------------------- CCCS in a GRPO run

def _grpo(out, *extra):
    cmd = [sys.executable, os.path.join(ROOT, "grpo.py"), "--curriculum", "cccs", "--cccs-loops",
           "--cccs-span", "1000", "--cccs-threshold", "1", "--save-every", "1",
           "--train-data", "builtin", "--eval-data", "builtin",  # 6 problems, <= 3 stages
           "--max-problems", "6", "--sft-steps", "2", "--group-size", "2",
           "--prompts-per-step", "4", "--eval-n", "1", "--max-new-tokens", "24",
           "--sandbox-workers", "1", "--engine", "hf", "--out", str(out), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]


def _updates(out, step):
    """CCCS updates so far: a window of 1000 never fills, so no stage moves and all are kept."""
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
