"""The curricula: StepCoder's CCCS and DRIVE's hard-focus schedule.

Both answer one question -- which prompts does the policy see at this step? -- so they live in
one module. Everything here is plain Python on strings and floats: no model, no sandbox (only
data.extract_code, so a completed program is read from an answer like any other). The
trainer (grpo.py, ppo_fgo.py) calls these functions around its rollout and reward code.

CCCS, Curriculum of Code Completion Subtasks (StepCoder, Dou et al. 2024)
---------------------------------------------------------------------------
Long programs make a sparse reward hard to reach. CCCS cuts the canonical solution at its
conditional statements and first asks the model only for the ending:

    split points   p_1 < ... < p_N   start lines of the conditional statements (AST)
    stages         K = ceil(sqrt(N)) split points, evenly spread, the LAST one first:
                   stage j uses p[N-1 - floor(j*N/K)] (0-based), j = 0..K-1;
                   then stage K = None: no prefix, the whole program from the statement
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
batch is not mastery). Stages never move back.

DRIVE's hard-focus curriculum (Zhu et al. 2025, seed drive-abstract-de.txt)
---------------------------------------------------------------------------
RL stage 1 is plain GRPO on a broad set. Stage 2 trains on a small hard set with many rollouts,
in phases that keep the lowest-pass-rate problems under the current policy, e.g.
"72:64,50:32,25:32" = the 72 hardest for 64 steps, then the 50 hardest of those for 32 steps,
then the 25 hardest of those for 32 steps. Here:

    PassRateTracker      per-problem pass rate under the current policy (last value or EMA)
    parse_hard_focus     "72:64,50:32" -> [(72, 64), (50, 32)]
    HardFocusSchedule    at the first step of each phase, re-rank the problems kept so far and
                         keep the `keep` lowest; the set is fixed within a phase
    offline_filter       drop problems that every sample solves or none does (Skywork,
                         AceReason): they give every sample the same reward, so zero advantage

Choices: phases are nested (phase i+1 keeps a subset of phase i: the dropped problems were not
rolled out, so their pass rates are stale). A problem with no pass rate yet counts as the
hardest, so it gets rolled out instead of being dropped unseen. Ties go to the earlier problem
in the order given, so the selection is deterministic.

The trainer's object (make_curriculum -> Curriculum)
----------------------------------------------------
grpo.py builds one Curriculum from its flags (--curriculum cccs, --hard-focus, either or both)
and asks it, each RL step: pool(problems, step) -> the problems to sample from (all, or the
current hard-focus set); prefix(problem) -> the CCCS prefix ("" = whole program);
update(pid, rewards) once per group, which feeds both the CCCS averages and the pass-rate
tracker; stats() for metrics.jsonl; state_dict() for checkpoints. The tracker starts from the
starting policy's solve rates (the evaluation before RL), so the first phase ranks by them; the
group rewards that follow are binary or the fraction of tests passed, per --reward. Steps past
the hard-focus schedule keep its last phase (--steps larger than the schedule trains longer on
the hardest set; smaller stops early).
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


def stage_starts(code: str, include_loops: bool = False) -> list[int | None]:
    """Start line of each stage, easiest first; the last entry is None (write everything).

    >>> stage_starts("if a:\\n    pass\\nif b:\\n    pass\\n")  # N=2 -> 2 stages + final
    [3, 1, None]
    """
    return spread_from_end(split_points(code, include_loops)) + [None]


def _lines(code: str) -> list[str]:
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
    lines = _lines(code)
    prefix = "".join(lines[: start_line - 1])
    return prefix, code[len(prefix) :]


COMPLETION_INSTRUCTION = (
    "Complete the following Python program. It stops in the middle; continue exactly where it "
    "stops (keep the indentation) and write the rest of the program. Do not repeat the given "
    "code."
)


def completion_prompt(prompt: str, prefix: str, prefill: bool = False) -> str:
    """The trainer's prompt for a problem, plus the canonical prefix to complete.

    prefill=False: `prompt` is the user message (data.problem_statement); an instruction and
    the prefix in a ```python block are appended, and the model answers with the rest.
    prefill=True: `prompt` is the rendered prompt that ends where the answer starts
    (data.render_prompt); the answer is opened for the model ("```python\n" + prefix), so
    generation continues the program directly -- what a base model (our tiny one) needs.
    An empty prefix (the final stage) returns `prompt` unchanged: the last stage is exactly the
    ordinary task. Either way the prefix is in the prompt and never gets a loss.
    """
    if not prefix:
        return prompt
    if prefill:
        return f"{prompt}```python\n{prefix}"
    return f"{prompt}\n\n{COMPLETION_INSTRUCTION}\n\n```python\n{prefix}```"


def rewarded_program(prefix: str, completion: str, prefill: bool = False) -> str | None:
    """The program to run on the tests, prefix + the model's code; None = no code in the answer.

    `completion` is the model's raw text; the code is read with data.extract_code (the last
    ```python block), the rule every trainer uses, so a stage's reward is judged like the
    final stage's. With prefill=True the answer was opened in the prompt, so the program is
    the block "```python\n" + prefix + completion. If the model repeated the prefix anyway,
    its code is taken as the whole program instead of doubling the prefix. The first completed
    line is usually indented: extract_code keeps that indentation (it strips only newlines).
    """
    if not prefix:
        return extract_code(completion)
    if prefill:
        return extract_code(f"```python\n{prefix}{completion}")
    code = extract_code(completion)
    if code is None:
        return None
    if code.lstrip().startswith(prefix.strip()):
        return code
    if not prefix.endswith(("\n", "\r")):
        prefix += "\n"  # only when the prefix is the whole program with no final newline
    return prefix + code


# ----------------------------------------------------------------------------- CCCS: schedule


class CCCSSchedule:
    """Which stage each problem is at, and when it moves to the next (earlier start) stage.

    Trainer loop:
        sched = CCCSSchedule({p.id: p.solutions[0] for p in problems}, threshold=0.8)
        prefix, _ = sched.subtask(p.id)                 # "" at the final stage
        prompt = completion_prompt(base_prompt, prefix)
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
    ):
        if average not in ("window", "ema"):
            raise ValueError(f"average must be 'window' or 'ema', got {average!r}.")
        if span < 1:
            raise ValueError(f"span must be >= 1, got {span}.")
        self.threshold, self.average, self.span = threshold, average, span
        self.starts = {pid: stage_starts(code, include_loops) for pid, code in solutions.items()}
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

    def stage_counts(self) -> dict[str, int]:
        """For logging: how many problems sit at each stage counted from the end.

        Keys: "final" for problems writing the whole program, "final-1", "final-2", ...
        """
        counts: dict[str, int] = {}
        for pid, k in self.stage.items():
            left = len(self.starts[pid]) - 1 - k
            key = "final" if left == 0 else f"final-{left}"
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


# ----------------------------------------------------------------------------- DRIVE: pass rates


class PassRateTracker:
    """Per-problem pass rate under the current policy.

    decay=None keeps the latest step's mean (the policy moves, older numbers go stale);
    decay=d in (0, 1) keeps an EMA: rate = d * rate + (1 - d) * new.
    """

    def __init__(self, decay: float | None = None):
        if decay is not None and not 0.0 < decay < 1.0:
            raise ValueError(f"decay must be None or in (0, 1), got {decay}.")
        self.decay = decay
        self.rates: dict = {}

    def update(self, pid, pass_rates: Iterable[float]) -> float | None:
        """Record one problem's per-sample pass rates of this step; returns its new rate."""
        values = list(pass_rates)
        if not values:
            return self.rates.get(pid)
        new = sum(values) / len(values)
        old = self.rates.get(pid)
        self.rates[pid] = new if old is None or self.decay is None else (
            self.decay * old + (1 - self.decay) * new)
        return self.rates[pid]

    def get(self, pid, default: float | None = None) -> float | None:
        return self.rates.get(pid, default)

    def state_dict(self) -> dict:
        return {"decay": self.decay, "rates": [[pid, r] for pid, r in self.rates.items()]}

    def load_state_dict(self, state: Mapping) -> None:
        self.rates = {(tuple(pid) if isinstance(pid, list) else pid): float(r)
                      for pid, r in state["rates"]}


# ----------------------------------------------------------------------------- DRIVE: hard focus


def parse_hard_focus(spec: str) -> list[tuple[int, int]]:
    """"72:64,50:32,25:32" -> [(72, 64), (50, 32), (25, 32)] as (keep, steps) phases."""
    phases = []
    for part in spec.replace(" ", "").split(","):
        m = re.fullmatch(r"(\d+):(\d+)", part)
        if not m:
            raise ValueError(f"--hard-focus: {part!r} is not KEEP:STEPS; write e.g. "
                             "'72:64,50:32,25:32' (keep the 72 hardest for 64 steps, ...).")
        keep, steps = int(m.group(1)), int(m.group(2))
        if keep < 1 or steps < 1:
            raise ValueError(f"--hard-focus: {part!r} needs KEEP >= 1 and STEPS >= 1.")
        if phases and keep > phases[-1][0]:
            raise ValueError(f"--hard-focus: {part!r} keeps more than the phase before "
                             f"({phases[-1][0]}); each phase keeps a subset of the previous.")
        phases.append((keep, steps))
    return phases


def lowest_pass_rate(pids: Sequence, rates: Mapping, keep: int) -> list:
    """The `keep` problems of `pids` with the lowest pass rate, in the order of `pids`.

    A problem without a rate counts as the hardest (-1); ties go to the earlier one in `pids`.
    >>> lowest_pass_rate(["a", "b", "c", "d"], {"a": 0.5, "b": 0.0, "c": 0.5}, 2)
    ['b', 'd']
    """
    order = sorted(range(len(pids)), key=lambda i: (rates.get(pids[i], -1.0), i))
    return [pids[i] for i in sorted(order[:keep])]


class HardFocusSchedule:
    """DRIVE's stage-2 phases: which problems to train on at each step of stage 2.

    Trainer loop (step counts from 0 at the start of stage 2):
        hf = HardFocusSchedule(parse_hard_focus(args.hard_focus), [p.id for p in hard_set])
        for step in range(hf.total_steps):
            ids = hf.problems(step, tracker.rates)   # re-ranked at each phase's first step
            ... roll out ids, tracker.update(pid, pass_rates) for each ...
    """

    def __init__(self, phases: Sequence[tuple[int, int]], pids: Sequence):
        if not phases:
            raise ValueError("hard focus needs at least one KEEP:STEPS phase.")
        self.phases = list(phases)
        self.pool = list(pids)  # candidates of the first phase
        self.phase_index = -1  # no phase entered yet
        self.kept: list = []

    @property
    def total_steps(self) -> int:
        return sum(steps for _, steps in self.phases)

    def phase_at(self, step: int) -> int:
        """Index of the phase that `step` (0-based within stage 2) falls in."""
        end = 0
        for i, (_, steps) in enumerate(self.phases):
            end += steps
            if step < end:
                return i
        raise ValueError(f"step {step} is past the hard-focus schedule ({self.total_steps} "
                         "steps); stop stage 2 at total_steps or add a phase.")

    def problems(self, step: int, rates: Mapping) -> list:
        """Problem ids to train on at `step`; entering a new phase re-ranks by `rates`."""
        phase = self.phase_at(step)
        while self.phase_index < phase:  # also catches up if the trainer skipped steps
            self.phase_index += 1
            pool = self.pool if self.phase_index == 0 else self.kept
            self.kept = lowest_pass_rate(pool, rates, self.phases[self.phase_index][0])
        return list(self.kept)

    def state_dict(self) -> dict:
        return {"phases": [list(p) for p in self.phases], "phase_index": self.phase_index,
                "kept": list(self.kept)}

    def load_state_dict(self, state: Mapping) -> None:
        self.phase_index = int(state["phase_index"])
        self.kept = [tuple(p) if isinstance(p, list) else p for p in state["kept"]]


def offline_filter(pass_rates: Mapping[Hashable, float | Sequence[float]]) -> list:
    """Ids of the problems worth training on: some samples solve them and some do not.

    pass_rates: per problem, its solve rate, or one value per sample with 1.0 = solved (all
    tests pass). Use solved/not solved per sample, not the fraction of tests passed, or a
    problem that every sample half-solves would survive with no reward variance.
    >>> offline_filter({"easy": [1, 1], "hard": [0, 0], "good": [1, 0]})
    ['good']
    """
    kept = []
    for pid, r in pass_rates.items():
        values = [float(r)] if isinstance(r, (int, float)) else [float(x) for x in r]
        if not values:
            continue  # never sampled: nothing says it is worth training on
        mean = sum(values) / len(values)
        if 0.0 < mean < 1.0:
            kept.append(pid)
    return kept


# ----------------------------------------------------------------------------- the trainer's object


class Curriculum:
    """What grpo.py's rollout_step consults: CCCS, DRIVE's hard focus, or both.

    Protocol (grpo.rollout_step):
        pool(problems, step) -> problems to sample from at RL step `step` (0-based)
        prefix(problem)      -> CCCS prefix of its current stage ("" = the whole program)
        update(pid, rewards) -> once per group, the group's rewards (binary or fraction)
        stats()              -> flat dict for metrics.jsonl
        state_dict() / load_state_dict(state)  -> JSON for trainer_state.json

    The rewards of every group feed both the CCCS averages and the pass-rate tracker that
    ranks problems at each hard-focus phase. Steps past the hard-focus schedule keep its last
    phase (so --steps larger than the schedule trains longer on the hardest set).
    """

    def __init__(self, cccs: CCCSSchedule | None = None,
                 hard_focus: HardFocusSchedule | None = None,
                 tracker: PassRateTracker | None = None):
        self.cccs, self.hard_focus = cccs, hard_focus
        self.tracker = tracker if tracker is not None else PassRateTracker()

    def pool(self, problems: Sequence, step: int) -> list:
        if self.hard_focus is None:
            return list(problems)
        step = min(step, self.hard_focus.total_steps - 1)  # past the end: keep the last phase
        keep = set(self.hard_focus.problems(step, self.tracker.rates))
        # Order of `problems`; if a filter removed every kept problem, fall back to all.
        return [p for p in problems if p.id in keep] or list(problems)

    def prefix(self, problem) -> str:
        if self.cccs is None or problem.id not in self.cccs.stage:
            return ""  # no canonical solution: the ordinary task
        return self.cccs.subtask(problem.id)[0]

    def update(self, pid, rewards: Iterable[float]) -> None:
        rewards = list(rewards)
        self.tracker.update(pid, rewards)
        if self.cccs is not None and pid in self.cccs.stage:
            self.cccs.update(pid, rewards)

    def stats(self) -> dict:
        """cccs_<stage>: problems per stage ("final", "final-1", ...), cccs_final_share:
        share of CCCS problems writing whole programs; hf_phase (1-based), hf_pool."""
        out: dict = {}
        if self.cccs is not None:
            counts = self.cccs.stage_counts()
            out.update({f"cccs_{k}": v for k, v in counts.items()})
            out["cccs_final_share"] = counts.get("final", 0) / max(len(self.cccs.stage), 1)
        if self.hard_focus is not None:
            out["hf_phase"] = self.hard_focus.phase_index + 1
            out["hf_pool"] = len(self.hard_focus.kept)
            known = [self.tracker.rates[p] for p in self.hard_focus.kept if p in self.tracker.rates]
            if known:
                out["hf_pool_pass_rate"] = sum(known) / len(known)
        return out

    def state_dict(self) -> dict:
        return {"cccs": self.cccs.state_dict() if self.cccs is not None else None,
                "hard_focus": self.hard_focus.state_dict() if self.hard_focus is not None
                else None,
                "tracker": self.tracker.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore the parts this run has; a part the checkpoint lacks starts fresh."""
        if self.cccs is not None and state.get("cccs"):
            self.cccs.load_state_dict(state["cccs"])
        if self.hard_focus is not None and state.get("hard_focus"):
            self.hard_focus.load_state_dict(state["hard_focus"])
        if state.get("tracker"):
            self.tracker.load_state_dict(state["tracker"])


def make_curriculum(args, problems: Sequence, rates: Mapping) -> Curriculum | None:
    """grpo.py's flags -> Curriculum (None when neither --curriculum cccs nor --hard-focus).

    args: curriculum, cccs_threshold, cccs_average, cccs_span, cccs_loops, hard_focus, steps.
    problems: the train problems (data.Problem); CCCS uses each one's first solution.
    rates: {problem id: solved share under the starting policy}; seeds the pass-rate tracker
    so the first hard-focus phase ranks by it (ids not in `problems` are ignored).
    """
    use_cccs = getattr(args, "curriculum", "none") == "cccs"
    spec = getattr(args, "hard_focus", "") or ""
    if not use_cccs and not spec:
        return None
    sched = None
    if use_cccs:
        sched = CCCSSchedule({p.id: p.solutions[0] for p in problems if p.solutions},
                             threshold=args.cccs_threshold, average=args.cccs_average,
                             span=args.cccs_span, include_loops=args.cccs_loops)
    hf = None
    if spec:
        try:
            phases = parse_hard_focus(spec)
        except ValueError as e:
            raise SystemExit(str(e)) from None
        hf = HardFocusSchedule(phases, [p.id for p in problems])
    tracker = PassRateTracker()
    ids = {p.id for p in problems}
    tracker.rates = {pid: float(r) for pid, r in rates.items() if pid in ids}
    return Curriculum(sched, hf, tracker)
