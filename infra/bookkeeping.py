"""A run's bookkeeping, the same for every method: memory hygiene, prompts that fit the
context, the engine's batch (which sizes the CPU engine's KV cache), the policy and its engine,
the optimizer and its schedule, the output folder (claimed before any work), resume helpers,
a step's checkpoint and metrics row, summary.json and rates.json. trainer.py calls these; a
learner may skip them. `r` is trainer.Run."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

import torch
import torch.distributed as dist

from infra.curves import plot_run
from infra.engines import make_engine
from infra.errors import UserError
from infra.evalstats import family_labels, standard_error
from infra.model import (
    Dist,
    PolicyLogprobs,
    latest_checkpoint,
    load_causal_lm,
    model_identity,
    read_trainer_state,
    save_checkpoint,
    shard_model,
    warmup_cosine,
)
from infra.samples import format_records

# oneDNN (the CPU kernels of torch and of vLLM's CPU build) keeps a compiled kernel for every
# input shape it has met, up to 1,024 by default. RL brings new sequence lengths every step, so
# on the CPU default that cache grew the trainer by ~11 MB a step (~270 MB over 20 steps) and
# never settled; 64 kernels hold a step's shapes and the trainer stays flat. A value the user
# set wins.
ONEDNN_CACHE_CAPACITY = "64"


def bound_native_memory() -> None:
    """Caps oneDNN's kernel cache (ONEDNN_CACHE_CAPACITY) for this process; read when oneDNN
    makes its first kernel, so this runs before any model computes (start)."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", ONEDNN_CACHE_CAPACITY)


def release_freed_memory() -> bool:
    """Hands the heap's free pages back to the system (glibc's malloc_trim): whether any
    went back (False without glibc: macOS, musl). A step frees what its generation and
    update allocated, but glibc keeps most of it for later: 150-250 MB a step on the CPU
    default, which the next step's peak then sits on."""
    try:
        import ctypes
        return bool(ctypes.CDLL(None).malloc_trim(0))
    except (OSError, AttributeError):       # not glibc (macOS, musl)
        return False


# A prompt longer than this many UTF-8 bytes a context position is dropped without being
# tokenized (English averages about 4 a token; tokenizing a 10 MB statement takes ~20 s).
MAX_BYTES_PER_TOKEN = 16


def prompt_budget(config, *, max_model_len: int | None, max_new_tokens: int) -> int | None:
    """Tokens a prompt may take: the context (max_model_len, else the model config's
    positions) less max_new_tokens; None when neither names a context length."""
    context = max_model_len or getattr(config, "max_position_embeddings", None)
    if context is None:
        return None
    if context <= max_new_tokens:
        raise UserError(f"--max-new-tokens {max_new_tokens} leaves no room for a prompt "
                        f"in the model's context of {context} positions; lower it")
    return context - max_new_tokens


def fitting_prompts(problems: list, texts: list[str], tokenizer, budget: int | None,
                    what: str) -> list:
    """The problems whose prompt (texts[i], problem i's) takes at most `budget` tokens; the
    others are counted in one line on stderr, as the loaders count their bad rows. Fed
    whole, a 10 MB statement asks a 1,024-position model for an 8 GB attention matrix.
    A prompt of fewer UTF-8 bytes than the budget fits (a token covers at least one byte;
    one position spared for a BOS token); one of more than MAX_BYTES_PER_TOKEN bytes a
    position does not, untokenized; the rest are tokenized."""
    if budget is None:
        return problems
    kept = []
    for p, text in zip(problems, texts):
        size = len(text.encode("utf-8"))
        if size < budget or (size <= budget * MAX_BYTES_PER_TOKEN
                             and len(tokenizer(text)["input_ids"]) <= budget):
            kept.append(p)
    if len(kept) < len(problems):
        print(f"[data] {what}: dropped {len(problems) - len(kept)} of {len(problems)} problems "
              f"whose prompt is over {budget} tokens (the context less --max-new-tokens)",
              file=sys.stderr, flush=True)
    return kept


def train_eval_set(train: list, evals: list, n: int) -> list:
    """The train problems evaluated beside the held-out ones (--train-eval-problems n): a
    fixed random sample of n (seed 0, kept in train order). Not every len/n-th problem: with
    world/tasks.py's six interleaved families, every 10th of 960 is only ever families 0, 2 and 4.
    n < 0: as many as the eval set when that is a different set, none when train = eval (the
    figure would be the same)."""
    if n < 0:
        n = 0 if evals is train else len(evals)
    n = min(n, len(train))
    return [train[i] for i in sorted(random.Random(0).sample(range(len(train)), n))]


def policy_and_engine(args, d: Dist, path: str, value_head: bool = False,
                      batch: Mapping | None = None):
    """The FSDP-sharded policy and its generation engine.
    value_head: give the policy a model.ValueHead inside its FSDP root (PPO's shared critic).
    batch: engine_batch's, what one generate call hands the engine at most, which sizes the
    CPU engine's KV cache unless --engine-kv-cache-gib does (None: any prompt, up to
    engines.CPU_MAX_SEQS sequences of the whole context)."""
    # The engine first: on GPU vLLM checks at start-up that its share of memory is free.
    # each rank its own seed, within the 32 bits numpy (inside vLLM) takes
    engine = make_engine(args.engine, path, d.device, seed=(args.seed + d.rank) % 2**32,
                         tensor_parallel_size=args.engine_tp,
                         gpu_memory_utilization=args.engine_mem, sleep_level=args.sleep_level,
                         max_model_len=args.max_model_len,
                         kv_cache_gib=args.engine_kv_cache_gib, **(batch or {}))
    policy = shard_model(PolicyLogprobs(load_causal_lm(path, d.device), args.logprob_chunk,
                                        value_head=value_head),
                         d.device, args.grad_checkpointing)
    return policy, engine


def engine_batch(d: Dist, prompt_tokens: int, evaluations: Sequence[tuple[int, int]] = (), *,
                 prompts_per_step: int, group_size: int, max_new_tokens: int) -> dict:
    """The most one generate call hands this rank's engine (engines.VLLMEngine's keywords):
    batch_sequences, a step's prompts_per_step x group_size or an evaluation's problems x
    samples (evaluations: (problems, samples) pairs), whichever is more, each rank its share;
    batch_tokens, the longest prompt (prompt_tokens) + max_new_tokens."""
    step = max(1, prompts_per_step // d.world) * group_size
    evaluation = max((-(-p // d.world) * n for p, n in evaluations), default=0)
    return dict(batch_sequences=max(step, evaluation),
                batch_tokens=prompt_tokens + max_new_tokens)


def longest_prompt(texts: Sequence[str], tokenizer) -> int:
    """Tokens in the longest of `texts` (0 for none)."""
    if not texts:
        return 0
    return max(len(ids) for ids in tokenizer(list(texts))["input_ids"])


def policy_optimizer(policy: PolicyLogprobs, *, lr: float, weight_decay: float,
                     warmup_steps: int, steps: int, min_lr_ratio: float,
                     head_lr: float | None = None):
    """The policy's AdamW (betas 0.9, 0.99) and its schedule over `steps` optimizer steps:
    linear warm-up from 0 to lr over warmup_steps, then cosine down to min_lr_ratio * lr.
    A value head (PPO's shared critic) is its own param group at head_lr, kept constant."""
    head = list(policy.value_head.parameters()) if policy.value_head is not None else []
    head_ids = {id(p) for p in head}
    groups = [{"params": [p for p in policy.parameters() if id(p) not in head_ids],
               "lr": lr}]
    if head:
        groups.append({"params": head, "lr": head_lr})
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay)
    scheduler = warmup_cosine(optimizer, warmup_steps, steps, min_lr_ratio)
    if head:   # the schedule for the body, constant for the head (initial lrs are kept)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, [scheduler.lr_lambdas[0], _constant_lr])
    return optimizer, scheduler


def _constant_lr(step):
    return 1.0


class NoOptimizer:
    """Stands in for a frozen module's optimizer (the reference) in checkpoint extras."""

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


# What a run writes into --out (step_N: its checkpoints; .tmp / .old: one being replaced).
RUN_FILES = ("metrics.jsonl", "summary.json", "rates.json", "latest", "tensorboard", "wandb",
             "samples.jsonl", "curves.png")


CHECKPOINT_DIR = re.compile(r"step_\d+(\.tmp|\.old)?")


def earlier_run(out: str) -> list[str]:
    """The names of what an earlier run left in `out`, sorted ([] when none)."""
    if not os.path.isdir(out):
        return []
    return sorted(n for n in os.listdir(out) if n in RUN_FILES or CHECKPOINT_DIR.fullmatch(n))


def claim_out_dir(out: str, *, resume: bool, overwrite: bool, main: bool,
                  method: str | None = None, model: str | None = None) -> None:
    """--out checked before any work, each mistake a UserError: a path no run can write; a
    checkpoint that `resume` would continue written by another method or from another model
    (check_resumed_run; method, model: this run's, None: not checked); an earlier run there
    that this one would overwrite (its checkpoints, summary, and rows appended to its
    metrics.jsonl), unless `resume` continues it from a checkpoint or `overwrite` replaces it;
    another run still writing there. The main rank (main) then holds the folder's lock to the
    end of the run (lock_out_dir; the only file a refused run may leave) and, with
    `overwrite`, removes the earlier run's files."""
    problem = output_dir_problem(out)
    if problem:
        raise UserError(problem)
    if resume:
        check_resumed_run(out, method, model)
    found = earlier_run(out)
    shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
    if found and resume and latest_checkpoint(out) is None:
        raise UserError(f"--resume: {out} holds an earlier run ({shown}) but no "
                        "checkpoint to continue from (--save-every N writes them); pass "
                        "--overwrite instead to start again there, or a new --out")
    if found and not resume and not overwrite:
        raise UserError(f"--out {out} holds an earlier run ({shown}); continue it with "
                        "--resume, write to a new --out, or pass --overwrite to replace it")
    if not main:
        return
    lock_out_dir(out)   # before the removal: a run still writing there keeps its files
    for name in found if overwrite else ():
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def check_resumed_run(out: str, method: str | None, model: str | None) -> None:
    """UserError when the checkpoint --resume would continue in `out` was written by another
    method (grpo, ppo, agents: trainer.start's names) or from another model than `model` (the
    --model flag, compared as model_identity). Nothing is written before this check. A
    checkpoint that records neither is not checked."""
    ckpt = latest_checkpoint(out)
    state = read_trainer_state(ckpt) if ckpt is not None else {}
    if method is not None and state.get("method", method) != method:
        raise UserError(f"--resume: {ckpt} holds a {state['method']} run and this run is "
                        f"{method}; continue it with {state['method']}'s script, or pass a new "
                        "--out")
    if model is not None and state.get("model", model_identity(model)) != model_identity(model):
        raise UserError(f"--resume: {ckpt} was trained from --model {state['model']} and this "
                        f"run names --model {model}; resume with --model {state['model']}, or "
                        "pass a new --out")


# The lock each run holds on its --out: taken with flock, so the kernel releases it when the
# process ends, however it ends (a crashed run leaves no lock behind, only the file).
LOCK_FILE = "run.lock"
_held_locks: dict[str, int] = {}   # --out (real path) -> the lock file this process holds


def lock_out_dir(out: str) -> None:
    """Create `out` and take its lock for this process (released by release_out_dir, or when
    the process ends); UserError when another process holds it: two runs started together into
    one --out would interleave one metrics.jsonl and overwrite each other's checkpoints."""
    os.makedirs(out, exist_ok=True)
    release_out_dir(out)   # this process's earlier run there (a test runs several in turn)
    fd = os.open(os.path.join(out, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip()
        os.close(fd)
        raise UserError(f"--out {out} is in use by another run (process {holder or '?'}); "
                        "wait for it to end, or pass another --out") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held_locks[os.path.realpath(out)] = fd


def release_out_dir(out: str) -> None:
    """Give up this process's lock on `out` (lock_out_dir); nothing when it holds none."""
    fd = _held_locks.pop(os.path.realpath(out), None)
    if fd is not None:
        os.close(fd)


def rng_state_from_json(x):
    """JSON turns random.getstate()'s tuples into lists; setstate wants tuples back."""
    return tuple(rng_state_from_json(v) for v in x) if isinstance(x, list) else x


def before_after_line(summary: dict, prefix: str = "") -> str | None:
    """'pass@1 0.300 +- 0.010 -> 0.420 +- 0.011, gain +0.120 +- 0.008 (paired)' from a
    summary's pass_at_1_* keys with that prefix; None when either side is missing."""
    def fig(when):
        v, se = summary.get(f"{prefix}pass_at_1_{when}"), summary.get(
            f"{prefix}pass_at_1_se_{when}")
        return None if v is None else f"{v:.3f}" + ("" if se is None else f" +- {se:.3f}")
    before, after = fig("before_rl"), fig("after_rl")
    if before is None or after is None:
        return None
    gain = summary[f"{prefix}pass_at_1_gain"]
    se = summary.get(f"{prefix}pass_at_1_gain_se")
    return (f"pass@1 {before} -> {after}, gain {gain:+.3f}"
            + ("" if se is None else f" +- {se:.3f} (paired)"))


def output_dir_problem(path: str) -> str | None:
    """Why `path` cannot become an output directory (None: it can): it, or a folder above it,
    is a file; or the nearest existing folder takes no new file (no permission, a read-only
    file system). Tried with a nameless file, since os.access says yes to root."""
    if os.path.exists(path) and not os.path.isdir(path):
        return f"--out {path!r} exists and is not a directory"
    parent = path
    while not os.path.exists(parent):
        parent = os.path.dirname(parent) or "."
    if not os.path.isdir(parent):
        return f"--out {path!r}: {parent!r} is a file, not a directory"
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        return f"--out {path!r}: cannot write in {parent!r} ({e.strerror})"
    return None


def save_step(r, step: int) -> None:
    """Checkpoint after `step` when --save-every asks (every N steps, step 0 and the last),
    with the data position (rng) and the curriculum's state in trainer_state.json."""
    a = r.args
    if not a.save_every or (step % a.save_every and step != a.steps):
        return
    r.state.update(rng=r.rng.getstate())
    if r.curriculum is not None:
        r.state["curriculum"] = r.curriculum.state_dict()
    # what --resume checks before it continues the run (check_resumed_run)
    state = {**r.state, "method": r.name, "model": model_identity(a.model)}
    try:
        save_checkpoint(a.out, step, r.policy, r.tokenizer, r.optimizer, r.scheduler, state,
                        r.d, extras=r.checkpoint_modules())
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        shutil.rmtree(os.path.join(a.out, f"step_{step}.tmp"), ignore_errors=True)
        raise UserError(f"--out {a.out}: the disk is full ({e.strerror}) while writing the "
                        f"checkpoint of step {step}; {last_whole_checkpoint(a.out)}") from None


def last_whole_checkpoint(out: str) -> str:
    """Where a run stopped by a full disk can continue: the checkpoint `out`/latest names."""
    try:
        with open(os.path.join(out, "latest")) as f:
            name = f.read().strip()
    except OSError:
        name = ""
    if not name or not os.path.isdir(os.path.join(out, name)):
        return "no whole checkpoint was written before it: free some space and start again"
    return (f"the last whole checkpoint is {os.path.join(out, name)}: free some space and "
            "continue from it with --resume")


def finish(r) -> dict:
    """summary.json: pass@1 before / after RL and their gain, wall time, model, seed, steps;
    curves.png from metrics.jsonl (infra.curves), its path the run's last line."""
    r.engine.close()        # vLLM's teardown also ends the process group it joined
    a = r.args
    summary = {k: v for k, v in r.state.items() if k not in ("rng", "curriculum", "train_ids",
                                                              "step", "world", "method")
               and not k.startswith(("rates_", "train_rates_"))}
    summary.update(wall_seconds=round(time.time() - r.t0, 1), model=a.model, seed=a.seed,
                   steps=a.steps)
    for prefix in ("", "train_"):
        before, after = r.state.get(f"{prefix}rates_before_rl"), r.state.get(
            f"{prefix}rates_after_rl")
        if f"{prefix}pass_at_1_before_rl" in summary and f"{prefix}pass_at_1_after_rl" in summary:
            summary[f"{prefix}pass_at_1_gain"] = (summary[f"{prefix}pass_at_1_after_rl"]
                                                  - summary[f"{prefix}pass_at_1_before_rl"])
        if before and after:   # paired: the same problems before and after
            ids = [i for i in before if i in after]
            problems = r.train_eval_problems if prefix else r.eval_problems
            summary[f"{prefix}pass_at_1_gain_se"] = standard_error(
                [after[i] - before[i] for i in ids], family_labels(problems, ids))
    if r.d.main:
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
        # Per-problem solved shares {when: {problem id: share}}: paired comparisons between
        # runs, and pass@k for every k <= --eval-n (from share * n solved samples).
        with open(os.path.join(a.out, "rates.json"), "w") as f:
            json.dump({k: v for k, v in r.state.items()
                       if k.startswith(("rates_", "train_rates_"))}, f)
        for prefix, name in (("", "held out"), ("train_", "train")):
            line = before_after_line(summary, prefix)
            if line:
                r.say(f"{name}: {line}")
        r.say(f"summary: {json.dumps(summary)}  -> {a.out}/summary.json")
        r.say(plot_run(a.out))    # curves.png from metrics.jsonl: the run's last line
    r.log.close()
    if dist.is_initialized():
        dist.barrier()
    release_out_dir(a.out)
    return summary


def log_step(r, i: int, metrics: dict) -> None:
    """After RL step i: the metrics row (phase, step, the step's metrics, lr, the seconds of
    its timed phases and time/step, the whole step's, the curriculum's stats) to
    metrics.jsonl; run.step = i + 1."""
    seconds = round(time.perf_counter() - r.step_started, 3)
    row = {"phase": "rl", "step": i + 1, **metrics, "lr": r.scheduler.get_last_lr()[0],
           **r.timer.pop(), "time/step": seconds,
           **(r.curriculum.stats() if r.curriculum else {})}
    r.log(row)
    if r.curriculum is not None:     # written whether or not samples are (SampleLog)
        r.sample_log.state(i + 1, r.curriculum.changed_state())
    if r.bar is not None:
        r.bar.set_postfix(reward=f"{row.get('reward_mean', 0):.3f}",
                          pass_rate=f"{row.get('pass_rate', 0):.2f}")
    r.step = i + 1


def log_samples(r, step: int, phase: str, records: list[dict],
                when: str | None = None) -> None:
    """A step's or an evaluation's sample records (infra.samples.sample_records, agents'
    candidate_records) into samples.jsonl, and as text to --report-to's TensorBoard / W&B
    (tag samples/<phase>)."""
    written = r.sample_log.write(step, phase, records, when)
    if written:
        r.log.text(f"samples/{phase}", format_records(written), step)
