"""Tests for agents.py with scripted policies: deterministic callables that return fixed texts.

The programs run in the real sandbox (tiny programs, a few dozen jobs in all). Hand-worked
reward numbers use the defaults alpha 0.7, catch_bonus 1, trivial_penalty 0.5, coverage_weight 0.5.
"""
import random

import pytest
from game_fixtures import ABS, GOOD_TESTS, GT, REF, SMALL_ONLY, asserts, blocks, make_problem

import agents
import data
import rollouts
import tester_judge
from agents import EpisodeState, GameConfig, run_episodes
from tester_judge import parse_tests

MINUS = "a, b = map(int, input().split())\nprint(a - b)\n"
ABS_BUG = "n = int(input())\nprint(n)\n"  # wrong on negatives: passes 2 of ABS_GT
ABS_GT = [
    {"input": "5\n", "output": "5"},
    {"input": "-3\n", "output": "3"},
    {"input": "0\n", "output": "0"},
]
ADD = "def add(a, b):\n    return a + b\n"
DOUBLE_SMALL = "n = int(input())\nif n < 5:\n    print(n * 2)\nelse:\n    print(n)\n"
ADD_CALLS = [
    {"input": [1, 2], "output": 3},
    {"input": [-1, 1], "output": 0},
    {"input": [10, 5], "output": 15},
]


def abs_problem():
    return make_problem("abs", ABS, tests=ABS_GT)


def call_problem():
    return make_problem("addf", ADD, fn_name="add", tests=ADD_CALLS, starter="def add(a, b):\n")


def code(program):
    return f"Here is my program:\n```python\n{program}```\n"


ONE_WRONG = blocks(("1 1", "2"), ("2 2", "5"))  # 2 + 2 is not 5: the reference disagrees
# For SMALL_ONLY (wrong when a >= 10): "20 3" catches it, "1 1" and "2 3" do not.
DISCRIMINATING = GOOD_TESTS
TRIVIAL = blocks(("1 1", "2"), ("2 3", "5"))
INVALID = blocks(("1 1", "3"), ("2 2", "5"))
CATCH_AND_WRONG = blocks(("20 3", "23"), ("2 2", "5"))


class Scripted:
    """A generate function: policy(messages, candidate_index) -> text; records every prompt."""

    def __init__(self, policy, name=None, log=None):
        self.policy, self.prompts, self.calls, self.name, self.log = policy, [], 0, name, log

    def __call__(self, prompts):
        self.calls += 1
        self.prompts += prompts
        if self.log is not None:
            self.log.append(self.name)
        k = 1
        while k < len(prompts) and prompts[k] is prompts[0]:
            k += 1  # prompts arrive as each state's prompt repeated k times
        return [self.policy(p, i % k) for i, p in enumerate(prompts)]


def fixed(*texts, **kw):
    """Candidate i always answers texts[i] (cycling when there are fewer texts than candidates)."""
    return Scripted(lambda messages, i: texts[i % len(texts)], **kw)


# The reward terms worked by hand below are ours (the reference judges the tests), most in the
# documented order, where the coder's turn-0 prompt already shows the tester's tests.
OURS = dict(role_rewards="ours")
TESTER_FIRST = dict(turn_order="tester-first", role_rewards="ours")


def by_role(samples, role, turn=None):
    return [s for s in samples if s.role == role and (turn is None or s.group[2] == turn)]


# --------------------------------------------------------------------------- rewards


def test_a_tester_bonus_that_is_an_affine_map_of_the_group_changes_nothing():
    """Why catch_bonus 0 vs 1 gave identical CPU runs: group-std advantages ignore an
    increasing affine map of a group's rewards. A pair's are +-1/sqrt(2) whatever the gap; at
    K = 4 a bonus that one candidate alone earns is such a map too; batch scaling keeps gaps."""
    import torch

    import grpo

    # the tester pair of one group: A caught the bug with 1 of 2 valid tests, B is valid, no catch
    a0, a1 = (tester_judge.tester_local([True, True], [True, False], [False, False], 0.5,
                                  catch_bonus=b)["local"] for b in (0.0, 1.0))
    b = tester_judge.tester_local([True, True], [False, False], [False, False], 0.25)["local"]
    assert (a0, a1, b) == pytest.approx((1.25, 1.75, 1.125))   # 1 + .5*.5 (+ .5); 1 + .5*.25
    group = [("p", 0, 0, "tester")] * 2
    adv0, adv1 = (grpo.group_advantages(torch.tensor([a, b]), group_ids=group) for a in (a0, a1))
    assert torch.allclose(adv0, adv1) and float(adv0[0]) == pytest.approx(2 ** -0.5, rel=1e-4)
    # K = 4: the catcher alone among three invalid sets (a1 vs a0 over 0, 0, 0): the same
    # advantages; beside a second valid set (b), the bonus widens the catcher's lead
    four = [("p", 1, 0, "tester")] * 4
    lone0, lone1 = (grpo.group_advantages(torch.tensor([a, 0.0, 0.0, 0.0]), group_ids=four)
                    for a in (a0, a1))
    assert torch.allclose(lone0, lone1, atol=1e-5)
    two0, two1 = (grpo.group_advantages(torch.tensor([a, b, 0.0, 0.0]), group_ids=four)
                  for a in (a0, a1))
    assert two1[0] - two1[1] > two0[0] - two0[1] + 0.1
    # with a second group in the batch, batch-std scaling lets the bonus widen the gap
    ids = group + [("q", 0, 0, "tester")] * 2
    bat0, bat1 = (grpo.group_advantages(torch.tensor([a, b, 0.0, 1.0]), scale="batch",
                                        group_ids=ids) for a in (a0, a1))
    assert bat1[0] - bat1[1] > bat0[0] - bat0[1]


def test_every_tester_term_in_one_episode_by_hand():
    """Coder first (the tester is shown a program): coder candidates ABS_BUG (g = 2/3), no code."""
    coder = fixed(code(ABS_BUG), "no code, sorry")
    tester = fixed(blocks(("-4", "4"), ("7", "7"), ("7", "7")), blocks(("3", "3"), ("-2", "5")))
    episodes, samples, stats = run_episodes(
        [abs_problem()], coder, tester, max_turns=1, k=2, turn_order="coder-first", **OURS
    )
    c_bug, c_none = by_role(samples, "coder")
    assert c_bug.terms == pytest.approx(
        {"global": 2 / 3, "local": 0.0, "reward": 0.7 * 2 / 3}
    )  # no tests yet
    assert c_none.terms == pytest.approx({"global": 0.0, "local": 0.0, "reward": 0.0})
    t_a, t_b = by_role(samples, "tester")
    # A: all valid; "-4" catches ABS_BUG; "7" every program passes (trivial), the 2nd "7" is a
    # duplicate;
    # coverage {1,2,3} u {1,2,5} = 4/4.  l = 1 + 1/3 + 0.5 * 1 - 0.5 * 2/3 = 1.5
    assert t_a.terms == pytest.approx(
        {
            "global": 2 / 3,
            "local": 1.5,
            "valid_share": 1.0,
            "catch_share": 1 / 3,
            "trivial_share": 2 / 3,
            "duplicate_share": 1 / 3,
            "coverage": 1.0,
            "n_tests": 3,
            "paired_coder_global": 2 / 3,   # coder candidate 0 (logged; ours does not read it)
            "reward": 0.7 * 2 / 3 + 1.5,
        }
    )
    # B: "3" valid but trivial, "-2 -> 5" invalid; coverage of "3": lines 1, 2, 5 = 3/4.
    # l = 1/2 + 0 + 0.5 * 0.75 - 0.5 * 1/2 = 0.625
    assert t_b.terms == pytest.approx(
        {
            "global": 2 / 3,
            "local": 0.625,
            "valid_share": 0.5,
            "catch_share": 0.0,
            "trivial_share": 0.5,
            "duplicate_share": 0.0,
            "coverage": 0.75,
            "n_tests": 2,
            "paired_coder_global": 0.0,     # coder candidate 1 wrote no code
            "reward": 0.7 * 2 / 3 + 0.625,
        }
    )
    (ep,) = episodes
    assert ep.history[0]["tester_choice"] == 0 and ep.passed == [False, True, True] and not ep.agree
    assert stats["tester_catch_share_mean"] == pytest.approx(1 / 6) and stats["tests_caught"] == 1
    assert stats["tester_coverage_mean"] == pytest.approx(0.875) and stats["tests_trivial"] == 3


def test_coder_without_code_gives_the_tester_no_catch():
    tester = fixed(blocks(("-4", "4"), ("7", "7"), ("7", "7")))
    _, samples, _ = run_episodes(
        [abs_problem()], fixed("I give up."), tester, max_turns=1, k=1, turn_order="coder-first",
        role_rewards="ours",
    )
    (t,) = by_role(samples, "tester")
    # nothing caught, no program to be trivial against: only the duplicate. l = 1 + 0.5 - 0.5/3
    assert t.terms["catch_share"] == 0.0 and t.terms["trivial_share"] == pytest.approx(1 / 3)
    assert t.terms["local"] == pytest.approx(1 + 0.5 - 0.5 / 3) and t.terms["global"] == 0.0


@pytest.mark.parametrize("order", ["tester-first", "coder-first"])
def test_discriminating_beats_trivial_beats_invalid_for_the_same_buggy_program(order):
    tester = fixed(DISCRIMINATING, TRIVIAL, INVALID)
    _, samples, _ = run_episodes(
        [make_problem()], fixed(code(SMALL_ONLY)), tester, max_turns=2, k=3, turn_order=order,
        **OURS)
    turn = 1 if order == "tester-first" else 0  # the first tester step that is shown SMALL_ONLY
    disc, triv, inv = by_role(samples, "tester", turn)
    g = 0.7 * 2 / 3
    assert disc.reward == pytest.approx(g + 1 + 0.5 + 0.5 - 0.25)  # caught 1/2, trivial 1/2 ("1 1")
    assert triv.reward == pytest.approx(g + 1 + 0.5 - 0.5)  # both tests pass every candidate
    assert inv.reward == pytest.approx(g + 0.0)  # no valid test: no coverage either
    assert disc.reward > triv.reward > inv.reward


def test_tester_group_counts_what_the_terms_beyond_validity_change():
    stats = {
        "tester_groups": 0,
        "tester_groups_signal_beyond_validity": 0,
        "tester_choice_not_most_valid": 0,
    }
    agents._count_tester_group(
        stats, [{"valid_share": 1.0, "reward": 1.0}, {"valid_share": 1.0, "reward": 1.5}]
    )
    agents._count_tester_group(
        stats, [{"valid_share": 1.0, "reward": 1.0}, {"valid_share": 0.5, "reward": 0.5}]
    )
    agents._count_tester_group(
        stats, [{"valid_share": 0.5, "reward": 1.0}, {"valid_share": 0.5, "reward": 1.0}]
    )
    assert stats == {
        "tester_groups": 3,
        "tester_groups_signal_beyond_validity": 1,
        "tester_choice_not_most_valid": 1,
    }


def test_the_best_reward_tester_branch_is_continued_not_the_most_valid():
    """TRIVIAL has the higher valid share (1 vs 1/2), CATCH_AND_WRONG the higher reward."""
    coder = Scripted(lambda m, i: code(SMALL_ONLY))
    tester = fixed(TRIVIAL, CATCH_AND_WRONG)
    episodes, samples, stats = run_episodes(
        [make_problem()], coder, tester, max_turns=2, k=2, turn_order="coder-first", **OURS
    )
    triv, catch = by_role(samples, "tester", 0)
    assert triv.terms["valid_share"] == 1.0 and catch.terms["valid_share"] == 0.5
    assert catch.reward == pytest.approx(0.7 * 2 / 3 + 0.5 + 0.5 + 0.5)  # caught 1/2, coverage 1
    assert triv.reward == pytest.approx(0.7 * 2 / 3 + 1 + 0.5 - 0.5) and triv.reward < catch.reward
    (ep,) = episodes
    assert ep.history[0]["tester_choice"] == 1
    assert stats["tester_choice_not_most_valid"] == 2 and stats["tester_groups"] == 2  # both turns
    (turn1_coder_prompt,) = {m[1]["content"] for m in coder.prompts[2:]}
    assert "20 3" in turn1_coder_prompt and "2 3" not in turn1_coder_prompt


def test_later_rewards_read_the_chosen_coder_branch_not_a_stale_copy():
    """Turn 0: coder candidate 1 is right and chosen. Turn 1: the coder keeps the program its
    prompt shows; if that prompt came from a stale copy (candidate 0), the turn-1 reward drops."""
    def coder_policy(messages, i):
        prompt = messages[1]["content"]
        if "The coder's last program" not in prompt:
            return code([MINUS, REF][i])
        return code(prompt.split("The coder's last program:\n```python\n", 1)[1].split("```", 1)[0])

    coder = Scripted(coder_policy)
    episodes, samples, _ = run_episodes([make_problem()], coder, fixed(ONE_WRONG), max_turns=2, k=2)
    turn0, turn1 = by_role(samples, "coder", 0), by_role(samples, "coder", 1)
    assert [s.terms["global"] for s in turn0] == [0.0, 1.0]
    assert REF in turn1[0].messages[1]["content"] and MINUS not in turn1[0].messages[1]["content"]
    assert [s.terms["global"] for s in turn1] == [1.0, 1.0]
    (ep,) = episodes
    assert ep.program.strip() == REF.strip() and ep.gt_pass_rate == 1.0 and ep.turn == 2
    assert [h["coder_choice"] for h in ep.history] == [1, 0]
    # The mismatch shown at turn 1 (to the tester, then the coder) is the chosen program's:
    # 2 2 -> expected 5, actual 4.
    assert "```\n5\n```\nProgram's actual output:\n```\n4" in turn1[0].messages[1]["content"]


def test_every_branch_owns_deep_copies():
    """Mutating one branch (its tests, flags, history, candidate list) changes no other branch,
    nor the parent state, nor the parsed test sets; the read-only problem is shared."""
    problem = make_problem()
    parent = EpisodeState(problem, 0, program=SMALL_ONLY, gt_pass_rate=2 / 3, coder_acted=True,
                          coder_candidates=[(SMALL_ONLY, 2 / 3)], history=[{"turn": 0}])
    sets = [parse_tests(GOOD_TESTS)[0], parse_tests(GOOD_TESTS)[0]]
    cfg = GameConfig()
    jobs = tester_judge.tester_jobs(problem, parent.program, parent.coder_candidates, sets, cfg)
    results = tester_judge.run_jobs(jobs, __import__("sandbox").run_batch, 5.0, 512)
    (b0, _), (b1, _) = agents.score_testers(parent, sets, results, cfg)
    b0.tests[0]["input"] = "9 9\n"
    b0.valid[0] = False
    b0.passed.append(True)
    b0.history[0]["turn"] = 99
    b0.coder_candidates.append(("x", 0.0))
    assert b1.tests == sets[1] == sets[0] == parse_tests(GOOD_TESTS)[0]
    assert (
        b1.valid == [True, True]
        and len(b1.passed) == 2
        and b1.history == [{"turn": 0}] == parent.history
    )
    assert b1.coder_candidates == [(SMALL_ONLY, 2 / 3)] == parent.coder_candidates
    assert b0.problem is b1.problem is problem
    # Coder branches start from one state's tests: each holds its own copy.
    jobs = tester_judge.coder_jobs(problem, b1.tests, [REF, MINUS])
    results = tester_judge.run_jobs(jobs, __import__("sandbox").run_batch, 5.0, 512)
    (c0, t0), (c1, t1) = agents.score_coders(b1, [REF, MINUS], results, cfg)
    assert (t0["global"], t1["global"]) == (1.0, 0.0)
    c0.tests.clear()
    c0.valid.clear()
    assert len(c1.tests) == len(b1.tests) == 2 and c1.valid == b1.valid == [True, True]


def test_call_based_episode_end_to_end():
    """The tester writes asserts, the coder writes the function, the sandbox runs both (fn_name)."""
    def coder_policy(messages, i):
        if "The coder's last program" in messages[1]["content"]:
            return code(ADD)
        return code(["def add(a, b):\n    return a - b\n", "def add(a, b):\n    return a * b\n"][i])

    coder = Scripted(coder_policy)
    tester = fixed(asserts("assert add(1, 2) == 3", "assert add(2, 2) == 5"),
                   asserts("assert add(10, -3) == 7", "assert add(0, 0) == 0"))
    episodes, samples, stats = run_episodes([call_problem()], coder, tester, max_turns=3, k=2,
                                            **TESTER_FIRST)
    (ep,) = episodes
    assert (
        ep.agree and ep.turn == 2 and ep.gt_pass_rate == 1.0 and stats["call_based_episodes"] == 1
    )
    assert (
        "You are the tester. Write unit tests for the function `add`"
        in tester.prompts[0][0]["content"]
    )
    # Turn 0, no program yet: validity and coverage only (def line + return line = 2/2).
    t0 = by_role(samples, "tester", 0)
    assert [t.terms["valid_share"] for t in t0] == [0.5, 1.0] and [t.reward for t in t0] == [
        1.0,
        1.5,
    ]
    # The coder saw the chosen tests; a - b and a * b fail every ground-truth call, pass add(0, 0).
    c0 = by_role(samples, "coder", 0)
    assert "assert add(10, -3) == 7" in c0[0].messages[1]["content"]
    assert [c.terms["global"] for c in c0] == [0.0, 0.0] and [c.terms["local"] for c in c0] == [
        0.5,
        0.5,
    ]
    # Turn 1, shown a - b: each set catches one test; add(0, 0) is passed by both candidates.
    t1 = by_role(samples, "tester", 1)
    assert [t.terms["catch_share"] for t in t1] == [0.5, 0.5] and [
        t.terms["trivial_share"] for t in t1
    ] == [0, 0.5]
    assert [t.reward for t in t1] == pytest.approx([0.5 + 0.5 + 0.5, 1 + 0.5 + 0.5 - 0.25])
    shown = by_role(samples, "coder", 1)[0].messages[1]["content"]
    assert (
        "Input:\n```\nadd(10, -3)\n```\nTester's expected output:\n```\n7\n```\n"
        "Program's actual output:\n```\n13"
        in shown
    )
    assert [c.reward for c in by_role(samples, "coder", 1)] == pytest.approx([1.7, 1.7])


def test_turn_order_parallel_by_default_tester_first_and_coder_first_by_flag():
    """Parallel (the default): the coder's turn-0 prompt is the bare problem, no test shown;
    tester-first: the coder sees THIS turn's tests; coder-first: the tester sees this turn's
    program."""
    problem = make_problem()
    bare = agents.coder_turn_messages(EpisodeState(problem, 0))
    assert "tester" not in bare[1]["content"].lower()
    for order, expected in (
        ("parallel", ["coder", "tester"] * 2),
        ("tester-first", ["tester", "coder"] * 2),
        ("coder-first", ["coder", "tester"] * 2),
    ):
        log = []
        coder = fixed(code(SMALL_ONLY), name="coder", log=log)
        tester = fixed(DISCRIMINATING, name="tester", log=log)
        kwargs = {} if order == "parallel" else {"turn_order": order, **OURS}
        run_episodes([problem], coder, tester, max_turns=2, k=1, **kwargs)
        assert log == expected
        coder0, tester0 = coder.prompts[0][1]["content"], tester.prompts[0][1]["content"]
        if order == "tester-first":  # the coder sees THIS turn's tests; the tester saw no program
            assert (
                "The tester's tests:" in coder0
                and "20 3" in coder0
                and "last program" not in tester0
            )
        else:  # the coder starts from the bare problem
            assert coder.prompts[0] == bare and "20 3" not in coder0
            assert ("The coder's last program" in tester0) == (order == "coder-first")
        # from turn 1 on the coder sees the tests and its last program's results
        assert "The tester's tests:" in coder.prompts[1][1]["content"]
    assert (GameConfig().turn_order, GameConfig().role_rewards) == ("parallel", "pettingllms")
    with pytest.raises(ValueError, match="turn_order"):
        GameConfig(turn_order="both")
    with pytest.raises(ValueError, match="tester-first"):
        GameConfig(turn_order="tester-first")  # the paired coder acts after the tester's choice
    with pytest.raises(ValueError, match="role_rewards"):
        GameConfig(role_rewards="mine")


def test_parallel_order_both_roles_act_from_last_turns_state():
    """The public code's order: at turn 0 both see the bare problem (the coder's first
    program is the single-agent one); at turn 1 both see turn 0's program, turn 0's tests
    and how the one did on the other; the episode's state joins the two choices."""
    problem = make_problem()
    coder = fixed(code(SMALL_ONLY))
    tester = fixed(DISCRIMINATING)
    episodes, samples, stats = run_episodes([problem], coder, tester, max_turns=2, k=1,
                                            turn_order="parallel")
    bare = EpisodeState(problem, 0)
    assert coder.prompts[0] == agents.coder_turn_messages(bare)
    assert tester.prompts[0] == agents.tester_messages(bare, GameConfig().max_tests)
    c1, t1 = coder.prompts[1][1]["content"], tester.prompts[1][1]["content"]
    for text in (c1, t1):   # turn 0's program on turn 0's tests: "20 3" catches SMALL_ONLY
        assert "a < 10" in text and "20 3" in text and "passed 1 of the 2 tests" in text
    assert "Your last tests:" in t1 and "The tester's tests:" in c1
    (e,) = episodes
    assert e.program.strip() == SMALL_ONLY.strip() and e.passed == [True, False]
    assert e.turn == 2 and not e.agree
    # turn 0's tester was shown no program: nothing to catch; turn 1's was shown SMALL_ONLY
    assert [s.terms["catch_share"] for s in by_role(samples, "tester")] == [0.0, 0.5]
    assert stats["sandbox_calls"] == 6          # per turn: tester, coder, the join


@pytest.mark.parametrize("order", ["parallel", "coder-first"])
def test_pettingllms_rewards_pay_the_tester_its_paired_coders_pass_rate(order):
    """The public code's rewards by hand. Turn 0, K = 2: coder candidates SMALL_ONLY (g = 2/3)
    and REF (g = 1): r_C = 2g = 4/3 and 2. Tester candidate i is paid coder candidate i's g,
    whatever its tests: GOOD_TESTS (all valid) 2/3, INVALID (none valid) 1. The branch with the
    invalid tests is continued; ours would have ranked it last (valid share 0, still logged)."""
    coder = fixed(code(SMALL_ONLY), code(REF))
    tester = fixed(GOOD_TESTS, INVALID)
    episodes, samples, stats = run_episodes([make_problem()], coder, tester, max_turns=2, k=2,
                                            turn_order=order)
    assert [c.reward for c in by_role(samples, "coder", 0)] == pytest.approx([4 / 3, 2.0])
    good, invalid = by_role(samples, "tester", 0)
    assert [good.reward, invalid.reward] == pytest.approx([2 / 3, 1.0])
    assert [good.terms["paired_coder_global"], invalid.terms["paired_coder_global"]] == (
        pytest.approx([2 / 3, 1.0]))
    assert (good.terms["valid_share"], invalid.terms["valid_share"]) == (1.0, 0.0)
    (ep,) = episodes
    assert (ep.history[0]["coder_choice"], ep.history[0]["tester_choice"]) == (1, 1)
    # The coder's turn-1 prompt showed a right program failing two wrong tests.
    assert ep.history[1]["coder_shown"] == {"program_gt_pass_rate": 1.0,
                                            "tests_valid": [False, False],
                                            "tests_passed": [False, False]}
    assert [h["program_gt_pass_rate"] for h in ep.history] == [1.0, 1.0]
    assert stats["tester_paired_coder_global_mean"] == pytest.approx((2 / 3 + 1) / 2)
    # --reward binary: g is 1 only when every ground-truth test passes
    _, samples, _ = run_episodes([make_problem()], coder, tester, max_turns=1, k=2,
                                 turn_order=order, reward="binary")
    assert [s.reward for s in samples if s.role == "tester"] == [0.0, 1.0]
    assert [s.reward for s in samples if s.role == "coder"] == [0.0, 2.0]


def test_role_rewards_flag_and_the_weights_it_reads():
    assert agents.parse_args([]).role_rewards == "pettingllms"
    assert agents.game_config(agents.parse_args(["--role-rewards", "ours"])).role_rewards == "ours"
    for argv in (["--turn-order", "tester-first"], ["--catch-bonus", "0"], ["--alpha", "0.5"]):
        with pytest.raises(SystemExit):   # pettingllms reads none of these
            agents.parse_args(argv)
        agents.parse_args([*argv, "--role-rewards", "ours"])


def test_oracle_tester_answers_each_prompt_with_its_problems_ground_truth_tests():
    """The oracle switch: every tester prompt, at any turn, gets its own problem's easy
    ground-truth tests; all valid in a game; a prompt of another problem is an error."""
    problems = [make_problem("p0"), abs_problem(), call_problem()]
    oracle = agents.oracle_tester(problems, max_tests=2)
    bare = [agents.tester_messages(EpisodeState(p, 0), 2) for p in problems]
    later = agents.tester_messages(EpisodeState(problems[1], 0, program=ABS_BUG, coder_acted=True,
                                                tests=ABS_GT[:1], tester_acted=True), 2)
    texts = oracle(bare + [later])
    assert parse_tests(texts[0]) == ([{"input": t["input"], "output": t["output"]}
                                      for t in GT[:2]], 0)
    assert parse_tests(texts[2], fn_name="add") == (ADD_CALLS[:2], 0)
    assert texts[1] == texts[3]                 # the same problem's tests at a later turn
    episodes, _, stats = run_episodes(problems, fixed(code(MINUS)), oracle, max_turns=2, k=1)
    assert stats["tests_written"] == stats["tests_valid"] == 12   # 3 problems x 2 tests x 2 turns
    with pytest.raises(ValueError, match="statement"):
        oracle([agents.tester_messages(EpisodeState(make_problem("other"), 0), 2)])


def test_easy_tests_take_short_inputs_with_new_answers_in_their_order():
    tests = [{"input": "100 200\n", "output": "300"}, {"input": "1 2\n", "output": "3"},
             {"input": "2 1\n", "output": "3"}, {"input": "5 7\n", "output": "12"}]
    assert agents.easy_tests(tests, 2) == [tests[1], tests[3]]   # "2 1" repeats an answer
    # a new answer before a short input with a taken one
    assert agents.easy_tests(tests, 3) == [tests[0], tests[1], tests[3]]
    assert agents.easy_tests(tests, 4) == tests
    assert agents.easy_tests(tests[:1], 2) == tests[:1]


def test_near_misses_change_one_constant_or_one_bound():
    code = "x = int(input())\nif x < 10:\n    print('a1')\nelse:\n    print(x * 2)"
    assert agents.near_misses(code) == [
        code.replace("10", "11"), code.replace("* 2", "* 3"), code.replace(" < ", " <= ")]
    assert agents.near_misses("print(-1, 'x2')") == ["print(-2, 'x2')"]   # not in a string


# --------------------------------------------------------------------------- the loop


def test_group_keys_hold_problem_turn_role_and_never_merge_problems():
    problems = [make_problem("p0"), make_problem("p1"), make_problem("p2")]
    coder = fixed(code(MINUS), code(SMALL_ONLY))  # never agrees with GOOD_TESTS (20 3 -> 23)
    episodes, samples, stats = run_episodes(
        problems, coder, fixed(GOOD_TESTS, ONE_WRONG), max_turns=2, k=2, **TESTER_FIRST
    )
    keys = {s.group for s in samples}
    assert keys == {
        (f"p{p}", p, t, r) for p in range(3) for t in range(2) for r in ("tester", "coder")
    }
    ids = [s.group for s in samples]
    assert len(set(ids)) == 12
    for gid in set(ids):
        members = [s for s, g in zip(samples, ids) if g == gid]
        assert len(members) == 2  # K candidates per group
        assert len({s.group[0] for s in members}) == 1  # one problem per group (the index defect)
        assert members[0].messages == members[1].messages  # every candidate saw the same state
        assert f"[{members[0].group[0]}]" in members[0].messages[1]["content"]
    assert stats["sandbox_calls"] == 4 and coder.calls == 2  # one run_batch per role step


def test_repeated_problem_gets_separate_groups():
    problems = [make_problem("p0"), make_problem("p0")]
    _, samples, _ = run_episodes(problems, fixed(code(MINUS)), fixed(GOOD_TESTS), max_turns=1, k=1)
    assert {s.group for s in samples} == {
        ("p0", e, 0, r) for e in (0, 1) for r in ("tester", "coder")
    }


def test_tester_candidates_with_different_tests_get_different_rewards():
    """The shared-copy defect: every tester candidate is scored in its own branch."""
    _, samples, stats = run_episodes(
        [make_problem()], fixed(code(REF)), fixed(GOOD_TESTS, ONE_WRONG), max_turns=1, k=2,
        **TESTER_FIRST)
    good, wrong = by_role(samples, "tester")
    assert good.terms["valid_share"] == 1.0 and wrong.terms["valid_share"] == 0.5
    # turn 0, tester first: nothing shown yet, so validity + 0.5 * coverage (REF: 2 of 2 lines)
    assert good.reward == pytest.approx(1.0 + 0.5) and wrong.reward == pytest.approx(0.5 + 0.5)
    assert stats["tester_valid_share_mean"] == pytest.approx(0.75)
    assert by_role(samples, "coder")[0].terms["local"] == 1.0  # REF on GOOD_TESTS (the chosen set)


def test_tester_reward_uses_the_reference_solution():
    """Coder and tester agree on a - b; only the reference (a + b) says the tests are wrong."""
    minus_tests = blocks(("5 3", "2"), ("9 1", "8"))
    rewards = {}
    for name, reference in (("plus", REF), ("minus", MINUS)):
        episodes, samples, _ = run_episodes(
            [make_problem(reference=reference)],
            fixed(code(MINUS)),
            fixed(minus_tests),
            max_turns=1,
            k=1,
            **TESTER_FIRST,
        )
        assert episodes[0].agree  # the program passes the tester's tests either way
        rewards[name] = {s.role: s.terms for s in samples}
    assert (
        rewards["plus"]["tester"]["valid_share"] == 0.0
        and rewards["minus"]["tester"]["valid_share"] == 1.0
    )
    assert (
        rewards["plus"]["coder"]["local"] == 0.0
    )  # agreeing with wrong tests earns the coder nothing


def test_episode_that_agrees_stops_generating():
    calls = []

    def counting_run_batch(jobs):
        from sandbox import run_batch
        calls.append(len(jobs))
        return run_batch(jobs)

    coder = Scripted(lambda m, i: code(REF) if "[easy]" in m[1]["content"] else code(MINUS))
    tester = Scripted(lambda m, i: GOOD_TESTS)
    problems = [make_problem("easy"), make_problem("hard")]
    episodes, samples, stats = run_episodes(
        problems, coder, tester, max_turns=3, k=2, run_batch=counting_run_batch, **TESTER_FIRST
    )
    for agent in (coder, tester):
        assert sum("[easy]" in p[1]["content"] for p in agent.prompts) == 2  # turn 0 only, K = 2
        assert sum("[hard]" in p[1]["content"] for p in agent.prompts) == 6  # 3 turns x K
        assert agent.calls == 3
    assert len(calls) == 6 and stats["sandbox_calls"] == 6  # one run_batch per role step
    assert [(e.done, e.turn) for e in episodes] == [(True, 1), (False, 3)]
    assert len(samples) == 2 * 2 + 3 * 2 * 2
    assert stats["agree_rate"] == 0.5 and stats["pass_at_1"] == 0.5


def test_unparsable_outputs_are_counted_not_fatal():
    coder = fixed("I would use a loop.", code(REF))
    tester = fixed("The program looks fine to me.", GOOD_TESTS + "\n**Test Input:**\n```\n1 2\n```")
    episodes, samples, stats = run_episodes([make_problem()], coder, tester, max_turns=1, k=2,
                                            **TESTER_FIRST)
    assert stats["coder_replies_without_code"] == 1
    assert stats["tester_replies_without_tests"] == 1 and stats["tester_blocks_failed"] == 2
    no_tests, good = by_role(samples, "tester")
    assert (
        no_tests.terms["local"] == 0.0
        and no_tests.terms["n_tests"] == 0
        and good.terms["n_tests"] == 2
    )
    no_code, ref = by_role(samples, "coder")
    assert no_code.reward == 0.0 and ref.reward == pytest.approx(1.7)
    assert episodes[0].agree


def test_no_tests_never_counts_as_agreement():
    episodes, _, _ = run_episodes(
        [make_problem()], fixed(code(REF)), fixed("no tests here"), max_turns=2, k=1
    )
    assert not episodes[0].agree and episodes[0].turn == 2
    assert "no parsable tests" in agents.coder_turn_messages(episodes[0])[1]["content"]


def test_program_that_does_not_compile_never_agrees():
    """The sandbox gives no per-test results after a compile error: every test counts as failed."""
    episodes, samples, _ = run_episodes(
        [make_problem()], fixed(code("print(")), fixed(GOOD_TESTS), max_turns=1, k=1,
        **TESTER_FIRST)
    (ep,) = episodes
    assert not ep.agree and ep.passed == [False, False] and len(ep.mismatches) == 2
    assert "compile_error" in ep.mismatches[0]["actual"]
    assert by_role(samples, "coder")[0].terms["local"] == 0.0


def test_generate_may_return_completions_and_must_return_one_per_prompt():
    from types import SimpleNamespace
    coder = Scripted(lambda m, i: SimpleNamespace(text=code(REF), token_ids=[1, 2, 3]))
    _, samples, _ = run_episodes([make_problem()], coder, fixed(GOOD_TESTS), max_turns=1, k=2)
    c0, _ = by_role(samples, "coder")
    assert (
        c0.output.token_ids == [1, 2, 3] and c0.response == code(REF) and c0.terms["global"] == 1.0
    )
    with pytest.raises(ValueError, match="one text per prompt"):
        run_episodes([make_problem()], fixed(code(REF)), lambda prompts: ["x"], max_turns=1, k=2)


def test_problem_without_reference_plays_but_no_test_is_valid():
    """Evaluation sets without solutions (LiveCodeBench): the program is still judged on the
    ground truth; the tester's tests cannot be validated."""
    problem = make_problem()
    problem.solutions = []
    episodes, samples, stats = run_episodes(
        [problem], fixed(code(REF)), fixed(GOOD_TESTS), max_turns=1, k=1
    )
    assert (
        episodes[0].gt_pass_rate == 1.0
        and episodes[0].agree
        and stats["episodes_without_reference"] == 1
    )
    (t,) = by_role(samples, "tester")
    # the default rewards read no coverage: the reference is not traced, the term not measured
    assert t.terms["valid_share"] == 0.0 and t.terms["coverage"] is None


def test_train_problems_without_a_reference_are_dropped_and_none_left_is_a_user_error():
    """The tester's reward needs a reference solution: RL keeps the problems that have one;
    none left ends the run with one line naming --train-data (model.UserError, exit 2)."""
    from infra.model import UserError
    no_ref = make_problem("lcb")
    no_ref.solutions = []
    assert [p.id for p in agents.with_reference([no_ref, make_problem("p0")], "x")] == ["p0"]
    with pytest.raises(UserError, match="--train-data x: no problem has a reference solution"):
        agents.with_reference([no_ref], "x")


def test_coder_alone_sees_the_bare_problem():
    coder = fixed(code(SMALL_ONLY))
    assert agents.coder_alone([make_problem(), call_problem()], coder) == pytest.approx(
        [2 / 3, 0.0]
    )
    assert coder.calls == 1 and coder.prompts[0] == agents.coder_turn_messages(
        EpisodeState(make_problem(), 0)
    )


# --------------------------------------------------------------------------- training glue


class CharTokenizer:
    """One id per character (id = code point), EOS 0: enough for warm_start_examples."""

    chat_template = None
    eos_token_id = 0

    def __call__(self, text):
        return {"input_ids": [ord(c) for c in text]}

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)


def test_warm_start_examples_follow_the_roles():
    tok = CharTokenizer()
    problem = make_problem()
    problem.solutions = [REF, "print(sum(map(int, input().split())))\n"]
    coder_only = agents.warm_start_examples(tok, [problem], ["coder"], max_tests=2)
    both = agents.warm_start_examples(
        tok, [problem, call_problem()], ["tester", "coder"], max_tests=2
    )
    assert len(coder_only) == 4  # each reference, without and with the GT tests shown
    assert len(both) == 4 + 1 + 2 + 1  # + one tester example per problem
    pairs = [(tok.decode(s.prompt_ids), tok.decode(s.response_ids)) for s in both]
    assert all(s.response_ids[-1] == tok.eos_token_id for s in both)
    tester_answers = [a for prompt, a in pairs if "You are the tester" in prompt]
    assert parse_tests(tester_answers[0]) == (
        [{"input": t["input"], "output": t["output"].strip()} for t in GT[:2]],
        0,
    )
    assert parse_tests(tester_answers[1], fn_name="add") == (ADD_CALLS[:2], 0)
    coder = [
        (prompt, data.extract_code(a))
        for prompt, a in pairs
        if "You are the coder" in prompt and "[add]" in prompt
    ]
    assert {c for _, c in coder} == {s.strip() for s in problem.solutions}
    assert sum("The tester's tests:" in prompt for prompt, _ in coder) == 2


def test_warm_start_builds_repair_states_only_for_an_sft(monkeypatch):
    """The repair states (a sandbox run over every train problem) feed the SFT alone: with
    --sft-steps 0 they are not built; with an SFT they are, and reach its examples."""
    import types

    import torch
    calls, examples = [], []
    monkeypatch.setattr(agents, "repair_states", lambda *a, **k: calls.append(a) or ["r"])
    monkeypatch.setattr(agents, "warm_start_examples",
                        lambda tok, probs, roles, n, repairs, **k: examples.append(repairs) or [])
    monkeypatch.setattr(agents.actor, "sft", lambda *a, **k: None)
    engine = types.SimpleNamespace(load_weights=lambda params: list(params))
    m = agents.RoleModel(None, torch.nn.Linear(1, 1), engine)
    for steps in (0, 5):
        args = agents.parse_args(["--policy", "shared", "--max-turns", "2", "--repair-sft", "1",
                                  "--sft-steps", str(steps), "--sandbox-workers", "1"])
        run = types.SimpleNamespace(args=args, train_problems=[make_problem("p0")], d=None,
                                    say=lambda *a: None, log=lambda row: None)
        agents.warm_start({"tester": m, "coder": m}, run)
    assert len(calls) == 1 and examples == [[], ["r"]]


def test_repair_states_show_a_mismatch_and_carry_the_right_answer():
    """Wrong program: a near miss of the reference that fails a ground-truth test, shown with
    easy tests that hold the one it fails (answer: the reference, the same tests); wrong
    tests: the reference with its first expected output replaced, or with every one replaced
    (answer: the same program, the right tests), whichever is shown the wrong program's pass
    count ("passed 0" or not). Without a near miss (no literal, no bound), the next problem's
    reference."""
    problems = [make_problem("p0"), make_problem("p1", reference=MINUS), call_problem(),
                make_problem("dbl", reference=DOUBLE_SMALL, tests=[
                    {"input": "-3\n", "output": "-6"}, {"input": "2\n", "output": "4"},
                    {"input": "7\n", "output": "7"}])]
    repairs = agents.repair_states(problems, max_tests=2)
    p0 = [(s, prog, tests) for s, prog, tests in repairs if s.problem.id == "p0"]
    (wrong_prog, prog_a, tests_a), (all_wrong, prog_c, tests_c) = p0
    assert wrong_prog.program == MINUS and wrong_prog.mismatches and wrong_prog.turn == 1
    assert prog_a == REF and tests_a == GT[:2]  # fix the program, keep the (right) tests
    assert wrong_prog.passed == [False, False]  # a - b passes neither: the all-wrong state kept
    # all wrong: every output replaced by another ground-truth answer; the reference passes none
    assert all_wrong.program == REF and all_wrong.passed == [False, False]
    assert all_wrong.valid == [False, False] and len(all_wrong.mismatches) == 2
    assert all(t["output"] != g["output"] and t["output"] in ("3", "12", "14")
               for t, g in zip(all_wrong.tests, GT))
    assert "It passed 0 of the 2 tests" in agents.coder_turn_messages(all_wrong)[1]["content"]
    assert prog_c == REF and tests_c == GT[:2]    # keep the program (the reference), fix the tests
    messages = agents.coder_turn_messages(wrong_prog)[1]["content"]
    assert "The coder's last program" in messages and "Program's actual output" in messages
    # A wrong program that passes one shown test (right on small inputs only): the one-wrong
    # state is kept, the first output replaced by the next answer of the ground truth (12).
    (small, _, _), (one_wrong, prog_b, tests_b) = agents.repair_states(
        problems[:1], max_tests=2, wrong_programs={"p0": [SMALL_ONLY]})
    assert small.program == SMALL_ONLY and small.passed == [False, True]
    assert one_wrong.program == REF and one_wrong.tests == [dict(GT[0], output="12"), GT[1]]
    assert one_wrong.passed == [False, True] and one_wrong.valid == [False, True]
    assert prog_b == REF and tests_b == GT[:2]
    # dbl: a near miss of its own (n * 3; n < 6 and n <= 5 pass these tests), shown with the
    # test it fails first and the easy ones, the mismatch holding the program's own output.
    (near, right, shown), (keep, _, _) = [r for r in repairs if r[0].problem.id == "dbl"]
    assert near.program == DOUBLE_SMALL.replace("* 2", "* 3") and right == DOUBLE_SMALL
    assert [t["input"] for t in shown] == ["-3\n", "2\n"]
    assert near.mismatches[0]["actual"].strip() == "-9"
    assert shown == near.tests and not all(near.passed) and len(shown) == 2
    assert all(m["actual"] != m["expected"] for m in near.mismatches)
    assert keep.program == DOUBLE_SMALL
    # Every problem with both kinds: the right and the wrong program show the same count.
    for pid in ("p0", "p1", "dbl"):
        fix, keep = [s for s, _, _ in repairs if s.problem.id == pid]
        assert fix.program != keep.program == keep.problem.solutions[0]
        assert any(fix.passed) == any(keep.passed)
    # The call-based problem's only near misses pass (a + b has no literal or bound) and there
    # is no other call-based problem to borrow a wrong program from: one of its wrong-test
    # states is kept (the seed's draw), with the reference.
    (call_state, call_prog, call_tests), = [r for r in repairs if r[0].problem.id == "addf"]
    assert call_state.program == call_prog == ADD and call_tests == ADD_CALLS[:2]
    assert not all(call_state.passed) and not all(call_state.valid)
    pairs = agents.warm_start_pairs(problems, ["coder"], 2, repairs)
    assert len(pairs) == 2 * 4 + len(
        repairs
    )  # two turn-0 pairs per reference + one per repair state
    # the shipped base's recipe: the first output wrong, the reference shown it in every problem
    v1 = agents.repair_states(problems, max_tests=2, wrong_tests=("one",))
    assert [s.tests[0]["output"] for s, _, _ in v1 if s.program == s.problem.solutions[0]] == [
        "12", "12", "-6", 0]
    assert [s.problem.id for s, _, _ in v1] == ["p0", "p0", "p1", "p1", "dbl", "dbl", "addf"]


def test_repair_states_draw_the_wrong_program_from_given_samples_first():
    """A model's own program that fails the ground truth comes before the near misses; one
    that passes is skipped; its mismatches are its real outputs."""
    own = {"p0": [REF, "a, b = map(int, input().split())\nprint(a * b)\n"]}
    (state, right, tests), *_ = agents.repair_states([make_problem("p0")], 2,
                                                     wrong_programs=own)
    assert state.program == own["p0"][1] and right == REF and tests == GT[:2]
    assert [m["actual"].strip() for m in state.mismatches] == ["2", "35"]   # 1 * 2, 5 * 7


def test_wrong_outputs_replace_the_chosen_outputs_with_other_answers():
    tests = [{"input": "1\n", "output": "2"}, {"input": "2\n", "output": "4"}]
    pool = tests + [{"input": "3\n", "output": "6"}]
    assert agents.wrong_outputs(tests, [0], pool, None) == [dict(tests[0], output="4"), tests[1]]
    every = agents.wrong_outputs(tests, [0, 1], pool, None, random.Random(0))
    assert all(w["output"] != t["output"] and w["output"] in ("2", "4", "6")
               for w, t in zip(every, tests))
    assert tests[0]["output"] == "2"                      # copies: the input is left alone
    lone = [{"input": [1], "output": 0}]
    assert agents.wrong_outputs(lone, [0], lone, "f") == [{"input": [1], "output": None}]


def test_presets_keep_the_paper_settings_on_gpu_and_flags_override():
    gpu = agents.parse_args(["--preset", "gpu"])
    assert (gpu.group_size, gpu.max_turns, gpu.max_new_tokens, gpu.lr, gpu.out) == (
        4, 5, 4096, 1e-6, "runs/agents-gpu")
    cpu = agents.parse_args([])
    # the public configs' K and evaluation temperature; 2 turns, not their 5 (PRESETS)
    assert (cpu.group_size, cpu.max_turns, cpu.eval_temperature) == (8, 2, 0.6)
    assert (cpu.max_tests, cpu.engine, cpu.out, cpu.reward) == (2, "auto", "runs/agents",
                                                                "fraction")
    assert (cpu.turn_order, cpu.role_rewards) == ("parallel", "pettingllms")
    assert (cpu.catch_bonus, cpu.trivial_penalty, cpu.coverage_weight) == (1.0, 0.5, 0.5)
    assert agents.parse_args(["--group-size", "3"]).group_size == 3
    assert agents.build_parser().get_default("max_turns") == 10  # the seed's config
    args = agents.parse_args(["--turn-order", "coder-first", "--role-rewards", "ours",
                              "--catch-bonus", "2", "--reward", "binary"])
    cfg = agents.game_config(args, k=1)
    assert (cfg.turn_order, cfg.role_rewards, cfg.catch_bonus, cfg.k, cfg.timeout,
            cfg.reward) == ("coder-first", "ours", 2.0, 1, cpu.test_timeout, "binary")
    # Flags the game does not use are not accepted (they would silently do nothing).
    for flag in ("--k", "--curriculum", "--dynamic-sampling", "--overlong-filter", "--beta"):
        with pytest.raises(SystemExit):
            agents.parse_args([flag, "1"])


def test_binary_global_reward():
    _, samples, _ = run_episodes([make_problem()], fixed(code(SMALL_ONLY)), fixed(GOOD_TESTS),
                                 max_turns=1, k=1, reward="binary", **TESTER_FIRST)
    (c,) = by_role(samples, "coder")
    assert c.terms["global"] == 0.0 and c.reward == pytest.approx(0.5)  # local: 1 of 2 valid tests


ROOT = __import__("os").path.dirname(
    __import__("os").path.dirname(__import__("os").path.abspath(__file__))
)
TINY = ["--model", "tiny", "--engine", "hf", "--max-problems", "4", "--sft-steps", "1",
        "--sft-batch", "4", "--prompts-per-step", "2", "--max-turns", "2", "--group-size", "2",
        "--max-new-tokens", "8", "--tester-max-new-tokens", "8", "--micro-batch", "4"]


def _agents(nproc, *args, wait=True):
    """agents.py in a subprocess (nproc > 1: torchrun --standalone) -> its stdout (wait) or the
    Popen (wait=False, for _finish)."""
    import os
    import subprocess
    import sys

    if nproc == 1:
        cmd = [sys.executable, os.path.join(ROOT, "agents.py")]
    else:
        torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
        cmd = [
            torchrun,
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            os.path.join(ROOT, "agents.py"),
        ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd + TINY + list(args), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    return _finish(proc) if wait else proc


def _finish(proc):
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return out


def _rows(out):
    import json
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_prompt_order_epoch_plays_every_problem_once_an_epoch():
    """agents.py parses trainer's --prompt-order epoch, and rank_batch given
    rollouts.epoch_order(prompt_order, seed, step) (what train passes play_episodes) walks
    the epoch: 10 problems, 4 a step: 2 steps an epoch (the partial batch of 2 dropped), no
    problem twice within one."""
    import random

    import torch

    from infra.model import Dist
    problems = [make_problem(f"p{i}") for i in range(10)]
    d = Dist(0, 1, 0, torch.device("cpu"))
    args = agents.parse_args(["--prompt-order", "epoch"])
    assert args.prompt_order == "epoch"
    rng = random.Random(3)
    steps = [agents.rank_batch(problems, rng, 4, d,
                               rollouts.epoch_order(args.prompt_order, args.seed, s))[0]
             for s in range(4)]
    for epoch in (steps[:2], steps[2:]):
        ids = [p.id for b in epoch for p in b]
        assert len(ids) == 8 == len(set(ids))
    args = agents.parse_args(["--prompt-order", "replacement"])
    assert rollouts.epoch_order(args.prompt_order, args.seed, 5) is None


def test_ranks_play_disjoint_slices_of_one_global_batch():
    import random

    problems = [make_problem(f"p{i}") for i in range(10)]
    import torch

    from infra.model import Dist

    def on(rank, world):
        return Dist(rank, world, rank, torch.device("cpu"))
    slices = [agents.rank_batch(problems, random.Random(3), 4, on(rank, 2)) for rank in (0, 1)]
    (b0, s0), (b1, s1) = slices
    (whole, _) = agents.rank_batch(problems, random.Random(3), 4, on(0, 1))
    assert (
        len(b0) == len(b1) == 2
        and b0 + b1 != []
        and sorted(map(id, b0 + b1)) == sorted(map(id, whole))
    )
    assert [p.id for p in b0] == [p.id for p in whole[0::2]] and [p.id for p in b1] == [
        p.id for p in whole[1::2]
    ]
    assert s0.random() != s1.random()  # each rank its own sampling seed


def test_per_role_resume_reproduces_an_uninterrupted_run(tmp_path):
    """2 steps + --resume for a 3rd == 3 steps straight (per-role: the coder's model rides in
    the checkpoint beside the tester's): same rewards and losses, same weights of both models.
    In this process (a world of 1, as a plain `python agents.py`): three subprocesses would
    spend most of their time importing torch."""
    import json
    import os

    import torch
    from safetensors.torch import load_file

    from infra.model import close_distributed

    a, b = tmp_path / "a", tmp_path / "b"
    common = TINY + ["--policy", "per-role", "--eval-n", "0", "--save-every", "1"]
    try:
        agents.train(agents.parse_args(common + ["--steps", "3", "--out", str(a)]))
        agents.train(agents.parse_args(common + ["--steps", "2", "--out", str(b)]))
        agents.train(agents.parse_args(common + ["--steps", "3", "--out", str(b), "--resume"]))
    finally:
        close_distributed(wait=False)
    ra, rb = ([r for r in _rows(o) if r["phase"] == "rl"] for o in (a, b))
    assert [r["step"] for r in rb] == [1, 2, 3] and len(ra) == 3  # continued, not restarted
    for key in (
        "reward_mean",
        "tester_reward_mean",
        "coder_reward_mean",
        "tester_loss",
        "coder_loss",
        "lr",
    ):
        assert [r.get(key) for r in ra] == pytest.approx([r.get(key) for r in rb], abs=1e-6), key
    assert json.loads((b / "summary.json").read_text())["rl_terms"] == json.loads(
        (a / "summary.json").read_text())["rl_terms"]
    wa = load_file(os.path.join(a, "step_3", "model.safetensors"))
    wb = load_file(os.path.join(b, "step_3", "model.safetensors"))
    assert all(torch.allclose(wa[k], wb[k], atol=1e-6) for k in wa)
    ca, cb = (torch.load(os.path.join(o, "step_3", "coder.pt"), map_location="cpu") for o in (a, b))
    assert all(torch.allclose(ca[k], cb[k], atol=1e-6) for k in ca)
    # The coder's checkpoint is its own model (the two models had different SFT data).
    assert not all(torch.allclose(ca["lm." + k], wa[k]) for k in wa)
    assert {r["roles"] for r in _rows(a) if r["phase"] == "sft"} == {"tester", "coder"}


def test_mini_batches_give_several_updates_per_episode_batch(tmp_path):
    """--mini-batches 2: each model takes two optimizer steps on its samples, the second
    against the old log-probs of the policy that played (ratio logged); --tis-cap is refused
    (agents.py keeps no sampler log-probs), not silently ignored."""
    from infra.model import close_distributed

    try:
        agents.train(agents.parse_args(TINY + ["--policy", "shared", "--eval-n", "0",
                                               "--steps", "1", "--mini-batches", "2",
                                               "--out", str(tmp_path)]))
    finally:
        close_distributed(wait=False)
    (row,) = [r for r in _rows(tmp_path) if r["phase"] == "rl"]
    assert row["tester/coder_updates"] == 2
    assert "time/score" in row   # the no-grad pass that gives the later update its old log-probs
    with pytest.raises(SystemExit):
        agents.parse_args(["--tis-cap", "2"])



class ScriptedEngine:
    """An engine whose generate answers each rendered prompt with policy(prompt) (n = 1)."""

    def __init__(self, policy):
        self.policy, self.calls = policy, 0

    def generate(self, prompts, n=1, **sampling):
        from infra.engines import Completion
        self.calls += 1
        return [[Completion(self.policy(p), [1], "stop")] for p in prompts]


def test_eval_rows_carry_the_evaluation_seconds_split_into_generation_and_sandbox(tmp_path):
    """evaluate_team's row holds time/eval and, within it, the engines' time/generate and the
    sandbox's time/reward (as the trainers' eval rows); evaluate_episodes adds each generate
    call to "generate" and each sandbox batch to "reward" (a clock that ticks once a read:
    one second a call)."""
    import itertools
    from types import SimpleNamespace

    import torch

    from infra.metrics import Timer
    from infra.model import Dist
    from infra.samples import SampleLog

    engine = ScriptedEngine(lambda prompt: GOOD_TESTS if "Test Input" in prompt else code(REF))
    m = SimpleNamespace(engine=engine, tokenizer=CharTokenizer())
    team = {"coder": m, "tester": m}
    args = agents.parse_args(["--eval-n", "2", "--max-turns", "2", "--out", str(tmp_path)])
    d = Dist(0, 1, 0, torch.device("cpu"))
    ticks = itertools.count()
    timer = Timer(clock=lambda: next(ticks))
    res = agents.evaluate_episodes(team, [make_problem()], d, random.Random(0),
                                   agents.game_config(args, k=1), n=args.eval_n,
                                   temperature=args.eval_temperature, top_p=args.top_p,
                                   budgets=agents.token_budgets(args),
                                   workers=args.sandbox_workers, timer=timer)
    assert res["pass@1_coder_alone"] == 1.0 and res["episodes"] == 2
    seconds = timer.pop()
    assert seconds["time/generate"] == engine.calls >= 2    # the coder alone, then the turns
    assert seconds["time/reward"] >= 2

    rows = []
    run = SimpleNamespace(args=args, eval_problems=[make_problem()], d=d, step=0, state={},
                          say=lambda text: None, log=rows.append,
                          sample_log=SampleLog(str(tmp_path), 0))
    assert agents.evaluate_team(team, run, "before_rl")["episodes"] == 2
    (row,) = rows
    assert row["phase"] == "eval" and {"time/eval", "time/generate", "time/reward"} <= set(row)
    # both phases run inside the evaluation, one after the other
    assert row["time/generate"] + row["time/reward"] <= row["time/eval"]
    assert "time/eval" not in run.state["before_rl"]     # summary.json keeps the results only


def test_overlap_reward_is_refused_not_ignored():
    """agents.py's turns wait for the sandbox before they generate again: --overlap-reward
    has nothing to overlap there, and says so."""
    with pytest.raises(SystemExit):
        agents.parse_args(["--overlap-reward"])


# --------------------------------------------------------------------------- the a1-cure variant


def inputs(*stdins):
    """An inputs-only tester reply (the a1-cure variant): input blocks without outputs."""
    return "\n".join(f"**Test Input:**\n```\n{i}\n```" for i in stdins)


A1 = dict(variant="a1-cure")
CATCHING_INPUTS = inputs("20 3", "1 1", "x")    # "x": the reference crashes on it


def test_a1_cure_fills_the_testers_inputs_from_the_reference_in_training():
    """Coder candidates SMALL_ONLY, SMALL_ONLY, REF: their majority on "20 3" would be 0, the
    reference says 23. Tester A: 20 3 (rejects both wrong programs, REF passes: 1), 1 1 (all
    pass: 0), x (the reference crashes: dropped) -> 1/2; tester B: 1 1 -> 0."""
    coder = fixed(code(SMALL_ONLY), code(SMALL_ONLY), code(REF))
    tester = fixed(CATCHING_INPUTS, inputs("1 1"))    # candidates A, B, A
    (ep,), samples, stats = run_episodes([make_problem()], coder, tester, max_turns=1, k=3,
                                         **A1)
    assert "without expected outputs" in tester.prompts[0][0]["content"]
    assert [t.reward for t in by_role(samples, "tester")] == [0.5, 0.0, 0.5]
    assert [t.terms["rejection"] for t in by_role(samples, "tester")] == [0.5, 0.0, 0.5]
    assert [c.reward for c in by_role(samples, "coder")] == pytest.approx([4 / 3, 4 / 3, 2.0])
    assert ep.tests == [{"input": "20 3\n", "output": "23"}, {"input": "1 1\n", "output": "2"}]
    assert ep.program == REF.strip() and ep.passed == [True, True] and ep.gt_pass_rate == 1.0
    assert (stats["inputs_written"], stats["inputs_dropped"], stats["tests_written"]) == (7, 2, 5)
    assert stats["selections_not_last"] == 0 and stats["tester_rejection_mean"] == pytest.approx(
        1 / 3)
    assert {s.group for s in samples} == {("add", 0, 0, "tester"), ("add", 0, 0, "coder")}


def test_a1_cure_evaluation_fills_from_the_coders_majority_and_selects_by_the_tests():
    """No reference at evaluation: the problem's reference (a - b) would say 17 for "20 3";
    the candidates SMALL_ONLY, REF, REF say 0, 23, 23 -> 23. The game continues candidate 0
    (SMALL_ONLY, no reward picks), and the tests select REF (2 passes against 1; candidates 1
    and 2 tie, the earlier wins): the episode scores REF's ground-truth pass rate."""
    problem = make_problem("addbad", reference=MINUS)
    coder = fixed(code(SMALL_ONLY), code(REF), code(REF))
    (ep,), samples, stats = run_episodes([problem], coder, fixed(CATCHING_INPUTS), max_turns=1,
                                         k=3, fill_from="majority", **A1)
    assert ep.tests == [{"input": "20 3\n", "output": "23"}, {"input": "1 1\n", "output": "2"}]
    assert ep.valid == [False, False]            # the reference disagrees: it filled nothing
    assert [c.outcome["chosen"] for c in by_role(samples, "coder")] == [True, False, False]
    assert ep.program == REF.strip() and ep.gt_pass_rate == 1.0 and stats["pass_at_1"] == 1.0
    assert stats["selections_not_last"] == 1 and stats["inputs_dropped"] == 3   # "x" x 3


def test_a1_cure_is_a_flag_and_the_faithful_game_stays_the_default():
    args = agents.parse_args(["--variant", "a1-cure"])
    assert agents.game_config(args).variant == "a1-cure"
    cfg = agents.eval_config(args)
    assert (cfg.fill_from, cfg.k) == ("majority", args.group_size)   # K candidates to vote
    default = agents.parse_args([])
    assert agents.game_config(default).variant == "none"
    assert agents.eval_config(default).k == 1
    with pytest.raises(SystemExit):
        agents.parse_args(["--variant", "a1-cure", "--role-rewards", "ours"])
    with pytest.raises(ValueError, match="variant a1-cure"):
        GameConfig(fill_from="majority")
