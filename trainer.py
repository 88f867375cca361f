"""A run's life, the same for every method: set-up, warm start, the RL steps' bookkeeping
(rl_steps / end_step / end_run), checkpoints and resume, and the summary.

grpo.py, ppo_fgo.py and agents.py hold their method's loop and step, losses.py their math; the
pieces the loops call live here and in four modules beside it:

    actor.py     the policy side of a step: Sample / Batch, forward, update / updates, score,
                 the SFT warm start (its docstring: the update protocol, the sequence layout)
    rollouts.py  drawing a step's problems, generate_and_score (rollouts + sandbox rewards),
                 rollout sums and cross-rank reductions, evaluate (pass@k)
    metrics.py   Timer, MetricsLog (metrics.jsonl, TensorBoard / W&B), progress bars
    flags.py     the common flags and presets, flag checks, entry_point (one-line user errors)

A method's train() (grpo.train, ppo_fgo.train, agents.train), in order:

    flags          flags.add_common_flags(parser) + the method's own group; flags.parse_flags()
                   merges the presets (merge_presets) and lets explicit flags override them
    start()        process group, seeds, problems, the FSDP2 policy and its engine
    prepare_run()  the checkpoint to resume, or: SFT warm start, pass@k before RL
                   (evaluate_run), the offline filter; the curriculum (CCCS / DRIVE's hard
                   focus). agents.py calls checkpoint_to_resume and its own warm start and
                   evaluation instead
    optimizers     the method's own: policy_optimizer (and its reference, critic), made from
                   the warm-started policy
    first_step()   the step-0 checkpoint, or the resume (which restores those optimizers)
    the steps      for i in rl_steps(run): the method's own step, calling rollouts.draw_batch,
                   rollouts.generate_and_score (rollouts + sandbox rewards), run.score
                   (actor.score: no-grad log-probs, reference, values) and
                   actor.update_and_sync (optimizer steps, schedule, weight sync);
                   end_step(run, i, metrics): the metrics row (log_step), the held-out
                   curve (eval_due: --eval-every), a checkpoint (save_step: --save-every)
    end_run()      pass@k after RL (evaluate_run), summary.json and curves.png (finish)
agents.py, with its own evaluation, calls end_step's and end_run's pieces itself (log_step,
eval_due, save_step; keep_eval, finish).
main() is `with flags.entry_point(): train(parse_args(argv))`. The helpers take what they
read by keyword; flags.py maps the flags onto them (flags.sampling, flags.evaluation, ...).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from transformers import AutoConfig

import cccs
import data
import drive
import flags
from actor import Sample, Scores, score, sft, sft_examples, sync_weights
from engines import make_engine
from infra.curves import plot_run
from infra.samples import SampleLog, format_records
from metrics import MetricsLog, Timer, progress, report_to_list
from model import (
    Dist,
    PolicyLogprobs,
    UserError,
    ValueModel,
    attention_impl,
    init_distributed,
    latest_checkpoint,
    load_causal_lm,
    load_checkpoint,
    load_tokenizer,
    read_trainer_state,
    resolve_model,
    save_checkpoint,
    seed_everything,
    shard_model,
    warmup_cosine,
)
from rollouts import evaluate, family_labels, prompt_text, sample_records, standard_error

# ----------------------------------------------------------------------------- set-up

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


def load_problem_sets(args):
    """Train and eval problems from --train-data / --eval-data (NAME or NAME:PATH[,...])."""
    def load(spec, split):
        out = []
        for part in spec.split(","):
            name, _, path = part.partition(":")
            out += data.load_problems(name, split=split, path=path or None)
        return out
    train = load(args.train_data, "train")
    evals = train if args.eval_data == args.train_data else load(args.eval_data, "test")
    # --max-eval-problems unset: the eval set is cut as the train set is (the old behaviour,
    # and what a quick smoke run wants); set it to train on a few problems and still score on
    # the whole held-out split.
    n_eval = args.max_problems if args.max_eval_problems is None else args.max_eval_problems
    same = evals is train            # train = eval stays one list (train_eval_set checks it)
    if args.max_problems:
        train = train[:args.max_problems]
    if same and n_eval == args.max_problems:
        evals = train
    elif n_eval:
        evals = evals[:n_eval]
    check_problem_sets(args, train, evals)
    return train, evals


def check_problem_sets(args, train: list, evals: list) -> None:
    """UserError when no train problem (or, with evaluation, no eval problem) is left."""
    if not train:
        raise UserError(f"--train-data {args.train_data}: gave no problems with tests (check "
                        "the file's format: data.py's docstring lists the fields per source; "
                        "the [data] lines above count what was dropped and why)")
    if not evals and args.eval_n > 0:
        raise UserError(f"--eval-data {args.eval_data}: gave no problems with tests (check the "
                        "file's format, or pass --eval-n 0 to train without evaluation)")


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


def fitting_prompts(problems: list, tokenizer, budget: int | None, what: str) -> list:
    """The problems whose coder prompt takes at most `budget` tokens; the others are counted
    in one line on stderr, as data.load_problems counts its bad rows. Fed whole, a 10 MB
    statement asks a 1,024-position model for an 8 GB attention matrix.
    A prompt of fewer UTF-8 bytes than the budget fits (a token covers at least one byte;
    one position spared for a BOS token); one of more than MAX_BYTES_PER_TOKEN bytes a
    position does not, untokenized; the rest are tokenized."""
    if budget is None:
        return problems
    kept = []
    for p in problems:
        text = prompt_text(tokenizer, p)
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
    tasks.py's six interleaved families, every 10th of 960 is only ever families 0, 2 and 4.
    n < 0: as many as the eval set when that is a different set, none when train = eval (the
    figure would be the same)."""
    if n < 0:
        n = 0 if evals is train else len(evals)
    n = min(n, len(train))
    return [train[i] for i in sorted(random.Random(0).sample(range(len(train)), n))]


def model_files(args, d: Dist):
    """The model's path (resolve_model) and its tokenizer; on CPU, --cpu-threads set first."""
    if d.device.type == "cpu" and args.cpu_threads > 0:
        # 0 leaves torch's own choice. Under load, tiny models are overhead-bound and extra
        # threads only fight the other processes (the sandbox's workers, a second training).
        torch.set_num_threads(args.cpu_threads)
    path = resolve_model(args.model, seed=args.model_seed)
    return path, load_tokenizer(path)


def policy_and_engine(args, d: Dist, path: str, value_head: bool = False,
                      batch: Mapping | None = None):
    """The FSDP-sharded policy and its generation engine.
    value_head: give the policy a model.ValueHead inside its FSDP root (PPO's shared critic).
    batch: engine_batch's, what one generate call hands the engine at most, which sizes the
    CPU engine's KV cache unless --engine-kv-cache-gib does (None: any prompt, up to
    engines.CPU_MAX_SEQS sequences of the whole context)."""
    # The engine first: on GPU vLLM checks at start-up that its share of memory is free.
    engine = make_engine(args.engine, path, d.device, seed=args.seed + d.rank,
                         tensor_parallel_size=args.engine_tp,
                         gpu_memory_utilization=args.engine_mem, sleep_level=args.sleep_level,
                         max_model_len=args.max_model_len,
                         kv_cache_gib=args.engine_kv_cache_gib, **(batch or {}))
    policy = shard_model(PolicyLogprobs(load_causal_lm(path, d.device), args.logprob_chunk,
                                        value_head=value_head),
                         d.device, args.grad_checkpointing)
    return policy, engine


def setup_policy(args, d: Dist, value_head: bool = False):
    """Model path, tokenizer, FSDP-sharded policy and its generation engine, for prompts of
    any length (policy_and_engine)."""
    path, tokenizer = model_files(args, d)
    return (path, tokenizer, *policy_and_engine(args, d, path, value_head))


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


def longest_prompt(problems: Sequence, tokenizer, with_solution: bool = False) -> int:
    """Tokens in the longest coder prompt (rollouts.prompt_text) of `problems`; with_solution:
    opened with the problem's reference solution, which bounds a CCCS prefix (cccs.py)."""
    if not problems:
        return 0
    texts = [prompt_text(tokenizer, p, p.solutions[0] if with_solution and p.solutions else "")
             for p in problems]
    return max(len(ids) for ids in tokenizer(texts)["input_ids"])


def rollout_batch(d: Dist, tokenizer, train: list, evals: list, train_evals: list, same: bool,
                  *, cccs: bool, eval_n: int, train_rates: bool, **step) -> dict:
    """engine_batch for GRPO's and PPO's engine: the longest coder prompt of the train
    problems (opened with a CCCS prefix when cccs) and of the eval problems; the evaluations
    before and after RL (eval_n samples of the eval set or of the train sample beside it)
    and, with train_rates (--offline-filter, --hard-focus), the train set's solve rates.
    step: engine_batch's keywords (prompts_per_step, group_size, max_new_tokens)."""
    longest = max(longest_prompt(train, tokenizer, cccs),
                  longest_prompt([] if same else evals, tokenizer))
    evaluations = [(max(len(evals), len(train_evals)), eval_n)]
    if train_rates:
        evaluations.append((len(train), max(eval_n, 4)))   # select_problems' evaluate
    return engine_batch(d, longest, evaluations, **step)


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


# ----------------------------------------------------------------------------- curricula

class Curriculum:
    """Which prompts the policy sees, and how: StepCoder's CCCS (cccs.py), DRIVE's hard focus
    (drive.py), or both. What the methods' rollouts consult:
        pool(problems, step) -> problems to sample from at RL step `step` (0-based)
        prefix(problem)      -> CCCS prefix of its current stage ("" = the whole program)
        update(pid, rewards) -> once per group, the group's rewards (binary or fraction)
        stats()              -> flat dict for metrics.jsonl
        state_dict() / load_state_dict(state)  -> JSON for trainer_state.json

    The rewards of every group feed both the CCCS averages and the pass-rate tracker that
    ranks problems at each hard-focus phase. Steps past the hard-focus schedule keep its last
    phase (so --steps larger than the schedule trains longer on the hardest set).
    """

    def __init__(self, cccs_schedule: cccs.CCCSSchedule | None = None,
                 hard_focus: drive.HardFocusSchedule | None = None,
                 tracker: drive.PassRateTracker | None = None):
        self.cccs, self.hard_focus = cccs_schedule, hard_focus
        self.tracker = tracker if tracker is not None else drive.PassRateTracker()
        self.changed: dict = {}      # problem ids updated since the last changed_state()

    def pool(self, problems: Sequence, step: int) -> list:
        if self.hard_focus is None:
            return list(problems)
        step = min(step, self.hard_focus.total_steps - 1)  # past the end: keep the last phase
        keep = set(self.hard_focus.problems(step, self.tracker.rates))
        # Order of `problems`; if a filter removed every kept problem, fall back to all.
        return [p for p in problems if p.id in keep] or list(problems)

    def prefix(self, problem) -> str:
        if self.cccs is None or problem.id not in self.cccs.stage:
            return ""  # no canonical solution: the ordinary task
        return self.cccs.subtask(problem.id)[0]

    def stage(self, problem) -> str | None:
        """The problem's CCCS stage as stats() counts it ("final", "final-1", ...); None
        without CCCS or a canonical solution."""
        if self.cccs is None or problem.id not in self.cccs.stage:
            return None
        return stage_name(self.cccs, problem.id)

    def update(self, pid, rewards: Iterable[float]) -> None:
        rewards = list(rewards)
        self.tracker.update(pid, rewards)
        if self.cccs is not None and pid in self.cccs.stage:
            self.cccs.update(pid, rewards)
        self.changed[pid] = None

    def changed_state(self) -> dict:
        """The state of the problems updated since the last call, for the samples file:
        {"problems": [{"problem", "pass_rate" (the tracker's), and with CCCS "stage",
        "start_line", "average" (the moving average the threshold is compared with, None
        just after a move), "updates" (at this stage)}]}, and with a hard focus
        {"hard_focus": {"phase" (1-based), "pool" (the kept ids)}}; {} when nothing changed."""
        out: dict = {}
        problems = []
        for pid in self.changed:
            row = {"problem": pid, "pass_rate": self.tracker.rates.get(pid)}
            if self.cccs is not None and pid in self.cccs.stage:
                row.update(stage=stage_name(self.cccs, pid),
                           start_line=self.cccs.start_line(pid),
                           average=self.cccs.moving_average(pid),
                           updates=len(self.cccs.history[pid]))
            problems.append(row)
        if problems:
            out["problems"] = problems
        if self.hard_focus is not None and self.hard_focus.phase_index >= 0:
            out["hard_focus"] = {"phase": self.hard_focus.phase_index + 1,
                                 "pool": list(self.hard_focus.kept)}
        self.changed = {}
        return out

    def stats(self) -> dict:
        """cccs_<stage>: problems per stage ("final", "final-1", ...), cccs_final_share:
        share of CCCS problems writing whole programs; hf_phase (1-based), hf_pool."""
        out: dict = {}
        if self.cccs is not None:
            counts = self.cccs.stage_counts()
            out.update({f"cccs_{k}": v for k, v in counts.items()})
            out["cccs_final_share"] = counts.get("final", 0) / max(len(self.cccs.stage), 1)
        if self.hard_focus is not None:
            out["hf_phase"] = self.hard_focus.phase_index + 1
            out["hf_pool"] = len(self.hard_focus.kept)
            known = [self.tracker.rates[p] for p in self.hard_focus.kept if p in self.tracker.rates]
            if known:
                out["hf_pool_pass_rate"] = sum(known) / len(known)
        return out

    def state_dict(self) -> dict:
        return {"cccs": self.cccs.state_dict() if self.cccs is not None else None,
                "hard_focus": self.hard_focus.state_dict() if self.hard_focus is not None
                else None,
                "tracker": self.tracker.state_dict()}

    def load_state_dict(self, state: Mapping) -> None:
        """Restore the parts this run has; a part the checkpoint lacks starts fresh."""
        if self.cccs is not None and state.get("cccs"):
            self.cccs.load_state_dict(state["cccs"])
        if self.hard_focus is not None and state.get("hard_focus"):
            self.hard_focus.load_state_dict(state["hard_focus"])
        if state.get("tracker"):
            self.tracker.load_state_dict(state["tracker"])


def stage_name(schedule: cccs.CCCSSchedule, pid) -> str:
    """A problem's stage counted from the end, as CCCSSchedule.stage_counts names it."""
    left = len(schedule.starts[pid]) - 1 - schedule.stage[pid]
    return "final" if left == 0 else f"final-{left}"


def make_curriculum(problems: Sequence, rates: Mapping, *, curriculum: str,
                    cccs_threshold: float, cccs_average: str, cccs_span: int, cccs_loops: bool,
                    hard_focus: str) -> Curriculum | None:
    """curriculum "cccs" and/or a hard_focus schedule -> Curriculum (None when neither is on).

    cccs_*: cccs.CCCSSchedule's threshold, average, span, include_loops; hard_focus: the
    KEEP:STEPS phases (drive.parse_hard_focus), "" for none.
    problems: the train problems (data.Problem); CCCS uses each one's first solution.
    rates: {problem id: solved share under the starting policy}; seeds the pass-rate tracker
    so the first hard-focus phase ranks by it (ids not in `problems` are ignored).
    """
    if curriculum == "none" and not hard_focus:
        return None
    sched = None
    if curriculum == "cccs":
        sched = cccs.CCCSSchedule({p.id: p.solutions[0] for p in problems if p.solutions},
                                  threshold=cccs_threshold, average=cccs_average,
                                  span=cccs_span, include_loops=cccs_loops)
    hf = None
    if hard_focus:
        try:
            phases = drive.parse_hard_focus(hard_focus)
        except ValueError as e:
            raise UserError(str(e)) from None
        hf = drive.HardFocusSchedule(phases, [p.id for p in problems])
    ids = {p.id for p in problems}
    tracker = drive.PassRateTracker()
    tracker.rates = {pid: float(r) for pid, r in rates.items() if pid in ids}
    return Curriculum(sched, hf, tracker)


# ----------------------------------------------------------------------------- the run

@dataclass
class Run:
    """What a method's loop works with: start() fills it in the order of its fields, the
    method its optimizers (and reference, critic), first_step the rest."""
    name: str                          # "grpo", "ppo": log prefix, progress label
    args: argparse.Namespace
    d: Dist
    log: MetricsLog
    model_path: str
    tokenizer: object
    policy: PolicyLogprobs             # FSDP2-sharded, what the optimizer trains
    engine: object                     # generation (engines.py), synced after each update
    train_problems: list
    eval_problems: list                # held out when --eval-data differs from --train-data
    t0: float                          # wall clock at the start
    train_eval_problems: list = field(default_factory=list)  # --train-eval-problems
    step: int = 0                      # RL steps done (what an evaluation row is logged at)
    state: dict = field(default_factory=dict)   # trainer_state.json; the summary's source
    curriculum: Curriculum | None = None
    optimizer: torch.optim.Optimizer | None = None   # the method makes these four
    scheduler: object = None
    ref: PolicyLogprobs | None = None            # frozen reference (KL), when build asks
    critic: ValueModel | None = None             # separate critic (PPO)
    critic_optimizer: torch.optim.Optimizer | None = None
    rng: random.Random | None = None             # data order and sampling seeds of RL
    extras: dict = field(default_factory=dict)   # more {name: (module, optimizer)} to checkpoint
    timer: Timer = field(default_factory=Timer)
    bar: object = None                           # rl_steps' progress bar
    step_started: float = 0.0                    # rl_steps' clock at the current step's start
    summary: dict | None = None                  # set once finished (--eval-only: early)
    sample_log: SampleLog = field(default_factory=lambda: SampleLog("", 0))  # --log-samples

    def say(self, msg: str) -> None:
        if self.d.main:
            print(f"[{self.name}] {msg}", flush=True)

    def update_settings(self) -> dict:
        """updates()'s keyword arguments from the run's flags (--epochs, --mini-batches,
        --micro-batch, ...)."""
        a = self.args
        return dict(epochs=a.epochs, mini_batches=a.mini_batches, micro_batch=a.micro_batch,
                    agg=a.agg, max_len=a.max_new_tokens, pad_id=self.tokenizer.pad_token_id,
                    device=self.d.device, max_grad_norm=a.max_grad_norm,
                    temperature=a.temperature)

    def score(self, samples: list[Sample], *, policy=None, ref=None, forward_fn=None,
              with_values: bool = False) -> Scores:
        """score() with the run's micro-batch, padding, device and temperature."""
        return score(samples, micro_batch=self.args.micro_batch,
                     pad_id=self.tokenizer.pad_token_id, device=self.d.device,
                     temperature=self.args.temperature, policy=policy, ref=ref,
                     forward_fn=forward_fn, with_values=with_values)

    def checkpoint_modules(self) -> dict:
        """Saved beside the policy in every checkpoint: the critic, the reference, extras."""
        out = dict(self.extras)
        if self.critic is not None:
            out["critic"] = (self.critic, self.critic_optimizer)
        if self.ref is not None:
            out["ref"] = (self.ref, NoOptimizer())
        return out


# What a run writes into --out (step_N: its checkpoints; .tmp / .old: one being replaced).
RUN_FILES = ("metrics.jsonl", "summary.json", "rates.json", "latest", "tensorboard", "wandb",
             "samples.jsonl", "curves.png")
CHECKPOINT_DIR = re.compile(r"step_\d+(\.tmp|\.old)?")


def earlier_run(out: str) -> list[str]:
    """The names of what an earlier run left in `out`, sorted ([] when none)."""
    if not os.path.isdir(out):
        return []
    return sorted(n for n in os.listdir(out) if n in RUN_FILES or CHECKPOINT_DIR.fullmatch(n))


def claim_out_dir(out: str, *, resume: bool, overwrite: bool, main: bool) -> None:
    """--out checked before any work, each mistake a UserError: a path no run can write; an
    earlier run there that this one would overwrite (its checkpoints, summary, and rows
    appended to its metrics.jsonl), unless `resume` continues it from a checkpoint or
    `overwrite` replaces it, whose files the main rank (main) then removes."""
    problem = data.output_dir_problem(out)
    if problem:
        raise UserError(problem)
    found = earlier_run(out)
    if not found:
        return
    shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
    if resume and latest_checkpoint(out) is None:
        raise UserError(f"--resume: {out} holds an earlier run ({shown}) but no "
                        "checkpoint to continue from (--save-every N writes them); pass "
                        "--overwrite instead to start again there, or a new --out")
    if not resume and not overwrite:
        raise UserError(f"--out {out} holds an earlier run ({shown}); continue it with "
                        "--resume, write to a new --out, or pass --overwrite to replace it")
    if overwrite and main:
        for name in found:
            path = os.path.join(out, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.remove(path)


def start(args, name: str, value_head: bool = False, coder_prompts: bool = False) -> Run:
    """Process group, output dir (claim_out_dir: checked before any work), seeds, metrics,
    problems less those whose prompt the context cannot hold (fitting_prompts), policy and
    engine. coder_prompts: the engine only ever sees the problems' coder prompts (GRPO, PPO),
    so the CPU engine's KV cache is sized to the longest of them and the step (engine_batch);
    else (agents.py's conversations) to prompts of any length."""
    t0 = time.time()
    bound_native_memory()
    d = init_distributed()
    claim_out_dir(args.out, resume=args.resume, overwrite=args.overwrite, main=d.main)
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = MetricsLog(args.out, d.main, report_to_list(args.report_to), vars(args), name)
    train_p, eval_p = load_problem_sets(args)
    path, tokenizer = model_files(args, d)
    same = eval_p is train_p
    budget = prompt_budget(AutoConfig.from_pretrained(path), max_model_len=args.max_model_len,
                           max_new_tokens=args.max_new_tokens)
    train_p = fitting_prompts(train_p, tokenizer, budget, "--train-data")
    eval_p = train_p if same else fitting_prompts(eval_p, tokenizer, budget, "--eval-data")
    check_problem_sets(args, train_p, eval_p)
    train_eval_p = train_eval_set(train_p, eval_p, args.train_eval_problems)
    batch = None
    if coder_prompts and d.device.type == "cpu":   # only the CPU engine sizes its cache
        batch = rollout_batch(d, tokenizer, train_p, eval_p, train_eval_p, same,
                              cccs=args.curriculum == "cccs", eval_n=args.eval_n,
                              train_rates=bool(args.offline_filter or args.hard_focus),
                              prompts_per_step=args.prompts_per_step,
                              group_size=args.group_size, max_new_tokens=args.max_new_tokens)
    policy, engine = policy_and_engine(args, d, path, value_head, batch)
    r = Run(name, args, d, log, path, tokenizer, policy, engine, train_p, eval_p, t0,
            train_eval_p, sample_log=SampleLog(args.out, args.log_samples, d.main))
    also = f" (+ {len(r.train_eval_problems)} train problems)" if r.train_eval_problems else ""
    kv = f" (KV cache {engine.kv_cache_bytes / 2**30:.2f} GiB)" if engine.kv_cache_bytes else ""
    r.say(f"model {args.model} ({path}), engine {engine.name}{kv}, {d.world} rank(s) on "
          f"{d.device.type}, {len(train_p)} train / {len(eval_p)} eval problems{also}; "
          f"FSDP2, attention {attention_impl(d.device)}")
    return r


def run_eval(r: Run, when: str, problems: list | None = None) -> dict:
    """pass@1 / pass@n on the eval problems (or `problems`), printed and logged with its
    seconds: time/eval, of which time/generate and time/reward."""
    a = r.args
    problems = r.eval_problems if problems is None else problems
    timer = Timer()
    trace = [] if r.sample_log.on else None      # the samples file (--log-samples)
    with timer("eval"):
        res = evaluate(r.engine, r.tokenizer, problems, r.d, **flags.evaluation(a), timer=timer,
                       trace=trace)
    if trace is not None:
        with timer("samples"):
            log_samples(r, r.step, "eval", sample_records(trace, r.sample_log.pick(len(trace))),
                        when)
    n = a.eval_n
    se = f" +- {res['pass@1_se']:.3f}" if "pass@1_se" in res else ""
    r.say(f"{when.replace('_', ' ')}: pass@1 {res['pass@1']:.3f}{se}  pass@{n} "
          f"{res[f'pass@{n}']:.3f}  ({res['problems']} problems, {n} samples each, "
          f"T={a.eval_temperature})")
    r.log({"phase": "eval", "when": when, "step": r.step,
           **{k: v for k, v in res.items() if k != "rates"}, **timer.pop()})
    return res


def keep_eval(r: Run, when: str, res: dict, prefix: str = "", pass_key: str = "pass@1") -> None:
    """Keep an evaluation's figures in r.state, so in summary.json: pass_at_1_<when> (res's
    pass_key), pass_at_k_<when> (k = --eval-n), hard_pass_at_1_<when> / hard_pass_at_k_<when>
    (the hardest quarter, tasks.py), family_pass_at_1_<when> ({family: pass@1}, tasks.py), the
    per-problem rates before / after RL (for the paired gain's se), each with `prefix`
    ("train_": the train sample's)."""
    r.state[f"{prefix}pass_at_1_{when}"] = res[pass_key]
    if "pass@1_se" in res:
        r.state[f"{prefix}pass_at_1_se_{when}"] = res["pass@1_se"]
    if "k" in res:
        r.state[f"{prefix}pass_at_k_{when}"] = res[f"pass@{res['k']}"]
        r.state["eval_k"] = res["k"]
    if "pass@1_hardest_quarter" in res:     # DRIVE's tail (tasks.py problems only)
        r.state[f"{prefix}hard_pass_at_1_{when}"] = res["pass@1_hardest_quarter"]
        r.state[f"{prefix}hard_pass_at_k_{when}"] = res[f"pass@{res['k']}_hardest_quarter"]
    if "pass@1_by_family" in res:
        r.state[f"{prefix}family_pass_at_1_{when}"] = res["pass@1_by_family"]
    if "rates" in res and when in ("before_rl", "after_rl"):
        r.state[f"{prefix}rates_{when}"] = res["rates"]


def with_train_sample(r: Run, when: str) -> bool:
    """Whether the evaluation `when` also scores the train sample (--train-eval-problems):
    before and after RL, when there is one."""
    return bool(r.train_eval_problems) and when in ("before_rl", "after_rl")


def evaluate_run(r: Run, when: str) -> dict:
    """GRPO's and PPO's evaluation before / after RL: run_eval on the held-out problems and
    (with_train_sample) on the train sample, the figures kept in r.state (keep_eval). Returns
    the held-out result; {} with --eval-n 0 (no evaluation)."""
    if r.args.eval_n <= 0:
        return {}
    res = run_eval(r, when)
    keep_eval(r, when, res)
    if with_train_sample(r, when):
        keep_eval(r, when, run_eval(r, f"train_{when}", r.train_eval_problems), "train_")
    return res


def sft_warm_start(r: Run) -> None:
    """The default warm start: SFT on the train problems' reference solutions, weight sync."""
    sft(r.policy, r.tokenizer, sft_examples(r.tokenizer, r.train_problems), r.d, r.log,
        **flags.sft(r.args))
    sync_weights(r.policy, r.engine)


def select_problems(r: Run, rates: dict) -> dict:
    """--offline-filter (drops train problems every sample or none solves; their ids go to
    trainer_state.json) and the solve rates the hard focus starts from. Returns the rates."""
    a = r.args
    if (a.offline_filter or a.hard_focus) and not {p.id for p in r.train_problems} <= set(rates):
        # Per-problem solve rates of the starting policy on the TRAIN problems.
        rates = evaluate(r.engine, r.tokenizer, r.train_problems, r.d,
                         **{**flags.evaluation(a), "n": max(a.eval_n, 4),
                            "temperature": a.temperature})["rates"]
    if a.offline_filter:
        kept = drive.offline_filter({p.id: rates[p.id] for p in r.train_problems})
        r.say(f"--offline-filter kept {len(kept)}/{len(r.train_problems)} train problems "
              f"(dropped those every sample or no sample solved)")
        r.state["train_ids"] = sorted(kept, key=str)
    return rates


def save_step(r: Run, step: int) -> None:
    """Checkpoint after `step` when --save-every asks (every N steps, step 0 and the last),
    with the data position (rng) and the curriculum's state in trainer_state.json."""
    a = r.args
    if not a.save_every or (step % a.save_every and step != a.steps):
        return
    r.state.update(rng=r.rng.getstate())
    if r.curriculum is not None:
        r.state["curriculum"] = r.curriculum.state_dict()
    save_checkpoint(a.out, step, r.policy, r.tokenizer, r.optimizer, r.scheduler, r.state, r.d,
                    extras=r.checkpoint_modules())


def resume(r: Run, ckpt: str) -> int:
    """Restore policy, optimizer, critic, reference, RNGs and curriculum; returns the step."""
    r.state = load_checkpoint(ckpt, r.policy, r.optimizer, r.scheduler, r.d,
                              extras=r.checkpoint_modules())
    r.rng.setstate(rng_state_from_json(r.state["rng"]))
    if r.curriculum is not None and "curriculum" in r.state:
        r.curriculum.load_state_dict(r.state["curriculum"])
    sync_weights(r.policy, r.engine)
    dropped = r.log.forget_after(r.state["step"], ("rl", "eval"))
    r.sample_log.forget_after(r.state["step"])
    r.say(f"resumed from {ckpt} at step {r.state['step']}"
          + (f" ({dropped} metrics rows past it dropped)" if dropped else ""))
    return r.state["step"]


def rng_state_from_json(x):
    """JSON turns random.getstate()'s tuples into lists; setstate wants tuples back."""
    return tuple(rng_state_from_json(v) for v in x) if isinstance(x, list) else x


def finish(r: Run) -> dict:
    """summary.json: pass@1 before / after RL and their gain, wall time, model, seed, steps."""
    r.engine.close()        # vLLM's teardown also ends the process group it joined
    a = r.args
    summary = {k: v for k, v in r.state.items() if k not in ("rng", "curriculum", "train_ids",
                                                              "step", "world")
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
    return summary


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


def checkpoint_to_resume(r: Run) -> str | None:
    """The checkpoint --resume continues (the latest in --out), its trainer state read into
    r.state; None for a fresh run (also when --resume finds none, which it says)."""
    args = r.args
    ckpt = latest_checkpoint(args.out) if args.resume else None
    if args.resume and ckpt is None:
        r.say(f"--resume: no checkpoint in {args.out}; starting from scratch")
    if ckpt is not None:
        r.state = read_trainer_state(ckpt)
    return ckpt


def prepare_run(r: Run) -> str | None:
    """GRPO's and PPO's run (start()) up to its optimizers: the checkpoint to resume
    (checkpoint_to_resume), or, fresh, the SFT warm start -> pass@k before RL -> the offline
    filter; then the train problems the filter kept and the curriculum. Returns the checkpoint
    (None: a fresh run). With --eval-only the run is finished here (run.summary set).

    The method then makes its optimizers from the warm-started policy and calls
    first_step(run, ckpt), which restores them on a resume; agents.py, with its own warm start
    and evaluation, calls checkpoint_to_resume and first_step itself.
    """
    ckpt = checkpoint_to_resume(r)
    rates = {}
    if ckpt is None:
        sft_warm_start(r)
        rates = evaluate_run(r, "before_rl").get("rates", {})
        if r.args.eval_only:
            r.summary = finish(r)
            return None
        rates = select_problems(r, rates)
    if "train_ids" in r.state:
        keep = set(r.state["train_ids"])
        r.train_problems = [p for p in r.train_problems if p.id in keep] or r.train_problems
    a = r.args
    r.curriculum = make_curriculum(r.train_problems, rates, curriculum=a.curriculum,
                                   cccs_threshold=a.cccs_threshold, cccs_average=a.cccs_average,
                                   cccs_span=a.cccs_span, cccs_loops=a.cccs_loops,
                                   hard_focus=a.hard_focus)
    return ckpt


def first_step(r: Run, ckpt: str | None) -> None:
    """After the method made its optimizers: the data order's rng, then either the step-0
    checkpoint (the warm-started policy: --resume skips SFT, and it can seed other runs) or,
    resuming from `ckpt`, the checkpoint's weights, optimizers, RNGs and curriculum
    (resume). run.step: the RL steps done."""
    r.rng = random.Random(r.args.seed)
    r.step = 0 if ckpt is None else resume(r, ckpt)
    if ckpt is None:
        save_step(r, 0)


def rl_steps(r: Run):
    """The RL step indices still to run (0-based, from run.step: a resumed run continues),
    behind a progress bar. Each step's clock starts as it is handed out (end_step's
    time/step), after the last step's freed memory went back to the system."""
    a = r.args
    r.bar = progress(range(r.step, a.steps), r.name, a.steps, r.step, enabled=r.d.main)
    for i in r.bar:
        release_freed_memory()
        r.step_started = time.perf_counter()
        yield i


def log_step(r: Run, i: int, metrics: dict) -> None:
    """After RL step i: the metrics row (phase, step, the step's metrics, lr, the seconds of
    its timed phases and time/step, the whole step's, the curriculum's stats) to
    metrics.jsonl; run.step = i + 1."""
    seconds = round(time.perf_counter() - r.step_started, 3)
    row = {"phase": "rl", "step": i + 1, **metrics, "lr": r.scheduler.get_last_lr()[0],
           **r.timer.pop(), "time/step": seconds,
           **(r.curriculum.stats() if r.curriculum else {})}
    r.log(row)
    if r.curriculum is not None and r.sample_log.on:
        r.sample_log.state(i + 1, r.curriculum.changed_state())
    if r.bar is not None:
        r.bar.set_postfix(reward=f"{row.get('reward_mean', 0):.3f}",
                          pass_rate=f"{row.get('pass_rate', 0):.2f}")
    r.step = i + 1


def log_samples(r: Run, step: int, phase: str, records: list[dict],
                when: str | None = None) -> None:
    """A step's or an evaluation's sample records (rollouts.sample_records, agents'
    candidate_records) into samples.jsonl, and as text to --report-to's TensorBoard / W&B
    (tag samples/<phase>)."""
    written = r.sample_log.write(step, phase, records, when)
    if written:
        r.log.text(f"samples/{phase}", format_records(written), step)


def eval_due(r: Run) -> bool:
    """Whether the held-out curve (--eval-every N) takes a point after the step just ended
    (run.step); the last step's is the evaluation after RL."""
    a = r.args
    return a.eval_n > 0 and a.eval_every > 0 and r.step % a.eval_every == 0 and r.step < a.steps


def end_step(r: Run, i: int, metrics: dict) -> None:
    """GRPO's and PPO's end of RL step i: the metrics row (log_step), the held-out curve's
    point when eval_due (run_eval, in metrics.jsonl), the checkpoint when --save-every asks
    (save_step). agents.py calls the three itself, with its own evaluation."""
    log_step(r, i, metrics)
    if eval_due(r):
        run_eval(r, f"step_{r.step}")
    save_step(r, r.step)


def end_run(r: Run) -> dict:
    """GRPO's and PPO's end of the run: pass@k after RL (evaluate_run), summary.json
    (finish); the summary."""
    evaluate_run(r, "after_rl")
    return finish(r)
