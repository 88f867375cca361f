"""Code problems in one schema, the coder's prompt, and the program in an answer.

Every source (world/sources.py loads APPS, APPS+, CodeContests, LiveCodeBench, HumanEval, the
built-in set and the procedural tasks) becomes a list of `Problem`s whose tests sandbox.py runs
as they stand:
  standard I/O   (fn_name None)  {"input": "1 2\\n", "output": "3\\n"}
  call-based     (fn_name "f")   {"input": [1, 2], "output": 3}    f top-level or a method of
                                                                    class Solution
  check          (fn_name "f")   {"check": code}                   HumanEval: code defines
                                                                    check(candidate)
The sandbox compares outputs by the rules of the problem's benchmark (sandbox.RULES, keyed by
Problem.source): pass `source=problem.source` with every job (sandbox_job does).

The prompt: coder_messages (system + statement + how the program is run), rendered by the
tokenizer's chat template (render_prompt). The answer's program: extract_code, the project's
one rule for "the code in an answer".
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from infra.errors import DataError  # noqa: F401  (data.DataError: what the loaders raise)

SOURCES = ("apps", "apps_plus", "code_contests", "livecodebench", "humaneval", "builtin", "tasks",
           "prepared")


@dataclass
class Problem:
    id: str
    source: str
    question: str
    starter_code: str
    fn_name: str | None
    tests: list[dict]
    solutions: list[str]
    difficulty: str
    metadata: dict = field(default_factory=dict)


class BadRow(ValueError):
    """A row that cannot become a Problem; its message is the reason counted in stats."""


# ----------------------------------------------------------------------------------------
# Prompts: the single-agent coder prompt and the extraction of the program from an answer.
# agents.py builds its tester/coder prompts on problem_statement and io_instruction.

SYSTEM_PROMPT = ("You are an expert Python programmer. Solve the problem and answer with the "
                 "complete program in one ```python code block.")


def io_instruction(problem: Problem) -> str:
    """How the program is run, in one sentence (it decides what a correct answer looks like)."""
    if problem.fn_name is None:
        return ("Write a Python program that reads from standard input and prints the answer to "
                "standard output.")
    if "class Solution" in problem.starter_code:
        return (f"Complete the method `{problem.fn_name}` of class `Solution`; it is called with "
                "the test's arguments and its return value is checked.")
    return (f"Write a Python function `{problem.fn_name}`; it is called with the test's arguments "
            "and its return value is checked.")


def problem_statement(problem: Problem) -> str:
    """Question + I/O instruction + starter code: the part of every prompt that states the task."""
    text = f"{problem.question.strip()}\n\n{io_instruction(problem)}"
    if problem.starter_code.strip():
        text += f"\n\nStarter code:\n```python\n{problem.starter_code.strip(chr(10))}\n```"
    return text


def coder_messages(problem: Problem) -> list[dict]:
    """Chat messages for the single-agent coder (GRPO, PPO): system + the problem statement."""
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": problem_statement(problem)}]


def render_prompt(tokenizer, messages: list[dict]) -> str:
    """Messages -> prompt text that ends where the answer starts.

    With a chat template (instruct models) the tokenizer's own rendering; without one (our
    tiny byte-level model) a plain rendering,
    "### System\\n...\\n\\n### User\\n...\\n\\n### Assistant\\n".
    """
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    turns = "".join(f"### {m['role'].capitalize()}\n{m['content']}\n\n" for m in messages)
    return turns + "### Assistant\n"


def format_answer(code: str) -> str:
    """The SFT target for a reference solution; extract_code(format_answer(c)) == c.strip("\\n")."""
    return f"```python\n{code.strip(chr(10))}\n```"


_FENCE = re.compile(r"^\s*```\s*([\w+-]*)\s*$")
_PYTHON_TAGS = ("", "python", "py", "python3")


def extract_code(text: str) -> str | None:
    """The program in a model's answer: the last ```python (or bare ```) fenced block.

    None means "no code": no such block, or an empty one. A block left open at the end of
    the text (a generation cut at the length limit) counts, with what it holds so far: the
    sandbox then judges it (usually a syntax error, which is exactly the reward it deserves),
    and an answer that merely forgot its closing fence still runs.
    Blocks tagged with another language (```cpp, ```text) are ignored.
    """
    blocks, tag, lines = [], None, []
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if tag is None and m:
            tag, lines = m.group(1).lower(), []
        elif tag is not None and m and not m.group(1):
            blocks.append((tag, lines))
            tag = None
        elif tag is not None:
            lines.append(line)
    if tag is not None:  # unclosed at the end: a truncated generation
        blocks.append((tag, lines))
    for tag, lines in reversed(blocks):
        if tag in _PYTHON_TAGS:
            code = "\n".join(lines).strip("\n")
            return code if code.strip() else None
    return None


# ----------------------------------------------------------------------------------------
# A problem's fields checked, and the sandbox job that judges a program on it.

def check_problem(problem: Problem) -> None:
    """BadRow when a field has a type the sandbox, the prompt or the curricula cannot use: a
    prepared file written by hand or by another tool (the APPS habit: tests as a JSON string).
    The reason names the field; the row is counted under it and skipped."""
    for name in ("id", "question", "starter_code", "difficulty"):
        if not isinstance(getattr(problem, name), str):
            raise BadRow(f"{name} is not a string")
    if problem.fn_name is not None and not (isinstance(problem.fn_name, str)
                                            and problem.fn_name.isidentifier()):
        raise BadRow("fn_name is not a function name (a string) or null")
    if not isinstance(problem.tests, list):
        kind = "a JSON string" if isinstance(problem.tests, str) else type(problem.tests).__name__
        raise BadRow(f"tests is {kind}, not a list of {{input, output}}")
    for test in problem.tests:
        if isinstance(test, dict) and "check" in test:
            if not (isinstance(test["check"], str) and problem.fn_name
                    and len(problem.tests) == 1):
                raise BadRow("a check test is not the only test, with code, of a problem "
                             "with fn_name")
            continue
        if not (isinstance(test, dict) and "input" in test and "output" in test):
            raise BadRow("a test is not an {input, output} object")
        if problem.fn_name is None and not (isinstance(test["input"], str)
                                            and isinstance(test["output"], str)):
            raise BadRow("a standard-I/O test whose input or output is not a string")
        if problem.fn_name is not None and not isinstance(test["input"], list):
            raise BadRow("a call-based test whose input is not a list of arguments")
    if not (isinstance(problem.solutions, list)
            and all(isinstance(s, str) for s in problem.solutions)):
        raise BadRow("solutions is not a list of strings")
    if not isinstance(problem.metadata, dict):
        raise BadRow("metadata is not an object")


def sandbox_job(problem: Problem, code: str, tests: list[dict] | None = None, **options) -> dict:
    """A sandbox.run_batch job: `code` on the problem's tests (or `tests`), judged by the rules
    of the problem's benchmark (its source); options: timeout, memory_mb, coverage, ...
    HumanEval's harness runs the prompt (its imports, helpers) before the completion: so does
    the program's process here (the job's preamble)."""
    if problem.source == "humaneval":
        options = {"preamble": problem.starter_code} | options
    return dict(code=code, tests=problem.tests if tests is None else tests,
                fn_name=problem.fn_name, source=problem.source, **options)
