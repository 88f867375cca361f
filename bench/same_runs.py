"""Do two runs report the same figures? Compares two output folders of grpo.py / ppo_fgo.py
(--out): every metrics.jsonl row, summary.json and rates.json, less what is expected to
differ between two runs of the same seed: timings (keys matching time/*, wall_seconds) and the
keys given by --ignore (fnmatch patterns, e.g. "judge/*").

    python bench/same_runs.py RUN_A RUN_B [--ignore KEY ...]

Prints "identical", or per differing row (or file) the keys that differ with both values;
exit status 0 when identical, 1 when not (a file one run has and the other lacks counts), 2
when a folder holds no metrics.jsonl.
Values are compared exactly (0.1 + 0.2 != 0.3): a behaviour-preserving change must not move a
figure at all; nested values (pass@1_by_family) are compared whole."""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys

ALWAYS_IGNORED = ("time/*", "wall_seconds")
FILES = ("metrics.jsonl", "summary.json", "rates.json")


def ignored(key: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(key, p) for p in patterns)


def row_differences(a: dict, b: dict, patterns=ALWAYS_IGNORED) -> dict:
    """{key: (value in a, value in b)} for every key whose values differ (a key missing on
    one side has the value None there), less the ignored keys.

    >>> row_differences({"loss": 0.5, "time/step": 3.0}, {"loss": 0.25, "time/step": 4.0})
    {'loss': (0.5, 0.25)}
    """
    keys = sorted((set(a) | set(b)) - {k for k in set(a) | set(b) if ignored(k, patterns)})
    return {k: (a.get(k), b.get(k)) for k in keys
            if k not in a or k not in b or a[k] != b[k]}


def load(folder: str, name: str):
    """A run's file as a list of rows (metrics.jsonl, one a line) or one dict; None when the
    folder has no such file."""
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        if name.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return [json.load(f)]


def compare(run_a: str, run_b: str, patterns=ALWAYS_IGNORED) -> list[str]:
    """Lines describing every difference between the two runs' files (empty: identical).
    Rows are paired in order; a row that one run has and the other lacks is a difference."""
    out = []
    for name in FILES:
        rows_a, rows_b = load(run_a, name), load(run_b, name)
        if rows_a is None or rows_b is None:
            if rows_a is not rows_b:
                out.append(f"{name}: only in {run_a if rows_b is None else run_b}")
            continue
        if len(rows_a) != len(rows_b):
            out.append(f"{name}: {len(rows_a)} rows vs {len(rows_b)}")
        for i, (a, b) in enumerate(zip(rows_a, rows_b)):
            diff = row_differences(a, b, patterns)
            if diff:
                where = f"{name} row {i + 1} ({a.get('phase', '')} {a.get('step', '')})" \
                    if name.endswith(".jsonl") else name
                out.append(f"{where}: " + "; ".join(f"{k}: {va!r} vs {vb!r}"
                                                   for k, (va, vb) in diff.items()))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_a", help="one run's --out folder")
    p.add_argument("run_b", help="the other run's --out folder")
    p.add_argument("--ignore", action="append", default=[], metavar="PATTERN",
                   help="also ignore keys matching this fnmatch pattern (repeatable)")
    a = p.parse_args(argv)
    for folder in (a.run_a, a.run_b):
        if not os.path.isfile(os.path.join(folder, "metrics.jsonl")):
            print(f"{folder}: no metrics.jsonl there; give a run's --out folder.",
                  file=sys.stderr)
            return 2
    differences = compare(a.run_a, a.run_b, (*ALWAYS_IGNORED, *a.ignore))
    print("\n".join(differences) if differences else "identical")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
