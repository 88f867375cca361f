"""Every entry point parses with every preset, and every flag it accepts is read by its code.

The flags of an entry point are flags.add_common_flags + trainer.add_curriculum_flags (read
by the shared modules, SHARED) plus the method's own group (read by the method's file). A flag
that no code reads is an ablation that silently changes nothing; a method flag read by a shared
module would be a hidden dependency of the shared code on one method.
"""
import argparse
import ast
import contextlib
import io
import os

import pytest

import agents
import grpo
import losses
import ppo_fgo
import trainer
from infra import flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENTRY_POINTS = {"grpo.py": grpo, "ppo_fgo.py": ppo_fgo, "agents.py": agents}
SHARED = ("trainer.py", "actor.py", "rollouts.py", "infra/metrics.py", "infra/flags.py",
          "infra/bookkeeping.py", "world/sources.py")   # every method runs


def dests(parser: argparse.ArgumentParser) -> set[str]:
    return {a.dest for a in parser._actions if a.dest != argparse.SUPPRESS and a.dest != "help"}


def common_dests() -> set[str]:
    p = argparse.ArgumentParser()
    flags.add_common_flags(p, "x", aggregations=losses.AGGREGATIONS)
    trainer.add_curriculum_flags(p)
    return dests(p)


def args_read(path: str) -> set[str]:
    """Attribute names read from an args namespace in a file: args.X, a.X (a = r.args),
    pre.X (the preset pre-parse), r.args.X / self.args.X."""
    tree = ast.parse(open(os.path.join(ROOT, path)).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            v = node.value
            if (isinstance(v, ast.Name) and v.id in ("args", "a", "pre")) or \
                    (isinstance(v, ast.Attribute) and v.attr == "args"):
                out.add(node.attr)
    return out


@pytest.mark.parametrize("module", [grpo, ppo_fgo, agents], ids=lambda m: m.__name__)
def test_every_entry_point_parses_with_every_preset(module):
    for preset, settings in module.PRESETS.items():
        args = module.parse_args(["--preset", preset])
        for key, value in settings.items():
            assert getattr(args, key) == value, (module.__name__, preset, key)
        # an explicit flag beats the preset
        assert module.parse_args(["--preset", preset, "--lr", "3e-6"]).lr == 3e-6
    assert module.parse_args(["--preset", "gpu"]).model == "Qwen/Qwen3-1.7B"
    assert module.parse_args([]).model == "base"
    assert module.parse_args([]).sft_steps == 0                     # the base starts competent
    assert module.parse_args(["--model", "tiny"]).sft_steps > 0     # tiny starts from scratch
    assert module.parse_args(["--model", "tiny", "--sft-steps", "3"]).sft_steps == 3
    # a stream of fresh problems on CPU, the loaders' standard on GPU: each drawn once an epoch
    assert module.parse_args([]).prompt_order == "epoch"
    assert module.parse_args(["--preset", "gpu"]).prompt_order == "epoch"


@pytest.mark.parametrize("path", sorted(ENTRY_POINTS))
def test_every_flag_an_entry_point_accepts_is_read(path):
    module = ENTRY_POINTS[path]
    accepted, common = dests(module.build_parser()), common_dests()
    method_flags = accepted - common
    assert method_flags, "the method has a flag group of its own"
    read_by_trainer, read_here = set().union(*map(args_read, SHARED)), args_read(path)
    # A common flag is read by the shared code, or by every method (e.g. the clip range its loss
    # passes to policy_loss).
    every_method = set.intersection(*(args_read(p) for p in ENTRY_POINTS))
    unread_common = sorted(common - read_by_trainer - every_method)
    assert not unread_common, f"common flags no shared code reads: {unread_common}"
    unread = sorted(method_flags - read_here)
    assert not unread, f"{path} accepts but never reads: {unread}"
    leaked = sorted(method_flags & read_by_trainer)
    assert not leaked, f"the shared code reads {path}'s own flags: {leaked}"


def test_method_flags_stay_in_their_method():
    """GRPO's flags are not PPO's and the other way round (no flag accepted and ignored)."""
    grpo_only = dests(grpo.build_parser()) - common_dests()
    ppo_only = dests(ppo_fgo.build_parser()) - common_dests()
    assert {"beta", "adv_scale", "adv_eps", "dynamic_sampling", "max_resample",
            "overlong_filter"} == grpo_only
    assert {"fgo", "critic", "kl_coef", "reward_table"} <= ppo_only
    assert not grpo_only & ppo_only


def test_ppo_help_no_longer_says_curricula_do_not_apply():
    text = ppo_fgo.build_parser().format_help()
    assert "--hard-focus" in text and "--offline-filter" in text
    assert "do not apply" not in text


def test_help_shows_the_defaults_of_the_preset_it_is_given_with():
    """--help is answered by the full parse, after the preset's settings became the defaults:
    agents.py's CPU preset trains on the built-in set, grpo.py's CPU default on the base
    world's rl split, and `--preset gpu --help` shows the GPU model."""
    def help_of(module, *argv):
        with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:
            module.parse_args([*argv, "--help"])
        return " ".join(out.getvalue().split())
    assert "(default: tasks:rl)" in help_of(grpo)
    assert "(default: builtin)" in help_of(agents)
    assert "(default: Qwen/Qwen3-1.7B)" in help_of(grpo, "--preset", "gpu")
    assert "(default: base)" in help_of(grpo, "--preset=cpu")


# Values that parse as numbers but no run can use: each ended (before this check) as a
# traceback after the model was built, or as a run that trained to non-finite weights.
UNUSABLE = [
    ("--lr", "inf"), ("--lr", "nan"), ("--lr", "2"), ("--sft-lr", "inf"), ("--sft-lr", "1e300"),
    ("--test-timeout", "inf"), ("--test-timeout", "1e300"), ("--temperature", "1e-300"),
    ("--temperature", "0.001"), ("--temperature", "inf"), ("--eval-temperature", "1e-300"),
    ("--seed", "-1"), ("--seed", str(2**70)), ("--seed", str(2**32)), ("--model-seed", "-1"),
    ("--max-grad-norm", "inf"), ("--weight-decay", "inf"), ("--eps-high", "inf"),
    ("--tis-cap", "nan"), ("--engine-kv-cache-gib", "nan"), ("--train-eval-problems", "-2"),
]


@pytest.mark.parametrize("module", [grpo, ppo_fgo, agents], ids=lambda m: m.__name__)
@pytest.mark.parametrize("flag, value", UNUSABLE)
def test_a_numeric_flag_refuses_values_no_run_can_use_at_parse_time(module, flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        module.parse_args([flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and len(err.strip().splitlines()) == 1


def test_the_edges_of_each_range_are_accepted():
    args = grpo.parse_args(["--seed", str(2**32 - 1), "--model-seed", "0", "--temperature",
                            "0.01", "--eval-temperature", "0", "--lr", "1", "--sft-lr", "1e-9",
                            "--test-timeout", "3600", "--train-eval-problems", "-1"])
    assert (args.seed, args.temperature, args.eval_temperature, args.lr) == (2**32 - 1, 0.01,
                                                                             0.0, 1.0)
    assert ppo_fgo.parse_args(["--critic-lr", "1e-6"]).critic_lr == 1e-6


@pytest.mark.parametrize("flag, value", [("--critic-lr", "inf"), ("--vf-clip", "inf"),
                                         ("--kl-coef", "nan")])
def test_ppos_own_numeric_flags_are_finite(flag, value):
    with pytest.raises(SystemExit):
        ppo_fgo.parse_args([flag, value])


@pytest.mark.parametrize("table, want", [("{bad", "not JSON"), ("[1, 2]", "JSON object"),
                                         ('{"pass": "x"}', "finite number"),
                                         ('{"pass": Infinity}', "finite number"),
                                         ('{"passed": 1}', "unknown key")])
def test_ppos_reward_table_is_an_object_of_known_verdicts_and_finite_rewards(table, want,
                                                                             capsys):
    with pytest.raises(SystemExit) as e:
        ppo_fgo.parse_args(["--reward-table", table])
    assert e.value.code == 2 and want in capsys.readouterr().err
    assert ppo_fgo.parse_args(["--reward-table", '{"pass": 2}']).reward_table


@pytest.mark.parametrize("argv", [["--seed", "-1"], ["--corpus-seed", str(2**40)],
                                  ["--lr", "inf"]])
def test_the_base_models_recipe_checks_its_numbers_too(argv):
    from models import make_base
    with pytest.raises(SystemExit) as e:
        make_base.build_parser().parse_args(argv)
    assert e.value.code == 2
