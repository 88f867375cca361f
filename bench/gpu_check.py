"""The prepared GPU check: the CUDA path of the trainer measured in one short run.

    python bench/gpu_check.py                      # on a lent GPU, <= 8 min (--budget 420 s)
    python bench/gpu_check.py --cpu-smoke          # the same code path on the CPU, tiny sizes

Needs only torch + transformers + this project: no network, no hub, no vLLM, no flash-attn.
Models are built from configs with random weights (Qwen2Config / Qwen3Config): the project's
tiny model, "qwen3-mini" (2 tiny layers at the full vocabulary: the build-from-config path in
seconds) and the Qwen2.5-0.5B, Qwen2.5-1.5B and Qwen3-0.6B shapes (Qwen3-1.7B on request), vocab
151,936. Text goes through the project's byte-level tiny tokenizer (tiny.model_path())
for every size: its 1,024 ids are a subset of the big vocab, and ids it does not know decode to
nothing. Throughput measurements that need no text use random token ids.

For each size, one process, one rank (FSDP2 world of 1: NCCL on CUDA, gloo on the CPU):
  1. build    the LM in fp32 (the FSDP master weights), save a bf16 copy (fp32 on the CPU)
              with the tiny tokenizer for the engine, model.shard_model(PolicyLogprobs(lm))
              (bf16 compute / fp32 reduce mixed precision on CUDA, fp32 on the CPU), AdamW.
  2. train    forward+backward of random ids [--train-batch, --train-seq], timed after one
              warm-up: tokens/s and MFU = 6 * N * tokens / seconds / peak_flops, N = all
              parameters (a tied embedding counted once, as the head's matmul). Attention
              score FLOPs and the chunked head's recomputation are not counted.
  3. logprobs model.chunked_token_logprobs vs model.plain_token_logprobs on random hidden
              states and a random head at the size's (hidden, vocab), in bf16, forward and
              backward: max |difference| between them and to an fp32 reference, gradient
              difference, and each one's peak memory above its inputs (CUDA only).
  4. grpo     --steps GRPO steps per engine (transformers' generate; vLLM too when it imports):
              generate P prompts x G samples -> reward (sandbox) -> grpo.group_advantages ->
              the trainer's own actor.update (chunked log-probs, losses.policy_loss
              token-mean with the global denominator, backward per micro-batch, clip, AdamW)
              -> weight sync into the engine (model.iter_full_params, as the trainer's
              sync). Per-phase seconds, generation tokens/s, update tokens/s and MFU, peak
              memory per phase. After the last sync: the engine's and the trainer's log-probs
              of a fixed probe sequence (sync_max_abs_diff) and how far the engine's moved
              since before the first step (sync_engine_shift): a sync that does nothing gives
              shift 0, a wrong one a large diff.

Once per run, before the sizes: the sandbox judging P*G reference solutions (the realistic
reward time of a batch; the GRPO steps' own programs are garbage and cost ~1 ms each). Set
beside each size's generate seconds, it bounds what --overlap-reward (the sandbox judging
while the engine generates) saves a step: generate + reward -> max(generate, reward)
(overlap_lines, under the table).

Simplifications, stated up front:
- The prompts prefill "```python\\n", so every completion is a program and the sandbox judges
  every sample (random weights write garbage: syntax errors, reward 0; the sandbox's fast
  path, so the reward time is a lower bound). At the big vocabulary the sampled ids are
  folded into the tiny tokenizer's 1,024 for that text (reward_text). With --reward half
  (default) a seeded random half of each group gets reward 1 instead of the sandbox score, so
  every group's advantages are non-zero (independent coins would leave some groups constant)
  and every update really moves the weights; the sandbox still runs and is timed.
  --reward sandbox uses its score (then all advantages are 0 and the update is a zero-gradient
  pass with the same FLOPs).
- On-policy, one optimizer step per batch (old log-probs = logp.detach()); no KL, no reference
  model; the update does not skip zero-advantage samples (the check measures the full pass).
- Time budget: each size is started only if its estimate fits the time left (a static guess
  until a size with > 1e8 parameters has run, then that size's measured time scaled); inside a
  size a phase or GRPO step is skipped when the time left is under its expected cost. A size
  or phase that fails (CUDA OOM included) is reported with its reason; the script goes on.
  The JSON and Markdown are rewritten after every phase, so a killed run still leaves results.
- Peak memory is torch.cuda.max_memory_allocated (GiB) on CUDA and null on the CPU.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback

T0 = time.perf_counter()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BIG_VOCAB = 151936

# Architectures from the published configs (random weights). est_s: the guessed wall time on
# an H200 with the GPU defaults, used until a size with > 1e8 parameters has been measured;
# cpu_est_s: the guess on a 2-core CPU with the --cpu-smoke shapes.
SIZES = {
    "tiny": dict(arch="tiny", est_s=25, cpu_est_s=25),
    # Tiny layers at the full vocabulary: the build-from-config path (Qwen3Config, tied bf16
    # save, engine load) in seconds, on the CPU too.
    "qwen3-mini": dict(arch="qwen3", hidden_size=128, intermediate_size=384,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=32, est_s=20, cpu_est_s=25),
    "qwen2.5-0.5b": dict(arch="qwen2", hidden_size=896, intermediate_size=4864,
                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                         est_s=80, cpu_est_s=300),
    "qwen2.5-1.5b": dict(arch="qwen2", hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         est_s=120, cpu_est_s=900),
    "qwen3-0.6b": dict(arch="qwen3", hidden_size=1024, intermediate_size=3072,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, est_s=90, cpu_est_s=360),
    "qwen3-1.7b": dict(arch="qwen3", hidden_size=2048, intermediate_size=6144,
                       num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                       head_dim=128, est_s=140, cpu_est_s=1000),
}
DEFAULT_SIZES = "tiny,qwen3-mini,qwen2.5-0.5b,qwen2.5-1.5b,qwen3-0.6b"
SMOKE_SIZES = "tiny,qwen3-mini"

# Dense bf16 tensor-core peak, FLOP/s, by a substring of torch.cuda.get_device_name()
# (first match wins, so the more specific names come first).
PEAK_FLOPS = [("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H800", 989e12),
              ("GH200", 989e12), ("B200", 2250e12), ("A100", 312e12), ("A800", 312e12),
              ("L40S", 362e12), ("L4", 121e12)]

# Shape flags: (GPU default, --cpu-smoke default).
SHAPES = {
    "prompts": (8, 2), "group": (4, 2), "max_new_tokens": (256, 16), "steps": (3, 2),
    "micro_batch": (8, 4), "train_batch": (8, 2), "train_seq": (1024, 64), "train_reps": (3, 2),
    "lp_batch": (4, 2), "lp_seq": (2048, 64), "logprob_chunk": (256, 16), "lr": (1e-5, 1e-3),
    "budget": (420.0, 60.0),
}


def say(msg: str) -> None:
    print(f"[gpu_check {time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


def elapsed() -> float:
    return time.perf_counter() - T0


# ----------------------------------------------------------------------------- pure helpers

def peak_flops_for(device_name: str, override_tflops: float | None) -> float | None:
    """Peak bf16 FLOP/s: the override (TFLOPS) if given, else the table's, else None."""
    if override_tflops:
        return override_tflops * 1e12
    for key, flops in PEAK_FLOPS:
        if key.lower() in device_name.lower():
            return flops
    return None


def mfu(n_params: int, tokens: float, seconds: float, peak: float | None) -> float | None:
    """Model FLOP utilisation of a forward+backward: 6 * N * tokens / seconds / peak."""
    if not peak or seconds <= 0:
        return None
    return 6.0 * n_params * tokens / seconds / peak


def predict_seconds(name: str, measured: dict, cpu: bool) -> float:
    """Expected wall time of size `name`: its static guess, rescaled by the ratio measured /
    guessed of the last size with > 1e8 parameters when there is one."""
    spec = SIZES[name]
    guess = spec["cpu_est_s"] if cpu else spec["est_s"]
    if not cpu and measured:
        last = measured[list(measured)[-1]]
        guess *= last["seconds"] / last["est_s"]
    return guess


def round_floats(x, nd: int = 4):
    if isinstance(x, float):
        return float(f"{x:.{nd}g}")
    if isinstance(x, dict):
        return {k: round_floats(v, nd) for k, v in x.items()}
    if isinstance(x, list):
        return [round_floats(v, nd) for v in x]
    return x


# ----------------------------------------------------------------------------- device helpers

class Device:
    """The torch device plus the few calls that differ between CUDA and the CPU."""

    def __init__(self, device):
        import torch
        self.torch = torch
        self.device = device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def now(self) -> float:
        self.sync()
        return time.perf_counter()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak_gib(self) -> float | None:
        return self.torch.cuda.max_memory_allocated() / 2**30 if self.cuda else None

    def allocated_bytes(self) -> int:
        return self.torch.cuda.memory_allocated() if self.cuda else 0

    def peak_bytes(self) -> int | None:
        return self.torch.cuda.max_memory_allocated() if self.cuda else None

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()

    @property
    def gen_dtype(self):
        return self.torch.bfloat16 if self.cuda else self.torch.float32


def is_oom(e: BaseException) -> bool:
    import torch
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    return isinstance(e, oom) or "out of memory" in str(e).lower()


def failure(e: BaseException) -> dict:
    """A phase's or size's result when it raised: status oom / error and the reason."""
    return {"status": "oom" if is_oom(e) else "error",
            "reason": f"{type(e).__name__}: {str(e)[:400]}",
            "traceback_tail": traceback.format_exc()[-1500:]}


# ----------------------------------------------------------------------------- building

def build_size(name: str, tiny_path: str, tokenizer, dev: Device, work_dir: str, seed: int):
    """-> (engine_dir, lm fp32 on the device, n_params). Big sizes: random weights from the
    config, saved (bf16 on CUDA) with the tiny tokenizer so that an engine can load them."""
    import torch
    from transformers import (
        AutoModelForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
    )
    spec = SIZES[name]
    torch.manual_seed(seed)
    if spec["arch"] == "tiny":
        lm = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32,
                                                  attn_implementation="sdpa").to(dev.device)
        return tiny_path, lm, sum(p.numel() for p in lm.parameters())
    cfg_cls, lm_cls = ((Qwen2Config, Qwen2ForCausalLM) if spec["arch"] == "qwen2"
                       else (Qwen3Config, Qwen3ForCausalLM))
    shape = {k: v for k, v in spec.items() if k not in ("arch", "est_s", "cpu_est_s")}
    eos = tokenizer.eos_token_id
    config = cfg_cls(vocab_size=BIG_VOCAB, max_position_embeddings=4096,
                     tie_word_embeddings=True, eos_token_id=eos, pad_token_id=eos,
                     bos_token_id=eos, **shape)
    config._attn_implementation = "sdpa"
    try:
        with torch.device(dev.device):        # random init on the GPU: seconds, not minutes
            lm = lm_cls(config).to(torch.float32)
    except Exception as e:
        if is_oom(e):
            raise
        say(f"  init on {dev.device} failed ({type(e).__name__}: {e}); on the CPU instead")
        lm = lm_cls(config).to(torch.float32).to(dev.device)
    n_params = sum(p.numel() for p in lm.parameters())
    out = os.path.join(work_dir, name)
    shutil.rmtree(out, ignore_errors=True)
    # Tied head: save the embedding only (a bf16 copy of both would be two separate tensors).
    sd = {k: v.detach().to(dev.gen_dtype) for k, v in lm.state_dict().items()
          if k != "lm_head.weight"}
    lm.save_pretrained(out, state_dict=sd)
    tokenizer.save_pretrained(out)
    return out, lm, n_params


class Skip(Exception):
    """A phase that cannot run here (e.g. no vLLM build for this device): skipped, not failed."""


def start_engine(kind: str, path: str, dev: Device, args):
    """The generation engine of `kind` ("hf" or "vllm") through engines' public API.
    Raises Skip when vLLM has no build for this device (engines.make_engine's SystemExit)."""
    from infra import engines
    if kind == "hf":
        return engines.HFEngine(path, dev.device, dtype=dev.gen_dtype,
                                batch_size=args.prompts * args.group)
    try:
        return engines.make_engine("vllm", path, dev.device, seed=args.seed,
                                   gpu_memory_utilization=args.vllm_mem,
                                   max_model_len=args.max_model_len)
    except SystemExit as e:        # no vLLM for this device: not a failure of the check
        raise Skip(str(e)) from None


# ----------------------------------------------------------------------------- measurements

def train_throughput(policy, vocab: int, n_params: int, dev: Device, args, peak) -> dict:
    """Forward+backward tokens/s of the FSDP policy on random ids [train_batch, train_seq]."""
    import torch
    g = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(vocab, (args.train_batch, args.train_seq), generator=g).to(dev.device)
    attn = torch.ones_like(ids)

    def one():
        logp = policy(ids, attn).logp
        logp.float().mean().backward()
        policy.zero_grad(set_to_none=True)

    one()                                   # warm-up: kernels, allocator, FSDP buffers
    dev.reset_peak()
    t = dev.now()
    for _ in range(args.train_reps):
        one()
    seconds = dev.now() - t
    tokens = args.train_batch * args.train_seq * args.train_reps
    return {"status": "ok", "batch": args.train_batch, "seq": args.train_seq,
            "reps": args.train_reps, "seconds": seconds, "tokens_per_s": tokens / seconds,
            "mfu": mfu(n_params, tokens, seconds, peak), "peak_gib": dev.peak_gib()}


def logprob_check(hidden: int, vocab: int, dev: Device, args) -> dict:
    """Chunked vs plain token log-probs in bf16 (forward + backward) at (hidden, vocab)."""
    import torch

    from infra import model
    torch.manual_seed(args.seed)
    B, T = args.lp_batch, args.lp_seq
    h = torch.randn(B, T, hidden, device=dev.device, dtype=torch.bfloat16)
    # Logits of standard deviation ~2, like a trained LM's, not the ~0.1 of raw random init.
    w = (torch.randn(vocab, hidden, device=dev.device) * (2 / hidden ** 0.5)).to(torch.bfloat16)
    y = torch.randint(vocab, (B, T), device=dev.device)
    with torch.no_grad():              # row by row: the fp32 [B, T, V] logits may not fit
        wf = w.float()
        ref = torch.cat([model.plain_token_logprobs(h[i:i + 1].float() @ wf.T, y[i:i + 1])
                         for i in range(B)])
        del wf
    runs = {}
    for variant in ("plain", "chunked"):
        hh = h.clone().requires_grad_(True)
        dev.free()
        dev.reset_peak()
        base = dev.allocated_bytes()
        t = dev.now()
        if variant == "plain":
            lp = model.plain_token_logprobs(hh @ w.T, y)
        else:
            lp, _ = model.chunked_token_logprobs(hh, w, y, chunk_size=args.logprob_chunk)
        lp.sum().backward()
        seconds = dev.now() - t
        peak = dev.peak_bytes()
        runs[variant] = {"logp": lp.detach(), "grad": hh.grad.float(), "seconds": seconds,
                         "peak_mib": None if peak is None else (peak - base) / 2**20}
        del hh, lp
    p, c = runs["plain"], runs["chunked"]
    out = {"status": "ok", "dtype": "bfloat16", "batch": B, "seq": T, "hidden": hidden,
           "vocab": vocab, "chunk": args.logprob_chunk,
           "chunked_vs_plain_max_abs": float((c["logp"] - p["logp"]).abs().max()),
           "chunked_vs_fp32_max_abs": float((c["logp"] - ref).abs().max()),
           "plain_vs_fp32_max_abs": float((p["logp"] - ref).abs().max()),
           "grad_rel_diff": float((c["grad"] - p["grad"]).abs().max()
                                  / p["grad"].abs().max().clamp(min=1e-30)),
           "plain_peak_mib": p["peak_mib"], "chunked_peak_mib": c["peak_mib"],
           "plain_seconds": p["seconds"], "chunked_seconds": c["seconds"]}
    if p["peak_mib"]:
        out["chunked_over_plain_peak"] = c["peak_mib"] / p["peak_mib"]
    return out


def engine_logprobs(engine, ids: list[int]):
    """The engine's log-prob of each token after the first of `ids` -> fp32 tensor [len-1]."""
    import torch
    if hasattr(engine, "prompt_logprobs"):                 # vLLM
        return torch.tensor(engine.prompt_logprobs([ids])[0], dtype=torch.float32)
    lm = engine.model                                      # HFEngine: its own plain copy
    x = torch.tensor([ids], device=next(lm.parameters()).device)
    with torch.no_grad():
        logits = lm(input_ids=x).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None])[:, 0].cpu()


def trainer_logprobs(policy, ids: list[int], device):
    import torch
    x = torch.tensor([ids], device=device)
    with torch.no_grad():
        return policy(x, torch.ones_like(x)).logp[0].float().cpu()


def half_rewards(n: int, group: int, rng) -> list[float]:
    """n rewards, groups of `group` consecutive samples: in each, a random half (rounded down)
    gets 1, the rest 0, so no group of 2 or more is constant."""
    out: list[float] = []
    for _ in range(n // group):
        g = [float(j < group // 2) for j in range(group)]
        rng.shuffle(g)
        out += g
    return out


def reward_text(tokenizer, token_ids: list[int]) -> str:
    """The completion's text for the reward, its ids folded into the tokenizer's range.

    At vocab 151,936 a random-weight model samples ids the tiny tokenizer (1,024) mostly does
    not know, which decode to nothing: the text would be empty and the sandbox idle. Folded,
    every sample is a garbage program of its real length. Identity for the tiny model."""
    n = len(tokenizer)
    return tokenizer.decode([t % n for t in token_ids], skip_special_tokens=True)


def reward_phase(problems, texts: list[str], args, rng) -> tuple[list[float], dict]:
    """Sandbox-judge every completion's program; the rewards the advantages use (see --reward)."""
    import data
    import sandbox
    programs = [data.extract_code("```python\n" + t) for t in texts]
    jobs = [data.sandbox_job(p, c, timeout=args.test_timeout)
            for p, c in zip(problems, programs) if c is not None]
    info = {"programs": len(jobs), "no_code": sum(c is None for c in programs)}
    try:
        results = iter(sandbox.run_batch(jobs, workers=args.sandbox_workers or None))
        scores = [0.0 if c is None else next(results).pass_rate for c in programs]
    except Exception as e:             # the check goes on without rewards; say why
        info["sandbox_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        scores = [0.0] * len(programs)
    info["sandbox_pass_rate_mean"] = sum(scores) / max(len(scores), 1)
    if args.reward == "half":
        return half_rewards(len(texts), args.group, rng), info
    return scores, info


def sandbox_reference(problems, args) -> dict:
    """The realistic reward cost: the sandbox judging P*G reference solutions that run all
    their tests (the GRPO steps' garbage programs fail to compile in the parent, in ~1 ms)."""
    import data
    import sandbox
    pool = [p for p in problems if p.solutions]
    batch = [pool[i % len(pool)] for i in range(args.prompts)]
    jobs = [data.sandbox_job(p, p.solutions[0], timeout=args.test_timeout)
            for p in batch for _ in range(args.group)]
    t = time.perf_counter()
    results = sandbox.run_batch(jobs, workers=args.sandbox_workers or None)
    seconds = time.perf_counter() - t
    return {"status": "ok", "programs": len(jobs), "tests": sum(r.total for r in results),
            "seconds": seconds, "programs_per_s": len(jobs) / seconds,
            "pass_rate_mean": sum(r.pass_rate for r in results) / len(results)}


def overlap_round(engine, prompts: list[str], batch, dev: Device, args) -> dict:
    """One more generation of the last step's prompts while the sandbox judges the batch's
    reference solutions (G a prompt), fed prompt by prompt as the engine finishes each: what
    --overlap-reward does (rollouts.generate_while_scoring), with the realistic reward of
    sandbox_reference instead of the steps' ~1 ms garbage programs. generate_s beside the
    steps' own: what judging costs the engine (CPU, and the GIL the judging threads share
    with vLLM's scheduler); overlapped_s: until the last verdict."""
    import data
    import sandbox
    t = dev.now()
    judge = sandbox.BackgroundBatch(args.sandbox_workers or None)
    try:
        for i, group in engine.generate_stream(prompts, n=args.group,
                                               temperature=args.temperature,
                                               max_new_tokens=args.max_new_tokens,
                                               seed=args.seed):
            for _ in group if batch[i].solutions else ():
                judge.put(data.sandbox_job(batch[i], batch[i].solutions[0],
                                           timeout=args.test_timeout))
        generate_s = dev.now() - t
    finally:
        judge.close()
    out = {"generate_s": generate_s, "overlapped_s": dev.now() - t}
    try:
        out["programs"] = len(judge.results())
    except Exception as e:   # the round's count is lost, not the steps measured before it
        out.update(programs=0, judge_error=failure(e)["reason"])
    return out


def update_phase(policy, optimizer, prompt_ids, comps, adv, pad_id, dev: Device, args) -> dict:
    """One GRPO optimizer step on the P*G samples: the trainer's own actor.update (collate,
    micro-batches, global token-mean, clip, AdamW) with losses.policy_loss, on-policy (old
    log-probs = logp.detach()). tokens: prompt + response tokens through the forward+backward."""
    import actor
    import losses
    samples = [actor.Sample(prompt_ids[i // args.group], c.token_ids, advantage=float(adv[i]))
               for i, c in enumerate(comps)]

    def loss_fn(out, batch, denom):
        return losses.policy_loss(out.logp, out.logp.detach(), batch.advantages, batch.mask,
                                agg="token-mean", denom=denom.mask)
    st = actor.update(policy, optimizer, samples, loss_fn, micro_batch=args.micro_batch,
                      agg="token-mean", max_len=None, pad_id=pad_id, device=dev.device,
                      max_grad_norm=args.max_grad_norm, temperature=args.temperature)
    return {"tokens": sum(len(s.prompt_ids) + len(s.response_ids) for s in samples),
            "loss": st["loss"], "clip_frac": st["clip_frac"], "grad_norm": st["grad_norm"]}


def grpo_steps(kind: str, path: str, policy, optimizer, tokenizer, problems, n_params: int,
               dev: Device, args, peak, deadline: float) -> dict:
    """--steps GRPO steps with a `kind` engine; per-step phase seconds and derived rates."""
    import random

    import torch

    import data
    import grpo
    from infra import model
    t = dev.now()
    engine = start_engine(kind, path, dev, args)
    out = {"status": "ok", "engine": kind, "engine_start_s": dev.now() - t, "steps": []}
    rng = random.Random(args.seed)
    try:
        prompts_all = [data.render_prompt(tokenizer, data.coder_messages(p)) + "```python\n"
                       for p in problems]
        probe_ids = tokenizer(prompts_all[0] + "print(sum(map(int, input().split())))\n```")[
            "input_ids"]
        engine_before = engine_logprobs(engine, probe_ids)
        last = None
        for step in range(args.steps):
            left = deadline - elapsed()
            if last is not None and left < 1.5 * last:
                out["stopped"] = f"budget: {left:.0f} s left, a step takes ~{last:.0f} s"
                break
            st: dict = {"step": step}
            idx = [(step * args.prompts + i) % len(problems) for i in range(args.prompts)]
            batch = [problems[i] for i in idx]
            prompts = [prompts_all[i] for i in idx]
            t_step = dev.now()

            dev.reset_peak()
            t = dev.now()
            outs = engine.generate(prompts, n=args.group, temperature=args.temperature,
                                   max_new_tokens=args.max_new_tokens, seed=args.seed + step)
            st["generate_s"] = dev.now() - t
            st["generate_peak_gib"] = dev.peak_gib()
            comps = [c for o in outs for c in o]
            st["gen_tokens"] = sum(len(c.token_ids) for c in comps)
            engine.sleep()                  # vLLM on CUDA frees its memory for the update

            t = dev.now()
            flat = [p for p in batch for _ in range(args.group)]
            rewards, info = reward_phase(flat, [reward_text(tokenizer, c.token_ids)
                                                for c in comps], args, rng)
            adv = grpo.group_advantages(torch.tensor(rewards), args.group, "group")
            st["reward_s"] = dev.now() - t
            st.update(info, reward_mean=sum(rewards) / len(rewards),
                      zero_adv_frac=float((adv == 0).float().mean()))

            dev.reset_peak()
            t = dev.now()
            prompt_ids = [tokenizer(p)["input_ids"] for p in prompts]
            st.update(update_phase(policy, optimizer, prompt_ids, comps, adv,
                                   tokenizer.pad_token_id, dev, args))
            st["update_s"] = dev.now() - t
            st["update_peak_gib"] = dev.peak_gib()

            t = dev.now()
            engine.load_weights(model.iter_full_params(policy))
            st["sync_s"] = dev.now() - t
            st["step_s"] = dev.now() - t_step
            last = st["step_s"]
            out["steps"].append(st)
            say(f"  {kind} step {step}: gen {st['generate_s']:.2f}s ({st['gen_tokens']} tok) "
                f"reward {st['reward_s']:.2f}s update {st['update_s']:.2f}s "
                f"sync {st['sync_s']:.2f}s")
        if out["steps"] and deadline - elapsed() > 2 * out["steps"][-1]["generate_s"]:
            out["overlap"] = overlap_round(engine, prompts, batch, dev, args)
        if out["steps"]:
            eng, tr = engine_logprobs(engine, probe_ids), trainer_logprobs(policy, probe_ids,
                                                                           dev.device)
            out["sync_max_abs_diff"] = float((eng - tr).abs().max())
            out["sync_engine_shift"] = float((eng - engine_before).abs().max())
            out.update(summarise_steps(out["steps"], n_params, peak))
    finally:
        engine.close()
        del engine
        dev.free()
    return out


def summarise_steps(steps: list[dict], n_params: int, peak) -> dict:
    """Means over the steady steps (all but the first, which pays warm-up, when > 1 step)."""
    steady = steps[1:] if len(steps) > 1 else steps
    mean = {k: sum(s[k] for s in steady) / len(steady)
            for k in ("generate_s", "reward_s", "update_s", "sync_s", "step_s")}
    gen_tok = sum(s["gen_tokens"] for s in steady)
    upd_tok = sum(s["tokens"] for s in steady)
    upd_s = sum(s["update_s"] for s in steady)
    peaks = [s[k] for s in steps for k in ("generate_peak_gib", "update_peak_gib")
             if s[k] is not None]
    return {"steady_steps": len(steady), "mean": mean,
            "gen_tokens_per_s": gen_tok / max(sum(s["generate_s"] for s in steady), 1e-9),
            "update_tokens_per_s": upd_tok / max(upd_s, 1e-9),
            "update_mfu": mfu(n_params, upd_tok, upd_s, peak),
            "peak_gib": max(peaks) if peaks else None}


# ----------------------------------------------------------------------------- one size

def run_phase(res: dict, key: str, fn, dev: Device, deadline: float, need_s: float, save):
    """res[key] = fn() or its failure; skipped with the reason when under need_s are left.
    save() rewrites the report, so a run killed later still keeps this phase."""
    left = deadline - elapsed()
    if left < need_s:
        res[key] = {"status": "skipped", "reason": f"budget: {left:.0f} s left, needs ~"
                                                   f"{need_s:.0f} s"}
        save()
        return
    say(f"  {key} ...")
    try:
        res[key] = fn()
    except Skip as e:
        res[key] = {"status": "skipped", "reason": str(e)}
        say(f"  {key} skipped: {e}")
    except Exception as e:
        res[key] = failure(e)
        say(f"  {key} failed: {res[key]['reason']}")
    dev.free()
    save()


def run_size(res: dict, name: str, tiny_path: str, tokenizer, problems, dev: Device, args,
             peak, deadline: float, est: float, save) -> dict:
    """Fill `res` (already in the report) with size `name`'s phases; save() after each."""
    import torch

    from infra import model
    res.update(size=name, status="running", arch=SIZES[name]["arch"])   # until the end
    model.init_distributed()       # again: a closed vLLM engine takes the process group along
    t_size = time.perf_counter()
    lm = policy = optimizer = None
    try:
        path, lm, n_params = build_size(name, tiny_path, tokenizer, dev, args.work_dir,
                                        args.seed)
        cfg = lm.config
        res.update(params=n_params, hidden=cfg.hidden_size, layers=cfg.num_hidden_layers,
                   vocab=cfg.vocab_size, build_s=time.perf_counter() - t_size)
        policy = model.shard_model(model.PolicyLogprobs(lm, args.logprob_chunk), dev.device,
                                   args.grad_checkpointing)
        res["fsdp"] = {"world": torch.distributed.get_world_size(),
                       "dtensor_params": all(hasattr(p, "full_tensor")
                                             for p in policy.parameters()),
                       "mixed_precision": "bf16 params / fp32 reduce" if dev.cuda else "fp32"}
        optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
        small = est * 0.1
        run_phase(res, "train", lambda: train_throughput(policy, cfg.vocab_size, n_params, dev,
                                                         args, peak), dev, deadline, small, save)
        run_phase(res, "logprobs", lambda: logprob_check(cfg.hidden_size, cfg.vocab_size, dev,
                                                         args), dev, deadline, small, save)
        res["grpo"] = {}
        for kind in args.engines.split(","):
            res["grpo"][kind] = {}
            run_phase(res["grpo"], kind, lambda kind=kind: grpo_steps(
                kind, path, policy, optimizer, tokenizer, problems, n_params, dev, args, peak,
                deadline), dev, deadline, est * 0.3, save)
        res["status"] = "ok"
    except Exception as e:
        res.update(failure(e))
        say(f"{name} failed: {res['reason']}")
    finally:
        lm = policy = optimizer = None       # free the size's memory before the next one
        dev.free()
        if SIZES[name]["arch"] != "tiny":
            shutil.rmtree(os.path.join(args.work_dir, name), ignore_errors=True)
    res["seconds"] = time.perf_counter() - t_size
    res["est_s"] = est
    return res


# ----------------------------------------------------------------------------- report

def fmt(x, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def cell(notes: list[str]) -> str:
    """Notes as one Markdown table cell: no newlines, no column bars."""
    return "; ".join(" ".join(n.split()) for n in notes).replace("|", "/")


def sandbox_line(report: dict) -> str:
    sb = report.get("sandbox_reference") or {}
    if sb.get("status") != "ok":
        return f"Sandbox on reference solutions: {sb.get('status', '-')} {sb.get('reason', '')}"
    return (f"Sandbox on {sb['programs']} reference solutions ({sb['tests']} tests): "
            f"{sb['seconds']:.2f} s, pass rate {sb['pass_rate_mean']:.2f} (the realistic "
            "reward time; the steps' garbage programs fail to compile in ~1 ms).")


def overlap_lines(report: dict) -> list[str]:
    """What --overlap-reward can hide per (size, engine): the sandbox judges the batch while the
    engine generates, so generate + reward becomes about max(generate, reward). With random
    weights the steps' own programs cost ~1 ms, so the reward is the sandbox on the batch's
    reference solutions (sandbox_reference), the same P*G programs."""
    sb = report.get("sandbox_reference") or {}
    if sb.get("status") != "ok":
        return []
    out = []
    for r in report["sizes"]:
        for kind, g in (r.get("grpo") or {}).items():
            if not g.get("mean"):
                continue
            gen, reward = g["mean"]["generate_s"], sb["seconds"]
            line = (f"- {r['size']} {kind}: generate {gen:.2f} s, reward {reward:.2f} s: "
                    f"overlapped about {max(gen, reward):.2f} s instead of "
                    f"{gen + reward:.2f} s ({min(gen, reward) / (gen + reward):.0%} less)")
            if g.get("overlap"):
                o = g["overlap"]
                line += (f"; measured (overlap_round): generate {o['generate_s']:.2f} s with "
                         f"the sandbox beside it, {o['overlapped_s']:.2f} s to the last verdict")
            out.append(line)
    return ["--overlap-reward's bound (the engine's generate against the sandbox on the "
            "batch's reference solutions):", *out, ""] if out else []


def markdown(report: dict) -> str:
    """One table: a row per (size, engine); a skipped or failed size gets its reason."""
    m = report["meta"]
    lines = [f"GPU check on {m['device_name']} (torch {m['torch']}, transformers "
             f"{m['transformers']}), peak {fmt(m['peak_tflops'])} TFLOPS, "
             f"{m['elapsed_s']:.0f} s of --budget {m['budget_s']:.0f} s. "
             f"Random weights; P={m['prompts']} prompts x G={m['group']} samples x "
             f"{m['max_new_tokens']} new tokens. {sandbox_line(report)}", "",
             "| size | params | engine | status | gen tok/s | update tok/s | step s (gen / "
             "reward / update / sync) | train fwd+bwd tok/s | train MFU | update MFU | peak GiB "
             "| logp chunked-plain / -fp32 max abs | logp peak MiB plain / chunked | sync diff "
             "/ shift | notes |",
             "|---|---:|---|---|---:|---:|---|---:|---:|---:|---:|---|---|---|---|"]
    for r in report["sizes"]:
        params = f"{r['params'] / 1e6:.0f}M" if r.get("params") else "-"
        if r["status"] not in ("ok", "running"):    # running: a killed run's partial size
            lines.append(f"| {r['size']} | {params} | - | {r['status']} |" + " |" * 10
                         + f" {cell([r.get('reason', '')])} |")
            continue
        tr, lp = r.get("train", {}), r.get("logprobs", {})
        notes = [f"{k}: {v.get('status')} ({v.get('reason', '')})" for k, v in
                 (("train", tr), ("logprobs", lp)) if v and v.get("status") != "ok"]
        lp_ok = lp.get("status") == "ok"
        lp_diff = (f"{fmt(lp.get('chunked_vs_plain_max_abs'))} / "
                   f"{fmt(lp.get('chunked_vs_fp32_max_abs'))}" if lp_ok else "-")
        lp_mem = (f"{fmt(lp.get('plain_peak_mib'), '.0f')} / "
                  f"{fmt(lp.get('chunked_peak_mib'), '.0f')}" if lp_ok else "-")
        for kind, g in (r.get("grpo") or {"-": {}}).items():
            mean = g.get("mean")
            split = (" / ".join(f"{mean[k]:.2f}" for k in ("generate_s", "reward_s",
                                                            "update_s", "sync_s"))
                     if mean else "-")
            peaks = [x for x in (tr.get("peak_gib"), g.get("peak_gib")) if x is not None]
            sync = (f"{fmt(g.get('sync_max_abs_diff'))} / {fmt(g.get('sync_engine_shift'))}"
                    if "sync_max_abs_diff" in g else "-")
            row_notes = notes + [g[k] for k in ("reason", "stopped") if g.get(k)]
            errors = {s["sandbox_error"] for s in g.get("steps", []) if "sandbox_error" in s}
            row_notes += [f"sandbox: {e}" for e in sorted(errors)]
            lines.append(
                f"| {r['size']} | {params} | {kind} | {g.get('status', '-')} | "
                f"{fmt(g.get('gen_tokens_per_s'), '.0f')} | "
                f"{fmt(g.get('update_tokens_per_s'), '.0f')} | {split} | "
                f"{fmt(tr.get('tokens_per_s'), '.0f')} | {fmt(tr.get('mfu'), '.1%')} | "
                f"{fmt(g.get('update_mfu'), '.1%')} | "
                f"{fmt(max(peaks) if peaks else None, '.1f')} | {lp_diff} | {lp_mem} | "
                f"{sync} | {cell(row_notes)} |")
    lines += ["", "Step seconds are means over the steps after the first (warm-up). MFU = "
              "6 * params * tokens / seconds / peak (attention FLOPs not counted). Log-probs: "
              f"bf16, batch {m['lp_batch']} x seq {m['lp_seq']}, chunk {m['logprob_chunk']}, "
              "peak memory above inputs (CUDA only). Sync diff: engine vs trainer log-probs of "
              "a probe after the last sync; shift: how far the engine's moved over the run.", ""]
    return "\n".join(lines + overlap_lines(report))


def write_report(report: dict, out_dir: str) -> None:
    """Write gpu_check.json and gpu_check.md; a failure to write is printed, never raised
    (the measurements go on, and the next write may succeed)."""
    try:
        _write_report(report, out_dir)
    except Exception as e:
        say(f"writing the report failed: {type(e).__name__}: {e}")


def _write_report(report: dict, out_dir: str) -> None:
    report["meta"]["elapsed_s"] = elapsed()
    os.makedirs(out_dir, exist_ok=True)
    clean = round_floats(report)
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump(clean, f, indent=1)
    with open(os.path.join(out_dir, "gpu_check.md"), "w") as f:
        f.write(markdown(clean))


# ----------------------------------------------------------------------------- main

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu-smoke", action="store_true",
                   help="run the same code path on the CPU with the tiny sizes only (tiny, "
                        "qwen3-mini) and small shapes (fp32 FSDP2 over gloo, bf16 log-probs "
                        "check), in < 60 s")
    p.add_argument("--sizes", default=None,
                   help=f"comma-separated sizes in run order, of {', '.join(SIZES)} "
                        f"(default {DEFAULT_SIZES}; --cpu-smoke: {SMOKE_SIZES})")
    p.add_argument("--engines", default=None,
                   help="comma-separated engines for the GRPO steps: hf (transformers' "
                        "generate), vllm (skipped with the reason when no vLLM build for the "
                        "device imports) (default hf,vllm on GPU; hf with --cpu-smoke)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "gpu_check"),
                   help="directory for gpu_check.json and gpu_check.md")
    p.add_argument("--work-dir", default=None,
                   help="where the big sizes' random weights are saved for the engine, deleted "
                        "after each size (default: a new folder of this run's own in the "
                        "temporary directory, removed at the end; outside --out)")
    p.add_argument("--peak-tflops", type=float, default=None,
                   help="peak bf16 dense TFLOPS for MFU; default from the device-name table "
                        "(H200 989), none on the CPU (MFU null)")
    h = {"prompts": "prompts per GRPO step", "group": "samples per prompt (G)",
         "max_new_tokens": "new tokens per sample", "steps": "GRPO steps per engine",
         "micro_batch": "sequences per forward/backward in the update",
         "train_batch": "rows of the random-id forward+backward throughput test",
         "train_seq": "tokens per row of the throughput test",
         "train_reps": "timed repetitions of the throughput test (after one warm-up)",
         "lp_batch": "rows of the chunked-vs-plain log-probs check",
         "lp_seq": "positions per row of the log-probs check", "lr": "AdamW learning rate",
         "logprob_chunk": "positions per chunk of the chunked log-probs (trainer and check)",
         "budget": "seconds the whole run may take; sizes and steps that cannot fit are "
                   "skipped with the reason"}
    for key, (gpu, cpu) in SHAPES.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(gpu), default=None,
                       help=f"{h[key]} (default {gpu}; --cpu-smoke: {cpu})")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--reward", choices=["half", "sandbox"], default="half",
                   help="what the advantages use: half (a seeded random half of each group "
                        "gets 1; the sandbox still judges every program and is timed) or "
                        "sandbox (its pass rate: 0 for random weights, so zero advantages)")
    p.add_argument("--test-timeout", type=float, default=2.0,
                   help="sandbox seconds per test")
    p.add_argument("--sandbox-workers", type=int, default=0,
                   help="sandbox worker processes (0: one per CPU core)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping norm")
    p.add_argument("--grad-checkpointing", action="store_true",
                   help="activation checkpointing of the decoder layers (shard_model)")
    p.add_argument("--vllm-mem", type=float, default=0.3,
                   help="vLLM gpu_memory_utilization (its share of the GPU while awake)")
    p.add_argument("--max-model-len", type=int, default=None,
                   help="vLLM max_model_len, prompt + response (default: the model's "
                        "max_position_embeddings: 1024 tiny, 4096 the others)")
    p.add_argument("--seed", type=int, default=0, help="seed of weights, ids and sampling")
    return p


def parse_args(argv=None):
    args = build_parser().parse_args(argv)
    for key, (gpu, cpu) in SHAPES.items():
        if getattr(args, key) is None:
            setattr(args, key, cpu if args.cpu_smoke else gpu)
    if args.sizes is None:
        args.sizes = SMOKE_SIZES if args.cpu_smoke else DEFAULT_SIZES
    if args.engines is None:
        args.engines = "hf" if args.cpu_smoke else "hf,vllm"
    unknown = [s for s in args.sizes.split(",") if s not in SIZES]
    if unknown:
        raise SystemExit(f"--sizes: unknown {unknown}; choose from {list(SIZES)}")
    bad = [e for e in args.engines.split(",") if e not in ("hf", "vllm")]
    if bad:
        raise SystemExit(f"--engines: unknown {bad}; choose hf and/or vllm")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.cpu_smoke:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""     # the CPU path even on a GPU machine
    import torch
    import transformers

    from infra import model
    from world import sources, tiny
    if not args.cpu_smoke and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here: `--cpu-smoke` runs the same path on the CPU")
    d = model.init_distributed()
    dev = Device(d.device)
    name = torch.cuda.get_device_name(0) if dev.cuda else f"CPU ({platform.processor() or 'cpu'})"
    peak = peak_flops_for(name, args.peak_tflops) if dev.cuda or args.peak_tflops else None
    say(f"device {name}, peak {peak and peak / 1e12} TFLOPS, budget {args.budget:.0f} s, "
        f"sizes {args.sizes}, engines {args.engines}")
    from transformers import AutoTokenizer
    tiny_path = tiny.model_path()
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    problems = [p for p in sources.builtin_problems() if p.tests]
    report = {"meta": {"device_name": name, "device": str(d.device),
                       "torch": torch.__version__, "transformers": transformers.__version__,
                       "python": platform.python_version(),
                       "peak_tflops": peak and peak / 1e12, "budget_s": args.budget,
                       "cpu_smoke": args.cpu_smoke, "reward": args.reward,
                       "tokenizer": "project tiny byte-level BPE (1,024 ids) for every size",
                       **{k: getattr(args, k) for k in SHAPES},
                       "logprob_chunk": args.logprob_chunk, "engines": args.engines},
              "sizes": []}
    measured: dict = {}
    chosen = args.sizes.split(",")
    # The run's own folder unless --work-dir names one: two checks on one machine (or two test
    # sessions) would otherwise save, load and delete each other's weights under one name.
    own_work_dir = args.work_dir is None
    if own_work_dir:
        args.work_dir = tempfile.mkdtemp(prefix="gpu_check_models-")

    def save():
        write_report(report, args.out)
    try:
        run_phase(report, "sandbox_reference", lambda: sandbox_reference(problems, args), dev,
                  args.budget, 0.0, save)
        for size in chosen:
            est = predict_seconds(size, measured, args.cpu_smoke)
            left = args.budget - elapsed()
            if est > left:
                say(f"skip {size}: needs ~{est:.0f} s, {left:.0f} s left")
                report["sizes"].append({"size": size, "status": "skipped", "reason":
                                        f"budget: needs ~{est:.0f} s, {left:.0f} s left of "
                                        f"--budget {args.budget:.0f}"})
                continue
            say(f"size {size} (expected ~{est:.0f} s, {left:.0f} s left)")
            res: dict = {"size": size, "status": "running"}
            report["sizes"].append(res)
            run_size(res, size, tiny_path, tokenizer, problems, dev, args, peak, args.budget,
                     est, save)
            if res.get("params", 0) > 1e8 and res["status"] == "ok":
                measured[size] = {"seconds": res["seconds"], "est_s": SIZES[size]["est_s"]}
            write_report(report, args.out)
            say(f"size {size} done in {res['seconds']:.0f} s: {res['status']}")
        for size in SIZES:
            if size not in chosen:
                reason = ("--cpu-smoke runs the tiny sizes only" if args.cpu_smoke
                          else "not in --sizes")
                report["sizes"].append({"size": size, "status": "skipped", "reason": reason})
    finally:
        write_report(report, args.out)
        if own_work_dir:
            shutil.rmtree(args.work_dir, ignore_errors=True)
        if torch.distributed.is_initialized():     # one rank: nobody to wait for
            torch.distributed.destroy_process_group()
    say(f"wrote {os.path.join(args.out, 'gpu_check.json')} and gpu_check.md")
    print(markdown(round_floats(report)), flush=True)
    return report


if __name__ == "__main__":
    main()
