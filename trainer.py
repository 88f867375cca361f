"""A run's life, the same for every method: start (problems, policy, engine), the warm start and
pass@k before RL (prepare_run), the curriculum, the steps' bookkeeping (rl_steps, end_step),
pass@k after RL and the summary (end_run).

A method's train() (grpo.train, ppo_fgo.train, agents.train), in order:

    start()        process group, seeds, problems, the FSDP2 policy and its engine
    prepare_run()  the checkpoint to resume, or: SFT warm start, pass@k before RL, the offline
                   filter; then the curriculum (CCCS / DRIVE's hard focus)
    optimizers     the method's own (infra.bookkeeping.policy_optimizer, reference, critic)
    first_step()   the step-0 checkpoint, or the resume (which restores those optimizers)
    the steps      for i in rl_steps(run): the method's step; end_step(run, i, metrics): the
                   metrics row, the --eval-every point, the --save-every checkpoint
    end_run()      pass@k after RL, summary.json and curves.png

agents.py, with its own warm start and evaluation, calls the pieces itself. The machinery
these call (the output folder, prompts that fit, the engine's batch, checkpoints, the summary's
files) is infra/bookkeeping.py's.
"""
from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig

import cccs
import drive
from actor import Sample, Scores, score, sft, sft_examples, sync_weights
from infra import flags
from infra.bookkeeping import (
    NoOptimizer,
    bound_native_memory,
    claim_out_dir,
    engine_batch,
    finish,
    fitting_prompts,
    log_samples,
    log_step,
    longest_prompt,
    policy_and_engine,
    prompt_budget,
    release_freed_memory,
    rng_state_from_json,
    save_step,
    train_eval_set,
)
from infra.metrics import MetricsLog, Timer, progress, report_to_list
from infra.model import (
    Dist,
    PolicyLogprobs,
    UserError,
    ValueModel,
    attention_impl,
    init_distributed,
    latest_checkpoint,
    load_checkpoint,
    load_tokenizer,
    read_trainer_state,
    resolve_model,
    seed_everything,
)
from infra.samples import SampleLog, curriculum_state, sample_records
from rollouts import evaluate, prompt_text
from world import tiny
from world.sources import check_problem_sets, load_problem_sets

# ----------------------------------------------------------------------------- set-up
# (A reader may skip the set-up: which model files a run loads, its engine's batch; the
# problems come from world/sources.py's load_problem_sets.)


def model_files(args, d: Dist):
    """The model's path (tiny.model_path or resolve_model) and its tokenizer; on CPU,
    --cpu-threads set first."""
    if d.device.type == "cpu" and args.cpu_threads > 0:
        # 0 leaves torch's own choice. Under load, tiny models are overhead-bound and extra
        # threads only fight the other processes (the sandbox's workers, a second training).
        torch.set_num_threads(args.cpu_threads)
    path = tiny.model_path(args.model_seed) if args.model == "tiny" else resolve_model(args.model)
    return path, load_tokenizer(path)


def setup_policy(args, d: Dist, value_head: bool = False):
    """Model path, tokenizer, FSDP-sharded policy and its generation engine, for prompts of
    any length (policy_and_engine)."""
    path, tokenizer = model_files(args, d)
    return (path, tokenizer, *policy_and_engine(args, d, path, value_head))


def rollout_batch(d: Dist, tokenizer, train: list, evals: list, train_evals: list, same: bool,
                  *, cccs: bool, eval_n: int, train_rates: bool, **step) -> dict:
    """engine_batch for GRPO's and PPO's engine: the longest coder prompt of the train
    problems (opened with a CCCS prefix when cccs) and of the eval problems; the evaluations
    before and after RL (eval_n samples of the eval set or of the train sample beside it)
    and, with train_rates (--offline-filter, --hard-focus), the train set's solve rates.
    step: engine_batch's keywords (prompts_per_step, group_size, max_new_tokens)."""
    # a CCCS prefix is at most the reference solution: the prompt opened with all of it
    train_texts = [prompt_text(tokenizer, p, p.solutions[0] if cccs and p.solutions else "")
                   for p in train]
    longest = max(longest_prompt(train_texts, tokenizer),
                  longest_prompt([] if same else [prompt_text(tokenizer, p) for p in evals],
                                 tokenizer))
    evaluations = [(max(len(evals), len(train_evals)), eval_n)]
    if train_rates:
        evaluations.append((len(train), max(eval_n, 4)))   # select_problems' evaluate
    return engine_batch(d, longest, evaluations, **step)


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
        # problems updated since the last changed_state() -> (the CCCS stage their groups
        # were drawn at, or None; the groups' pass rates)
        self.changed: dict = {}
        self.step_rates: dict[str, list[float]] = {}   # CCCS stage -> group pass rates, this step

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
        return self.cccs.stage_label(problem.id)

    def update(self, pid, rewards: Iterable[float]) -> None:
        rewards = list(rewards)
        rate = sum(rewards) / max(len(rewards), 1)
        self.tracker.update(pid, rewards)
        drawn = None
        if self.cccs is not None and pid in self.cccs.stage:
            drawn = self.cccs.stage_label(pid)
            self.step_rates.setdefault(drawn, []).append(rate)
            self.cccs.update(pid, rewards)
        self.changed.setdefault(pid, (drawn, []))[1].append(rate)

    def changed_state(self) -> dict:
        """The state of the problems updated since the last call, for the samples file
        (infra.samples.curriculum_state)."""
        changed, self.changed = self.changed, {}
        return curriculum_state(self, changed)

    def stats(self) -> dict:
        """cccs_<stage>: problems per stage ("final", "final-1", ...), cccs_final_share:
        share of CCCS problems writing whole programs; over the groups drawn since the last
        stats() (a step's): cccs_pass_rate/<stage>, their mean reward at that stage, and
        cccs_draws_final_share; hf_phase (1-based), hf_pool."""
        out: dict = {}
        if self.cccs is not None:
            counts = self.cccs.stage_counts()
            out.update({f"cccs_{k}": v for k, v in counts.items()})
            out["cccs_final_share"] = counts.get("final", 0) / max(len(self.cccs.stage), 1)
            out.update({f"cccs_pass_rate/{k}": sum(v) / len(v) for k, v in self.step_rates.items()})
            drawn = sum(map(len, self.step_rates.values()))
            if drawn:
                out["cccs_draws_final_share"] = len(self.step_rates.get("final", [])) / drawn
            self.step_rates = {}
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


def add_curriculum_flags(p: argparse.ArgumentParser) -> None:
    """Which prompts the policy sees: StepCoder's CCCS (cccs.py), DRIVE's hard focus and
    offline filter (drive.py)."""
    g = p.add_argument_group("curricula (cccs.py, drive.py)")
    g.add_argument("--curriculum", choices=["none", "cccs"], default="none",
                   help="cccs: StepCoder's curriculum of code completion subtasks")
    g.add_argument("--cccs-threshold", type=flags.SHARE, default=0.8,
                   help="moving-average pass rate at which a problem moves to its next stage")
    g.add_argument("--cccs-average", choices=["window", "ema"], default="window",
                   help="moving average of the pass rate: last --cccs-span updates, or EMA")
    g.add_argument("--cccs-span", type=flags.POSITIVE_INT, default=4,
                   help="window length (or EMA span) of that average")
    g.add_argument("--cccs-loops", action="store_true", help="also split at for/while loops")
    g.add_argument("--cccs-rungs", choices=cccs.RUNGS, default="sqrt",
                   help="sqrt: ceil(sqrt(N)) of a reference's N split points (StepCoder); "
                        "every: a stage at each split point (rungs of one conditional)")
    g.add_argument("--hard-focus", type=drive.hard_focus_spec, default="",
                   help="DRIVE stage 2: KEEP:STEPS phases, e.g. 72:64,50:32,25:32 keeps the 72 "
                        "lowest-pass-rate problems for 64 steps, then 50 for 32, then 25 for 32")
    g.add_argument("--offline-filter", action="store_true",
                   help="before RL, drop train problems every sample solves or none does "
                        "(Skywork/AceReason; DRIVE's data curation)")


def make_curriculum(problems: Sequence, rates: Mapping, *, curriculum: str,
                    cccs_threshold: float, cccs_average: str, cccs_span: int, cccs_loops: bool,
                    hard_focus: str, cccs_rungs: str = "sqrt") -> Curriculum | None:
    """curriculum "cccs" and/or a hard_focus schedule -> Curriculum (None when neither is on).

    cccs_*: cccs.CCCSSchedule's threshold, average, span, include_loops, rungs; hard_focus: the
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
                                  span=cccs_span, include_loops=cccs_loops, rungs=cccs_rungs)
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
              with_values: bool = False, logp: bool = True) -> Scores:
        """score() with the run's micro-batch, padding, device and temperature."""
        return score(samples, micro_batch=self.args.micro_batch,
                     pad_id=self.tokenizer.pad_token_id, device=self.d.device,
                     temperature=self.args.temperature, policy=policy, ref=ref,
                     forward_fn=forward_fn, with_values=with_values, logp=logp)

    def checkpoint_modules(self) -> dict:
        """Saved beside the policy in every checkpoint: the critic, the reference, extras."""
        out = dict(self.extras)
        if self.critic is not None:
            out["critic"] = (self.critic, self.critic_optimizer)
        if self.ref is not None:
            out["ref"] = (self.ref, NoOptimizer())
        return out


def start(args, name: str, value_head: bool = False, coder_prompts: bool = False,
          train_filter=None) -> Run:
    """Process group, output dir (claim_out_dir: checked before any work), seeds, metrics,
    problems less those whose prompt the context cannot hold (fitting_prompts), policy and
    engine. coder_prompts: the engine only ever sees the problems' coder prompts (GRPO, PPO),
    so the CPU engine's KV cache is sized to the longest of them and the step (engine_batch);
    else (agents.py's conversations) to prompts of any length. train_filter: the method's own
    cut of the train problems (it may raise a UserError), applied before the policy and
    engine load."""
    t0 = time.time()
    bound_native_memory()
    d = init_distributed()
    claim_out_dir(args.out, resume=args.resume, overwrite=args.overwrite, main=d.main,
                  method=name, model=args.model)
    seed_everything(args.seed)
    os.makedirs(args.out, exist_ok=True)
    log = MetricsLog(args.out, d.main, report_to_list(args.report_to), vars(args), name)
    train_p, eval_p = load_problem_sets(args)
    path, tokenizer = model_files(args, d)
    same = eval_p is train_p
    budget = prompt_budget(AutoConfig.from_pretrained(path), max_model_len=args.max_model_len,
                           max_new_tokens=args.max_new_tokens)
    train_p = fitting_prompts(train_p, [prompt_text(tokenizer, p) for p in train_p], tokenizer,
                              budget, "--train-data")
    eval_p = train_p if same else fitting_prompts(
        eval_p, [prompt_text(tokenizer, p) for p in eval_p], tokenizer, budget, "--eval-data")
    check_problem_sets(args, train_p, eval_p)
    train_eval_p = train_eval_set(train_p, eval_p, args.train_eval_problems)
    if train_filter is not None:
        train_p = train_filter(train_p)
    batch = None
    if coder_prompts and d.device.type == "cpu":   # only the CPU engine sizes its cache
        batch = rollout_batch(d, tokenizer, train_p, eval_p, train_eval_p, same,
                              cccs=args.curriculum == "cccs", eval_n=args.eval_n,
                              train_rates=bool(args.offline_filter or args.hard_focus),
                              prompts_per_step=args.prompts_per_step,
                              group_size=args.group_size, max_new_tokens=args.max_new_tokens)
    policy, engine = policy_and_engine(args, d, path, value_head, batch)
    # a curriculum's per-problem states go to the samples file even under --log-samples 0
    states = getattr(args, "curriculum", "none") == "cccs" or bool(getattr(args, "hard_focus", ""))
    r = Run(name, args, d, log, path, tokenizer, policy, engine, train_p, eval_p, t0,
            train_eval_p, sample_log=SampleLog(args.out, args.log_samples, d.main, states))
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
    few = (f"  (on the first {a.max_train_tests} tests {res['pass@1_on_train_tests']:.3f})"
           if "pass@1_on_train_tests" in res else "")
    r.say(f"{when.replace('_', ' ')}: pass@1 {res['pass@1']:.3f}{se}{few}  pass@{n} "
          f"{res[f'pass@{n}']:.3f}  ({res['problems']} problems, {n} samples each, "
          f"T={a.eval_temperature})")
    r.log({"phase": "eval", "when": when, "step": r.step,
           **{k: v for k, v in res.items() if not k.startswith("rates")}, **timer.pop()})
    return res


def keep_eval(r: Run, when: str, res: dict, prefix: str = "", pass_key: str = "pass@1") -> None:
    """Keep an evaluation's figures in r.state, so in summary.json: pass_at_1_<when> (res's
    pass_key), pass_at_k_<when> (k = --eval-n), hard_pass_at_1_<when> / hard_pass_at_k_<when>
    (the hardest quarter, world/tasks.py), family_pass_at_1_<when> ({family: pass@1}), the
    per-problem rates before / after RL (for the paired gain's se), each with `prefix`
    ("train_": the train sample's); under --max-train-tests also the train-style regime's
    pass_at_1_on_train_tests_<when> and its per-problem rates_on_train_tests_<when>."""
    r.state[f"{prefix}pass_at_1_{when}"] = res[pass_key]
    if "pass@1_on_train_tests" in res:
        r.state[f"{prefix}pass_at_1_on_train_tests_{when}"] = res["pass@1_on_train_tests"]
        if when in ("before_rl", "after_rl"):
            r.state[f"{prefix}rates_on_train_tests_{when}"] = res["rates_on_train_tests"]
    if "pass@1_se" in res:
        r.state[f"{prefix}pass_at_1_se_{when}"] = res["pass@1_se"]
    if "k" in res:
        r.state[f"{prefix}pass_at_k_{when}"] = res[f"pass@{res['k']}"]
        r.state["eval_k"] = res["k"]
    if "pass@1_hardest_quarter" in res:     # DRIVE's tail (world/tasks.py problems only)
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
        if not kept:   # GRPO would learn nothing from them: every group's rewards are equal
            raise UserError(f"--offline-filter kept none of the {len(r.train_problems)} train "
                            "problems (every sample solved each, or none did); train without "
                            "it, or on problems the starting policy solves sometimes")
        r.say(f"--offline-filter kept {len(kept)}/{len(r.train_problems)} train problems "
              f"(dropped those every sample or no sample solved)")
        r.state["train_ids"] = sorted(kept, key=str)
    return rates


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
        r.train_problems = [p for p in r.train_problems if p.id in keep]
        if not r.train_problems:   # a resume on other --train-data
            raise UserError(f"--resume: none of the {len(keep)} problems the offline filter "
                            f"kept is in --train-data {r.args.train_data}; resume with the "
                            "run's own --train-data")
    a = r.args
    r.curriculum = make_curriculum(r.train_problems, rates, curriculum=a.curriculum,
                                   cccs_threshold=a.cccs_threshold, cccs_average=a.cccs_average,
                                   cccs_span=a.cccs_span, cccs_loops=a.cccs_loops,
                                   hard_focus=a.hard_focus, cccs_rungs=a.cccs_rungs)
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
