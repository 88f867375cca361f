"""Peak memory of token log-probs: chunked (model.chunked_token_logprobs) vs plain
(full [B, T, V] logits, then log_softmax), at Qwen's vocabulary.

Each variant runs in its own process; the figure is the peak resident memory it added on top
of its inputs (ru_maxrss after - RSS before). Defaults: vocab 151,936, sequence 2048, batch 4,
hidden 896, bf16 hidden states and head (the logits of the plain path are bf16, then upcast to
fp32 for the log-softmax, as trainers do).

    python bench/bench_logprobs.py [--batch 4 --seq 2048 --vocab 151936 --hidden 896 --chunk 256]
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def child(args):
    import torch
    sys.path.insert(0, ROOT)
    from infra import model
    torch.manual_seed(0)
    h = torch.randn(args.batch, args.seq, args.hidden, dtype=torch.bfloat16)
    w = (torch.randn(args.vocab, args.hidden) * 0.02).to(torch.bfloat16)
    y = torch.randint(0, args.vocab, (args.batch, args.seq))
    if args.backward:
        h.requires_grad_(True)
    before = rss_mib()
    t = time.perf_counter()
    if args.variant == "plain":
        logp = model.plain_token_logprobs(h @ w.T, y)
    else:
        logp, _ = model.chunked_token_logprobs(h, w, y, chunk_size=args.chunk)
    if args.backward:
        logp.sum().backward()
    seconds = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"variant": args.variant, "backward": args.backward,
                      "peak_added_mib": round(peak - before, 1), "seconds": round(seconds, 2),
                      "checksum": float(logp.detach().float().sum())}))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--chunk", type=int, default=256, help="positions per chunk")
    p.add_argument("--backward", action="store_true", help="also run the backward pass")
    p.add_argument("--variant", choices=["plain", "chunked"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:
        return child(args)
    rows = []
    for variant in ("plain", "chunked"):
        cmd = [sys.executable, __file__, "--variant", variant] + sys.argv[1:]
        out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ,
                             "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"batch {args.batch}  seq {args.seq}  vocab {args.vocab}  hidden {args.hidden}  "
          f"chunk {args.chunk}  backward {args.backward}")
    for r in rows:
        print(f"  {r['variant']:8s} peak +{r['peak_added_mib']:9.1f} MiB   {r['seconds']:6.2f} s"
              f"   checksum {r['checksum']:.1f}")
    ratio = rows[1]["peak_added_mib"] / max(rows[0]["peak_added_mib"], 1e-9)
    print(f"  chunked / plain peak = {ratio:.3f} (target <= 0.25)")


if __name__ == "__main__":
    main()
