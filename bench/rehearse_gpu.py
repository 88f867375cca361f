"""A CPU rehearsal of the GPU launch: `torchrun grpo.py --preset gpu` with only what a CPU
cannot do overridden, 2 ranks, then a resume.

    python bench/rehearse_gpu.py [--out runs/rehearse-gpu] [--nproc 2]

What ./run.sh starts on a GPU machine is `torchrun --nproc_per_node=$NGPU grpo.py --preset gpu`
(flags.COMMON_PRESETS["gpu"]: Qwen3-1.7B, APPS + CodeContests from the hub, LiveCodeBench
evaluation at temperature 0.6, 4096-token responses, gradient checkpointing, epoch order,
a checkpoint every 20 steps). This script runs the same command on the CPU with the flags in
OVERRIDES, each with the reason a CPU cannot take the preset's value; every other setting is
the preset's. It:
  1. builds a small Qwen3-architecture model from a transformers Qwen3Config (random weights,
     the tiny byte-level tokenizer of tiny.model_path() with Qwen's ChatML turn
     markers as special tokens, <|im_end|> as EOS and a chat template rendering system and
     user turns as Qwen3's does), so prompts go through the chat-template path a real model
     takes;
  2. runs `torchrun --standalone --nproc_per_node 2 grpo.py --preset gpu OVERRIDES`: the hub
     loaders' own converters read local files in each hub's native row format
     (tests/fixtures/{apps,code_contests,livecodebench}.jsonl), a short SFT warm start, pass@1
     on the LiveCodeBench rows before and after two GRPO steps with one vLLM (CPU) engine per
     rank, checkpoints step_0 and step_2 (the last step is always saved);
  3. runs it again with --resume --steps 3: restores step_2 (weights, optimizer shards, RNG,
     data position), trains step 3, evaluates.

What stays different whatever the flags (the CPU's own): gloo instead of NCCL, fp32 instead of
bf16 mixed precision (model.shard_model), PyTorch SDPA instead of flash-attn, vLLM's CPU build
(eager, float32, a fixed 1 GiB KV cache, no sleep mode) instead of CUDA vLLM with sleep level 1.
Exit status: 0 when both runs finished, else the failing run's.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)           # the project's modules (model), from anywhere
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

# flag -> (value, why the CPU cannot take the preset's). "{model}" is the model built here.
OVERRIDES = {
    "--model": ("{model}", "Qwen3-1.7B neither downloads (no hub) nor trains on 2 cores: a "
                           "2-layer Qwen3 built from a Qwen3Config"),
    "--train-data": (f"apps:{FIXTURES}/apps.jsonl,code_contests:{FIXTURES}/code_contests.jsonl",
                     "no hub: 3 + 3 hand-written rows in the hubs' row formats, read by the "
                     "same converters (plus one APPS row without tests, which is dropped)"),
    "--eval-data": (f"livecodebench:{FIXTURES}/livecodebench.jsonl",
                    "no hub: 3 hand-written rows in LiveCodeBench's format (stdin and "
                    "functional, private tests zlib/pickle/base64-packed as on the hub)"),
    "--engine": ("vllm", "the preset's auto picks vLLM when it starts; forcing it makes a "
                         "fallback to transformers fail instead of passing unnoticed"),
    "--steps": ("2", "200 steps: two are enough to pass the update, sync and checkpoint"),
    "--prompts-per-step": ("2", "64 prompts a step: more than the 6 training rows"),
    "--max-new-tokens": ("96", "4096-token responses take minutes a step on 2 cores; the "
                               "reference answers are under 60 tokens"),
    "--sft-steps": ("40", "a pretrained Qwen3 needs no warm start; random weights solve "
                          "nothing, and 40 SFT steps on the rows' reference solutions make "
                          "rewards differ within a group, so the RL update has advantages"),
    "--sft-lr": ("0.01", "the SFT default 1e-3 needs hundreds of steps from random weights"),
    "--sft-batch": ("8", "6 reference solutions: the default 32 repeats each 5 times a step"),
}

# The model: Qwen3-1.7B's architecture at toy sizes (1.7B: hidden 2048, intermediate 6144,
# 28 layers, 16 heads, 8 KV heads, head_dim 128, vocab 151,936, tied embeddings).
QWEN3_SHAPE = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                   tie_word_embeddings=True)
TURN_MARKERS = ["<|im_start|>", "<|im_end|>"]
# Qwen3's template renders system and user turns like this (its tool and thinking branches
# aside); the answer starts after "<|im_start|>assistant\n".
CHAT_TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] "
                 "+ '<|im_end|>\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def build_model(out_dir: str, seed: int = 0) -> str:
    """Save a random-weight Qwen3 (QWEN3_SHAPE) and its tokenizer to out_dir; returns it."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from infra import model
    from world import tiny
    tok = model.load_tokenizer(tiny.model_path())
    tok.add_tokens(TURN_MARKERS, special_tokens=True)
    tok.eos_token, tok.pad_token = "<|im_end|>", tiny.EOS     # as Qwen3's tokenizer
    tok.chat_template = CHAT_TEMPLATE
    torch.manual_seed(seed)
    config = Qwen3Config(vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id,
                         **QWEN3_SHAPE)
    Qwen3ForCausalLM(config).to(torch.float32).save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def grpo_flags(model_dir: str, out: str) -> list[str]:
    """grpo.py's flags for the rehearsal: the GPU preset, OVERRIDES, the output folder."""
    flags = ["--preset", "gpu"]
    for flag, (value, _) in OVERRIDES.items():
        flags += [flag, value.format(model=model_dir)]
    return flags + ["--out", out]


def torchrun(nproc: int, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc_per_node", str(nproc), os.path.join(ROOT, "grpo.py"), *flags]


def run(cmd: list[str], log_path: str) -> tuple[int, float]:
    """Run cmd from the repository root, its output to log_path; -> (exit status, seconds)."""
    t0 = time.time()
    with open(log_path, "w") as log:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL).returncode
    return rc, time.time() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/rehearse-gpu",
                   help="folder for the model, the run (metrics, checkpoints) and the logs")
    p.add_argument("--nproc", type=int, default=2, help="ranks (torchrun --nproc_per_node)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    out = os.path.abspath(args.out)
    t0 = time.time()
    model_dir = build_model(os.path.join(out, "model"))
    print(f"[rehearse] model {model_dir} ({time.time() - t0:.0f} s)", flush=True)
    flags = grpo_flags(model_dir, os.path.join(out, "run"))
    for name, extra in (("train", []), ("resume", ["--resume", "--steps", "3"])):
        cmd = torchrun(args.nproc, flags + extra)
        log = os.path.join(out, f"{name}.log")
        print(f"[rehearse] {name}: {' '.join(cmd)}", flush=True)
        rc, seconds = run(cmd, log)
        print(f"[rehearse] {name}: exit {rc} in {seconds:.0f} s (log: {log})", flush=True)
        if rc:
            return rc
    print(f"[rehearse] done in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
