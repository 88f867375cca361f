"""The named grids of bench/ablate.py (--grid NAME): data, and the few helpers that build it.

A grid is a list of configs, each {"name", "group", "cmd", "seeds"?, "metrics"?, "after"?}
(ablate.py's docstring says what each key does; ablate.validate checks them). In "cmd",
{seed} and {out} are filled in per cell.
"""
from __future__ import annotations

# Every tiny-warm row trains on the procedural train split and is scored on its held-out test
# split (tasks.py), with the train-split sample beside it. One warm start per seed (SFT 450
# steps, the copy skill of the tiny model appears at ~350-400: .notes/tasks.md), evaluated
# before RL: the "no RL" row. Every RL row starts from that seed's warm-start checkpoint with
# the same budget: 40 steps x 8 prompts x 16 samples at lr 5e-5, held-out curve every 20 steps.
# test_ablate.py parses every command with its entry point's own parser, so a flag that does
# not exist fails there.
# These grids start from the tiny model and its own SFT warm start (--model tiny) and draw
# prompts with replacement, as when they were measured (the trainers' defaults are now the
# shipped base and epoch order).
TINY_WORLD = ["--model", "tiny", "--prompt-order", "replacement"]
DATA = [*TINY_WORLD, "--train-data", "tasks:train", "--eval-data", "tasks:test",
        "--max-new-tokens", "112"]
WARM_STEPS = 450
RL_STEPS = 40
FROM_WARM = ["--model", "{out}/cells/warm/seed{seed}/step_0", "--sft-steps", "0",
             "--steps", str(RL_STEPS), "--lr", "5e-5", "--eval-every", "20"]
# DRIVE's claim is about the tail: pass@1 / pass@k on the hardest quarter of the held-out set.
HARD_METRICS = ["hard_pass_at_1_before_rl", "hard_pass_at_1_after_rl", "hard_pass_at_k_after_rl"]
AGENT_METRICS = ["before_rl.pass@1_coder_alone", "before_rl.pass@1_after_turns",
                 "after_rl.pass@1_coder_alone", "after_rl.pass@1_after_turns"]

def with_flags(argv: list[str], **values) -> list[str]:
    """argv with the value after each --flag (from the keyword: eval_every -> --eval-every)
    replaced."""
    out = list(argv)
    for key, value in values.items():
        i = out.index("--" + key.replace("_", "-"))
        out[i + 1] = str(value)
    return out


GRIDS: dict[str, list[dict]] = {
    "tiny-warm": [
        # --steps 0 with --save-every 1 saves step_0 (the warm-started policy) and evaluates.
        {"name": "warm", "group": "warm start (no RL)",
         "cmd": ["grpo.py", *DATA, "--sft-steps", str(WARM_STEPS), "--steps", "0",
                 "--save-every", "1"]},
        {"name": "grpo", "group": "GRPO", "after": ["warm"], "cmd": ["grpo.py", *DATA, *FROM_WARM],
         "metrics": HARD_METRICS},
        {"name": "grpo-cccs", "group": "GRPO", "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *FROM_WARM, "--curriculum", "cccs"]},
        # DRIVE's stage 2 from the warm start against plain GRPO (the "grpo" row: continuing
        # stage 1) at the same rollouts: problems every sample or none solves are dropped
        # first, then the hard focus keeps the lowest pass rates of the rest.
        {"name": "drive-hard-focus", "group": "GRPO", "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *FROM_WARM, "--offline-filter", "--hard-focus",
                 f"192:{RL_STEPS // 2},96:{RL_STEPS // 2}"], "metrics": HARD_METRICS},
        # The same GRPO for 4x the steps: does the held-out gain keep growing?
        {"name": "grpo-160", "group": "GRPO", "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *with_flags(FROM_WARM, steps=4 * RL_STEPS, eval_every=40)],
         "metrics": HARD_METRICS},
        # RL on the first 128 train problems (every family), each drawn ~2.5 times in 40 steps
        # instead of < 1: sharpening per problem vs a shared skill; CCCS's window of 2 can fill.
        {"name": "grpo-p128", "group": "GRPO on 128 train problems", "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *FROM_WARM, "--max-problems", "128"],
         "metrics": HARD_METRICS},
        {"name": "grpo-cccs-p128", "group": "GRPO on 128 train problems", "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *FROM_WARM, "--max-problems", "128", "--curriculum", "cccs",
                 "--cccs-span", "2"]},
        # ... and a stage moving on at a pass rate of 0.5 (0.8: none moved in 40 steps)
        {"name": "grpo-cccs-p128-t0.5", "group": "GRPO on 128 train problems",
         "after": ["warm"],
         "cmd": ["grpo.py", *DATA, *FROM_WARM, "--max-problems", "128", "--curriculum", "cccs",
                 "--cccs-span", "2", "--cccs-threshold", "0.5"]},
        {"name": "ppo", "group": "PPO/FGO", "after": ["warm"],
         "cmd": ["ppo_fgo.py", *DATA, *FROM_WARM]},
        {"name": "ppo-fgo", "group": "PPO/FGO", "after": ["warm"],
         "cmd": ["ppo_fgo.py", *DATA, *FROM_WARM, "--fgo"],
         "metrics": ["metrics.jsonl:fgo_masked_share"]},
        {"name": "ppo-cccs", "group": "PPO/FGO", "after": ["warm"],
         "cmd": ["ppo_fgo.py", *DATA, *FROM_WARM, "--curriculum", "cccs"]},
        # AT-GRPO warms up its own roles (tester and coder examples), so no shared checkpoint.
        {"name": "agents-shared", "group": "AT-GRPO",
         "cmd": ["agents.py", *DATA, "--policy", "shared"], "metrics": AGENT_METRICS},
        {"name": "agents-per-role", "group": "AT-GRPO",
         "cmd": ["agents.py", *DATA, "--policy", "per-role"], "metrics": AGENT_METRICS},
        {"name": "agents-no-rl", "group": "AT-GRPO",
         "cmd": ["agents.py", *DATA, "--steps", "0"], "metrics": AGENT_METRICS},
    ],
}

# CCCS's claim where it can act (tasks.py's length family): the tiny-warm grid's warm start,
# then 150 SFT steps on the train split plus chain_short (1-3 guarded steps), so the policy
# writes short chains and no 4-6 step one (held-out chain_long: 0.000 before RL, every
# seed); RL on 32 chain_long train problems (each drawn 15 times in 60 steps, so a problem
# can pass through its 3-4 stages), with and without the curriculum, scored on length_test
# (chain_long: the claim; chain_short: what RL costs the short chains).
SFT_CHAIN = "{out}/cells/sft-chain/seed{seed}/step_0"    # every length RL cell starts here
LEN_DATA = [*TINY_WORLD, "--eval-data", "tasks:length_test", "--max-new-tokens", "112"]
LEN_RL = ["--train-data", "tasks:length_train@chain_long", *LEN_DATA, "--max-problems", "32",
          "--max-eval-problems", "0", "--model", SFT_CHAIN,
          "--sft-steps", "0", "--steps", "60", "--lr", "5e-5", "--eval-every", "20"]
CCCS_FLAGS = ["--curriculum", "cccs", "--cccs-span", "2", "--cccs-threshold", "0.5"]
CHAIN_S = [*TINY_WORLD, "--train-data", "tasks:length_train@chain_short", "--eval-data",
           "tasks:length_test@chain_short", "--max-new-tokens", "112", "--eval-n", "16",
           "--sft-steps", "0", "--steps", "40", "--prompts-per-step", "8", "--group-size", "16",
           "--lr", "5e-5", "--eval-every", "20"]
CHAIN_S1 = "{out}/cells/drive-chain-s1/seed{seed}/step_40"
LEN_METRICS = ["family_pass_at_1_before_rl.chain_long", "family_pass_at_1_after_rl.chain_long",
               "family_pass_at_1_after_rl.chain_short", "metrics.jsonl:reward_mean",
               "metrics.jsonl:zero_adv_frac"]
GRIDS["length"] = [
    GRIDS["tiny-warm"][0],      # the same warm cells: a shared --out runs them once
    {"name": "sft-chain", "group": "length: SFT on chain_short", "after": ["warm"],
     "cmd": ["grpo.py", "--train-data", "tasks:train,tasks:length_train@chain_short", *LEN_DATA,
             "--model", "{out}/cells/warm/seed{seed}/step_0", "--sft-steps", "150", "--steps",
             "0", "--save-every", "1"], "metrics": LEN_METRICS[:1]},
    {"name": "length-grpo", "group": "length: GRPO on chain_long", "after": ["sft-chain"],
     "cmd": ["grpo.py", *LEN_RL], "metrics": LEN_METRICS},
    {"name": "length-grpo-cccs", "group": "length: GRPO on chain_long", "after": ["sft-chain"],
     "cmd": ["grpo.py", *LEN_RL, *CCCS_FLAGS], "metrics": LEN_METRICS},
    # 4x the steps with the curriculum (the plain arm needs no rerun: with no success in 60
    # steps every advantage is 0, its gradient is 0 and the policy never changes)
    {"name": "length-grpo-cccs-240", "group": "length: GRPO on chain_long",
     "after": ["sft-chain"],
     "cmd": ["grpo.py", *with_flags(LEN_RL, steps=240, eval_every=60), *CCCS_FLAGS],
     "metrics": LEN_METRICS},
    {"name": "length-ppo", "group": "length: PPO on chain_long", "after": ["sft-chain"],
     "cmd": ["ppo_fgo.py", *LEN_RL], "metrics": LEN_METRICS},
    {"name": "length-ppo-cccs", "group": "length: PPO on chain_long", "after": ["sft-chain"],
     "cmd": ["ppo_fgo.py", *LEN_RL, *CCCS_FLAGS], "metrics": LEN_METRICS},
    {"name": "length-ppo-cccs-fgo", "group": "length: PPO on chain_long", "after": ["sft-chain"],
     "cmd": ["ppo_fgo.py", *LEN_RL, *CCCS_FLAGS, "--fgo"],
     "metrics": LEN_METRICS + ["metrics.jsonl:fgo_masked_share"]},
    # DRIVE's claim (stage 2's hard focus lifts the tail) where the tail is not at the floor:
    # the short chains, where after sft-chain 3-step chains pass ~5-10% whole (1-step ~70%).
    # Stage 1 = 40 GRPO steps on the 160 chain_short train problems; then 40 more steps, as
    # stage 1 (continue) or as DRIVE's stage 2 (offline filter, then the 48 and the 24 lowest
    # pass rates, 4 prompts x 32 rollouts: the same 128 a step). Held out: length_test's 32
    # chain_short x 16 samples; its hardest quarter is the 3-step chains.
    {"name": "drive-chain-s1", "group": "length: DRIVE on chain_short", "after": ["sft-chain"],
     "cmd": ["grpo.py", *CHAIN_S, "--model", SFT_CHAIN,
             "--save-every", "40"], "metrics": HARD_METRICS + LEN_METRICS[3:]},
    {"name": "drive-chain-continue", "group": "length: DRIVE on chain_short",
     "after": ["drive-chain-s1"], "cmd": ["grpo.py", *CHAIN_S, "--model", CHAIN_S1],
     "metrics": HARD_METRICS + LEN_METRICS[3:]},
    {"name": "drive-chain-hard", "group": "length: DRIVE on chain_short",
     "after": ["drive-chain-s1"],
     "cmd": ["grpo.py", *with_flags(CHAIN_S, prompts_per_step=4, group_size=32), "--model",
             CHAIN_S1, "--offline-filter", "--hard-focus", "48:20,24:20"],
     "metrics": HARD_METRICS + LEN_METRICS[3:]},
    # PPO where GRPO gains held out: does PPO + GAE + critic gain there too? chain-grpo is
    # drive-chain-s1's command (40 steps of 8 x 16 from sft-chain) as a config of its own, so
    # that a run that re-makes the warm starts compares the three from the same ones.
    {"name": "chain-grpo", "group": "length: PPO on chain_short", "after": ["sft-chain"],
     "cmd": ["grpo.py", *CHAIN_S, "--model", SFT_CHAIN],
     "metrics": HARD_METRICS + LEN_METRICS[3:]},
    {"name": "chain-ppo", "group": "length: PPO on chain_short", "after": ["sft-chain"],
     "cmd": ["ppo_fgo.py", *CHAIN_S, "--model", SFT_CHAIN],
     "metrics": HARD_METRICS + LEN_METRICS[3:4]},
    {"name": "chain-ppo-fgo", "group": "length: PPO on chain_short", "after": ["sft-chain"],
     "cmd": ["ppo_fgo.py", *CHAIN_S, "--model", SFT_CHAIN, "--fgo"],
     "metrics": HARD_METRICS + LEN_METRICS[3:4] + ["metrics.jsonl:fgo_masked_share"]},
]

# AT-GRPO held out where the coder is off the floor: the short chains (the testbed's coder
# after 150 role-SFT steps scores 0.010). From sft-chain, 200 role-SFT steps of 8 (agents.py's
# tester and coder prompts; coder alone ~0.19-0.25 held out), then 30 RL steps of the CPU
# preset's 4 problems x K 2 x 2 turns, shared or per-role (both roles from that checkpoint).
AGENT_CHAIN = [*TINY_WORLD, "--train-data", "tasks:length_train@chain_short", "--eval-data",
               "tasks:length_test@chain_short", "--max-new-tokens", "112", "--eval-n", "4"]
AGENT_CHAIN_METRICS = AGENT_METRICS + ["metrics.jsonl:tester_valid_share_mean",
                                       "metrics.jsonl:tester_catch_share_mean"]


def agents_chain(prefix: str, sft_steps: int) -> list[dict]:
    """<prefix>-warm (role SFT from sft-chain, no RL), then <prefix>-shared / -per-role
    (30 RL steps from that warm cell's checkpoint)."""
    group = "length: AT-GRPO on chain_short"
    rl = [*AGENT_CHAIN, "--model", f"{{out}}/cells/{prefix}-warm/seed{{seed}}/step_0",
          "--sft-steps", "0", "--steps", "30", "--eval-every", "10"]
    warm = {"name": f"{prefix}-warm", "group": group, "after": ["sft-chain"],
            "cmd": ["agents.py", *AGENT_CHAIN, "--policy", "shared", "--model", SFT_CHAIN,
                    "--sft-steps", str(sft_steps), "--sft-batch", "8", "--steps", "0",
                    "--save-every", "1000"], "metrics": AGENT_METRICS}
    return [warm] + [{"name": f"{prefix}-{policy}", "group": group, "after": [warm["name"]],
                      "cmd": ["agents.py", *rl, "--policy", policy],
                      "metrics": AGENT_CHAIN_METRICS} for policy in ("shared", "per-role")]


# 600 role-SFT steps (one probe, seed 0: coder alone .305 and system .258 held out, vs .188 /
# .062 after 200): the same RL from the longer warm start; and the catch bonus off
# (default 1.0), else agents-chain600-shared.
_CHAIN600 = agents_chain("agents-chain600", 600)
GRIDS["length"] += agents_chain("agents-chain", 200) + _CHAIN600 + [
    {**_CHAIN600[1], "name": "agents-chain600-shared-catch0",
     "cmd": [*_CHAIN600[1]["cmd"], "--catch-bonus", "0"]}]

# The seeds' claims on the shipped base (models/base): every arm starts from the same policy,
# so arms are paired by RL seed (bench/claims.py computes the paired differences). RL on
# tasks:rl (fresh train-parameter problems) for 40 steps of 8 prompts x 16 samples at lr 5e-5
# (the defaults but for the steps); held out = the first 350 problems of tasks:eval (50 a
# family) x 4 samples at T = 1, with 70 of tasks:rl beside. The configs are in the order they
# run (the main claims first): on this 2-core machine a cell takes 7-12 minutes.
CLAIM_EVAL = ["--eval-n", "4", "--max-eval-problems", "350", "--train-eval-problems", "70"]
CLAIM_RL = [*CLAIM_EVAL, "--steps", "40"]
# DRIVE: stage 1 = the grpo cell's first 20 steps (its step_20 checkpoint); then 20 more steps
# on the first 384 train problems (55 a family), continuing stage 1 (8 x 16) or as stage 2
# (offline filter, then the 96 and the 48 lowest pass rates, 4 prompts x 32: 128 rollouts a
# step either way).
STAGE1 = "{out}/cells/grpo/seed{seed}/step_20"
DRIVE_S2 = [*CLAIM_EVAL, "--model", STAGE1, "--steps", "20", "--max-problems", "384"]
# The RL-only family (arith_long: 4-5 operations, never in the base's corpus): 160 held out x 8.
RL_ONLY = ["--train-data", "tasks:rl@arith_long", "--eval-data", "tasks:eval@arith_long",
           "--steps", "40", "--eval-n", "8", "--train-eval-problems", "0"]
# pass@k up to 64: the first 70 held-out problems (10 a family) x 64 samples at T = 1; pass@k
# for every k <= 64 comes from each problem's solved count (rates.json).
PASS64 = ["--eval-only", "--eval-n", "64", "--max-eval-problems", "70",
          "--train-eval-problems", "0"]
# AT-GRPO from the base (it saw the tester's and the coder's prompts in its corpus): 20 steps
# of the CPU preset's 4 problems x K 2 x 2 turns on tasks:rl; held out: 70 of tasks:eval
# (10 a family) x 2 episodes at T 0.6, coder alone and the system after its turns; 70 of
# tasks:rl beside.
AGENT_RL = ["--train-data", "tasks:rl", "--eval-data", "tasks:eval", "--max-eval-problems",
            "70", "--train-eval-problems", "70", "--max-new-tokens", "112", "--steps", "20"]
AGENT_BASE_METRICS = AGENT_METRICS + ["metrics.jsonl:tester_valid_share_mean",
                                      "metrics.jsonl:tester_catch_share_mean"]
# StepCoder where CCCS and FGO have something to act on: 32 problems of the two branchy
# families (classify and simulate: 3-4 conditionals in a ~10-line reference, so CCCS has
# 1-3 completion stages before the whole program) drawn 10 times each in 40 steps; a stage
# moves on at a pass rate of 0.8 over its last 2 updates. (Measured: the tests still execute
# 98-99% of the generated lines, so FGO masks almost nothing here either.)
# Held out: the first 100 of those families in tasks:eval x 4; the 32-problem pool beside.
BRANCHY = ["--train-data", "tasks:rl@classify+simulate", "--max-problems", "32",
           "--eval-data", "tasks:eval@classify+simulate", "--max-eval-problems", "100",
           "--train-eval-problems", "32", "--eval-n", "4", "--steps", "40"]
BRANCHY_CCCS = ["--curriculum", "cccs", "--cccs-span", "2"]
# Clip-higher where the clip binds (at lr 5e-5 and 4 updates a batch the clipped share stays
# <= 0.4%): 4 updates a batch at lr 5e-4 (measured: the policy collapses in both arms, held
# out 0.42 -> 0.00-0.03), and DAPO's 16 updates a batch at the default lr 5e-5. Held out 140
# (20 a family) x 4 at steps 0, 20 and 40.
CLIP_EVAL = ["--eval-n", "4", "--max-eval-problems", "140", "--train-eval-problems", "0",
             "--steps", "40"]
CLIP_BINDS = [*CLIP_EVAL, "--mini-batches", "4", "--lr", "5e-4", "--eval-every", "20"]
CLIP_MB16 = [*CLIP_EVAL, "--mini-batches", "16", "--eval-every", "20"]
GROUP_PPO = "GRPO and PPO (StepCoder)"
GROUP_DAPO = "DAPO: off-policy updates and filters"
GROUP_T = "the base at lower temperatures"


def base_at(t: str, rl: bool = False) -> dict:
    """The base (rl: the grpo cell's policy after RL) evaluated at temperature t; greedy
    ("0") with one sample a problem."""
    flags = with_flags(CLAIM_EVAL, eval_n=1) if t == "0" else CLAIM_EVAL
    name = "greedy" if t == "0" else f"t{t}"
    model = ["--model", "{out}/cells/grpo/seed{seed}/step_40"] if rl else []
    return {"name": f"{'grpo' if rl else 'base'}-{name}", "group": GROUP_T,
            **({"after": ["grpo"]} if rl else {}),
            "cmd": ["grpo.py", *flags, "--eval-only", "--eval-temperature", t, *model]}


GRIDS["claims"] = [
    {"name": "grpo", "group": GROUP_PPO,
     "cmd": ["grpo.py", *CLAIM_RL, "--eval-every", "20", "--save-every", "20"],
     "metrics": HARD_METRICS},
    {"name": "ppo", "group": GROUP_PPO, "cmd": ["ppo_fgo.py", *CLAIM_RL]},
    {"name": "ppo-cccs-fgo", "group": GROUP_PPO,
     "cmd": ["ppo_fgo.py", *CLAIM_RL, "--curriculum", "cccs", "--fgo"],
     "metrics": ["metrics.jsonl:fgo_masked_share"]},
    base_at("0.5"), base_at("0"),
    {"name": "drive-continue", "group": "DRIVE stage 2", "after": ["grpo"],
     "cmd": ["grpo.py", *DRIVE_S2], "metrics": HARD_METRICS},
    {"name": "drive-hard", "group": "DRIVE stage 2", "after": ["grpo"],
     "cmd": ["grpo.py", *DRIVE_S2, "--prompts-per-step", "4", "--group-size", "32",
             "--offline-filter", "--hard-focus", "96:10,48:10"], "metrics": HARD_METRICS},
    *[{"name": f"agents-{policy}", "group": "AT-GRPO",
       "cmd": ["agents.py", *AGENT_RL, "--policy", policy], "metrics": AGENT_BASE_METRICS}
      for policy in ("shared", "per-role")],
    {"name": "ppo-fgo", "group": GROUP_PPO,
     "cmd": ["ppo_fgo.py", *CLAIM_RL, "--fgo"], "metrics": ["metrics.jsonl:fgo_masked_share"]},
    {"name": "agents-shared-catch0", "group": "AT-GRPO",
     "cmd": ["agents.py", *AGENT_RL, "--policy", "shared", "--catch-bonus", "0"],
     "metrics": AGENT_BASE_METRICS},
    {"name": "base-pass64", "group": "pass@k to 64", "cmd": ["grpo.py", *PASS64]},
    {"name": "grpo-pass64", "group": "pass@k to 64", "after": ["grpo"],
     "cmd": ["grpo.py", *PASS64, "--model", "{out}/cells/grpo/seed{seed}/step_40"]},
    base_at("0", rl=True), base_at("0.5", rl=True),
    {"name": "grpo-mb4", "group": GROUP_DAPO, "cmd": ["grpo.py", *CLAIM_RL, "--mini-batches", "4"],
     "metrics": ["metrics.jsonl:entropy", "metrics.jsonl:clip_frac"]},
    {"name": "grpo-mb4-eps0.2", "group": GROUP_DAPO,
     "cmd": ["grpo.py", *CLAIM_RL, "--mini-batches", "4", "--eps-high", "0.2"],
     "metrics": ["metrics.jsonl:entropy", "metrics.jsonl:clip_frac"]},
    {"name": "rl-only-grpo", "group": "RL-only family (arith_long)",
     "cmd": ["grpo.py", *RL_ONLY]},
    {"name": "rl-only-ppo", "group": "RL-only family (arith_long)",
     "cmd": ["ppo_fgo.py", *RL_ONLY]},
    {"name": "ppo-cccs", "group": GROUP_PPO,
     "cmd": ["ppo_fgo.py", *CLAIM_RL, "--curriculum", "cccs"]},
    {"name": "grpo-dyn-overlong", "group": GROUP_DAPO,
     "cmd": ["grpo.py", *CLAIM_RL, "--dynamic-sampling", "--overlong-filter"],
     "metrics": ["metrics.jsonl:entropy"]},
    base_at("0.7"), base_at("0.3"),
    *[{"name": f"branchy-{name}", "group": "StepCoder on branchy problems drawn 10 times",
       "cmd": ["ppo_fgo.py", *BRANCHY, *extra],
       "metrics": ["metrics.jsonl:fgo_masked_share"] if "--fgo" in extra else []}
      for name, extra in (("ppo", []), ("ppo-cccs", BRANCHY_CCCS),
                          ("ppo-cccs-fgo", [*BRANCHY_CCCS, "--fgo"]))],
    *[{"name": f"{arm}-eps{eps}", "group": "DAPO: clip-higher where the clip binds",
       "cmd": ["grpo.py", *flags, "--eps-high", eps],
       "metrics": ["metrics.jsonl:entropy", "metrics.jsonl:clip_frac"]}
      for arm, flags in (("clip-binds", CLIP_BINDS), ("clip-mb16", CLIP_MB16))
      for eps in ("0.28", "0.2")],
    # Dynamic sampling at equal rollouts: its up-to-3 rounds draw ~16 groups a step, so plain
    # GRPO here draws 16 prompts a step.
    {"name": "grpo-p16", "group": GROUP_DAPO,
     "cmd": ["grpo.py", *CLAIM_RL, "--prompts-per-step", "16"],
     "metrics": ["metrics.jsonl:entropy"]},
]
