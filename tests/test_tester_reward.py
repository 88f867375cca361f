"""The tester's reward judges each test on its own, and validity comes from a plain run.

Scripted programs in the real sandbox, with small timeouts (0.3-1 s of CPU per looping test).
Timeouts are judged on CPU time, so the verdicts below do not depend on the machine's load; the
margins are a factor of 2 or more wherever a verdict depends on a program's speed.
"""
import pytest

import data
import sandbox
from agents import run_episodes

REF = "a, b = map(int, input().split())\nprint(a + b)\n"
# Right on every input but a == 0, where it loops forever.
LOOPS_ON_ZERO = "a, b = map(int, input().split())\nwhile a == 0:\n    pass\nprint(a + b)\n"
# The looping ground-truth test first: a runner that stops at the first timeout scores 0.
GT = [
    {"input": "0 5\n", "output": "5"},
    {"input": "1 2\n", "output": "3"},
    {"input": "10 4\n", "output": "14"},
]
CATCH = ("0 1", "1")  # LOOPS_ON_ZERO times out: a valid test that catches it
PASS = ("2 3", "5")  # LOOPS_ON_ZERO passes: a valid test that tells no candidate apart
TIMEOUT = 0.5


def make_problem(reference=REF, tests=GT, pid="add"):
    return data.Problem(id=pid, source="test", question=f"[{pid}] Print a + b.", starter_code="",
                        fn_name=None, tests=tests, solutions=[reference], difficulty="easy",
                        metadata={})


def blocks(*pairs):
    return "\n".join(
        f"**Test Input:**\n```\n{i}\n```\n**Test Output:**\n```\n{o}\n```" for i, o in pairs
    )


def fixed(*texts):
    """K candidates of one prompt answer texts[0], texts[1], ... (one state per call here)."""
    return lambda prompts: [texts[i % len(texts)] for i in range(len(prompts))]


def stdio(*pairs):
    return [{"input": i + "\n", "output": o} for i, o in pairs]


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
    _, samples, _ = run_episodes([make_problem()], fixed(f"```python\n{LOOPS_ON_ZERO}```"), tester,
                                 max_turns=1, k=2, turn_order="coder-first", timeout=TIMEOUT)
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
        [make_problem(), make_problem()], fixed(f"```python\n{LOOPS_ON_ZERO}```"), tester,
        max_turns=1, k=1, turn_order="tester-first", timeout=TIMEOUT, reward=reward)
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
                                 k=1, turn_order="tester-first", timeout=timeout)
    (t,) = (s for s in samples if s.role == "tester")
    return t.terms


def test_validity_comes_from_a_plain_run_not_the_traced_one():
    terms = _tester_terms(make_problem(SLOW_WHEN_TRACED), blocks(PASS), 0.3)
    assert terms["valid_share"] == 1.0 and terms["coverage"] == 0.0


# About 3x slower under the line tracer: a plain run at ~45% of the limit, a traced one past it.
LOOP_REF = "n = int(input())\ns = 0\nfor i in range(n):\n    s += i\nprint(s)\n"
LOOP_N = 3_000_000


def test_a_test_the_reference_passes_in_under_half_the_limit_is_valid_and_covered():
    test = {"input": f"{LOOP_N}\n", "output": str(LOOP_N * (LOOP_N - 1) // 2)}
    # Calibrate on this machine: the limit is set so that the plain run takes 45% of it.
    (plain,) = sandbox.run_batch([dict(code=LOOP_REF, tests=[test], timeout=30.0)], workers=1)
    assert plain.status == "pass"
    timeout = max(plain.tests[0].cpu_time, 0.05) / 0.45
    problem = make_problem(LOOP_REF, [test], pid="loop")
    terms = _tester_terms(problem, blocks((str(LOOP_N), test["output"])), timeout)
    assert terms["valid_share"] == 1.0
    # The traced run has a longer limit (agents.COVERAGE_TIMEOUT_FACTOR): the lines still count.
    assert terms["coverage"] == 1.0


# What the weights make of some test sets (default weights; .notes/agents.md, 2026-12-03).
SMALL_ONLY = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)\n"  # wrong if a >= 10
SMALL_GT = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"},
            {"input": "10 4\n", "output": "14"}]
CATCHES_SMALL_ONLY, PASSES_SMALL_ONLY = ("20 3", "23"), ("2 3", "5")
WRONG = [("1 1", "3"), ("2 2", "5"), ("3 3", "7"), ("4 4", "9")]  # the reference disagrees


def test_tester_first_turn_zero_has_no_catch_or_trivial_signal():
    """No program has been shown at turn 0 in tester-first order: a catching and a trivial set
    score the same (valid 1 + 0.5 coverage)."""
    tester = fixed(blocks(CATCHES_SMALL_ONLY), blocks(PASSES_SMALL_ONLY))
    _, samples, _ = run_episodes([make_problem(tests=SMALL_GT)],
                                 fixed(f"```python\n{SMALL_ONLY}```"), tester, max_turns=1, k=2,
                                 turn_order="tester-first")
    for s in (s for s in samples if s.role == "tester"):
        assert (s.terms["catch_share"], s.terms["trivial_share"], s.terms["local"]) == (0, 0, 1.5)


def test_a_catch_diluted_by_invalid_tests_against_a_lone_trivial_test():
    """l_T is a per-test mean: a catching test with m invalid ones earns 2/(m+1) + 0.5 coverage,
    a lone trivial one 0.5 + 0.5 coverage: ahead at m = 2, a tie at 3, behind from 4."""
    sets = [blocks(PASSES_SMALL_ONLY)] + [blocks(CATCHES_SMALL_ONLY, *WRONG[:m]) for m in (2, 3, 4)]
    _, samples, _ = run_episodes([make_problem(tests=SMALL_GT)],
                                 fixed(f"```python\n{SMALL_ONLY}```"), fixed(*sets), max_turns=1,
                                 k=len(sets), turn_order="coder-first")
    local = [s.terms["local"] for s in samples if s.role == "tester"]
    assert local == pytest.approx([1.0, 1 / 3 + 1 / 3 + 0.5, 0.25 + 0.25 + 0.5, 0.2 + 0.2 + 0.5])
