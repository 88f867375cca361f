"""What the judge knows of a job before any test runs: the job checked, the code compiled.

The parent compiles each program here (a compile error is a verdict that needs no worker) and
finds what the harness must know: which lines can run (coverage reports no other), whether the
program binds its function itself (a LeetCode prelude name does not count), whether it opens
files (their buffers are flushed at the end, as the interpreter does).
Prelude: a call-based program is a LeetCode-style fragment that its judge completes with
imports (`List`, `defaultdict`, `heapq` are used without importing them). Its globals start with
LiveCodeBench's import list (PRELUDE_STAR names, then PRELUDE_MODULES; builtins are never
shadowed). It is put in the namespace, not prepended as text, so line numbers and coverage are
those of the submitted code. Standard-I/O programs get no prelude: they are whole scripts.
"""

from __future__ import annotations

import ast
import hashlib
import json
import pickle
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from infra.sandbox_wire import STDERR_TAIL

OUTPUT_LIMIT_MIN = 1 << 20  # stdout cap per test: max(this, 2 * len(expected) + 64 KiB) bytes
SOLUTION_FILENAME = "<solution>"
# LeetCode-style call-based code is a fragment that the judge completes with its own imports
# (LiveCodeBench's harness: `from X import *` for these, then `import X`). Put the same names in
# the program's globals, not as source text, so line numbers and coverage stay exact.
PRELUDE_STAR = ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math",
                "random", "statistics", "itertools", "functools", "operator", "typing")
PRELUDE_MODULES = PRELUDE_STAR + ("io", "sys", "json", "array", "fractions", "decimal")


def check_job(job: dict, index: int) -> dict:
    job = dict(fn_name=None, timeout=4.0, memory_mb=1024, coverage=False,
               stop_after_timeout=True, stop_at_first_failure=False, source=None,
               preamble=None) | dict(job)
    tests = job.get("tests")
    if not isinstance(job.get("code"), str):
        raise ValueError(f"job {index}: 'code' must be a string of Python source.")
    if not isinstance(tests, list) or not tests:
        raise ValueError(f"job {index}: 'tests' must be a non-empty list of "
                         "{'input': ..., 'output': ...} dicts (drop problems without tests).")
    if job["source"] is not None and not isinstance(job["source"], str):
        raise ValueError(f"job {index}: 'source' must be a data source's name (see "
                         "sandbox.RULES) or None.")
    if job["preamble"] is not None and not isinstance(job["preamble"], str):
        raise ValueError(f"job {index}: 'preamble' must be a string of Python source (the "
                         "benchmark's prompt, run before the program) or None.")
    # Coverage is FGO's mask, the union over every test: each one runs.
    job["stop_at_first_failure"] = bool(job["stop_at_first_failure"]) and not job["coverage"]
    job["check"] = any(isinstance(t, dict) and "check" in t for t in tests)
    if job["check"]:
        if len(tests) != 1 or not isinstance(tests[0]["check"], str):
            raise ValueError(f"job {index}: a check test {{'check': code}} is the job's only "
                             "test (its check(candidate) holds every assert), with code a string.")
        if not isinstance(job["fn_name"], str):
            raise ValueError(f"job {index}: a check test needs fn_name, the function that "
                             "check(candidate) gets as candidate.")
        tests = []
    for t in tests:
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise ValueError(f"job {index}: every test needs an 'input' and an 'output' key.")
        if job["fn_name"] is None and not (isinstance(t["input"], str)
                                           and isinstance(t["output"], str)):
            raise ValueError(f"job {index}: standard-I/O tests need string input and output "
                             "(join lists of lines with '\\n'); pass fn_name for call-based tests.")
        if job["fn_name"] is not None and not isinstance(t["input"], (list, tuple)):
            raise ValueError(f"job {index}: call-based tests need 'input' as a list of arguments.")
    if job["fn_name"] is not None and not isinstance(job["fn_name"], str):
        raise ValueError(f"job {index}: 'fn_name' must be a string or None.")
    if not (isinstance(job["timeout"], (int, float)) and 0 < job["timeout"] < 1e6):
        raise ValueError(f"job {index}: 'timeout' must be a positive number of seconds.")
    if not (isinstance(job["memory_mb"], int) and 0 < job["memory_mb"] < 1 << 30):
        raise ValueError(f"job {index}: 'memory_mb' must be a positive integer.")
    return job


def output_cap(job: dict, test: dict) -> int:
    """The byte cap of a test's stdout; for a check test also of each value the candidate
    returns."""
    expected = test.get("output", "")
    if job["fn_name"] is not None:
        expected = json.dumps(expected, default=str)
    return max(OUTPUT_LIMIT_MIN, 2 * len(expected) + (64 << 10))


@dataclass
class Prepared:
    """What the parent knows about a job's code before any test runs."""
    compile_error: str | None = None
    code_object: object = None
    binds_fn: bool = False          # the program itself binds fn_name (def/class/assign/import)
    opens_files: bool = False       # it names open/fdopen/an io class: flush its file objects
    _lines: frozenset | None = None

    def executable_lines(self) -> frozenset:
        """Every line number a line event of the compiled code can carry."""
        if self._lines is None:
            self._lines = frozenset(code_lines(self.code_object))
        return self._lines


def code_lines(code) -> set[int]:
    """Line numbers that hold bytecode in a code object and the functions and classes in it."""
    lines, todo = set(), [code]
    while todo:
        c = todo.pop()
        lines.update(n for _, _, n in c.co_lines() if n)   # 0 or None: no source line
        todo.extend(k for k in c.co_consts if hasattr(k, "co_lines"))
    return lines


def compile_quietly(source: str):
    """compile() without its SyntaxWarnings ("invalid decimal literal", ...): they would go to
    the trainer's stderr, once per sample; they never change a verdict."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return compile(source, SOLUTION_FILENAME, "exec", dont_inherit=True)


def prepare(job: dict) -> Prepared:
    try:
        code = compile_quietly(job["code"])
    except Exception as e:   # SyntaxError, ValueError (NUL bytes), RecursionError, MemoryError
        return Prepared(compile_error=f"{type(e).__name__}: {e}"[:STDERR_TAIL])
    binds = False
    if job["fn_name"] is not None and job["fn_name"] in _prelude_names():
        binds = _binds_name(job["code"], job["fn_name"])
    return Prepared(code_object=code, binds_fn=binds, opens_files=_names_any(code, FILE_MAKERS))


FILE_MAKERS = frozenset({"open", "fdopen", "FileIO", "BufferedWriter", "BufferedRandom",
                         "TextIOWrapper", "BufferedRWPair"})


def _names_any(code, names: frozenset) -> bool:
    """Does the code (or a function in it) name any of `names`?"""
    todo = [code]
    while todo:
        c = todo.pop()
        if not names.isdisjoint(c.co_names):
            return True
        todo.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return False


_PRELUDE_NAMES: set | None = None


def _prelude_names() -> set:
    global _PRELUDE_NAMES
    if _PRELUDE_NAMES is None:
        _PRELUDE_NAMES = set(leetcode_prelude())
    return _PRELUDE_NAMES


def _binds_name(source: str, name: str) -> bool:
    """Does the program bind `name` anywhere (def, class, assignment target, import)?"""
    try:
        tree = ast.parse(source)
    except Exception:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            if node.id == name:
                return True
        elif isinstance(node, ast.alias) and (node.asname or node.name).split(".")[0] == name:
            return True
    return False


def leetcode_prelude() -> dict:
    """{name: object} a call-based program finds in its globals (LiveCodeBench's import list).

    Order of precedence as in that harness: module names > builtins > star-imported names, so
    `pow`, `open`, `compile` stay the builtins and `random`, `copy`, `datetime` are the modules.
    Not `from sys import *` / `from io import *`: their stdin/stdout/open would be stale objects.
    """
    import builtins
    names: dict = {}
    for name in PRELUDE_STAR:
        try:
            module = __import__(name)
        except ImportError:
            continue
        public = getattr(module, "__all__", None) or [n for n in vars(module) if n[0] != "_"]
        names.update({n: getattr(module, n) for n in public if hasattr(module, n)})
    names = {n: v for n, v in names.items() if not hasattr(builtins, n)}
    for name in PRELUDE_MODULES:
        try:
            names[name] = __import__(name)
        except ImportError:
            pass
    return names


def distinct_jobs(jobs: Iterable[dict]) -> tuple[list[dict], list[int]]:
    """The distinct jobs among `jobs` (checked, defaults filled in) and, per job, the index of
    its distinct job: run_batch runs each distinct job once and gives its Result to every copy.

    >>> a = dict(code="print(1)", tests=[dict(input="", output="1")])
    >>> unique, owner = distinct_jobs([a, dict(a, timeout=2.0), dict(a), dict(a, timeout=4.0)])
    >>> len(unique), owner          # timeout 4.0 is the default: the same job as `a`
    (2, [0, 1, 0, 0])

    Two jobs are the same when every field is (job_key): program, tests, fn_name, source (its
    comparison rules), limits, coverage, stop_after_timeout, stop_at_first_failure, anything
    else a caller put in.
    A deterministic program's verdict is a function of its job, so one run changes nothing.
    Where the verdict is not (a program within noise of its time limit; one that reads
    random, the clock or id()), the one run is a draw from the same distribution each copy's
    own run would draw from: each sample's expected reward and pass@1 are unchanged; only
    the copies now agree, as copies of a program do under any deterministic judge (figures
    that combine copies, a group's spread or pass@k for k > 1, see one draw, not several).
    Sharing lasts one call: nothing is kept between calls."""
    owner: list[int] = []
    return list(each_distinct_once(jobs, owner)), owner


def each_distinct_once(jobs: Iterable[dict], owner: list[int]) -> Iterator[dict]:
    """distinct_jobs as the jobs come (run_batch's jobs may be a queue still being fed): yields
    each distinct job, checked, the first time it comes, and appends to `owner`, per job, the
    index of its distinct job among those yielded."""
    first: dict = {}
    for i, job in enumerate(jobs):
        job = check_job(job, i)
        key = job_key(job) or ("not shared", i)
        new = key not in first
        owner.append(first.setdefault(key, len(first)))
        if new:
            yield job


def job_key(job: dict) -> bytes | None:
    """A checked job's identity: a digest of every field (pickle keeps 1, 1.0 and True, tuples
    and lists apart). Equal keys, same job; two equal jobs whose fields differ in dict order
    or object sharing may get two keys, which only runs one of them again. None when a field
    does not pickle (the job is then shared with none)."""
    try:
        return hashlib.sha256(pickle.dumps(sorted(job.items()), protocol=5)).digest()
    except Exception:   # pickle's errors vary by object (PicklingError, TypeError, ...)
        return None
