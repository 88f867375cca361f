"""Shared training machinery: model loading, FSDP2, token log-probs, the value head, checkpoints.

Written once and imported by grpo.py, ppo_fgo.py and agents.py.

Log-probabilities of the sampled tokens, with the sampling temperature T applied:

    logp_t = log_softmax(h_t W^T / T)[y_{t+1}]

computed over chunks of positions so the [batch, seq, vocab] fp32 tensor never exists at
once (at vocab 151,936 it dominates memory). The response mask is built from lengths, never
from token values, so the EOS token is trained even when pad == eos.

Sequence layout used everywhere: each row is prompt + response, right-padded to a common
length L. Position t of the log-prob tensor ([B, L-1]) scores token t+1.

Weight files are checked before anything loads them (check_weights: each safetensors file's
header, and its size against the header's offsets), so a cut-off download or checkpoint is
one line naming the file, not vLLM's and then transformers' tracebacks; so are a model
directory's config, tokenizer and chat template (check_model_dir).
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

import jinja2
import torch
import torch.distributed as dist
import torch.nn as nn
import transformers
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError
from safetensors.torch import load_file
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    set_model_state_dict,
)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint
from transformers import (
    CONFIG_MAPPING,
    AutoModel,
    AutoModelForCausalLM,
    AutoTokenizer,
)

from infra.errors import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shipped CPU base model (base.py makes it; models/base/README.md is its card).
BASE_DIR = os.path.join(ROOT, "models", "base")


def resolve_model(name: str) -> str:
    """Map a --model value to something from_pretrained loads.

    "base" is the shipped CPU base model (models/base, made by base.py); an existing directory
    must hold a config.json, and its files are checked (check_model_dir); a value that looks
    like a path (./x, /x, ~/x, x/y/z) but does not exist is a user error, not a hub id; a hub
    id ("org/name") is checked against the hub or, offline, against the local cache, so an
    unreachable hub fails here with advice, not deep inside transformers.
    """
    if name == "base":
        if not os.path.exists(os.path.join(BASE_DIR, "config.json")):
            raise UserError(f"--model base: {BASE_DIR} holds no model; this clone lacks the "
                            "shipped base (git checkout -- models/base), or make one with "
                            "python -m models.make_base")
        check_model_dir(BASE_DIR, "--model base",
                        "git checkout -- models/base, or python -m models.make_base")
        return BASE_DIR
    path = os.path.expanduser(name)
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "config.json")):
            raise UserError(f"--model {name}: the directory holds no config.json, so it is not "
                            "a transformers model directory (pass the folder save_pretrained "
                            "wrote, or a checkpoint runs/X/step_N)")
        check_model_dir(path, f"--model {name}")
        return path
    if os.path.exists(path):
        raise UserError(f"--model {name}: is a file; pass a model directory or a hub id")
    if _looks_like_path(name):
        raise UserError(f"--model {name}: no such model directory")
    _check_hub_model(name)
    return name


def model_identity(name: str) -> str:
    """One name for one --model, however it is spelt: "base" for the shipped base (also given
    as its folder), a local folder's real path, else the value itself (tiny, a hub id)."""
    path = os.path.expanduser(name)
    if name == "base" or not os.path.isdir(path):
        return name
    real = os.path.realpath(path)
    return "base" if real == os.path.realpath(BASE_DIR) else real


def _looks_like_path(name: str) -> bool:
    """Hub ids are "name" or "org/name"; anything else with a separator is meant as a path."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1


def _check_hub_model(repo_id: str) -> None:
    """Fetch only config.json (from the cache when HF_HUB_OFFLINE=1) to see that the model can
    be loaded at all."""
    try:
        hf_hub_download(repo_id, "config.json")
    except GatedRepoError:
        raise UserError(f"--model {repo_id}: the model is gated on the Hugging Face hub; "
                        "accept its licence and log in (huggingface-cli login)") from None
    except RepositoryNotFoundError:
        raise UserError(f"--model {repo_id}: no such model on the Hugging Face hub (check the "
                        "name, or pass a local directory)") from None
    except HFValidationError:
        raise UserError(f"--model {repo_id}: neither a local directory nor a valid hub id "
                        "(org/name)") from None
    except Exception as e:   # no network, offline mode without a cached copy, hub errors
        raise UserError(f"--model {repo_id}: cannot fetch it from the Hugging Face hub "
                        f"({type(e).__name__}) and it is not in the local cache; download it "
                        "where there is network and pass its directory (--model /path/to/dir), "
                        "or set HF_HUB_OFFLINE=1 to use a cached copy") from None


# ----------------------------------------------------------------------------- weight files

SAFE_WEIGHTS, SAFE_INDEX = "model.safetensors", "model.safetensors.index.json"
OTHER_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")   # not checked, only seen


def safetensors_problem(file: str) -> str | None:
    """Why `file` cannot be loaded as safetensors, or None when it looks whole.

    The format: 8 bytes little-endian N, N bytes of JSON {name: {dtype, shape, data_offsets:
    [begin, end]}}, then the data, offsets counted from byte 8 + N. A loader reads the header
    first and needs the file to end exactly where the last tensor does, so a cut-off download
    or copy shows here without reading the data.
    """
    if not os.path.exists(file):
        return "the file is missing"
    size = os.path.getsize(file)
    with open(file, "rb") as f:
        head = f.read(8)
        if head == b"version ":     # "version https://git-lfs.github.com/spec/v1"
            return "it is a Git LFS pointer, not the weights (run git lfs pull)"
        if len(head) < 8:
            return f"{size} bytes, too short for a header"
        n = int.from_bytes(head, "little")
        if n > size - 8:
            return f"its header wants {n} bytes and the file has {size - 8} after the length"
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError):
            return "its header is not valid JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    try:
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"),
                  default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return "its header has a tensor without data_offsets"
    if 8 + n + end != size:
        return (f"{size} bytes where its header needs {8 + n + end} "
                f"({'truncated' if size < 8 + n + end else 'extra bytes at the end'})")
    return None


def weight_problem(path: str) -> tuple[str, str] | None:
    """(file, why) for the first weight file of model directory `path` that cannot be loaded,
    None when all look whole. The files: model.safetensors, or every shard that
    model.safetensors.index.json names; a directory with only pytorch_model.bin weights is
    not checked (torch.load has no cheap header to read)."""
    index = os.path.join(path, SAFE_INDEX)
    if os.path.exists(index):
        try:
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            return index, "it is not a valid index (JSON with a weight_map)"
        files = [os.path.join(path, s) for s in shards]
    elif os.path.exists(os.path.join(path, SAFE_WEIGHTS)):
        files = [os.path.join(path, SAFE_WEIGHTS)]
    elif any(os.path.exists(os.path.join(path, n)) for n in OTHER_WEIGHTS):
        return None
    else:
        return path, f"it holds no weights ({SAFE_WEIGHTS} or {SAFE_INDEX})"
    for file in files:
        why = safetensors_problem(file)
        if why:
            return file, why
    return None


def check_weights(path: str, what: str, advice: str = "download or copy the model again") -> None:
    """Raise UserError when a weight file of model directory `path` is damaged, before any
    engine starts: otherwise vLLM, then transformers, each fail deep inside with their own
    multi-line error. `what` names the flag the user gave (--model DIR, --resume)."""
    found = weight_problem(path)
    if found:
        file, why = found
        raise UserError(f"{what}: {file} cannot be loaded: {why}; {advice}")


# ----------------------------------------------------------------------------- the other files

# A tokenizer's vocabulary: fast (tokenizer.json), BPE (vocab.json + merges.txt), SentencePiece
# or WordPiece. Without one transformers builds an empty tokenizer and the engine generates
# from nothing.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model", "vocab.txt")


def check_model_dir(path: str, what: str, advice: str = "download or copy the model again") -> None:
    """UserError naming the first file of model directory `path` that from_pretrained, the
    tokenizer or the engine would fail on, before anything loads it: config.json (JSON, a
    model_type transformers knows), the weights (check_weights), a tokenizer's vocabulary, and
    the chat template when there is one (it must compile). `what` names the flag."""
    config = _json_file(os.path.join(path, "config.json"))
    if not isinstance(config, dict):
        raise UserError(f"{what}: {path}/config.json is not a JSON object (cut short?); {advice}")
    kind = config.get("model_type")
    if kind not in CONFIG_MAPPING:
        raise UserError(f"{what}: {path}/config.json has model_type {kind!r}, which this "
                        f"transformers ({transformers.__version__}) does not know; use a "
                        "model of a known architecture or a newer transformers")
    check_weights(path, what, advice)
    if not any(os.path.exists(os.path.join(path, n)) for n in TOKENIZER_FILES):
        raise UserError(f"{what}: {path} holds no tokenizer ({', '.join(TOKENIZER_FILES)}); "
                        f"{advice}, with its tokenizer files")
    for where, template in chat_templates(path):
        problem = _template_problem(template)
        if problem:
            raise UserError(f"{what}: the chat template in {where} does not parse ({problem}); "
                            "fix or remove it")


def _json_file(path: str):
    """The JSON in `path`; None when it is missing, cut short or not text."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def chat_templates(path: str) -> list[tuple[str, object]]:
    """(file, template) for each chat template model directory `path` holds: chat_template.jinja,
    chat_template.json's, tokenizer_config.json's (a string, or a list of {name, template}).
    A template file that does not read is given as None (it does not parse either)."""
    found: list[tuple[str, object]] = []
    jinja = os.path.join(path, "chat_template.jinja")
    if os.path.exists(jinja):
        try:
            with open(jinja, encoding="utf-8") as f:
                found.append((jinja, f.read()))
        except (OSError, UnicodeDecodeError):
            found.append((jinja, None))
    for name in ("chat_template.json", "tokenizer_config.json"):
        file = os.path.join(path, name)
        if not os.path.exists(file):
            continue
        spec = _json_file(file)
        if not isinstance(spec, dict):
            found.append((file, None))
            continue
        template = spec.get("chat_template")
        for t in template if isinstance(template, list) else [template]:
            if t is not None:
                found.append((file, t.get("template") if isinstance(t, dict) else t))
    return found


def _template_problem(template) -> str | None:
    """Why a chat template does not compile as transformers compiles it (None: it does)."""
    if not isinstance(template, str):
        return "not a JSON file with a template string" if template is None else \
            "not a template string"
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template as compile_
    except ImportError:   # another transformers: jinja2 as it configures it
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        def compile_(text):
            return ImmutableSandboxedEnvironment(
                extensions=["jinja2.ext.loopcontrols"]).from_string(text)
    try:
        compile_(template)
    except jinja2.TemplateError as e:
        line = getattr(e, "lineno", None)
        return (f"line {line}: " if line else "") + " ".join(str(e).split())[:200]
    return None


def load_tokenizer(path: str):
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def attention_impl(device: torch.device) -> str:
    """flash_attention_2 when it imports and we are on CUDA, else PyTorch SDPA."""
    if device.type == "cuda":
        try:
            import flash_attn  # noqa: F401
            return "flash_attention_2"
        except ImportError:
            pass
    return "sdpa"


def load_causal_lm(path: str, device: torch.device, dtype=torch.float32):
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation=attention_impl(device)).to(device)


# ----------------------------------------------------------------------------- distributed

@dataclass
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    """Join the torchrun process group (or make a 1-process one): NCCL on GPU, gloo on CPU.

    A plain `python grpo.py` gets a world of 1 so that the FSDP code path is the same one
    that torchrun runs.
    """
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        if "MASTER_PORT" not in os.environ:      # not under torchrun: any free local port
            import socket
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                os.environ["MASTER_PORT"] = str(s.getsockname()[1])
        os.environ.setdefault("RANK", "0")
        os.environ.setdefault("WORLD_SIZE", "1")
        os.environ.setdefault("LOCAL_RANK", "0")
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
    local = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    return Dist(dist.get_rank(), dist.get_world_size(), local, device)


def close_distributed(wait: bool = True) -> None:
    """Leave the process group. wait=True first waits for every rank: tearing gloo down while
    a peer is still in its last collective aborted a rank now and then ("terminate called
    without an active exception", about 1 two-rank run in 10). After a failure pass
    wait=False: the other ranks may never reach the barrier."""
    if dist.is_initialized():
        if wait:
            dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(x: float | torch.Tensor, device=None) -> float:
    """Sum a number over ranks (identity in a world of 1)."""
    t = torch.as_tensor(x, dtype=torch.float64, device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        t = t.clone()
        dist.all_reduce(t)
    return float(t)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy as np
        np.random.seed(seed)
    except ImportError:
        pass


# ----------------------------------------------------------------------------- log-probs

@dataclass
class Forward:
    """What one forward pass gives the loss: logp, entropy, values [B, L-1] (None: not asked)."""
    logp: torch.Tensor
    entropy: torch.Tensor | None = None
    values: torch.Tensor | None = None


def chunked_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                           temperature: float = 1.0, chunk_size: int = 256,
                           with_entropy: bool = False):
    """Log-probabilities of `targets` under softmax(hidden @ weight.T / temperature).

    hidden [B, T, H], weight [V, H], targets [B, T] -> (logp [B, T] fp32, entropy [B, T] fp32
    with with_entropy, else None).
    Only a [B, chunk, V] slice of logits exists at a time; each chunk is recomputed in the
    backward pass (checkpointed), so peak memory is O(B * chunk * V) instead of O(B * T * V).
    """
    def one_chunk(h, y):
        logits = (h @ weight.T).float() / temperature          # [B, c, V]
        logz = torch.logsumexp(logits, dim=-1)                 # [B, c]
        logp = logits.gather(-1, y.unsqueeze(-1)).squeeze(-1) - logz
        if not with_entropy:
            return logp, torch.zeros_like(logp)
        p = torch.softmax(logits, dim=-1)
        return logp, logz - (p * logits).sum(-1)

    outs, ents = [], []
    for s in range(0, hidden.shape[1], chunk_size):
        h, y = hidden[:, s:s + chunk_size], targets[:, s:s + chunk_size]
        if torch.is_grad_enabled() and (h.requires_grad or weight.requires_grad):
            lp, en = checkpoint(one_chunk, h, y, use_reentrant=False)
        else:
            lp, en = one_chunk(h, y)
        outs.append(lp)
        ents.append(en)
    logp = torch.cat(outs, dim=1)
    return logp, torch.cat(ents, dim=1) if with_entropy else None


def plain_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0):
    """Reference computation: full log_softmax of [B, T, V] logits (what chunking avoids)."""
    return torch.log_softmax(logits.float() / temperature, -1).gather(
        -1, targets.unsqueeze(-1)).squeeze(-1)


def response_mask(prompt_lens: torch.Tensor, response_lens: torch.Tensor, length: int):
    """0/1 mask over log-prob positions [B, length-1] selecting the response tokens.

    Row i holds prompt (p_i tokens) then response (r_i tokens, EOS included when the sampler
    stopped on it). Log-prob position t scores token t+1, so the response occupies positions
    p_i - 1 ... p_i + r_i - 2. Built from lengths: an EOS equal to the pad id still counts.
    """
    t = torch.arange(length - 1, device=prompt_lens.device).unsqueeze(0)      # [1, L-1]
    start = (prompt_lens - 1).unsqueeze(1)
    return ((t >= start) & (t < start + response_lens.unsqueeze(1))).float()


class ValueHead(nn.Linear):
    """PPO's value head: one scalar per position from the last hidden states, V = h w + b.

    hidden [B, T, H] -> values [B, T] fp32. Zero-initialised, so V = 0 at first and the first
    advantages are plain returns rather than noise from a random head. The one value head of
    the project: on the policy's own body (PolicyLogprobs(value_head=True), PPO's --critic
    shared) and on the separate critic (ValueModel).
    """

    def __init__(self, hidden_size: int, device=None):
        super().__init__(hidden_size, 1, dtype=torch.float32, device=device)
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        # = Linear(hidden).squeeze(-1), written without a view (FSDP2 hooks dislike views);
        # fp32 on both sides: under bf16 mixed precision FSDP hands the head over in bf16.
        return hidden.float() @ self.weight[0].float() + self.bias[0].float()


class PolicyLogprobs(nn.Module):
    """A causal LM that returns per-token log-probs instead of logits.

    Wrapping the LM (rather than calling its body and head from outside) keeps the whole
    forward inside one module, which FSDP2 needs: the root module's pre-forward hook is what
    gathers the embedding, final norm and head weights.

    value_head=True adds a ValueHead on the LM's last hidden states: PPO's shared critic. It is
    a submodule of this root, so shard_model shards it with the root's parameters and the
    root's hook gathers it; it must be added before shard_model. Its weights never leave as LM
    weights: iter_full_params gives only the LM's (HF) parameters, and checkpoints store the
    head beside them as value_head.pt.
    """

    def __init__(self, lm: nn.Module, chunk_size: int = 256, value_head: bool = False):
        super().__init__()
        self.lm = lm
        self.chunk_size = chunk_size
        self.value_head = None
        if value_head:
            self.value_head = ValueHead(lm.config.hidden_size,
                                        device=next(lm.parameters()).device)

    def forward(self, input_ids, attention_mask, temperature: float = 1.0,
                with_entropy: bool = False, with_values: bool = False) -> Forward:
        """input_ids, attention_mask [B, L] -> Forward: logp [B, L-1], entropy [B, L-1] with
        with_entropy, and with with_values the value head's values [B, L-1] fp32 (position t
        is the state after token t, in which token t+1 was chosen); None where not asked.
        Values are computed here, inside the root forward, so FSDP has the head's weights
        gathered."""
        body = self.lm.get_decoder()
        hidden = body(input_ids=input_ids, attention_mask=attention_mask,
                      use_cache=False).last_hidden_state                # [B, L, H]
        weight = self.lm.get_output_embeddings().weight                 # [V, H]
        logp, entropy = chunked_token_logprobs(hidden[:, :-1], weight, input_ids[:, 1:],
                                               temperature, self.chunk_size, with_entropy)
        if not with_values:
            return Forward(logp, entropy)
        if self.value_head is None:
            raise ValueError("with_values=True needs PolicyLogprobs(..., value_head=True)")
        return Forward(logp, entropy, self.value_head(hidden[:, :-1]))  # values [B, L-1]


class ValueModel(nn.Module):
    """PPO's separate critic: a causal LM's transformer body and a ValueHead.

    forward(input_ids, attention_mask [B, T]) -> values [B, T] (float32). V at position t is
    the value of the state after token t. Own weights and own learning rate (StepCoder), so
    the value loss never moves the policy.
    """

    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = ValueHead(hidden_size)

    @classmethod
    def from_pretrained(cls, path: str, **kwargs) -> "ValueModel":
        """A new body loaded from a checkpoint (kwargs go to AutoModel.from_pretrained)."""
        body = AutoModel.from_pretrained(path, **kwargs)
        return cls(body, body.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask,
                           use_cache=False).last_hidden_state           # [B, T, H]
        return self.head(hidden)


def shard_model(module: nn.Module, device: torch.device, grad_checkpointing: bool = False,
                lm: nn.Module | None = None):
    """FSDP2: fully_shard each decoder layer, then the root. bf16 compute on GPU, fp32 on CPU.

    `lm` is the transformers model inside `module` whose decoder layers are sharded
    (default module.lm, as in PolicyLogprobs; PPO's critic passes its own body).
    """
    lm = module.lm if lm is None else lm
    if grad_checkpointing:
        lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mp = None
    if device.type == "cuda":
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kw = {"mp_policy": mp} if mp else {}
    decoder = lm.get_decoder() if hasattr(lm, "get_decoder") else lm
    for layer in decoder.layers:
        fully_shard(layer, **kw)
    fully_shard(module, **kw)
    return module


def _gathered_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """Full (unsharded) state dict of `module` on CPU, every key. Under torch.distributed only
    rank 0 gets the tensors (get_model_state_dict's cpu_offload); the others get {}."""
    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True,
                                                                 cpu_offload=True))


def iter_full_params(module: PolicyLogprobs):
    """Yield (HF name, full tensor) one parameter at a time (for weight sync on GPU).

    Each FSDP2 parameter is a DTensor; full_tensor() all-gathers just that one, so the full
    model never sits twice in memory. Every rank must iterate in the same order.
    Only the LM's parameters: a value head never reaches a generation engine.
    """
    for name, p in module.named_parameters():
        if not name.startswith("lm."):
            continue
        t = p.full_tensor() if hasattr(p, "full_tensor") else p
        yield name.removeprefix("lm."), t.detach()


def copy_weights(source: nn.Module, target: nn.Module, rename) -> None:
    """Load `source`'s current (FSDP-sharded) weights into `target` (sharded too): rank 0
    gathers the full state dict on CPU, set_model_state_dict broadcasts it.
    rename(source key) -> target key or None (skip). Keys of `target` not given (a critic's
    head) keep their values."""
    sd = {rename(k): v for k, v in _gathered_state_dict(source).items() if rename(k)}
    set_model_state_dict(target, sd, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True, strict=False))


def reference_like(policy: PolicyLogprobs, path: str, device: torch.device) -> PolicyLogprobs:
    """A frozen copy of the policy as it is now (after the warm start), sharded like it: the
    KL anchor of GRPO's --beta and PPO's --kl-coef. `path` gives the architecture."""
    ref = shard_model(PolicyLogprobs(load_causal_lm(path, device), policy.chunk_size), device)
    copy_weights(policy, ref, lambda k: k if k.startswith("lm.") else None)
    return ref.eval().requires_grad_(False)


def critic_like(policy: PolicyLogprobs, path: str, device: torch.device,
                grad_checkpointing: bool = False) -> ValueModel:
    """PPO's separate critic: the policy's body as it is now (after the warm start) plus a
    zero ValueHead, sharded like the policy."""
    critic = ValueModel.from_pretrained(path, dtype=torch.float32,
                                        attn_implementation=attention_impl(device)).to(device)
    critic = shard_model(critic, device, grad_checkpointing, lm=critic.body)
    copy_weights(policy, critic, lambda k: "body." + k.removeprefix("lm.model.")
                 if k.startswith("lm.model.") else None)
    return critic


# ----------------------------------------------------------------------------- checkpoints

def replace_dir(tmp: str, final: str) -> None:
    """Atomically publish tmp as final (a crash never leaves a half-written `final`)."""
    old = final + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(final):
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def save_checkpoint(out_dir: str, step: int, module: PolicyLogprobs, tokenizer, optimizer,
                    scheduler, state: dict, d: Dist, keep: int = 2, extras=None) -> str:
    """Write out_dir/step_<N>: HF weights + tokenizer (loadable by from_pretrained and vLLM),
    per-rank optimizer shards, scheduler, RNG and trainer state (data position, curricula).

    extras: {name: (module, optimizer)} saved beside it (PPO's critic): the full weights as
    <name>.pt on rank 0 and the optimizer in each rank's file. A value head on `module`
    (PolicyLogprobs(value_head=True)) goes to value_head.pt, never into the HF weights.
    Written into step_<N>.tmp then renamed; `latest` names the last complete one.
    Resume needs the same number of ranks (the optimizer state is sharded like the model).
    """
    extras = extras or {}
    final = os.path.join(out_dir, f"step_{step}")
    tmp = final + ".tmp"
    gathered = _gathered_state_dict(module)
    sd = {k.removeprefix("lm."): v for k, v in gathered.items() if k.startswith("lm.")}
    head_sd = {k.removeprefix("value_head."): v for k, v in gathered.items()
               if k.startswith("value_head.")}
    extra_sd = {name: get_model_state_dict(m, options=StateDictOptions(
        full_state_dict=True, cpu_offload=True)) for name, (m, _) in extras.items()}
    if d.main:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        module.lm.save_pretrained(tmp, state_dict=sd)
        tokenizer.save_pretrained(tmp)
        if head_sd:
            torch.save(head_sd, os.path.join(tmp, "value_head.pt"))
        for name, esd in extra_sd.items():
            torch.save(esd, os.path.join(tmp, f"{name}.pt"))
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, "world": d.world, **state}, f)
    if dist.is_initialized():
        dist.barrier()
    torch.save({"optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler else None,
                "extras": {name: opt.state_dict() for name, (_, opt) in extras.items()},
                "rng": {"torch": torch.get_rng_state(), "python": random.getstate()}},
               os.path.join(tmp, f"rank{d.rank}.pt"))
    if dist.is_initialized():
        dist.barrier()
    if d.main:
        replace_dir(tmp, final)
        with open(os.path.join(out_dir, "latest.tmp"), "w") as f:
            f.write(f"step_{step}")
        os.replace(os.path.join(out_dir, "latest.tmp"), os.path.join(out_dir, "latest"))
        steps = sorted(int(n[5:]) for n in os.listdir(out_dir)
                       if n.startswith("step_") and n[5:].isdigit())
        for s in steps[:-keep]:
            shutil.rmtree(os.path.join(out_dir, f"step_{s}"), ignore_errors=True)
    if dist.is_initialized():
        dist.barrier()
    return final


def latest_checkpoint(out_dir: str) -> str | None:
    """The checkpoint <out_dir>/latest names (None when there is none), its trainer state and
    weights checked: --resume fails here, before any model or engine is built, when they are
    damaged."""
    path = os.path.join(out_dir, "latest")
    if not os.path.exists(path):
        return None
    ckpt = os.path.join(out_dir, open(path).read().strip())
    if not os.path.exists(os.path.join(ckpt, "trainer_state.json")):
        return None
    read_trainer_state(ckpt)
    check_checkpoint(ckpt)
    return ckpt


def _resume_advice(ckpt: str) -> str:
    """The way back from a damaged checkpoint: an earlier step_N, or a fresh start."""
    out_dir = os.path.dirname(os.path.abspath(ckpt))
    return (f"delete {ckpt} and write the name of an earlier step_N into {out_dir}/latest, "
            "or start the run afresh in a new --out")


def read_trainer_state(ckpt: str, needs: tuple[str, ...] = ("step",)) -> dict:
    """<ckpt>/trainer_state.json as a dict, or a UserError naming it when it is cut short
    (not a JSON object), lacks one of the keys `needs`, or its step is no count."""
    path = os.path.join(ckpt, "trainer_state.json")
    try:
        with open(path, encoding="utf-8") as f:
            state = json.load(f)
    except (ValueError, UnicodeDecodeError):   # cut short, or not text
        state = None
    if not isinstance(state, dict):
        raise UserError(f"--resume: {path} is not a JSON object (cut short?); "
                        f"{_resume_advice(ckpt)}")
    missing = [k for k in needs if k not in state]
    if missing:
        raise UserError(f"--resume: {path} lacks {', '.join(missing)}; {_resume_advice(ckpt)}")
    step = state.get("step", 0)
    if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
        raise UserError(f"--resume: {path} has step {step!r}, not a count of steps; "
                        f"{_resume_advice(ckpt)}")
    return state


def check_checkpoint(ckpt: str, rank: int | None = None) -> None:
    """UserError when checkpoint `ckpt`'s weights (or rank `rank`'s optimizer file) are
    damaged or missing; the advice names the way back."""
    advice = _resume_advice(ckpt)
    check_weights(ckpt, "--resume", advice)
    if rank is not None and not os.path.exists(os.path.join(ckpt, f"rank{rank}.pt")):
        raise UserError(f"--resume: {ckpt} has no rank{rank}.pt (optimizer state); {advice}")
    for name in sorted(os.listdir(ckpt)):
        # torch.save writes a zip, whose directory sits at the end: a cut-off file has none.
        if name.endswith(".pt") and not zipfile.is_zipfile(os.path.join(ckpt, name)):
            raise UserError(f"--resume: {os.path.join(ckpt, name)} cannot be loaded: it is "
                            f"truncated or not a torch.save file; {advice}")


def load_checkpoint(ckpt: str, module: PolicyLogprobs, optimizer, scheduler, d: Dist,
                    extras=None) -> dict:
    """Restore weights, optimizer, scheduler, RNG (and `extras`, as in save_checkpoint) saved
    by save_checkpoint; return the trainer state. A value head on `module` is restored from
    value_head.pt."""
    state = read_trainer_state(ckpt)
    if state.get("world", d.world) != d.world:
        raise UserError(f"checkpoint {ckpt} was written by {state['world']} ranks; resume "
                        f"with --nproc_per_node {state['world']} (optimizer state is sharded).")
    check_checkpoint(ckpt, d.rank)
    sd = {}
    for name in sorted(os.listdir(ckpt)):
        if name.endswith(".safetensors"):
            sd.update(load_file(os.path.join(ckpt, name)))
    tied = getattr(module.lm.config, "tie_word_embeddings", False)
    if tied and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    sd = {f"lm.{k}": v for k, v in sd.items()}
    if getattr(module, "value_head", None) is not None:
        head = os.path.join(ckpt, "value_head.pt")
        if not os.path.exists(head):
            raise UserError(f"checkpoint {ckpt} has no value_head.pt: it was not written by a "
                            "policy with a value head (PPO --critic shared)")
        sd.update({f"value_head.{k}": v for k, v in torch.load(head).items()})
    set_model_state_dict(module, sd,
                         options=StateDictOptions(full_state_dict=True))
    for name, (m, _) in (extras or {}).items():
        set_model_state_dict(m, torch.load(os.path.join(ckpt, f"{name}.pt")),
                             options=StateDictOptions(full_state_dict=True))
    blob = torch.load(os.path.join(ckpt, f"rank{d.rank}.pt"), weights_only=False)
    optimizer.load_state_dict(blob["optimizer"])
    for name, (_, opt) in (extras or {}).items():
        opt.load_state_dict(blob["extras"][name])
    if scheduler is not None and blob["scheduler"] is not None:
        scheduler.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["rng"]["torch"])
    random.setstate(blob["rng"]["python"])
    return state


def warmup_cosine(optimizer, warmup: int, total: int, min_ratio: float = 0.1):
    """LR schedule: linear warm-up for `warmup` steps, then cosine decay to min_ratio."""
    def f(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def gather_objects(items: list) -> list:
    """Concatenate a Python list from every rank, in rank order (identity in a world of 1)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return list(items)
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]


def reduce_sums(sums: Mapping[str, float]) -> dict:
    """Sum each entry over ranks (keys may differ between ranks: their union, sorted)."""
    keys = sorted(set().union(*(set(k) for k in gather_objects([list(sums)]))))
    return {k: all_reduce_sum(sums.get(k, 0.0)) for k in keys}
