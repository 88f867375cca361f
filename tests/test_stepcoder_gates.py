"""bench/stepcoder_gates.py: the pure parts of StepCoder's precondition bench."""
import doctest
import os
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import stepcoder_gates as gates  # noqa: E402

# split points at lines 2, 4, 6: stages (sqrt) [6, 2, None], (every) [6, 4, 2, None]
THREE_IFS = ("x = int(input())\nif x > 5:\n    x -= 1\nif x > 3:\n    x += 2\nif x > 1:\n"
             "    x *= 3\nprint(x)\n")


def test_docstring_examples():
    assert doctest.testmod(gates).failed == 0


def test_new_code_shares_count_each_stages_own_executable_lines():
    """Stage 0's new code is lines 6-8 (the last if, its body, the print), stage 1's lines 4-5,
    the whole program's lines 1-3 (above the earliest split point)."""
    starts = [6, 4, None]
    assert gates.new_code_shares(THREE_IFS, starts, {1, 2, 4, 6, 8}) == pytest.approx(
        [2 / 3, 1 / 2, 2 / 3])
    assert gates.new_code_shares(THREE_IFS, starts, {1, 2})[:2] == [0.0, 0.0]


def test_train_verdict_reads_the_chosen_tests_in_their_order():
    """From the verdicts on every test: the first failing one among the chosen tests, in the
    chosen order, and their lines' union; unknown coverage on any of them -> None; no test
    verdicts (compile error) -> the program's own verdict, no lines."""
    t = lambda status, lines, known=True: types.SimpleNamespace(  # noqa: E731
        status=status, executed_lines=set(lines), coverage_known=known)
    res = types.SimpleNamespace(status="wrong_answer", total=4, tests=[
        t("pass", {1}), t("runtime_error", {2}), t("wrong_answer", {3}), t("pass", {4}, False)])
    seen = gates.train_verdict(res, [2, 1, 0])
    assert seen.status == "wrong_answer" and seen.executed_lines == {1, 2, 3}
    assert gates.train_verdict(res, [0]).status == "pass"
    assert gates.train_verdict(res, [0, 3]).executed_lines is None
    broken = types.SimpleNamespace(status="compile_error", total=4, tests=[])
    assert gates.train_verdict(broken, [0]).status == "compile_error"


def test_pass_summary_maps_the_sqrt_ladder_onto_the_rungs_it_uses():
    """A problem with 4 split points: every rung 1-4 and the whole program sampled; the sqrt
    ladder (K = 2: the 4th and the 2nd split points) is rungs 1 and 3, read as its stages 1
    and 2; the gap is the 3 tests' pass rate minus every test's."""
    rows = [{"family": "tiers", "rung": r, "points": 4, "all": r == 1, "first": True,
             "drawn": r in (1, 3)} for r in (1, 2, 3, 4, "whole")]
    sqrt = gates.pass_summary(rows, "sqrt")["tiers"]
    assert list(sqrt) == ["1", "2", "whole"]
    assert (sqrt["1"]["all"], sqrt["2"]["drawn"], sqrt["2"]["gap/first"]) == (1.0, 1.0, 1.0)
    every = gates.pass_summary(rows, "every")["all"]
    assert list(every) == ["1", "2", "3", "4", "whole"]


def test_ladder_budget_reads_a_cells_flags():
    """steps x prompts per step over the pool against span x stages + 10, per family."""
    problem = types.SimpleNamespace(solutions=[THREE_IFS], metadata={"family": "chain_long"})
    argv = ["--steps", "10", "--prompts-per-step", "4", "--cccs-span", "2", "--cccs-rungs",
            "every"]
    budget = gates.ladder_budget([problem] * 2, argv)["chain_long"]
    assert budget == {"stages": 3, "need": 16, "draws": 20.0, "ok": True}
    assert not gates.ladder_budget([problem] * 4, argv)["chain_long"]["ok"]   # 10 draws
