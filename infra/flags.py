"""The command line every trainer shares: the common flags and their presets, the number types
and checks of flag values, and main()'s wrapper that ends a user's mistake as one line
(entry_point)."""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
from collections.abc import Mapping

from transformers.utils import logging as hf_logging

from infra.engines import close_open_engines
from infra.errors import DataError, UserError
from infra.metrics import report_to_list
from infra.model import close_distributed, latest_checkpoint, read_trainer_state
from infra.samples import parse_limit

# Settings every method shares; each method's PRESETS add to these (merge_presets).
TINY_SFT_STEPS = 450   # the tiny model copies a statement's values only after 300-400 steps

COMMON_PRESETS = {
    # The CPU default: the shipped base model (models/base, base.py) on the base world of
    # world/tasks.py: RL on its rl split (3,614 problems it never saw, each drawn once), pass@1 on
    # its held-out eval split (1,338 problems, test parameters), with 4 samples a problem (the
    # standard error of pass@1 about 1 point) and 210 train problems beside (21 a family).
    "cpu": dict(eval_n=4, train_eval_problems=210),
    # A real run (run.sh on a GPU machine): AT-GRPO/DRIVE-like settings at 1.7B scale.
    "gpu": dict(model="Qwen/Qwen3-1.7B", train_data="apps,code_contests",
                eval_data="livecodebench", sft_steps=0, steps=200, prompts_per_step=64,
                group_size=8, max_new_tokens=4096, lr=1e-6, warmup_steps=10,
                micro_batch=4, temperature=1.0, eval_temperature=0.6, top_p=1.0,
                eval_n=4, max_problems=0, grad_checkpointing=True, save_every=20,
                test_timeout=6.0, logprob_chunk=512, prompt_order="epoch"),
}


def merge_presets(*layers: Mapping[str, dict]) -> dict[str, dict]:
    """{preset: settings} dicts, later layers overriding earlier ones key by key."""
    names = set(layers[0])
    if any(set(layer) != names for layer in layers):
        raise ValueError(f"every preset layer must name the presets {sorted(names)}")
    return {name: {k: v for layer in layers for k, v in layer[name].items()} for name in names}


def parse_flags(parser: argparse.ArgumentParser, presets: Mapping[str, dict], argv=None,
                tiny_sft_steps: int = TINY_SFT_STEPS):
    """Parse argv with the chosen --preset's settings as defaults (explicit flags win).

    --preset is read first by a parser of its own that knows no --help, so that `--help`
    (handled by the full parse) shows the defaults of the preset it is given with.
    --sft-steps left unset: tiny_sft_steps for --model tiny (it starts from scratch), else 0
    (the shipped base and real models start competent)."""
    preset_only = argparse.ArgumentParser(add_help=False)
    preset_only.add_argument("--preset", default="cpu")
    pre = preset_only.parse_known_args(argv)[0]
    # an unknown name: the full parser rejects it below with its one-line error
    parser.set_defaults(**presets.get(pre.preset, presets["cpu"]))
    args = parser.parse_args(argv)
    if args.sft_steps is None:
        args.sft_steps = tiny_sft_steps if args.model == "tiny" else 0
    check_common_flags(parser, args)
    return args


class FlagParser(argparse.ArgumentParser):
    """argparse with the errors of a user's flags as one line (no usage block), exit 2."""

    def error(self, message: str):
        exit_user_error(self.prog, message)


def is_main_process() -> bool:
    """Rank 0, or a plain `python x.py` (torchrun sets RANK before the process group exists)."""
    return int(os.environ.get("RANK", "0")) == 0


def exit_user_error(prog: str, message) -> None:
    """Print `prog: error: message` as one line on the main rank's stderr and exit 2."""
    if is_main_process():
        line = " ".join(str(message).split())
        print(f"{prog}: error: {line} (see {prog} --help)", file=sys.stderr, flush=True)
    sys.exit(2)


def number(kind=int, lo=None, hi=None, lo_open: bool = False, hi_open: bool = False,
           also: tuple = ()):
    """An argparse type for finite `kind` values in [lo, hi] ("(" / ")" ends with lo_open /
    hi_open), or one of `also` (0 for greedy decoding): `--steps -1` then fails at parse time
    with "must be >= 0, got -1", and `--lr inf` or `nan` with "must be a finite number > 0"."""
    parts = []
    if lo is not None:
        parts.append(f"{'>' if lo_open else '>='} {lo}")
    if hi is not None:
        parts.append(f"{'<' if hi_open else '<='} {hi}")
    rule = " and ".join(parts) + "".join(f" (or {v})" for v in also)

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if value in also:
            return value
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number {rule}, got {text}")
        too_low = lo is not None and (value <= lo if lo_open else value < lo)
        too_high = hi is not None and (value >= hi if hi_open else value > hi)
        if too_low or too_high:
            raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


COUNT = number(int, 0)                       # 0, 1, 2, ...
POSITIVE_INT = number(int, 1)                # 1, 2, ...
POSITIVE = number(float, 0, lo_open=True)    # > 0
NON_NEGATIVE = number(float, 0)              # >= 0
SHARE = number(float, 0, 1)                  # [0, 1]
# numpy's and vLLM's seeds are 32-bit: torch takes more, np.random.seed refuses it
SEED = number(int, 0, 2**32 - 1)
# AdamW moves each weight by about lr a step: from lr 1 on no model survives a step
LEARNING_RATE = number(float, 0, 1, lo_open=True)
# vLLM raises a temperature below 0.01 to 0.01, so its samples would not follow the
# log-probs the trainer computes at the lower one
MIN_TEMPERATURE = 0.01
TEMPERATURE = number(float, MIN_TEMPERATURE)
GREEDY_OR_TEMPERATURE = number(float, MIN_TEMPERATURE, also=(0.0,))
# seconds a test may run; the sandbox's own cap is 1e6, and coverage runs get 5x the limit
TEST_TIMEOUT = number(float, 0, 3600, lo_open=True)


def sample_count(text: str) -> int:
    """--log-samples: a count, or -1 / all (infra.samples.parse_limit), at parse time."""
    try:
        return parse_limit(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def check_common_flags(parser: argparse.ArgumentParser, args) -> None:
    """Flag combinations that cannot work, caught before anything is loaded."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world % args.engine_tp:
        parser.error(f"--engine-tp {args.engine_tp} must divide the number of ranks ({world}); "
                     "launch with torchrun --nproc_per_node a multiple of it")
    if args.max_model_len is not None and args.max_model_len <= args.max_new_tokens:
        parser.error(f"--max-model-len {args.max_model_len} leaves no room for the prompt with "
                     f"--max-new-tokens {args.max_new_tokens}; raise it or leave it unset")
    if args.resume and args.overwrite:
        parser.error("--resume continues the run in --out and --overwrite replaces it; "
                     "pass one of them")
    try:
        report_to_list(args.report_to)
    except UserError as e:
        parser.error(str(e.code))
    ckpt = latest_checkpoint(args.out) if args.resume else None
    if ckpt is not None:   # load_checkpoint checks this too, but only after the model is built
        written_by = read_trainer_state(ckpt).get("world", world)
        if written_by != world:
            parser.error(f"--resume: {ckpt} was written by {written_by} ranks and this run has "
                         f"{world}; resume with torchrun --nproc_per_node {written_by} (the "
                         "optimizer state is sharded)")
        read_trainer_state(ckpt, ("step", "rng"))   # what trainer.resume reads


def new_parser(prog: str, description: str) -> argparse.ArgumentParser:
    return FlagParser(prog=prog, description=description,
                      formatter_class=argparse.ArgumentDefaultsHelpFormatter)


def add_common_flags(p: argparse.ArgumentParser, name: str, *, aggregations: tuple) -> None:
    """The flags every trainer reads: model, data, engine, rollouts, update, warm start,
    evaluation, sandbox, run. `name` sets the default --out (runs/<name>); aggregations are
    --agg's choices (losses.AGGREGATIONS)."""
    p.add_argument("--preset", choices=sorted(COMMON_PRESETS), default="cpu",
                   help="defaults for a setting; explicit flags override them")
    g = p.add_argument_group("model and data")
    g.add_argument("--model", default="base",
                   help="'base' (the shipped CPU base model, models/base), 'tiny' (an untrained "
                        "Qwen2-architecture model built here, given --sft-steps of SFT), a hub "
                        "id or a local path (e.g. Qwen/Qwen3-1.7B as in AT-GRPO)")
    g.add_argument("--model-seed", type=SEED, default=0, help="seed of the tiny model's weights")
    g.add_argument("--train-data", default="tasks:rl",
                   help="comma list of NAME or NAME:PATH (apps, apps_plus, code_contests, "
                        "livecodebench, builtin, tasks:train|test|heldout: the procedural "
                        "testbed's splits, tasks:train@classify+simulate: some families "
                        "only, tasks:length_train|length_test: the chain families, 1-3 "
                        "or 4-6 guarded steps); no path = Hugging Face hub")
    g.add_argument("--eval-data", default="tasks:eval",
                   help="same format as --train-data; the same value as --train-data evaluates "
                        "on the training problems; tasks:test holds instances never trained on")
    g.add_argument("--max-problems", type=COUNT, default=0,
                   help="keep the first N training problems (0 = all); the eval set too, "
                        "unless --max-eval-problems is given")
    g.add_argument("--max-eval-problems", type=COUNT, default=None,
                   help="keep the first N eval problems (0 = all; default: --max-problems)")
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"],
                   help="generation engine: vLLM (auto: when it imports and starts) or "
                        "transformers' generate (always works)")
    g.add_argument("--engine-tp", type=POSITIVE_INT, default=1,
                   help="vLLM tensor-parallel size: consecutive ranks share one engine "
                        "(1 for 1.7B; 2 for 8B on 40-48 GB GPUs; 4 for 32B)")
    g.add_argument("--engine-mem", type=number(float, 0, 1, lo_open=True), default=0.4,
                   help="vLLM gpu_memory_utilization: share of the device's memory it reserves")
    g.add_argument("--sleep-level", type=int, choices=[1, 2], default=1,
                   help="vLLM sleep between generation and update on GPU: 1 offloads weights, "
                        "2 discards them (they are reloaded by the weight sync)")
    g.add_argument("--max-model-len", type=POSITIVE_INT, default=None,
                   help="vLLM context length (default: prompt budget + --max-new-tokens)")
    g.add_argument("--engine-kv-cache-gib", type=number(float, 0, 1024, lo_open=True),
                   default=None,
                   help="vLLM on CPU: its KV cache in GiB (on GPU --engine-mem decides). "
                        "Default: sized to the work (engines.kv_cache_bytes): the most "
                        "sequences one generation runs (a step's prompts x --group-size, or an "
                        "evaluation's, at most 256) x the longest prompt + --max-new-tokens x "
                        "1.25, at least 64 MiB, at most 1 GiB (the CPU default: 0.26 GiB; the "
                        "start line shows it)")
    g = p.add_argument_group("rollouts")
    g.add_argument("--steps", type=COUNT, default=40,
                   help="RL optimizer steps (DRIVE stage 1: 32 at their scale)")
    g.add_argument("--prompts-per-step", type=POSITIVE_INT, default=8,
                   help="prompts per step over all ranks (AT-GRPO: 128)")
    g.add_argument("--group-size", type=POSITIVE_INT, default=16,
                   help="samples per prompt G (code recipes 8-16; DRIVE stage 2: 64)")
    g.add_argument("--prompt-order", choices=["epoch", "replacement"], default="epoch",
                   help="epoch: the steps walk a fresh permutation of the train problems each "
                        "epoch, the partial batch dropped (TRL's sampler, the data loaders' "
                        "standard; on the CPU default's 3,614 fresh problems no problem is "
                        "drawn twice); replacement: each step's prompts drawn uniformly")
    g.add_argument("--temperature", type=TEMPERATURE, default=1.0,
                   help="sampling temperature, also applied to the trainer's logits (papers: 1.0)")
    g.add_argument("--top-p", type=number(float, 0, 1, lo_open=True), default=1.0,
                   help="nucleus sampling (1.0 keeps sampler and trainer log-probs consistent)")
    g.add_argument("--max-new-tokens", type=POSITIVE_INT, default=112,
                   help="response budget (AT-GRPO 4096; DRIVE 24k in stage 1)")
    g.add_argument("--max-train-tests", type=COUNT, default=0,
                   help="RL rewards on each train problem's first N tests only, always the "
                        "same N (APPS+ ships 3 for training; StepCoder's FGO acts on the code "
                        "they leave unexecuted); evaluation uses every test; 0 = all")
    g.add_argument("--train-tests", choices=["first", "drawn"], default="first",
                   help="which N tests --max-train-tests keeps: first: as stored (the base "
                        "world orders them so that the first 3 run two paths); drawn: N drawn "
                        "per problem by a Random seeded with its id, fixed over the run, not "
                        "chosen for what they run (APPS+'s train tests). The evaluation's "
                        "train-style pass@1 reads the same N")
    g.add_argument("--reward", choices=["binary", "fraction"], default="binary",
                   help="binary: 1 when every test passes; fraction: share of tests passed "
                        "(PPO: what the curricula see; its reward is StepCoder's table)")
    g = p.add_argument_group("update")
    g.add_argument("--agg", choices=aggregations, default="token-mean",
                   help="loss aggregation: token-mean (DAPO), seq-mean-token-mean (GRPO), "
                        "seq-mean-token-sum-norm (Dr. GRPO)")
    g.add_argument("--eps-low", type=number(float, 0, 1, hi_open=True), default=0.2,
                   help="lower clip (PPO/GRPO 0.2)")
    g.add_argument("--eps-high", type=NON_NEGATIVE, default=0.28,
                   help="upper clip (DAPO clip-higher 0.28; PPO 0.2)")
    g.add_argument("--lr", type=LEARNING_RATE, default=5e-5,
                   help="RL learning rate (AT-GRPO 1e-6 at 1.7B-8B)")
    g.add_argument("--min-lr-ratio", type=SHARE, default=1.0,
                   help="cosine floor as a share of --lr (1.0 = constant after warm-up)")
    g.add_argument("--weight-decay", type=NON_NEGATIVE, default=0.0,
                   help="AdamW weight decay (AT-GRPO 0.01)")
    g.add_argument("--warmup-steps", type=COUNT, default=3,
                   help="linear LR warm-up steps (SFT and RL)")
    g.add_argument("--max-grad-norm", type=POSITIVE, default=1.0, help="gradient clipping")
    g.add_argument("--mini-batches", type=POSITIVE_INT, default=1,
                   help="optimizer steps per pass over a rollout batch, each on its own slice "
                        "(verl's ppo_mini_batch_size; DAPO-style runs: 4-16 steps a batch). "
                        "Above 1 the later steps are off-policy: ratio and clip act")
    g.add_argument("--epochs", type=POSITIVE_INT, default=1,
                   help="passes over each rollout batch (TRL's num_iterations; StepCoder's PPO "
                        "epochs); above 1 off-policy like --mini-batches")
    g.add_argument("--tis-cap", type=NON_NEGATIVE, default=0.0,
                   help="truncated importance sampling: weight each token's policy loss by "
                        "min(exp(old trainer logp - sampler logp), C) to correct for the "
                        "engine's different numerics (bf16 vLLM on GPU; verl/TRL use C = 2); "
                        "0 = off. The mismatch is logged either way (sampler_logp_diff)")
    g.add_argument("--micro-batch", type=POSITIVE_INT, default=8,
                   help="sequences per forward/backward (gradient accumulation; the step's sum "
                        "does not depend on it). Sorted by length, so smaller means less "
                        "padding (bench/bench_update.py measures it)")
    g.add_argument("--grad-checkpointing", action="store_true",
                   help="recompute activations in backward")
    g.add_argument("--logprob-chunk", type=POSITIVE_INT, default=256,
                   help="positions per chunk of the log-prob computation")
    g = p.add_argument_group("warm start and evaluation")
    g.add_argument("--sft-steps", type=COUNT, default=None,
                   help="supervised steps on reference solutions before RL (0 = none; default: "
                        f"{TINY_SFT_STEPS} for --model tiny, which starts from scratch, else 0)")
    g.add_argument("--sft-lr", type=LEARNING_RATE, default=1e-3, help="SFT learning rate")
    g.add_argument("--sft-batch", type=POSITIVE_INT, default=32,
                   help="SFT examples per step over all ranks")
    g.add_argument("--eval-n", type=COUNT, default=8,
                   help="samples per problem for pass@1/pass@n (0 = no evaluation)")
    g.add_argument("--eval-temperature", type=GREEDY_OR_TEMPERATURE, default=1.0,
                   help="evaluation temperature (AT-GRPO 0.6; 0 = greedy, with --eval-n 1)")
    g.add_argument("--eval-only", action="store_true",
                   help="evaluate (after --sft-steps, if any) and stop")
    g.add_argument("--eval-every", type=COUNT, default=0,
                   help="also evaluate the held-out set every N RL steps (metrics.jsonl rows "
                        "phase=eval, when=step_N: the learning curve); 0 = before/after only")
    g.add_argument("--train-eval-problems", type=number(int, -1), default=-1,
                   help="before and after RL also evaluate N train problems (a fixed random "
                        "sample), for the train-split figure beside the held-out one "
                        "(summary.json train_pass_at_1_*); -1 = as many as the eval set when "
                        "--eval-data differs from --train-data, 0 = off")
    g = p.add_argument_group("sandbox")
    g.add_argument("--test-timeout", type=TEST_TIMEOUT, default=2.0, help="seconds per test")
    g.add_argument("--sandbox-workers", type=POSITIVE_INT, default=None,
                   help="sandbox processes (default: one per core)")
    g.add_argument("--overlap-reward", action="store_true",
                   help="judge each prompt's completions in the sandbox as soon as the engine "
                        "finishes them, while it generates the rest: the same rollouts, and "
                        "time/reward counts only the wait after generation (grpo.py, "
                        "ppo_fgo.py). It pays where generation leaves cores idle (a GPU); on a "
                        "CPU-only machine both phases need every core and the step is slower "
                        "(the CPU default: +0.6 s, bench/results/phase-timers)")
    g = p.add_argument_group("run")
    g.add_argument("--seed", type=SEED, default=0, help="seed for sampling, data order and SFT")
    g.add_argument("--cpu-threads", type=COUNT, default=0,
                   help="torch threads per process on CPU; 0 = torch's default: "
                        "OMP_NUM_THREADS when set, else every core. Trainings that share the "
                        "cores want 1 (OMP_NUM_THREADS=1, as bench/ablate.py sets)")
    g.add_argument("--out", default=f"runs/{name}",
                   help="output dir: metrics.jsonl, summary.json, step_N/ checkpoints")
    g.add_argument("--save-every", type=COUNT, default=0,
                   help="checkpoint every N steps and at the end (0 = never)")
    g.add_argument("--resume", action="store_true", help="continue from <out>/latest")
    g.add_argument("--overwrite", action="store_true",
                   help="replace the earlier run in --out (its metrics.jsonl, summary.json, "
                        "checkpoints); without it a new run refuses an --out that holds one")
    g.add_argument("--log-samples", type=sample_count, default=4,
                   help="samples written to <out>/samples.jsonl at each RL step and each "
                        "evaluation, spread over the step's (AT-GRPO: episodes, each with all "
                        "its candidates): completion, program, verdict, first failing test, "
                        "reward, advantage, FGO's masked lines, the CCCS stage; N, 0 = none, "
                        "-1 or all = every one. Read them with ./run.sh show <out>")
    g.add_argument("--report-to", default="none",
                   help="also send metrics to: none, tensorboard, wandb or both "
                        "(tensorboard,wandb); optional packages, wandb offline unless "
                        "WANDB_MODE=online")


def add_adv_scale_flag(g) -> None:
    """--adv-scale, the normaliser of the group advantages (losses.group_advantages): GRPO's
    and AT-GRPO's (PPO's advantages come from GAE)."""
    g.add_argument("--adv-scale", choices=["group", "batch", "none"], default="group",
                   help="advantage normalisation: group std (GRPO), batch std, none (Dr. GRPO)")


# ----------------------------------------------------------------------------- flags -> keywords
# What the shared helpers take, by name, from the common flags: the helpers' signatures say
# what they read, and a method's step passes these down.

def judging(args) -> dict:
    """rollouts.score_completions' sandbox settings: reward (--reward), test_timeout
    (--test-timeout), workers (--sandbox-workers)."""
    return dict(reward=args.reward, test_timeout=args.test_timeout,
                workers=args.sandbox_workers)


def sampling(args) -> dict:
    """rollouts.generate_and_score's settings for RL's rollouts: group_size, temperature,
    top_p, max_new_tokens, max_train_tests, overlap (--overlap-reward), and judging's."""
    return dict(group_size=args.group_size, temperature=args.temperature, top_p=args.top_p,
                max_new_tokens=args.max_new_tokens, max_train_tests=args.max_train_tests,
                overlap=args.overlap_reward, **judging(args))


def evaluation(args) -> dict:
    """rollouts.evaluate's settings for the held-out pass@k: n (--eval-n), temperature
    (--eval-temperature), top_p, max_new_tokens, seed, overlap (--overlap-reward), train_tests
    (--max-train-tests: pass@1 on the first N tests beside every test), and judging's."""
    return dict(n=args.eval_n, temperature=args.eval_temperature, top_p=args.top_p,
                max_new_tokens=args.max_new_tokens, seed=args.seed,
                overlap=args.overlap_reward, train_tests=args.max_train_tests,
                **judging(args))


def optimizer(args) -> dict:
    """trainer.policy_optimizer's settings: lr, weight_decay, warmup_steps, steps (the
    schedule's length), min_lr_ratio."""
    return dict(lr=args.lr, weight_decay=args.weight_decay, warmup_steps=args.warmup_steps,
                steps=args.steps, min_lr_ratio=args.min_lr_ratio)


def sft(args) -> dict:
    """actor.sft's settings: steps, lr, batch (--sft-steps, --sft-lr, --sft-batch),
    warmup_steps, micro_batch, max_grad_norm, seed."""
    return dict(steps=args.sft_steps, lr=args.sft_lr, batch=args.sft_batch,
                warmup_steps=args.warmup_steps, micro_batch=args.micro_batch,
                max_grad_norm=args.max_grad_norm, seed=args.seed)


def off_policy(args) -> bool:
    """More than one optimizer step per rollout batch (--mini-batches, --epochs): the loss
    needs the sampling policy's old log-probs (a no-grad pass before the first step) instead
    of logp.detach()."""
    return args.mini_batches > 1 or args.epochs > 1


@contextlib.contextmanager
def entry_point():
    """The body of every trainer's main(): `with flags.entry_point(): train(parse_args(argv))`
    quiets the libraries' own progress output, and leaves the process group at the end.

    A mistake the user can fix (DataError, UserError or any SystemExit with a
    message; argparse's through FlagParser) ends as one line on the main rank's stderr and
    exit status 2; anything else is a bug and keeps its traceback."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")   # keep our progress lines readable
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    finished, user_error = False, None
    try:
        yield
        finished = True
    except DataError as e:
        user_error = str(e)
    except SystemExit as e:
        if not isinstance(e.code, str):   # argparse's exits (--help, FlagParser.error)
            raise
        user_error = e.code               # UserError and every SystemExit("message")
    finally:
        close_open_engines(wait=finished)   # after a failure; a finished run closed its own
        close_distributed(wait=finished)
    if user_error is not None:
        exit_user_error(os.path.basename(sys.argv[0]) or "trainer", user_error)


def run_entry_point(train_fn, parse_fn, argv=None):
    """main() as one call (base.py, agents.py): entry_point() around train_fn(parse_fn(argv))."""
    with entry_point():
        train_fn(parse_fn(argv))
