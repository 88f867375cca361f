"""Tests for tester_judge.py: the tester's tests parsed and formatted, the reward equations by
hand, and (scripted programs in the real sandbox) every test judged on its own, validity from a
plain run.

Timeouts are judged on CPU time, so the verdicts below do not depend on the machine's load; the
margins are a factor of 2 or more wherever a verdict depends on a program's speed (0.3-1 s of
CPU per looping test).
"""
import pytest
from game_fixtures import ABS, GOOD_TESTS, REF, SMALL_ONLY, asserts, blocks, make_problem

import data
import sandbox
import tester_judge
from agents import GameConfig, run_episodes
from tester_judge import parse_tests

# Right on every input but a == 0, where it loops forever.
LOOPS_ON_ZERO = "a, b = map(int, input().split())\nwhile a == 0:\n    pass\nprint(a + b)\n"
# The looping ground-truth test first: a runner that stops at the first timeout scores 0.
LOOP_GT = [
    {"input": "0 5\n", "output": "5"},
    {"input": "1 2\n", "output": "3"},
    {"input": "10 4\n", "output": "14"},
]
CATCH = ("0 1", "1")  # LOOPS_ON_ZERO times out: a valid test that catches it
PASS = ("2 3", "5")  # LOOPS_ON_ZERO passes: a valid test that tells no candidate apart
TIMEOUT = 0.5


def fixed(*texts):
    """K candidates of one prompt answer texts[0], texts[1], ... (one state per call here)."""
    return lambda prompts: [texts[i % len(texts)] for i in range(len(prompts))]


def stdio(*pairs):
    return [{"input": i + "\n", "output": o} for i, o in pairs]


# --------------------------------------------------------------------------- parsing and terms



def test_parse_tests_formats_and_counted_failures():
    tests, failed = parse_tests(GOOD_TESTS)
    assert (
        tests == [{"input": "1 1\n", "output": "2"}, {"input": "20 3\n", "output": "23"}]
        and failed == 0
    )
    # Language tags, inline fences and a colon outside the bold all parse.
    tests, failed = parse_tests("**Test Input:** ```text\n3 4\n```\nTest Output: ```7```")
    assert tests == [{"input": "3 4\n", "output": "7"}] and failed == 0
    # A block without its output is counted, the good block after it still parses.
    broken = "**Test Input:**\n```\n1 2\n```\nand then I stopped.\n" + blocks(("2 2", "4"))
    assert parse_tests(broken) == ([{"input": "2 2\n", "output": "4"}], 1)
    assert parse_tests("I think the code is fine.") == ([], 1)
    assert parse_tests(None) == ([], 1)
    assert (
        parse_tests(blocks(*[(f"{i} 0", str(i)) for i in range(5)]), max_tests=3)[0][2]["input"]
        == "2 0\n"
    )
    assert len(parse_tests(blocks(*[(f"{i} 0", str(i)) for i in range(5)]), max_tests=3)[0]) == 3


def test_parse_call_tests_literals_only_and_round_trip():
    text = asserts("assert add(1, 2) == 3", "assert Solution().add([1, 'a'], (2,)) == {'x': None}",
                   "assert add(x, 2) == 3", "assert add(1, b=2) == 3", "assert sub(1, 2) == -1",
                   "assert add(1, 2) != 3", "assert add(1, 2 == 3")
    tests, failed = parse_tests(text, max_tests=8, fn_name="add")
    assert tests == [
        {"input": [1, 2], "output": 3},
        {"input": [[1, "a"], (2,)], "output": {"x": None}},
    ]
    assert failed == 5  # a name, a keyword, another function, != and a syntax error
    assert parse_tests("no asserts here", fn_name="add") == ([], 1)
    assert (
        len(parse_tests(asserts(*[f"assert add({i}, 0) == {i}" for i in range(5)]), 3, "add")[0])
        == 3
    )
    for method in (False, True):
        text = tester_judge.format_tests(tests, "add", method)
        assert parse_tests(text, fn_name="add") == (tests, 0)


def test_format_tests_round_trips():
    tests, _ = parse_tests(GOOD_TESTS)
    assert parse_tests(tester_judge.format_tests(tests)) == (tests, 0)


def test_reward_equations_by_hand():
    valid, dup = [True, True, False, True], [False, False, False, True]
    shown_passed = [True, False, False, False]
    # caught: valid, not a duplicate, failed by the shown program, which is wrong on the GT
    assert tester_judge.caught_flags(valid, dup, shown_passed, shown_wrong=True) == [
        False,
        True,
        False,
        False,
    ]
    assert tester_judge.caught_flags(valid, dup, shown_passed, shown_wrong=False) == [False] * 4
    # trivial: duplicates, or valid tests that every candidate passes while one is wrong
    cands = [[True, False, True, True], [True, True, True, False]]
    trivial_flags = tester_judge.trivial_flags
    assert trivial_flags(valid, dup, cands, any_wrong=True) == [True, False, False, True]
    assert trivial_flags(valid, dup, cands, any_wrong=False) == [False, False, False, True]
    assert trivial_flags(valid, dup, [], any_wrong=True) == [False, False, False, True]
    assert tester_judge.duplicates(
        [{"input": "1  2\n"}, {"input": "1 2"}, {"input": [1]}, {"input": [1]}]
    ) == [False, True, False, True]
    # l_T = 3/4 + 1 * 1/4 + 0.5 * 0.75 - 0.5 * 2/4 = 1.125
    terms = tester_judge.tester_local(
        valid, [False, True, False, False], [True, False, False, True], 0.75
    )
    assert terms == pytest.approx({"local": 1.125, "valid_share": 0.75, "catch_share": 0.25,
                                   "trivial_share": 0.5, "coverage": 0.75})
    assert tester_judge.tester_local([], [], [], 0.0)["local"] == 0.0
    assert tester_judge.coder_local([True, False, False, True], [True, True, False, False]) == 0.5
    assert tester_judge.coder_local([True], [False]) == 0.0  # no valid test: no signal
    assert tester_judge.final_reward(0.5, 0.2, alpha=0.7) == pytest.approx(0.55)


def test_coverage_is_the_reference_line_share_under_valid_tests():
    from sandbox import executable_lines, run_tests
    assert executable_lines(ABS) == {1, 2, 3, 5}       # the coverage share's denominator
    res = run_tests(
        ABS, [{"input": "5\n", "output": "5"}, {"input": "-3\n", "output": "3"}], coverage=True
    )
    assert tester_judge.coverage_share(res, [True, False], 4) == 0.75  # lines 1, 2, 5
    assert tester_judge.coverage_share(res, [True, True], 4) == 1.0
    assert (
        tester_judge.coverage_share(res, [False, False], 4) == 0.0
        and tester_judge.coverage_share(None, [True], 4) == 0.0
    )


# ------------------------------------------------------------- per-test verdicts in the sandbox


def test_sandbox_runs_every_test_after_a_timeout_when_asked():
    tests = stdio(CATCH, PASS)
    job = dict(code=LOOPS_ON_ZERO, tests=tests, timeout=TIMEOUT)
    every, default = sandbox.run_batch([dict(job, stop_after_timeout=False), job], workers=1)
    assert [t.status for t in every.tests] == ["timeout", "pass"]
    assert every.passed == 1 and every.status == "timeout"
    # The default still stops: one timeout costs one test, the rest count as timeouts.
    assert [t.status for t in default.tests] == ["timeout", "timeout"]
    assert "not run" in default.tests[1].stderr


def test_tester_terms_do_not_depend_on_the_order_of_the_tests():
    """The shown program loops on one test and passes the other: in both orders one test
    catches it and the other is trivial (before, the test after the timeout was not run and
    earned the catch bonus: 2.85 in one order, 2.1 in the other)."""
    tester = fixed(blocks(CATCH, PASS), blocks(PASS, CATCH))
    _, samples, _ = run_episodes([make_problem(tests=LOOP_GT)],
                                 fixed(f"```python\n{LOOPS_ON_ZERO}```"), tester,
                                 max_turns=1, k=2, turn_order="coder-first", timeout=TIMEOUT,
                                 role_rewards="ours")
    (coder,) = {s.terms["global"] for s in samples if s.role == "coder"}
    first, second = (s.terms for s in samples if s.role == "tester")
    # valid 1, caught 1/2, trivial 1/2, coverage 1 (REF's 2 lines): l = 1 + 0.5 + 0.5 - 0.25
    expected = {"valid_share": 1.0, "catch_share": 0.5, "trivial_share": 0.5, "coverage": 1.0,
                "local": 1.75}
    assert {k: first[k] for k in expected} == pytest.approx(expected)
    assert {k: second[k] for k in expected} == pytest.approx(expected)
    assert coder == pytest.approx(2 / 3)  # every ground-truth test judged: 2 of 3 pass
    assert first["reward"] == second["reward"] == pytest.approx(0.7 * 2 / 3 + 1.75)


@pytest.mark.parametrize("reward", ["fraction", "binary"])
def test_coder_terms_do_not_depend_on_the_order_of_the_tests(reward):
    """l_C (pass rate on the tester's valid tests) and the mismatches shown judge every test;
    g: the fraction judges every ground-truth test, binary is 0 either way. Two episodes of one
    problem, tester first: episode 0 gets the tests in one order, episode 1 in the other."""
    tester = fixed(blocks(CATCH, PASS), blocks(PASS, CATCH))
    episodes, samples, _ = run_episodes(
        [make_problem(tests=LOOP_GT), make_problem(tests=LOOP_GT)],
        fixed(f"```python\n{LOOPS_ON_ZERO}```"), tester,
        max_turns=1, k=1, turn_order="tester-first", timeout=TIMEOUT, reward=reward,
        role_rewards="ours")
    first, second = (s.terms for s in samples if s.role == "coder")
    g = 2 / 3 if reward == "fraction" else 0.0
    assert first == second == pytest.approx({"global": g, "local": 0.5, "reward": 0.7 * g + 0.5})
    shown = [[(m["input"], m["actual"]) for m in e.mismatches] for e in episodes]
    assert shown[0] == shown[1] and len(shown[0]) == 1 and shown[0][0][0] == "0 1\n"
    assert "not run" not in shown[0][0][1]


# A reference that only the coverage tracer makes slow: a plain run is instant, a traced one
# never ends. Its tests are valid all the same; they just add no coverage.
SLOW_WHEN_TRACED = (
    "import sys\nif sys.gettrace() is not None:\n    while True:\n        pass\n" + REF
)


def _tester_terms(problem, tests_text, timeout):
    _, samples, _ = run_episodes([problem], fixed("no code"), fixed(tests_text), max_turns=1,
                                 k=1, turn_order="tester-first", timeout=timeout,
                                 role_rewards="ours")
    (t,) = (s for s in samples if s.role == "tester")
    return t.terms


def test_validity_comes_from_a_plain_run_not_the_traced_one():
    terms = _tester_terms(make_problem(reference=SLOW_WHEN_TRACED, tests=LOOP_GT), blocks(PASS),
                          0.3)
    assert terms["valid_share"] == 1.0 and terms["coverage"] == 0.0


def test_the_reference_runs_once_a_test_set_under_the_normal_limit():
    """One coverage job a test set: its verdicts (validity) from the sandbox's plain runs under
    the game's limit, its lines (coverage) from the sandbox's own traced runs; no job of the
    reference gets a longer limit, so no verdict is read under one."""
    problem = make_problem()
    tests = stdio(PASS, ("1 1", "3"))
    jobs = tester_judge.tester_jobs(problem, None, [], [tests], GameConfig(role_rewards="ours"))
    assert [(code, cov) for code, _, _, cov in jobs if code is not None] == [(REF, True)]
    sent = []

    def recording(batch):
        sent.extend(batch)
        return sandbox.run_batch(batch, workers=1)
    results = tester_judge.run_jobs(jobs, recording, TIMEOUT, 512)
    assert [(j["timeout"], j["coverage"]) for j in sent] == [(TIMEOUT, True)]
    ref = tester_judge.result_of(results, REF, tests, problem, coverage=True)
    assert tester_judge.validity(ref, 2) == [True, False]
    assert tester_judge.coverage_share(ref, [True, False], 2) == 1.0


# About 3x slower under the line tracer: a plain run at ~45% of the limit, a traced one past it.
LOOP_REF = "n = int(input())\ns = 0\nfor i in range(n):\n    s += i\nprint(s)\n"
LOOP_N = 3_000_000


def test_a_test_the_reference_passes_in_under_half_the_limit_is_valid_and_covered():
    test = {"input": f"{LOOP_N}\n", "output": str(LOOP_N * (LOOP_N - 1) // 2)}
    # Calibrate on this machine: the limit is set so that the plain run takes 45% of it.
    (plain,) = sandbox.run_batch([dict(code=LOOP_REF, tests=[test], timeout=30.0)], workers=1)
    assert plain.status == "pass"
    timeout = max(plain.tests[0].cpu_time, 0.05) / 0.45
    problem = make_problem("loop", LOOP_REF, tests=[test])
    terms = _tester_terms(problem, blocks((str(LOOP_N), test["output"])), timeout)
    assert terms["valid_share"] == 1.0
    # The sandbox gives the traced run more time than the limit: the lines count.
    assert terms["coverage"] == 1.0


# What the weights make of some test sets (default weights; .notes/agents.md, 2026-12-03).
# SMALL_ONLY is wrong when a >= 10: on the last test of make_problem's ground truth.
CATCHES_SMALL_ONLY, PASSES_SMALL_ONLY = ("20 3", "23"), ("2 3", "5")
WRONG = [("1 1", "3"), ("2 2", "5"), ("3 3", "7"), ("4 4", "9")]  # the reference disagrees


def test_tester_first_turn_zero_has_no_catch_or_trivial_signal():
    """No program has been shown at turn 0 in tester-first order: a catching and a trivial set
    score the same (valid 1 + 0.5 coverage)."""
    tester = fixed(blocks(CATCHES_SMALL_ONLY), blocks(PASSES_SMALL_ONLY))
    _, samples, _ = run_episodes([make_problem()],
                                 fixed(f"```python\n{SMALL_ONLY}```"), tester, max_turns=1, k=2,
                                 turn_order="tester-first", role_rewards="ours")
    for s in (s for s in samples if s.role == "tester"):
        assert (s.terms["catch_share"], s.terms["trivial_share"], s.terms["local"]) == (0, 0, 1.5)


def test_a_catch_diluted_by_invalid_tests_against_a_lone_trivial_test():
    """l_T is a per-test mean: a catching test with m invalid ones earns 2/(m+1) + 0.5 coverage,
    a lone trivial one 0.5 + 0.5 coverage: ahead at m = 2, a tie at 3, behind from 4."""
    sets = [blocks(PASSES_SMALL_ONLY)] + [blocks(CATCHES_SMALL_ONLY, *WRONG[:m]) for m in (2, 3, 4)]
    _, samples, _ = run_episodes([make_problem()],
                                 fixed(f"```python\n{SMALL_ONLY}```"), fixed(*sets), max_turns=1,
                                 k=len(sets), turn_order="coder-first", role_rewards="ours")
    local = [s.terms["local"] for s in samples if s.role == "tester"]
    assert local == pytest.approx([1.0, 1 / 3 + 1 / 3 + 0.5, 0.25 + 0.25 + 0.5, 0.2 + 0.2 + 0.5])


def _statuses(result):
    return result.status, result.passed, result.total, [t.status for t in result.tests]


def test_one_programs_test_sets_run_as_one_job_and_each_gets_its_own_verdicts():
    """Test sets of one program (two sharing a test) and the reference: one sandbox job per
    program with the distinct tests, and each set's Result is what its own job gives. A job
    that may stop at a timeout (every_test False) and a program that does not compile keep
    their own results."""
    problem = make_problem()
    a = stdio(("1 1", "2"), ("20 3", "23"))
    b = stdio(("20 3", "23"), ("2 2", "4"), ("1 1", "3"))
    broken = "print(\n"
    jobs = [(SMALL_ONLY, a, problem, False), (SMALL_ONLY, b, problem, False),
            (REF, a, problem, True), (REF, b, problem, True),
            (broken, a, problem, False), (broken, b, problem, False),
            (SMALL_ONLY, problem.tests, problem, False, False)]
    sent = []

    def recording(batch):
        sent.extend(batch)
        return sandbox.run_batch(batch, workers=1)
    results = tester_judge.run_jobs(jobs, recording, TIMEOUT, 512)
    assert sorted((j["code"], len(j["tests"]), j["coverage"]) for j in sent) == sorted(
        [(SMALL_ONLY, 4, False), (REF, 4, True), (broken, 4, False), (SMALL_ONLY, 3, False)])
    for code, tests, _, cov, *every in jobs:
        alone = sandbox.run_batch([data.sandbox_job(problem, code, tests, timeout=TIMEOUT,
                                                    memory_mb=512, coverage=cov,
                                                    stop_after_timeout=not (every or [True])[0])],
                                  workers=1)[0]
        part = tester_judge.result_of(results, code, tests, problem, cov, *every)
        assert _statuses(part) == _statuses(alone)
        assert part.executed_lines == alone.executed_lines
    wrong_on_b = tester_judge.result_of(results, SMALL_ONLY, b, problem)
    assert _statuses(wrong_on_b) == ("wrong_answer", 1, 3,
                                     ["wrong_answer", "pass", "wrong_answer"])


def test_the_reference_is_traced_only_when_the_reward_reads_its_coverage():
    """The public code's rewards read no coverage: the reference runs untraced and the term is
    not measured (absent from the metrics, not a 0); ours with a coverage weight traces it."""
    problem = make_problem()
    tests = stdio(PASS, ("1 1", "2"))
    for cfg, traced in ((GameConfig(), False), (GameConfig(role_rewards="ours"), True),
                        (GameConfig(role_rewards="ours", coverage_weight=0.0), False)):
        jobs = tester_judge.tester_jobs(problem, None, [], [tests], cfg)
        assert [cov for code, _, _, cov in jobs if code == REF] == [traced]
    for rewards, measured in (("pettingllms", False), ("ours", True)):
        _, samples, stats = run_episodes([problem], fixed("no code"), fixed(blocks(PASS)),
                                         max_turns=1, k=1, turn_order="coder-first",
                                         role_rewards=rewards)
        (t,) = (s for s in samples if s.role == "tester")
        assert (t.terms["coverage"] is not None) == measured
        assert ("tester_coverage_sum" in stats) == measured
        assert t.terms["valid_share"] == 1.0


# --------------------------------------------------------------------------- the a1-cure variant


def test_majority_output_takes_the_most_common_and_breaks_ties_by_the_earliest_candidate():
    assert tester_judge.majority_output(["3", "4", "3", None]) == "3"
    assert tester_judge.majority_output(["4", "3", "3", "4"]) == "4"    # 2-2: candidate 0's
    assert tester_judge.majority_output([None, "5", "6"]) == "5"        # 1-1: the earlier
    assert tester_judge.majority_output([None, None]) is None
    assert tester_judge.majority_output([]) is None


def test_select_by_tests_takes_the_most_passes_and_the_earliest_of_a_tie():
    assert tester_judge.select_by_tests([1, 3, 2]) == 1
    assert tester_judge.select_by_tests([0, 2, 2, 1]) == 1
    assert tester_judge.select_by_tests([0, 0]) == 0


def test_rejection_reward_pays_the_share_of_wrong_programs_a_test_rejects():
    right = [True, True, False, False, False, False]      # 2 right programs, 4 wrong ones
    # test 0: rejects 2 of the 4 wrong programs, both right ones pass -> 0.5
    # test 1: a right program fails it -> 0, however many wrong ones it rejects
    failed = [[False, True], [False, False], [True, True], [True, True], [False, True],
              [False, True]]
    assert tester_judge.rejection_reward([[f[0]] for f in failed], right, 1) == 0.5
    assert tester_judge.rejection_reward([[f[1]] for f in failed], right, 1) == 0.0
    assert tester_judge.rejection_reward(failed, right, 2) == 0.25     # the mean over tests
    # no wrong program: nothing to reject; no tests: 0
    assert tester_judge.rejection_reward([[True], [False]], [False, True], 1) == 1.0
    assert tester_judge.rejection_reward([[False]], [True], 1) == 0.0
    assert tester_judge.rejection_reward([], [], 0) == 0.0


def test_an_inputs_only_reply_parses_and_formats_back():
    text = ("**Test Input:**\n```\n1 2\n```\n**Test Input:**\n```\n3 4\n```\n"
            "**Test Output:**\n```\n7\n```\n**Test Input:** nothing here")
    tests, failed = parse_tests(text, inputs_only=True)
    assert tests == [{"input": "1 2\n", "output": None}, {"input": "3 4\n", "output": None}]
    assert failed == 1                                     # the block without a fence
    assert parse_tests(tester_judge.format_tests(tests, inputs_only=True), inputs_only=True) == (
        tests, 0)
    calls = "```python\nadd(1, 2)\nSolution().add([3], 'x')\nadd(y)\nassert add(1, 1) == 2\n```"
    tests, failed = parse_tests(calls, fn_name="add", inputs_only=True)
    assert tests == [{"input": [1, 2], "output": None}, {"input": [[3], "x"], "output": None}]
    assert failed == 1                                     # add(y): not a literal
    assert tester_judge.format_tests(tests, "add", inputs_only=True) == (
        "```python\nadd(1, 2)\nadd([3], 'x')\n```")
    assert parse_tests(asserts("add(1, 2)"), fn_name="add") == ([], 1)   # the faithful format


def test_filled_tests_take_the_majority_value_and_drop_inputs_without_one():
    """Call-based: the returned values' majority per input; a crash, or an output the sandbox
    may have cut, gives no output; an input with none is dropped."""
    problem = make_problem("addf", fn_name="add")
    inputs = [{"input": [1, 2], "output": None}, {"input": [0, 0], "output": None}]
    probes = tester_judge.probe_tests(inputs, "add")
    long = "[" + "1, " * sandbox.SHOWN_OUTPUT + "1]"

    def ran(*tests):
        return sandbox.Result("wrong_answer", 0, 2, [sandbox.TestResult(s, 0.0, o)
                                                     for s, o in tests], set(), 0.0)
    runs = {"A": ran(("wrong_answer", "[3, 1]"), ("runtime_error", "")),
            "B": ran(("wrong_answer", "3"), ("wrong_answer", long)),
            "C": ran(("pass", "[3, 1]"), ("timeout", ""))}
    results = {tester_judge.job_key(c, probes, problem): r for c, r in runs.items()}
    tests, dropped = tester_judge.filled_tests(problem, ["B", "A", "C"], inputs, results)
    assert tests == [{"input": [1, 2], "output": [3, 1]}] and dropped == 1
