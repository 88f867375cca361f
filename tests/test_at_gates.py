"""bench/at_gates.py's reading of the game: which turns count for G3 / G4, the probes' shown
states (scripted coders, the real sandbox), and each gate read from its run."""
import os
import sys
from types import SimpleNamespace

import pytest
from game_fixtures import ABS, GT, REF, make_problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import at_gates  # noqa: E402

import agents  # noqa: E402
from agents import EpisodeState  # noqa: E402

ABS_GT = [{"input": "5\n", "output": "5"}, {"input": "-3\n", "output": "3"},
          {"input": "0\n", "output": "0"}]
ABS_BUG = "n = int(input())\nprint(n)\n"   # wrong on negatives


def turn(g_shown, valid, passed, g_now):
    return {"coder_shown": {"program_gt_pass_rate": g_shown, "tests_valid": valid,
                            "tests_passed": passed}, "program_gt_pass_rate": g_now}


def episode(*turns):
    e = EpisodeState(make_problem(), 0)
    e.history = [turn(None, [], [], 0.0), *turns]
    return e


def test_repair_turns_read_what_the_coder_was_shown():
    episodes = [
        episode(turn(1.0, [False, False], [False, False], 1.0)),   # right, 0 of 2: kept
        episode(turn(1.0, [False, True], [False, True], 0.5)),     # right, 1 of 2: rewritten
        episode(turn(1.0, [True, False], [False, False], 1.0)),    # fails a valid test: no case
        episode(turn(0.5, [True, True], [True, False], 1.0)),      # wrong, valid mismatch: fixed
        episode(turn(0.5, [True, False], [True, False], 1.0)),     # fails an invalid test: none
        episode(turn(0.0, [True, True], [False, False], 0.0)),     # wrong, not fixed
        episode(turn(None, [True], [False], 1.0)),                 # no program shown: none
        episode(turn(1.0, [True, True], [True, True], 1.0)),       # nothing failed: none
    ]
    r = at_gates.repair_turns(episodes)
    assert (r["right"]["n"], r["right"]["value"]) == (2, 0.5)
    assert (r["right_zero"]["n"], r["right_zero"]["value"]) == (1, 1.0)
    assert (r["wrong"]["n"], r["wrong"]["value"]) == (2, 0.5)
    assert at_gates.repair_turns([episode()])["right"]["n"] == 0     # turn 0 never counts


def test_probes_show_right_programs_only_wrong_tests_and_wrong_ones_a_failing_test():
    """The coder alone wrote REF (right) for add and ABS_BUG (wrong) for abs; a coder that then
    answers each problem's reference keeps the one and fixes the other."""
    add, absp = make_problem("add"), make_problem("abs", ABS, tests=ABS_GT)
    first = {"[add]": REF, "[abs]": ABS_BUG}
    right = {"[add]": REF, "[abs]": ABS}

    def coder(prompts):
        out = []
        for m in prompts:
            key = next(k for k in first if k in m[1]["content"])
            table = right if "The coder's last program" in m[1]["content"] else first
            out.append(f"```python\n{table[key]}```")
        return out
    args = SimpleNamespace(max_tests=2, test_timeout=5.0)
    alone = at_gates.coder_alone([add, absp], coder, args, None)
    assert [s.gt_pass_rate for s in alone] == pytest.approx([1.0, 2 / 3])
    assert alone[1].passed_gt == [True, False, True]
    seen = []

    def recording(prompts):
        seen.extend(m[1]["content"] for m in prompts)
        return coder(prompts)
    res = at_gates.probes(alone, recording, args, None, seed=0)
    assert {k: (v["n"], v["value"]) for k, v in res.items()} == {
        "all": (1, 1.0), "one": (1, 1.0), "wrong": (1, 1.0)}
    assert res["all"]["verbatim"] == 1 and res["wrong"]["verbatim"] == 0
    shown_all, shown_one, shown_wrong = seen
    assert "It passed 0 of the 2 tests" in shown_all and "[add]" in shown_all
    assert "It passed 1 of the 2 tests" in shown_one
    # the wrong program is shown the ground-truth test it fails first, then an easy one
    assert "[abs]" in shown_wrong and "-3" in shown_wrong and "passed 1 of the 2" in shown_wrong


def _run(value, n=10, se=0.01):
    return {"value": value, "se": se, "n": n}


def test_gates_read_each_gate_from_its_run_and_compare_with_its_target():
    model = {"valid_share": _run(0.1), "turn0_minus_alone": _run(0.0),
             "repair_turns": {"right": _run(0.95), "wrong": _run(0.0)}}
    oracle = {"turn0_minus_alone": _run(-0.1), "final_minus_alone": _run(0.06),
              "repair_turns": {"right": _run(0, 0), "wrong": _run(0.2)}}
    res = {"orders": {"parallel": {"model": model, "oracle": oracle}},
           "probes": {"all": _run(0.8), "one": _run(0.9), "wrong": _run(0.1)}}
    g = at_gates.gates(res)["parallel"]
    assert {k: (v["value"], v["met"]) for k, v in g.items()} == {
        "G1": (0.1, False), "G2": (0.0, True), "G3": (0.95, True), "G4": (0.2, True),
        "G5": (0.06, True), "G3 probe": (0.8, False), "G4 probe": (0.1, False)}
    # with the oracle alone, G2 is the oracle game's turn 0 and there is no G1 or G3
    only = at_gates.gates({"orders": {"parallel": {"oracle": oracle}}})["parallel"]
    assert set(only) == {"G2", "G4", "G5"} and only["G2"]["value"] == -0.1
    assert at_gates.rate(0, 0)["n"] == 0 and not at_gates.gates(
        {"orders": {"p": {"model": {**model, "repair_turns": {"right": _run(1.0, 0)}}}}}
    )["p"]["G3"]["met"]                                   # no case is not a pass


def test_oracle_switch_gives_the_game_valid_tests_only():
    """--tester oracle: the tester's reply is the ground truth's easy tests at every turn."""
    problems = [make_problem("add")]
    coder = lambda prompts: ["```python\nprint(0)\n```"] * len(prompts)  # noqa: E731
    args = SimpleNamespace(max_turns=2, max_tests=2, test_timeout=5.0)
    for order in ("parallel", "tester-first"):
        episodes, stats = at_gates.play(problems, coder, agents.oracle_tester(problems, 2),
                                        order, args, None)
        assert stats["tests_written"] == stats["tests_valid"] == 4
        assert episodes[0].tests == GT[:2]
