"""How far a policy's chains reach: pass rate on fresh chain instances of k steps, written whole
and as CCCS's first subtask (the last stage's prefix given, the rest to write).

    OMP_NUM_THREADS=1 .venv/bin/python bench/probe_length.py --model runs/sft-chain/step_0 \\
        --steps 1,2,3,4,5 [--problems 12] [--samples 8] [--seed 123] [--json out.json]

For each k, `--problems` instances of tasks.chain with exactly k guarded steps are drawn from
random.Random(--seed) (parameters may repeat train ones: this measures a skill, not a split),
and `--samples` answers per prompt are sampled with transformers' generate at T = 1.0, the
trainer's prompt and max 112 new tokens:
    whole    the statement only (the final CCCS stage, what evaluation asks)
    stage0   the answer opened with the canonical prefix up to the last chosen split point
             (cccs.stage_starts(ref)[0]), exactly as the trainer's curriculum prompts it
A gap between the two (stage0 > 0 = whole) is where CCCS can give a reward that whole
programs cannot; stage0 = whole = 0 means the curriculum has nothing to start from either.
"""

import argparse
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import cccs  # noqa: E402
import data  # noqa: E402
import sandbox  # noqa: E402
from world import tasks  # noqa: E402


def probe(model, tok, k: int, problems: int, samples: int, rng: random.Random) -> dict:
    jobs = {"whole": [], "stage0": []}
    for i in range(problems):
        p = data.Problem(**tasks._row(tasks.chain(rng, "chain_long", lengths=(k, k)), "test", i))
        base = data.render_prompt(tok, data.coder_messages(p))
        for name, start in (("whole", None), ("stage0", cccs.stage_starts(p.solutions[0])[0])):
            prefix = cccs.make_subtask(p.solutions[0], start)[0] if start else ""
            ids = tok(cccs.completion_prompt(base, prefix),
                      return_tensors="pt").input_ids
            with torch.no_grad():
                out = model.generate(ids, do_sample=True, temperature=1.0, max_new_tokens=112,
                                     num_return_sequences=samples,
                                     pad_token_id=tok.pad_token_id or 0)
            for text in tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True):
                code = cccs.rewarded_program(prefix, text)
                jobs[name].append(data.sandbox_job(p, code or "", timeout=2.0))
    rates = {}
    for name, batch in jobs.items():
        results = sandbox.run_batch(batch, workers=1)
        rates[name] = sum(r.status == sandbox.PASS for r in results) / len(results)
    return rates


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a checkpoint folder (e.g. .../step_0)")
    ap.add_argument("--steps", default="1,2,3,4,5", help="comma list of chain lengths k")
    ap.add_argument("--problems", type=int, default=12, help="instances per k")
    ap.add_argument("--samples", type=int, default=8, help="samples per prompt")
    ap.add_argument("--seed", type=int, default=123, help="seed of the instances and sampling")
    ap.add_argument("--json", default=None, help="also write the rates here")
    args = ap.parse_args(argv)
    try:
        ks = [int(k) for k in args.steps.split(",")]
    except ValueError:
        ap.error(f"--steps {args.steps}: give a comma list of integers, e.g. 1,2,3")
    if not os.path.isdir(args.model):
        ap.error(f"--model {args.model}: no such checkpoint folder")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    rng = random.Random(args.seed)
    out = {}
    for k in ks:
        out[k] = probe(model, tok, k, args.problems, args.samples, rng)
        print(f"k={k}: whole {out[k]['whole']:.3f}  stage0 {out[k]['stage0']:.3f}  "
              f"({args.problems} problems x {args.samples})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "seed": args.seed, "rates": out}, f, indent=1)


if __name__ == "__main__":
    main()
