"""Generation throughput: vLLM vs transformers' generate, same model, prompts and lengths.

    .venv/bin/python bench/bench_engines.py                  # tiny model, 32 x 4 x 128 tokens
    .venv/bin/python bench/bench_engines.py --prompts 8 --max-new-tokens 64 --engines hf

Every completion is exactly --max-new-tokens long (EOS ignored), so both engines produce the
same number of tokens and tokens/s compares like with like. Each engine gets one warm-up
call first (vLLM's first batch allocates caches; transformers' first call warms kernels).
Both run in this process with the same torch thread count.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import data  # noqa: E402
from infra import engines, model  # noqa: E402
from world import sources  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny",
                    help="a local HF model path, or 'tiny' (built offline)")
    ap.add_argument("--prompts", type=int, default=32, help="distinct prompts")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="tokens per completion")
    ap.add_argument("--engines", default="vllm,hf", help="comma-separated: vllm, hf")
    ap.add_argument("--hf-batch-size", type=int, default=128,
                    help="transformers batch size (128 = all 32 x 4 completions at once)")
    args = ap.parse_args()
    d = model.init_distributed()
    path = model.resolve_model(args.model)
    problems = sources.builtin_problems()
    prompts = [data.render_prompt(None, data.coder_messages(problems[i % len(problems)]))
               for i in range(args.prompts)]
    tok = model.load_tokenizer(path)
    prompt_tokens = sum(len(tok(p)["input_ids"]) for p in prompts)
    print(f"model {path}, {d.device.type}, torch threads {torch.get_num_threads()}, "
          f"{args.prompts} prompts (mean {prompt_tokens / args.prompts:.0f} tokens) x {args.n} "
          f"samples x {args.max_new_tokens} new tokens")

    rows = []
    for kind in args.engines.split(","):
        t0 = time.perf_counter()
        if kind == "vllm":
            eng = engines.VLLMEngine(path, d.device, seed=0)
        else:
            eng = engines.HFEngine(path, d.device, batch_size=args.hf_batch_size)
        start_s = time.perf_counter() - t0
        gen = dict(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens,
                   ignore_eos=True, seed=0)
        eng.generate(prompts[:2], **{**gen, "max_new_tokens": 8})          # warm-up
        t0 = time.perf_counter()
        outs = eng.generate(prompts, **gen)
        secs = time.perf_counter() - t0
        tokens = sum(len(c.token_ids) for g in outs for c in g)
        assert tokens == args.prompts * args.n * args.max_new_tokens, tokens
        rows.append((kind, start_s, secs, tokens))

    print("\n| engine | start-up s | generate s | new tokens | tokens/s |")
    print("|---|---:|---:|---:|---:|")
    for kind, start_s, secs, tokens in rows:
        print(f"| {kind} | {start_s:.1f} | {secs:.1f} | {tokens} | {tokens / secs:.0f} |")
    if len(rows) == 2:
        print(f"\nspeed-up {rows[0][0]} / {rows[1][0]}: {rows[1][2] / rows[0][2]:.2f}x")


if __name__ == "__main__":
    main()
