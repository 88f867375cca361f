"""How many seeds a claims comparison needs to resolve an effect, from a grid's own cells.

Both arms of a paired comparison start from the same model with the same seed and are judged
on the same held-out problems; over the seeds s, the paired difference d_s = p_A,s - p_B,s
(held-out pass@1 after RL, points) has a variance the cells measure. Seeds needed to detect an
effect delta (two-sided alpha 0.05, power 0.8):

    S = ceil((1.96 + 0.84)^2 * Var(d) / delta^2)          (2 at least)

With few seeds Var(d) is itself uncertain: S is also given at the ends of its chi-square 80%
interval. Beside it, what the evaluation's sampling alone would give if the arms' samples were
independent: Var_e = sum over both arms of sum_i p_i (1 - p_i) / (n - 1) / N^2 (rates.json: n
samples of each of N problems). When Var(d) is below Var_e the arms' samples are not
independent (the same seed draws the same engine seeds, so two similar policies sample alike):
the pairing already removes most of the sampling noise, and more samples per problem cannot
buy what Var_e would suggest. Per-sample outcomes of both arms (samples.jsonl with
--log-samples all) would split Var(d) into sampling and run; rates.json cannot.

    python bench/power.py CELLS_DIR --arms sc-fgo sc-ppo [--arms A B ...]
        [--effects 0.6 1.5 2.9] [--out DIR]

CELLS_DIR holds <arm>/seed<k>/{rates.json,summary.json,metrics.jsonl,cmd.json} (a claims
grid's cells, e.g. bench/results/claims/cells.tgz unpacked). A cell's cost is its wall_seconds.
"""
import argparse
import json
import math
import os
import statistics

Z = 1.96 + 0.84   # two-sided alpha 0.05, power 0.8
# chi-square quantiles (0.1, 0.9) for 1-9 degrees of freedom: the seeds' variance interval
CHI2_10_90 = {1: (0.0158, 2.706), 2: (0.211, 4.605), 3: (0.584, 6.251), 4: (1.064, 7.779),
              5: (1.610, 9.236), 6: (2.204, 10.645), 7: (2.833, 12.017), 8: (3.490, 13.362),
              9: (4.168, 14.684)}


def sampling_variance(rates: dict[str, float], n: int) -> float:
    """Var of the mean pass@1 over the problems from sampling n per problem (unbiased:
    p(1-p)/(n-1) per problem), in points^2."""
    if n < 2:
        raise ValueError("the sampling variance needs n >= 2 samples per problem")
    values = list(rates.values())
    return sum(p * (1 - p) / (n - 1) for p in values) / len(values) ** 2 * 1e4


def cell(path: str) -> dict:
    """One cell's held-out pass@1 after RL (points), its independent-sampling variance, its
    eval n and its wall seconds."""
    summary = json.load(open(os.path.join(path, "summary.json")))
    rates = json.load(open(os.path.join(path, "rates.json")))["rates_after_rl"]
    argv = json.load(open(os.path.join(path, "cmd.json")))["cmd"]
    n = int(argv[argv.index("--eval-n") + 1]) if "--eval-n" in argv else 4
    return {"pass": 100 * summary["pass_at_1_after_rl"], "var_e": sampling_variance(rates, n),
            "n": n, "problems": len(rates), "seconds": summary["wall_seconds"]}


def seeds_for(var_d: float, delta: float) -> int:
    return max(2, math.ceil(Z ** 2 * var_d / delta ** 2))


def analyse(cells_dir: str, a: str, b: str, effects) -> dict:
    seeds = sorted(set(os.listdir(os.path.join(cells_dir, a)))
                   & set(os.listdir(os.path.join(cells_dir, b))))
    pairs = [(cell(os.path.join(cells_dir, a, s)), cell(os.path.join(cells_dir, b, s)))
             for s in seeds]
    if len(pairs) < 2:
        raise SystemExit(f"{a} and {b} share {len(pairs)} seed(s): the seeds' variance needs 2")
    d = [x["pass"] - y["pass"] for x, y in pairs]
    var_d = statistics.variance(d)
    var_e = statistics.mean(x["var_e"] + y["var_e"] for x, y in pairs)
    df = len(d) - 1
    lo, hi = CHI2_10_90.get(df, (None, None))
    interval = (df * var_d / hi, df * var_d / lo) if lo else None
    cell_hours = statistics.mean(c["seconds"] for p in pairs for c in p) / 3600
    plans = [{"effect": delta, "seeds": seeds_for(var_d, delta),
              "seeds_80pct": [seeds_for(v, delta) for v in interval] if interval else None,
              "cell_hours_total": round(2 * seeds_for(var_d, delta) * cell_hours, 1)}
             for delta in effects]
    return {"arms": [a, b], "seeds": seeds, "d": [round(x, 2) for x in d],
            "mean_d": round(statistics.mean(d), 2),
            "se_d": round(math.sqrt(var_d / len(d)), 2), "sd_d": round(math.sqrt(var_d), 3),
            "sd_d_80pct": [round(math.sqrt(v), 3) for v in interval] if interval else None,
            "sd_if_independent_sampling": round(math.sqrt(var_e), 3),
            "eval_n": pairs[0][0]["n"], "problems": pairs[0][0]["problems"],
            "cell_hours": round(cell_hours, 2), "plans": plans}


def report(r: dict) -> str:
    a, b = r["arms"]
    lines = [f"{a} - {b}: d by seed {r['d']}, mean {r['mean_d']:+.2f} +- {r['se_d']:.2f}",
             f"  sd of d {r['sd_d']} (80% interval {r['sd_d_80pct']}); independent sampling "
             f"alone would give {r['sd_if_independent_sampling']} "
             f"(n={r['eval_n']} x {r['problems']} problems); a cell {r['cell_hours']} h",
             "  | effect (points) | seeds an arm | over sd's 80% interval | cell hours, 2 arms |",
             "  |---|---|---|---|"]
    lines += [f"  | {p['effect']} | {p['seeds']} | {p['seeds_80pct']} | {p['cell_hours_total']} |"
              for p in r["plans"]]
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("cells", help="a claims grid's cells folder (<arm>/seed<k>/...)")
    p.add_argument("--arms", nargs=2, action="append", required=True, metavar=("A", "B"),
                   help="a paired comparison A - B (repeatable)")
    p.add_argument("--effects", nargs="+", type=float, default=[0.6, 1.5, 2.9],
                   help="effects to detect, in points of pass@1")
    p.add_argument("--out", default=None, help="folder for power.json")
    args = p.parse_args()
    if not os.path.isdir(args.cells):
        p.error(f"no such folder: {args.cells}")
    results = [analyse(args.cells, a, b, args.effects) for a, b in args.arms]
    for r in results:
        print(report(r) + "\n")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "power.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
