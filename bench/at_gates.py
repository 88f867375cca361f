"""The AT-GRPO game's gates, measured from one model before any RL claim: what the tester's
tests are worth and what the turns do to the coder's program, per turn order, with the
model's own tester and with an oracle tester (each problem's ground-truth tests in place of
the tester's reply: agents.oracle_tester).

  G1  the tester's valid share: of every test the model's tester wrote (all turns), the share
      the reference solution passes                                             target >= 0.5
  G2  the turn-0 program's pass@1 minus the coder alone's (the same problems; the coder alone
      answers the bare problem)                                                 target >= 0
  G3  a right program shown only wrong tests is kept (its next program still passes the
      ground truth)                                                             target >= 0.9
  G4  a wrong program shown valid mismatches is fixed (its next program passes) target >= 0.15
  G5  the system with the oracle tester minus the coder alone (pass@1 after the turns)
                                                                                target >= +0.05
G3 and G4 are read twice: in the game (G3 from the model tester's games: turns whose coder
was shown a right program failing only invalid tests; G4 from the oracle's: a wrong program
failing valid tests), and as probes on the coder alone's own programs, the same for every
turn order (the coder's turn-1 prompt does not depend on it): each right one shown the easy
ground-truth tests with every expected output wrong (and with only the first wrong), each
wrong one shown the easy tests plus a ground-truth test it fails, the mismatches the
sandbox's (agents.wrong_outputs and agents.repair_states' choices).

Every game: one episode a problem (K = 1), --max-turns turns, sampling at --temperature; the
rewards are not read (K = 1 has nothing to choose), so every order runs with role_rewards
"ours" (tester-first cannot run with the pettingllms rewards). Standard errors: binomial over
episodes for rates, of the per-problem differences for differences.

    python bench/at_gates.py --model base --out bench/results/at-gates

Writes <out>/results.json (every figure, the per-problem outcomes, the command) and
<out>/gates.md (the gates table).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import subprocess
import sys
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import agents  # noqa: E402
import sandbox  # noqa: E402
from agents import EpisodeState, GameConfig  # noqa: E402
from infra import flags  # noqa: E402
from infra.engines import make_engine  # noqa: E402
from infra.model import init_distributed, load_tokenizer, resolve_model  # noqa: E402
from tester_judge import coder_jobs, passed_and_mismatches, result_of, run_jobs  # noqa: E402
from world import sources  # noqa: E402

TARGETS = {"G1": 0.5, "G2": 0.0, "G3": 0.9, "G4": 0.15, "G5": 0.05}


def rate(hits: int, n: int) -> dict:
    """{value, se, n}: a share and its binomial standard error."""
    p = hits / n if n else float("nan")
    return {"value": p, "se": math.sqrt(p * (1 - p) / n) if n else float("nan"), "n": n}


def paired(a: list[float], b: list[float]) -> dict:
    """{value, se, n}: mean of a - b over paired items and its standard error."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mean = sum(d) / n
    var = sum((x - mean) ** 2 for x in d) / (n - 1) if n > 1 else float("nan")
    return {"value": mean, "se": math.sqrt(var / n), "n": n}


def solved(g) -> float:
    return float(g is not None and g == 1.0)


# ------------------------------------------------------------------------------- the games


def play(problems, coder, tester, order, args, run_batch):
    """One episode a problem -> (episodes, stats), the game's settings from args."""
    cfg = GameConfig(k=1, max_turns=args.max_turns, max_tests=args.max_tests, turn_order=order,
                     role_rewards="ours", timeout=args.test_timeout)
    episodes, _, stats = agents.run_episodes(problems, coder, tester, run_batch, cfg=cfg)
    return episodes, stats


def repair_turns(episodes) -> dict:
    """The game's turns t >= 1 from what the coder was shown (each turn's coder_shown):
    right: a right program failing only invalid tests -> kept (the turn's program is right);
           right_zero: the same, failing every shown test ("passed 0");
    wrong: a wrong program (with code) failing only valid tests -> fixed."""
    out = {k: [0, 0] for k in ("right", "right_zero", "wrong")}
    for e in episodes:
        for h in e.history[1:]:
            shown, now = h["coder_shown"], h["program_gt_pass_rate"]
            g, valid, passed = (shown["program_gt_pass_rate"], shown["tests_valid"],
                                shown["tests_passed"])
            failed = [v for v, p in zip(valid, passed) if not p]
            if g is None or not failed:
                continue
            if g == 1.0 and not any(failed):
                out["right"][0] += 1
                out["right"][1] += now == 1.0
                if not any(passed):
                    out["right_zero"][0] += 1
                    out["right_zero"][1] += now == 1.0
            elif g < 1.0 and all(failed):
                out["wrong"][0] += 1
                out["wrong"][1] += now == 1.0
    return {k: rate(hit, n) for k, (n, hit) in out.items()}


def summary(episodes, stats, alone) -> dict:
    """One game's figures: pass@1 of the turn-0 and the final program, their differences to
    the coder alone (paired by problem), agreement, the tester's valid share (all turns and
    turn 0), the repair turns, and the per-problem outcomes (alone, turn 0, final)."""
    turn0 = [solved(e.history[0]["program_gt_pass_rate"]) for e in episodes]
    final = [solved(e.gt_pass_rate) for e in episodes]
    t0 = [e.history[0]["tester"] for e in episodes]
    t0_written = sum(t["n_tests"] for t in t0)
    t0_valid = sum(round(t["valid_share"] * t["n_tests"]) for t in t0)
    return {
        "turn0_pass@1": rate(int(sum(turn0)), len(turn0)),
        "final_pass@1": rate(int(sum(final)), len(final)),
        "turn0_minus_alone": paired(turn0, alone),
        "final_minus_alone": paired(final, alone),
        "agree_rate": rate(sum(e.agree for e in episodes), len(episodes)),
        "valid_share": rate(stats["tests_valid"], stats["tests_written"]),
        "valid_share_turn0": rate(t0_valid, t0_written),
        "repair_turns": repair_turns(episodes),
        "per_problem": [[int(a), int(b), int(c)] for a, b, c in zip(alone, turn0, final)],
    }


# ------------------------------------------------------------------------------- the probes


def shown_states(cases, cfg, run_batch):
    """(problem, program, tests) -> turn-1 states showing the program's real results on the
    tests (the sandbox's), as the game's coder would see them."""
    run_batch = run_batch or sandbox.run_batch
    states = [EpisodeState(p, i, turn=1, tests=tests, valid=[t in p.tests for t in tests],
                           tester_acted=True) for i, (p, _, tests) in enumerate(cases)]
    results = run_jobs([j for s, (_, code, _) in zip(states, cases)
                        for j in coder_jobs(s.problem, s.tests, [code])], run_batch,
                       cfg.timeout, cfg.memory_mb)
    return [agents.score_coders(s, [code], results, cfg)[0][0]
            for s, (_, code, _) in zip(states, cases)]


def probes(programs, coder, args, run_batch, seed) -> dict:
    """The coder alone's programs shown constructed turn-1 states -> kept / fixed shares:
    right programs with every easy test's output wrong ("all") or the first ("one"), wrong
    ones with the easy tests and a ground-truth test they fail ("wrong")."""
    cfg = GameConfig(k=1, max_tests=args.max_tests, role_rewards="ours",
                     timeout=args.test_timeout)
    rng = random.Random(seed)
    cases = {"all": [], "one": [], "wrong": []}
    for s in programs:
        p = s.problem
        easy = agents.easy_tests(p.tests, args.max_tests)
        if s.program is None or not easy:
            continue
        if s.gt_pass_rate == 1.0:
            if len(easy) > 1:
                cases["all"].append((p, s.program, agents.wrong_outputs(
                    easy, range(len(easy)), p.tests, p.fn_name, rng)))
            cases["one"].append((p, s.program, agents.wrong_outputs(easy, [0], p.tests,
                                                                    p.fn_name)))
        else:
            failed = [t for t, ok in zip(p.tests, s.passed_gt) if not ok]
            if failed:
                shown = easy if failed[0] in easy else ([failed[0]] + easy)[:args.max_tests]
                cases["wrong"].append((p, s.program, copy.deepcopy(shown)))
    out = {}
    for kind, cs in cases.items():
        states = shown_states(cs, cfg, run_batch)
        # keep only what the case says was shown: every test failed ("all"), some ("one",
        # "wrong"; a wrong program may pass the tests it is shown: then it is no case)
        states = [s for s in states if not all(s.passed) and (kind != "all" or not any(s.passed))]
        after = agents.coder_programs(states, coder, cfg, run_batch) if states else []
        out[kind] = rate(sum(a.gt_pass_rate == 1.0 for a in after), len(after))
        out[kind]["verbatim"] = sum((a.program or "").strip() == (s.program or "").strip()
                                    for a, s in zip(after, states))
    return out


def coder_alone(problems, coder, args, run_batch):
    """The coder alone's program a problem, with its per-test results on the ground truth
    (passed_gt, for the wrong-program probe)."""
    run_batch = run_batch or sandbox.run_batch
    cfg = GameConfig(k=1, role_rewards="ours", timeout=args.test_timeout)
    states = agents.coder_programs([EpisodeState(p, i) for i, p in enumerate(problems)], coder,
                                   cfg, run_batch)
    results = run_jobs([(s.program, s.problem.tests, s.problem, False) for s in states],
                       run_batch, cfg.timeout, cfg.memory_mb)
    for s in states:
        res = result_of(results, s.program, s.problem.tests, s.problem)
        s.passed_gt = passed_and_mismatches(res, s.problem.tests, s.problem.fn_name)[0]
    return states


# ------------------------------------------------------------------------------- the gates


def gates(res: dict) -> dict:
    """{order: {gate: {value, se, n, target, met, read}}}: the gates of each turn order."""
    out = {}
    pr = res.get("probes", {})
    for order, runs in res["orders"].items():
        model, oracle = runs.get("model"), runs.get("oracle")
        g = {}
        if model:
            g["G1"] = {**model["valid_share"], "read": "model tester, all turns"}
            g["G2"] = {**model["turn0_minus_alone"], "read": "model tester"}
            g["G3"] = {**model["repair_turns"]["right"], "read": "in game, model tester"}
        elif oracle:
            g["G2"] = {**oracle["turn0_minus_alone"], "read": "oracle tester"}
        if oracle:
            g["G4"] = {**oracle["repair_turns"]["wrong"], "read": "in game, oracle tester"}
            g["G5"] = {**oracle["final_minus_alone"], "read": "oracle tester"}
        if pr:
            g["G3 probe"] = {**pr["all"], "read": "probe: every shown output wrong"}
            g["G4 probe"] = {**pr["wrong"], "read": "probe: the coder alone's wrong programs"}
        for name, v in g.items():
            v["target"] = TARGETS[name.split()[0]]
            v["signed"] = name in ("G2", "G5")     # differences, shown with their sign
            v["met"] = bool(v["n"]) and v["value"] >= v["target"]
        out[order] = g
    return out


def fmt(v: dict) -> str:
    if not v["n"]:
        return "no case"
    sign = "+" if v.get("signed") else ""
    return f"{v['value']:{sign}.3f} ± {v['se']:.3f} (n {v['n']})"


def table(res: dict) -> str:
    orders = list(res["gates"])
    names = ["G1", "G2", "G3", "G3 probe", "G4", "G4 probe", "G5"]
    what = {"G1": "tester's valid share", "G2": "turn-0 program - coder alone",
            "G3": "right program shown only wrong tests, kept",
            "G4": "wrong program shown valid mismatches, fixed",
            "G5": "oracle-tester system - coder alone"}
    rows = [f"| gate | target | {' | '.join(orders)} |", "|---|---|" + "---|" * len(orders)]
    for name in names:
        cells = []
        for o in orders:
            v = res["gates"][o].get(name)
            cells.append("-" if v is None else
                         f"{fmt(v)} {'met' if v['met'] else '**not met**'}")
        if all(c == "-" for c in cells):
            continue
        target = TARGETS[name.split()[0]]
        label = what[name.split()[0]] + (" (probe)" if "probe" in name else "")
        rows.append(f"| {name}: {label} | >= {target:g} | {' | '.join(cells)} |")
    rows += ["", f"coder alone pass@1 {fmt(res['coder_alone'])}; per order and tester:", "",
             "| order | tester | turn 0 | after the turns | - coder alone | agree | valid "
             "share (turn 0) |", "|---|---|---|---|---|---|---|"]
    for o, runs in res["orders"].items():
        for who, r in runs.items():
            rows.append(f"| {o} | {who} | {r['turn0_pass@1']['value']:.3f} | "
                        f"{r['final_pass@1']['value']:.3f} | "
                        f"{r['final_minus_alone']['value']:+.3f} ± "
                        f"{r['final_minus_alone']['se']:.3f} | {r['agree_rate']['value']:.3f} | "
                        f"{r['valid_share']['value']:.3f} ({r['valid_share_turn0']['value']:.3f})"
                        " |")
    return "\n".join(rows) + "\n"


# ------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = flags.new_parser("at_gates.py", __doc__.split("\n\n")[0])
    p.add_argument("--model", default="base", help="'base' (models/base) or a model folder")
    p.add_argument("--out", default="bench/results/at-gates")
    p.add_argument("--episodes", type=flags.POSITIVE_INT, default=350,
                   help="held-out problems (the first N of tasks:eval, 35 a family at 350), "
                        "one episode each")
    p.add_argument("--orders", default="parallel,tester-first",
                   help="turn orders, comma-separated (agents.TURN_ORDERS)")
    p.add_argument("--tester", choices=["both", "model", "oracle"], default="both",
                   help="the oracle switch: the model's tester, the oracle (ground-truth tests "
                        "in place of its reply), or both")
    p.add_argument("--no-probes", action="store_true", help="skip the G3 / G4 probes")
    p.add_argument("--temperature", type=flags.NON_NEGATIVE, default=0.6,
                   help="sampling temperature (the public configs' evaluation: 0.6)")
    p.add_argument("--max-turns", type=flags.POSITIVE_INT, default=2)
    p.add_argument("--max-tests", type=flags.POSITIVE_INT, default=2)
    p.add_argument("--max-new-tokens", type=flags.POSITIVE_INT, default=112,
                   help="the coder's budget (the tester's: --tester-max-new-tokens)")
    p.add_argument("--tester-max-new-tokens", type=flags.POSITIVE_INT, default=96)
    p.add_argument("--test-timeout", type=flags.POSITIVE, default=6.0)
    p.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="as agents.py's (auto: vLLM's CPU build when it starts); the shipped "
                        "base's gates in bench/results/at-gates were measured with hf")
    p.add_argument("--cpu-threads", type=flags.COUNT, default=1,
                   help="torch threads (0: torch's default)")
    p.add_argument("--sandbox-workers", type=flags.POSITIVE_INT, default=None)
    p.add_argument("--seed", type=int, default=0)
    return p


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__)),
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv=None):
    a = build_parser().parse_args(argv)
    orders = [o for o in a.orders.split(",") if o]
    bad = [o for o in orders if o not in agents.TURN_ORDERS]
    if bad:
        raise SystemExit(f"--orders: {bad} not among {sorted(agents.TURN_ORDERS)}")
    t0 = time.time()
    say = lambda msg: print(f"[at_gates {time.time() - t0:5.0f}s] {msg}", flush=True)  # noqa: E731
    if a.cpu_threads:
        torch.set_num_threads(a.cpu_threads)
    d = init_distributed()
    path = resolve_model(a.model)
    m = SimpleNamespace(tokenizer=load_tokenizer(path),
                        engine=make_engine(a.engine, path, d.device, seed=a.seed))
    problems = sources.load_problems("tasks", split="test", path="eval")[:a.episodes]
    run_batch = agents.sandbox_runner(a.sandbox_workers)

    def generate(role, seed):
        budget = a.tester_max_new_tokens if role == "tester" else a.max_new_tokens
        return agents.engine_generate(m, random.Random(seed), temperature=a.temperature,
                                      top_p=1.0, max_new_tokens=budget)

    alone_states = coder_alone(problems, generate("coder", a.seed), a, run_batch)
    alone = [solved(s.gt_pass_rate) for s in alone_states]
    res = {"model": path, "commit": commit(), "date": time.strftime("%Y-%m-%d"),
           "command": "python bench/at_gates.py " + " ".join(sys.argv[1:] if argv is None
                                                             else argv),
           "settings": {k: v for k, v in vars(a).items() if k not in ("out",)},
           "coder_alone": rate(int(sum(alone)), len(alone)), "orders": {}}
    say(f"coder alone {res['coder_alone']['value']:.3f} on {len(problems)} problems")
    testers = {"model": None, "oracle": agents.oracle_tester(problems, a.max_tests)}
    for i, order in enumerate(orders):
        res["orders"][order] = {}
        for who in (["model", "oracle"] if a.tester == "both" else [a.tester]):
            seed = a.seed + 1000 * (i + 1) + (0 if who == "model" else 500)
            tester = testers[who] or generate("tester", seed + 1)
            episodes, stats = play(problems, generate("coder", seed), tester, order, a,
                                   run_batch)
            r = res["orders"][order][who] = summary(episodes, stats, alone)
            say(f"{order}, {who} tester: turn 0 {r['turn0_pass@1']['value']:.3f}, final "
                f"{r['final_pass@1']['value']:.3f}, valid {r['valid_share']['value']:.3f}")
    if not a.no_probes:
        res["probes"] = probes(alone_states, generate("coder", a.seed + 7), a, run_batch,
                               a.seed)
        say("probes: " + ", ".join(f"{k} {v['value']:.3f} (n {v['n']})"
                                   for k, v in res["probes"].items()))
    m.engine.close()
    res["gates"] = gates(res)
    res["seconds"] = round(time.time() - t0)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "gates.md"), "w") as f:
        f.write(table(res))
    print(table(res))


if __name__ == "__main__":
    main()
