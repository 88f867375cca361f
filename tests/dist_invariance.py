"""Run by test_grpo.py under torchrun: GRPO updates of a tiny model on a fixed batch,
sharded over however many ranks torchrun gives, then save the full updated weights.
Usage: torchrun --nproc_per_node N tests/dist_invariance.py MODEL_DIR OUT.pt MICRO_BATCH
       AGG:EPOCHS:MINI_BATCHES [AGG:EPOCHS:MINI_BATCHES ...]
Each setting starts again from the model on disk (more than one update: old log-probs from a
no-grad pass); one launch runs them all, so the test pays torchrun's start-up once per world.
OUT.pt holds {setting: {"weights", "grad_norm", "loss", "approx_kl_last"}}."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import actor  # noqa: E402
import grpo  # noqa: E402
from infra import model  # noqa: E402


def run(d, path, agg, micro, epochs, mini):
    torch.manual_seed(0)
    policy = model.shard_model(model.PolicyLogprobs(model.load_causal_lm(path, d.device), 4),
                               d.device)
    g = torch.Generator().manual_seed(1)
    samples = []
    for i in range(8):   # different prompt and response lengths, advantages of both signs
        p = torch.randint(1, 200, (3 + i % 3,), generator=g).tolist()
        r = torch.randint(1, 200, (2 + (i * 5) % 7,), generator=g).tolist()
        samples.append(actor.Sample(p, r, float(i % 3) - 1.0))
    off_policy = epochs > 1 or mini > 1     # the old log-probs come from a no-grad pass
    mine = samples[d.rank::d.world]
    if off_policy:
        old = actor.score(mine, micro_batch=micro, pad_id=0, device=d.device,
                          temperature=0.9, policy=policy).logp
        mine = actor.with_scores(mine, old_logp=old)
    opt = torch.optim.SGD(policy.parameters(), lr=1.0)
    loss = grpo.update_loss(eps_low=0.2, eps_high=0.28, beta=0.0, agg=agg,
                            off_policy=off_policy)
    st = actor.updates(policy, opt, mine, loss, epochs=epochs,
                       mini_batches=mini, micro_batch=micro, agg=agg, max_len=8, pad_id=0,
                       device=d.device, max_grad_norm=1e9, temperature=0.9,
                       skip_zero_advantage=grpo.zero_advantage_is_inert(beta=0.0))
    sd = {k: v.clone() for k, v in model.iter_full_params(policy)}
    return {"weights": sd, "grad_norm": st["grad_norm"], "loss": st["loss"],
            "approx_kl_last": st.get("approx_kl_last", 0.0)}


def main():
    path, out, micro, settings = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    d = model.init_distributed()
    results = {}
    for setting in settings:
        agg, epochs, mini = setting.split(":")
        results[setting] = run(d, path, agg, micro, int(epochs), int(mini))
    if d.main:
        torch.save(results, out)
    model.close_distributed()


if __name__ == "__main__":
    main()
