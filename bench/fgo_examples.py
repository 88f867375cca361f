"""What FGO masks on real generations: sample a model on the built-in problems, run the
programs with coverage, and print the masked share and the masked code of each response.

    .venv/bin/python bench/fgo_examples.py runs/ppo-sft2/step_0 [--n 4] [--show 5]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import ppo_fgo  # noqa: E402
import rollouts  # noqa: E402
from infra.engines import make_engine  # noqa: E402
from infra.model import load_tokenizer  # noqa: E402
from world import sources


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("model", help="local model path (e.g. a step_0 checkpoint)")
    p.add_argument("--n", type=int, default=4, help="samples per problem")
    p.add_argument("--show", type=int, default=5, help="masked responses to print")
    p.add_argument("--max-new-tokens", type=int, default=96, help="response budget")
    a = p.parse_args()
    tok = load_tokenizer(a.model)
    engine = make_engine("hf", a.model, torch.device("cpu"))
    problems = sources.load_problems("builtin")
    ro = rollouts.generate_and_score(engine, tok, problems, 0, group_size=a.n, temperature=1.0,
                                     top_p=1.0, max_new_tokens=a.max_new_tokens,
                                     max_train_tests=0, reward="binary", test_timeout=2.0,
                                     workers=None, coverage=True)
    comps, results, programs = ro.completions, ro.results, ro.programs
    total = masked = covered = shown = 0
    by_status = {}
    for c, res, prog in zip(comps, results, programs):
        mask = ppo_fgo.completion_fgo_mask(tok, c, "", prog, res)
        status = "no_code" if res is None else res.status
        s = by_status.setdefault(status, [0, 0])
        s[0] += len(c.token_ids)
        total += len(c.token_ids)
        if mask is None:
            continue
        covered += 1
        m = mask.count(0)
        masked += m
        s[1] += m
        if m and shown < a.show:
            shown += 1
            text = "".join(tok.decode([t]) if k == 0 else "·" for t, k in zip(c.token_ids, mask))
            print(f"--- {status}: {m}/{len(mask)} tokens masked; program:\n{prog}\n"
                  f"--- masked text (· = kept token):\n{' '.join(text.split('·')).strip()}\n")
    print(f"{len(comps)} responses, {covered} with trusted coverage; masked share of all "
          f"response tokens {masked / max(total, 1):.4f}")
    for st, (t, m) in sorted(by_status.items()):
        print(f"  {st:14s} tokens {t:6d}  masked {m:5d}  share {m / max(t, 1):.4f}")


if __name__ == "__main__":
    main()
