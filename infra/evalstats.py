"""The evaluation's statistics: unbiased pass@k, the standard error of a pass rate (within
strata), the hardest quarter (DRIVE's tail) and pass@1 per family. Pure functions of counts and
of the problems' metadata (world/tasks.py's family and difficulty score)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def standard_error(values: Sequence[float], strata: Sequence | None = None) -> float:
    """Standard error of the mean of per-problem solve rates x_1..x_N:

        se = sqrt(s^2 / N),   s^2 = sum_i (x_i - mean)^2 / (N - 1)

    It holds both the spread between problems and each rate's sampling noise, so it says how
    far another draw of problems and samples could move pass@1 (0 for fewer than 2).
    strata (one label a problem, e.g. world/tasks.py's family): the set's mix of strata is fixed by
    design, so only the spread within each stratum h (N_h problems, variance s_h^2) counts:

        se = sqrt(sum_h (N_h / N)^2 s_h^2 / N_h)

    (a stratum of one problem adds nothing: its variance is unknown)."""
    def var_of_mean(xs):
        if len(xs) < 2:
            return 0.0
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)
    n = len(values)
    if n < 2:
        return 0.0
    if strata is None:
        return math.sqrt(var_of_mean(values))
    groups: dict = {}
    for v, h in zip(values, strata):
        groups.setdefault(h, []).append(v)
    return math.sqrt(sum((len(xs) / n) ** 2 * var_of_mean(xs) for xs in groups.values()))


def family_labels(problems, ids: Sequence) -> list | None:
    """The world/tasks.py family of each problem id in `ids` (standard_error's strata); None when
    one has none (other data sets)."""
    family = {p.id: p.metadata.get("family") for p in problems}
    labels = [family.get(i) for i in ids]
    return None if None in labels else labels


def hardest_problems(problems, ids) -> list:
    """The quarter (at least one) of the `problems` whose id is in `ids` with the highest
    difficulty score (world/tasks.py's metadata["score"]: lines + 2 branches + 2 loops + operations;
    ties keep the given order), hardest first. [] when none is in `ids` or one has no score
    (other data sets)."""
    scored = [p for p in problems if p.id in ids]
    if not scored or any("score" not in p.metadata for p in scored):
        return []
    return sorted(scored, key=lambda p: -p.metadata["score"])[:max(1, len(scored) // 4)]


def hardest_quarter(problems, solved: Mapping, n: int) -> dict:
    """pass@1 / pass@n on hardest_problems(problems, solved), from solved = {problem id:
    samples of n that passed}. DRIVE's claim is about this tail. {} when there is none."""
    hard = hardest_problems(problems, solved)
    if not hard:
        return {}
    counts = [solved[p.id] for p in hard]
    return {"pass@1_hardest_quarter": sum(counts) / (n * len(hard)),
            f"pass@{n}_hardest_quarter": sum(pass_at_k(n, c, n) for c in counts) / len(hard),
            "hardest_quarter_problems": len(hard),
            "hardest_quarter_min_score": hard[-1].metadata["score"]}


def by_family(problems, solved: Mapping, n: int) -> dict:
    """pass@1 per world/tasks.py family, {"pass@1_by_family": {family: sum of solved / (n *
    count)}}, from solved = {problem id: samples of n that passed}: which families a gain comes from
    (the long, branchy ones are CCCS's and FGO's). {} when a problem has no family."""
    seen = [p for p in problems if p.id in solved]
    if not seen or any("family" not in p.metadata for p in seen):
        return {}
    counts: dict = {}
    for p in seen:
        counts.setdefault(p.metadata["family"], []).append(solved[p.id])
    return {"pass@1_by_family": {f: sum(c) / (n * len(c)) for f, c in sorted(counts.items())}}
