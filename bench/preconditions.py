"""Each method's precondition, measured from one model on the base world before any claim
(tasks.generate_base; shared/docs/methods.md, "Each method's precondition"):

  room    GRPO     pass@1 and pass@8 per family on the held-out eval split (T = 1): the room
                   between them is what RL can sharpen into
  FGO     StepCoder the reference's line coverage under the first N tests of each rl problem
                   (--max-train-tests N; the sandbox's coverage, as FGO's masks use it), and
                   the false-pass rate of the model's own programs: of those that pass the N
                   tests, the share that fails the full set
  CCCS    StepCoder the CCCS family's held-out pass@8 written whole, and completed from its
                   last split point (CCCS's first stage)
  DRIVE   stage 2  the hardest quarter of the eval split (evalstats.hardest_problems, by the
                   difficulty score DRIVE's claim is read on): the share with pass@64 > 0

The tester/coder game's figures come from agents.py --eval-only (its summary's
tester_valid_share, pass@1_coder_alone and pass@1_after_turns), run per turn order and seed.

    python bench/preconditions.py --model models/base --out bench/results/preconditions

Writes <out>/preconditions.json and <out>/preconditions.md (the table the README and the
model card quote). All sampling at T = 1, top-p 1, the CPU default's 112 new tokens.
"""
from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cccs  # noqa: E402
import data  # noqa: E402
import rollouts  # noqa: E402
import sandbox  # noqa: E402
from infra import evalstats, flags  # noqa: E402
from infra.engines import make_engine  # noqa: E402
from infra.model import init_distributed, load_tokenizer, resolve_model  # noqa: E402
from models import make_base as base  # noqa: E402
from world import tasks  # noqa: E402


def by_family(problems, values: dict) -> dict[str, float]:
    """{family: mean of values[problem id]} over the problems that have a value."""
    out: dict[str, list] = {}
    for p in problems:
        if p.id in values:
            out.setdefault(p.metadata["family"], []).append(values[p.id])
    return {f: sum(v) / len(v) for f, v in sorted(out.items())}


def pass_at(n: int, k: int, rates: dict) -> dict:
    """{problem id: pass@k} from solved shares of n samples."""
    return {pid: evalstats.pass_at_k(n, round(r * n), k) for pid, r in rates.items()}


def reference_coverage(problems, n_tests: int, workers) -> tuple[dict[str, float], int]:
    """({problem id: lines the reference runs under its first n_tests / under all its tests},
    the problems left out because the sandbox could not vouch for either coverage: its
    executed_lines None, unknown)."""
    jobs = [data.sandbox_job(p, p.solutions[0], t, coverage=True, timeout=4.0)
            for p in problems for t in (p.tests[:n_tests], p.tests)]
    res = sandbox.run_batch(jobs, workers=workers)
    ratios, unknown = {}, 0
    for i, p in enumerate(problems):
        few, every = res[2 * i].executed_lines, res[2 * i + 1].executed_lines
        if few is None or every is None:
            unknown += 1
            continue
        ratios[p.id] = len(few) / max(len(every), 1)
    return ratios, unknown


def false_pass_rates(engine, tok, problems, n_tests: int, n: int, settings: dict) -> dict:
    """The model's n programs a problem judged on its first n_tests tests, and those that
    pass them on the rest: {family: (passed the train tests, of those failed the full set)}.
    settings: base.eval_settings'."""
    prompts = [rollouts.prompt_text(tok, p) for p in problems]
    outs = engine.generate(prompts, n=n, temperature=1.0, top_p=1.0,
                           max_new_tokens=settings["max_new_tokens"], seed=settings["seed"] + 11)
    flat = [p for p in problems for _ in range(n)]
    texts = [c.text for o in outs for c in o]
    _, results, programs = rollouts.score_completions(
        [rollouts.train_view(p, n_tests) for p in flat], texts, reward=settings["reward"],
        test_timeout=settings["test_timeout"], workers=settings["workers"])
    false = rollouts.false_passes(flat, programs, results, n_tests,
                                  test_timeout=settings["test_timeout"],
                                  workers=settings["workers"])
    out: dict[str, list] = {}
    for p, res, f in zip(flat, results, false):
        c = out.setdefault(p.metadata["family"], [0, 0])
        if res is not None and res.status == "pass":
            c[0] += 1
            c[1] += f
    return {fam: {"train_passes": a, "false_passes": b, "false_pass_rate": b / max(a, 1)}
            for fam, (a, b) in sorted(out.items())}


def last_stage_rates(engine, tok, problems, n: int, settings: dict) -> dict[str, float]:
    """{problem id: solved share} when each program is completed from its last split point
    (the prefix in the prompt, as the CCCS schedule's first stage). settings:
    base.eval_settings'."""
    prefixes = [cccs.make_subtask(p.solutions[0], cccs.stage_starts(p.solutions[0])[0])[0]
                for p in problems]
    outs = engine.generate([rollouts.prompt_text(tok, p, x) for p, x in zip(problems, prefixes)],
                           n=n, temperature=1.0, top_p=1.0,
                           max_new_tokens=settings["max_new_tokens"], seed=settings["seed"] + 13)
    flat = [p for p in problems for _ in range(n)]
    _, results, _ = rollouts.score_completions(
        flat, [c.text for o in outs for c in o], reward=settings["reward"],
        test_timeout=settings["test_timeout"], workers=settings["workers"],
        prefixes=[x for x in prefixes for _ in range(n)])
    return {p.id: sum(r is not None and r.status == "pass"
                      for r in results[i * n:(i + 1) * n]) / n for i, p in enumerate(problems)}


def table(res: dict) -> str:
    """The preconditions as Markdown: one row per family, then the method-level figures."""
    room, cov, fp = res["room"], res["fgo"]["coverage_by_family"], res["fgo"]["false_pass"]
    rows = ["| family | held-out pass@1 | pass@8 | room | reference coverage under "
            f"{res['fgo']['n_tests']} tests | false-pass rate (passes) |",
            "|---|---|---|---|---|---|"]
    for f in sorted(room["pass@1_by_family"]):
        p1, p8 = room["pass@1_by_family"][f], room["pass@8_by_family"][f]
        fpf = fp.get(f)
        fp_text = f"{fpf['false_pass_rate']:.2f} ({fpf['train_passes']})" if fpf else "-"
        rows.append(f"| {f} | {p1:.3f} | {p8:.3f} | {p8 - p1:.3f} | "
                    f"{cov.get(f, float('nan')):.2f} | {fp_text} |")
    rows.append(f"| all | {room['pass@1']:.3f} | {room['pass@8']:.3f} | "
                f"{room['pass@8'] - room['pass@1']:.3f} | | |")
    c, dr = res["cccs"], res["drive"]
    rows += ["", f"- CCCS family ({c['family']}, {c['problems']} held-out problems): pass@8 "
             f"whole {c['whole_pass@8']:.3f}, completed from its last split point "
             f"{c['last_stage_pass@8']:.3f} (pass@1 {c['whole_pass@1']:.3f} / "
             f"{c['last_stage_pass@1']:.3f}).",
             f"- DRIVE: hardest quarter of the eval split ({dr['problems']} problems by "
             f"difficulty score): pass@{dr['k']} > 0 on {dr['share_solved']:.2f} of them "
             f"(pass@1 {dr['pass@1']:.3f}, pass@{dr['k']} {dr['pass@k']:.3f}).",
             f"- FGO: the branchy families' reference coverage under {res['fgo']['n_tests']} "
             f"tests {res['fgo']['branchy_coverage']:.2f} (every test: 1.00; "
             f"{res['fgo'].get('coverage_unknown', 0)} references of unknown coverage left "
             "out); false-pass "
             f"rate of the model's programs on them {res['fgo']['branchy_false_pass_rate']:.2f}."]
    return "\n".join(rows) + "\n"


def main(argv=None):
    p = flags.new_parser("preconditions.py", __doc__.split("\n\n")[0])
    p.add_argument("--model", default="base", help="'base' (models/base) or a model folder")
    p.add_argument("--out", default="bench/results/preconditions")
    p.add_argument("--train-tests", type=flags.POSITIVE_INT, default=3,
                   help="N of --max-train-tests (APPS+ ships 3)")
    p.add_argument("--per-family", type=flags.POSITIVE_INT, default=40,
                   help="rl problems a family for the coverage and false-pass figures")
    p.add_argument("--hard-k", type=flags.POSITIVE_INT, default=64,
                   help="samples a problem of the hardest quarter")
    p.add_argument("--eval-problems", type=flags.COUNT, default=0,
                   help="the first N problems of the eval split (0 = all; a quick look)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=flags.POSITIVE_INT, default=112)
    p.add_argument("--sandbox-workers", type=flags.POSITIVE_INT, default=None)
    a = p.parse_args(argv)
    t0 = time.time()
    d = init_distributed()
    path = resolve_model(a.model)
    tok, engine = load_tokenizer(path), make_engine("auto", path, d.device, seed=a.seed)
    settings = base.eval_settings(a)
    world = tasks.generate_base(0)
    held = [data.Problem(**r) for r in world["eval"][:a.eval_problems or None]]
    rl = base.first_per_family(world["rl"], a.per_family)
    say = lambda msg: print(f"[preconditions {time.time() - t0:5.0f}s] {msg}", flush=True)  # noqa: E731

    ev = rollouts.evaluate(engine, tok, held, d, n=8, temperature=1.0, **settings)
    p8 = pass_at(8, 8, ev["rates"])
    room = {"pass@1": ev["pass@1"], "pass@1_se": ev["pass@1_se"], "pass@8": ev["pass@8"],
            "pass@1_by_family": ev["pass@1_by_family"],
            "pass@8_by_family": base.family_pass_at_k(held, ev["rates"], 8)}
    say(f"room: pass@1 {ev['pass@1']:.3f} pass@8 {ev['pass@8']:.3f}")

    cov, cov_unknown = reference_coverage(rl, a.train_tests, a.sandbox_workers)
    cov_fam = by_family(rl, cov)
    fp = false_pass_rates(engine, tok, rl, a.train_tests, 8, settings)
    branchy = [f for f in tasks.BRANCHY_FAMILIES if f in cov_fam]
    fp_b = [fp[f] for f in branchy if f in fp]
    fgo = {"n_tests": a.train_tests, "coverage_by_family": cov_fam,
           "coverage_unknown": cov_unknown, "false_pass": fp,
           "branchy_coverage": sum(cov_fam[f] for f in branchy) / len(branchy),
           "branchy_false_pass_rate": sum(x["false_passes"] for x in fp_b)
           / max(sum(x["train_passes"] for x in fp_b), 1)}
    say(f"fgo: branchy coverage {fgo['branchy_coverage']:.2f} ({cov_unknown} of {len(rl)} "
        f"references' coverage unknown, left out), false-pass rate "
        f"{fgo['branchy_false_pass_rate']:.2f}")

    fam = [q for q in held if q.metadata["family"] == tasks.CCCS_FAMILY]
    last = last_stage_rates(engine, tok, fam, 8, settings)
    mean = lambda v: sum(v) / max(len(v), 1)  # noqa: E731
    c = {"family": tasks.CCCS_FAMILY, "problems": len(fam),
         "whole_pass@1": mean([ev["rates"][q.id] for q in fam]),
         "whole_pass@8": mean([p8[q.id] for q in fam]),
         "last_stage_pass@1": mean(list(last.values())),
         "last_stage_pass@8": mean(list(pass_at(8, 8, last).values()))}
    say(f"cccs: whole pass@8 {c['whole_pass@8']:.3f}, last stage {c['last_stage_pass@8']:.3f}")

    hard = evalstats.hardest_problems(held, ev["rates"])
    hv = rollouts.evaluate(engine, tok, hard, d, n=a.hard_k, temperature=1.0, **settings)
    dr = {"problems": len(hard), "pass@1": hv["pass@1"], "pass@k": hv[f"pass@{a.hard_k}"],
          "k": a.hard_k, "share_solved": mean([r > 0 for r in hv["rates"].values()]),
          "families": {f: sum(q.metadata["family"] == f for q in hard)
                       for f in sorted({q.metadata["family"] for q in hard})}}
    say(f"drive: hardest quarter solved at {a.hard_k}: {dr['share_solved']:.2f}")
    engine.close()
    res = {"model": path, "command": "python bench/preconditions.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "seconds": round(time.time() - t0),
           "room": room, "fgo": fgo, "cccs": c, "drive": dr}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "preconditions.json"), "w") as f:
        json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "preconditions.md"), "w") as f:
        f.write(table(res))
    print(table(res))


if __name__ == "__main__":
    main()
