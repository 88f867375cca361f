"""Two arms of an ablation, paired by RL seed: the held-out difference with its standard error.

    for s in 0 1 2; do python grpo.py --seed $s --out runs/a-s$s; done
    for s in 0 1 2; do python grpo.py --seed $s --out runs/b-s$s --adv-scale none; done
    python bench/compare.py --a runs/a-s0 runs/a-s1 runs/a-s2 --b runs/b-s0 runs/b-s1 runs/b-s2

Both arms start from the same policy, so run i of arm A and run i of arm B (same RL seed) are
scored on the same held-out problems. Per seed, over the N problems both scored, with solved
shares a_i and b_i (rates.json's rates_after_rl):

    d = mean_i (a_i - b_i),    se(d) = sd_i(a_i - b_i) / sqrt(N)     (within strata if given)

and over seeds s = 1..S:

    D = mean_s d_s,            se(D) = sd_s(d_s) / sqrt(S)

se(D) holds the RL seed's noise as well as the evaluation's; |D| > 2 se(D) is a difference.
bench/claims.py reads its grid's cells with these same helpers.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from infra import evalstats  # noqa: E402


def paired(a: dict, b: dict, labels: dict | None = None) -> tuple[float, float]:
    """(mean of a_i - b_i, its standard error) over the problem ids in both {id: value} maps;
    labels {id: stratum} (e.g. world/tasks.py's family): the se within strata."""
    ids = [i for i in a if i in b]
    if not ids:
        raise ValueError("the two runs share no problem id: were they scored on the same set?")
    diffs = [a[i] - b[i] for i in ids]
    labels = labels or {}
    strata = [labels[i] for i in ids] if all(i in labels for i in ids) else None
    return sum(diffs) / len(diffs), evalstats.standard_error(diffs, strata)


def over_seeds(values: list[float]) -> dict:
    """{"mean", "se" (sd / sqrt(S); None for one seed), "seeds": the per-seed values}."""
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "se": se, "seeds": values}


def read_rates(run: str, key: str) -> dict:
    """{problem id: solved share} under `key` of <run>/rates.json (ValueError: a line for the
    user when it is absent)."""
    path = os.path.join(run, "rates.json")
    if not os.path.isfile(path):
        raise ValueError(f"{path} does not exist (is {run} a finished run's --out?)")
    rates = json.load(open(path)).get(key)
    if not rates:
        raise ValueError(f"{path} has no {key!r}")
    return rates


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--a", nargs="+", required=True, metavar="RUN",
                   help="arm A's run folders (each a finished run's --out), in seed order")
    p.add_argument("--b", nargs="+", required=True, metavar="RUN",
                   help="arm B's run folders, in the same seed order")
    p.add_argument("--key", default="rates_after_rl",
                   help="rates.json entry to compare (train_rates_after_rl: the train sample; "
                        "rates_before_rl: before RL)")
    args = p.parse_args(argv)
    if len(args.a) != len(args.b):
        p.error(f"--a has {len(args.a)} runs and --b {len(args.b)}: pair them by seed")
    per_seed = []
    for a, b in zip(args.a, args.b):
        try:
            d, se = paired(read_rates(a, args.key), read_rates(b, args.key))
        except ValueError as e:
            p.error(str(e))
        per_seed.append(d)
        print(f"{a} - {b}: {100 * d:+.1f} ± {100 * se:.1f} points")
    stat = over_seeds(per_seed)
    se = "-" if stat["se"] is None else f"{100 * stat['se']:.1f}"
    print(f"A - B over {len(per_seed)} seed(s): {100 * stat['mean']:+.1f} ± {se} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
