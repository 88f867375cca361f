"""CPU time of one optimizer step (actor.update) by --micro-batch, on the tiny model.

    OMP_NUM_THREADS=1 python bench/bench_update.py [--steps 8] [--batch 32] [--sizes 32,16,8,4]

What it measures: an SFT step (actor.sft_loss, the warm start's loss) on `--batch` reference answers
of the procedural train split (world/tasks.py), for each micro-batch size in turn on the same
batches, with the learning rate at 0 so every size sees the same weights. It reports the median
*process* CPU time per step (not wall time), so the figure holds on a loaded machine too. The sum
over micro-batches is the same loss whatever the size (update() normalises globally); the cost is
not: update() sorts the samples by length, so smaller micro-batches pad less. """
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import actor  # noqa: E402
from infra import model  # noqa: E402
from world import sources, tiny  # noqa: E402


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=8, help="steps per size (the first is not timed)")
    p.add_argument("--batch", type=int, default=32, help="sequences per step (--sft-batch)")
    p.add_argument("--sizes", default="32,16,8,4", help="micro-batch sizes to compare")
    p.add_argument("--problems", type=int, default=0,
                   help="draw from the first N train problems (0 = all 960)")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    path = tiny.model_path()
    tok = model.load_tokenizer(path)
    policy = model.PolicyLogprobs(model.load_causal_lm(path, torch.device("cpu")))
    problems = sources.task_problems("train")
    examples = actor.sft_examples(tok, problems[:a.problems] if a.problems else problems)
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    sizes = [int(x) for x in a.sizes.split(",")]
    times = {m: [] for m in sizes}
    rng = random.Random(0)
    for _ in range(a.steps):
        batch = [examples[rng.randrange(len(examples))] for _ in range(a.batch)]
        for m in sizes:          # interleaved: a change of load hits every size alike
            t = time.process_time()
            actor.update(policy, opt, batch, actor.sft_loss, micro_batch=m,
                         agg="token-mean", max_len=None, pad_id=tok.pad_token_id,
                         device=torch.device("cpu"), max_grad_norm=1.0)
            times[m].append(time.process_time() - t)
    base = sorted(times[sizes[0]][1:])[(a.steps - 1) // 2]
    for m in sizes:
        med = sorted(times[m][1:])[(a.steps - 1) // 2]
        print(f"micro-batch {m:3d}: {med:.3f} s CPU per step of {a.batch} "
              f"({med / base:.2f}x micro-batch {sizes[0]})")


if __name__ == "__main__":
    main()
