"""The CPU base model: trained once by supervised learning on a large fresh corpus, shipped in
models/base, so that every CPU run starts from one competent policy and spends its minutes
on RL (`--model base`, the CPU default of every trainer).

Why a base. The methods of the seeds start from pretrained models with latent skill; a CPU
run that re-learns a small model from scratch each time starts RL from a different, weak
policy per seed. Here the base is made once, for as long as it needs, on instances RL never
sees, and RL then acts on problems the base solves only sometimes.

The corpus (corpus_examples), all from tasks.generate_base's "corpus" split (train
parameters only; never an instance of rl or eval, nor of the first testbed's test/heldout):
    coder       prompt -> reference program, every corpus instance
    completion  StepCoder's CCCS prompt, the answer opened at a stage's prefix -> the rest of
                the reference (1 in COMPLETION_EVERY instances that have split points)
    roles       AT-GRPO's prompts (agents.warm_start_pairs): the tester's statement ->
                ground-truth tests, the coder's prompt with and without tests shown ->
                the reference (1 in ROLES_EVERY instances)
    repair      AT-GRPO's turn-1 prompts (agents.repair_states, 1 in the recipe's
                repair_every instances): a wrong program shown its real mismatches, the
                reference shown one wrong test or (repair-v2) only wrong tests -> the right
                program and tests
    builtin     the hand-written problems' solutions, BUILTIN_REPEAT times
The family tasks.RL_ONLY_FAMILY (piecewise: classify whose bodies are arithmetic) is never
in the corpus: the base meets it only by combining what it knows, RL from reward alone.

Training: the project's supervised path (actor.update with actor.sft_loss, token-mean
NLL of the answers), AdamW with warm-up and cosine decay, batch --batch drawn uniformly from
the corpus by a Random seeded with (seed, step), so a run resumed from any checkpoint
(--resume) takes the same steps as one that never stopped. Every --eval-every steps: pass@1
and pass@8 at T = 1 on a fixed sample of the "rl" split (instances the base has not seen,
and not the held-out eval set), written to metrics.jsonl and checkpointed.

The stopping rule, fixed before the run (stopping_point): of the evaluated checkpoints, the
last whose validation pass@1 is in [0.2, 0.5] and whose pass@8 >= 1.6 x pass@1 (room for RL
to sharpen), with at least two families solved only sometimes (0.05 <= pass@1 <= 0.6).
None such (the ratio stays below 1.6 when whole families are solved always or never): the
checkpoint in the pass@1 band with the most room, pass@8 - pass@1, reported as breaking the
rule.

    python -m models.make_base --out runs/base --corpus-only   # the corpus alone, its counts
    python -m models.make_base --out runs/base         # train (add --resume to continue)
    python -m models.make_base --out runs/base --export models/base
        # pick the checkpoint, evaluate it on the held-out eval split, write the card
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import random
import re
import shutil
import time

import torch
from safetensors.torch import load_file

import actor
import agents
import cccs
import data
import rollouts
from infra import evalstats, flags, metrics
from infra.engines import make_engine
from infra.errors import UserError
from infra.model import (
    PolicyLogprobs,
    init_distributed,
    latest_checkpoint,
    load_causal_lm,
    load_checkpoint,
    load_tokenizer,
    save_checkpoint,
    seed_everything,
    shard_model,
    warmup_cosine,
)
from world import sources, tasks
from world.tiny import build_tiny_model

COMPLETION_EVERY = 3     # one CCCS completion example per 3 instances with split points
ROLES_EVERY = 10         # AT-GRPO turn-0 role examples for one instance in 10
BUILTIN_REPEAT = 4       # the 51 hand-written problems are few: weight them up
ROLE_MAX_TESTS = 2       # agents.py's CPU --max-tests: the tester's prompt names the number
# A recipe names two things the corpus teaches.
# - AT-GRPO's repair turns (agents.repair_states): for one instance in repair_every, with the
#   wrong-test states named.
# - CCCS's ladder: the CCCS family's completions start at one of its last cccs_rungs
#   conditionals (cccs.stage_starts' rungs "every"), drawn per instance. With 1 the base
#   completes chain_long from its last conditional (0.58-0.62) but not from the one before
#   (0.01-0.03: it writes the statement's last step again, or none;
#   bench/results/stepcoder-gates), so no ladder of one-conditional rungs can be climbed from
#   it. 2 teaches continuing from where the prefix stops, while the whole program (4-6
#   steps) stays out of the corpus for exploration to find.
# A card names its recipe (card.json's corpus_recipe; a card without one: repair-v1, the
# recipe of the base in models/base).
CORPUS_RECIPES = {
    # the reference shown with its first test wrong; "passed 0 of 2" then meant "rewrite"
    "repair-v1": dict(repair_every=10, wrong_tests=("one",), cccs_rungs=1),
    # also every shown test wrong, each problem's right program shown the wrong one's pass
    # count (agents.mirrored), so the count tells the coder nothing; one instance in 2 (2
    # states each), so that the coder's prompts show tests about as often as not, as the CPU
    # game's do (2 turns in parallel order: tests from turn 1 on)
    "repair-v2": dict(repair_every=2, wrong_tests=("one", "all"), cccs_rungs=2),
}
CORPUS_RECIPE = "repair-v2"
REPAIR_EVERY = CORPUS_RECIPES[CORPUS_RECIPE]["repair_every"]
KINDS = ("coder", "completion", "roles", "repair", "builtin")
VALID_PER_FAMILY = 24    # the stopping rule's validation sample, per family of the rl split
RULE = dict(lo=0.2, hi=0.5, ratio=1.6, sometimes=(0.05, 0.6), families=2)


# ----------------------------------------------------------------------------- the corpus

def rung_start(code: str, rungs: int, key: str) -> int:
    """Where a CCCS-family completion example starts: one of the program's last `rungs`
    conditionals (cccs.stage_starts' rungs "every", the whole program left out), drawn by
    `key`. Only CCCS's easiest stages are taught: writing the whole program stays what
    exploration has to find."""
    starts = cccs.stage_starts(code, rungs="every")[:-1][:rungs]
    return starts[0] if len(starts) == 1 else \
        starts[random.Random(f"{key}-rung").randrange(len(starts))]


@functools.lru_cache(maxsize=2)
def _corpus_json(seed: int, recipe: str) -> str:
    repair_every, wrong_tests, cccs_rungs = (CORPUS_RECIPES[recipe][k] for k in (
        "repair_every", "wrong_tests", "cccs_rungs"))
    problems = [data.Problem(**row) for row in tasks.generate_base(seed)["corpus"]]
    out = []
    with_points = 0
    role_problems, repair_problems = [], []
    for i, p in enumerate(problems):
        code = p.solutions[0]
        starts = [s for s in cccs.stage_starts(code) if s is not None]
        if p.metadata["family"] == tasks.CCCS_FAMILY:
            prefix, rest = cccs.make_subtask(code, rung_start(code, cccs_rungs, f"{seed}-{p.id}"))
            out.append(("completion", rollouts.prompt_text(None, p, prefix),
                        rest.rstrip("\n") + "\n```"))
            continue
        out.append(("coder", rollouts.prompt_text(None, p), data.format_answer(code)))
        if starts:
            if with_points % COMPLETION_EVERY == 0:
                start = starts[random.Random(f"{seed}-{p.id}").randrange(len(starts))]
                prefix, rest = cccs.make_subtask(code, start)
                out.append(("completion", rollouts.prompt_text(None, p, prefix),
                            rest.rstrip("\n") + "\n```"))
            with_points += 1
        if i % ROLES_EVERY == 0:
            role_problems.append(p)
        if i % repair_every == 1:
            repair_problems.append(p)
    both = ("coder", "tester")
    out += [("roles", data.render_prompt(None, m), a)
            for m, a in agents.warm_start_pairs(role_problems, both, ROLE_MAX_TESTS)]
    repairs = agents.repair_states(repair_problems, ROLE_MAX_TESTS, seed=seed,
                                   wrong_tests=wrong_tests)
    out += [("repair", data.render_prompt(None, m), a)
            for m, a in agents.warm_start_pairs([], both, ROLE_MAX_TESTS, repairs)]
    for _ in range(BUILTIN_REPEAT):
        out += [("builtin", rollouts.prompt_text(None, p), data.format_answer(s))
                for p in sources.builtin_problems() for s in p.solutions]
    return json.dumps(out)


def corpus_pairs(seed: int = 0, recipe: str = CORPUS_RECIPE) -> list[tuple[str, str, str]]:
    """(kind, prompt text, answer text) of every corpus example, in a fixed order, the
    prompts exactly as the trainers render them for the base's tokenizer (no chat template):
      coder       a corpus problem's prompt -> its reference (every instance but the CCCS
                  family's)
      completion  StepCoder's CCCS prompt, the answer opened at a stage's prefix -> the rest
                  (1 in COMPLETION_EVERY instances with split points; every instance of the
                  CCCS family, at its last stage only)
      roles       AT-GRPO's turn-0 prompts (agents.warm_start_pairs, 1 instance in
                  ROLES_EVERY): the tester's -> easy ground-truth tests, the coder's with and
                  without them shown -> the reference
      repair      AT-GRPO's turn-1 prompts (agents.repair_states, 1 instance in the recipe's
                  repair_every): a near-miss program with its real mismatches -> the reference
                  and the same tests; the reference with one test wrong (repair-v2: or with
                  every test wrong, as the wrong program passed some or none) -> the same
                  program and the right tests
      builtin     the hand-written problems' solutions, BUILTIN_REPEAT times
    recipe: a CORPUS_RECIPES name. The repair turns run the sandbox (repair-v1 about 2 minutes
    on the 2-core machine, repair-v2 about 7); the result is cached per (seed, recipe)."""
    return [tuple(x) for x in json.loads(_corpus_json(seed, recipe))]


def kind_counts(pairs) -> dict[str, int]:
    return {k: sum(1 for p in pairs if p[0] == k) for k in KINDS}


def role_counts(pairs) -> dict[str, int]:
    """Examples per role and what the prompt shows: the coder's without tests (the single-agent
    prompt, the built-in problems, the game's bare turn 0) and with the tester's tests shown
    (turn 0 in tester-first order, the repair turns), the tester's."""
    out = {"coder_without_tests": 0, "coder_with_tests": 0, "tester": 0}
    for kind, prompt, _ in pairs:
        if kind == "completion":
            continue
        if "You are the tester" in prompt:
            out["tester"] += 1
        else:
            out["coder_with_tests" if "The tester's tests:" in prompt
                else "coder_without_tests"] += 1
    return out


def corpus_texts(pairs) -> list[str]:
    """Texts the base's tokenizer is trained on: every prompt and answer of the corpus."""
    return [t for _, prompt, answer in pairs for t in (prompt, answer)]


def corpus_examples(tokenizer, pairs) -> list[actor.Sample]:
    """The pairs tokenized: prompt ids, answer ids + EOS (the loss is on the answer only)."""
    prompts = tokenizer([p for _, p, _ in pairs])["input_ids"]
    answers = tokenizer([a for _, _, a in pairs])["input_ids"]
    return [actor.Sample(p, a + [tokenizer.eos_token_id], 1.0)
            for p, a in zip(prompts, answers)]


def corpus_digest(pairs) -> str:
    """sha256 of the corpus (kind, prompt, answer) in order: the card names the data exactly."""
    h = hashlib.sha256()
    for kind, prompt, answer in pairs:
        h.update(json.dumps([kind, prompt, answer]).encode())
    return h.hexdigest()


def load_corpus(out: str, seed: int, recipe: str = CORPUS_RECIPE) -> list[tuple[str, str, str]]:
    """The corpus a run trains on, written to <out>/corpus.json by its first start and read
    back by every later one (a resume, or a copy of <out> on another machine): the repair
    turns need the sandbox, which only the first start runs. <out>/corpus_recipe.json names
    its seed and recipe; a later start that asks for others is a UserError."""
    path, made = os.path.join(out, "corpus.json"), os.path.join(out, "corpus_recipe.json")
    asked = {"corpus_seed": seed, "corpus_recipe": recipe}
    if os.path.exists(path):
        had = json.load(open(made)) if os.path.exists(made) else asked  # older runs: unnamed
        if had != asked:
            raise UserError(f"{path} was made with {had}, not {asked}: pass those flags to "
                            "continue this run, or a new --out")
        return [tuple(x) for x in json.load(open(path))]
    pairs = corpus_pairs(seed, recipe)
    with open(path + ".tmp", "w") as f:
        json.dump(pairs, f)
    os.replace(path + ".tmp", path)
    with open(made, "w") as f:
        json.dump(asked, f)
    return pairs


def build_corpus(args) -> None:
    """--corpus-only: <out>/corpus.json made (or read back) and its counts printed."""
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    pairs = load_corpus(args.out, args.corpus_seed, args.corpus_recipe)
    print(json.dumps({"corpus_recipe": args.corpus_recipe, "examples": len(pairs),
                      "kinds": kind_counts(pairs), "roles": role_counts(pairs),
                      "sha256": corpus_digest(pairs), "seconds": round(time.time() - t0)}))


def first_per_family(rows: list[dict], k: int) -> list:
    """The first k rows of each family, in the rows' order, as data.Problems."""
    taken: dict[str, int] = {}
    out = []
    for row in rows:
        f = row["metadata"]["family"]
        if taken.get(f, 0) < k:
            taken[f] = taken.get(f, 0) + 1
            out.append(data.Problem(**row))
    return out


def validation_problems(seed: int = 0) -> list:
    """The stopping rule's sample: the first VALID_PER_FAMILY of each family of the rl split."""
    return first_per_family(tasks.generate_base(seed)["rl"], VALID_PER_FAMILY)


# ----------------------------------------------------------------------------- the rule

def meets_rule(res: dict) -> bool:
    """pass@1 in [lo, hi], pass@8 >= ratio x pass@1, and >= `families` families in the
    'sometimes' band: the base leaves RL room to sharpen and problems to learn from."""
    p1, pk = res["pass@1"], res[f"pass@{res['k']}"]
    lo, hi = RULE["sometimes"]
    sometimes = sum(lo <= v <= hi for v in res["pass@1_by_family"].values())
    return RULE["lo"] <= p1 <= RULE["hi"] and pk >= RULE["ratio"] * p1 \
        and sometimes >= RULE["families"]


def stopping_point(evals: list[dict]) -> tuple[dict, bool]:
    """The evaluation row the rule picks (the last that meets it) and whether one did.

    None meets it: of the rows with pass@1 in [lo, hi], the one with the most room for RL to
    sharpen into, pass@k - pass@1 in points (the latest on a tie); none in the band either:
    the last row."""
    good = [e for e in evals if meets_rule(e)]
    if good:
        return good[-1], True
    band = [e for e in evals if RULE["lo"] <= e["pass@1"] <= RULE["hi"]]
    if not band:
        return evals[-1], False
    return max(reversed(band), key=lambda e: e[f"pass@{e['k']}"] - e["pass@1"]), False


# ----------------------------------------------------------------------------- training

def eval_settings(args) -> dict:
    """rollouts.evaluate's settings but n and temperature: top_p 1, binary reward, 2 s a
    test, the run's --max-new-tokens, --seed and --sandbox-workers."""
    return dict(top_p=1.0, max_new_tokens=args.max_new_tokens, seed=args.seed, reward="binary",
                test_timeout=2.0, workers=args.sandbox_workers)


def initial_model(args, texts: list[str]) -> str:
    """The untrained model (tokenizer trained on the corpus texts), built once in <out>/init."""
    path = os.path.join(args.out, "init")
    if not os.path.exists(os.path.join(path, "config.json")):
        build_tiny_model(path, texts, seed=args.seed, **sizes(args))
    return path


def sizes(args) -> dict:
    return dict(hidden_size=args.hidden, intermediate_size=args.intermediate,
                num_hidden_layers=args.layers, num_attention_heads=args.heads,
                num_key_value_heads=args.kv_heads, vocab_size=args.vocab)


def train(args) -> None:
    d = init_distributed()
    seed_everything(args.seed)
    if args.cpu_threads > 0:
        torch.set_num_threads(args.cpu_threads)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    pairs = load_corpus(args.out, args.corpus_seed, args.corpus_recipe)
    path = initial_model(args, corpus_texts(pairs))
    tokenizer = load_tokenizer(path)
    # Each example is tokenized when a step first draws it: a short run or a resume does not
    # wait for the whole corpus (~20 s) to be tokenized.
    examples: dict[int, actor.Sample] = {}

    def example(i: int) -> actor.Sample:
        if i not in examples:
            examples[i] = corpus_examples(tokenizer, [pairs[i]])[0]
        return examples[i]
    valid = validation_problems(args.corpus_seed)
    say(d, f"corpus {len(pairs)} examples {kind_counts(pairs)} {role_counts(pairs)}, digest "
           f"{corpus_digest(pairs)[:16]}; "
           f"validation {len(valid)} rl problems; {time.time() - t0:.0f} s")
    log = metrics.MetricsLog(args.out, d.main, (), vars(args), "base")
    engine = None if args.skip_validation else make_engine(args.engine, path, d.device,
                                                             seed=(args.seed + d.rank) % 2**32)
    policy = shard_model(PolicyLogprobs(load_causal_lm(path, d.device)), d.device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=args.lr, weight_decay=0.0)
    sched = warmup_cosine(optimizer, args.warmup_steps, args.steps)
    state = {"evals": [], "seconds": 0.0, "args": vars(args)}
    first = 0
    ckpt = latest_checkpoint(args.out) if args.resume else None
    if ckpt is not None:
        state = load_checkpoint(ckpt, policy, optimizer, sched, d)
        first = state.pop("step")
        state.pop("world", None)
        dropped = log.forget_after(first, ("sft", "eval"))
        say(d, f"resumed from {ckpt} at step {first}"
               + (f" ({dropped} metrics rows past it dropped)" if dropped else ""))
    if "seconds" not in state:   # a checkpoint that predates the count: the log's clock
        state["seconds"] = wall_at(args.out, first)
    t_start, seconds_before = time.time(), state["seconds"]   # training time over resumes
    bar = metrics.progress(range(first, args.steps), "base", args.steps, first, enabled=d.main)
    for step in bar:
        rng = random.Random(f"{args.seed}-{step}")
        batch = [example(rng.randrange(len(pairs))) for _ in range(args.batch)]
        st = actor.update(policy, optimizer, batch[d.rank::d.world], actor.sft_loss,
                          micro_batch=args.micro_batch, agg="token-mean", max_len=None,
                          pad_id=tokenizer.pad_token_id, device=d.device,
                          max_grad_norm=1.0)
        sched.step()
        bar.set_postfix(nll=f"{st['loss']:.3f}")
        done = step + 1
        if done % 20 == 0 or done == args.steps:
            log({"phase": "sft", "step": done, "nll": st["loss"], "grad_norm": st["grad_norm"],
                 "lr": sched.get_last_lr()[0], "wall": round(time.time() - t0, 1)})
        if args.eval_every and (done % args.eval_every == 0 or done == args.steps):
            if not args.skip_validation:
                actor.sync_weights(policy, engine)
                row = validate(engine, tokenizer, valid, args, d, done)
                state["evals"].append(row)
                log({"phase": "eval", **row, "wall": round(time.time() - t0, 1)})
            state["seconds"] = round(seconds_before + time.time() - t_start, 1)
            save_checkpoint(args.out, done, policy, tokenizer, optimizer, sched, state, d,
                            keep=args.keep)
    if engine is not None:
        engine.close()
    say(d, f"done: {args.steps} steps in {time.time() - t0:.0f} s -> {args.out}")


def validate(engine, tokenizer, problems, args, d, step: int) -> dict:
    """The stopping rule's figures of the engine's weights at `step`: pass@1 and pass@k
    (T = 1) overall and per family on the validation problems."""
    res = rollouts.evaluate(engine, tokenizer, problems, d, n=args.eval_n, temperature=1.0,
                            **eval_settings(args))
    k = res["k"]
    row = {"step": step, "pass@1": res["pass@1"], f"pass@{k}": res[f"pass@{k}"], "k": k,
           "pass@1_by_family": res["pass@1_by_family"], "rule": meets_rule(res)}
    say(d, f"step {step}: validation pass@1 {res['pass@1']:.3f} pass@{k} "
           f"{res[f'pass@{k}']:.3f}, meets the rule: {row['rule']}")
    return row


def checkpoint_steps(out: str) -> list[int]:
    """The steps of <out>'s checkpoints that hold weights."""
    return sorted(int(n[5:]) for n in os.listdir(out) if re.fullmatch(r"step_\d+", n)
                  and os.path.exists(os.path.join(out, n, "model.safetensors")))


def validated(out: str) -> list[dict]:
    """Validation rows of a run: those its checkpoints carry (validated while training) and
    those `--validate` wrote to <out>/validation.jsonl later, one per step, by step."""
    rows = {}
    ckpt = latest_checkpoint(out)
    if ckpt is not None:
        rows = {e["step"]: e for e in
                json.load(open(os.path.join(ckpt, "trainer_state.json")))["evals"]}
    path = os.path.join(out, "validation.jsonl")
    if os.path.exists(path):
        for line in open(path):
            e = json.loads(line)
            rows.setdefault(e["step"], e)
    return [rows[k] for k in sorted(rows)]


def validate_checkpoints(args) -> None:
    """--validate: validate every checkpoint of --out that has no row yet (a run trained with
    --skip-validation, e.g. on a machine whose sandbox is not this one's)."""
    d = init_distributed()
    done = {e["step"] for e in validated(args.out)}
    todo = [s for s in checkpoint_steps(args.out) if s not in done]
    valid = validation_problems(args.corpus_seed)
    for step in todo:
        path = os.path.join(args.out, f"step_{step}")
        engine = make_engine(args.engine, path, d.device, seed=args.seed)
        row = validate(engine, load_tokenizer(path), valid, args, d, step)
        engine.close()
        with open(os.path.join(args.out, "validation.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")


def say(d, msg: str) -> None:
    if d.main:
        print(f"[base] {msg}", flush=True)


# ----------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    p = flags.new_parser("python -m models.make_base",
                         "Train the CPU base model on the generator's corpus (resumable), or "
                         "--export the chosen checkpoint with its model card.")
    p.add_argument("--out", default="runs/base", help="checkpoints, metrics.jsonl")
    p.add_argument("--resume", action="store_true", help="continue from <out>/latest")
    p.add_argument("--validate", action="store_true",
                   help="instead of training: validate the checkpoints of --out that have no "
                        "validation row yet (after --skip-validation)")
    p.add_argument("--export", default=None, metavar="DIR",
                   help="instead of training: evaluate the checkpoint the stopping rule picks "
                        "on the held-out eval split and write it with its card to DIR")
    p.add_argument("--seed", type=flags.SEED, default=0, help="weights, tokenizer and batch order")
    p.add_argument("--corpus-seed", type=flags.SEED, default=0, help="tasks.generate_base's seed")
    p.add_argument("--corpus-recipe", choices=sorted(CORPUS_RECIPES), default=CORPUS_RECIPE,
                   help="the corpus's AT-GRPO repair turns (CORPUS_RECIPES; repair-v1: the "
                        "corpus of the base in models/base)")
    p.add_argument("--corpus-only", action="store_true",
                   help="make <out>/corpus.json, print its counts per kind and role, and stop")
    g = p.add_argument_group("architecture (Qwen2)")
    g.add_argument("--layers", type=flags.POSITIVE_INT, default=3)
    g.add_argument("--hidden", type=flags.POSITIVE_INT, default=192)
    g.add_argument("--intermediate", type=flags.POSITIVE_INT, default=512)
    g.add_argument("--heads", type=flags.POSITIVE_INT, default=4)
    g.add_argument("--kv-heads", type=flags.POSITIVE_INT, default=2)
    g.add_argument("--vocab", type=flags.POSITIVE_INT, default=1024,
                   help="BPE vocabulary trained on the corpus")
    g = p.add_argument_group("training")
    g.add_argument("--steps", type=flags.POSITIVE_INT, default=3000, help="optimizer steps")
    g.add_argument("--batch", type=flags.POSITIVE_INT, default=32, help="examples per step")
    g.add_argument("--lr", type=flags.LEARNING_RATE, default=1e-3, help="peak learning rate")
    g.add_argument("--warmup-steps", type=flags.COUNT, default=30)
    g.add_argument("--micro-batch", type=flags.POSITIVE_INT, default=8,
                   help="sequences per forward/backward (the step does not depend on it)")
    g.add_argument("--cpu-threads", type=flags.COUNT, default=0,
                   help="torch threads (0 = torch's default)")
    g = p.add_argument_group("evaluation and checkpoints")
    g.add_argument("--eval-every", type=flags.COUNT, default=250,
                   help="validate and checkpoint every N steps (and at the end)")
    g.add_argument("--skip-validation", action="store_true",
                   help="checkpoint every --eval-every steps without validating (validate "
                        "later with --validate, e.g. where the sandbox runs)")
    g.add_argument("--eval-n", type=flags.POSITIVE_INT, default=8, help="samples per problem")
    g.add_argument("--keep", type=flags.POSITIVE_INT, default=100,
                   help="checkpoints kept (the rule may pick an early one)")
    g.add_argument("--max-new-tokens", type=flags.POSITIVE_INT, default=112)
    g.add_argument("--engine", default="auto", choices=["auto", "vllm", "hf"])
    g.add_argument("--card-note", default="",
                   help="--export: a paragraph for the card on how the run went (stops, "
                        "resumes, changes)")
    g.add_argument("--sandbox-workers", type=flags.POSITIVE_INT, default=None)
    return p


def main(argv=None):
    def run(args):
        if args.corpus_only:
            build_corpus(args)
        elif args.export:
            export(args)
        elif args.validate:
            validate_checkpoints(args)
        else:
            train(args)
    flags.run_entry_point(run, build_parser().parse_args, argv)


# ----------------------------------------------------------------------------- export

SHIPPED = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
           "tokenizer_config.json")
TRAIN_SAMPLE_PER_FAMILY = 40   # the card's train figure: corpus instances the base trained on


def export(args) -> None:
    """Pick the checkpoint by the stopping rule, evaluate it on the held-out eval split and a
    corpus sample, and write DIR: the weights and tokenizer, card.json, README.md (the model
    card) and SHA256SUMS."""
    ckpt = latest_checkpoint(args.out)
    if ckpt is None:
        raise SystemExit(f"--export: no checkpoint in {args.out}; train first "
                         f"(python -m models.make_base --out {args.out})")
    state = json.load(open(os.path.join(ckpt, "trainer_state.json")))
    state["evals"] = validated(args.out)
    row, ok = stopping_point(state["evals"])
    chosen = os.path.join(args.out, f"step_{row['step']}")
    if not os.path.exists(os.path.join(chosen, "model.safetensors")):
        raise SystemExit(f"--export: the rule picks step {row['step']} but {chosen} is gone "
                         "(raise --keep when training)")
    os.makedirs(args.export, exist_ok=True)
    for name in SHIPPED:
        shutil.copyfile(os.path.join(chosen, name), os.path.join(args.export, name))
    d = init_distributed()
    engine = make_engine(args.engine, args.export, d.device, seed=args.seed)
    tokenizer = load_tokenizer(args.export)
    world = tasks.generate_base(args.corpus_seed)
    held = [data.Problem(**r) for r in world["eval"]]
    train = first_per_family(world["corpus"], TRAIN_SAMPLE_PER_FAMILY)
    figures = {}
    for name, problems in (("held_out", held), ("train", train)):
        t = time.time()
        res = rollouts.evaluate(engine, tokenizer, problems, d, n=args.eval_n, temperature=1.0,
                                **eval_settings(args))
        figures[name] = {k: v for k, v in res.items() if k != "rates"}
        figures[name]["family_pass_at_k"] = family_pass_at_k(problems, res["rates"],
                                                               args.eval_n)
        figures[name]["seconds"] = round(time.time() - t, 1)
        say(d, f"{name}: pass@1 {res['pass@1']:.3f} +- {res['pass@1_se']:.3f}, "
               f"pass@{args.eval_n} {res[f'pass@{args.eval_n}']:.3f} ({len(problems)} problems)")
    engine.close()
    pairs = load_corpus(args.out, args.corpus_seed, args.corpus_recipe)
    cfg = json.load(open(os.path.join(args.export, "config.json")))
    card = {"step": row["step"], "meets_rule": ok, "rule": RULE, "validation": state["evals"],
            "train_seconds": state.get("seconds") or last_wall(args.out),
            "corpus_seed": args.corpus_seed, "corpus_recipe": args.corpus_recipe,
            "corpus_sha256": corpus_digest(pairs),
            "corpus_examples": kind_counts(pairs),
            "parameters": parameter_count(args.export),
            "config": {k: cfg[k] for k in ("num_hidden_layers", "hidden_size",
                                           "intermediate_size", "num_attention_heads",
                                           "num_key_value_heads", "vocab_size")},
            "eval_n": args.eval_n, "note": args.card_note, "train_args": state["args"],
            "made_in": args.out, "exported_to": args.export,
            **figures}
    with open(os.path.join(args.export, "card.json"), "w") as f:
        json.dump(card, f, indent=1)
    with open(os.path.join(args.export, "README.md"), "w") as f:
        f.write(model_card(card))
    write_sums(args.export)
    say(d, f"step {row['step']} (meets the rule: {ok}) -> {args.export}")


def wall_at(out: str, step: int) -> float:
    """The seconds metrics.jsonl's validation row of `step` was logged at (0 if none)."""
    for line in open(os.path.join(out, "metrics.jsonl")):
        row = json.loads(line)
        if row.get("phase") == "eval" and row.get("step") == step:
            return row.get("wall", 0.0)
    return 0.0


def last_wall(out: str) -> float | None:
    """Seconds from the start to the last validation, from metrics.jsonl (a run that never
    resumed; trainer_state's "seconds" adds up the time over resumes)."""
    walls = [json.loads(line).get("wall") for line in open(os.path.join(out, "metrics.jsonl"))]
    walls = [w for w in walls if w is not None]
    return walls[-1] if walls else None


def family_pass_at_k(problems, rates: dict, n: int) -> dict:
    """{family: pass@n} from per-problem solved shares (rollouts.evaluate's "rates")."""
    out: dict[str, list] = {}
    for p in problems:
        c = round(rates[p.id] * n)
        out.setdefault(p.metadata["family"], []).append(evalstats.pass_at_k(n, c, n))
    return {f: sum(v) / len(v) for f, v in sorted(out.items())}


def parameter_count(path: str) -> int:
    return sum(t.numel() for t in load_file(os.path.join(path, "model.safetensors")).values())


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_sums(folder: str) -> None:
    """SHA256SUMS (sha256sum's format) of the shipped weights, tokenizer and config."""
    with open(os.path.join(folder, "SHA256SUMS"), "w") as f:
        for name in SHIPPED:
            f.write(f"{file_sha256(os.path.join(folder, name))}  {name}\n")


CARD = """# The CPU base model

A {num_hidden_layers}-layer Qwen2-architecture decoder (hidden {hidden_size}, MLP \
{intermediate_size}, {num_attention_heads} heads / {num_key_value_heads} KV heads, \
{parameters:,} parameters, byte-level BPE vocabulary of {vocab_size} trained on its corpus), \
trained by supervised learning on the procedural generator's corpus and shipped here so that \
every CPU run starts RL from it (`--model base`, the CPU default of grpo.py, ppo_fgo.py and \
agents.py). Load it with `AutoModelForCausalLM.from_pretrained` or vLLM.

## How it was made
    {train_command}   # --resume continues a stopped run
{validate_line}    python -m models.make_base --out {made_in} --export {exported_to}

- Corpus: `tasks.generate_base({corpus_seed})["corpus"]` (instances whose parameters are in the \
train split, none of the rl or eval splits), sha256 {corpus_sha256}: {corpus_examples}.
- Training: batch {batch}, AdamW lr {lr:g}, warm-up then cosine over {steps} steps, a \
checkpoint every {eval_every}; {minutes:.1f} minutes of training time to the last checkpoint \
(where: the note below).
- Stopping rule, written before the run (base.py `RULE`): the last checkpoint whose validation \
pass@1 (T = 1, 8 samples, 24 unseen instances of each family of the rl split) is in \
[0.2, 0.5] with pass@8 >= 1.6 x pass@1 and two or more families in 0.05-0.6; when none \
does, the checkpoint in the pass@1 band with the most room, pass@8 - pass@1. Step {step} \
{rule_text} it.
{note_text}

| step | validation pass@1 | pass@8 | meets the rule |
|---|---|---|---|
{val_rows}

## What it scores (T = 1, {n} samples a problem)
Held out (`tasks:eval`, {hp} problems whose parameters are in the test split; {rl_only} is \
the RL-only family, never in the corpus): pass@1 **{h1:.3f} +- {hse:.3f}**, pass@{n} {hk:.3f}. \
Train ({tp} corpus instances it trained on): pass@1 {t1:.3f} +- {tse:.3f}, pass@{n} {tk:.3f}.

| family | held-out pass@1 | held-out pass@{n} |
|---|---|---|
{held_rows}

| family | train pass@1 | train pass@{n} |
|---|---|---|
{train_rows}

{preconditions_text}
Files: SHA256SUMS lists the digest of each shipped file (tests/test_base.py checks them); \
card.json holds every figure above.
"""

PRECONDITIONS = """
## Each method's precondition (`python bench/preconditions.py`, held out)
| method | precondition | measured |
|---|---|---|
| GRPO | room, pass@8 - pass@1 | {room:.3f} |
| FGO | reference coverage under the first {n_tests} tests, branchy families | \
{branchy_coverage:.2f} |
| FGO | false-pass rate of its programs under {n_tests} tests, branchy families | \
{branchy_false_pass_rate:.2f} |
| CCCS | {family} pass@8 whole / completed from its last split point | {whole:.3f} / \
{last:.3f} |
| DRIVE | hardest quarter ({hard} problems) with pass@{k} > 0 | {share:.2f} |
| AT-GRPO | tester's valid share; system vs coder alone ({episodes} episodes, T 0.6) | \
{valid:.2f}; {system:.3f} vs {alone:.3f} |
"""


def preconditions_text(pre: dict | None) -> str:
    """The card's precondition table from card.json's "preconditions" (bench/preconditions.py's
    figures and the game's, added after the export); "" without them."""
    if not pre:
        return ""
    f, c, dr, g = pre["fgo"], pre["cccs"], pre["drive"], pre["game"]
    return PRECONDITIONS.format(
        room=pre["room"]["pass@8"] - pre["room"]["pass@1"], n_tests=f["n_tests"],
        branchy_coverage=f["branchy_coverage"],
        branchy_false_pass_rate=f["branchy_false_pass_rate"], family=c["family"],
        whole=c["whole_pass@8"], last=c["last_stage_pass@8"], hard=dr["problems"], k=dr["k"],
        share=dr["share_solved"], episodes=g["episodes"], valid=g["tester_valid_share"],
        system=g["pass@1_after_turns"], alone=g["pass@1_coder_alone"])


def model_card(card: dict) -> str:
    """The card as Markdown: what the model is, how it was made, what it scores."""
    card = {"made_in": "runs/base", "exported_to": "models/base", **card}   # older cards
    made_in = card["made_in"]
    c, n = card["config"], card["eval_n"]
    fams = sorted(card["held_out"]["pass@1_by_family"])

    def fam_rows(name):
        fig = card[name]
        return "\n".join(f"| {f} | {fig['pass@1_by_family'][f]:.3f} | "
                         f"{fig['family_pass_at_k'][f]:.3f} |" for f in fams
                         if f in fig["pass@1_by_family"])
    val = "\n".join(f"| {e['step']} | {e['pass@1']:.3f} | {e['pass@' + str(e['k'])]:.3f} | "
                    f"{'yes' if e['rule'] else 'no'} |" for e in card["validation"])
    h, t = card["held_out"], card["train"]
    return CARD.format(**card, **c, n=n, h1=h["pass@1"], hse=h["pass@1_se"], hk=h[f"pass@{n}"],
                       hp=h["problems"], t1=t["pass@1"], tse=t["pass@1_se"], tk=t[f"pass@{n}"],
                       tp=t["problems"], held_rows=fam_rows("held_out"),
                       train_rows=fam_rows("train"), val_rows=val,
                       minutes=(card["train_seconds"] or 0) / 60,
                       rule_text=("meets" if card["meets_rule"] else "breaks"),
                       rl_only=tasks.RL_ONLY_FAMILY,
                       note_text=("\n" + card["note"] + "\n") if card.get("note") else "",
                       train_command=train_command(card["train_args"], made_in),
                       preconditions_text=preconditions_text(card.get("preconditions")),
                       validate_line=(f"    python -m models.make_base --out {made_in} --validate\n"
                                      if card["train_args"].get("skip_validation") else ""),
                       **{k: card["train_args"][k] for k in ("batch", "lr", "steps",
                                                             "eval_every")})


def train_command(saved: dict, out: str = "runs/base") -> str:
    """The training command of a run into `out` from the flags its checkpoints saved: the
    ones that differ from today's defaults."""
    parser = build_parser()
    skip = {"out", "resume", "export", "validate", "card_note"}
    flags_ = []
    for action in parser._actions:
        key = action.dest
        if key in skip or key not in saved or saved[key] == action.default:
            continue
        flag = action.option_strings[-1]
        flags_.append(flag if isinstance(action, argparse._StoreTrueAction) else
                      f"{flag} {saved[key]}")
    return " ".join([f"python -m models.make_base --out {out}", *flags_])


if __name__ == "__main__":
    main()
