"""grpo.py against TRL's GRPOTrainer, side by side, from the same warm start.

    .venv/bin/python bench/bench_vs_trl.py --out runs/bench-trl            # 130 steps, 8 x 16
    .venv/bin/python bench/bench_vs_trl.py --model runs/sft200-s0/step_0 --steps 30
    .venv/bin/python bench/bench_vs_trl.py --smoke --out /tmp/bench-smoke   # 2 steps, < 3 min
    .venv/bin/python bench/bench_vs_trl.py --combine runs/bvt-*/bench_vs_trl.json   # mean +- std

TRL is an optional, benchmark-only dependency: `pip install -r requirements-bench.txt`.

What is held equal (each framework runs in its own subprocess, so peak RSS is its own):
- start: one warm-started checkpoint, made by `grpo.py --steps 0 --save-every 1000` (SFT on
  the reference solutions) unless --model names one;
- prompts: rollouts.prompt_text (the project's chat prompt), tokenized by the same tokenizer;
- reward: rollouts.score_completions (the sandbox, --reward binary), called by TRL as its
  reward function with the completions TRL decoded;
- optimizer and schedule: trainer.policy_optimizer (AdamW betas (0.9, 0.99), --lr, linear
  warm-up over --warmup-steps, then constant) built on TRL's model and passed to GRPOTrainer;
- loss: token-mean over the whole step's tokens (TRL loss_type "dapo", our --agg token-mean),
  beta 0, group-std advantages, one optimizer step per batch of P prompts x G samples (TRL:
  gradient accumulation over micro-batches of --micro-batch), clip 0.2 / 0.28 (inert on-policy:
  the ratio is 1), grad-norm clip 1.0, temperature 1, top-p 1, no top-k, fp32, one torch thread;
- steps, and the evaluation: rollouts.evaluate (pass@1 and pass@n, n = --eval-n samples per
  problem, the same engine and seed for every checkpoint), before and after.

What differs by construction (the ablation knobs below change the first two):
- data order: the same by default: both walk a permutation of the problems per epoch and drop
  the last partial batch (3 of the 51 built-in problems per epoch at 8 prompts a step; ours:
  rollouts.epoch_batch). --ours-prompt-order replacement draws each step's prompts uniformly,
  as grpo.py's CPU default does (it learned less here, not significantly, and more on the
  held-out testbed; README); --trl-prompt-order replacement does the same to TRL.
- advantage epsilon: (r - mean) / (std + eps), eps 1e-6 here, 1e-4 in TRL (--ours-adv-eps).
  With binary rewards and G = 16 the smallest non-zero std is 0.25, so this rescales the
  advantages by at most 4e-4: expected to be inert. Measured (3 seeds, epoch order): -3.5
  points on the arm's mean, lower on every seed: any perturbation re-draws the trajectory,
  so this is the run-to-run spread that an arm's 3-seed mean carries (README).
- generation: grpo.py samples with its engine (--engine: vLLM on CPU by default), TRL with
  transformers' generate on the training model itself; different random streams either way.
- logged entropy: grpo.py's is over the trained samples only (zero-advantage groups are
  skipped, actor.update), TRL's over every sample, so the two are not strictly comparable.

Time per step is the wall time of one optimizer step (rollouts included; the final checkpoint
and the evaluations excluded; ours: metrics.jsonl's time/step). Split: generation (ours: the
step's time/generate; TRL: its _generate_single_turn), reward (the sandbox call, both: ours
time/reward), update (ours: time/update + time/score; TRL: the rest of the step: log-prob
forward, backward, optimizer, bookkeeping), other (ours: weight sync into the engine and
anything outside the timers).

Memory: each framework's run is one subprocess whose whole process tree (the trainer, its
sandbox workers, an engine's processes if it has any) is sampled by bench/peak_rss.py: peak
PSS of the tree (shared pages split between their sharers), its anonymous part (what the
processes allocated, library code left out: the figure other processes on the machine do not
move) and the trainer process's own peak RSS.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peak_rss  # noqa: E402  (a process tree's peak memory)
from ablate import mean_std  # noqa: E402  (the grid's mean and sample std)
from compare import over_seeds, paired  # noqa: E402  (paired held-out differences)

import grpo  # noqa: E402
import rollouts  # noqa: E402
import trainer  # noqa: E402
from infra import flags  # noqa: E402
from infra.bookkeeping import policy_optimizer  # noqa: E402
from infra.engines import make_engine  # noqa: E402
from infra.metrics import Timer  # noqa: E402
from infra.model import Dist, PolicyLogprobs, load_causal_lm, load_tokenizer  # noqa: E402

INSTALL_HINT = ("bench_vs_trl.py: TRL is not installed; it is an optional benchmark-only "
                "dependency: .venv/bin/pip install -r requirements-bench.txt")

# --smoke: a tiny version of everything (flags given explicitly still win).
SMOKE = dict(steps=2, prompts_per_step=2, group_size=4, max_problems=6, max_new_tokens=48,
             micro_batch=8, eval_n=2, sft_steps=10, engine="hf", eval_engine="hf")


# ----------------------------------------------------------------------------- flags

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench_vs_trl.py", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("start and data")
    g.add_argument("--model", default=None,
                   help="warm-started checkpoint both frameworks start from (e.g. "
                        "runs/sft200-s0/step_0); default: make one with grpo.py --steps 0")
    g.add_argument("--sft-steps", type=int, default=200,
                   help="SFT steps of the warm start made when --model is not given")
    g.add_argument("--train-data", default="builtin",
                   help="grpo.py --train-data of the warm start and both runs (the figures "
                        "so far: the 51 built-in problems; tasks:train for the testbed)")
    g.add_argument("--eval-data", default="builtin",
                   help="grpo.py --eval-data of the before/after evaluation (builtin: the "
                        "training problems; tasks:test: held-out instances)")
    g.add_argument("--max-problems", type=int, default=0,
                   help="first N problems of each set for training and evaluation (0 = all)")
    g.add_argument("--max-eval-problems", type=int, default=None,
                   help="first N problems of the evaluation set (0 = all; default: "
                        "--max-problems)")
    g = p.add_argument_group("the RL run (the same for both)")
    g.add_argument("--steps", type=int, default=130, help="optimizer steps of each framework")
    g.add_argument("--prompts-per-step", type=int, default=8, help="prompts per step P")
    g.add_argument("--group-size", type=int, default=16, help="samples per prompt G")
    g.add_argument("--lr", type=float, default=1.5e-4, help="AdamW learning rate")
    g.add_argument("--warmup-steps", type=int, default=3,
                   help="linear warm-up steps, constant lr after")
    g.add_argument("--max-new-tokens", type=int, default=96, help="response budget")
    g.add_argument("--micro-batch", type=int, default=32,
                   help="sequences per forward/backward (TRL: per_device_train_batch_size, "
                        "lowered to a divisor of P x G when needed)")
    g.add_argument("--seed", type=int, default=0, help="seed of both runs and the evaluation")
    g.add_argument("--cpu-threads", type=int, default=1, help="torch threads in each run")
    g.add_argument("--test-timeout", type=float, default=2.0, help="sandbox seconds per test")
    g.add_argument("--sandbox-workers", type=int, default=None,
                   help="sandbox processes (default: one per core)")
    g.add_argument("--engine", choices=["auto", "vllm", "hf"], default="auto",
                   help="grpo.py's generation engine (TRL always uses transformers' generate)")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-n", type=int, default=8,
                   help="samples per problem for pass@1 / pass@n (rollouts.evaluate)")
    g.add_argument("--eval-engine", choices=["auto", "vllm", "hf"], default="hf",
                   help="engine of every evaluation (the same for all checkpoints)")
    g = p.add_argument_group("ablation knobs (for the learning gap between the two)")
    g.add_argument("--frameworks", default="ours,trl",
                   help="comma list of the runs to make: ours (grpo.py), trl")
    g.add_argument("--trl-prompt-order", choices=["epoch", "replacement"], default="epoch",
                   help="TRL's prompts: epoch = its RepeatSampler (shuffle once per epoch, drop "
                        "the partial batch); replacement = drawn with replacement each step, "
                        "as grpo.py --prompt-order replacement does")
    g.add_argument("--ours-prompt-order", choices=["epoch", "replacement"], default="epoch",
                   help="grpo.py --prompt-order: epoch (a fresh permutation per epoch, "
                        "partial batch dropped, as TRL does: like for like) or replacement "
                        "(grpo.py's CPU default)")
    g.add_argument("--ours-adv-eps", type=float, default=1e-6,
                   help="grpo.py --adv-eps: epsilon of the group-std advantages (TRL: 1e-4)")
    g = p.add_argument_group("run")
    g.add_argument("--out", default="runs/bench-vs-trl",
                   help="directory for the warm start, both runs' checkpoints and results")
    g.add_argument("--json", default=None,
                   help="where to write the table as JSON (default: <out>/bench_vs_trl.json)")
    g.add_argument("--smoke", action="store_true",
                   help=f"tiny version (2 steps each, 6 problems, 2 x 4 samples, eval n 2, "
                        f"SFT 10, hf engines): {SMOKE}")
    g.add_argument("--combine", nargs="+", metavar="JSON", default=None,
                   help="no run: read these bench_vs_trl.json files (e.g. the seeds of each "
                        "arm), group their rows by arm, print mean +- std per arm and write "
                        "the summary to --json (default: combined.json beside the first)")
    g.add_argument("--per-seed-model", action="store_true",
                   help="with --combine: let the reports' --model differ, one warm start per "
                        "seed (as the testbed's seed-S SFT checkpoints); every other setting "
                        "must still match")
    g.add_argument("--worker", choices=["ours", "trl"], default=None,
                   help="internal: run one framework in this process and write "
                        "<out>/<worker>.json (the default command starts both as workers)")
    return p


def parse_args(argv=None) -> argparse.Namespace:
    p = build_parser()
    pre, _ = p.parse_known_args(argv)
    if pre.smoke:
        p.set_defaults(**SMOKE)
    a = p.parse_args(argv)
    if a.per_seed_model and not a.combine:
        p.error("--per-seed-model only acts with --combine")
    return a


def grpo_argv(a: argparse.Namespace, model: str, out: str) -> list[str]:
    """The grpo.py flags of one RL run: both frameworks read the same namespace. --overwrite:
    a second bench into the same --out measures again, replacing the first one's run."""
    argv = ["--model", model, "--train-data", a.train_data, "--eval-data", a.eval_data,
            "--sft-steps", "0", "--steps", str(a.steps),
            "--prompts-per-step", str(a.prompts_per_step), "--group-size", str(a.group_size),
            "--lr", str(a.lr), "--warmup-steps", str(a.warmup_steps), "--min-lr-ratio", "1.0",
            "--max-new-tokens", str(a.max_new_tokens), "--micro-batch", str(a.micro_batch),
            "--seed", str(a.seed), "--cpu-threads", str(a.cpu_threads),
            "--test-timeout", str(a.test_timeout), "--max-problems", str(a.max_problems),
            *(["--max-eval-problems", str(a.max_eval_problems)]
              if a.max_eval_problems is not None else []),
            "--engine", a.engine, "--eval-n", "0", "--out", out, "--overwrite",
            "--save-every", str(max(a.steps, 1)), "--agg", "token-mean", "--beta", "0",
            "--adv-scale", "group", "--reward", "binary",
            "--prompt-order", a.ours_prompt_order, "--adv-eps", str(a.ours_adv_eps)]
    if a.sandbox_workers:
        argv += ["--sandbox-workers", str(a.sandbox_workers)]
    return argv


# ----------------------------------------------------------------------------- summaries

def peak_rss_mb() -> float:
    """This process's peak resident set (Linux ru_maxrss is in KiB); sandbox children excluded."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def last_third_mean(values: list) -> float | None:
    """Mean of the last third of a per-step series (None when it is empty)."""
    vals = [v for v in values if v is not None]
    if not vals:
        return None
    tail = vals[len(vals) - max(1, math.ceil(len(vals) / 3)):]
    return sum(tail) / len(tail)


def summarize(steps: list[dict]) -> dict:
    """Per-step rows {step_s, generation_s, reward_s, update_s, other_s, reward, entropy} ->
    mean seconds per step (and the median step), the training reward / entropy of the last
    third."""
    out = {}
    for k in ("step_s", "generation_s", "reward_s", "update_s", "other_s"):
        vals = [s[k] for s in steps if s.get(k) is not None]
        out[k] = sum(vals) / len(vals) if vals else None
    walls = sorted(s["step_s"] for s in steps)
    out["step_s_median"] = walls[len(walls) // 2] if walls else None   # robust to load spikes
    out["reward_last_third"] = last_third_mean([s.get("reward") for s in steps])
    out["entropy_last_third"] = last_third_mean([s.get("entropy") for s in steps])
    out["steps"] = len(steps)
    return out


# ----------------------------------------------------------------------------- prompt order

def trl_installed() -> bool:
    """TRL is optional (requirements-bench.txt); only the TRL worker imports it (run_trl)."""
    return importlib.util.find_spec("trl") is not None


def with_replacement_sampler(**kw):
    """TRL's RepeatSampler (keywords: its own) with its layout (each prompt G times in a row,
    each batch repeated for its accumulation steps), but every batch of prompts drawn with
    replacement, as grpo.py --prompt-order replacement does."""
    from trl.trainer.utils import RepeatSampler

    class WithReplacementSampler(RepeatSampler):
        def __iter__(self):
            if not hasattr(self, "generator"):
                self.generator = torch.Generator().manual_seed(self.seed or 0)
            for _ in range(self.num_samples // self.batch_size):
                chunk = torch.randint(self.num_samples, (self.batch_size,),
                                      generator=self.generator).tolist()
                for _ in range(self.repeat_count):
                    for index in chunk:
                        yield from [index] * self.mini_repeat_count

    return WithReplacementSampler(**kw)


# ----------------------------------------------------------------------------- the workers

def step_phases(row: dict) -> dict:
    """One RL row of grpo.py's metrics.jsonl -> the bench's per-step record: the step's wall
    time (time/step) split into generation, reward (the sandbox), update (old/ref scoring
    included, as TRL's update holds its log-prob forward) and other (weight sync and what
    no timer covers)."""
    wall, gen, reward = row["time/step"], row.get("time/generate", 0.0), row.get(
        "time/reward", 0.0)
    update = row.get("time/update", 0.0) + row.get("time/score", 0.0)
    return dict(step_s=wall, generation_s=gen, reward_s=reward, update_s=update,
                other_s=wall - gen - reward - update, reward=row.get("reward_mean"),
                entropy=row.get("entropy"))


def resolved_engine(kind: str) -> str:
    """What grpo.py's --engine resolves to on this CPU (auto: vLLM when a build imports; a
    vLLM that then fails to start falls back to hf with a line in the run's output)."""
    if kind != "auto":
        return kind
    from infra.engines import vllm_supports
    return "vllm" if vllm_supports(torch.device("cpu")) else "hf"


def run_ours(a: argparse.Namespace, model: str, out: str) -> dict:
    """grpo.py's own run (grpo.train), its steps' phases read back from its metrics.jsonl."""
    args = grpo.parse_args(grpo_argv(a, model, out))
    t0 = time.perf_counter()
    grpo.train(args)
    wall = time.perf_counter() - t0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    steps = [step_phases(r) for r in rows if r.get("phase") == "rl"]
    return dict(framework="grpo.py", engine=resolved_engine(args.engine),
                checkpoint=os.path.join(out, f"step_{args.steps}"), per_step=steps,
                wall_s=wall)


def trl_batch_shape(a: argparse.Namespace) -> tuple[int, int]:
    """(per_device_train_batch_size, gradient_accumulation_steps) whose product is P x G:
    one optimizer step per rollout batch, micro-batches of at most --micro-batch."""
    total = a.prompts_per_step * a.group_size
    mb = max(d for d in range(1, min(a.micro_batch, total) + 1) if total % d == 0)
    return mb, total // mb


def run_trl(a: argparse.Namespace, model: str, out: str) -> dict:
    """TRL's GRPOTrainer on the same start, prompts, reward, optimizer and schedule."""
    # Imported here, not at the top: grpo.py's worker holds none of TRL's stack (trl,
    # datasets: ~330 MB of modules) in its memory figures.
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback
    args = grpo.parse_args(grpo_argv(a, model, out))
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    tokenizer = load_tokenizer(model)
    train_problems, _ = trainer.load_problem_sets(args)
    lm = load_causal_lm(model, torch.device("cpu"))                       # fp32
    optimizer, scheduler = policy_optimizer(PolicyLogprobs(lm),
                                                     **flags.optimizer(args))
    dataset = Dataset.from_dict({
        "prompt": [rollouts.prompt_text(tokenizer, p) for p in train_problems],
        "problem_index": list(range(len(train_problems)))})
    timer = Timer()         # TRL's generation and our sandbox reward, each step

    def sandbox_reward(prompts, completions, problem_index, **_):
        rewards, _, _ = rollouts.score_completions([train_problems[i] for i in problem_index],
                                                   completions, **flags.judging(args))
        return rewards
    sandbox_reward = timer.wrap("reward", sandbox_reward)

    mb, accum = trl_batch_shape(a)
    config = trl.GRPOConfig(
        output_dir=out, max_steps=args.steps, per_device_train_batch_size=mb,
        gradient_accumulation_steps=accum, num_generations=args.group_size,
        max_completion_length=args.max_new_tokens, learning_rate=args.lr,
        beta=0.0, loss_type="dapo", scale_rewards="group", num_iterations=1,
        epsilon=args.eps_low, epsilon_high=args.eps_high, temperature=args.temperature,
        top_p=args.top_p, top_k=0, max_grad_norm=args.max_grad_norm,
        bf16=False, fp16=False, gradient_checkpointing=False, use_cpu=True, seed=args.seed,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True,
        dataloader_num_workers=0, shuffle_dataset=True, log_completions=False)
    steps: list[dict] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t = time.perf_counter()
            timer.pop()

        def on_step_end(self, *_, **__):
            wall = time.perf_counter() - self.t
            seconds = timer.pop()
            gen, reward = seconds.get("time/generate", 0.0), seconds.get("time/reward", 0.0)
            steps.append(dict(step_s=wall, generation_s=gen, reward_s=reward,
                              update_s=wall - gen - reward, other_s=0.0))

    class BenchGRPOTrainer(trl.GRPOTrainer):
        def _get_train_sampler(self, dataset=None):
            if a.trl_prompt_order == "epoch":
                return super()._get_train_sampler(dataset)
            return with_replacement_sampler(
                data_source=dataset if dataset is not None else self.train_dataset,
                mini_repeat_count=self.num_generations,
                batch_size=self.args.generation_batch_size // self.num_generations,
                repeat_count=self.num_iterations * self.args.steps_per_generation,
                shuffle=True, seed=self.args.seed)

    t0 = time.perf_counter()
    tr = BenchGRPOTrainer(model=lm, reward_funcs=sandbox_reward, args=config,
                          train_dataset=dataset, processing_class=tokenizer,
                          optimizers=(optimizer, scheduler), callbacks=[StepTimer()])
    tr._generate_single_turn = timer.wrap("generate", tr._generate_single_turn)
    tr.train()
    logs = [h for h in tr.state.log_history if "reward" in h]
    for s, h in zip(steps, logs):
        s.update(reward=h.get("reward"), entropy=h.get("entropy"))
    final = os.path.join(out, f"step_{args.steps}")
    tr.save_model(final)
    tokenizer.save_pretrained(final)
    return dict(framework=f"TRL {trl.__version__} GRPOTrainer", engine="hf generate",
                checkpoint=final, per_step=steps, wall_s=time.perf_counter() - t0)


def worker_main(a: argparse.Namespace) -> None:
    """Run one framework here and write <out>/<worker>.json (its per-step timings, peak RSS)."""
    out = os.path.join(a.out, a.worker)
    os.makedirs(out, exist_ok=True)
    result = (run_ours if a.worker == "ours" else run_trl)(a, a.model, out)
    result["peak_rss_mb"] = peak_rss_mb()
    with open(os.path.join(a.out, f"{a.worker}.json"), "w") as f:
        json.dump(result, f, indent=1)


# ----------------------------------------------------------------------------- orchestration

def run_command(cmd: list[str], what: str, memory: bool = False) -> dict | None:
    """Run cmd from the repository root; exit with a line if it fails. memory: sample its
    whole process tree (peak_rss.watch: the trainer, its sandbox workers, any engine
    process) and return the peaks."""
    print(f"[bench] {what}: {' '.join(cmd)}", flush=True)
    if memory:
        peaks = peak_rss.watch(cmd, cwd=ROOT)
        code = peaks["returncode"]
    else:
        peaks, code = None, subprocess.run(cmd, cwd=ROOT).returncode
    if code:
        sys.exit(f"bench_vs_trl.py: {what} failed (exit {code}); see its output above")
    return peaks


def warm_start(a: argparse.Namespace) -> str:
    """The shared start: --model, or SFT by grpo.py itself (its step_0 checkpoint)."""
    if a.model:
        return a.model
    out = os.path.join(a.out, "warm")
    ckpt = os.path.join(out, "step_0")
    if not os.path.exists(os.path.join(ckpt, "config.json")):
        run_command([sys.executable, "grpo.py", "--train-data", a.train_data,
                     "--eval-data", a.eval_data, "--max-new-tokens", str(a.max_new_tokens),
                     "--steps", "0", "--save-every", "1000",
                     "--sft-steps", str(a.sft_steps), "--eval-n", "0", "--seed", str(a.seed),
                     "--max-problems", str(a.max_problems), "--engine", "hf",
                     "--cpu-threads", str(a.cpu_threads), "--out", out, "--overwrite"],
                    "warm start")
    return ckpt


def evaluate_checkpoint(a: argparse.Namespace, ckpt: str) -> dict:
    """pass@1 / pass@n of a checkpoint with the project's evaluator (rollouts.evaluate), the
    same engine, problems, seed and sampling settings for every checkpoint."""
    args = grpo.parse_args(grpo_argv(a, ckpt, os.path.join(a.out, "eval")))
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    _, eval_problems = trainer.load_problem_sets(args)
    d = Dist(0, 1, 0, torch.device("cpu"))
    engine = make_engine(a.eval_engine, ckpt, d.device, seed=args.seed)
    try:
        # grpo_argv's runs evaluate nothing themselves (--eval-n 0): n is the bench's
        res = rollouts.evaluate(engine, load_tokenizer(ckpt), eval_problems, d,
                                **{**flags.evaluation(args), "n": a.eval_n})
    finally:
        engine.close()
    return {"pass@1": res["pass@1"], "pass@n": res[f"pass@{a.eval_n}"],
            "problems": res["problems"], "rates": res["rates"]}


def fmt(v, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def table(rows: list[dict], n: int) -> str:
    """The comparison as a markdown table, one column per framework."""
    lines = ["| | " + " | ".join(r["framework"] for r in rows) + " |",
             "|---|" + "---|" * len(rows)]
    spec = [("engine", "engine", "s"), ("seconds per step (mean)", "step_s", ".2f"),
            ("seconds per step (median)", "step_s_median", ".2f"),
            ("  generation", "generation_s", ".2f"), ("  reward (sandbox)", "reward_s", ".2f"),
            ("  update", "update_s", ".2f"), ("  other (sync, ...)", "other_s", ".2f"),
            ("peak RSS, trainer process (MB)", "peak_rss_mb", ".0f"),
            ("peak PSS, whole process tree (MB)", "peak_pss_tree_mb", ".0f"),
            ("peak anonymous PSS, whole process tree (MB)", "peak_anon_tree_mb", ".0f"),
            ("steps", "steps", "d"),
            ("pass@1 before", "pass@1_before", ".3f"), ("pass@1 after", "pass@1_after", ".3f"),
            ("pass@1 gain (points)", "gain_points", "+.1f"),
            (f"pass@{n} before", "pass@n_before", ".3f"),
            (f"pass@{n} after", "pass@n_after", ".3f"),
            ("train reward, last third", "reward_last_third", ".3f"),
            ("entropy, last third", "entropy_last_third", ".3f")]
    for label, key, s in spec:
        lines.append(f"| {label} | " + " | ".join(fmt(r.get(key), s) for r in rows) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- several seeds

# What makes two rows the same arm: the framework, its engine and the knobs that change what
# it does (label, setting).
ARM_KNOBS = {"grpo.py": (("prompts", "ours_prompt_order"), ("adv eps", "ours_adv_eps")),
             "TRL": (("prompts", "trl_prompt_order"),)}
COMBINED = ["step_s", "step_s_median", "generation_s", "reward_s", "update_s", "peak_rss_mb",
            "peak_pss_tree_mb", "peak_anon_tree_mb",
            "pass@1_before", "pass@1_after", "gain_points", "pass@n_before", "pass@n_after",
            "reward_last_third", "entropy_last_third"]
# The settings every combined row must share (else the seeds are not one experiment).
SHARED = ("model", "train_data", "eval_data", "max_problems", "max_eval_problems", "steps",
          "prompts_per_step",
          "group_size", "lr", "warmup_steps", "max_new_tokens", "micro_batch", "eval_n",
          "eval_engine", "cpu_threads")


def arm_name(row: dict, settings: dict) -> str:
    """e.g. 'grpo.py, vllm, prompts replacement, adv eps 1e-06' or 'TRL 1.16.0 GRPOTrainer,
    hf generate, prompts epoch'."""
    knobs = ARM_KNOBS["TRL" if row["framework"].startswith("TRL") else "grpo.py"]
    return ", ".join([row["framework"], row["engine"],
                      *(f"{label} {settings.get(key)}" for label, key in knobs)])


def combine(reports: list[dict], per_seed_model: bool = False) -> list[dict]:
    """Bench reports (each one seed's bench_vs_trl.json) -> one entry per arm, in first-seen
    order: {"arm", "seeds", "commands", and per COMBINED key {"mean", "std", "n"}}.
    Raises ValueError when the reports differ in a SHARED setting or repeat a seed in an arm;
    per_seed_model: the warm start (--model) may differ, one per seed, but then every report
    of one seed must name the same one (both frameworks start from it within a report)."""
    first = reports[0]["settings"]
    shared = [k for k in SHARED if not (per_seed_model and k == "model")]
    arms: dict[str, dict] = {}
    model_of_seed: dict = {}
    for rep in reports:
        st = rep["settings"]
        differ = [k for k in shared if st.get(k) != first.get(k)]
        if per_seed_model and model_of_seed.setdefault(st["seed"], st["model"]) != st["model"]:
            differ.append(f"model (seed {st['seed']} also has {model_of_seed[st['seed']]})")
        if differ:
            raise ValueError(f"{rep['command']}: differs from {reports[0]['command']} in "
                             f"{', '.join(differ)}: not one experiment")
        for row in rep["rows"]:
            arm = arms.setdefault(arm_name(row, st), {"rows": [], "seeds": [], "commands": []})
            if st["seed"] in arm["seeds"]:
                raise ValueError(f"{arm_name(row, st)}: seed {st['seed']} given twice")
            arm["rows"].append(row)
            arm["seeds"].append(st["seed"])
            arm["commands"].append(rep["command"])
    return [{"arm": name, "seeds": v["seeds"], "commands": v["commands"],
             **{k: mean_std([r[k] for r in v["rows"] if r.get(k) is not None])
                for k in COMBINED}} for name, v in arms.items()]


def combined_table(arms: list[dict]) -> str:
    """One row per arm: mean +- standard error over its seeds (sample std / sqrt(n))."""
    def cell(d, spec):
        if d["mean"] is None:
            return "-"
        se = None if d["std"] is None else d["std"] / math.sqrt(d["n"])
        return format(d["mean"], spec) + ("" if se is None else " ± " +
                                          format(se, spec.lstrip("+")))
    cols = [("s/step", "step_s", ".2f"), ("gen / reward / update s", None, None),
            ("peak RSS MB (trainer)", "peak_rss_mb", ".0f"),
            ("peak PSS MB (process tree)", "peak_pss_tree_mb", ".0f"),
            ("peak anon MB (process tree)", "peak_anon_tree_mb", ".0f"),
            ("pass@1 before", "pass@1_before", ".3f"),
            ("pass@1 after", "pass@1_after", ".3f"), ("gain (points)", "gain_points", "+.1f"),
            ("pass@n after", "pass@n_after", ".3f"),
            ("entropy, last third", "entropy_last_third", ".3f")]
    lines = ["| arm | seeds | " + " | ".join(c for c, _, _ in cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for a in arms:
        vals = []
        for _, key, spec in cols:
            if key is None:
                vals.append(" / ".join(fmt(a[k]["mean"]) for k in
                                       ("generation_s", "reward_s", "update_s")))
            else:
                vals.append(cell(a[key], spec))
        lines.append(f"| {a['arm']} | {','.join(map(str, a['seeds']))} | " +
                     " | ".join(vals) + " |")
    return "\n".join(lines)


def paired_gain(reports: list[dict]) -> dict | None:
    """grpo.py's held-out pass@1 after RL minus TRL's, in points, paired: within a report
    both ran from one start with one seed and were scored on the same problems, so per seed
    d = mean over problems of (ours - TRL) (compare.paired), then mean +- se over seeds
    (compare.over_seeds). None when no report holds both frameworks' per-problem rates."""
    per_seed = []
    for rep in reports:
        rows = {r["framework"].split()[0]: r for r in rep["rows"] if "rates_after" in r}
        if "grpo.py" in rows and "TRL" in rows:
            d, _ = paired(rows["grpo.py"]["rates_after"], rows["TRL"]["rates_after"])
            per_seed.append(100 * d)
    return over_seeds(per_seed) if per_seed else None


def combine_main(a: argparse.Namespace) -> None:
    reports = []
    for path in a.combine:
        try:
            with open(path) as f:
                reports.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"bench_vs_trl.py --combine: cannot read {path}: {e}")
    try:
        arms = combine(reports, per_seed_model=a.per_seed_model)
    except ValueError as e:
        sys.exit(f"bench_vs_trl.py --combine: {e}")
    diff = paired_gain(reports)
    path = a.json or os.path.join(os.path.dirname(a.combine[0]), "combined.json")
    with open(path, "w") as f:
        json.dump({"inputs": a.combine, "arms": arms, "paired_gain_ours_minus_trl": diff},
                  f, indent=1)
    print(combined_table(arms))
    if diff is not None:
        se = "" if diff["se"] is None else f" ± {diff['se']:.1f}"
        print(f"held-out pass@1 after RL, grpo.py - TRL (paired by seed and problem): "
              f"{diff['mean']:+.1f}{se} points (per seed: "
              f"{', '.join(f'{v:+.1f}' for v in diff['seeds'])})")
    print(f"[bench] {len(arms)} arms from {len(reports)} reports -> {path}")


def main(argv=None) -> None:
    a = parse_args(argv)
    if a.combine:
        combine_main(a)
        return
    if not trl_installed() and (a.worker == "trl" or (a.worker is None and "trl" in a.frameworks)):
        print(INSTALL_HINT, file=sys.stderr)
        sys.exit(2)
    if a.worker:
        worker_main(a)
        return
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    start = warm_start(a)
    before = evaluate_checkpoint(a, start)
    print(f"[bench] start {start}: pass@1 {before['pass@1']:.3f} pass@{a.eval_n} "
          f"{before['pass@n']:.3f}", flush=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    rows = []
    for name in [f for f in a.frameworks.split(",") if f]:
        tree = run_command([sys.executable, os.path.abspath(__file__), *argv, "--model", start,
                            "--worker", name], f"{name} run", memory=True)
        with open(os.path.join(a.out, f"{name}.json")) as f:
            res = json.load(f)
        after = evaluate_checkpoint(a, res["checkpoint"])
        rows.append({"framework": res["framework"], "engine": res["engine"],
                     **summarize(res["per_step"]), "peak_rss_mb": res["peak_rss_mb"],
                     "peak_pss_tree_mb": tree["peak_pss_tree_held_mb"],
                     "peak_rss_tree_mb": tree["peak_rss_tree_held_mb"],
                     "peak_anon_tree_mb": tree["peak_anon_tree_held_mb"],
                     "wall_s": res["wall_s"], "pass@1_before": before["pass@1"],
                     "pass@1_after": after["pass@1"], "pass@n_before": before["pass@n"],
                     "pass@n_after": after["pass@n"],
                     "gain_points": 100 * (after["pass@1"] - before["pass@1"]),
                     "checkpoint": res["checkpoint"], "per_step": res["per_step"],
                     "rates_after": after["rates"]})
    report = {"command": "bench/bench_vs_trl.py " + " ".join(argv), "start": start,
              "eval_n": a.eval_n, "eval_problems": before["problems"],
              "rates_before": before["rates"],
              "settings": {k: v for k, v in vars(a).items() if k != "worker"},
              "load_average_at_end": os.getloadavg(), "wall_s": round(time.time() - t0, 1),
              "rows": rows}
    path = a.json or os.path.join(a.out, "bench_vs_trl.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(table(rows, a.eval_n))
    print(f"[bench] {len(rows)} runs, {report['wall_s']} s; table as JSON -> {path}")


if __name__ == "__main__":
    main()
