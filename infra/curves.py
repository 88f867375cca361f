"""A run's curves as one picture: <out>/curves.png from its metrics.jsonl, drawn by every
trainer at the end of its run and by

    python -m infra.curves RUN_DIR        (or python -m infra.samples RUN_DIR --plot)

One panel a quantity, each drawn only when the run logged one of its keys (PANELS): reward
and pass rate per RL step, the held-out pass@1 at each evaluation (the train sample's dashed),
the loss, clip fraction and KL, and the method's own (FGO's masked share, the CCCS stage
counts, the tester's valid share). matplotlib draws it off-screen (the Agg backend); without
matplotlib there is no picture and one line says so.

Nothing here imports the trainers' modules: it reads the run's metrics.jsonl.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import os
import sys

FILE = "curves.png"
MISSING = "matplotlib is not installed (pip install matplotlib): no curves.png"

# (title, rows the keys are read from: "rl" per step or "eval" per evaluation, key patterns)
PANELS = [
    ("reward and pass rate", "rl", ["reward_mean", "pass_rate", "pass_at_1", "agree_rate"]),
    ("held-out pass@1", "eval", ["pass@1", "pass@1_after_turns", "pass@1_coder_alone"]),
    ("loss", "rl", ["loss", "*_loss"]),
    ("clip fraction and KL", "rl", ["clip_frac", "*_clip_frac", "approx_kl", "*_approx_kl",
                                    "kl", "kl_ref"]),
    ("FGO: masked share of tokens", "rl", ["fgo_masked_share", "fgo_covered_frac"]),
    ("CCCS: problems per stage", "rl", ["cccs_final", "cccs_final-*"]),
    ("DRIVE: hard-focus pool", "rl", ["hf_pool_pass_rate"]),
    ("tester: valid share of its tests", "rl", ["tester_valid_share_mean"]),
    ("tester: valid share at evaluation", "eval", ["tester_valid_share"]),
]


def read_rows(run_dir: str) -> list[dict]:
    """metrics.jsonl's rows (lines that are not JSON objects skipped)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"{path}: no such file; pass a run's --out folder")
    rows = []
    with open(path) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def curves(rows: list[dict]) -> list[tuple[str, list[tuple[str, list, list, bool]]]]:
    """The panels to draw: [(title, [(curve name, steps, values, dashed)])], only those with a
    curve. A curve is a key of PANELS found in the rows: named by the key for RL rows, by
    "eval/<key>" for the held-out evaluations and "eval/train_<key>" for the train sample's
    (dashed), in step order."""
    rl = [r for r in rows if r.get("phase") == "rl"]
    evals = [r for r in rows if r.get("phase") == "eval"]
    out = []
    for title, phase, patterns in PANELS:
        source = rl if phase == "rl" else evals
        keys = []
        for pattern in patterns:
            keys += sorted(k for k in {k for r in source for k in r}
                           if fnmatch.fnmatchcase(k, pattern) and k not in keys)
        drawn = []
        for key in keys:
            if phase == "rl":
                pts = [(r["step"], r[key]) for r in source if _number(r.get(key))]
                drawn.append((key, pts, False))
            else:
                for train in (False, True):
                    pts = [(r.get("step", 0), r[key]) for r in source if _number(r.get(key))
                           and str(r.get("when", "")).startswith("train_") == train]
                    drawn.append((f"eval/{'train_' if train else ''}{key}", pts, train))
        drawn = [(name, [s for s, _ in pts], [v for _, v in pts], dashed)
                 for name, pts, dashed in drawn if pts]
        if drawn:
            out.append((title, drawn))
    return out


def plot_curves(run_dir: str, path: str | None = None) -> list[str]:
    """Draw the run's curves (curves(): one panel each) into `path` (default
    <run_dir>/curves.png). Returns the names of the curves drawn; ImportError without
    matplotlib."""
    import matplotlib
    matplotlib.use("Agg")                       # no display: files only
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = curves(read_rows(run_dir))
    path = path or os.path.join(run_dir, FILE)
    cols = 2 if len(panels) > 1 else 1
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
    names = []
    for ax, (title, drawn) in zip(axes.flat, panels):
        for name, steps, values, dashed in drawn:
            one = len(steps) == 1
            ax.plot(steps, values, "--" if dashed else "-", marker="o" if one or
                    title.startswith("held-out") else None, markersize=3, label=name)
            names.append(name)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("RL step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    if not panels:
        axes.flat[0].text(0.5, 0.5, "no RL or evaluation rows in metrics.jsonl",
                          ha="center", va="center")
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)), fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return names


def plot_run(run_dir: str) -> str:
    """plot_curves into <run_dir>/curves.png for a trainer's last line: the line to print
    ("curves: PATH", or MISSING without matplotlib). A run never fails for its picture."""
    try:
        plot_curves(run_dir)
    except ImportError:
        return MISSING
    return f"curves: {os.path.join(run_dir, FILE)}"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m infra.curves",
                                description="Draw a run's curves (metrics.jsonl) into "
                                            "<run>/curves.png.")
    p.add_argument("run_dir", help="the run's --out folder")
    p.add_argument("--out", help="the picture's path (default <run_dir>/curves.png)")
    args = p.parse_args(argv)
    try:
        names = plot_curves(args.run_dir, args.out)
    except ImportError:
        print(MISSING, file=sys.stderr)
        sys.exit(1)
    except SystemExit as e:
        print(f"infra.curves: error: {e.code}", file=sys.stderr)
        sys.exit(2)
    print(f"{args.out or os.path.join(args.run_dir, FILE)}: {len(names)} curves "
          f"({', '.join(names)})")


if __name__ == "__main__":
    main()
