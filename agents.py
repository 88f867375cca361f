"""AT-GRPO's tester and coder: two agents that refine a program and its unit tests over turns.

Method (PettingLLMs / AT-GRPO, code tasks; ../shared/docs/methods.md section 4)
  Each turn both agents act from the same state. The tester writes test cases (input and
  expected output); the coder writes a program that reads stdin and prints to stdout. The
  program is run on the tester's tests; the mismatches (input, tester's expected, actual) are
  shown to both agents next turn, each asked whether the code or the test is wrong. The
  episode ends when the program passes all the tester's tests ("agree"), or after max_turns.

Rewards, per candidate, every term logged:
  global         g = pass rate of the coder's program on the ground-truth tests
  tester local   l_T = valid / n_tests          (valid: the reference solution passes the test)
                       + catch_bonus * caught / n_tests
                 caught = valid tests the coder's program fails, counted only when the program
                 is wrong on the ground truth (g < 1): a useful test catches a wrong program.
  coder local    l_C = pass rate of the program on the tester's VALID tests (0 if none)
  final          r = alpha * g + local          (alpha = 0.7)

Tree-structured sampling: at turn t each agent samples K candidates from the same state.
  Every candidate is scored in its OWN deep copy of the episode state (a "branch") and is a
  training sample with group key (problem_id, episode, turn, role); the episode continues from
  the best branch object itself. The K x K pairing problem (whose tests judge which program?)
  is cut in this order, each step using only what is already fixed:
    1. tester branch choice j* = the test set with the highest valid share, then the most valid
       tests (validity needs no program);
    2. coder candidate i is scored against test set j*; i* = argmax of the coder's reward;
    3. tester candidate j is scored against program i* (its global term and catch bonus).
  The chosen branch is coder branch i* (program i*, tests j*), which equals tester branch j*.
  All candidate programs run on all candidate test sets, the reference runs on every test set,
  and every program runs on the ground truth, in ONE sandbox run_batch per turn for all
  episodes (identical jobs are run once).

The public implementation's four defects, each pinned by a test in tests/test_agents.py:
  later rewards read from stale copies (we keep the chosen branch object, no copy back);
  all tester candidates scored on one shared copy (each has its own deepcopy); a group key
  that merged problems (the key holds the problem id and the episode index, never a division);
  a tester reward without the reference solution (validity = the reference passes the test).

Interfaces and simplifications
  * generate functions: `generate(prompts: list[list[dict]]) -> list[str]`, chat message lists
    in, one text out per prompt (or objects with .text, e.g. engine Completions, kept whole in
    Sample.output so the trainer has the sampled token ids). K candidates = each prompt repeated K times in one call (a
    sampling engine gives K different texts). The loop never sees a tokenizer: the trainer
    renders the messages (data.render_prompt) both to generate and to train. Shared or
    per-role policy is the caller's choice: pass the same function twice, or two.
  * stdio problems only: call-based problems (fn_name set) are skipped and counted; their
    tests are function calls, not something the tester can write as stdin/stdout.
  * "agree" uses ALL the tester's tests, valid or not, and needs at least one: deciding
    validity needs the reference solution, which an agent at test time does not have.
  * Tests are written as blocks `**Test Input:**` + fenced block, `**Test Output:**` + fenced
    block (the seed's format); at most max_tests per reply, broken blocks counted.
  * Turn-level rewards only (no discounting across turns), as in the seed.

Training (`[torchrun ...] agents.py --model tiny [--policy shared|per-role]`, on grpo.py)
  Warm start: grpo.sft(examples=warm_start_pairs) per model on its roles' turn-0 prompts and
  (--repair-sft) turn-1 prompts from repair_states: a wrong program or a wrong test, with its answer.
  Step: play prompts_per_step episodes (each rank its slice, so groups never span ranks) ->
  group advantages over (problem, episode, turn, role) -> one GRPO update per distinct model
  -> weight sync. Eval: pass@1 (k = 1) of the coder's turn-0 program alone (the single-agent
  baseline, same model) and of the final program after max_turns turns with the tester.
  CPU preset: K = 2, 2 turns, 2 tests per tester reply, 64/96 new tokens (coder/tester), HF
  engine, grpo's --cpu-threads 1 (on the shared 2-core box 2 threads made generation 10-30x slower).
  GPU preset: the paper's K = 4, 5 turns, 4096 tokens, lr 1e-6.
"""
import copy
import json
import re
from dataclasses import dataclass, field

ROLES = ("tester", "coder")

CODER_SYSTEM = (
    "You are the coder. Write a complete Python 3 program that reads from standard input and "
    "writes to standard output. Reply with the whole program in one ```python code block."
)
TESTER_SYSTEM = (
    "You are the tester. Write unit tests for the problem: for each test, write\n"
    "**Test Input:**\n```\n<stdin>\n```\n**Test Output:**\n```\n<expected stdout>\n```\n"
    "Write between 1 and {max_tests} tests. Expected outputs must be exactly right."
)
MAX_SHOWN_MISMATCHES = 3  # keeps prompts short for small models
MAX_SHOWN_CHARS = 300


# ---------------------------------------------------------------------------------------------
# Parsing the tester's tests

_INPUT_MARK = re.compile(r"\**\s*test\s+input\s*:?\s*\**\s*:?", re.IGNORECASE)
_FENCE = r"```(?:[A-Za-z0-9_+-]*\n)?(.*?)```"  # optional language tag, then the body
_BLOCK = re.compile(
    r"\s*" + _FENCE + r"\s*\**\s*test\s+output\s*:?\s*\**\s*:?\s*" + _FENCE, re.DOTALL | re.IGNORECASE
)


def parse_tests(text, max_tests=8):
    """Tests from a tester reply -> (tests, n_failed_blocks); never raises.

    '**Test Input:**\\n```\\n1 2\\n```\\n**Test Output:**\\n```\\n3\\n```' -> ([{"input": "1 2\\n",
    "output": "3"}], 0). Each 'Test Input' marker starts a block; a block without an input
    fence followed by an output marker and fence counts as failed. A reply with no marker at
    all counts as one failed block (the tester said something, just not tests).
    """
    if not isinstance(text, str):
        return [], 1
    starts = [m.end() for m in _INPUT_MARK.finditer(text)]
    if not starts:
        return [], 1
    tests, failed = [], 0
    for start, end in zip(starts, starts[1:] + [len(text)]):
        m = _BLOCK.match(text, start, end)
        if m is None:
            failed += 1
        elif len(tests) < max_tests:
            tests.append({"input": m.group(1).strip() + "\n", "output": m.group(2).strip()})
    return tests, failed


def format_tests(tests):
    """The inverse of parse_tests, for showing a tester its previous tests."""
    return "\n".join(
        f"**Test Input:**\n```\n{t['input'].rstrip()}\n```\n**Test Output:**\n```\n{t['output'].rstrip()}\n```"
        for t in tests
    )


# ---------------------------------------------------------------------------------------------
# Episode state and prompts


@dataclass
class EpisodeState:
    """One problem's episode. A branch is a deepcopy of this with one candidate applied."""

    problem: object  # data.Problem
    episode: int  # index in the run_episodes batch: separates repeats of one problem
    turn: int = 0  # turns completed
    program: str | None = None  # coder's current program (None: no code block extracted)
    tests: list = field(default_factory=list)  # tester's current tests
    valid: list = field(default_factory=list)  # per test: the reference solution passes it
    passed: list = field(default_factory=list)  # per test: the program passes it
    mismatches: list = field(default_factory=list)  # failed tests: input, expected, actual
    gt_pass_rate: float = 0.0  # the program on the ground-truth tests
    agree: bool = False
    done: bool = False
    history: list = field(default_factory=list)  # per turn: the chosen branch's rewards


def _clip(text):
    text = str(text)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "...(truncated)"


def format_mismatches(mismatches):
    shown = mismatches[:MAX_SHOWN_MISMATCHES]
    parts = [
        f"Input:\n```\n{_clip(m['input']).rstrip()}\n```\nTester's expected output:\n```\n"
        f"{_clip(m['expected']).rstrip()}\n```\nProgram's actual output:\n```\n{_clip(m['actual']).rstrip()}\n```"
        for m in shown
    ]
    if len(mismatches) > len(shown):
        parts.append(f"({len(mismatches) - len(shown)} more mismatches not shown)")
    return "\n\n".join(parts)


def _round_report(state):
    """What both agents see after turn 0: the last program, the tests, the mismatches."""
    if state.program is None:
        program = "The coder's last reply had no ```python code block."
    else:
        program = f"The coder's last program:\n```python\n{state.program}\n```"
    if not state.tests:
        tests = "The tester's last reply had no parsable tests."
    elif state.program is None:
        tests = "So it could not be run on the tester's tests."
    elif state.mismatches:
        tests = "It failed these of the tester's tests:\n\n" + format_mismatches(state.mismatches)
    else:
        tests = "It passed all of the tester's tests."
    return program + "\n\n" + tests


def coder_messages(state):
    from data import problem_statement

    user = problem_statement(state.problem)
    if state.turn > 0:
        user += (
            "\n\n" + _round_report(state) + "\n\nEither the program or the test is wrong. If the "
            "program is wrong, fix it; if the test is wrong, keep your program. Reply with the "
            "complete program."
        )
    return [{"role": "system", "content": CODER_SYSTEM}, {"role": "user", "content": user}]


def tester_messages(state, max_tests=8):
    from data import problem_statement

    user = problem_statement(state.problem)
    if state.turn > 0:
        user += "\n\nYour last tests:\n" + (format_tests(state.tests) or "(none parsed)")
        user += (
            "\n\n" + _round_report(state) + "\n\nEither the program or the test is wrong. Fix "
            "the tests that are wrong and keep the right ones. Reply with the full list of tests."
        )
    system = TESTER_SYSTEM.format(max_tests=max_tests)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------------------------------------
# Rewards: pure functions of numbers, so the tests can check the equations directly


def validity(ref_result, n_tests):
    """Per test, True when the reference solution passes it (a test that disagrees is wrong)."""
    if ref_result is None:
        return [False] * n_tests
    return [t.status == "pass" for t in ref_result.tests][:n_tests] + [False] * max(
        0, n_tests - len(ref_result.tests)
    )


def coder_local(passed, valid):
    """Pass rate on the tester's valid tests; 0 when the tester wrote no valid test."""
    n_valid = sum(valid)
    return sum(p and v for p, v in zip(passed, valid)) / n_valid if n_valid else 0.0


def tester_local(passed, valid, gt_pass_rate, catch_bonus=0.0):
    """(valid + catch_bonus * caught) / n_tests -> (local, valid_share, catch_share)."""
    n = len(valid)
    if n == 0:
        return 0.0, 0.0, 0.0
    valid_share = sum(valid) / n
    caught = sum(v and not p for p, v in zip(passed, valid)) if gt_pass_rate < 1.0 else 0
    catch_share = caught / n
    return valid_share + catch_bonus * catch_share, valid_share, catch_share


def final_reward(global_reward, local_reward, alpha=0.7):
    return alpha * global_reward + local_reward


# ---------------------------------------------------------------------------------------------
# Sandbox jobs: every (program, tests) pair a turn needs, run once


def _job_key(code, tests):
    return code, json.dumps(tests, sort_keys=True)


def run_jobs(keys, run_batch, timeout, memory_mb):
    """{(code, tests_json): Result} for the unique keys, in ONE run_batch call."""
    unique = list(dict.fromkeys(keys))
    jobs = [
        {"code": c, "tests": json.loads(t), "fn_name": None, "timeout": timeout,
         "memory_mb": memory_mb, "coverage": False}
        for c, t in unique
    ]
    results = run_batch(jobs) if jobs else []
    return dict(zip(unique, results))


def turn_job_keys(state, codes, test_sets):
    """Reference x every test set, every program x ground truth, every program x test set."""
    reference = state.problem.solutions[0]
    keys = [_job_key(reference, ts) for ts in test_sets if ts]
    for code in codes:
        if code is None:
            continue
        keys.append(_job_key(code, state.problem.tests))
        keys += [_job_key(code, ts) for ts in test_sets if ts]
    return keys


def _passed_and_mismatches(result, tests):
    """Per tester test: passed?, and the mismatches shown next turn.

    The sandbox returns per-test results only for the tests it ran: none after a compile
    error, none after a timeout. A test without a result FAILED (with the run's status);
    zipping the short list would leave `passed` empty and all([]) would call a program that
    does not even compile "agreeing" with the tester.
    """
    if result is None:  # no program or no tests: nothing passes
        return [False] * len(tests), [
            {"input": t["input"], "expected": t["output"], "actual": "(no program)"} for t in tests
        ]
    passed, mismatches = [], []
    for i, test in enumerate(tests):
        res = result.tests[i] if i < len(result.tests) else None
        passed.append(res is not None and res.status == "pass")
        if res is None:
            actual = f"{result.status}: {result.error}" if result.error else f"{result.status} (not run)"
        elif res.status == "wrong_answer":
            actual = res.output
        elif res.status != "pass":
            actual = f"{res.status}: {res.stderr or res.output}"
        if not passed[-1]:
            mismatches.append({"input": test["input"], "expected": test["output"], "actual": actual})
    return passed, mismatches


def make_branch(state, code, tests, valid, results):
    """A deepcopy of state with (program, tests) applied and their execution results read in."""
    # The problem is read-only and can be large: share it instead of copying it per branch.
    branch = copy.deepcopy(state, {id(state.problem): state.problem})
    branch.program, branch.tests, branch.valid = code, tests, list(valid)
    gt = results.get(_job_key(code, state.problem.tests)) if code is not None else None
    branch.gt_pass_rate = gt.pass_rate if gt is not None else 0.0
    run = results.get(_job_key(code, tests)) if code is not None and tests else None
    branch.passed, branch.mismatches = _passed_and_mismatches(run, tests)
    branch.agree = bool(tests) and all(branch.passed)
    branch.turn = state.turn + 1
    return branch


def coder_terms(branch, alpha):
    local = coder_local(branch.passed, branch.valid)
    return {"global": branch.gt_pass_rate, "local": local, "reward": final_reward(branch.gt_pass_rate, local, alpha)}


def tester_terms(branch, alpha, catch_bonus):
    local, valid_share, catch_share = tester_local(branch.passed, branch.valid, branch.gt_pass_rate, catch_bonus)
    return {
        "global": branch.gt_pass_rate, "local": local, "valid_share": valid_share,
        "catch_share": catch_share, "n_tests": len(branch.tests),
        "reward": final_reward(branch.gt_pass_rate, local, alpha),
    }


def score_turn(state, codes, test_sets, results, alpha=0.7, catch_bonus=0.0):
    """K coder and K tester candidates from one state -> (chosen branch, coder scored, tester scored).

    Scored lists hold (branch, terms) per candidate, in candidate order. See the module
    docstring for the pairing order (j* by validity, coders vs j*, testers vs i*).
    """
    reference = state.problem.solutions[0]
    valids = [validity(results.get(_job_key(reference, ts)) if ts else None, len(ts)) for ts in test_sets]
    # The tester's own criterion (valid share), then more valid tests; ties: the earlier candidate.
    j_best = max(range(len(test_sets)), key=lambda j: (sum(valids[j]) / max(len(valids[j]), 1), sum(valids[j])))
    coder_branches = [make_branch(state, c, test_sets[j_best], valids[j_best], results) for c in codes]
    coder_scored = [(b, coder_terms(b, alpha)) for b in coder_branches]
    i_best = max(range(len(codes)), key=lambda i: coder_scored[i][1]["reward"])
    tester_branches = [make_branch(state, codes[i_best], ts, v, results) for ts, v in zip(test_sets, valids)]
    tester_scored = [(b, tester_terms(b, alpha, catch_bonus)) for b in tester_branches]
    chosen = coder_branches[i_best]  # the branch object itself: later turns read THIS state
    chosen.done = chosen.agree
    chosen.history.append({"coder": coder_scored[i_best][1], "tester": tester_scored[j_best][1],
                           "agree": chosen.agree, "coder_choice": i_best, "tester_choice": j_best})
    return chosen, coder_scored, tester_scored


# ---------------------------------------------------------------------------------------------
# The turn loop


@dataclass
class Sample:
    """One candidate = one training sample. All samples of a group saw the same messages."""

    role: str
    group: tuple  # (problem_id, episode, turn, role)
    messages: list  # the prompt, as chat messages
    response: str
    reward: float
    terms: dict  # every reward term of this candidate
    output: object = None  # what generate returned (a str, or an engine Completion with token ids)


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
        raise ValueError(f"generate returned {len(texts)} texts for {len(prompts) * k} prompts; it must return one text per prompt.")
    return [texts[i * k:(i + 1) * k] for i in range(len(prompts))]


def group_ids(samples):
    """Integer group ids for grpo.group_advantages, from the samples' (problem, episode, turn, role) keys."""
    index = {}
    return [index.setdefault(s.group, len(index)) for s in samples]


def _new_stats():
    return {
        "episodes": 0, "skipped_call_based": 0, "turns": 0, "generate_calls": 0, "sandbox_calls": 0,
        "sandbox_jobs": 0, "tester_blocks_failed": 0, "tester_replies_without_tests": 0,
        "coder_replies_without_code": 0, "tests_written": 0, "tests_valid": 0,
    }


def _extract_all(coder_texts, tester_texts, max_tests, stats):
    from data import extract_code

    codes = [extract_code(response_text(t)) for t in coder_texts]
    test_sets = []
    for text in tester_texts:
        tests, failed = parse_tests(response_text(text), max_tests)
        stats["tester_blocks_failed"] += failed
        stats["tester_replies_without_tests"] += not tests
        test_sets.append(tests)
    stats["coder_replies_without_code"] += sum(c is None for c in codes)
    return codes, test_sets


def _samples_for(state, scored, role, messages, texts):
    key = (state.problem.id, state.episode, state.turn, role)
    return [Sample(role, key, messages, response_text(out), terms["reward"], terms, out)
            for (_, terms), out in zip(scored, texts)]


def _log_terms(stats, role, scored):
    for _, terms in scored:
        for name in ("global", "local", "reward") + (("valid_share", "catch_share") if role == "tester" else ()):
            stats.setdefault(f"{role}_{name}_sum", 0.0)
            stats[f"{role}_{name}_sum"] += terms[name]
        stats[f"{role}_samples"] = stats.get(f"{role}_samples", 0) + 1


def run_turn(states, coder_generate, tester_generate, k, cfg, stats, run_batch):
    """One turn for the active states -> (new states, samples). Two generate calls, one sandbox call."""
    tester_prompts = [tester_messages(s, cfg["max_tests"]) for s in states]
    coder_prompts = [coder_messages(s) for s in states]
    tester_texts = generate_candidates(tester_generate, tester_prompts, k)
    coder_texts = generate_candidates(coder_generate, coder_prompts, k)
    stats["generate_calls"] += 2
    extracted = [_extract_all(c, t, cfg["max_tests"], stats) for c, t in zip(coder_texts, tester_texts)]
    keys = [key for s, (codes, test_sets) in zip(states, extracted) for key in turn_job_keys(s, codes, test_sets)]
    results = run_jobs(keys, run_batch, cfg["timeout"], cfg["memory_mb"])
    stats["sandbox_calls"] += 1
    stats["sandbox_jobs"] += len(results)
    new_states, samples = [], []
    for i, (state, (codes, test_sets)) in enumerate(zip(states, extracted)):
        chosen, coder_scored, tester_scored = score_turn(state, codes, test_sets, results, cfg["alpha"], cfg["catch_bonus"])
        samples += _samples_for(state, tester_scored, "tester", tester_prompts[i], tester_texts[i])
        samples += _samples_for(state, coder_scored, "coder", coder_prompts[i], coder_texts[i])
        _log_terms(stats, "tester", tester_scored)
        _log_terms(stats, "coder", coder_scored)
        stats["tests_written"] += sum(len(ts) for ts in test_sets)
        stats["tests_valid"] += sum(sum(b.valid) for b, _ in tester_scored)
        new_states.append(chosen)
    return new_states, samples


def _summarize(stats, episodes):
    for role in ROLES:
        n = stats.get(f"{role}_samples", 0)
        for name in ("global", "local", "reward", "valid_share", "catch_share"):
            total = stats.pop(f"{role}_{name}_sum", None)
            if total is not None:
                stats[f"{role}_{name}_mean"] = total / max(n, 1)
    n = max(len(episodes), 1)
    stats["agree_rate"] = sum(e.agree for e in episodes) / n
    stats["mean_turns"] = sum(e.turn for e in episodes) / n
    stats["final_gt_pass_rate"] = sum(e.gt_pass_rate for e in episodes) / n
    stats["pass_at_1"] = sum(e.gt_pass_rate == 1.0 for e in episodes) / n
    return stats


def run_episodes(problems, coder_generate, tester_generate, max_turns=5, k=2, alpha=0.7, catch_bonus=0.0,
                 max_tests=8, timeout=5.0, memory_mb=512, run_batch=None):
    """Play the tester/coder game on a batch of problems -> (episodes, samples, stats).

    episodes: the final EpisodeState of each stdio problem (its program, tests, per-turn history).
    samples:  every candidate of every turn as a Sample; group with group_ids(samples).
    stats:    counts (extraction failures, sandbox calls, ...) and the mean of every reward term.
    Episodes that agree stop: they are not prompted again.
    """
    if run_batch is None:
        from sandbox import run_batch
    cfg = {"alpha": alpha, "catch_bonus": catch_bonus, "max_tests": max_tests, "timeout": timeout, "memory_mb": memory_mb}
    stats = _new_stats()
    states = []
    for i, problem in enumerate(problems):
        if not problem.solutions:
            raise ValueError(f"Problem {problem.id} has no reference solution; the tester's reward needs solutions[0].")
        if problem.fn_name is not None:
            stats["skipped_call_based"] += 1
        else:
            states.append(EpisodeState(problem, episode=i))
    stats["episodes"] = len(states)
    samples = []
    for _ in range(max_turns):
        active = [i for i, s in enumerate(states) if not s.done]
        if not active:
            break
        new_states, turn_samples = run_turn([states[i] for i in active], coder_generate, tester_generate, k, cfg, stats, run_batch)
        for i, new_state in zip(active, new_states):
            states[i] = new_state
        samples += turn_samples
        stats["turns"] += 1
    return states, samples, _summarize(stats, states)


# ---------------------------------------------------------------------------------------------
# Training: `torchrun agents.py --model tiny`, on grpo.py's machinery (imported, never copied).
# Loop order per step: play episodes (generate + sandbox rewards) -> group advantages over
# (problem, episode, turn, role) -> one GRPO update per policy -> weight sync into its engine.

AGENT_PRESETS = {
    # CPU default: tiny model, built-in stdio problems, a few minutes on a shared 2-core box.
    # Budgets sized from the measured answers (tiny tokenizer): a reference program is <= 65
    # tokens (mean 26), two ground-truth tests in the tester format <= 96 tokens (mean 84).
    # grpo's --cpu-threads 1 matters: on a contended 2-core machine 2 threads made HF generate
    # 10-30x slower. The HF engine: the figures in .notes/agents.md were measured with it, and
    # two vLLM engines in one process (per-role) are untested.
    "cpu": dict(out="runs/agents", steps=10, prompts_per_step=4, sft_steps=250, sft_batch=16,
                eval_n=2, max_new_tokens=64, tester_max_new_tokens=96, max_tests=2,
                max_turns=2, k=2, micro_batch=16, engine="hf"),
    # AT-GRPO's reported settings at 1.7B (methods.md section 4).
    "gpu": dict(out="runs/agents-gpu", max_turns=5, k=4, max_new_tokens=4096,
                tester_max_new_tokens=4096, max_tests=8, lr=1e-6, weight_decay=0.01,
                eval_temperature=0.6),
}


def build_parser():
    import grpo

    p = grpo.build_parser()
    p.prog = "agents.py"
    p.description = ("AT-GRPO: a tester and a coder refine tests and program over turns; GRPO per "
                     "(problem, turn, agent). CPU default: tiny model on the built-in stdio problems.")
    g = p.add_argument_group("AT-GRPO")
    g.add_argument("--policy", choices=["shared", "per-role"], default="per-role",
                   help="one model for both roles (role in the prompt) or one model per role (seed: per-role best)")
    g.add_argument("--max-turns", type=int, default=2, help="turns per episode (seed 10, public configs 5)")
    g.add_argument("--k", type=int, default=2, help="candidates per agent per turn, the GRPO group size (paper 4)")
    g.add_argument("--alpha", type=float, default=0.7, help="weight of the global reward (seed 0.7)")
    g.add_argument("--catch-bonus", type=float, default=0.0, help="tester bonus per valid test that fails a wrong program")
    g.add_argument("--max-tests", type=int, default=2, help="tests asked for and kept per tester reply")
    g.add_argument("--tester-max-new-tokens", type=int, default=96,
                   help="the tester's response budget (--max-new-tokens is the coder's)")
    g.add_argument("--repair-sft", type=int, default=1, choices=[0, 1],
                   help="1: the warm start also trains turn-1 prompts (a wrong program or a wrong test shown; "
                        "answer: the right program / tests); 0: turn-0 prompts only")
    return p


def parse_args(argv=None):
    import grpo

    parser = build_parser()
    pre, _ = parser.parse_known_args(argv)
    # Ours override grpo.py's where both set a key (out, max_new_tokens, lr, ...).
    parser.set_defaults(**{**grpo.PRESETS[pre.preset], **AGENT_PRESETS[pre.preset]})
    return parser.parse_args(argv)


@dataclass
class Policy:
    """One trained model: the FSDP policy, its optimizer and its generation engine."""

    tokenizer: object
    policy: object
    ref: object
    engine: object
    optimizer: object = None
    scheduler: object = None


def make_policies(args, d):
    """{"tester": Policy, "coder": Policy}: the same object twice when shared."""
    import grpo

    n = 1 if args.policy == "shared" else 2
    made = [Policy(*grpo.setup_policy(args, d)[1:]) for _ in range(n)]
    return {"tester": made[0], "coder": made[-1]}


def distinct(policies):
    """(policy, roles) pairs, one per distinct model."""
    out = {}
    for role, pol in policies.items():
        out.setdefault(id(pol), (pol, []))[1].append(role)
    return list(out.values())


def max_new_tokens(args, role):
    return args.tester_max_new_tokens if role == "tester" else args.max_new_tokens


def engine_generate(pol, args, rng, temperature, role):
    """A generate function for run_episodes: render, sample one completion per prompt."""
    import data

    def generate(prompts):
        texts = [data.render_prompt(pol.tokenizer, m) for m in prompts]
        outs = pol.engine.generate(texts, n=1, temperature=temperature, top_p=args.top_p,
                                   max_new_tokens=max_new_tokens(args, role), seed=rng.randrange(2**31))
        return [o[0] for o in outs]

    return generate


def repair_states(problems, max_tests, run_batch=None, timeout=2.0, memory_mb=512):
    """Turn-1 states with a known right answer, so the warm start also covers the prompts
    the agents see after a disagreement -> [(state, right program, right tests)]:
      wrong program: the next problem's reference on the first max_tests ground-truth tests
                     (the coder should write the reference, the tester keep its tests);
      wrong test:    the reference on those tests with the first expected output replaced by
                     another test's output (the coder should keep its program, the tester fix it).
    Mismatches come from the sandbox (one run_batch); a state whose program passes anyway is dropped."""
    problems = [p for p in problems if p.fn_name is None and p.solutions and p.tests]
    if run_batch is None:
        from sandbox import run_batch
    cases = []
    for i, p in enumerate(problems):
        gt = [dict(t) for t in p.tests[:max_tests]]
        wrong = problems[(i + 1) % len(problems)].solutions[0]
        bad = [dict(t) for t in gt]
        bad[0]["output"] = next((t["output"] for t in p.tests if t["output"].strip() != gt[0]["output"].strip()), "0")
        cases += [(EpisodeState(p, i), wrong, gt, p.solutions[0], gt), (EpisodeState(p, i), p.solutions[0], bad, p.solutions[0], gt)]
    keys = [k for state, code, tests, _, _ in cases for k in turn_job_keys(state, [code], [tests])]
    results = run_jobs(keys, run_batch, timeout, memory_mb)
    out = []
    for state, code, tests, right_code, right_tests in cases:
        branch = make_branch(state, code, tests, [], results)
        if not branch.agree:
            out.append((branch, right_code, right_tests))
    return out


def warm_start_pairs(problems, roles, max_tests, repairs=()):
    """SFT pairs (messages, answer): the turn-0 prompt of each role -> every reference program
    (coder) / the first max_tests ground-truth tests in the tester's format (tester); and for
    each repair_states entry, its turn-1 prompt -> the right program / the right tests."""
    import data

    pairs = []
    for p in problems:
        state = EpisodeState(p, 0)
        if "coder" in roles:
            pairs += [(coder_messages(state), data.format_answer(s)) for s in p.solutions]
        if "tester" in roles:
            pairs.append((tester_messages(state, max_tests), format_tests(p.tests[:max_tests])))
    for state, program, tests in repairs:
        if "coder" in roles:
            pairs.append((coder_messages(state), data.format_answer(program)))
        if "tester" in roles:
            pairs.append((tester_messages(state, max_tests), format_tests(tests)))
    return pairs


def warm_start_examples(tokenizer, problems, roles, max_tests, repairs=()):
    """warm_start_pairs tokenized into grpo.Samples (answer + EOS), for grpo.sft(examples=)."""
    import data
    import grpo

    out = []
    for messages, answer in warm_start_pairs(problems, roles, max_tests, repairs):
        ids = tokenizer(data.render_prompt(tokenizer, messages))["input_ids"]
        out.append(grpo.Sample(ids, tokenizer(answer)["input_ids"] + [tokenizer.eos_token_id], 1.0))
    return out


def tokenizer_texts(problems=None, max_tests=2):
    """Texts for the tiny tokenizer (model.tiny_corpus) so that tester prompts and answers get
    merged tokens too: both roles' turn-0 prompts and answers, and one turn-1 prompt per role
    (a round report with a mismatch), rendered without a chat template as the tiny model is."""
    import data

    problems = [p for p in (problems or data.builtin_problems()) if p.fn_name is None and p.solutions]
    texts = []
    for messages, answer in warm_start_pairs(problems, ROLES, max_tests):
        texts += [data.render_prompt(None, messages), answer]
    for p in problems:
        tests = p.tests[:max_tests]
        state = EpisodeState(p, 0, turn=1, program=p.solutions[0], tests=tests, passed=[False] * len(tests),
                             mismatches=[{"input": t["input"], "expected": t["output"], "actual": "0"} for t in tests])
        texts += [data.render_prompt(None, coder_messages(state)), data.render_prompt(None, tester_messages(state, max_tests))]
    return texts


def torch_optim(policy, lr, weight_decay):
    import torch

    return torch.optim.AdamW(policy.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)


def training_samples(samples, roles, tokenizer, advantages):
    """run_episodes samples of these roles -> grpo.Sample (prompt ids, sampled ids, advantage)."""
    import data
    import grpo

    out = []
    for s, adv in zip(samples, advantages.tolist()):
        if s.role in roles:
            ids = tokenizer(data.render_prompt(tokenizer, s.messages))["input_ids"]
            out.append(grpo.Sample(ids, s.output.token_ids, adv, None, s.reward, key=s.group))
    return out


def rl_step(policies, problems, rng, args, d):
    """Play one batch of episodes, then one GRPO update of every distinct policy.
    The returned stats are this rank's episodes (rank 0's are logged)."""
    import random

    import grpo
    import torch

    # Every rank draws the same global batch and sampling seed (same rng), then takes its own
    # slice and seed: ranks play different episodes, and each episode's groups stay on its rank.
    per_rank = max(1, args.prompts_per_step // d.world)
    batch = [problems[rng.randrange(len(problems))] for _ in range(per_rank * d.world)][d.rank::d.world]
    sampler = random.Random(rng.randrange(2**31) + d.rank)
    gens = {r: engine_generate(policies[r], args, sampler, args.temperature, r) for r in ROLES}
    _, samples, stats = run_episodes(batch, gens["coder"], gens["tester"], args.max_turns, args.k, args.alpha,
                                     args.catch_bonus, args.max_tests, args.test_timeout)
    # Groups are one episode's K candidates at one turn: they never span problems or ranks.
    adv = grpo.group_advantages(torch.tensor([s.reward for s in samples]), scale=args.adv_scale,
                                group_ids=[s.group for s in samples])
    for pol, roles in distinct(policies):
        train = training_samples(samples, roles, pol.tokenizer, adv)
        st = grpo.train_on_samples(pol.policy, pol.optimizer, train, grpo.grpo_loss_fn(args, pol.ref),
                                   micro_batch=args.micro_batch, agg=args.agg,
                                   max_len=max(max_new_tokens(args, r) for r in roles),
                                   pad_id=pol.tokenizer.pad_token_id, device=d.device,
                                   max_grad_norm=args.max_grad_norm, temperature=args.temperature)
        pol.scheduler.step()
        grpo.sync_weights(pol.policy, pol.engine, d)
        stats["/".join(roles) + "_grad_norm"] = st["grad_norm"]
    return stats


def episode_record(e):
    """One finished episode as JSON: what was played and how it scored (eval dumps)."""
    return {"problem": e.problem.id, "turns": e.turn, "agree": e.agree, "gt_pass_rate": e.gt_pass_rate,
            "coder_alone_global": e.history[0]["coder"]["global"] if e.history else None,
            "program": e.program, "tests": e.tests, "valid": e.valid, "passed": e.passed}


def evaluate(policies, problems, args, d, rng, dump=None):
    """pass@1 on the ground truth, over eval_n episodes per problem (k = 1):
    the coder alone (its turn-0 program: the single-agent baseline, same model and prompt) and
    the final program after up to max_turns turns with the tester."""
    from model import all_reduce_sum

    mine = [p for p in problems for _ in range(args.eval_n)][d.rank::d.world]
    gens = {r: engine_generate(policies[r], args, rng, args.eval_temperature, r) for r in ROLES}
    episodes, _, stats = run_episodes(mine, gens["coder"], gens["tester"], args.max_turns, 1, args.alpha,
                                      args.catch_bonus, args.max_tests, args.test_timeout)
    n = all_reduce_sum(len(episodes))
    alone = all_reduce_sum(sum(e.history[0]["coder"]["global"] == 1.0 for e in episodes))
    final = all_reduce_sum(sum(e.gt_pass_rate == 1.0 for e in episodes))
    agree = all_reduce_sum(sum(e.agree for e in episodes))
    if dump and d.main:  # rank 0's episodes, one JSON line each
        with open(dump, "w") as f:
            f.writelines(json.dumps(episode_record(e)) + "\n" for e in episodes)
    return {"pass@1_coder_alone": alone / max(n, 1), "pass@1_after_turns": final / max(n, 1),
            "agree_rate": agree / max(n, 1), "episodes": int(n)}


REWARD_TERMS = ("coder_global_mean", "coder_local_mean", "coder_reward_mean", "tester_local_mean",
                "tester_valid_share_mean", "tester_catch_share_mean", "tester_reward_mean", "agree_rate", "pass_at_1")


def reward_term_means(rows):
    """Mean of each reward term over RL steps (rank 0's episodes), for summary.json."""
    return {k: round(sum(r.get(k, 0.0) for r in rows) / len(rows), 4) for k in REWARD_TERMS} if rows else {}


def train(args):
    import json
    import os
    import random
    import time

    import grpo
    from model import init_distributed, seed_everything, warmup_cosine

    d = init_distributed()
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log, say = grpo.MetricsLog(args.out, d.main), (print if d.main else (lambda *a, **k: None))
    t0 = time.time()
    train_p, eval_p = grpo.load_problem_sets(args)
    train_p, eval_p = [p for p in train_p if p.fn_name is None], [p for p in eval_p if p.fn_name is None]
    policies = make_policies(args, d)
    say(f"[agents] {args.policy} policy, {len(train_p)} stdio train / {len(eval_p)} eval problems, "
        f"K={args.k}, max_turns={args.max_turns}")
    # Turn-1 warm-start examples (--repair-sft): without them the model has only seen turn-0
    # prompts, and in our first runs every right turn-0 program was rewritten wrong at turn 1.
    repairs = repair_states(train_p, args.max_tests, timeout=args.test_timeout) if args.repair_sft and args.max_turns > 1 else []
    for pol, roles in distinct(policies):
        # grpo.sft's warm start on this model's roles (its own AdamW, then a fresh one for RL).
        grpo.sft(pol.policy, pol.tokenizer, train_p, args, d, lambda row, r="/".join(roles): log({**row, "roles": r}),
                 examples=warm_start_examples(pol.tokenizer, train_p, roles, args.max_tests, repairs))
        grpo.sync_weights(pol.policy, pol.engine, d)
        pol.optimizer = torch_optim(pol.policy, args.lr, args.weight_decay)
        pol.scheduler = warmup_cosine(pol.optimizer, args.warmup_steps, args.steps, args.min_lr_ratio)
    rng = random.Random(args.seed)
    summary = {"before": evaluate(policies, eval_p, args, d, random.Random(args.seed + 7),
                                  os.path.join(args.out, "eval_before.jsonl"))}
    say(f"[agents] before RL: {summary['before']}")
    log({"phase": "eval", "when": "before_rl", **summary["before"]})
    history = []
    for step in range(args.steps):
        t = time.time()
        stats = rl_step(policies, train_p, rng, args, d)
        history.append(stats)
        log({"phase": "rl", "step": step + 1, "seconds": round(time.time() - t, 1), **stats})
        say(f"[agents] step {step + 1}: coder reward {stats.get('coder_reward_mean', 0):.3f} tester reward "
            f"{stats.get('tester_reward_mean', 0):.3f} agree {stats['agree_rate']:.2f} pass@1 {stats['pass_at_1']:.2f}")
    summary["after"] = evaluate(policies, eval_p, args, d, random.Random(args.seed + 7),
                                os.path.join(args.out, "eval_after.jsonl"))
    say(f"[agents] after RL: {summary['after']}")
    log({"phase": "eval", "when": "after_rl", **summary["after"]})
    half = len(history) // 2
    summary.update(policy=args.policy, steps=args.steps, wall_seconds=round(time.time() - t0, 1),
                   rl_first_half=reward_term_means(history[:half]), rl_second_half=reward_term_means(history[half:]))
    if d.main:
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    for pol, _ in distinct(policies):
        pol.engine.close()  # vLLM's teardown also ends the process group it joined (engines.py)
    return summary


def main(argv=None):
    import grpo
    grpo.run_entry_point(train, parse_args, argv)


if __name__ == "__main__":
    main()
