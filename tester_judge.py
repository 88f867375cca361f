"""The tester's judge: what a test the tester writes is, and what each reply of the game earns.

AT-GRPO's tester writes unit tests and its coder a program; agents.py plays the turns. This
module turns one reply into its reward: it parses the tester's tests, runs programs on tests in
the sandbox (every (program, tests) pair a role step needs, in one run_batch), and computes
the rewards: the public code's (the tester paid by its coder's ground-truth pass rate), or
ours, the seed's final = alpha * global + local with the reference solution judging the tests
(the public code never reads it).

Rewards of one candidate, two schemes (GameConfig.role_rewards, agents.py's --role-rewards;
every term is logged under both):
  pettingllms, the public code's (PettingLLMs a054fb1):
          coder   r_C = 2 * g          g = the ground-truth pass rate of its program (the public
                                       code adds its match ratio to itself, code_agent.py:164)
          tester  r_T = g(paired coder)  the ground-truth pass rate of the coder candidate of the
                                       same index in the same turn (the public code samples K
                                       rollouts a problem, each with one coder and one tester;
                                       its second term, the tests against a golden program, is
                                       never computed there: golden_code is never set, so 0)
          The tester's reward does not read its own tests: in parallel order its tests of turn t
          meet the coder only at turn t + 1.
  ours (the seed's final = alpha * global + local, the reference solution judging the tests):
  coder   g      = pass rate of its program on the ground-truth tests (0 without code;
                   --reward binary: 1 only when it passes them all)
          l_C    = pass rate on the VALID tests of the tester's current tests (0 if none)
          r_C    = alpha * g + l_C                                   (alpha = 0.7)
  tester, for its n tests (n = 0: l_T = 0), judged against P = the program it was shown
  (the chosen program of the coder step before it; none at turn 0 in tester-first and
  parallel order) and the K coder candidates of that step:
          valid_t   = the reference solution passes test t (its verdict: the sandbox's plain run
                      under the normal limits, never the coverage-traced run, which is ~3x slower)
          dup_t     = test t repeats the input of an earlier test of the same reply
          caught_t  = valid_t and not dup_t and P fails t, counted only when P has code and is
                      wrong on the ground truth (g(P) < 1): the test found a real bug
          trivial_t = dup_t, or (valid_t and every coder candidate with code passes t while one
                      of them is wrong on the ground truth): the test tells no program apart
          cov       = |U_{t valid, not dup} lines(ref, t)| / |executable lines of ref|: the
                      reference's line coverage under the valid tests (the lines of the second,
                      traced run the sandbox makes of each test, with more time than the limit)
          l_T    = valid/n + catch_bonus * caught/n + coverage_weight * cov
                   - trivial_penalty * trivial/n
          r_T    = alpha * g(P) + l_T  (g(P) is one number for all K candidates of a group, so
                   it moves neither advantages nor the branch choice; kept for the seed's form)
  Defaults catch_bonus 1.0, trivial_penalty 0.5, coverage_weight 0.5: per test, for a buggy
  program, a catching test earns 1 + 1 = 2, a valid trivial one 1 - 0.5 = 0.5, an invalid one
  0 (discriminating > trivial > invalid: trivial_penalty < 1 keeps a right test worth writing).
  Group-std advantages do not change under an increasing affine map of a group's rewards, so
  a weight acts only where it changes a group by more than that: at K = 2 only by flipping
  which of the pair is ahead; at any K, not when one candidate alone earns it and the others
  tie (2 vs 0, 0, 0 normalises as 1 vs 0, 0, 0).

Every test is judged on its own: each program runs every test of a set, also after one timed
out (run_jobs), so no verdict, share or pass rate depends on which other tests are in the set
or their order (the ground truth too, except under --reward binary, which needs pass/fail).
Coverage is line coverage, not branch coverage (`else:` has no line of its own). A problem
without a reference solution (LiveCodeBench) has no valid test: only evaluation plays it.

The a1-cure variant (agents.py's --variant; Code-A1's tester and CURE's selection, NOT the
PettingLLMs game): the tester writes inputs only; their expected outputs come from the
reference solution in training, from the majority output of the coder's K candidates at
evaluation (majority_output; an input without an output is dropped); the final program is the
candidate that passes the most of these tests (select_by_tests); the tester's reward is
rejection_reward (per test: 0 if a right program fails it, else the share of the wrong
programs it rejects; the mean over its tests). The coder's reward stays pettingllms' 2 g.

Two kinds of test: standard I/O ({"input": stdin, "output": expected stdout}, written as
`**Test Input:**` / `**Test Output:**` blocks) and call-based ({"input": [args], "output":
value}, written as `assert f(<literals>) == <literal>` lines).
"""
import ast
import re

import data
import sandbox

# ---------------------------------------------------------------------------------------------
# The tester's tests: parsing and formatting, both kinds

_INPUT_MARK = re.compile(r"\**\s*test\s+input\s*:?\s*\**\s*:?", re.IGNORECASE)
_FENCE = r"```(?:[A-Za-z0-9_+-]*\n)?(.*?)```"  # optional language tag, then the body
_BLOCK = re.compile(
    r"\s*" + _FENCE + r"\s*\**\s*test\s+output\s*:?\s*\**\s*:?\s*" + _FENCE,
    re.DOTALL | re.IGNORECASE,
)
_INPUT_ONLY = re.compile(r"\s*" + _FENCE, re.DOTALL)
_ASSERT = re.compile(r"^\s*assert\b.*$", re.MULTILINE)


def parse_tests(text, max_tests=8, fn_name=None, inputs_only=False):
    """Tests from a tester reply -> (tests, n_failed); never raises. fn_name None: stdio blocks
    (parse_stdio_tests); else `assert fn_name(...) == ...` lines (parse_call_tests).
    inputs_only (the a1-cure variant's tester): inputs without outputs, each test's "output"
    None (an input block alone; a call line `fn_name(...)` without assert)."""
    if not isinstance(text, str):
        return [], 1
    return (
        parse_stdio_tests(text, max_tests, inputs_only)
        if fn_name is None
        else parse_call_tests(text, fn_name, max_tests, inputs_only)
    )


def parse_stdio_tests(text, max_tests=8, inputs_only=False):
    """'**Test Input:**\\n```\\n1 2\\n```\\n**Test Output:**\\n```\\n3\\n```'
    -> ([{"input": "1 2\\n", "output": "3"}], 0). Each 'Test Input' marker starts a block; a
    block without an input fence followed by an output marker and fence counts as failed. A
    reply with no marker at all counts as one failed block (it said something, just not tests).
    inputs_only: a block needs only its input fence (what follows it is ignored); output None.
    """
    starts = [m.end() for m in _INPUT_MARK.finditer(text)]
    if not starts:
        return [], 1
    tests, failed = [], 0
    for start, end in zip(starts, starts[1:] + [len(text)]):
        m = (_INPUT_ONLY if inputs_only else _BLOCK).match(text, start, end)
        if m is None:
            failed += 1
        elif len(tests) < max_tests:
            tests.append({"input": m.group(1).strip() + "\n",
                          "output": None if inputs_only else m.group(2).strip()})
    return tests, failed


def _call_lines(fn_name):
    """Lines that call fn_name (or Solution().fn_name) first thing: the inputs-only format."""
    return re.compile(rf"^\s*(?:Solution\(\)\.)?{re.escape(fn_name)}\s*\(.*$", re.MULTILINE)


def parse_call_tests(text, fn_name, max_tests=8, inputs_only=False):
    """'assert add(1, 2) == 3' -> ([{"input": [1, 2], "output": 3}], 0): every line that starts
    with `assert` is one test (inside or outside a fence); it counts as failed unless it is
    `assert fn_name(<literals>) == <literal>` (or `Solution().fn_name(...)`), positional
    arguments only. No assert line at all counts as one failure.
    inputs_only: every line that starts with the call, 'add(1, 2)' -> {"input": [1, 2],
    "output": None}."""
    lines = [m.group(0) for m in (_call_lines(fn_name) if inputs_only else _ASSERT).finditer(text)]
    if not lines:
        return [], 1
    tests, failed = [], 0
    for line in lines:
        test = _call_test(line, fn_name, inputs_only)
        if test is None:
            failed += 1
        elif len(tests) < max_tests:
            tests.append(test)
    return tests, failed


def _call_test(line, fn_name, inputs_only=False):
    try:
        node = ast.parse(line.strip()).body[0]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if inputs_only:
        call, expected = (node.value if isinstance(node, ast.Expr) else None), None
    else:
        cmp = node.test if isinstance(node, ast.Assert) else None
        if not (isinstance(cmp, ast.Compare) and len(cmp.ops) == 1
                and isinstance(cmp.ops[0], ast.Eq)):
            return None
        call, expected = cmp.left, cmp.comparators[0]
    if not isinstance(call, ast.Call) or call.keywords:
        return None
    func = call.func
    name = (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else None
    )
    if name != fn_name:
        return None
    try:
        args = [ast.literal_eval(a) for a in call.args]
        output = None if expected is None else ast.literal_eval(expected)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return {"input": args, "output": output}


def _call_text(test, fn_name, method=False):
    target = f"Solution().{fn_name}" if method else fn_name
    return f"{target}({', '.join(repr(a) for a in test['input'])})"


def format_tests(tests, fn_name=None, method=False, inputs_only=False):
    """The inverse of parse_tests (the tester's own format), for prompts and SFT answers."""
    if fn_name is not None:
        lines = [_call_text(t, fn_name, method) if inputs_only else
                 f"assert {_call_text(t, fn_name, method)} == {t['output']!r}" for t in tests]
        return "```python\n" + "\n".join(lines) + "\n```" if lines else ""
    return "\n".join(
        f"**Test Input:**\n```\n{t['input'].rstrip()}\n```"
        + ("" if inputs_only else f"\n**Test Output:**\n```\n{t['output'].rstrip()}\n```")
        for t in tests
    )


def duplicates(tests):
    """Per test, True when an earlier test of the list has the same input (stdio: the same
    whitespace-separated tokens; call-based: equal arguments)."""
    seen, out = set(), []
    for t in tests:
        key = " ".join(t["input"].split()) if isinstance(t["input"], str) else repr(t["input"])
        out.append(key in seen)
        seen.add(key)
    return out



# ---------------------------------------------------------------------------------------------
# Reward terms: pure functions of flags and numbers, so the tests can check the equations


def validity(ref_result, n_tests):
    """Per test, True when the reference solution passes it (a test that disagrees is wrong).
    ref_result: the reference's run (every test run on its own, see run_jobs). Its verdicts come
    from plain runs under the normal limits also when it is a coverage job (the sandbox traces
    a second run of each test for the lines), never from a traced run: the tracer makes the
    reference about 3x slower, so a traced verdict would call a test invalid whose input takes
    the reference a third of the time limit. Tests without a result (none after a compile
    error) are not valid."""
    if ref_result is None:
        return [False] * n_tests
    got = [t.status == "pass" for t in ref_result.tests][:n_tests]
    return got + [False] * (n_tests - len(got))


def caught_flags(valid, dup, shown_passed, shown_wrong):
    """caught_t = valid_t and not dup_t and the shown program fails t, only when that program
    exists and is wrong on the ground truth (shown_wrong); else nothing is caught."""
    if not shown_wrong:
        return [False] * len(valid)
    return [v and not d and not p for v, d, p in zip(valid, dup, shown_passed)]


def trivial_flags(valid, dup, candidates_passed, any_wrong):
    """trivial_t = dup_t or (valid_t and every candidate program passes t and one of them is
    wrong on the ground truth). candidates_passed: per candidate program WITH code, per test."""
    discriminable = any_wrong and bool(candidates_passed)
    return [d or (v and discriminable and all(cp[t] for cp in candidates_passed))
            for t, (v, d) in enumerate(zip(valid, dup))]


def coverage_share(ref_result, counted, n_lines):
    """|U lines the reference executed on the counted tests| / n_lines (0 when nothing counts).
    ref_result: the reference's coverage job (coverage=True): each test's lines come from the
    sandbox's traced run of it; a counted test whose coverage is unknown (its traced run hit a
    limit or behaved otherwise than the plain one) adds no lines."""
    if ref_result is None or not n_lines:
        return 0.0
    lines = set()
    for t, use in zip(ref_result.tests, counted):
        if use:
            lines |= t.executed_lines
    return len(lines) / n_lines


def coder_local(passed, valid):
    """Pass rate on the tester's valid tests; 0 when the tester wrote no valid test."""
    n_valid = sum(valid)
    return sum(p and v for p, v in zip(passed, valid)) / n_valid if n_valid else 0.0


def tester_local(
    valid, caught, trivial, coverage, catch_bonus=1.0, trivial_penalty=0.5, coverage_weight=0.5
):
    """l_T = valid/n + catch_bonus * caught/n + coverage_weight * cov - trivial_penalty * trivial/n
    -> dict of l_T ("local") and its shares; all 0 when n = 0. coverage None: not measured
    (the reference ran untraced, traces_reference): the term stays None and adds nothing."""
    n = len(valid)
    if n == 0:
        return {
            "local": 0.0,
            "valid_share": 0.0,
            "catch_share": 0.0,
            "trivial_share": 0.0,
            "coverage": None if coverage is None else 0.0,
        }
    shares = {"valid_share": sum(valid) / n, "catch_share": sum(caught) / n,
              "trivial_share": sum(trivial) / n, "coverage": coverage}
    local = (
        shares["valid_share"]
        + catch_bonus * shares["catch_share"]
        + coverage_weight * (coverage or 0.0)
        - trivial_penalty * shares["trivial_share"]
    )
    return {"local": local, **shares}


def global_term(pass_rate, kind="fraction"):
    """g: the ground-truth pass rate ("fraction", the seed's) or 1 only when all pass ("binary")."""
    return pass_rate if kind == "fraction" else float(pass_rate == 1.0)


def final_reward(global_reward, local_reward, alpha=0.7):
    return alpha * global_reward + local_reward


ROLE_REWARDS = ("pettingllms", "ours")


def pettingllms_coder_reward(global_reward):
    """r_C = 2 * g: the public code adds the program's ground-truth match ratio to itself."""
    return 2.0 * global_reward


def pettingllms_tester_reward(paired_coder_global):
    """r_T = g of the paired coder candidate (+ the tests' match ratio against a golden
    program, which the public code never computes: 0)."""
    return paired_coder_global


# The a1-cure variant (not PettingLLMs' game): the tester writes inputs, programs fill the
# outputs, the tests select the final program, the tester is paid for rejecting wrong programs.


def majority_output(outputs):
    """The output most candidate programs produced on one input; None when none produced one.
    outputs: per candidate, in candidate order, its output (hashable, e.g. its text) or None.
    Ties: the output of the earliest candidate among the tied.
    ["3", "4", "3", None] -> "3";  ["4", "3", "3", "4"] -> "4";  [None, None] -> None."""
    counts = {}
    for out in outputs:
        if out is not None:
            counts[out] = counts.get(out, 0) + 1
    # a dict keeps first-seen order and max keeps the first maximum: the earliest wins a tie
    return max(counts, key=counts.get) if counts else None


def select_by_tests(pass_counts):
    """Index of the program that passes the most tests; ties: the earliest. [1, 3, 3] -> 1."""
    return max(range(len(pass_counts)), key=lambda i: (pass_counts[i], -i))


def rejection_reward(failed, right, n_tests):
    """The variant's tester reward (CURE's, simplified): for candidate programs c with code,
        s_t = 0                                     if some right program fails test t
            = |{c wrong : c fails t}| / |{c wrong}|   else (0 when none is wrong)
        r_T = (1 / n) sum_t s_t                     (0 when n = 0)
    right: g(c) = 1 (c passes the whole ground truth); wrong: g(c) < 1.
    failed: [candidate][test] -> True when the candidate fails the test (shape K x n);
    right: [candidate] -> bool. A test two right programs pass that rejects 2 of 4 wrong
    ones scores 0.5; one that a right program fails scores 0."""
    if n_tests == 0:
        return 0.0
    wrong = [f for f, r in zip(failed, right) if not r]
    scores = [0.0 if any(f[t] for f, r in zip(failed, right) if r)
              else sum(f[t] for f in wrong) / len(wrong) if wrong else 0.0
              for t in range(n_tests)]
    return sum(scores) / n_tests


# ---------------------------------------------------------------------------------------------
# Sandbox jobs: every (program, tests) pair a step needs, run once


def job_key(code, tests, problem, coverage=False, every_test=True):
    """A hashable name of one sandbox job (repr keeps tuples and lists apart)."""
    return code, problem.fn_name, problem.source, repr(tests), coverage, every_test


def run_jobs(jobs, run_batch, timeout, memory_mb):
    """jobs: (code, tests, problem, coverage[, every_test]) tuples -> {job_key: Result}, ONE
    run_batch call for the unique ones (none when there is nothing to run). The problem gives
    the function's name and the comparison rules of its benchmark (data.sandbox_job).

    every_test (default True): the sandbox runs every test of the job, also after one timed out
    (stop_after_timeout=False), so each test's verdict is its own: it does not depend on which
    other tests share the job or their order. False lets the sandbox stop at the first timeout
    (the rest count as timeouts): only for jobs whose pass/fail alone counts. A looping program
    costs up to one timeout per test this way: the price of per-test verdicts.
    coverage=True: the sandbox's coverage job, whose verdicts still come from a plain run under
    the normal limits; the lines come from a second, traced run that the sandbox gives more
    time (sandbox.py's docstring).

    Because every_test verdicts are each test's own, the every_test jobs of one program on one
    problem (with the same coverage) run as ONE sandbox job on the union of their distinct
    tests, and each gets its part of the Result (sandbox.part_of): a test that several test
    sets share runs once, and the per-job cost (a job process, the compile) is paid once per
    program instead of once per test set."""
    unique = {}
    for job in jobs:
        code, tests, problem, cov, every = (*job, True) if len(job) == 4 else job
        if code is not None and tests:
            key = job_key(code, tests, problem, cov, every)
            unique.setdefault(key, (code, tests, problem, cov, every))
    merged = {}    # one sandbox job: (code, problem, coverage, every) -> its distinct tests
    parts = {}     # each unique job: its sandbox job's key and its tests' places there
    for key, (c, t, p, cov, every) in unique.items():
        mkey = (c, p.id, p.fn_name, p.source, cov) if every else key
        m = merged.setdefault(mkey, {"job": (c, p, cov, every), "tests": {}})
        parts[key] = (mkey, [m["tests"].setdefault(repr(test), (len(m["tests"]), test))[0]
                             for test in t])
    batch = [
        data.sandbox_job(p, c, [test for _, test in m["tests"].values()], timeout=timeout,
                         memory_mb=memory_mb, coverage=cov, stop_after_timeout=not every)
        for m in merged.values() for c, p, cov, every in [m["job"]]
    ]
    ran = dict(zip(merged, run_batch(batch) if batch else []))
    return {key: sandbox.part_of(ran[mkey], places, coverage=unique[key][3])
            if unique[key][4] else ran[mkey] for key, (mkey, places) in parts.items()}


def result_of(results, code, tests, problem, coverage=False, every_test=True):
    """The sandbox Result of that job in run_jobs' `results`; None without code or tests."""
    if code is None or not tests:
        return None
    return results.get(job_key(code, tests, problem, coverage, every_test))


def passed_and_mismatches(result, tests, fn_name):
    """Per test: passed?, and the mismatches shown next step.

    The sandbox returns per-test results only for the tests it ran: none after a compile
    error. A test without a result FAILED (with the run's status); zipping the short list
    would leave `passed` empty and all([]) would call a program that does not even compile
    "agreeing" with the tester.
    """
    def shown_input(t):
        return t["input"] if fn_name is None else _call_text(t, fn_name)

    def shown_expected(t):
        return t["output"] if fn_name is None else repr(t["output"])

    if result is None:  # no program: nothing passes
        return [False] * len(tests), [
            {"input": shown_input(t), "expected": shown_expected(t), "actual": "(no program)"}
            for t in tests
        ]
    passed, mismatches = [], []
    for i, test in enumerate(tests):
        res = result.tests[i] if i < len(result.tests) else None
        passed.append(res is not None and res.status == "pass")
        if res is None:
            actual = (
                f"{result.status}: {result.error}" if result.error else f"{result.status} (not run)"
            )
        elif res.status == "wrong_answer":
            actual = res.output
        elif res.status != "pass":
            actual = f"{res.status}: {res.stderr or res.output}"
        if not passed[-1]:
            mismatches.append(
                {"input": shown_input(test), "expected": shown_expected(test), "actual": actual}
            )
    return passed, mismatches


def reference_of(problem):
    """The reference solution (solutions[0]) that judges the tester's tests; None without one
    (LiveCodeBench): then no test counts as valid, which only evaluation can live with."""
    return problem.solutions[0] if problem.solutions else None


def traces_reference(cfg):
    """Whether the tester's reward reads the reference's line coverage: only role_rewards
    "ours" with coverage_weight > 0. Otherwise the reference runs untraced (a traced test costs
    about 4.8x a plain one, bench/results/traced-verdicts) and the coverage term is None."""
    return cfg.role_rewards == "ours" and cfg.coverage_weight > 0


def tester_jobs(problem, shown, candidates, test_sets, cfg):
    """Per test set: the reference (its verdicts give validity; a coverage job, whose traced
    runs give the lines, when traces_reference(cfg)), the shown program and every coder
    candidate; every test of a set run and judged on its own (run_jobs).
    shown: the program the tester was shown (None: none); candidates: [(code, g)] of the coder
    step before it."""
    p, coverage = problem, traces_reference(cfg)
    programs = list(dict.fromkeys([shown] + [c for c, _ in candidates]))
    out = []
    for ts in test_sets:
        out.append((reference_of(p), ts, p, coverage))
        out += [(c, ts, p, False) for c in programs]
    return out


def fill_programs(problem, candidates, fill_from):
    """The programs whose outputs fill the variant tester's inputs: "reference" (training):
    the reference solution alone ([None] without one: every input is dropped); "majority"
    (evaluation, no reference): the coder candidates [(code, g)] with code."""
    if fill_from == "reference":
        return [reference_of(problem)]
    return [c for c, _ in candidates if c is not None]


def probe_tests(inputs, fn_name):
    """Inputs as sandbox tests whose output is read, not judged: a placeholder expected output
    (the sandbox needs one; its verdict, pass or wrong_answer, is not read)."""
    return [{"input": t["input"], "output": "" if fn_name is None else None} for t in inputs]


def produced_output(test_result, fn_name):
    """What a program printed (standard I/O; trailing whitespace of each line dropped) or
    returned (call-based: its repr) on one probe test, or None: it did not run through (any
    verdict but pass / wrong_answer), its output may be cut (the sandbox keeps SHOWN_OUTPUT
    characters), or the value is not a Python literal (an error message in its place)."""
    if test_result is None or test_result.status not in ("pass", "wrong_answer"):
        return None
    out = test_result.output
    if len(out) >= sandbox.SHOWN_OUTPUT:
        return None
    if fn_name is None:
        return "\n".join(line.rstrip() for line in out.rstrip().split("\n"))
    try:
        ast.literal_eval(out)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    return out


def fill_jobs(problem, programs, input_sets):
    """Every filling program x every set of inputs, as run_jobs jobs (probe_tests)."""
    return [(c, probe_tests(inputs, problem.fn_name), problem, False)
            for inputs in input_sets for c in programs if inputs]


def filled_tests(problem, programs, inputs, results):
    """Inputs -> (tests, n_dropped): each input with the majority output of `programs` on it
    (majority_output; one program: its own output); an input on which none produced an output
    (produced_output None: a crash, a timeout) is dropped. results: run_jobs' answer to
    fill_jobs."""
    fn, probes = problem.fn_name, probe_tests(inputs, problem.fn_name)
    outputs = []
    for c in programs:
        res = result_of(results, c, probes, problem)
        ran = res.tests if res is not None else []
        outputs.append([produced_output(ran[i] if i < len(ran) else None, fn)
                        for i in range(len(inputs))])
    tests = []
    for i, t in enumerate(inputs):
        out = majority_output([o[i] for o in outputs])
        if out is not None:
            tests.append({"input": t["input"], "output": out if fn is None
                          else ast.literal_eval(out)})
    return tests, len(inputs) - len(tests)


def gt_every_test(reward):
    """Whether the ground truth runs every test: the "fraction" reward is the pass rate, which
    must not depend on the order of the tests; "binary" needs pass/fail only, so there the
    sandbox may stop at the first timeout (the pass rate logged then counts the tests after
    it as failed)."""
    return reward != "binary"


def coder_jobs(problem, tests, codes, every_gt_test=True):
    """Every candidate program x the ground truth and x the tester's current `tests` (every
    test of these run on its own; the ground truth too unless every_gt_test is False)."""
    p = problem
    return [
        job
        for c in codes
        for job in ((c, p.tests, p, False, every_gt_test),
                    (c, tests, p, False, True))
    ]


# ---------------------------------------------------------------------------------------------
# One reply judged: a tester's test set, a coder's program
#
# cfg: the game's settings (agents.GameConfig); these read role_rewards, alpha, catch_bonus,
# trivial_penalty, coverage_weight and reward. results: run_jobs' answer to tester_jobs /
# coder_jobs.


def judge_test_set(problem, tests, shown, shown_g, candidates, results, cfg, paired_g=None):
    """One tester candidate's tests -> (valid, passed, mismatches, terms): per test, the
    reference passes it / the shown program passes it; the shown program's failures (for the
    next prompt); every term of both schemes (module docstring) and the reward of
    cfg.role_rewards. shown: the program the tester was shown (None: none) and shown_g its
    ground-truth pass rate; candidates: [(code, g)] of the coder step before it; paired_g: the
    ground-truth pass rate of its paired coder candidate (pettingllms; None: none paired).
    cfg.variant a1-cure: the reward is rejection_reward over `candidates` (also a term)."""
    p = problem
    reference = reference_of(p)
    shown_wrong = shown is not None and shown_g < 1.0
    with_code = [(c, g) for c, g in candidates if c is not None]
    any_wrong = any(g < 1.0 for _, g in with_code)
    traced = traces_reference(cfg)
    ref = result_of(results, reference, tests, p, coverage=traced)
    valid = validity(ref, len(tests))
    dup = duplicates(tests)
    passed, mismatches = passed_and_mismatches(
        result_of(results, shown, tests, p), tests, p.fn_name
    )
    caught = caught_flags(valid, dup, passed, shown_wrong)
    cands = [
        passed_and_mismatches(result_of(results, c, tests, p), tests, p.fn_name)[0]
        for c, _ in with_code
    ]
    trivial = trivial_flags(valid, dup, cands, any_wrong)
    cov = None     # not measured: the reference ran untraced
    if traced:
        n_lines = len(sandbox.executable_lines(reference)) if reference is not None else 0
        cov = coverage_share(ref, [v and not d for v, d in zip(valid, dup)], n_lines)
    terms = tester_local(
        valid, caught, trivial, cov, cfg.catch_bonus, cfg.trivial_penalty, cfg.coverage_weight
    )
    g = global_term(shown_g, cfg.reward) if shown is not None else 0.0
    paired = global_term(paired_g, cfg.reward) if paired_g is not None else 0.0
    reward = (pettingllms_tester_reward(paired) if cfg.role_rewards == "pettingllms"
              else final_reward(g, terms["local"], cfg.alpha))
    if cfg.variant != "none":   # candidates: the coder candidates its tests meet (agents.py)
        terms["rejection"] = rejection_reward([[not x for x in cp] for cp in cands],
                                              [g == 1.0 for _, g in with_code], len(tests))
        reward = terms["rejection"]
    terms.update(
        {
            "global": g,
            "paired_coder_global": paired,
            "n_tests": len(tests),
            "duplicate_share": sum(dup) / len(tests) if tests else 0.0,
            "reward": reward,
        }
    )
    return valid, passed, mismatches, terms


def judge_program(problem, code, tests, valid, results, cfg):
    """One coder candidate's program (None: no code block) -> (gt_pass_rate, passed,
    mismatches, terms): its ground-truth pass rate; per test of the tester's `tests`, passed
    (valid: the reference passes it); its failures there (for the next prompt); g, l_C and
    the reward of cfg.role_rewards (2 g, or alpha * g + l_C)."""
    p = problem
    gt = result_of(results, code, p.tests, p, every_test=gt_every_test(cfg.reward))
    gt_pass_rate = gt.pass_rate if gt is not None else 0.0
    passed, mismatches = passed_and_mismatches(
        result_of(results, code, tests, p), tests, p.fn_name
    )
    local, g = coder_local(passed, valid), global_term(gt_pass_rate, cfg.reward)
    reward = (pettingllms_coder_reward(g) if cfg.role_rewards == "pettingllms"
              else final_reward(g, local, cfg.alpha))
    terms = {"global": g, "local": local, "reward": reward}
    return gt_pass_rate, passed, mismatches, terms
