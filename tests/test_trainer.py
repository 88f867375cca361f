"""Tests for trainer.py: the curriculum object, metrics sinks, progress lines, the update
protocol on its own (padding batches, separate critic), score."""

import copy
import io
import json
import math
import os
import subprocess
import sys
import types

import pytest
import torch

import actor
import grpo
import losses
import rollouts
import trainer

# ----------------------------------------------------------------------------- curricula
from data import Problem
from infra import bookkeeping, evalstats, flags, metrics, model
from world import tiny  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# stages start at lines 4, 2, then the final stage
TWO_IFS = "x = int(input())\nif x > 0:\n    print(1)\nif x < 0:\n    print(-1)\n"


def _problem(pid, solution=TWO_IFS):
    return Problem(id=pid, source="test", question="q", starter_code="", fn_name=None,
                   tests=[{"input": "1\n", "output": "1\n"}],
                   solutions=[solution] if solution else [], difficulty="easy")


def _curriculum(problems, rates, **kw):
    """trainer.make_curriculum with CCCS at threshold 0.8, a window of 1 update (kw: others)."""
    settings = dict(curriculum="cccs", cccs_threshold=0.8, cccs_average="window", cccs_span=1,
                    cccs_loops=False, hard_focus="")
    return trainer.make_curriculum(problems, rates, **{**settings, **kw})


def test_make_curriculum_off_without_flags():
    assert _curriculum([_problem("a")], {}, curriculum="none") is None


def test_curriculum_cccs_prefix_update_and_stats():
    problems = [_problem("a"), _problem("b"), _problem("nosol", solution=None),
                _problem("flat", solution="print(1)\n")]
    cur = _curriculum(problems, {})
    assert cur.pool(problems, 0) == problems  # no hard focus: every problem
    assert cur.prefix(problems[0]) == "x = int(input())\nif x > 0:\n    print(1)\n"
    assert cur.prefix(problems[2]) == "" and cur.prefix(problems[3]) == ""
    assert cur.stats() == {"cccs_final": 1, "cccs_final-2": 2, "cccs_final_share": 1 / 3}
    cur.update("a", [1.0, 1.0, 0.0, 1.0])  # 0.75 < 0.8: stays
    assert cur.prefix(problems[0]).count("\n") == 3
    cur.update("a", [1.0, 1.0])  # 1.0 >= 0.8 with span 1: one stage earlier
    assert cur.prefix(problems[0]) == "x = int(input())\n"
    cur.update("nosol", [1.0])  # a problem CCCS lacks is still tracked, never an error
    assert cur.tracker.get("nosol") == 1.0 and cur.tracker.get("a") == 1.0
    assert cur.stats() == {"cccs_final": 1, "cccs_final-1": 1, "cccs_final-2": 1,
                           "cccs_final_share": 1 / 3,
                           # both of a's draws were at final-2: (0.75 + 1.0) / 2
                           "cccs_pass_rate/final-2": 0.875, "cccs_draws_final_share": 0.0}


def test_curriculum_logs_each_steps_pass_rate_per_cccs_stage():
    """stats() reports the mean reward of the groups drawn at each stage since the last
    stats() (the stage a group was drawn at, before its update moved it) and the share of
    those draws at the whole program; the next step starts afresh."""
    problems = [_problem("a"), _problem("b")]
    cur = _curriculum(problems, {})          # both at final-2; span 1, threshold 0.8
    cur.update("a", [1.0, 1.0])              # drawn at final-2, moves to final-1
    cur.update("b", [0.0, 0.5])
    stats = cur.stats()
    assert stats["cccs_pass_rate/final-2"] == pytest.approx(0.625)   # (1.0 + 0.25) / 2
    assert "cccs_pass_rate/final-1" not in stats and stats["cccs_draws_final_share"] == 0.0
    cur.update("a", [1.0])                   # final-1 -> final
    cur.update("a", [0.0, 1.0])              # drawn at the whole program
    stats = cur.stats()
    assert (stats["cccs_pass_rate/final-1"], stats["cccs_pass_rate/final"]) == (1.0, 0.5)
    assert stats["cccs_draws_final_share"] == 0.5 and "cccs_pass_rate/final-2" not in stats
    assert not any(k.startswith("cccs_pass_rate") for k in cur.stats())   # nothing drawn


def test_evaluation_reports_pass_at_1_on_the_train_tests_beside_every_test():
    """Judged once on every test, a sample also counts in the train-style regime when its
    problem's first N tests pass: a program right on small inputs passes the first 2 of
    (1, 2, 30), a right one all three, one that does not compile none; keep_eval keeps both
    regimes' figures and per-problem rates (rates.json)."""
    from infra.engines import Completion
    tests = [{"input": f"{x}\n", "output": f"{x + 1}\n"} for x in (1, 2, 30)]
    p = Problem(id="p", source="test", question="q", starter_code="", fn_name=None,
                tests=tests, solutions=[], difficulty="easy")
    right = "x = int(input())\nprint(x + 1)\n"

    class Engine:
        def generate(self, prompts, n, **kw):
            return [[Completion(f"```python\n{c}```", [1], "stop")
                     for c in (SMALL_ONLY, right, "def (:\n", SMALL_ONLY)] for _ in prompts]
    d = model.Dist(0, 1, 0, torch.device("cpu"))
    judging = dict(n=4, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0, reward="binary",
                   test_timeout=2.0, workers=1)
    res = rollouts.evaluate(Engine(), None, [p], d, train_tests=2, **judging)
    assert res["pass@1"] == 0.25 and res["pass@1_on_train_tests"] == 0.75
    assert res["rates_on_train_tests"] == {"p": 0.75} and res["rates"] == {"p": 0.25}
    assert "pass@1_on_train_tests" not in rollouts.evaluate(Engine(), None, [p], d, **judging)
    run = types.SimpleNamespace(state={})
    trainer.keep_eval(run, "after_rl", res, "train_")
    assert run.state["train_pass_at_1_on_train_tests_after_rl"] == 0.75
    assert run.state["train_rates_on_train_tests_after_rl"] == {"p": 0.75}
    ok = types.SimpleNamespace(status="pass", total=3, tests=[])
    assert rollouts.passes_train_tests(ok, 2) and not rollouts.passes_train_tests(None, 2)


def test_curriculum_hard_focus_seeded_from_rates_and_past_the_end():
    problems = [_problem(p) for p in "abcd"]
    rates = {"a": 0.9, "b": 0.0, "c": 0.5, "d": 0.25, "other": 0.0}
    cur = _curriculum(problems, rates, curriculum="none", hard_focus="3:2,1:1")
    assert cur.tracker.rates == {"a": 0.9, "b": 0.0, "c": 0.5, "d": 0.25}  # only train ids
    assert [p.id for p in cur.pool(problems, 0)] == ["b", "c", "d"]
    assert cur.prefix(problems[1]) == ""  # hard focus alone: whole programs
    assert cur.stats() == {"hf_phase": 1, "hf_pool": 3, "hf_pool_pass_rate": 0.25}
    cur.update("b", [1.0, 1.0])  # b got solved in phase 1; phase 2 keeps the lowest: d
    assert [p.id for p in cur.pool(problems, 1)] == ["b", "c", "d"]
    assert [p.id for p in cur.pool(problems, 2)] == ["d"]
    assert [p.id for p in cur.pool(problems, 50)] == ["d"]  # past the schedule: last phase
    assert cur.stats()["hf_phase"] == 2
    # a filtered train set that lost every kept problem falls back to all of it
    assert cur.pool(problems[:2], 3) == problems[:2]


def test_curriculum_both_and_bad_spec():
    problems = [_problem("a"), _problem("b")]
    cur = _curriculum(problems, {"a": 0.5, "b": 0.1}, hard_focus="1:1")
    assert [p.id for p in cur.pool(problems, 0)] == ["b"] and cur.prefix(problems[1])
    assert set(cur.stats()) == {"cccs_final-2", "cccs_final_share", "hf_phase", "hf_pool",
                                "hf_pool_pass_rate"}
    with pytest.raises(SystemExit, match="--hard-focus"):
        _curriculum(problems, {}, hard_focus="2:1,5:1")


def test_curriculum_state_round_trip_continues_identically():
    problems = [_problem(p) for p in "abc"]
    settings = dict(hard_focus="2:1,1:5", cccs_span=2)
    cur = _curriculum(problems, {"a": 0.1, "b": 0.2, "c": 0.9}, **settings)
    cur.pool(problems, 0)
    for pid, rs in (("a", [1.0]), ("a", [1.0]), ("b", [0.0]), ("a", [1.0])):
        cur.update(pid, rs)
    cur.stats()   # the step's metrics row comes before its checkpoint (log_step, save_step)
    state = json.loads(json.dumps(cur.state_dict()))  # what trainer_state.json holds
    back = _curriculum(problems, {"a": 0.0, "b": 0.0, "c": 0.0}, **settings)  # resume seeds
    back.load_state_dict(state)
    assert back.state_dict() == cur.state_dict() and back.stats() == cur.stats()
    assert [back.prefix(p) for p in problems] == [cur.prefix(p) for p in problems]
    # the next phase ranks by the restored rates (b: 0.0 < a: 1.0), not the fresh seed
    assert [p.id for p in back.pool(problems, 1)] == [p.id for p in cur.pool(problems, 1)] == ["b"]
    # a checkpoint from a run without hard focus: its CCCS part still loads
    only = _curriculum(problems, {}, cccs_span=2)
    only.load_state_dict(state)
    assert only.cccs.state_dict() == cur.cccs.state_dict()




# ----------------------------------------------------------------------------- metrics

class FakeWriter:
    """Stands in for torch.utils.tensorboard.SummaryWriter: records what it is given."""
    made = []

    def __init__(self, log_dir):
        self.log_dir, self.scalars, self.closed = log_dir, [], False
        FakeWriter.made.append(self)

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def flush(self):
        pass

    def close(self):
        self.closed = True


def test_metrics_log_writes_jsonl_and_tensorboard_scalars(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard",
                        types.SimpleNamespace(SummaryWriter=FakeWriter))
    FakeWriter.made.clear()
    log = metrics.MetricsLog(str(tmp_path), True, ["tensorboard"])
    log({"phase": "sft", "step": 20, "nll": 0.5})
    log({"phase": "eval", "when": "before_rl", "pass@1": 0.25})
    log({"phase": "rl", "step": 3, "reward_mean": 0.125, "zero_adv_frac": 1})
    log({"phase": "eval", "when": "after_rl", "pass@1": 0.5})
    log.close()
    (w,) = FakeWriter.made
    assert w.log_dir == str(tmp_path / "tensorboard") and w.closed
    # eval scalars sit at the RL step they were taken after (0 before RL)
    assert w.scalars == [("sft/nll", 0.5, 20), ("eval/pass@1", 0.25, 0),
                         ("rl/reward_mean", 0.125, 3), ("rl/zero_adv_frac", 1.0, 3),
                         ("eval/pass@1", 0.5, 3)]
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [r["phase"] for r in rows] == ["sft", "eval", "rl", "eval"]
    # other ranks write nothing and open no sink
    FakeWriter.made.clear()
    metrics.MetricsLog(str(tmp_path / "r1"), False, ["tensorboard"])({"phase": "rl", "step": 1})
    assert FakeWriter.made == [] and not (tmp_path / "r1").exists()


def test_metrics_log_wandb_runs_offline_by_default(tmp_path, monkeypatch):
    calls = {}

    class FakeRun:
        def log(self, values):
            calls.setdefault("log", []).append(values)

        def finish(self):
            calls["finished"] = True

    def init(**kw):
        calls["init"] = kw
        return FakeRun()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log = metrics.MetricsLog(str(tmp_path), True, ["wandb"], config={"lr": 1e-4}, name="grpo")
    log({"phase": "rl", "step": 2, "loss": 0.5})
    log.close()
    assert calls["init"]["mode"] == "offline" and calls["init"]["config"] == {"lr": 1e-4}
    assert calls["init"]["dir"] == str(tmp_path) and calls["init"]["name"] == "grpo"
    assert calls["log"] == [{"rl/loss": 0.5, "rl/step": 2}] and calls["finished"]


def test_missing_optional_packages_and_bad_names_say_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)   # import fails
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(SystemExit, match="pip install tensorboard"):
        metrics.MetricsLog(str(tmp_path), True, ["tensorboard"])
    with pytest.raises(SystemExit, match="pip install wandb"):
        metrics.MetricsLog(str(tmp_path), True, ["wandb"])
    assert metrics.report_to_list("none") == [] and metrics.report_to_list("") == []
    assert metrics.report_to_list("tensorboard,wandb") == ["tensorboard", "wandb"]
    with pytest.raises(SystemExit, match="--report-to 'mlflow'"):
        metrics.report_to_list("mlflow")


def test_real_tensorboard_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    log = metrics.MetricsLog(str(tmp_path), True, ["tensorboard"])
    log({"phase": "rl", "step": 1, "loss": 0.5})
    log.close()
    assert any(p.name.startswith("events.out") for p in (tmp_path / "tensorboard").iterdir())


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_lines_in_a_log_file_are_plain_and_throttled():
    stream, clock = io.StringIO(), FakeClock()
    bar = metrics.PlainProgress(range(10), "grpo", 10, stream=stream, every=3.0, clock=clock)
    for i in bar:
        bar.set_postfix(reward=f"{i / 10:.1f}")
        clock.t += 1.0                    # one second per step
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    # the first step, then at most one line per 3 s, and the last step
    assert [line.split()[1] for line in lines] == ["1/10", "4/10", "7/10", "10/10"]
    assert lines[-1] == "[grpo] 10/10 reward=0.9 (1.0 s/it)"
    # A file (not a terminal) gets plain lines; a terminal gets tqdm; other ranks nothing.
    assert isinstance(metrics.progress(range(3), "x", 3, stream=io.StringIO()),
                      metrics.PlainProgress)

    class Terminal(io.StringIO):
        def isatty(self):
            return True
    assert not isinstance(metrics.progress(range(3), "x", 3, stream=Terminal()),
                          metrics.PlainProgress)
    quiet = io.StringIO()
    assert list(metrics.progress(range(3), "x", 3, enabled=False, stream=quiet)) == [0, 1, 2]
    assert quiet.getvalue() == ""


# ----------------------------------------------------------------------------- update, score

def test_update_trains_a_separate_critic_with_the_values_it_gives_the_loss(tiny_lm):
    from infra.model import PolicyLogprobs, ValueModel
    lm = tiny_lm(0)
    policy = PolicyLogprobs(lm, 4)
    critic = ValueModel(copy.deepcopy(lm.get_decoder()), lm.config.hidden_size)
    samples = [actor.Sample([3, 4], [5, 6, 7], [1.0, 0.0, -1.0]),
               actor.Sample([3], [8, 9], [0.5, 0.5])]
    seen = []

    def loss_fn(out, batch, denom):
        seen.append((out.values.shape, denom))
        # value loss only: (V - 1)^2 over the response tokens, global normaliser
        return losses.aggregate((out.values - 1) ** 2, batch.response_mask, "token-mean",
                                denom.response), {"v": 1.0}
    opt = torch.optim.SGD(policy.parameters(), lr=0.1)
    critic_opt = torch.optim.SGD(critic.parameters(), lr=0.1)
    before = critic.head.bias.item()

    def with_critic_values(batch):      # what ppo_fgo.forward_with_values does
        out = actor.forward(policy, batch, with_entropy=True)
        out.values = critic(batch.input_ids, batch.attention_mask)[:, :-1]
        return out
    st = actor.update(policy, opt, samples, loss_fn, micro_batch=1, agg="token-mean",
                      max_len=None, pad_id=0, device="cpu", max_grad_norm=1e9,
                      forward_fn=with_critic_values, also_train=[("critic", critic, critic_opt)])
    # two micro-batches (shortest first), each with the critic's values [1, L-1] and the
    # same global normaliser
    assert [s for s, _ in seen] == [(1, 2), (1, 4)]
    assert all(d == actor.Denominators(5.0, 5.0) for _, d in seen)
    assert st["loss"] == pytest.approx(1.0)          # V = 0 everywhere: mean (0 - 1)^2
    assert st["critic_grad_norm"] > 0 and critic.head.bias.item() > before   # V moves to 1
    assert st["grad_norm"] == 0.0                    # the policy got no gradient
    assert st["trained_tokens"] == 5 and st["v"] == 1.0


def test_score_reference_only_and_with_scores_returns_new_samples(tiny_lm):
    from infra.model import PolicyLogprobs
    ref = PolicyLogprobs(tiny_lm(1), 4)
    samples = [actor.Sample([3, 4], [5, 6]), actor.Sample([3], [7])]
    scores = actor.score(samples, micro_batch=8, pad_id=0, device="cpu", ref=ref)
    assert scores.logp is None and scores.values is None
    assert [len(x) for x in scores.ref_logp] == [2, 1]
    new = actor.with_scores(samples, ref_logp=scores.ref_logp)
    assert samples[0].ref_logp is None and new[0].ref_logp == scores.ref_logp[0]
    assert new[0].old_logp is None
    with pytest.raises(TypeError):
        actor.with_scores(samples, logp=scores.ref_logp)     # not a per-token field
    batch = actor.collate(new, 0, "cpu")
    # position t scores token t+1: row 0's response tokens 5, 6 are at positions 1, 2
    assert batch.ref_logp[0, 1:3].tolist() == pytest.approx(scores.ref_logp[0])


# ----------------------------------------------------------------------------- run.sh

@pytest.mark.parametrize("smi, gpus", [
    ('echo "GPU 0: NVIDIA H200 (UUID: a)"; echo "GPU 1: NVIDIA H200 (UUID: b)"', "2"),
    ('echo "NVIDIA-SMI has failed because it could not communicate with the driver."; exit 9',
     "0"),
    (None, "0")])
def test_run_sh_counts_gpus_robustly(tmp_path, smi, gpus):
    """The GPU count of run.sh (its NGPU lines, run under its own set -euo pipefail) with a
    working, a failing and no nvidia-smi: one integer, never a second line or an error."""
    import os
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lines = open(os.path.join(root, "run.sh")).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NGPU=$("))
    snippet = "\n".join(lines[start:start + 2])
    if smi is not None:
        (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\n{smi}\n")
        (tmp_path / "nvidia-smi").chmod(0o755)
    script = f"set -euo pipefail\n{snippet}\n[ \"$NGPU\" -gt 0 ] || true\necho \"$NGPU\"\n"
    res = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert res.returncode == 0 and res.stdout == f"{gpus}\n" and res.stderr == ""


def test_sampler_logprobs_travel_on_samples_and_tis_needs_them():
    from infra.engines import Completion
    with_lp = Completion("x", [5, 6], "stop", [-0.5, -1.0])
    without = Completion("x", [5, 6], "stop")
    assert actor.sampler_extras(with_lp, tis_cap=0.0) == {"sampler_logp": [-0.5, -1.0]}
    assert actor.sampler_extras(without, tis_cap=0.0) == {}   # mismatch simply not logged
    with pytest.raises(SystemExit, match="--tis-cap needs the engine's sampler log-probs"):
        actor.sampler_extras(without, tis_cap=2.0)
    assert not flags.off_policy(grpo.parse_args([]))
    assert flags.off_policy(grpo.parse_args(["--epochs", "2"]))
    assert flags.off_policy(grpo.parse_args(["--mini-batches", "2"]))


def test_epoch_batches_draw_without_replacement_and_drop_the_partial_batch():
    """51 problems, 8 prompts a step: 6 steps an epoch see 48 distinct problems (3 dropped),
    the next epoch is another permutation; 2 ranks split the same global batch; the draw is a
    function of (seed, step), so a resumed run repeats it."""
    pool = list(range(51))
    one = model.Dist(0, 1, 0, torch.device("cpu"))
    epoch0 = [rollouts.epoch_batch(pool, 8, one, 0, step) for step in range(6)]
    seen = [p for b in epoch0 for p in b]
    assert all(len(b) == 8 for b in epoch0) and len(set(seen)) == 48
    epoch1 = [p for step in range(6, 12) for p in rollouts.epoch_batch(pool, 8, one, 0, step)]
    assert len(set(epoch1)) == 48 and epoch1 != seen
    ranks = [rollouts.epoch_batch(pool, 4, model.Dist(r, 2, r, torch.device("cpu")), 0, 3)
             for r in (0, 1)]
    assert sorted(ranks[0] + ranks[1]) == sorted(epoch0[3])
    assert rollouts.epoch_batch(pool, 8, one, 0, 3) == epoch0[3]          # same (seed, step)
    assert rollouts.epoch_batch(pool, 8, one, 1, 3) != epoch0[3]          # another seed
    assert len(rollouts.epoch_batch([7, 9], 8, one, 0, 0)) == 8           # small pool: cycled


def test_train_eval_set_spreads_over_the_train_set_and_follows_the_flag():
    train, held = list(range(960)), list(range(96))
    sample = bookkeeping.train_eval_set(train, held, -1)              # as many as the eval set
    assert len(set(sample)) == 96 and sample == sorted(sample)
    assert sample == bookkeeping.train_eval_set(train, held, -1)      # the same every run
    # Interleaved families (problem i is family i % 6): every family is represented, which
    # a stride of len/n (every 10th: families 0, 2, 4 only) would not give.
    assert {i % 6 for i in sample} == set(range(6))
    assert bookkeeping.train_eval_set(train, train, -1) == []         # train = eval: nothing new
    assert bookkeeping.train_eval_set(train, held, 0) == []
    assert bookkeeping.train_eval_set(train[:50], held, -1) == train[:50]  # capped: the train set


def test_max_problems_cuts_the_train_set_and_max_eval_problems_the_eval_set():
    def sets(*argv):
        args = flags.new_parser("t", "t")
        flags.add_common_flags(args, "grpo", aggregations=losses.AGGREGATIONS)
        return trainer.load_problem_sets(args.parse_args(list(argv)))
    full_train, full_eval = sets()
    assert (len(full_train), len(full_eval)) == (3614, 1338)     # tasks:rl, tasks:eval
    train, evals = sets("--max-problems", "50")                  # the old behaviour: both cut
    assert (len(train), len(evals)) == (50, 50)
    train, evals = sets("--max-problems", "50", "--max-eval-problems", "0")
    assert (len(train), len(evals)) == (50, 1338)                # RL on 50, scored on all
    assert [p.id for p in evals] == [p.id for p in full_eval]
    train, evals = sets("--max-eval-problems", "10")
    assert (len(train), len(evals)) == (3614, 10)
    # train = eval stays one list, so train_eval_set adds no duplicate train sample.
    train, evals = sets("--train-data", "builtin", "--eval-data", "builtin", "--max-problems", "6")
    assert evals is train and len(train) == 6
    assert bookkeeping.train_eval_set(train, evals, -1) == []


def test_hardest_quarter_uses_the_difficulty_score_and_the_unbiased_estimator():
    probs = [_problem(f"p{i}") for i in range(8)]
    for p, score in zip(probs, [3, 40, 10, 25, 7, 30, 5, 12]):
        p.metadata["score"] = score
    solved = {"p0": 4, "p1": 0, "p2": 4, "p3": 2, "p4": 4, "p5": 1, "p6": 4, "p7": 4}
    out = evalstats.hardest_quarter(probs, solved, 4)
    # the 2 hardest: p1 (40, 0 of 4) and p5 (30, 1 of 4)
    assert out["pass@1_hardest_quarter"] == 1 / 8 and out["pass@4_hardest_quarter"] == 0.5
    assert (out["hardest_quarter_problems"], out["hardest_quarter_min_score"]) == (2, 30)
    assert evalstats.hardest_quarter([_problem("x")], {"x": 4}, 4) == {}   # no score: none


def test_pass_at_1_by_family_pools_the_samples_of_each_family():
    probs = [_problem(f"p{i}") for i in range(5)]
    for p, fam in zip(probs, ["arith", "classify", "arith", "classify", "classify"]):
        p.metadata["family"] = fam
    solved = {"p0": 4, "p1": 0, "p2": 1, "p3": 2, "p4": 1}     # of 4 samples each
    out = evalstats.by_family(probs, solved, 4)["pass@1_by_family"]
    assert out == {"arith": 5 / 8, "classify": 3 / 12}
    assert evalstats.by_family(probs[:2], {"p0": 4}, 4)["pass@1_by_family"] == {"arith": 1.0}
    assert evalstats.by_family([_problem("x")], {"x": 4}, 4) == {}    # no family: none


def test_bench_update_runs_and_reports_every_size():
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "bench/bench_update.py", "--steps", "2", "--batch", "4",
                          "--sizes", "4,2", "--problems", "8"], capture_output=True, text=True,
                         cwd=root, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-2000:]
    lines = [x for x in res.stdout.splitlines() if x.startswith("micro-batch")]
    assert len(lines) == 2 and "1.00x micro-batch 4" in lines[0]


def test_standard_error_plain_and_within_families():
    xs = [0.0, 1.0, 0.0, 1.0]
    # s^2 = 1/3, se = sqrt(1/3 / 4)
    assert evalstats.standard_error(xs) == pytest.approx(math.sqrt(1 / 12))
    # Two families, each all-0 or all-1: the spread is all between them, and the mix is fixed.
    assert evalstats.standard_error(xs, ["a", "b", "a", "b"]) == 0.0
    # Within families: family a {0, 1}, b {1, 1}: only a varies; (2/4)^2 * (1/2)/2 = 1/16
    assert evalstats.standard_error([0.0, 1.0, 1.0, 1.0], ["a", "a", "b", "b"]) == \
        pytest.approx(0.25)
    assert evalstats.standard_error([0.5]) == 0.0
    problems = [types.SimpleNamespace(id=i, metadata={"family": f}) for i, f in
                ((1, "a"), (2, "b"))]
    assert evalstats.family_labels(problems, [2, 1]) == ["b", "a"]
    assert evalstats.family_labels(problems + [types.SimpleNamespace(id=3, metadata={})],
                                  [3]) is None


# ----------------------------------------------------------------------------- rewards

LOOP_ON_ZERO = "a = int(input())\nwhile a == 0:\n    pass\nprint(a + 1)\n"


@pytest.mark.parametrize("reward,expected", [("fraction", 0.5), ("binary", 0.0)])
def test_fraction_reward_does_not_depend_on_the_order_of_the_tests(reward, expected):
    """A program that loops on one test and passes the other: the fraction reward is 1/2 in
    either order (every test judged on its own), the binary reward 0."""
    loop, ok = {"input": "0\n", "output": "1\n"}, {"input": "2\n", "output": "3\n"}
    rewards = []
    for tests in ([loop, ok], [ok, loop]):
        p = Problem(id="p", source="test", question="q", starter_code="", fn_name=None,
                    tests=tests, solutions=[], difficulty="easy")
        text = f"```python\n{LOOP_ON_ZERO}```"
        rewards += rollouts.score_completions([p], [text], reward=reward, test_timeout=0.5,
                                              workers=1)[0]
    assert rewards == [expected, expected]


def test_only_the_binary_reward_stops_judging_at_the_first_failing_test():
    """A program wrong on the first of three tests: the binary reward (0) needs no more, so
    the other two are not run; the fraction reward (2/3) runs them. With FGO's coverage the
    sandbox runs every test (tests/test_sandbox.py)."""
    tests = [{"input": f"{x}\n", "output": f"{x + 1}\n"} for x in (0, 1, 2)]
    p = Problem(id="p", source="test", question="q", starter_code="", fn_name=None,
                tests=tests, solutions=[], difficulty="easy")
    text = "```python\nx = int(input())\nprint(x + 1 if x else 0)\n```"
    for reward, stops in (("binary", True), ("fraction", False)):
        for coverage in (False, True):
            job = rollouts.completion_job(p, text, "", reward=reward, test_timeout=2.0,
                                          coverage=coverage)[1]
            assert job["stop_at_first_failure"] is stops and job["stop_after_timeout"] is stops
    (binary,), (result,), _ = rollouts.score_completions([p], [text], reward="binary",
                                                         test_timeout=2.0, workers=1)
    assert binary == 0.0 and [t.status for t in result.tests] == ["wrong_answer", "not_run",
                                                                  "not_run"]
    (fraction,), (result,), _ = rollouts.score_completions([p], [text], reward="fraction",
                                                           test_timeout=2.0, workers=1)
    assert fraction == pytest.approx(2 / 3) and result.status == "wrong_answer"


SMALL_ONLY = "x = int(input())\nprint(x + 1 if x < 10 else 0)\n"


def test_max_train_tests_rewards_on_the_first_n_and_counts_what_they_let_through():
    """--max-train-tests 2: the reward sees the first 2 tests, which a program right on small
    inputs only passes; false_passes runs the passing programs on the rest and finds it;
    rollout_means reports the share; N = 0 leaves the problem whole."""
    tests = [{"input": f"{x}\n", "output": f"{x + 1}\n"} for x in (1, 2, 30)]
    p = Problem(id="p", source="test", question="q", starter_code="", fn_name=None,
                tests=tests, solutions=[], difficulty="easy")
    assert rollouts.train_view(p, 0) is p and rollouts.train_view(p, 3) is p
    assert rollouts.train_view(p, 2).tests == tests[:2] and p.tests == tests   # a copy
    right = "x = int(input())\nprint(x + 1)\n"
    texts = [f"```python\n{c}```" for c in (SMALL_ONLY, right, "print(0)")] + ["no code"]
    flat = [p] * 4
    rewards, results, programs = rollouts.score_completions(
        [rollouts.train_view(q, 2) for q in flat], texts, reward="binary", test_timeout=2.0,
        workers=1)
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    sandbox = dict(test_timeout=2.0, workers=1)
    assert rollouts.false_passes(flat, programs, results, 2, **sandbox) == [True, False, False,
                                                                            False]
    assert rollouts.false_passes(flat, programs, results, 0, **sandbox) == [False] * 4
    ro = rollouts.Rollouts([[1]], [types.SimpleNamespace(token_ids=[1], finish_reason="stop")]
                           * 4, rewards, results, programs, [True, False, False, False])
    means = rollouts.rollout_means(rollouts.rollout_sums(ro))
    assert means["false_pass_frac"] == 0.5 and means["pass_rate"] == 0.5
    ro.false_pass = None
    assert "false_pass_frac" not in rollouts.rollout_means(rollouts.rollout_sums(ro))


def test_duplicate_share_counts_the_repeats_within_each_prompts_group():
    """Two prompts, 4 samples each: [A, A, no code, A] and [A, B, B, C] on another problem.
    Repeats within a group: 2 + 1 of the 7 programs with code; A in the second group is that
    prompt's first A, not a repeat. The sandbox runs each repeat once: copies share a Result."""
    def problem(pid, add):
        tests = [{"input": f"{x}\n", "output": f"{x + add}\n"} for x in (1, 2)]
        return Problem(id=pid, source="test", question="q", starter_code="", fn_name=None,
                       tests=tests, solutions=[], difficulty="easy")
    a, b, c = ("x = int(input())\nprint(x + 1)\n", "print(3)\n", "print(x)\n")
    texts = [f"```python\n{code}```" for code in (a, a)] + ["no code"] + \
        [f"```python\n{code}```" for code in (a, a, b, b, c)]
    flat = [problem("p", 1)] * 4 + [problem("q", 2)] * 4
    rewards, results, programs = rollouts.score_completions(
        flat, texts, reward="binary", test_timeout=2.0, workers=1)
    assert rewards == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert results[0] is results[1] is results[3] and results[5] is results[6]
    assert results[4] is not results[0]                 # the same program, other tests
    assert rollouts.repeated_programs(programs, 4) == 3
    ro = rollouts.Rollouts([[1], [1]], [types.SimpleNamespace(token_ids=[1],
                                                              finish_reason="stop")] * 8,
                           rewards, results, programs)
    assert rollouts.rollout_means(rollouts.rollout_sums(ro))["judge/duplicate_frac"] == 3 / 7


def test_rollouts_time_the_engine_and_the_sandbox_as_separate_phases(monkeypatch):
    """generate_and_score and evaluate add the engine's seconds to the timer's "generate" and
    the sandbox's (the rewards, and under --max-train-tests the false-pass check) to "reward";
    a fake clock that the engine moves by 3 s a call and the sandbox by 5 s a batch."""
    from infra.engines import Completion
    now = [0.0]

    class Engine:
        def generate(self, prompts, n, **kw):
            now[0] += 3.0
            return [[Completion("```python\nprint(1)\n```", [1, 2], "stop")] * n
                    for _ in prompts]

    def run_batch(jobs, workers=None):
        now[0] += 5.0
        return [types.SimpleNamespace(status="pass", pass_rate=1.0) for _ in jobs]

    monkeypatch.setattr(rollouts.sandbox, "run_batch", run_batch)
    monkeypatch.setattr(rollouts, "prompt_text", lambda tokenizer, p, prefix="": "q")
    judging = dict(test_timeout=1.0, reward="binary", workers=1)
    sampling = dict(group_size=2, temperature=1.0, top_p=1.0, max_new_tokens=8,
                    max_train_tests=0, **judging)
    timer = metrics.Timer(clock=lambda: now[0])
    ro = rollouts.generate_and_score(Engine(), lambda text: {"input_ids": [1]},
                                     [_problem("a")], 0, timer=timer, **sampling)
    assert ro.rewards == [1.0, 1.0] and timer.seconds == {"generate": 3.0, "reward": 5.0}
    two_tests = Problem(id="b", source="test", question="q", starter_code="", fn_name=None,
                        tests=[{"input": "1\n", "output": "1\n"}] * 2, solutions=[],
                        difficulty="easy")
    # max_train_tests 1: the passing programs run again on the second test
    rollouts.generate_and_score(Engine(), lambda text: {"input_ids": [1]}, [two_tests], 0,
                                timer=timer, **{**sampling, "max_train_tests": 1})
    assert timer.seconds == {"generate": 6.0, "reward": 15.0}
    res = rollouts.evaluate(Engine(), None, [_problem("a")],
                            model.Dist(0, 1, 0, torch.device("cpu")), n=2, temperature=1.0,
                            top_p=1.0, max_new_tokens=8, seed=0, timer=timer, **judging)
    assert res["pass@1"] == 1.0 and res["judge/duplicate_frac"] == 0.5   # print(1) twice
    assert timer.pop() == {"time/generate": 9.0, "time/reward": 20.0} and timer.seconds == {}


def test_rewards_scored_while_generating_equal_the_serial_rollouts():
    """--overlap-reward: the sandbox judges each prompt's completions while the engine makes
    the next ones (transformers' engine in chunks of one prompt's group here), and the rollouts
    are the serial path's: the same completions, rewards, verdicts, programs and false passes,
    in the same order; the evaluation's figures too. The shipped base model on four task
    families (a mix of passes, wrong answers, compile and runtime errors), the real sandbox;
    the engine's seconds go to "generate" and the wait after it to "reward"."""
    import random

    import data
    from infra import engines
    from world import tasks
    families = [tasks.arith, tasks.strings, tasks.aggregate, tasks.classify]
    problems = [data.Problem(**tasks._row(family(random.Random(i)), "rl", i))
                for i, family in enumerate(families)]
    engine = engines.HFEngine(model.resolve_model("base"), torch.device("cpu"), batch_size=4)
    judging = dict(top_p=1.0, max_new_tokens=112, test_timeout=2.0, reward="fraction",
                   workers=2)

    def rollouts_of(overlap):
        timer = metrics.Timer()
        ro = rollouts.generate_and_score(engine, engine.tokenizer, problems, 3, group_size=4,
                                         temperature=1.0, max_train_tests=2, timer=timer,
                                         overlap=overlap, **judging)
        verdicts = [None if r is None else (r.status, r.passed, r.total,
                                            [t.status for t in r.tests], r.executed_lines)
                    for r in ro.results]
        return (ro.prompt_ids, [(c.token_ids, c.text, c.finish_reason, c.logprobs)
                                for c in ro.completions],
                ro.rewards, verdicts, ro.programs, ro.false_pass), set(timer.seconds)

    serial, phases = rollouts_of(False)
    assert rollouts_of(True) == (serial, phases) and phases == {"generate", "reward"}
    statuses = {v[0] for v in serial[3] if v is not None}
    assert {"pass", "wrong_answer"} <= statuses and len(statuses) >= 3   # the sandbox judged
    # the evaluation's pass@k and per-problem rates likewise
    d = model.Dist(0, 1, 0, torch.device("cpu"))
    evals = [rollouts.evaluate(engine, engine.tokenizer, problems, d, n=4, temperature=1.0,
                               seed=0, overlap=overlap, **judging)
             for overlap in (False, True)]
    assert evals[0] == evals[1] and 0 < evals[0]["pass@1"] < 1


def test_timer_wrap_adds_each_call_to_its_phase():
    """AT-GRPO's turns alternate the engine and the sandbox: wrapped callables add each call's
    seconds to their own phase, and return what the callable returns."""
    now = [0.0]
    timer = metrics.Timer(clock=lambda: now[0])

    def slow(seconds):
        now[0] += seconds
        return seconds * 2

    gen, reward = timer.wrap("generate", slow), timer.wrap("reward", slow)
    assert [gen(1.0), reward(4.0), gen(2.0)] == [2.0, 8.0, 4.0]
    assert timer.pop() == {"time/generate": 3.0, "time/reward": 4.0}
    assert gen.__name__ == "slow"     # TRL logs a wrapped reward function under its name


def test_engine_batch_is_the_larger_of_a_step_and_an_evaluation_per_rank():
    """8 prompts x 16 samples a step; an evaluation of 1,338 problems x 4 samples; each rank
    its share (a rank of 2 evaluates 669); sequences as long as the longest prompt + 112."""
    step = dict(prompts_per_step=8, group_size=16, max_new_tokens=112)
    one, two = (model.Dist(0, w, 0, torch.device("cpu")) for w in (1, 2))
    assert bookkeeping.engine_batch(one, 177, **step) == dict(batch_sequences=128, batch_tokens=289)
    assert bookkeeping.engine_batch(two, 177, **step)["batch_sequences"] == 64
    batch = bookkeeping.engine_batch(one, 177, [(1338, 4), (10, 1)], **step)
    assert batch["batch_sequences"] == 5352
    assert bookkeeping.engine_batch(two, 177, [(1339, 4)], **step)["batch_sequences"] == 670 * 4
    assert bookkeeping.engine_batch(one, 177, [(5, 4)], **step)["batch_sequences"] == 128


def test_rollout_batch_counts_the_longest_prompt_a_cccs_prefix_and_the_evaluations():
    """The longest coder prompt in tokens, opened with the reference solution under CCCS
    (what bounds its prefixes); the evaluations before / after RL and, with --offline-filter
    or --hard-focus, the train set's at max(--eval-n, 4) samples."""
    tok = model.load_tokenizer(model.BASE_DIR)
    short, long = _problem("short"), _problem("long", TWO_IFS * 3)
    long.question = "q " * 40
    n_long = len(tok(rollouts.prompt_text(tok, long))["input_ids"])
    with_code = len(tok(rollouts.prompt_text(tok, long, TWO_IFS * 3))["input_ids"])
    texts = [rollouts.prompt_text(tok, p) for p in (short, long)]
    assert bookkeeping.longest_prompt(texts, tok) == n_long
    assert bookkeeping.longest_prompt([], tok) == 0
    d = model.Dist(0, 1, 0, torch.device("cpu"))
    settings = dict(prompts_per_step=2, group_size=4, max_new_tokens=10, eval_n=2)
    batch = trainer.rollout_batch(d, tok, [short] * 3, [long] * 5, [short], same=False,
                                  cccs=False, train_rates=False, **settings)
    assert batch == dict(batch_sequences=10, batch_tokens=n_long + 10)
    # CCCS and the train set's rates (--offline-filter): 3 train problems x 4 samples
    batch = trainer.rollout_batch(d, tok, [long] * 3, [short], [short], same=False,
                                  cccs=True, train_rates=True, **settings)
    assert batch == dict(batch_sequences=12, batch_tokens=with_code + 10)


# ----------------------------------------------------------------------------- bad input

def test_a_prompt_longer_than_the_context_is_dropped_at_load(capsys):
    """The context (the model's 1,024 positions, or --max-model-len) less --max-new-tokens
    bounds a prompt: a 10 MB statement is dropped untokenized, at once (fed whole, it asked
    for an 8 GB attention matrix); a 20 kB one is counted in tokens and dropped; the rest stay.
    The drops are one line on stderr."""
    import time

    tokenizer = model.load_tokenizer(model.BASE_DIR)
    config = types.SimpleNamespace(max_position_embeddings=1024)
    budget = bookkeeping.prompt_budget(config, max_model_len=None, max_new_tokens=112)
    assert budget == 1024 - 112
    assert bookkeeping.prompt_budget(config, max_model_len=600, max_new_tokens=100) == 500
    assert bookkeeping.prompt_budget(types.SimpleNamespace(), max_model_len=None,
                                 max_new_tokens=112) is None        # no length known
    with pytest.raises(model.UserError, match="--max-new-tokens 1024 leaves no room"):
        bookkeeping.prompt_budget(config, max_model_len=None, max_new_tokens=1024)
    problems = [_problem("short"), _problem("huge"), _problem("long"), _problem("fits")]
    problems[1].question = "add them " * 1_200_000            # 10.8 MB
    problems[2].question = "add them " * 2_300                # 20.7 kB: over 912 tokens
    problems[3].question = "add them " * 200                  # 1.8 kB: 656 tokens, fits
    t = time.perf_counter()
    texts = [rollouts.prompt_text(tokenizer, p) for p in problems]
    kept = bookkeeping.fitting_prompts(problems, texts, tokenizer, budget, "--train-data")
    assert time.perf_counter() - t < 5
    assert [p.id for p in kept] == ["short", "fits"]
    assert len(tokenizer(rollouts.prompt_text(tokenizer, problems[2]))["input_ids"]) > budget
    assert len(tokenizer(rollouts.prompt_text(tokenizer, problems[3]))["input_ids"]) <= budget
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["[data] --train-data: dropped 2 of 4 problems whose prompt is over 912 "
                   "tokens (the context less --max-new-tokens)"]
    assert bookkeeping.fitting_prompts(problems, texts, tokenizer, None, "x") == problems


def _earlier_run(out):
    """A folder as a run with checkpoints leaves it, and a file of the user's beside."""
    os.makedirs(os.path.join(out, "step_2"))
    os.makedirs(os.path.join(out, "step_4.tmp"))
    os.makedirs(os.path.join(out, "tensorboard"))
    for name, text in (("metrics.jsonl", '{"phase": "rl", "step": 1}\n'), ("latest", "step_2"),
                       ("summary.json", "{}"), ("notes.txt", "mine")):
        with open(os.path.join(out, name), "w") as f:
            f.write(text)


def test_a_new_run_refuses_an_out_holding_an_earlier_run_and_overwrite_replaces_it(tmp_path):
    """Without --resume or --overwrite a run would overwrite the earlier run's checkpoints and
    summary and append its rows to the earlier metrics.jsonl: it refuses, naming what it found.
    --overwrite removes what the earlier run wrote (nothing else), so the new run's
    metrics.jsonl holds its own steps once; --resume without a checkpoint refuses too."""
    out = str(tmp_path / "run")
    _earlier_run(out)
    with pytest.raises(model.UserError) as refused:
        bookkeeping.claim_out_dir(out, resume=False, overwrite=False, main=True)
    assert ("holds an earlier run (latest, metrics.jsonl, step_2, step_4.tmp, ...); continue "
            "it with --resume") in str(refused.value.code)
    os.remove(os.path.join(out, "latest"))                    # no checkpoint named any more
    with pytest.raises(model.UserError, match="no checkpoint to continue from"):
        bookkeeping.claim_out_dir(out, resume=True, overwrite=False, main=True)
    bookkeeping.claim_out_dir(out, resume=False, overwrite=True, main=False)
    assert len(os.listdir(out)) == 6                          # only the main rank removes
    bookkeeping.claim_out_dir(out, resume=False, overwrite=True, main=True)
    assert sorted(os.listdir(out)) == ["notes.txt", bookkeeping.LOCK_FILE]   # and its lock
    bookkeeping.claim_out_dir(out, resume=False, overwrite=False, main=True)  # nothing to overwrite
    log = metrics.MetricsLog(out, True)
    log({"phase": "rl", "step": 1})
    assert [json.loads(line)["step"] for line in open(os.path.join(out, "metrics.jsonl"))] == [1]
    empty = str(tmp_path / "fresh")
    bookkeeping.claim_out_dir(empty, resume=True, overwrite=False, main=True)
    assert os.listdir(empty) == [bookkeeping.LOCK_FILE]       # the lock, nothing else
    bookkeeping.release_out_dir(out)
    bookkeeping.release_out_dir(empty)


# A run that holds its --out as trainer.start does (claim_out_dir on the main rank), until its
# stdin closes; argv: the folder, the repository.
HOLD_OUT = """
import sys
sys.path.insert(0, sys.argv[2])
from infra.bookkeeping import claim_out_dir
claim_out_dir(sys.argv[1], resume=False, overwrite=False, main=True)
print("claimed", flush=True)
sys.stdin.read()
"""


def test_a_second_run_into_the_same_new_out_refuses_while_the_first_holds_it(tmp_path):
    """Two runs started together into one new --out both found it empty and interleaved one
    metrics.jsonl: the main rank takes the folder's lock (flock) as it claims it, and the second
    run refuses in one line naming the first. The kernel drops the lock when its process ends,
    however it ends, so a crashed run's lock file blocks nothing."""
    out = str(tmp_path / "run")
    first = subprocess.Popen([sys.executable, "-c", HOLD_OUT, out, ROOT], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert first.stdout.readline().strip() == "claimed"
        for overwrite in (False, True):
            with pytest.raises(model.UserError) as refused:
                bookkeeping.claim_out_dir(out, resume=False, overwrite=overwrite, main=True)
            assert f"is in use by another run (process {first.pid})" in str(refused.value.code)
    finally:
        first.kill()                  # a crash: no clean-up ran
        first.wait()
    assert os.path.exists(os.path.join(out, bookkeeping.LOCK_FILE))
    bookkeeping.claim_out_dir(out, resume=False, overwrite=False, main=True)
    bookkeeping.release_out_dir(out)


def _checkpointed_run(out: str, method: str, model_name: str) -> dict:
    """An --out holding one whole checkpoint (step_2, as save_step writes its trainer state)
    and a metrics row; returns {file: bytes} of everything in it."""
    from safetensors.torch import save_file
    step = os.path.join(out, "step_2")
    os.makedirs(step)
    with open(os.path.join(step, "config.json"), "w") as f:
        json.dump({"model_type": "qwen2"}, f)
    save_file({"w": torch.zeros(4)}, os.path.join(step, "model.safetensors"))
    with open(os.path.join(step, "trainer_state.json"), "w") as f:
        json.dump({"step": 2, "world": 1, "rng": [3, [0], None], "method": method,
                   "model": model_name}, f)
    with open(os.path.join(out, "latest"), "w") as f:
        f.write("step_2")
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"phase": "rl", "step": 1}) + "\n")
    return _files(out)


def _files(folder: str) -> dict:
    return {os.path.relpath(os.path.join(d, n), folder): open(os.path.join(d, n), "rb").read()
            for d, _, names in os.walk(folder) for n in names}


def test_resume_into_another_methods_or_models_run_is_refused_before_anything_is_written(
        tmp_path):
    """grpo.py resuming a ppo_fgo.py run put two methods in one record; another --model trained
    the checkpoint's weights with another tokenizer. The checkpoint names both, and --resume
    refuses either mismatch before it writes anything (not even its lock); the shipped base
    given as its folder is the same model as "base"."""
    out = str(tmp_path / "run")
    before = _checkpointed_run(out, "ppo", "base")
    with pytest.raises(model.UserError, match="holds a ppo run and this run is grpo"):
        bookkeeping.claim_out_dir(out, resume=True, overwrite=False, main=True, method="grpo",
                                  model="base")
    with pytest.raises(model.UserError, match="trained from --model base and this run names "
                                              "--model tiny"):
        bookkeeping.claim_out_dir(out, resume=True, overwrite=False, main=True, method="ppo",
                                  model="tiny")
    assert _files(out) == before
    bookkeeping.claim_out_dir(out, resume=True, overwrite=False, main=True, method="ppo",
                              model=os.path.relpath(model.BASE_DIR))
    bookkeeping.release_out_dir(out)


def _saving_run(out: str, step_written: list) -> types.SimpleNamespace:
    """What save_step reads of a trainer.Run: a grpo run on the base that saves every 2 steps."""
    return types.SimpleNamespace(
        args=types.SimpleNamespace(save_every=2, steps=10, out=out, model="base"), name="grpo",
        state={"step_seen": step_written}, rng=__import__("random").Random(0), curriculum=None,
        policy=None, tokenizer=None, optimizer=None, scheduler=None, d=None,
        checkpoint_modules=dict)


def test_a_full_disk_during_a_checkpoint_is_one_line_naming_the_last_whole_checkpoint(
        tmp_path, monkeypatch, capsys):
    """ENOSPC while a checkpoint is written: one line (exit 2, no traceback) that names the
    last whole checkpoint to --resume from; the half-written step_N.tmp is removed, and the
    whole one stays. Each checkpoint records the method and the model (what --resume checks)."""
    import errno
    out = str(tmp_path / "run")
    os.makedirs(out)
    states = []

    def writer(out_dir, step, policy, tokenizer, optimizer, scheduler, state, d, extras=None):
        states.append(dict(state))
        tmp = os.path.join(out_dir, f"step_{step}.tmp")
        os.makedirs(tmp)
        with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
            f.write(b"half")
        if step > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        os.rename(tmp, os.path.join(out_dir, f"step_{step}"))
        with open(os.path.join(out_dir, "latest"), "w") as f:
            f.write(f"step_{step}")
    monkeypatch.setattr(bookkeeping, "save_checkpoint", writer)
    # entry_point's clean-up of engines and process groups: other tests' (none here)
    monkeypatch.setattr(flags, "close_open_engines", lambda wait: None)
    monkeypatch.setattr(flags, "close_distributed", lambda wait: None)
    r = _saving_run(out, [])
    bookkeeping.save_step(r, 2)
    assert states[0]["method"] == "grpo" and states[0]["model"] == "base"
    with pytest.raises(SystemExit) as stopped:
        flags.run_entry_point(lambda args: bookkeeping.save_step(r, 4), lambda argv: None, [])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "disk is full" in err and "checkpoint of step 4" in err
    assert f"the last whole checkpoint is {os.path.join(out, 'step_2')}" in err
    assert sorted(os.listdir(out)) == ["latest", "step_2"]


def test_a_cut_off_metrics_row_is_dropped_and_counted_on_resume(tmp_path, capsys):
    """A kill or a full disk mid-append leaves a row cut off; every later --resume died on it.
    It is dropped with a count, the rows past the checkpoint as before, and the next row
    starts on a line of its own."""
    rows = [{"phase": "rl", "step": 1}, {"phase": "eval", "when": "step_2", "step": 2},
            {"phase": "rl", "step": 2}, {"phase": "rl", "step": 3}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"phase": "rl", "st')
    log = metrics.MetricsLog(str(tmp_path), True)
    assert log.forget_after(2, ("rl", "eval")) == 1
    assert "dropped 1 row(s) that do not parse" in capsys.readouterr().err
    log({"phase": "rl", "step": 3})
    assert [json.loads(line) for line in path.read_text().splitlines()] == [*rows[:3], rows[3]]
    assert not os.path.exists(str(path) + ".tmp")


def test_the_log_rewrite_stopped_midway_leaves_the_old_log_whole(tmp_path, monkeypatch):
    """--resume rewrites metrics.jsonl without the rows it logs again. Truncated in place and
    then written, a SIGTERM in between left it empty; written as a new file that then replaces
    the old one, a stop anywhere leaves the old log as it was (and no stray file)."""
    path = tmp_path / "metrics.jsonl"
    text = "".join(json.dumps({"phase": "rl", "step": s}) + "\n" for s in (1, 2, 3))
    path.write_text(text)

    class StoppedWhileWriting:   # the file opened for writing; the process stops at the write
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, _):
            raise KeyboardInterrupt   # as a signal's handler would raise it

        writelines = write
    real_open = open

    def stopping_open(file, mode="r", *args, **kwargs):
        f = real_open(file, mode, *args, **kwargs)
        return StoppedWhileWriting(f) if "w" in mode else f
    monkeypatch.setattr(metrics, "open", stopping_open, raising=False)
    with pytest.raises(KeyboardInterrupt):
        metrics.MetricsLog(str(tmp_path), True).forget_after(1, ("rl",))
    assert path.read_text() == text and os.listdir(tmp_path) == ["metrics.jsonl"]


def test_an_offline_filter_that_keeps_no_problem_is_an_error():
    """It printed "kept 0/N" and then trained on all N: now one line that says why."""
    problems = [_problem("a"), _problem("b")]
    r = types.SimpleNamespace(args=types.SimpleNamespace(offline_filter=True, hard_focus=""),
                              train_problems=problems, state={}, say=lambda msg: None)
    with pytest.raises(model.UserError, match="kept none of the 2 train problems"):
        trainer.select_problems(r, {"a": 1.0, "b": 0.0})
    trainer.select_problems(r, {"a": 0.5, "b": 0.0})
    assert r.state["train_ids"] == ["a"]


def test_bound_native_memory_caps_onednns_kernel_cache_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    bookkeeping.bound_native_memory()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == bookkeeping.ONEDNN_CACHE_CAPACITY
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "512")
    bookkeeping.bound_native_memory()
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "512"


def test_release_freed_memory_gives_the_heaps_free_pages_back():
    """200 MB of blocks above pymalloc's size, freed: glibc keeps the pages until trimmed."""
    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    glibc = hasattr(os, "confstr") and "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or "")
    if not (glibc and os.path.exists("/proc/self/statm")):
        pytest.skip("glibc's malloc_trim and /proc are Linux/glibc only")
    blocks = [bytes(2000) for _ in range(100_000)]
    last = blocks[-1]      # one live block at the heap's top: glibc cannot shrink it by itself
    del blocks
    before = rss_mb()
    assert bookkeeping.release_freed_memory() is True
    assert before - rss_mb() >= 100 and len(last) == 2000


def test_processes_at_once_build_the_tiny_model_once(tmp_path, monkeypatch):
    """`--model tiny` in two processes started together (two runs, the suite's workers) on a
    fresh clone: one builds the cached model, the other waits for it, and both get the
    finished folder (no second build renaming the first one's folder away under a reader)."""
    import threading
    import time
    built = []

    def slow_build(path, texts, seed=0):
        built.append(path)
        time.sleep(0.5)                 # long enough for the other caller to arrive meanwhile
        os.makedirs(path)
        with open(os.path.join(path, "config.json"), "w") as f:
            f.write("{}")
    monkeypatch.setattr(tiny, "CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(tiny, "tiny_corpus", lambda: ["print(1)\n"])
    monkeypatch.setattr(tiny, "build_tiny_model", slow_build)
    # Two plain processes, not ranks (an in-process engine of an earlier module may have left
    # this process a world of 1, whose barrier two threads must not share).
    monkeypatch.setattr(model.dist, "is_initialized", lambda: False)
    got = []
    callers = [threading.Thread(target=lambda: got.append(tiny.model_path()))
               for _ in range(2)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert len(built) == 1 and got == built * 2
