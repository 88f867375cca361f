"""StepCoder's curriculum of code completion subtasks (CCCS): split points, stages, prompts.

Plain Python on strings and floats: no model, no sandbox (only data.extract_code, so a
completed program is read from an answer like any other).

CCCS, Curriculum of Code Completion Subtasks (StepCoder, Dou et al. 2024)
---------------------------------------------------------------------------
Long programs make a sparse reward hard to reach. CCCS cuts the canonical solution at its
conditional statements and first asks the model only for the ending:

    split points   p_1 < ... < p_N   start lines of the conditional statements (AST)
    stages         K = ceil(sqrt(N)) split points, evenly spread, the LAST one first:
                   stage j uses p[N-1 - floor(j*N/K)] (0-based), j = 0..K-1;
                   then stage K = None: no prefix, the whole program from the statement
                   (rungs "every", ours: K = N, a stage at every split point, last first)
    subtask        prefix = canonical lines 1 .. start-1 (shown in the prompt, no loss),
                   the model writes the rest; reward program = prefix + completion
    schedule       per problem, a moving average of the pass rate of its samples; when it
                   reaches `threshold`, the problem moves one stage earlier (longer completion)
                   and the average restarts.

What counts as a split point: `if` statements, with every `elif` on its own line (in the AST
an elif is an If nested in the orelse; APPS+'s own "If Statement Body" scopes count it the same
way) and `match` statements. Not counted: conditional expressions (`a if c else b`), `try`,
comprehension filters -- they are not statements that start a line. Loops (`for`, `while`)
are added with include_loops=True. A program that does not parse has no split points, so its
only stage is the full program.

Simplifications: the paper does not say how the ceil(sqrt(N)) split points are chosen among
the N; we spread them evenly from the end. The average is a window mean or an EMA over the
last `span` updates, and a problem cannot advance before `span` updates at its stage (one lucky
batch is not mastery). Stages never move back. A ladder needs (bench/stepcoder_gates.py
measures it) each stage's new code run by the train tests, draws enough to climb and a next
rung within reach.

The trainer (trainer.Curriculum, built from --curriculum cccs) asks the schedule for each
problem's prefix before a rollout and feeds it the group's rewards after. DRIVE's hard-focus
schedule, which also chooses prompts, is in drive.py.
"""

import ast
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence

from data import extract_code  # the project's one rule for "the code in an answer"

# ----------------------------------------------------------------------------- CCCS: split points

_CONDITIONALS = (ast.If, ast.Match) if hasattr(ast, "Match") else (ast.If,)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def split_points(code: str, include_loops: bool = False) -> list[int]:
    """1-based start lines of the conditional statements of `code`, ascending, no repeats.

    >>> split_points("x = int(input())\\nif x > 0:\\n    print(1)\\nelif x < 0:\\n    print(-1)\\n")
    [2, 4]

    Unparsable code -> [] (the problem then only has the full-program stage).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
        return []
    kinds = _CONDITIONALS + _LOOPS if include_loops else _CONDITIONALS
    return sorted({node.lineno for node in ast.walk(tree) if isinstance(node, kinds)})


# ----------------------------------------------------------------------------- CCCS: stages


def spread_from_end(points: Sequence[int]) -> list[int]:
    """ceil(sqrt(N)) of the N sorted points, evenly spaced, starting with the last one.

    N=4 -> K=2: [p4, p2];  N=10 -> K=4: [p10, p8, p5, p3]. Gaps are ~N/K ~ sqrt(N).
    """
    n = len(points)
    k = math.ceil(math.sqrt(n))
    return [points[n - 1 - (j * n) // k] for j in range(k)]


RUNGS = ("sqrt", "every")


def stage_starts(code: str, include_loops: bool = False, rungs: str = "sqrt") -> list[int | None]:
    """Start line of each stage, easiest first; the last entry is None (write everything).
    rungs "sqrt": StepCoder's ceil(sqrt(N)) split points (spread_from_end); "every": a stage
    at every split point, last first (rungs of one step: a long chain of conditionals climbed
    one conditional at a time).

    >>> stage_starts("if a:\\n    pass\\nif b:\\n    pass\\n")  # N=2 -> 2 stages + final
    [3, 1, None]
    >>> stage_starts("if a:\\n    pass\\nif b:\\n    pass\\nif c:\\n    pass\\n", rungs="every")
    [5, 3, 1, None]
    """
    if rungs not in RUNGS:
        raise ValueError(f"rungs must be one of {RUNGS}, got {rungs!r}.")
    points = split_points(code, include_loops)
    return (spread_from_end(points) if rungs == "sqrt" else points[::-1]) + [None]


def physical_lines(code: str) -> list[str]:
    """Physical lines with their endings, split where Python's tokenizer splits them
    (\\r\\n, \\n or a lone \\r; not str.splitlines, which also splits at \\f, \\x1c, ...)."""
    return re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", code)


def make_subtask(code: str, start_line: int | None) -> tuple[str, str]:
    """(prefix, remainder) with prefix + remainder == code exactly.

    prefix = lines 1 .. start_line-1, remainder = line start_line to the end.
    start_line None (the final stage) -> ("", code).
    """
    if start_line is None:
        return "", code
    if start_line < 1:
        raise ValueError(f"start_line must be >= 1 (1-based) or None, got {start_line}.")
    lines = physical_lines(code)
    prefix = "".join(lines[: start_line - 1])
    return prefix, code[len(prefix) :]


def completion_prompt(prompt: str, prefix: str) -> str:
    """The trainer's prompt for a problem at a stage: the rendered prompt, which ends where the
    answer starts (data.render_prompt), with the answer opened for the model ("```python\n" +
    the canonical prefix), so generation continues the program directly. An empty prefix
    (the final stage) returns `prompt` unchanged: the last stage is exactly the ordinary task.
    The prefix is in the prompt and never gets a loss.
    """
    return f"{prompt}```python\n{prefix}" if prefix else prompt


def rewarded_program(prefix: str, completion: str) -> str | None:
    """The program to run on the tests, prefix + the model's code; None = no code in the answer.

    `completion` is the model's raw text after completion_prompt, which opened the answer, so
    the program is the block "```python\n" + prefix + completion read with data.extract_code
    (the last ```python block; an answer cut off before its closing fence counts whole), the
    rule every trainer uses, so a stage's reward is judged like the final stage's (prefix "":
    the model's own fenced answer). The first completed line is usually indented:
    extract_code keeps that indentation (it strips only newlines).
    """
    if not prefix:
        return extract_code(completion)
    return extract_code(f"```python\n{prefix}{completion}")


# ----------------------------------------------------------------------------- CCCS: schedule


class CCCSSchedule:
    """Which stage each problem is at, and when it moves to the next (earlier start) stage.

    Trainer loop:
        sched = CCCSSchedule({p.id: p.solutions[0] for p in problems}, threshold=0.8)
        prefix, _ = sched.subtask(p.id)                 # "" at the final stage
        prompt = completion_prompt(base_prompt, prefix)   # base_prompt: rendered
        programs = [rewarded_program(prefix, c) for c in completions]
        sched.update(p.id, [r.pass_rate for r in results])   # once per problem per step
    """

    def __init__(
        self,
        solutions: Mapping[Hashable, str],
        threshold: float = 0.8,
        average: str = "window",
        span: int = 4,
        include_loops: bool = False,
        rungs: str = "sqrt",
    ):
        if average not in ("window", "ema"):
            raise ValueError(f"average must be 'window' or 'ema', got {average!r}.")
        if span < 1:
            raise ValueError(f"span must be >= 1, got {span}.")
        self.threshold, self.average, self.span = threshold, average, span
        self.starts = {pid: stage_starts(code, include_loops, rungs)
                       for pid, code in solutions.items()}
        self.solutions = dict(solutions)
        self.stage = {pid: 0 for pid in solutions}  # index into self.starts[pid]
        self.history: dict = {pid: [] for pid in solutions}  # pass rates seen at this stage
        self.ema: dict = {pid: None for pid in solutions}

    def start_line(self, pid) -> int | None:
        """Split line of the current stage; None = write the whole program."""
        return self.starts[pid][self.stage[pid]]

    def subtask(self, pid) -> tuple[str, str]:
        """(prefix, canonical remainder) of the problem's current stage."""
        return make_subtask(self.solutions[pid], self.start_line(pid))

    def is_final(self, pid) -> bool:
        return self.stage[pid] == len(self.starts[pid]) - 1

    def moving_average(self, pid) -> float | None:
        """The average the threshold is compared with; None before any update at this stage."""
        if self.average == "ema":
            return self.ema[pid]
        window = self.history[pid][-self.span :]
        return sum(window) / len(window) if window else None

    def update(self, pid, pass_rates: Iterable[float]) -> bool:
        """Record this step's pass rates of one problem's samples; True if it advanced.

        pass_rates: one number per sample in [0, 1] (1.0 = all tests pass, or the fraction
        of tests passed -- the same measure the threshold is meant for).
        """
        rates = list(pass_rates)
        if not rates:
            return False
        if pid not in self.stage:
            raise KeyError(f"Problem {pid!r} is not in the CCCS schedule; pass its solution "
                           "when building CCCSSchedule.")
        rate = sum(rates) / len(rates)
        alpha = 2.0 / (self.span + 1)  # EMA with the same "span" as the window (pandas' rule)
        prev = self.ema[pid]
        self.ema[pid] = rate if prev is None else (1 - alpha) * prev + alpha * rate
        self.history[pid] = (self.history[pid] + [rate])[-self.span :]
        ready = len(self.history[pid]) >= self.span  # not before `span` updates at this stage
        if self.is_final(pid) or not ready or self.moving_average(pid) < self.threshold:
            return False
        self.stage[pid] += 1
        self.history[pid], self.ema[pid] = [], None  # the new stage is a new task
        return True

    def stage_label(self, pid) -> str:
        """The problem's stage counted from the end: "final" (the whole program), "final-1", ..."""
        left = len(self.starts[pid]) - 1 - self.stage[pid]
        return "final" if left == 0 else f"final-{left}"

    def stage_counts(self) -> dict[str, int]:
        """For logging: how many problems sit at each stage (stage_label's keys)."""
        counts: dict[str, int] = {}
        for pid in self.stage:
            key = self.stage_label(pid)
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items()))

    def state_dict(self) -> dict:
        """JSON-serialisable state. Problems are a list of pairs so non-string ids survive."""
        problems = [[pid, {"stage": self.stage[pid], "history": self.history[pid],
                           "ema": self.ema[pid]}] for pid in self.stage]
        return {"threshold": self.threshold, "average": self.average, "span": self.span,
                "problems": problems}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore stages and averages. Problems unknown to this schedule are ignored (the
        data set may have been filtered differently); the flags of this run stay in force."""
        for pid, s in state["problems"]:
            pid = tuple(pid) if isinstance(pid, list) else pid  # JSON turns tuples into lists
            if pid in self.stage:
                self.stage[pid] = min(int(s["stage"]), len(self.starts[pid]) - 1)
                self.history[pid] = [float(x) for x in s["history"]]
                self.ema[pid] = s["ema"]
