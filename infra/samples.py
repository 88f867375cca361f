"""A run's samples: what the model wrote at each RL step and each evaluation, as the step
judged it, in <out>/samples.jsonl (SampleLog, written by every trainer), and the command that
reads it as a person reads code:

    python -m infra.samples RUN_DIR [--step N] [--phase train|eval] [--family F]
                                    [--verdict V] [--problem ID] [--role R] [--state] [--plot]
    ./run.sh show RUN_DIR [the same filters]

The file holds one JSON object a line, told apart by "kind":
    prompt  {"kind": "prompt", "ref": R, "text": T}: each distinct prompt once; samples name
            theirs by ref (the first 12 hex digits of its SHA-1)
    sample  {"kind": "sample", "step": N, "phase": "train" | "eval", "when": W, "problem": id,
            "family": f, "prompt": R, "completion": text, "program": code or null,
            "verdict": status, "passed": k, "total": n, "not_run": m (only where the judge
            stopped at the first failing test: the m tests after it), "failing_test":
            {"index", "status", "input", "expected", "actual", "stderr"} or null,
            "reward": r, "advantage": a}
            and what the method adds: FGO's masked_lines (1-based lines of the program whose
            every token the loss masked) and masked_tokens; CCCS's stage and prefix (the
            program's first lines, given in the prompt); false_pass (passed the train tests,
            fails the rest, under --max-train-tests); AT-GRPO's episode, turn, role, tests,
            valid (the reference passes each test), passed, chosen and the reward terms
    state   {"kind": "state", "step": N, "problems": [{"problem": id, ...}], ...}: the
            per-problem state a curriculum keeps, for the problems the step drew: the stage
            its groups were drawn at and their pass rate this step (CCCS's drawn_stage,
            step_pass_rate, draws), its stage after the step's update, the moving average
            and the updates at that stage; DRIVE's pass rate and hard-focus phase. A run
            with a curriculum writes them whether or not it logs samples (--log-samples 0),
            so each problem's trajectory is read, not reconstructed
A train sample of step N is a rollout the N-th update trained on (metrics.jsonl's rl row N);
an eval sample's step is the RL steps done when it was taken (the eval row's). A step writes
`limit` samples spread evenly over its own (pick): the advantage of a logged sample is the
one its update used. Only rank 0 writes, its own share of the samples.

Nothing here imports the trainers' modules: they hand SampleLog plain dicts and strings.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

FILE = "samples.jsonl"
SHOWN_CHARS = 300      # a test's input / output kept in a record (the rest is cut, marked)


# ----------------------------------------------------------------------------- writing

def parse_limit(text: str) -> int:
    """--log-samples: "N" (N >= 0) or "all" / "-1" (every sample) -> N or -1; ValueError
    with the rule otherwise."""
    if text.strip().lower() == "all":
        return -1
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < -1:
        raise ValueError(f"must be a count >= 0, or -1 / all for every sample, got {text}")
    return value


def pick(n: int, limit: int) -> list[int]:
    """Which of a step's n samples to log: all for limit -1, none for 0, else min(limit, n)
    indices spread evenly from the first (n 128, limit 4: 0, 32, 64, 96 -- with groups of 16
    in order, four different problems)."""
    if limit < 0:
        return list(range(n))
    k = min(limit, n)
    return [i * n // k for i in range(k)]


def clip(text, limit: int = SHOWN_CHARS):
    """A test's input or output for a record: strings cut at `limit` characters (marked);
    other JSON values (a call-based test's arguments) as they are, unless their JSON is
    longer, then their JSON cut."""
    if not isinstance(text, str):
        shown = json.dumps(text, default=repr)
        if len(shown) <= limit:
            return text
        text = shown
    return text if len(text) <= limit else text[:limit] + f"...({len(text) - limit} more)"


def prompt_ref(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def compact(value):
    """JSON-ready value with floats at 6 significant digits (as metrics.jsonl), inside lists
    and dicts too: a PPO advantage is a list of one float a token."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {str(k): compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [compact(v) for v in value]
    return value


class SampleLog:
    """<out>/samples.jsonl of one run (the module docstring lists its records).

    limit: samples a step (pick: -1 all, 0 none). states: write state records even with
    limit 0 (a curriculum's run). main: only the main rank writes; on the others, and with
    limit 0 and no states, every method does nothing."""

    def __init__(self, out_dir: str, limit: int, main: bool = True, states: bool = False):
        self.path = os.path.join(out_dir, FILE) if main and (limit or states) else None
        self.limit = limit if self.path else 0
        self.refs: set[str] = set()

    @property
    def on(self) -> bool:
        """Whether samples are written (limit != 0); states are written whenever the file is
        (states=True: a curriculum's per-problem trajectory is kept without --log-samples)."""
        return self.path is not None and self.limit != 0

    def pick(self, n: int) -> list[int]:
        """pick(n, limit) of this log; [] when it is off."""
        return pick(n, self.limit) if self.on else []

    def write(self, step: int, phase: str, records: Sequence[dict],
              when: str | None = None) -> list[dict]:
        """Append `records` (dicts with the sample fields; "prompt" holds the prompt's text)
        as samples of `step` and `phase` (and `when`, an evaluation's name); a prompt not yet
        in the file is written once before them. Returns the sample lines as written."""
        if not self.on or not records:
            return []
        lines, written = [], []
        for rec in records:
            rec = dict(rec)
            text = rec.pop("prompt", None)
            if text is not None:
                ref = prompt_ref(text)
                if ref not in self.refs:
                    self.refs.add(ref)
                    lines.append({"kind": "prompt", "ref": ref, "text": text})
                rec["prompt"] = ref
            row = compact({"kind": "sample", "step": step, "phase": phase,
                           **({"when": when} if when else {}), **rec})
            lines.append(row)
            written.append(row)
        self._append(lines)
        return written

    def state(self, step: int, state: dict) -> None:
        """Append a state record of `step` (a curriculum's per-problem state); nothing for an
        empty state."""
        if self.path is not None and state:
            self._append([compact({"kind": "state", "step": step, **state})])

    def forget_after(self, step: int) -> int:
        """On resume from a checkpoint at `step`: drop the train samples and states past it and
        the evaluations the resumed run repeats (those after `step`, and after RL), as
        metrics.MetricsLog.forget_after does. Returns how many lines were dropped."""
        if self.path is None or not os.path.isfile(self.path):
            return 0
        with open(self.path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        keep = [r for r in rows if not (r["kind"] != "prompt" and (
            r["step"] > step or str(r.get("when", "")).endswith("after_rl")))]
        self.refs = {r["ref"] for r in keep if r["kind"] == "prompt"}
        with open(self.path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in keep)
        return len(rows) - len(keep)

    def _append(self, rows: Iterable[dict]) -> None:
        with open(self.path, "a") as f:
            f.writelines(json.dumps(r, default=repr) + "\n" for r in rows)


@dataclass
class Trace:
    """One completion as its step judged it, kept for the samples file (sample_record)."""
    problem: object                    # data.Problem
    prompt: str                        # the text the engine continued
    completion: object                 # engines.Completion
    program: str | None                # the rewarded program (None: no code)
    result: object                     # its sandbox.Result (None: no code)
    reward: float                      # --reward's value
    prefix: str = ""                   # CCCS: the program's first lines, given in the prompt
    stage: str | None = None           # CCCS: the problem's stage ("final", "final-1", ...)
    false_pass: bool | None = None     # under --max-train-tests: false_passes'


def trace_of(ro, j: int, problem, prefix: str = "", stage: str | None = None) -> Trace:
    """The Trace of completion j of `ro` (a rollouts.Rollouts; a problem's completions are
    consecutive), whose problem, CCCS prefix and stage the rollout had."""
    group = len(ro.completions) // len(ro.prompt_ids)
    return Trace(problem, ro.prompts[j // group], ro.completions[j], ro.programs[j],
                 ro.results[j], ro.rewards[j], prefix, stage,
                 None if ro.false_pass is None else ro.false_pass[j])


def failing_test(problem, result) -> dict | None:
    """The first test a program failed: its index and verdict, the problem's input and expected
    output (a check test: its code as input), the program's output and stderr (the sandbox's
    tails), each cut by infra.samples.clip; None when no test failed or there was no code."""
    for i, t in enumerate(result.tests if result is not None else []):
        if t.status == "pass":
            continue
        test = problem.tests[i] if i < len(problem.tests) else {}
        out = {"index": i, "status": t.status}
        if "check" in test:
            out["input"] = clip(test["check"])
        else:
            out.update(input=clip(test.get("input")), expected=clip(test.get("output")))
        out["actual"] = clip(t.output)
        if t.stderr:
            out["stderr"] = clip(t.stderr)
        return out
    return None


def sample_record(t: Trace, reward: float | None = None, advantage=None) -> dict:
    """A samples-file record (infra.samples) of one Trace: problem, family, prompt, completion,
    program, verdict, tests passed, first failing test, reward (the Trace's --reward unless
    `reward`: what the loss saw, e.g. PPO's StepCoder score), advantage (a float, or one a
    token for PPO; None at an evaluation), and the CCCS stage and prefix and the false pass
    where the step had them."""
    res = t.result
    rec = {"problem": t.problem.id, "family": t.problem.metadata.get("family"),
           "prompt": t.prompt, "completion": t.completion.text, "program": t.program,
           "finish_reason": t.completion.finish_reason,
           "verdict": "no_code" if res is None else res.status,
           "passed": None if res is None else res.passed,
           "total": None if res is None else res.total,
           "failing_test": failing_test(t.problem, res),
           "reward": t.reward if reward is None else reward, "advantage": advantage}
    if res is not None and res.error:
        rec["error"] = clip(res.error)
    if not_run := sum(r.status == "not_run" for r in (res.tests if res is not None else [])):
        rec["not_run"] = not_run
    if t.stage is not None:
        rec.update(stage=t.stage, prefix=t.prefix)
    if t.false_pass is not None:
        rec["false_pass"] = t.false_pass
    return rec


def sample_records(traces: list[Trace] | None, picked: list[int], samples=None) -> list[dict]:
    """sample_record of traces[i] for each i in `picked`, with the reward and advantage of the
    training samples[i] (actor.Sample, one per trace) when given."""
    if not traces:
        return []
    if samples is None:
        return [sample_record(traces[i]) for i in picked]
    return [sample_record(traces[i], samples[i].reward, samples[i].advantage) for i in picked]


def curriculum_state(curriculum, changed: Mapping) -> dict:
    """The state of a trainer.Curriculum's `changed` problems ({id: (the CCCS stage the
    step's groups were drawn at or None, their pass rates)}), for the samples file:
    {"problems": [{"problem", "pass_rate" (the tracker's), and with CCCS "drawn_stage",
    "step_pass_rate" (the mean of the step's group pass rates at that stage), "draws" (groups),
    "stage" (after the step's update), "start_line", "average" (the moving average the
    threshold is compared with, None just after a move), "updates" (at this stage)}]}, and
    with a hard focus {"hard_focus": {"phase" (1-based), "pool" (the kept ids)}}; {} when
    nothing changed."""
    out: dict = {}
    schedule, focus = curriculum.cccs, curriculum.hard_focus
    problems = []
    for pid, (drawn, rates) in changed.items():
        row = {"problem": pid, "pass_rate": curriculum.tracker.rates.get(pid)}
        if schedule is not None and pid in schedule.stage:
            row.update(drawn_stage=drawn, step_pass_rate=sum(rates) / len(rates),
                       draws=len(rates))
            row.update(stage=schedule.stage_label(pid), start_line=schedule.start_line(pid),
                       average=schedule.moving_average(pid),
                       updates=len(schedule.history[pid]))
        problems.append(row)
    if problems:
        out["problems"] = problems
    if focus is not None and focus.phase_index >= 0:
        out["hard_focus"] = {"phase": focus.phase_index + 1, "pool": list(focus.kept)}
    return out


# ----------------------------------------------------------------------------- reading

def load(run_dir: str) -> tuple[dict, list[dict], list[dict]]:
    """(prompts {ref: text}, samples, states) of a run folder's samples.jsonl, in file order.
    A line that is not a JSON object is skipped and counted on stderr."""
    path = os.path.join(run_dir, FILE)
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: no such file; a run writes it with --log-samples N "
                         "(default 4) or a curriculum; pass the run's --out folder")
    prompts, samples, states, bad = {}, [], [], 0
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
                kind = row["kind"]
            except (ValueError, TypeError, KeyError):
                bad += 1
                continue
            if kind == "prompt":
                prompts[row["ref"]] = row["text"]
            elif kind == "sample":
                samples.append(row)
            elif kind == "state":
                states.append(row)
    if bad:
        print(f"[samples] {path}: skipped {bad} unreadable lines", file=sys.stderr)
    return prompts, samples, states


def select(samples: Iterable[dict], *, step: int | None = None, phase: str | None = None,
           when: str | None = None, family: str | None = None, verdict: str | None = None,
           problem: str | None = None, role: str | None = None) -> list[dict]:
    """The samples matching every filter given (None: any)."""
    want = {"step": step, "phase": phase, "when": when, "family": family, "verdict": verdict,
            "role": role}
    out = []
    for s in samples:
        if any(v is not None and s.get(k) != v for k, v in want.items()):
            continue
        if problem is not None and str(s.get("problem")) != problem:
            continue
        out.append(s)
    return out


def _shown(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.rstrip("\n").replace("\n", "\n              ")


def _number(x, signed: bool = False) -> str:
    if x is None:
        return "-"
    if isinstance(x, list):          # PPO: one advantage a token
        if not x:
            return "-"
        mean = sum(x) / len(x)
        return f"{mean:+.3f} (token mean; {min(x):+.3f} .. {max(x):+.3f})"
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _line_ranges(lines: Sequence[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(lines):
        if start is None:
            start = n
        if i + 1 == len(lines) or lines[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def failing_test_lines(t: dict | None, what: str = "first failing test") -> list[str]:
    if not t:
        return []
    head = f"{what}" + (f" (#{t['index'] + 1}, {t['status']})" if "index" in t else "") + ":"
    out = [head]
    for key in ("input", "expected", "actual"):
        if key in t:
            out.append(f"    {key + ':':<10}{_shown(t[key])}")
    if t.get("stderr"):
        out.append(f"    {'stderr:':<10}{_shown(t['stderr'])}")
    return out


def program_lines(program: str, masked: Sequence[int] = (), given: int = 0) -> list[str]:
    """The program with its line numbers and a mark: ':' a line given in the prompt (a CCCS
    prefix of `given` lines), 'x' a line FGO masked (no test ran it), '|' the others."""
    masked = set(masked)
    out = []
    for n, line in enumerate(program.split("\n"), start=1):
        if n == len(program.split("\n")) and not line:
            break
        mark = ":" if n <= given else "x" if n in masked else "|"
        out.append(f"{n:4d} {mark} {line}")
    return out


def format_sample(s: dict, prompts: dict | None = None, show_prompt: bool = False,
                  show_completion: bool = False) -> str:
    """A sample as a person reads it: a header (step, phase, problem, reward, advantage),
    the verdict and the first failing test, the CCCS stage and the FGO mask in words, then
    the program with its lines marked (program_lines)."""
    when = f" {s['when']}" if s.get("when") else ""
    family = f" ({s['family']})" if s.get("family") else ""
    out = [f"=== step {s['step']} {s['phase']}{when} | problem {s['problem']}{family} | "
           f"reward {_number(s.get('reward'))} | advantage {_number(s.get('advantage'), True)}"]
    total = s.get("total")
    tests = f", {s.get('passed', 0)}/{total} tests passed" if total else ""
    if s.get("not_run"):
        tests += f" ({s['not_run']} not run after the first failing one)"
    out.append(f"verdict: {s.get('verdict')}{tests}"
               + ("; FALSE PASS: fails a test beyond the train ones" if s.get("false_pass")
                  else ""))
    if s.get("error"):
        out.append(f"    error: {_shown(s['error'])}")
    out += failing_test_lines(s.get("failing_test"))
    program = s.get("program")
    given = 0
    if s.get("stage") is not None:
        prefix = s.get("prefix") or ""
        given = prefix.count("\n")
        out.append(f"CCCS stage {s['stage']}: " + (
            f"{'line 1' if given == 1 else f'lines 1-{given}'} given in the prompt (':'), "
            "the model wrote the rest" if given
            else "the whole program written by the model"))
    masked = s.get("masked_lines") or []
    if "masked_lines" in s:
        out.append(f"FGO: {s.get('masked_tokens', 0)} tokens out of the loss" + (
            f", lines {_line_ranges(masked)} ('x'): no test ran them" if masked else ""))
    if show_prompt and prompts is not None:
        out += ["prompt:", prompts.get(s.get("prompt"), "(prompt not in the file)")]
    if show_completion or program is None:
        out += ["completion:" + (" (no code in it)" if program is None else ""),
                s.get("completion", "")]
    if program is not None:
        out += program_lines(program, masked, given)
    return "\n".join(out)


def _tests_lines(s: dict) -> list[str]:
    valid, passed = s.get("valid") or [], s.get("passed") or []
    out = []
    for i, t in enumerate(s.get("tests") or []):
        v = "valid" if i < len(valid) and valid[i] else "INVALID"
        p = "" if i >= len(passed) or not s.get("program_shown", True) else (
            " program passes" if passed[i] else " program FAILS")
        shown = t.get("check") if "check" in t else \
            f"input {json.dumps(t.get('input'))} -> {json.dumps(t.get('output'))}"
        out.append(f"      [{v:7}{p}] {shown}")
    return out


def format_episode(records: Sequence[dict]) -> str:
    """One AT-GRPO episode (its records: one problem, one episode of one step and phase) as
    its turns: per turn each role's candidates in the order they acted, the chosen one
    marked '*', the tester's tests with their validity (the reference passes them) and
    whether the shown program passes them, the coder's program and its first failing test."""
    first = records[0]
    when = f" {first['when']}" if first.get("when") else ""
    family = f" ({first['family']})" if first.get("family") else ""
    out = [f"=== step {first['step']} {first['phase']}{when} | problem {first['problem']}"
           f"{family} | episode {first.get('episode')}"]
    turn, seen = None, {}
    for s in records:
        if s.get("turn") != turn:
            turn = s.get("turn")
            out.append(f"turn {turn}")
        role = s.get("role")
        k = seen[(turn, role)] = seen.get((turn, role), -1) + 1
        mark = "*" if s.get("chosen") else " "
        head = (f"  {role:6} {mark} candidate {k} | reward {_number(s.get('reward'))} | "
                f"advantage {_number(s.get('advantage'), True)} | {s.get('verdict')}")
        if role == "coder" and s.get("gt_pass_rate") is not None:
            head += f" | ground truth {s['gt_pass_rate']:.2f}"
        out.append(head)
        if role == "tester":
            out += _tests_lines(s) or ["      (no parsable tests)"]
        else:
            if s.get("program") is None:
                out += ["      (no code block)", "      " + _shown(s.get("completion", ""))]
            else:
                out += ["    " + line for line in program_lines(s["program"])]
            out += ["    " + line for line in failing_test_lines(
                s.get("failing_test"), "first failing test of the tester's")]
    return "\n".join(out)


def blocks(samples: Sequence[dict]) -> list:
    """The samples as they are shown: AT-GRPO's (those with a role) gathered into their
    episodes (a list of records each, in play order), the others one by one."""
    out, episodes = [], {}
    for s in samples:
        if "role" in s:
            key = (s["step"], s["phase"], s.get("when"), str(s["problem"]), s.get("episode"))
            if key not in episodes:
                episodes[key] = []
                out.append(episodes[key])
            episodes[key].append(s)
        else:
            out.append(s)
    for b in out:
        if isinstance(b, list):
            b.sort(key=lambda s: s.get("turn", 0))    # stable: the roles' order kept
    return out


def format_records(samples: Sequence[dict], prompts: dict | None = None,
                   show_prompt: bool = False, show_completion: bool = False) -> str:
    """Samples as text (blocks): episodes by format_episode, the others by format_sample,
    separated by blank lines."""
    return "\n\n".join(format_block(b, prompts, show_prompt, show_completion)
                       for b in blocks(samples))


def format_block(b, prompts=None, show_prompt=False, show_completion=False) -> str:
    return format_episode(b) if isinstance(b, list) else \
        format_sample(b, prompts, show_prompt, show_completion)


def format_states(states: Sequence[dict], problem: str | None = None) -> str:
    """The curriculum's state per problem over the steps where it changed: CCCS stage, its
    moving average and the updates at that stage; the tracker's pass rate; DRIVE's phase."""
    by_problem: dict[str, list[str]] = {}
    phases = []
    for st in states:
        for p in st.get("problems", []):
            pid = str(p["problem"])
            if problem is not None and pid != problem:
                continue
            parts = [f"step {st['step']}:"]
            if p.get("drawn_stage") is not None:
                parts.append(f"drawn at {p['drawn_stage']}, pass rate {p['step_pass_rate']:.2f}"
                             f" ({p['draws']} group{'' if p['draws'] == 1 else 's'});")
            if "stage" in p:
                avg = p.get("average")
                parts.append(f"{p['stage']} (start line {p.get('start_line')}, average "
                             f"{'-' if avg is None else f'{avg:.2f}'} over "
                             f"{p.get('updates', 0)} update"
                             f"{'' if p.get('updates') == 1 else 's'} at this stage)")
            if p.get("pass_rate") is not None:
                parts.append(f"pass rate {p['pass_rate']:.2f}")
            by_problem.setdefault(pid, []).append(" ".join(parts))
        if "hard_focus" in st:
            hf = st["hard_focus"]
            phases.append(f"step {st['step']}: hard-focus phase {hf['phase']}, "
                          f"{len(hf['pool'])} problems")
    if not by_problem and not phases:
        return "no curriculum state in this run (only --curriculum cccs and --hard-focus " \
               "keep one)"
    out = []
    for pid, lines in by_problem.items():
        out.append(f"{pid}")
        out += ["    " + line for line in lines]
    return "\n".join(out + phases)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m infra.samples",
        description="Show a run's samples (<run>/samples.jsonl) as code: the program with "
                    "FGO's masked lines and a CCCS prefix marked, the verdict and the first "
                    "failing test; AT-GRPO's episodes as their turns; the curriculum's state.")
    p.add_argument("run_dir", help="the run's --out folder")
    p.add_argument("--step", type=int, help="only this step")
    p.add_argument("--phase", choices=["train", "eval"], help="only RL rollouts or evaluations")
    p.add_argument("--when", help="only this evaluation (before_rl, step_N, after_rl, ...)")
    p.add_argument("--family", help="only problems of this family (tasks.py)")
    p.add_argument("--verdict", help="only this verdict (pass, wrong_answer, runtime_error, "
                                     "timeout, compile_error, no_code; AT-GRPO: pass, fail, "
                                     "valid, invalid, no_tests)")
    p.add_argument("--problem", help="only this problem id")
    p.add_argument("--role", choices=["tester", "coder"], help="AT-GRPO: only this role")
    p.add_argument("--limit", type=int, default=20,
                   help="show at most this many samples (AT-GRPO: episodes); 0 = all")
    p.add_argument("--prompt", action="store_true", help="also show each sample's prompt")
    p.add_argument("--completion", action="store_true",
                   help="also show the raw completion beside the program")
    p.add_argument("--state", action="store_true",
                   help="show the curriculum's state per problem instead of samples")
    p.add_argument("--plot", action="store_true",
                   help="draw the run's curves (metrics.jsonl) into <run>/curves.png instead")
    return p


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    if args.plot:
        from infra.curves import main as plot_main
        plot_main([args.run_dir])
        return
    try:
        prompts, samples, states = load(args.run_dir)
    except SystemExit as e:
        print(f"infra.samples: error: {e.code}", file=sys.stderr)
        sys.exit(2)
    if args.state:
        print(format_states(states, args.problem))
        return
    chosen = select(samples, step=args.step, phase=args.phase, when=args.when,
                    family=args.family, verdict=args.verdict, problem=args.problem,
                    role=args.role)
    found = blocks(chosen)
    shown = found[:args.limit] if args.limit > 0 else found
    what = "samples" if len(found) == len(chosen) else f"samples in {len(found)} episodes"
    print(f"{len(chosen)} of {len(samples)} {what} match"
          + (f"; the first {len(shown)} shown (--limit)" if len(shown) < len(found) else ""))
    for b in shown:
        print()
        print(format_block(b, prompts, args.prompt, args.completion))


if __name__ == "__main__":
    main()
