"""DRIVE's data side of RL: the hard-focus schedule of stage 2 and the offline filter.

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

The trainer (trainer.Curriculum, built from --hard-focus; trainer.select_problems for
--offline-filter) calls these around its rollouts. Plain Python on ids and floats: no model,
no sandbox.
"""

import argparse
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence

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


def hard_focus_spec(text: str) -> str:
    """--hard-focus checked at parse time (parse_hard_focus), kept as the string."""
    if text:
        try:
            parse_hard_focus(text)
        except ValueError as e:
            # argparse names the flag itself
            raise argparse.ArgumentTypeError(str(e).removeprefix("--hard-focus: ")) from None
    return text
