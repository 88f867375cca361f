"""Tests for agents.py with scripted policies: deterministic callables that return fixed texts.

The programs run in the real sandbox (tiny programs, a few dozen jobs in all).
"""
import pytest

import agents
import data
from agents import parse_tests, run_episodes

REF = "a, b = map(int, input().split())\nprint(a + b)\n"
MINUS = "a, b = map(int, input().split())\nprint(a - b)\n"
# Right on small inputs only: passes 2 of the 3 ground-truth tests below.
SMALL_ONLY = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)\n"
GT = [{"input": "1 2\n", "output": "3"}, {"input": "5 7\n", "output": "12"}, {"input": "10 4\n", "output": "14"}]


def make_problem(pid="add", reference=REF, fn_name=None):
    return data.Problem(
        id=pid, source="test", question=f"[{pid}] Read two integers a and b and print a + b.",
        starter_code="", fn_name=fn_name, tests=GT, solutions=[reference], difficulty="easy", metadata={},
    )


def code(program):
    return f"Here is my program:\n```python\n{program}```\n"


def blocks(*pairs):
    return "\n".join(f"**Test Input:**\n```\n{i}\n```\n**Test Output:**\n```\n{o}\n```" for i, o in pairs)


GOOD_TESTS = blocks(("1 1", "2"), ("20 3", "23"))
ONE_WRONG = blocks(("1 1", "2"), ("2 2", "5"))  # 2 + 2 is not 5: the reference disagrees


class Scripted:
    """A generate function: policy(messages, candidate_index) -> text; records every prompt."""

    def __init__(self, policy):
        self.policy, self.prompts, self.calls = policy, [], 0

    def __call__(self, prompts):
        self.calls += 1
        self.prompts += prompts
        k = 1
        while k < len(prompts) and prompts[k] is prompts[0]:
            k += 1  # prompts arrive as each state's prompt repeated k times
        return [self.policy(p, i % k) for i, p in enumerate(prompts)]


def fixed(*texts):
    """Candidate i always answers texts[i] (cycling when there are fewer texts than candidates)."""
    return Scripted(lambda messages, i: texts[i % len(texts)])


def by_role(samples, role, turn=None):
    return [s for s in samples if s.role == role and (turn is None or s.group[2] == turn)]


# --------------------------------------------------------------------------- parsing


def test_parse_tests_formats_and_counted_failures():
    tests, failed = parse_tests(GOOD_TESTS)
    assert tests == [{"input": "1 1\n", "output": "2"}, {"input": "20 3\n", "output": "23"}] and failed == 0
    # Language tags, inline fences and a colon outside the bold all parse.
    tests, failed = parse_tests("**Test Input:** ```text\n3 4\n```\nTest Output: ```7```")
    assert tests == [{"input": "3 4\n", "output": "7"}] and failed == 0
    # A block without its output is counted, the good block after it still parses.
    broken = "**Test Input:**\n```\n1 2\n```\nand then I stopped.\n" + blocks(("2 2", "4"))
    assert parse_tests(broken) == ([{"input": "2 2\n", "output": "4"}], 1)
    assert parse_tests("I think the code is fine.") == ([], 1)
    assert parse_tests(None) == ([], 1)
    assert parse_tests(blocks(*[(f"{i} 0", str(i)) for i in range(5)]), max_tests=3)[0][2]["input"] == "2 0\n"
    assert len(parse_tests(blocks(*[(f"{i} 0", str(i)) for i in range(5)]), max_tests=3)[0]) == 3


def test_format_tests_round_trips():
    tests, _ = parse_tests(GOOD_TESTS)
    assert parse_tests(agents.format_tests(tests)) == (tests, 0)


# --------------------------------------------------------------------------- reward equations


def test_reward_equations():
    passed, valid = [True, False, False, True], [True, True, False, False]
    assert agents.coder_local(passed, valid) == 0.5  # 1 of the 2 valid tests
    assert agents.coder_local([True], [False]) == 0.0  # no valid test: no signal
    # valid share 2/4; caught = valid and failed = test 1 -> 1/4; bonus only when g < 1
    assert agents.tester_local(passed, valid, 0.5, catch_bonus=0.4) == pytest.approx((0.5 + 0.4 * 0.25, 0.5, 0.25))
    assert agents.tester_local(passed, valid, 1.0, catch_bonus=0.4) == pytest.approx((0.5, 0.5, 0.0))
    assert agents.tester_local([], [], 0.0) == (0.0, 0.0, 0.0)
    assert agents.final_reward(0.5, 0.2, alpha=0.7) == pytest.approx(0.55)


# --------------------------------------------------------------------------- the loop


def test_group_keys_hold_problem_turn_role_and_never_merge_problems():
    problems = [make_problem("p0"), make_problem("p1"), make_problem("p2")]
    coder = fixed(code(MINUS), code(SMALL_ONLY))  # never agrees with GOOD_TESTS (20 3 -> 23)
    episodes, samples, stats = run_episodes(problems, coder, fixed(GOOD_TESTS, ONE_WRONG), max_turns=2, k=2)
    keys = {s.group for s in samples}
    assert keys == {(f"p{p}", p, t, r) for p in range(3) for t in range(2) for r in ("tester", "coder")}
    ids = agents.group_ids(samples)
    assert len(set(ids)) == 12
    for gid in set(ids):
        members = [s for s, g in zip(samples, ids) if g == gid]
        assert len(members) == 2  # K candidates per group
        assert len({s.group[0] for s in members}) == 1  # one problem per group (the index defect)
        assert members[0].messages == members[1].messages  # every candidate saw the same state
        assert f"[{members[0].group[0]}]" in members[0].messages[1]["content"]
    assert stats["sandbox_calls"] == 2 and coder.calls == 2


def test_repeated_problem_gets_separate_groups():
    problems = [make_problem("p0"), make_problem("p0")]
    _, samples, _ = run_episodes(problems, fixed(code(MINUS)), fixed(GOOD_TESTS), max_turns=1, k=1)
    assert {s.group for s in samples} == {("p0", e, 0, r) for e in (0, 1) for r in ("tester", "coder")}


def test_wrong_tester_test_lowers_tester_reward_not_coder_global():
    rewards = {}
    for name, tester in (("good", GOOD_TESTS), ("wrong", ONE_WRONG)):
        _, samples, _ = run_episodes([make_problem()], fixed(code(SMALL_ONLY)), fixed(tester), max_turns=1, k=1)
        rewards[name] = {s.role: s.terms for s in samples}
    assert rewards["good"]["tester"]["valid_share"] == 1.0 and rewards["wrong"]["tester"]["valid_share"] == 0.5
    assert rewards["wrong"]["tester"]["reward"] < rewards["good"]["tester"]["reward"]
    assert rewards["good"]["coder"]["global"] == rewards["wrong"]["coder"]["global"] == pytest.approx(2 / 3)


def test_tester_candidates_with_different_tests_get_different_rewards():
    """The shared-copy defect: every tester candidate is scored in its own branch."""
    _, samples, stats = run_episodes([make_problem()], fixed(code(REF)), fixed(GOOD_TESTS, ONE_WRONG), max_turns=1, k=2)
    good, wrong = by_role(samples, "tester")
    assert good.terms["valid_share"] == 1.0 and wrong.terms["valid_share"] == 0.5
    assert good.reward == pytest.approx(0.7 * 1.0 + 1.0) and wrong.reward == pytest.approx(0.7 * 1.0 + 0.5)
    assert stats["tester_valid_share_mean"] == pytest.approx(0.75)


def test_later_rewards_read_the_chosen_branch_not_a_stale_copy():
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
    # The mismatch shown at turn 1 is the chosen program's: 2 2 -> expected 5, actual 4.
    assert "```\n5\n```\nProgram's actual output:\n```\n4" in turn1[0].messages[1]["content"]


def test_tester_reward_uses_the_reference_solution():
    """Coder and tester agree on a - b; only the reference (a + b) says the tests are wrong."""
    minus_tests = blocks(("5 3", "2"), ("9 1", "8"))
    rewards = {}
    for name, reference in (("plus", REF), ("minus", MINUS)):
        episodes, samples, _ = run_episodes([make_problem(reference=reference)], fixed(code(MINUS)), fixed(minus_tests), max_turns=1, k=1)
        assert episodes[0].agree  # the program passes the tester's tests either way
        rewards[name] = {s.role: s.terms for s in samples}
    assert rewards["plus"]["tester"]["valid_share"] == 0.0 and rewards["minus"]["tester"]["valid_share"] == 1.0
    assert rewards["plus"]["coder"]["local"] == 0.0  # agreeing with wrong tests earns the coder nothing


def test_catch_bonus_rewards_tests_that_fail_a_wrong_program():
    _, samples, _ = run_episodes([make_problem()], fixed(code(SMALL_ONLY)), fixed(GOOD_TESTS), max_turns=1, k=1, catch_bonus=0.5)
    (tester,) = by_role(samples, "tester")
    # "20 3" is valid and SMALL_ONLY prints 0: 1 caught test of 2.
    assert tester.terms["catch_share"] == 0.5 and tester.terms["local"] == pytest.approx(1.0 + 0.5 * 0.5)
    _, samples, _ = run_episodes([make_problem()], fixed(code(REF)), fixed(GOOD_TESTS), max_turns=1, k=1, catch_bonus=0.5)
    assert by_role(samples, "tester")[0].terms["catch_share"] == 0.0


def test_episode_that_agrees_stops_generating():
    calls = []

    def counting_run_batch(jobs):
        from sandbox import run_batch
        calls.append(len(jobs))
        return run_batch(jobs)

    coder = Scripted(lambda m, i: code(REF) if "[easy]" in m[1]["content"] else code(MINUS))
    tester = Scripted(lambda m, i: GOOD_TESTS)
    problems = [make_problem("easy"), make_problem("hard")]
    episodes, samples, stats = run_episodes(problems, coder, tester, max_turns=3, k=2, run_batch=counting_run_batch)
    for agent in (coder, tester):
        assert sum("[easy]" in p[1]["content"] for p in agent.prompts) == 2  # turn 0 only, K = 2
        assert sum("[hard]" in p[1]["content"] for p in agent.prompts) == 6  # 3 turns x K
        assert agent.calls == 3
    assert len(calls) == 3 and stats["sandbox_calls"] == 3  # one run_batch per turn
    assert [(e.done, e.turn) for e in episodes] == [(True, 1), (False, 3)]
    assert len(samples) == 2 * 2 + 3 * 2 * 2
    assert stats["agree_rate"] == 0.5 and stats["pass_at_1"] == 0.5


def test_unparsable_outputs_are_counted_not_fatal():
    coder = fixed("I would use a loop.", code(REF))
    tester = fixed("The program looks fine to me.", GOOD_TESTS + "\n**Test Input:**\n```\n1 2\n```")
    episodes, samples, stats = run_episodes([make_problem()], coder, tester, max_turns=1, k=2)
    assert stats["coder_replies_without_code"] == 1
    assert stats["tester_replies_without_tests"] == 1 and stats["tester_blocks_failed"] == 2
    no_tests, good = by_role(samples, "tester")
    assert no_tests.terms["local"] == 0.0 and no_tests.terms["n_tests"] == 0 and good.terms["n_tests"] == 2
    no_code, ref = by_role(samples, "coder")
    assert no_code.reward == 0.0 and ref.reward == pytest.approx(1.7)
    assert episodes[0].agree


def test_no_tests_never_counts_as_agreement():
    episodes, _, _ = run_episodes([make_problem()], fixed(code(REF)), fixed("no tests here"), max_turns=2, k=1)
    assert not episodes[0].agree and episodes[0].turn == 2
    assert "no parsable tests" in agents.coder_messages(episodes[0])[1]["content"]


def test_call_based_problems_are_skipped():
    problems = [make_problem("fn", fn_name="add"), make_problem("io")]
    episodes, samples, stats = run_episodes(problems, fixed(code(REF)), fixed(GOOD_TESTS), max_turns=1, k=1)
    assert [e.problem.id for e in episodes] == ["io"] and stats["skipped_call_based"] == 1
    assert {s.group[0] for s in samples} == {"io"}


def test_generate_may_return_completions_and_must_return_one_per_prompt():
    from types import SimpleNamespace
    coder = Scripted(lambda m, i: SimpleNamespace(text=code(REF), token_ids=[1, 2, 3]))
    _, samples, _ = run_episodes([make_problem()], coder, fixed(GOOD_TESTS), max_turns=1, k=2)
    c0, _ = by_role(samples, "coder")
    assert c0.output.token_ids == [1, 2, 3] and c0.response == code(REF) and c0.terms["global"] == 1.0
    with pytest.raises(ValueError, match="one text per prompt"):
        run_episodes([make_problem()], fixed(code(REF)), lambda prompts: ["x"], max_turns=1, k=2)


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
    both = agents.warm_start_examples(tok, [problem], ["tester", "coder"], max_tests=2)
    assert len(coder_only) == 2 and len(both) == 3  # one per reference program + one tester example
    answers = {tok.decode(s.response_ids): tok.decode(s.prompt_ids) for s in both}
    assert all(s.response_ids[-1] == tok.eos_token_id for s in both)
    (tester_answer,) = [a for a, prompt in answers.items() if "You are the tester" in prompt]
    assert parse_tests(tester_answer) == ([{"input": t["input"], "output": t["output"].strip()} for t in GT[:2]], 0)
    coder_programs = {data.extract_code(a) for a, prompt in answers.items() if "You are the coder" in prompt}
    assert coder_programs == {s.strip() for s in problem.solutions}


def test_tokenizer_texts_hold_both_roles_and_turn_one_prompts():
    texts = agents.tokenizer_texts([make_problem(), make_problem("fn", fn_name="add")])
    assert sum("You are the tester" in t for t in texts) == 2 and sum("You are the coder" in t for t in texts) == 2
    assert sum("Tester's expected output" in t for t in texts) == 2  # the turn-1 round reports
    assert any(t.startswith("**Test Input:**") for t in texts) and not any("[fn]" in t for t in texts)


def test_torchrun_two_ranks_end_to_end(tmp_path):
    """Two CPU ranks, a tiny config: summary.json has before/after pass@1 over all ranks' episodes."""
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = tmp_path / "run"
    cmd = [torchrun, "--standalone", "--nproc_per_node", "2", os.path.join(root, "agents.py"), "--model", "tiny",
           "--max-problems", "4", "--sft-steps", "1", "--sft-batch", "4", "--steps", "1", "--prompts-per-step", "2",
           "--max-turns", "2", "--max-new-tokens", "8", "--tester-max-new-tokens", "8", "--eval-n", "1",
           "--out", str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    for when in ("before", "after"):
        assert set(summary[when]) >= {"pass@1_coder_alone", "pass@1_after_turns", "agree_rate"}
        assert summary[when]["episodes"] == 4  # 4 stdio problems x eval_n 1, split over the 2 ranks
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rl = [r for r in rows if r["phase"] == "rl"]
    assert len(rl) == 1 and rl[0]["episodes"] == 1  # rank 0's share of the 2 prompts


def test_program_that_does_not_compile_never_agrees():
    """The sandbox gives no per-test results after a compile error: every test must count as failed."""
    episodes, samples, _ = run_episodes([make_problem()], fixed(code("print(")), fixed(GOOD_TESTS), max_turns=1, k=1)
    (ep,) = episodes
    assert not ep.agree and ep.passed == [False, False] and len(ep.mismatches) == 2
    assert "compile_error" in ep.mismatches[0]["actual"]
    assert by_role(samples, "coder")[0].terms["local"] == 0.0


def test_presets_keep_the_paper_settings_on_gpu_and_flags_override():
    gpu = agents.parse_args(["--preset", "gpu"])
    assert (gpu.k, gpu.max_turns, gpu.max_new_tokens, gpu.lr, gpu.out) == (4, 5, 4096, 1e-6, "runs/agents-gpu")
    cpu = agents.parse_args(["--k", "3"])
    assert (cpu.k, cpu.max_turns, cpu.max_tests, cpu.engine, cpu.out) == (3, 2, 2, "hf", "runs/agents")


def test_repair_states_show_a_mismatch_and_carry_the_right_answer():
    problems = [make_problem("p0"), make_problem("p1", reference=MINUS)]
    repairs = agents.repair_states(problems, max_tests=2)
    p0 = [(s, prog, tests) for s, prog, tests in repairs if s.problem.id == "p0"]
    (wrong_prog, prog_a, tests_a), (wrong_test, prog_b, tests_b) = p0
    assert wrong_prog.program == MINUS and wrong_prog.mismatches and wrong_prog.turn == 1
    assert prog_a == REF and tests_a == GT[:2]  # fix the program, keep the (right) tests
    assert wrong_test.program == REF and wrong_test.tests[0]["output"] != GT[0]["output"]
    assert len(wrong_test.mismatches) == 1 and prog_b == REF and tests_b == GT[:2]  # keep the program, fix the test
    messages = agents.coder_messages(wrong_prog)[1]["content"]
    assert "The coder's last program" in messages and "Program's actual output" in messages
    pairs = agents.warm_start_pairs(problems, ["coder"], 2, repairs)
    assert len(pairs) == 2 + len(repairs)  # one turn-0 pair per reference + one per repair state
