"""AT-GRPO (PettingLLMs' agent- and turn-wise GRPO): a tester and a coder refine unit tests and
a program over turns, both trained with GRPO on groups per (problem, turn, agent).

The game, turn t = 0, 1, ... (the public code's order, --turn-order parallel, the default):
  1. both roles act from the state the last turn left: the tester writes (or refines) unit
     tests T_t, the coder writes (or fixes) the program P_t, each seeing the last program,
     the last tests and how the one did on the other (at turn 0 both see the bare problem);
  2. P_t runs on T_t; the episode ends when it passes them all ("agree"), else next turn,
     at most max_turns turns (seed config 10, the public configs 5).
  tester-first (the documented workflow): the tester acts first and the coder then sees THIS
  turn's tests; coder-first: the coder first, the tester then tests its program. Problems are
  standard I/O or call-based (fn_name: the tests are `assert f(...) == ...` lines, the coder
  writes the function).
  Rewards (tester_judge.py, --role-rewards): pettingllms, the public code's: the coder 2 x its
  ground-truth pass rate, the tester the ground-truth pass rate of the coder candidate paired
  with it (candidate i of both roles in one turn: the public code's K rollouts); or ours,
  final = alpha * global + local per role with the tester's tests judged by the reference
  solution (valid, catching the shown wrong program, trivial, coverage).

Tree-structured sampling: each role step samples K candidates (--group-size) from the same
  state. Each is scored in its OWN branch (a deep copy of the episode state; only the
  read-only problem is shared) and is one training sample with group key (problem_id,
  episode, turn, role). Both roles continue from the best branch by reward (ties: the
  earlier candidate). A role step is one generate call and one sandbox run_batch for all
  episodes.

The step (train()): play --prompts-per-step episodes (each rank its own slice, so groups
  never span ranks) -> group advantages per (problem, episode, turn, role) -> one GRPO update
  per distinct model (--policy shared: one, per-role: two) -> weight sync -> metrics row.
  Warm start: SFT per model on its roles' turn-0 prompts and (--repair-sft) turn-1 repair
  states (a wrong program or a wrong test shown, with the right answer). Eval: pass@1 of the
  coder alone (the bare problem: the single-agent baseline, same model) and of the final
  program after max_turns turns with the tester.

The public implementation's four defects, each pinned by a test in tests/test_agents.py:
  later rewards read from stale copies (we keep the chosen branch object, no copy back);
  all tester candidates scored on one shared copy (each has its own deep copy); a group key
  that merged problems (ours holds the problem id and the episode index); a tester reward
  without the reference solution (--role-rewards ours: validity = the reference passes the
  test; the default, pettingllms, keeps the public code's reward as it is).

A variant arm, NOT PettingLLMs' game (--variant a1-cure; the default, none, is the game above):
  Code-A1's tester writes test inputs only; their outputs are filled by the reference solution
  in training and by the majority output of the coder's K candidates at evaluation
  (fill_outputs; an input without an output is dropped); at each turn's end the candidate that
  passes the most of these tests becomes the program (select_tested, CURE's selection), the one
  pass@1 reads; the tester earns tester_judge.rejection_reward, the coder pettingllms' 2 g.
  At evaluation it keeps K candidates a step (to vote) and continues each step's first one (a
  reward reads the ground truth, so none may choose there).

Simplifications:
  * no KL term, so no reference model (as AT-GRPO); GRPO's clipped surrogate (losses.py).
  * turn-level rewards only (no discounting across turns), as in the seed.
  * "agree" uses ALL the tester's tests, valid or not (validity needs the reference, which the
    agents at test time do not have), and needs a program and at least one test.
  * the tester's catch is judged on the program it was SHOWN: its tests are chosen before the
    coder acts, and this turn's programs saw only the chosen tests.
  * generate functions take chat message lists and return one text per prompt (or engine
    Completions, kept whole for their token ids): the game never sees a tokenizer.
  CPU preset: the public configs' K = 8 and eval T 0.6, 2 turns (the fewest in which each
  role answers the other; 5 cost 2.5x a step: PRESETS), 2 tests a reply, 64/96 new tokens
  (coder/tester), the engine as grpo.py's (vLLM when it starts). GPU preset: K = 4, the
  public configs' 5 turns, 4096 tokens, lr 1e-6, weight decay 0.01, eval T 0.6.
"""
import copy
import functools
import json
import os
import random
import re
from dataclasses import dataclass, field, replace

import torch

import actor
import data
import grpo
import losses
import rollouts
import sandbox
import trainer
from infra import bookkeeping, flags
from infra.bookkeeping import policy_optimizer
from infra.metrics import Timer
from infra.model import UserError, all_reduce_sum, reduce_sums
from infra.samples import clip, pick
from tester_judge import (
    ROLE_REWARDS,
    coder_jobs,
    fill_jobs,
    fill_programs,
    filled_tests,
    format_tests,
    gt_every_test,
    job_key,
    judge_program,
    judge_test_set,
    parse_tests,
    passed_and_mismatches,
    result_of,
    run_jobs,
    select_by_tests,
    tester_jobs,
)

ROLES = ("tester", "coder")
# Who acts on what within a turn. tester-first / coder-first: in sequence, the second role
# sees what the first one just did; parallel (the public code's order): both act from the
# state the last turn left, and the turn's program then runs on the turn's tests.
TURN_ORDERS = {"tester-first": ("tester", "coder"), "coder-first": ("coder", "tester"),
               "parallel": ("coder", "tester")}

CODER_SYSTEM = (
    "You are the coder. Write a complete Python 3 program that reads from standard input and "
    "writes to standard output. Reply with the whole program in one ```python code block."
)
CODER_SYSTEM_CALL = (
    "You are the coder. Write the Python 3 function the problem asks for. Reply with the whole "
    "code in one ```python code block."
)
TESTER_SYSTEM = (
    "You are the tester. Write unit tests for the problem: for each test, write\n"
    "**Test Input:**\n```\n<stdin>\n```\n**Test Output:**\n```\n<expected stdout>\n```\n"
    "Write between 1 and {max_tests} tests. Expected outputs must be exactly right."
)
TESTER_SYSTEM_CALL = (
    "You are the tester. Write unit tests for the function `{fn_name}`: one line per test, an "
    "assert on a call with literal arguments and the exact expected return value, in one "
    "```python block:\n```python\nassert {fn_name}(...) == ...\n```\n"
    "Write between 1 and {max_tests} tests. Expected values must be exactly right."
)
# The a1-cure variant's tester (Code-A1): inputs only, the outputs are filled by programs.
TESTER_SYSTEM_INPUTS = (
    "You are the tester. Write test inputs for the problem, without expected outputs: for "
    "each test, write\n**Test Input:**\n```\n<stdin>\n```\n"
    "Write between 1 and {max_tests} inputs, chosen so that a wrong program goes wrong."
)
TESTER_SYSTEM_CALL_INPUTS = (
    "You are the tester. Write test inputs for the function `{fn_name}`, without expected "
    "values: one call with literal arguments per line, in one ```python block:\n"
    "```python\n{fn_name}(...)\n```\n"
    "Write between 1 and {max_tests} calls, chosen so that a wrong program goes wrong."
)
# --variant: none, the PettingLLMs game; a1-cure, Code-A1's tester + CURE's selection.
VARIANTS = ("none", "a1-cure")
FILL_FROM = ("reference", "majority")
MAX_SHOWN_MISMATCHES = 3  # keeps prompts short for small models
MAX_SHOWN_CHARS = 300


@dataclass
class GameConfig:
    """Settings of one batch of episodes (the flags of the same names)."""

    max_turns: int = 10
    k: int = 2
    alpha: float = 0.7
    catch_bonus: float = 1.0
    trivial_penalty: float = 0.5
    coverage_weight: float = 0.5
    max_tests: int = 8
    turn_order: str = "parallel"
    role_rewards: str = "pettingllms"  # tester_judge's schemes: "pettingllms" or "ours"
    reward: str = "fraction"  # the global term: "fraction" (pass rate, the seed) or "binary"
    timeout: float = 5.0
    memory_mb: int = 512
    # a1-cure (not PettingLLMs' game): the tester writes inputs, their outputs filled from
    # fill_from: "reference" (training) or "majority" of the coder's K candidates (evaluation,
    # where no ground truth steers the game: each role step continues its first candidate)
    variant: str = "none"
    fill_from: str = "reference"

    def __post_init__(self):
        if self.turn_order not in TURN_ORDERS:
            raise ValueError(
                f"turn_order must be one of {sorted(TURN_ORDERS)}, not {self.turn_order!r}"
            )
        if self.role_rewards not in ROLE_REWARDS:
            raise ValueError(f"role_rewards must be one of {list(ROLE_REWARDS)}, "
                             f"not {self.role_rewards!r}")
        if self.role_rewards == "pettingllms" and self.turn_order == "tester-first":
            # the paired coder candidate acts after the tester's branch is chosen
            raise ValueError("role_rewards 'pettingllms' pays each tester candidate the "
                             "ground-truth pass rate of the coder candidate of its index in the "
                             "same turn, which in tester-first order writes its program after "
                             "the tester's branch is chosen; use role_rewards 'ours' or the "
                             "parallel or coder-first order")
        if self.variant not in VARIANTS or self.fill_from not in FILL_FROM:
            raise ValueError(f"variant must be one of {list(VARIANTS)} and fill_from one of "
                             f"{list(FILL_FROM)}, not {self.variant!r}, {self.fill_from!r}")
        if self.variant == "none" and self.fill_from != "reference":
            raise ValueError("fill_from fills the a1-cure variant's tests; set variant a1-cure")
        if self.variant != "none" and self.role_rewards != "pettingllms":
            raise ValueError("variant a1-cure pays the coder pettingllms' 2 g and the tester "
                             "rejection_reward; use role_rewards 'pettingllms'")


# ---------------------------------------------------------------------------------------------
# The episode: its state, the prompts, the candidates scored into branches


@dataclass
class EpisodeState:
    """One problem's episode after some role steps; a branch = a deep copy + one candidate."""

    problem: object  # data.Problem (read-only: shared by all branches)
    episode: int  # index in the run_episodes batch: separates repeats of one problem
    turn: int = 0  # turns completed
    program: str | None = None  # coder's current program (None: no code block, or not acted yet)
    tests: list = field(default_factory=list)  # tester's current tests
    valid: list = field(default_factory=list)  # per test: the reference solution passes it
    passed: list = field(default_factory=list)  # per test: the current program passes it
    mismatches: list = field(default_factory=list)  # failed tests: input, expected, actual
    gt_pass_rate: float = 0.0  # the current program on the ground-truth tests
    coder_candidates: list = field(default_factory=list)  # last coder step: [(code, g)] x K
    coder_acted: bool = False
    tester_acted: bool = False
    agree: bool = False
    done: bool = False
    history: list = field(default_factory=list)  # per turn: the chosen branches' terms


def branch_of(state):
    """A deep copy of all a candidate may change; the problem is shared (read-only, large)."""
    return copy.deepcopy(state, {id(state.problem): state.problem})


def _clip(text):
    text = str(text)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "...(truncated)"


def format_mismatches(mismatches):
    shown = mismatches[:MAX_SHOWN_MISMATCHES]
    parts = [
        f"Input:\n```\n{_clip(m['input']).rstrip()}\n```\nTester's expected output:\n```\n"
        f"{_clip(m['expected']).rstrip()}\n```\n"
        f"Program's actual output:\n```\n{_clip(m['actual']).rstrip()}\n```"
        for m in shown
    ]
    if len(mismatches) > len(shown):
        parts.append(f"({len(mismatches) - len(shown)} more mismatches not shown)")
    return "\n\n".join(parts)


def _is_method(problem):
    """Call-based tests call `Solution().fn_name(...)` when the starter code is a class."""
    return "class Solution" in problem.starter_code


def _program_report(state):
    if state.program is None:
        return "The coder's last reply had no ```python code block."
    return f"The coder's last program:\n```python\n{state.program}\n```"


def _results_report(state):
    """How the current program did on the current tests (both exist)."""
    if state.program is None:
        return "So it could not be run on the tester's tests."
    if state.mismatches:
        n_pass = sum(state.passed)
        return (f"It passed {n_pass} of the {len(state.tests)} tests and failed these:\n\n"
                + format_mismatches(state.mismatches))
    return "It passed all of the tester's tests."


def coder_turn_messages(state):
    """The coder's prompt: the problem, then (once anyone acted) the tester's current tests,
    the coder's last program and how it did on them."""
    p = state.problem
    user = data.problem_statement(p)
    if state.tester_acted or state.coder_acted:
        if state.tests:
            user += "\n\nThe tester's tests:\n" + format_tests(
                state.tests, p.fn_name, _is_method(p)
            )
        elif state.tester_acted:
            user += "\n\nThe tester's last reply had no parsable tests."
        if state.coder_acted:
            user += "\n\n" + _program_report(state)
            if state.tests:
                user += "\n\n" + _results_report(state)
            user += (
                "\n\nEither the program or a test is wrong. If the program is wrong, fix it; if "
                "a test is wrong, keep your program. Reply with the complete program."
            )
        else:
            user += "\n\nWrite a program that passes these tests if they are right."
    system = CODER_SYSTEM if p.fn_name is None else CODER_SYSTEM_CALL
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def tester_messages(state, max_tests=8, inputs_only=False):
    """The tester's prompt: the problem, then (once anyone acted) its last tests, the coder's
    current program and how it did on them. inputs_only: the a1-cure variant's tester, which
    writes (and is shown) inputs only."""
    p = state.problem
    user = data.problem_statement(p)
    if state.tester_acted or state.coder_acted:
        if state.tester_acted:
            user += "\n\nYour last tests:\n" + (
                format_tests(state.tests, p.fn_name, _is_method(p), inputs_only)
                or "(none parsed)"
            )
        if state.coder_acted:
            user += "\n\n" + _program_report(state)
            if state.tests:
                user += "\n\n" + _results_report(state)
        user += (
            "\n\nWrite inputs that a wrong program gets wrong. Reply with the full list of inputs."
            if inputs_only else
            "\n\nWrite tests that a wrong program fails. If a test of yours is wrong, fix it; keep "
            "the right ones. Reply with the full list of tests."
        )
    if p.fn_name is None:
        system = (TESTER_SYSTEM_INPUTS if inputs_only else TESTER_SYSTEM).format(
            max_tests=max_tests)
    else:
        system = (TESTER_SYSTEM_CALL_INPUTS if inputs_only else TESTER_SYSTEM_CALL).format(
            max_tests=max_tests, fn_name=p.fn_name)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def judged_against(state, paired, cfg):
    """The coder candidates [(code, g)] a tester step's tests are run on: the last coder step's
    of the state; in the a1-cure variant this turn's (paired) when the coder acted first."""
    return paired if cfg.variant != "none" and paired else state.coder_candidates


def score_testers(state, test_sets, results, cfg, paired=None):
    """K tester candidates from one state -> [(branch, terms)] in candidate order, judged by
    tester_judge.judge_test_set. Each branch is a deep copy holding its candidate's own tests.
    paired: this turn's K coder candidates [(code, g)], candidate i paired with tester
    candidate i (the pettingllms reward; None: none acted yet this turn)."""
    scored = []
    for i, ts in enumerate(test_sets):
        b = branch_of(state)
        b.tests, b.tester_acted = copy.deepcopy(ts), True
        b.valid, b.passed, b.mismatches, terms = judge_test_set(
            state.problem, ts, state.program, state.gt_pass_rate,
            judged_against(state, paired, cfg), results, cfg,
            paired_g=paired[i][1] if paired else None)
        scored.append((b, terms))
    return scored


def score_coders(state, codes, results, cfg):
    """K coder candidates from one state -> [(branch, terms)] in candidate order, judged by
    tester_judge.judge_program; every branch keeps all K (program, g) for the tester's step."""
    scored = []
    for code in codes:
        b = branch_of(state)
        b.program, b.coder_acted = code, True
        b.gt_pass_rate, b.passed, b.mismatches, terms = judge_program(
            state.problem, code, b.tests, b.valid, results, cfg)
        scored.append((b, terms))
    candidates = [(b.program, b.gt_pass_rate) for b, _ in scored]
    for b, _ in scored:
        b.coder_candidates = list(candidates)  # each branch its own list (tuples are immutable)
    return scored


def best(scored):
    """Index of the candidate with the highest reward; ties: the earlier one."""
    return max(range(len(scored)), key=lambda i: (scored[i][1]["reward"], -i))


# ---------------------------------------------------------------------------------------------
# The turn loop


@dataclass
class Candidate:
    """One sampled reply of one role = one training sample; a group's candidates saw one prompt."""

    role: str
    group: tuple  # (problem_id, episode, turn, role)
    messages: list  # the prompt, as chat messages
    response: str
    reward: float
    terms: dict  # every reward term of this candidate
    output: object = None  # what generate returned (a str, or an engine Completion with token ids)
    outcome: dict = field(default_factory=dict)  # its branch as judged: outcome_of


def outcome_of(branch, chosen):
    """What a candidate's branch holds after its judging, for the samples file: the program,
    the tests, per test valid (the reference passes it) and passed (by the program), the
    program's failures on them, its ground-truth pass rate, and whether both roles continue
    from this branch (chosen). References, not copies: a judged branch is not changed later."""
    return {"program": branch.program, "tests": branch.tests, "valid": branch.valid,
            "passed": branch.passed, "mismatches": branch.mismatches,
            "gt_pass_rate": branch.gt_pass_rate, "chosen": chosen,
            "family": branch.problem.metadata.get("family")}


def response_text(output):
    """generate may return strings or objects with .text (engine Completions, which keep the
    token ids the trainer needs); the loop only reads the text."""
    return output if isinstance(output, str) else output.text


def generate_candidates(generate, prompts, k):
    """One generate call with each prompt repeated k times -> k outputs per prompt."""
    if not prompts:
        return []
    texts = generate([p for p in prompts for _ in range(k)])
    if len(texts) != len(prompts) * k:
        raise ValueError(
            f"generate returned {len(texts)} texts for {len(prompts) * k} prompts; "
            "it must return one text per prompt."
        )
    return [texts[i * k:(i + 1) * k] for i in range(len(prompts))]


TERMS = {"tester": ("global", "local", "reward", "paired_coder_global", "valid_share",
                    "catch_share", "trivial_share", "duplicate_share", "coverage", "rejection"),
         "coder": ("global", "local", "reward")}


def _new_stats():
    return {
        "episodes": 0,
        "turns": 0,
        "generate_calls": 0,
        "sandbox_calls": 0,
        "sandbox_jobs": 0,
        "tester_blocks_failed": 0,
        "tester_replies_without_tests": 0,
        "coder_replies_without_code": 0,
        "tests_written": 0,
        "tests_valid": 0,
        "tests_caught": 0,
        "tests_trivial": 0,
        "call_based_episodes": 0,
        "episodes_without_reference": 0,
        "tester_groups": 0,
        "tester_groups_signal_beyond_validity": 0,
        "tester_choice_not_most_valid": 0,
    }


def _log_terms(stats, role, scored):
    for _, terms in scored:
        for name in TERMS[role]:
            if terms.get(name) is None:   # not measured (an untraced reference's coverage, or
                continue                  # the rejection outside the a1-cure variant)
            stats[f"{role}_{name}_sum"] = stats.get(f"{role}_{name}_sum", 0.0) + terms[name]
        stats[f"{role}_samples"] = stats.get(f"{role}_samples", 0) + 1


def _count_tester_group(stats, terms):
    """What the terms beyond validity do to one tester group: groups whose valid shares are all
    equal (validity alone gives them zero advantage) while the rewards differ, and groups whose
    best-reward candidate is not the best by valid share (the early runs' branch choice)."""
    stats["tester_groups"] += 1
    valid, reward = [t["valid_share"] for t in terms], [t["reward"] for t in terms]
    stats["tester_groups_signal_beyond_validity"] += len(set(valid)) == 1 and len(set(reward)) > 1
    by_valid = max(range(len(terms)), key=lambda i: (valid[i], -i))
    stats["tester_choice_not_most_valid"] += by_valid != max(
        range(len(terms)), key=lambda i: (reward[i], -i)
    )


def game_jobs(jobs, cfg, stats, run_batch):
    """tester_judge.run_jobs under the game's limits (one sandbox call), counted in stats."""
    results = run_jobs(jobs, run_batch, cfg.timeout, cfg.memory_mb)
    stats["sandbox_calls"] += bool(results)
    stats["sandbox_jobs"] += len(results)
    return results


def role_step(role, states, generate, cfg, stats, run_batch, paired=None):
    """One role's step for the active states -> (chosen branches, candidates, choice per state).
    One generate call (K per state) and one sandbox call for all states. paired (the tester's
    step): per state, this turn's coder candidates [(code, g)] (score_testers), or None."""
    inputs_only = cfg.variant != "none"
    if role == "tester":
        prompts = [tester_messages(s, cfg.max_tests, inputs_only) for s in states]
    else:
        prompts = [coder_turn_messages(s) for s in states]
    outputs = generate_candidates(generate, prompts, cfg.k)
    stats["generate_calls"] += 1
    if role == "tester":
        extracted = []
        for s, outs in zip(states, outputs):
            sets = []
            for out in outs:
                tests, failed = parse_tests(response_text(out), cfg.max_tests, s.problem.fn_name,
                                            inputs_only)
                stats["tester_blocks_failed"] += failed
                stats["tester_replies_without_tests"] += not tests
                stats["inputs_written" if inputs_only else "tests_written"] += len(tests)
                sets.append(tests)
            extracted.append(sets)
        against = [judged_against(s, paired[j] if paired else None, cfg)
                   for j, s in enumerate(states)]
        if inputs_only:
            extracted = fill_outputs(states, extracted, against, cfg, stats, run_batch)
        jobs = [j for s, sets, cands in zip(states, extracted, against)
                for j in tester_jobs(s.problem, s.program, cands, sets, cfg)]
    else:
        extracted = [[data.extract_code(response_text(o)) for o in outs] for outs in outputs]
        stats["coder_replies_without_code"] += sum(c is None for codes in extracted for c in codes)
        every_gt = gt_every_test(cfg.reward)
        jobs = [j for s, codes in zip(states, extracted)
                for j in coder_jobs(s.problem, s.tests, codes, every_gt)]
    results = game_jobs(jobs, cfg, stats, run_batch)
    chosen, candidates, choices = [], [], []
    for j, (state, prompt, outs, ext) in enumerate(zip(states, prompts, outputs, extracted)):
        if role == "tester":
            scored = score_testers(state, ext, results, cfg, paired[j] if paired else None)
            stats["tests_valid"] += sum(sum(b.valid) for b, _ in scored)
            stats["tests_caught"] += sum(round(t["catch_share"] * t["n_tests"]) for _, t in scored)
            stats["tests_trivial"] += sum(
                round(t["trivial_share"] * t["n_tests"]) for _, t in scored
            )
            _count_tester_group(stats, [t for _, t in scored])
        else:
            scored = score_coders(state, ext, results, cfg)
        _log_terms(stats, role, scored)
        key = (state.problem.id, state.episode, state.turn, role)
        # a1-cure's evaluation: no reward (it reads the ground truth) may pick the branch
        i = 0 if cfg.fill_from == "majority" else best(scored)
        candidates += [Candidate(role, key, prompt, response_text(out), terms["reward"], terms, out,
                                 outcome_of(b, k == i))
                       for k, ((b, terms), out) in enumerate(zip(scored, outs))]
        chosen.append(scored[i][0])
        choices.append((i, scored[i][1]))
    return chosen, candidates, choices


def fill_outputs(states, input_sets, against, cfg, stats, run_batch):
    """The a1-cure variant: per state, its tester candidates' inputs -> their tests, each
    input's expected output filled by tester_judge.filled_tests from fill_programs (the
    reference in training; the majority of the coder candidates `against` at evaluation); an
    input without an output is dropped. One sandbox call for all states."""
    programs = [fill_programs(s.problem, cands, cfg.fill_from) for s, cands in zip(states, against)]
    results = game_jobs([j for s, progs, sets in zip(states, programs, input_sets)
                         for j in fill_jobs(s.problem, progs, sets)], cfg, stats, run_batch)
    out = []
    for s, progs, sets in zip(states, programs, input_sets):
        out.append([])
        for inputs in sets:
            tests, dropped = filled_tests(s.problem, progs, inputs, results)
            stats["inputs_dropped"] += dropped
            stats["tests_written"] += len(tests)
            out[-1].append(tests)
    return out


def select_tested(states, cfg, stats, run_batch):
    """The a1-cure variant's end of a turn: every coder candidate of the last coder step runs
    on the state's tests (one sandbox call) and the state takes the one that passes the most
    (select_by_tests; ties: the earliest) as its program, with its ground-truth pass rate
    (what pass@1 reads) and its results on the tests. Candidates of the last coder step only,
    not of all turns: the state holds those."""
    results = game_jobs([(c, s.tests, s.problem, False) for s in states
                         for c, _ in s.coder_candidates], cfg, stats, run_batch)
    for s in states:
        if not s.coder_candidates:
            continue
        runs = [passed_and_mismatches(result_of(results, c, s.tests, s.problem), s.tests,
                                      s.problem.fn_name) for c, _ in s.coder_candidates]
        i = select_by_tests([sum(passed) for passed, _ in runs])
        stats["selections_not_last"] += s.coder_candidates[i][0] != s.program
        s.program, s.gt_pass_rate = s.coder_candidates[i]
        s.passed, s.mismatches = runs[i]
    return states


def join_parallel(testers, coders, cfg, stats, run_batch):
    """The parallel order's end of a turn: the tester's chosen branch takes the coder's chosen
    program (and its candidates and ground-truth rate), and the program runs on the new tests
    (one sandbox call), so the next turn shows both how the program did on them."""
    out = []
    for t, c in zip(testers, coders):
        b = branch_of(t)
        b.program, b.coder_acted = c.program, True
        b.gt_pass_rate, b.coder_candidates = c.gt_pass_rate, list(c.coder_candidates)
        out.append(b)
    results = game_jobs([(b.program, b.tests, b.problem, False) for b in out], cfg, stats,
                        run_batch)
    for b in out:
        b.passed, b.mismatches = passed_and_mismatches(
            result_of(results, b.program, b.tests, b.problem), b.tests, b.problem.fn_name)
    return out


def shown_to_coder(state):
    """What the coder's prompt shows of its last program: its ground-truth pass rate (None:
    no program yet, or no code) and, per shown test, valid (the reference passes it) and
    passed (the program passes it). A turn's record keeps it (the gates read it)."""
    return {"program_gt_pass_rate": state.gt_pass_rate if state.program is not None else None,
            "tests_valid": list(state.valid), "tests_passed": list(state.passed)}


def run_turn(states, generates, cfg, stats, run_batch):
    """One turn (both roles in cfg.turn_order) of the active states -> (states, candidates).
    Each state's record of the turn: both roles' chosen terms and choices, what the coder was
    shown (shown_to_coder), the turn's program's ground-truth pass rate and agreement."""
    samples = []
    records = [{} for _ in states]
    start, chosen = states, {}
    for role in TURN_ORDERS[cfg.turn_order]:
        acting = start if cfg.turn_order == "parallel" else states
        # The tester's candidates pair with this turn's coder candidates (parallel: the coder
        # acted on the same state; coder-first: before it); tester-first: none yet.
        paired = ([c.coder_candidates for c in chosen["coder"]]
                  if role == "tester" and "coder" in chosen else None)
        if role == "coder":
            for rec, s in zip(records, acting):
                rec["coder_shown"] = shown_to_coder(s)
        states, cands, choices = role_step(role, acting, generates[role], cfg, stats, run_batch,
                                           paired)
        chosen[role] = states
        samples += cands
        for rec, (i, terms) in zip(records, choices):
            rec[role], rec[f"{role}_choice"] = terms, i
    if cfg.turn_order == "parallel":
        states = join_parallel(chosen["tester"], chosen["coder"], cfg, stats, run_batch)
    if cfg.variant != "none":
        states = select_tested(states, cfg, stats, run_batch)
    for state, rec in zip(states, records):
        state.agree = state.program is not None and bool(state.tests) and all(state.passed)
        state.done = state.agree
        state.turn += 1
        state.history.append({**rec, "program_gt_pass_rate": state.gt_pass_rate,
                              "agree": state.agree})
    return states, samples


RATES = ("agree_rate", "mean_turns", "final_gt_pass_rate", "pass_at_1")


def episode_sums(episodes):
    """The sums over finished episodes that the rates are made of."""
    return {
        "agreed": sum(e.agree for e in episodes),
        "solved": sum(e.gt_pass_rate == 1.0 for e in episodes),
        "turns_played": sum(e.turn for e in episodes),
        "gt_pass_sum": sum(e.gt_pass_rate for e in episodes),
    }


def summarize(sums):
    """sums (counts and per-term sums) -> the same plus every term's mean and the episode rates.
    A pure function of sums, so it applies again after summing them over ranks."""
    out = {k: v for k, v in sums.items() if not k.endswith("_mean") and k not in RATES}
    for role in ROLES:
        n = out.get(f"{role}_samples", 0)
        for name in TERMS[role]:
            if f"{role}_{name}_sum" in out:
                out[f"{role}_{name}_mean"] = out[f"{role}_{name}_sum"] / max(n, 1)
    n = max(out.get("episodes", 0), 1)
    out.update(agree_rate=out.get("agreed", 0) / n, mean_turns=out.get("turns_played", 0) / n,
               final_gt_pass_rate=out.get("gt_pass_sum", 0) / n, pass_at_1=out.get("solved", 0) / n)
    return out


def run_episodes(problems, coder_generate, tester_generate, run_batch=None, **settings):
    """Play the tester/coder game on a batch of problems -> (episodes, candidates, stats).

    settings: GameConfig fields (max_turns, k, alpha, catch_bonus, ..., turn_order).
    episodes:   the final EpisodeState of each problem (its program, tests, per-turn history).
    candidates: every candidate of every role step as a Candidate; its .group is its
                group key (problem_id, episode, turn, role).
    stats:      counts (extraction failures, sandbox calls, ...) and the mean of every reward term.
    Episodes that agree stop: they are not prompted again.
    """
    cfg = settings.pop("cfg", None) or GameConfig(**settings)
    run_batch = run_batch or sandbox.run_batch
    stats = _new_stats()
    if cfg.variant != "none":
        stats.update(inputs_written=0, inputs_dropped=0, selections_not_last=0)
    states = []
    for i, problem in enumerate(problems):
        stats["episodes_without_reference"] += not problem.solutions
        states.append(EpisodeState(problem, episode=i))
        stats["call_based_episodes"] += problem.fn_name is not None
    stats["episodes"] = len(states)
    generates = {"tester": tester_generate, "coder": coder_generate}
    samples = []
    for _ in range(cfg.max_turns):
        active = [i for i, s in enumerate(states) if not s.done]
        if not active:
            break
        new_states, turn_samples = run_turn(
            [states[i] for i in active], generates, cfg, stats, run_batch
        )
        for i, new_state in zip(active, new_states):
            states[i] = new_state
        samples += turn_samples
        stats["turns"] += 1
    return states, samples, summarize({**stats, **episode_sums(states)})


def coder_programs(states, coder_generate, cfg=None, run_batch=None):
    """One coder sample from each state's prompt (coder_turn_messages) -> the states after it
    (its program, ground-truth pass rate, and its results on the state's tests)."""
    cfg = cfg or GameConfig()
    chosen, _, _ = role_step("coder", states, coder_generate, replace(cfg, k=1), _new_stats(),
                             run_batch or sandbox.run_batch)
    return chosen


def coder_alone(problems, coder_generate, cfg=None, run_batch=None):
    """The single-agent baseline: the coder's program from the bare problem (no tests shown),
    one per problem -> its ground-truth pass rates."""
    states = [EpisodeState(p, i) for i, p in enumerate(problems)]
    return [s.gt_pass_rate for s in coder_programs(states, coder_generate, cfg, run_batch)]


def oracle_tester(problems, max_tests):
    """A tester generate function for run_episodes that answers every prompt with its problem's
    ground-truth tests (easy_tests, in the tester's format), whatever else the prompt shows:
    the game with a tester whose tests are all valid, so that what the turns add over the
    coder alone is measured apart from the tester's skill. A prompt is matched to its problem
    by the statement it opens with (the longest that fits); one of no given problem is an error.
    """
    answers = {data.problem_statement(p): format_tests(easy_tests(p.tests, max_tests), p.fn_name,
                                                      _is_method(p))
               for p in problems}
    statements = sorted(answers, key=len, reverse=True)

    def generate(prompts):
        out = []
        for messages in prompts:
            user = messages[-1]["content"]
            match = next((s for s in statements if user == s or user.startswith(s + "\n\n")),
                         None)
            if match is None:
                raise ValueError("oracle_tester: a prompt whose statement is none of its "
                                 "problems'")
            out.append(answers[match])
        return out

    return generate


# ---------------------------------------------------------------------------------------------
# Warm start: SFT pairs for both roles' prompts


def _norm(value):
    return value.strip() if isinstance(value, str) else repr(value)


def easy_tests(tests, n):
    """The n tests a small tester can most likely get right, in their original order: the
    shortest inputs (small values, single letters, the boundaries a statement names), tests
    with an answer not yet taken first (two tests with one answer show one branch)."""
    tests = [t for t in tests if "check" not in t]   # a check test shows no input/output pair
    order = sorted(range(len(tests)), key=lambda i: (len(_norm(tests[i]["input"])), i))
    picked, answers = [], set()
    for i in order:
        if _norm(tests[i]["output"]) not in answers:
            picked.append(i)
            answers.add(_norm(tests[i]["output"]))
    picked += [i for i in order if i not in picked]
    return [tests[i] for i in sorted(picked[:n])]


_INT = re.compile(r"(?<![\w'.])\d+(?![\w'.])")
_BOUNDS = {" < ": " <= ", " <= ": " < ", " > ": " >= ", " >= ": " > "}


def near_misses(code):
    """Programs one slip away from `code`, the kind of mistake a small model makes on a
    template it knows: each integer literal one larger (a literal holds no sign, so this
    never makes a divisor 0), and each comparison's bound made strict or loose (< <-> <=,
    > <-> >=). In source order, without repeats; literals inside strings are left alone."""
    out = []
    for m in _INT.finditer(code):
        out.append(code[:m.start()] + str(int(m.group()) + 1) + code[m.end():])
    for op, other in _BOUNDS.items():
        at = code.find(op)
        while at >= 0:
            out.append(code[:at] + other + code[at + len(op):])
            at = code.find(op, at + len(op))
    return list(dict.fromkeys(c for c in out if c != code))


def wrong_outputs(tests, which, pool, fn_name, rng=None):
    """Deep copies of `tests` with the expected output of each test at an index in `which`
    replaced by a wrong one: another output of `pool` (the problem's ground-truth tests: real
    answers of the program, to other inputs) that differs from the right one, drawn by rng
    (None: the first in pool order); none such: "0" (standard I/O) or None (call-based), which
    may be the right one (then the reference passes that test and repair_states drops it)."""
    out = copy.deepcopy(tests)
    for i in which:
        right = _norm(out[i]["output"])
        others = [t["output"] for t in pool if _norm(t["output"]) != right]
        others = list({_norm(o): o for o in others}.values())   # one per value, in pool order
        if others:
            out[i]["output"] = copy.deepcopy(others[rng.randrange(len(others))] if rng
                                             else others[0])
        else:
            out[i]["output"] = "0" if fn_name is None else None
    return out


def repair_states(problems, max_tests, run_batch=None, timeout=2.0, memory_mb=512, seed=0,
                  wrong_programs=None, wrong_tests=("one", "all")):
    """Turn-1 states with a known right answer, so the warm start also covers the prompts
    the agents see after a disagreement -> [(state, right program, right tests)], per problem:
      wrong program: the first of its candidates that fails a ground-truth test: a model's own
                     programs (wrong_programs: {problem id: [program, ...]}, e.g. its samples),
                     then up to three near misses of the reference (near_misses, drawn by the
                     seed); shown with easy tests that hold a test it fails (the coder should
                     write the reference, the tester keep its tests); without a candidate that
                     fails, the next problem's (of the same kind) reference on the easy tests;
      wrong tests (wrong_tests names which): "one": the reference on the easy tests with the
                     first expected output replaced by another test's (wrong_outputs); "all":
                     every expected output replaced, each by one drawn from the other tests'
                     (the reference fails all of them: a right program shown "passed 0", as
                     a wrong program often is, so the pass count alone never says which side
                     is wrong; not made when only one easy test exists). In both the coder
                     should keep its program, the tester fix its tests. With both, each
                     problem keeps one (mirrored): the one whose pass count is as its wrong
                     program's, so the count says nothing about which side is wrong.
    Mismatches come from the sandbox (the program's own outputs). A state whose program passes
    anyway is dropped, and an all-wrong one whose program passes any test. The sandbox runs
    the candidates on the ground truth in rounds (one run_batch each), a problem's next
    candidate only while its earlier ones all pass (about one job a problem); then one call
    runs every state's program on its shown tests and on the ground truth (a candidate's
    ground-truth result is the one already had)."""
    problems = [p for p in problems if p.solutions and easy_tests(p.tests, 1)]
    run_batch = run_batch or sandbox.run_batch
    wrong_programs = wrong_programs or {}
    rng = random.Random(seed)
    misses = {}
    for p in problems:
        own = [c for c in wrong_programs.get(p.id, ()) if c is not None]
        near = near_misses(p.solutions[0])
        misses[p.id] = list(dict.fromkeys(own + rng.sample(near, min(len(near), 3))))
    first = {}

    def failed_tests(code, p):
        res = result_of(first, code, p.tests, p)
        return [t for t, ok in zip(p.tests, passed_and_mismatches(res, p.tests, p.fn_name)[0])
                if not ok]
    left = problems
    for k in range(max((len(m) for m in misses.values()), default=0)):
        left = [p for p in left if k < len(misses[p.id])]
        first.update(run_jobs([(misses[p.id][k], p.tests, p, False) for p in left],
                              run_batch, timeout, memory_mb))
        left = [p for p in left if not failed_tests(misses[p.id][k], p)]
    cfg = GameConfig(timeout=timeout, memory_mb=memory_mb)
    cases = []
    for kind in (True, False):
        same = [p for p in problems if (p.fn_name is None) == kind]
        for i, p in enumerate(same):
            easy = copy.deepcopy(easy_tests(p.tests, max_tests))
            wrong, shown = same[(i + 1) % len(same)].solutions[0], easy
            kinds = [w for w in wrong_tests if w == "one" or len(easy) > 1]
            for code in misses[p.id]:
                failed = failed_tests(code, p)
                if failed:
                    wrong = code
                    if failed[0] not in easy:
                        shown = copy.deepcopy([failed[0]] + easy)[:max_tests]
                    if len(kinds) > 1:   # its ground-truth run says what it is shown: mirror it
                        kinds = ["all" if all(t in failed for t in shown) else "one"]
                    break
            bad = {"one": wrong_outputs(easy, [0], p.tests, p.fn_name),
                   "all": wrong_outputs(easy, range(len(easy)), p.tests, p.fn_name,
                                        random.Random(f"{seed}-{p.id}"))}
            shown_cases = [("program", wrong, shown, shown)] + [
                (which, p.solutions[0], bad[which], easy) for which in kinds]
            for which, code, tests, right in shown_cases:
                state = EpisodeState(p, len(cases), turn=1, tests=tests,
                                     valid=[t in p.tests for t in tests], tester_acted=True)
                cases.append((which, state, code, p.solutions[0], right))
    jobs = [j for _, state, code, _, _ in cases
            for j in coder_jobs(state.problem, state.tests, [code], gt_every_test(cfg.reward))]
    results = {**first, **run_jobs([j for j in jobs if job_key(*j) not in first], run_batch,
                                   timeout, memory_mb)}
    kept = {}   # problem id -> [(which, branch, right program, right tests)]
    for which, state, code, right_code, right_tests in cases:
        ((branch, _),) = score_coders(state, [code], results, cfg)
        if not all(branch.passed) and (which != "all" or not any(branch.passed)):
            kept.setdefault(state.problem.id, []).append((which, branch, right_code, right_tests))
    out = []
    for pid, states in kept.items():
        out += [(b, code, tests) for _, b, code, tests in mirrored(states, seed, pid)]
    return out


def mirrored(states, seed, pid):
    """One problem's repair states -> those kept: the wrong-program state, and of its
    wrong-test states the one shown "passed 0" when the wrong program was (else the other),
    so that a right program and a wrong one are shown each pass count equally often; without
    a wrong-program state, one of them drawn by the seed. With one wrong-test state (a single
    easy test, wrong_tests ("one",), or one chosen before the sandbox ran it) it is kept."""
    fix = [s for s in states if s[0] == "program"]
    keep = [s for s in states if s[0] != "program"]
    if len(keep) < 2:
        return states
    if not fix:
        return [keep[random.Random(f"{seed}-{pid}-keep").randrange(len(keep))]]
    want = "all" if not any(fix[0][1].passed) else "one"   # the reference fails all / one
    return fix + ([s for s in keep if s[0] == want] or keep[:1])


def warm_start_pairs(problems, roles, max_tests, repairs=(), inputs_only=False):
    """SFT pairs (messages, answer): each role's turn-0 prompts -> every reference program (coder,
    both without tests shown and with the problem's easy_tests shown, as in tester-first order)
    / those tests in the tester's format (tester); and for each repair_states entry, its
    turn-1 prompts -> the right program / the right tests. inputs_only (the a1-cure variant):
    the tester's prompts and answers in its inputs-only format."""
    pairs = []
    for p in problems:
        easy = easy_tests(p.tests, max_tests)
        bare = EpisodeState(p, 0)
        shown = EpisodeState(p, 0, tests=copy.deepcopy(easy), tester_acted=True)
        if "coder" in roles:
            pairs += [
                (coder_turn_messages(s), data.format_answer(code))
                for s in (bare, shown)
                for code in p.solutions
            ]
        if "tester" in roles:
            pairs.append(
                (tester_messages(bare, max_tests, inputs_only),
                 format_tests(easy, p.fn_name, _is_method(p), inputs_only))
            )
    for state, program, tests in repairs:
        p = state.problem
        if "coder" in roles:
            pairs.append((coder_turn_messages(state), data.format_answer(program)))
        if "tester" in roles:
            pairs.append(
                (tester_messages(state, max_tests, inputs_only),
                 format_tests(tests, p.fn_name, _is_method(p), inputs_only))
            )
    return pairs


def warm_start_examples(tokenizer, problems, roles, max_tests, repairs=(), inputs_only=False):
    """warm_start_pairs tokenized into actor.Samples (answer + EOS), for actor.sft."""
    out = []
    for messages, answer in warm_start_pairs(problems, roles, max_tests, repairs, inputs_only):
        ids = tokenizer(data.render_prompt(tokenizer, messages))["input_ids"]
        out.append(
            actor.Sample(ids, tokenizer(answer)["input_ids"] + [tokenizer.eos_token_id], 1.0)
        )
    return out


# ---------------------------------------------------------------------------------------------
# The team: its models, warm start and set-up on trainer.py's run
#
# train() calls trainer.py's pieces itself (start -> checkpoint_to_resume -> its warm start and
# evaluation -> its optimizers -> first_step -> rl_steps / end_step / save_step -> finish); the
# Run's own policy and engine are the tester's model, and per-role the coder's model rides in
# run.extras, so the checkpoints hold it. evaluate_team keeps each result in run.state, where
# the summary's before_rl / after_rl come from.


@dataclass
class RoleModel:
    """One trained model: the FSDP policy, its engine, optimizer and schedule."""

    tokenizer: object
    policy: object
    engine: object
    optimizer: object = None
    scheduler: object = None


def distinct(team):
    """(model, roles) pairs, one per distinct model of {"tester": RoleModel, "coder": ...}."""
    out = {}
    for role, m in team.items():
        out.setdefault(id(m), (m, []))[1].append(role)
    return list(out.values())


def make_team(r, coder=None):
    """{"tester": RoleModel, "coder": RoleModel}: the Run's policy and engine are the tester's;
    coder: per-role, the second model (trainer.setup_policy's tokenizer, policy, engine);
    None (shared): the coder is the tester's model."""
    tester = RoleModel(r.tokenizer, r.policy, r.engine)
    return {"tester": tester, "coder": tester if coder is None else RoleModel(*coder)}


def with_reference(problems, train_data):
    """The problems RL trains on: the tester's reward needs a reference solution (LiveCodeBench
    rows have none); the evaluation needs only the ground truth, so it keeps every problem."""
    kept = [p for p in problems if p.solutions]
    if not kept:
        raise UserError(f"--train-data {train_data}: no problem has a reference solution, which "
                        "the tester's reward needs; choose a data set with solutions")
    return kept


def warm_start(team, r):
    """SFT of each model on its roles' warm-start pairs (actor.sft), weight sync."""
    a = r.args
    n_calls = sum(p.fn_name is not None for p in r.train_problems)
    r.say(f"{a.policy} policy, {len(r.train_problems)} train problems ({n_calls} call-based), "
          f"K={a.group_size}, max_turns={a.max_turns}, {a.turn_order}")
    # Turn-1 warm-start examples (--repair-sft): a model that has seen only turn-0 prompts
    # rewrites right turn-0 programs at turn 1 (.notes/agents.md).
    repairs = []
    # The repair states cost a sandbox run over every train problem (minutes on 2,464):
    # only when there is an SFT to use them.
    if a.repair_sft and a.max_turns > 1 and a.sft_steps > 0:
        repairs = repair_states(
            r.train_problems, a.max_tests, sandbox_runner(a.sandbox_workers), a.test_timeout
        )
    for m, roles in distinct(team):
        tag = "/".join(roles)
        actor.sft(
            m.policy,
            m.tokenizer,
            warm_start_examples(m.tokenizer, r.train_problems, roles, a.max_tests, repairs,
                                inputs_only=a.variant != "none"),
            r.d,
            lambda row, tag=tag: r.log({**row, "roles": tag}),
            **flags.sft(a),
        )
        actor.sync_weights(m.policy, m.engine)


def make_optimizers(team, r):
    """Each model's AdamW + schedule; the Run holds the tester's, run.extras the coder's model
    and optimizer (checkpointed beside the tester's)."""
    r.state["policy"] = r.args.policy
    for m, _ in distinct(team):
        m.optimizer, m.scheduler = policy_optimizer(m.policy, **flags.optimizer(r.args))
    r.optimizer, r.scheduler = team["tester"].optimizer, team["tester"].scheduler
    if team["coder"] is not team["tester"]:
        r.extras["coder"] = (team["coder"].policy, team["coder"].optimizer)


def catch_up_coder(team, r):
    """After --resume, per-role: the checkpoint restored the coder's weights and optimizer
    (run.extras) but not its schedule, which is the tester's (the same flags): it takes the
    tester's restored one; and the coder's engine gets the restored weights."""
    coder = team["coder"]
    if coder is not team["tester"]:
        coder.scheduler.load_state_dict(r.scheduler.state_dict())
        actor.sync_weights(coder.policy, coder.engine)


# ---------------------------------------------------------------------------------------------
# The step: episodes -> group advantages -> one GRPO update per model -> weight sync


def engine_generate(m, rng, *, temperature, top_p, max_new_tokens):
    """A generate function for run_episodes: render, sample one completion per prompt (at
    temperature / top_p, at most max_new_tokens, each call's engine seed drawn from rng)."""
    def generate(prompts):
        texts = [data.render_prompt(m.tokenizer, msgs) for msgs in prompts]
        outs = m.engine.generate(texts, n=1, temperature=temperature, top_p=top_p,
                                 max_new_tokens=max_new_tokens, seed=rng.randrange(2**31))
        return [o[0] for o in outs]

    return generate


def sandbox_runner(workers):
    """sandbox.run_batch with `workers` processes (None: the sandbox's default)."""
    return functools.partial(sandbox.run_batch, workers=workers)


def training_samples(candidates, roles, tokenizer, advantages):
    """run_episodes candidates of these roles -> actor.Sample (prompt, sampled ids, advantage)."""
    out = []
    for c, adv in zip(candidates, advantages.tolist()):
        if c.role in roles:
            ids = tokenizer(data.render_prompt(tokenizer, c.messages))["input_ids"]
            out.append(actor.Sample(ids, c.output.token_ids, adv, None, c.reward, key=c.group))
    return out


def rank_batch(problems, rng, prompts_per_step, d, epoch_order=None):
    """This rank's problems of the step and its sampling rng (rollouts.draw_batch: every rank
    draws the same global batch and seed, then takes its own slice and seed): ranks play
    different episodes, and each episode's groups stay on its rank. epoch_order: see
    rollouts.draw_batch (--prompt-order epoch)."""
    batch, seed = rollouts.draw_batch(problems, rng, max(1, prompts_per_step // d.world), d,
                                      epoch_order=epoch_order)
    return batch, random.Random(seed)


def play_episodes(team, problems, rng, d, timer, cfg, *, prompts_per_step, epoch_order,
                  temperature, top_p, budgets, max_train_tests, workers):
    """One RL step's episodes on this rank's share of prompts_per_step problems drawn from
    `problems` (rank_batch, epoch_order: rollouts.draw_batch's), each role sampling at
    temperature / top_p within budgets[role] tokens, judged on each problem's first
    max_train_tests tests (0: all) by the sandbox (workers), under the game's cfg ->
    (candidates, stats: the counts and reward-term sums over ranks, with every term's mean and
    the episode rates). timer: gets the engine's and the sandbox's seconds."""
    batch, sampler = rank_batch(problems, rng, prompts_per_step, d, epoch_order)
    # The turns alternate generation and the sandbox: each call's time goes to its phase.
    gens = {role: timer.wrap("generate", engine_generate(
        team[role], sampler, temperature=temperature, top_p=top_p,
        max_new_tokens=budgets[role])) for role in ROLES}
    # The ground truth of training: each problem's first max_train_tests tests.
    batch = [rollouts.train_view(p, max_train_tests) for p in batch]
    _, cands, stats = run_episodes(batch, gens["coder"], gens["tester"],
                                   timer.wrap("reward", sandbox_runner(workers)), cfg=cfg)
    # summarize recomputes the means and rates from the sums, so the ranks sum all of them.
    return cands, summarize(reduce_sums(stats))


def candidate_record(c, advantage=None):
    """A samples-file record (infra.samples) of one candidate: problem, family, episode, turn,
    role, prompt (its chat messages as text), completion, reward, advantage (None at an
    evaluation), reward terms, chosen; the tests (a tester's own, or those a coder answered)
    with valid (the reference passes each) and passed (the program passes each); a coder's
    program, ground-truth pass rate and first failing test of the tester's; the verdict:
    a coder's pass / fail (ground truth) / no_code, a tester's valid / invalid (all its tests
    valid or not) / no_tests."""
    o = c.outcome
    problem, episode, turn, role = c.group
    rec = {"problem": problem, "family": o.get("family"), "episode": episode, "turn": turn,
           "role": role, "prompt": "\n\n".join(f"[{m['role']}]\n{m['content']}"
                                                for m in c.messages),
           "completion": c.response, "reward": c.reward, "advantage": advantage,
           "terms": c.terms, "chosen": o.get("chosen"), "tests": o.get("tests"),
           "valid": o.get("valid"), "passed": o.get("passed")}
    if role == "coder":
        program = o.get("program")
        verdict = "no_code" if program is None else \
            "pass" if o.get("gt_pass_rate") == 1.0 else "fail"
        shown = o.get("mismatches") or []
        rec.update(program=program, gt_pass_rate=o.get("gt_pass_rate"), verdict=verdict,
                   failing_test={k: clip(v) for k, v in shown[0].items()} if shown else None)
    else:
        valid = o.get("valid") or []
        rec["program_shown"] = o.get("program") is not None
        rec["verdict"] = "no_tests" if not valid else "valid" if all(valid) else "invalid"
    return rec


def candidate_records(cands, advantages, limit):
    """candidate_record of every candidate of `limit` episodes (infra.samples.pick over the
    episodes in the order they were played; -1: all), with its advantage (advantages: one a
    candidate, or None)."""
    episodes = list(dict.fromkeys(c.group[:2] for c in cands))
    keep = {episodes[i] for i in pick(len(episodes), limit)}
    advantages = [None] * len(cands) if advantages is None else advantages
    return [candidate_record(c, a) for c, a in zip(cands, advantages) if c.group[:2] in keep]


def update_model(m, roles, cands, adv, loss, timer, *, off_policy, **update_kw):
    """One GRPO update of model m on its roles' candidates (the old log-probs of the policy
    that played them first when off_policy), its schedule's step and the weight sync into its
    engine (actor.update_and_sync) -> the update's stats, keyed "<roles>_<stat>".
    update_kw: actor.updates' keywords (micro_batch, pad_id, device, temperature, ...)."""
    m.engine.sleep()  # GPU: free the engine's memory for the update (no-op on CPU)
    samples = training_samples(cands, roles, m.tokenizer, adv)
    if off_policy:
        with timer("score"):
            old = actor.score(samples, policy=m.policy,
                              **{k: update_kw[k] for k in ("micro_batch", "pad_id", "device",
                                                           "temperature")}).logp
        samples = actor.with_scores(samples, old_logp=old)
    # No KL: a zero advantage gives a zero loss whatever the ratio, so skipping is exact.
    st = actor.update_and_sync(m.policy, m.optimizer, m.scheduler, m.engine, samples, loss,
                               timer, skip_zero_advantage=True, **update_kw)
    tag = "/".join(roles)
    return {f"{tag}_{k}": st[k] for k in ("grad_norm", "loss", "entropy", "updates", "clip_frac",
                                          "ratio_mean", "approx_kl") if k in st}


# ---------------------------------------------------------------------------------------------
# Evaluation: pass@1 of the coder alone and of the team after its turns


def episode_record(e, alone=None):
    """One finished episode as JSON: what was played and how it scored (eval dumps)."""
    return {
        "problem": e.problem.id,
        "turns": e.turn,
        "agree": e.agree,
        "gt_pass_rate": e.gt_pass_rate,
        "coder_alone_global": alone,
        "program": e.program,
        "tests": e.tests,
        "valid": e.valid,
        "passed": e.passed,
    }


def evaluate_episodes(team, problems, d, rng, cfg, *, n, temperature, top_p, budgets, workers,
                      dump=None, timer=None, trace=None):
    """pass@1 on the ground truth, over n episodes per problem (cfg: the game, k = 1), each
    role sampling at temperature / top_p within budgets[role] tokens, the sandbox with
    `workers`: the coder alone (its program from the bare problem: the single-agent baseline,
    same model and prompt) and the final program after up to max_turns turns with the tester;
    and the share of the tester's tests (all turns) that the reference solution passes.
    dump: a path for rank 0's episodes, one JSON line each.
    timer (metrics.Timer): gets the engines' seconds ("generate") and the sandbox's
    ("reward"), as the training turns' (play_episodes).
    trace: a list that gets this rank's episodes' Candidates (the samples file)."""
    mine = [p for p in problems for _ in range(n)][d.rank::d.world]
    timer = timer or Timer()
    gens = {r: timer.wrap("generate", engine_generate(team[r], rng, temperature=temperature,
                                                      top_p=top_p, max_new_tokens=budgets[r]))
            for r in ROLES}
    run_batch = timer.wrap("reward", sandbox_runner(workers))
    alone = coder_alone(mine, gens["coder"], cfg, run_batch)
    episodes, cands, stats = run_episodes(mine, gens["coder"], gens["tester"], run_batch,
                                          cfg=cfg)
    if trace is not None:
        trace += cands
    n = all_reduce_sum(len(episodes))
    written, valid = all_reduce_sum(stats["tests_written"]), all_reduce_sum(stats["tests_valid"])
    n_alone = all_reduce_sum(sum(g == 1.0 for g in alone))
    final = all_reduce_sum(sum(e.gt_pass_rate == 1.0 for e in episodes))
    agree = all_reduce_sum(sum(e.agree for e in episodes))
    if dump and d.main:  # rank 0's episodes, one JSON line each
        with open(dump, "w") as f:
            f.writelines(json.dumps(episode_record(e, a)) + "\n" for e, a in zip(episodes, alone))
    return {"pass@1_coder_alone": n_alone / max(n, 1), "pass@1_after_turns": final / max(n, 1),
            "agree_rate": agree / max(n, 1), "episodes": int(n),
            # every test the tester wrote in these episodes that the reference passes
            "tester_valid_share": valid / max(written, 1), "tests_written": int(written)}


def evaluate_team(team, r, when, problems=None):
    """evaluate() on the held-out problems (or `problems`), printed, logged with its seconds
    (time/eval, of which time/generate and time/reward: trainer.run_eval's row) and kept in
    the trainer state (summary.json's before_rl / after_rl)."""
    a = r.args
    problems = r.eval_problems if problems is None else problems
    timer = Timer()
    trace = [] if r.sample_log.on else None      # the samples file (--log-samples)
    with timer("eval"):
        res = evaluate_episodes(team, problems, r.d, random.Random(a.seed + 7),
                                eval_config(a), n=a.eval_n, temperature=a.eval_temperature,
                                top_p=a.top_p, budgets=token_budgets(a),
                                workers=a.sandbox_workers,
                                dump=os.path.join(a.out, f"eval_{when}.jsonl"), timer=timer,
                                trace=trace)
    if trace is not None:
        with timer("samples"):
            trainer.log_samples(r, r.step, "eval",
                                candidate_records(trace, None, r.sample_log.limit), when)
    r.say(f"{when.replace('_', ' ')}: {res}")
    r.log({"phase": "eval", "when": when, "step": r.step, **res, **timer.pop()})
    r.state[when] = res
    return res


# The team's pass@1 after its turns is summary.json's pass_at_1_* (trainer.keep_eval).
PASS_KEY = "pass@1_after_turns"


def evaluate_run(team, r, when):
    """The evaluation before / after RL: evaluate_team on the held-out problems and
    (trainer.with_train_sample) on the train sample, the figures kept in r.state
    (trainer.keep_eval); nothing with --eval-n 0."""
    if r.args.eval_n <= 0:
        return
    trainer.keep_eval(r, when, evaluate_team(team, r, when), pass_key=PASS_KEY)
    if trainer.with_train_sample(r, when):
        trainer.keep_eval(r, when, evaluate_team(team, r, f"train_{when}", r.train_eval_problems),
                          "train_", PASS_KEY)


# ---------------------------------------------------------------------------------------------
# The run


REWARD_TERMS = tuple(
    f"{role}_{name}_mean" for role in ("coder", "tester") for name in TERMS[role]
) + ("agree_rate", "pass_at_1")


def reward_term_means(rows):
    """Mean of each reward term over RL steps, for summary.json."""
    if not rows:
        return {}
    return {k: round(sum(r.get(k, 0.0) for r in rows) / len(rows), 4) for k in REWARD_TERMS
            if any(k in r for r in rows)}    # a term never measured (coverage untraced): absent


def train(args):
    """warm start -> eval -> RL steps -> eval -> summary.json (before_rl / after_rl: both
    pass@1s; rl_first_half / rl_second_half: the reward terms' means)."""
    # process group, problems (those RL trains on need a reference), the tester's model
    r = trainer.start(args, "agents", train_filter=lambda ps: with_reference(ps, args.train_data))
    team = make_team(r, None if args.policy == "shared" else trainer.setup_policy(args, r.d)[1:])
    try:
        ckpt = trainer.checkpoint_to_resume(r)    # --resume's checkpoint, None for a fresh run
        if ckpt is None:
            warm_start(team, r)                   # SFT per model on its roles' prompts
            evaluate_run(team, r, "before_rl")    # pass@1 before RL
            if args.eval_only:
                return bookkeeping.finish(r)
        # Each model's optimizer trains its warm-started weights; a resume restores them.
        make_optimizers(team, r)
        trainer.first_step(r, ckpt)               # step-0 checkpoint, or the resumed state
        if ckpt is not None:
            catch_up_coder(team, r)
        # grpo.py's clipped surrogate without a KL term: AT-GRPO trains with no KL (the PettingLLMs
        # paper), so no reference model. With --mini-batches/--epochs above 1 the ratio is
        # taken against the old log-probs of a no-grad pass (as in grpo.py).
        off_policy = flags.off_policy(args)
        loss = grpo.update_loss(eps_low=args.eps_low, eps_high=args.eps_high, beta=0.0,
                                agg=args.agg, off_policy=off_policy)
        cfg, budgets = game_config(args), token_budgets(args)
        for step in trainer.rl_steps(r):
            cands, metrics = play_episodes(       # generate, sandbox rewards
                team, r.train_problems, r.rng, r.d, r.timer, cfg,
                prompts_per_step=args.prompts_per_step,
                epoch_order=rollouts.epoch_order(args.prompt_order, args.seed, step),
                temperature=args.temperature, top_p=args.top_p, budgets=budgets,
                max_train_tests=args.max_train_tests, workers=args.sandbox_workers)
            # Groups: one episode's K candidates at one role step, so never across problems
            # or ranks: (problem, episode, turn, role).
            adv = losses.group_advantages(torch.tensor([c.reward for c in cands]),
                                          scale=args.adv_scale, group_ids=[c.group for c in cands])
            if r.sample_log.on:                   # the samples file: whole episodes
                with r.timer("samples"):
                    trainer.log_samples(r, step + 1, "train",
                                        candidate_records(cands, adv.tolist(), r.sample_log.limit))
            for m, roles in distinct(team):       # one GRPO update per model, weight sync
                metrics.update(update_model(
                    m, roles, cands, adv, loss, r.timer, off_policy=off_policy,
                    **{**r.update_settings(), "pad_id": m.tokenizer.pad_token_id,
                       "max_len": max(budgets[role] for role in roles)}))
            # this rank's mean reward (the progress bar shows rank 0's)
            metrics["reward_mean"] = sum(c.reward for c in cands) / max(len(cands), 1)
            # The reward terms per step, kept in the trainer state (checkpointed) for the summary.
            r.state.setdefault("rl_terms", []).append(
                {k: metrics[k] for k in REWARD_TERMS if k in metrics})
            bookkeeping.log_step(r, step, metrics)    # the metrics row
            if trainer.eval_due(r):               # --eval-every: the held-out curve
                evaluate_team(team, r, f"step_{r.step}")
            bookkeeping.save_step(r, r.step)          # --save-every
        rows = r.state.get("rl_terms", [])
        r.state.update(rl_first_half=reward_term_means(rows[:len(rows) // 2]),
                       rl_second_half=reward_term_means(rows[len(rows) // 2:]))
        evaluate_run(team, r, "after_rl")         # pass@1 after RL
        return bookkeeping.finish(r)                  # summary.json
    finally:
        if team["coder"] is not team["tester"]:
            team["coder"].engine.close()        # finish closes the Run's (the tester's)


# ---------------------------------------------------------------------------------------------
# Flags


PRESETS = flags.merge_presets(flags.COMMON_PRESETS, {
    # CPU default: the shipped base model on the built-in problems.
    # Budgets sized from the measured answers (tiny tokenizer): a reference program is <= 65
    # tokens (mean 26), two ground-truth tests in the tester format <= 94 tokens (mean 82).
    # 2 turns: the fewest in which each role answers the other (module docstring).
    # The engine as grpo.py's (auto: vLLM's CPU build when it starts; per-role runs two in one
    # process): a short arm's generation took 19 s there against 74 s with transformers'
    # generate (bench/results/step-floor). 1 torch thread: HF generate at 2 threads took
    # 5-28 s a call on the loaded 2-core box, at 1: 0.35-1.1 (.notes/agents.md).
    # The built-in set, not the testbed defaults of trainer.py: 250 role SFT steps stop
    # before the 300-400 at which the tiny model learns the testbed's copy skill.
    # lr 5e-5: at 1.5e-4 ten RL steps cost the coder 7.8 points and the system 6.5 (3 seeds
    # each, shared; per-role alike); at 5e-5 the coder held (+1.6) (bench/results/agents-builtin/).
    # K 8 and evaluation at T 0.6 as the public configs; 2 turns, not their 5: K 8 x 2 turns x 2
    # roles on 4 problems is 128 samples a step, GRPO's CPU step (8 x 16), about 50 s on the
    # 2-core machine (5 turns: about 100 s a step, and the base rarely agrees, so the turns
    # past the first repair repeat it from a state it already failed to repair).
    "cpu": dict(train_data="builtin", eval_data="builtin", lr=5e-5, steps=10,
                prompts_per_step=4, group_size=8, sft_batch=16, eval_temperature=0.6,
                eval_n=2, max_new_tokens=64, tester_max_new_tokens=96, max_tests=2,
                max_turns=2, micro_batch=16, cpu_threads=1),
    # AT-GRPO's reported settings at 1.7B (the PettingLLMs paper); 5 turns as the public configs.
    "gpu": dict(out="runs/agents-gpu", max_turns=5, group_size=4, max_new_tokens=4096,
                tester_max_new_tokens=4096, max_tests=8, lr=1e-6, weight_decay=0.01,
                eval_temperature=0.6),
})


def build_parser():
    p = flags.new_parser(
        "agents.py",
        "AT-GRPO: a tester and a coder refine tests and program over turns; GRPO "
        "per (problem, turn, agent). CPU default: the shipped base on the built-in problems.",
    )
    flags.add_common_flags(p, "agents", aggregations=losses.AGGREGATIONS)
    p.set_defaults(reward="fraction")  # the seed's global term: the ground-truth pass rate
    g = p.add_argument_group("AT-GRPO (--group-size is K, the candidates per agent per turn)")
    g.add_argument("--policy", choices=["shared", "per-role"], default="per-role",
                   help="one model for both roles (role in the prompt) or one model per role "
                        "(seed: per-role best)")
    g.add_argument("--max-turns", type=flags.POSITIVE_INT, default=10,
                   help="turns per episode (seed config 10; the public configs and --preset gpu "
                        "5; --preset cpu 2)")
    g.add_argument("--turn-order", choices=sorted(TURN_ORDERS), default="parallel",
                   help="parallel: the public code's order, both act from last turn's state "
                        "(the coder's first prompt is the bare problem); tester-first: the "
                        "documented workflow (the coder sees this turn's tests; needs "
                        "--role-rewards ours); coder-first: the coder acts on last turn's "
                        "tests, the tester then tests its program")
    g.add_argument("--role-rewards", choices=ROLE_REWARDS, default="pettingllms",
                   help="pettingllms: the public code's rewards (coder 2 x its ground-truth "
                        "pass rate; tester the ground-truth pass rate of the coder candidate "
                        "paired with it, its own tests unread); ours: the reference judges the "
                        "tests (coder alpha x g + pass rate on the valid tests; tester alpha x "
                        "g + valid share + catch, trivial and coverage terms: tester_judge.py)")
    g.add_argument("--alpha", type=flags.SHARE, default=0.7,
                   help="--role-rewards ours: weight of the global reward (seed 0.7)")
    g.add_argument("--catch-bonus", type=flags.NON_NEGATIVE, default=1.0,
                   help="--role-rewards ours: tester bonus per (share of) valid test that the "
                        "shown wrong program fails "
                        "(with --adv-scale group this and the other tester weights act only where "
                        "they change a group's rewards by more than an increasing affine map: "
                        "at --group-size 2, only by flipping which of the two is ahead)")
    g.add_argument("--trivial-penalty", type=flags.NON_NEGATIVE, default=0.5,
                   help="--role-rewards ours: tester penalty per (share of) duplicate test or "
                        "valid test every "
                        "candidate program passes while one is wrong (< 1 keeps a valid trivial "
                        "test above an invalid one)")
    g.add_argument("--coverage-weight", type=flags.NON_NEGATIVE, default=0.5,
                   help="--role-rewards ours: tester bonus times the reference's line coverage "
                        "under its valid tests")
    g.add_argument("--max-tests", type=flags.POSITIVE_INT, default=2,
                   help="tests asked for and kept per tester reply")
    g.add_argument("--tester-max-new-tokens", type=flags.POSITIVE_INT, default=96,
                   help="the tester's response budget (--max-new-tokens is the coder's)")
    g.add_argument("--variant", choices=VARIANTS, default="none",
                   help="none: PettingLLMs' game; a1-cure: a variant arm, NOT PettingLLMs: "
                        "Code-A1's tester (inputs only, outputs filled by the reference in "
                        "training, by the majority of the coder's K programs at evaluation) and "
                        "CURE's selection (the program passing most tests; the tester paid for "
                        "the wrong programs its tests reject); needs --role-rewards pettingllms")
    flags.add_adv_scale_flag(g)
    g.add_argument("--repair-sft", type=int, default=1, choices=[0, 1],
                   help="1: the warm start also trains turn-1 prompts (a wrong program or a "
                        "wrong test shown; answer: the right program / tests); 0: turn-0 only")
    return p


# The weights only --role-rewards ours reads.
OURS_ONLY = ("alpha", "catch_bonus", "trivial_penalty", "coverage_weight")


def parse_args(argv=None):
    parser = build_parser()
    # --model tiny: 250 role SFT steps (stopping before the testbed's copy skill, see PRESETS)
    args = flags.parse_flags(parser, PRESETS, argv, tiny_sft_steps=250)
    if args.overlap_reward:
        parser.error("--overlap-reward: agents.py's turns wait for the sandbox's verdicts "
                     "before the next generation, so there is nothing to overlap; drop it")
    if args.tis_cap > 0:
        parser.error(f"--tis-cap {args.tis_cap}: agents.py does not keep the sampler's "
                     "log-probs of its candidates, so it cannot correct for them; drop --tis-cap")
    if args.variant != "none" and args.role_rewards != "pettingllms":
        parser.error(f"--variant {args.variant} pays the coder pettingllms' 2 g and the tester "
                     "for rejecting wrong programs; drop --role-rewards ours")
    if args.role_rewards == "pettingllms":
        if args.turn_order == "tester-first":
            parser.error("--turn-order tester-first: the pettingllms rewards pay each tester "
                         "candidate its paired coder candidate's pass rate, and that coder acts "
                         "after the tester's branch is chosen; add --role-rewards ours")
        ours_only = [f"--{name.replace('_', '-')}" for name in OURS_ONLY
                     if getattr(args, name) != parser.get_default(name)]
        if ours_only:
            parser.error(f"{', '.join(ours_only)}: weights of --role-rewards ours, which the "
                         "pettingllms rewards do not read; add --role-rewards ours")
    return args


def game_config(args, **overrides):
    """The GameConfig of these flags (K = --group-size)."""
    return GameConfig(**{
        "max_turns": args.max_turns, "k": args.group_size, "role_rewards": args.role_rewards,
        "alpha": args.alpha,
        "catch_bonus": args.catch_bonus, "trivial_penalty": args.trivial_penalty,
        "coverage_weight": args.coverage_weight, "max_tests": args.max_tests,
        "turn_order": args.turn_order, "timeout": args.test_timeout, "reward": args.reward,
        "variant": args.variant, **overrides})


def eval_config(args):
    """The game at evaluation: one candidate a role step (pass@1 of one sample); the a1-cure
    variant keeps K, whose majority fills the tests and among which the tests select."""
    if args.variant == "none":
        return game_config(args, k=1)
    return game_config(args, fill_from="majority")


def token_budgets(args):
    """{role: its response budget}: --tester-max-new-tokens, --max-new-tokens (the coder's)."""
    return {"tester": args.tester_max_new_tokens, "coder": args.max_new_tokens}


def main(argv=None):
    with flags.entry_point():
        train(parse_args(argv))


if __name__ == "__main__":
    main()
