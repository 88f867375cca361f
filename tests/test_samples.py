"""The samples file (infra/samples.py) and the curves (infra/curves.py): what each trainer logs
is what its step computed and trained on, the reader shows it, the picture holds the run's
curves.

One short run a method, shared by the module (in this process, a world of 1, as a plain
`python grpo.py`; the update is watched by wrapping actor.update_and_sync, which still runs):
GRPO with CCCS, PPO with FGO under --max-train-tests 1 (so tests leave code unrun and programs
pass falsely), AT-GRPO; each with --log-samples all, so a step's records are its samples.
"""
import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import actor  # noqa: E402
import agents  # noqa: E402
import cccs  # noqa: E402
import grpo  # noqa: E402
import ppo_fgo  # noqa: E402
import trainer  # noqa: E402
from infra import curves, samples  # noqa: E402
from infra.model import close_distributed  # noqa: E402

SMALL = ["--max-problems", "6", "--sft-steps", "0", "--group-size", "4",
         "--prompts-per-step", "2", "--eval-n", "1", "--max-eval-problems", "4",
         "--train-eval-problems", "0", "--micro-batch", "8", "--engine", "hf", "--steps", "2",
         "--log-samples", "all"]
AGENTS = ["--model", "tiny", "--max-problems", "4", "--sft-steps", "1", "--sft-batch", "4",
          "--prompts-per-step", "2", "--max-turns", "2", "--max-new-tokens", "8",
          "--tester-max-new-tokens", "8", "--micro-batch", "4", "--steps", "1", "--eval-n", "1",
          "--max-eval-problems", "2", "--train-eval-problems", "0", "--log-samples", "all"]
PNG = b"\x89PNG\r\n\x1a\n"


@dataclass
class Trained:
    out: str
    args: object
    updates: list        # the Samples of each actor.update_and_sync call, in call order
    stdout: str

    def rows(self, phase):
        with open(os.path.join(self.out, "metrics.jsonl")) as f:
            return [r for r in map(json.loads, f) if r.get("phase") == phase]

    def records(self, **filters):
        return samples.select(samples.load(self.out)[1], **filters)


def _train(module, argv, out) -> Trained:
    updates, real = [], actor.update_and_sync

    def watched(*args, **kwargs):
        updates.append(list(args[4]))          # (policy, optimizer, scheduler, engine, samples)
        return real(*args, **kwargs)
    args = module.parse_args(argv + ["--out", str(out)])
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setattr(actor, "update_and_sync", watched)
        try:
            module.train(args)
        finally:
            close_distributed(wait=False)
    return Trained(str(out), args, updates, printed.getvalue())


@pytest.fixture(scope="module")
def grpo_cccs(tmp_path_factory):
    # threshold 0, span 1: every problem moves a stage at each update, so a stale stage shows
    return _train(grpo, SMALL + ["--curriculum", "cccs", "--cccs-threshold", "0",
                                 "--cccs-span", "1"], tmp_path_factory.mktemp("grpo") / "run")


@pytest.fixture(scope="module")
def ppo_fgo_run(tmp_path_factory):
    return _train(ppo_fgo, SMALL + ["--fgo", "--max-train-tests", "1"],
                  tmp_path_factory.mktemp("ppo") / "run")


@pytest.fixture(scope="module")
def agents_run(tmp_path_factory):
    return _train(agents, AGENTS, tmp_path_factory.mktemp("agents") / "run")


# ----------------------------------------------------------------------------- the writer

def test_pick_spreads_a_step_evenly_and_reads_all_and_none():
    assert samples.pick(128, 4) == [0, 32, 64, 96]
    assert samples.pick(3, 4) == [0, 1, 2]
    assert samples.pick(5, -1) == [0, 1, 2, 3, 4]
    assert samples.pick(5, 0) == []
    assert samples.parse_limit("all") == -1 and samples.parse_limit("7") == 7
    with pytest.raises(ValueError, match="-1 / all"):
        samples.parse_limit("-2")
    with pytest.raises(SystemExit):
        grpo.parse_args(["--log-samples", "some"])
    assert grpo.parse_args(["--log-samples", "all"]).log_samples == -1


def test_prompts_are_written_once_and_resume_drops_what_is_redone(tmp_path):
    log = samples.SampleLog(str(tmp_path), 2)
    recs = [{"problem": "a", "prompt": "P", "reward": 1 / 3}, {"problem": "b", "prompt": "P"}]
    log.write(1, "train", recs)
    log.write(2, "train", recs)
    log.write(2, "eval", recs[:1], when="after_rl")
    log.state(2, {"problems": [{"problem": "a", "stage": "final"}]})
    prompts, rows, states = samples.load(str(tmp_path))
    assert prompts == {samples.prompt_ref("P"): "P"}            # one prompt line for four
    assert [r["step"] for r in rows] == [1, 1, 2, 2, 2] and rows[0]["reward"] == 0.333333
    assert [s["step"] for s in states] == [2]
    assert log.forget_after(1) == 4                             # step 2's, and after RL's
    prompts, rows, states = samples.load(str(tmp_path))
    assert [r["step"] for r in rows] == [1, 1] and states == [] and len(prompts) == 1
    assert samples.SampleLog(str(tmp_path / "x"), 0).write(1, "train", recs) == []
    assert samples.SampleLog(str(tmp_path / "x"), 4, main=False).on is False


def test_a_record_counts_the_tests_not_run_after_the_first_failure():
    """Judged stop_at_first_failure: 1 passed, the second failed, 2 not run; the reader says
    so. Judged on every test, the record has no not_run."""
    import types

    import sandbox
    tests = [{"input": f"{a} {a}\n", "output": f"{2 * a}\n"} for a in (1, 5, 2, 3)]
    problem = types.SimpleNamespace(id="p", metadata={}, tests=tests)
    job = dict(code="a, b = map(int, input().split())\nprint(a + b if a != 5 else 0)\n",
               tests=tests, timeout=2.0)
    every, first = sandbox.run_batch([job, dict(job, stop_at_first_failure=True)], workers=1)
    completion = types.SimpleNamespace(text="", finish_reason="stop")
    records = [samples.sample_record(samples.Trace(problem, "P", completion, job["code"], r, 0.0))
               for r in (every, first)]
    assert [(r["passed"], r.get("not_run")) for r in records] == [(3, None), (1, 2)]
    assert records[0]["failing_test"] == records[1]["failing_test"]
    assert records[1]["failing_test"]["index"] == 1
    shown = samples.format_sample(dict(records[1], step=1, phase="train"))
    assert "1/4 tests passed (2 not run after the first failing one)" in shown


def test_curriculum_state_names_the_changed_problems_and_the_hard_focus_phase():
    from types import SimpleNamespace
    code = "x = int(input())\nif x > 0:\n    print(1)\nelse:\n    print(0)\n"
    problems = [SimpleNamespace(id=i, solutions=[code]) for i in ("a", "b", "c")]
    cur = trainer.make_curriculum(problems, {"a": 0.1, "b": 0.9, "c": 0.5}, curriculum="cccs",
                                  cccs_threshold=0.5, cccs_average="window", cccs_span=1,
                                  cccs_loops=False, hard_focus="2:3")
    assert [p.id for p in cur.pool(problems, 0)] == ["a", "c"]     # the 2 lowest pass rates
    assert cur.stage(problems[0]) == "final-1"                     # one split point: 2 stages
    cur.update("a", [1.0, 0.0])                                    # average .5: moves on
    cur.update("c", [0.0, 0.0])
    state = cur.changed_state()
    assert state["hard_focus"] == {"phase": 1, "pool": ["a", "c"]}
    a, c = state["problems"]
    assert (a["problem"], a["stage"], a["start_line"], a["average"], a["updates"]) == \
        ("a", "final", None, None, 0)                              # a new stage: no average yet
    assert (c["problem"], c["stage"], c["start_line"], c["average"], c["updates"]) == \
        ("c", "final-1", 2, 0.0, 1)
    assert cur.stage(problems[0]) == "final" and a["pass_rate"] == cur.tracker.rates["a"]
    assert (a["drawn_stage"], a["step_pass_rate"], a["draws"]) == ("final-1", 0.5, 1)
    assert (c["drawn_stage"], c["step_pass_rate"], c["draws"]) == ("final-1", 0.0, 1)
    assert "problems" not in cur.changed_state()                   # nothing updated since
    cur.update("c", [1.0, 1.0])                                    # two groups in one step
    cur.update("c", [1.0, 0.0])
    (c,) = cur.changed_state()["problems"]
    assert (c["drawn_stage"], c["step_pass_rate"], c["draws"]) == ("final-1", 0.75, 2)


def test_a_curriculums_states_are_kept_without_samples_and_forgotten_past_a_resume(tmp_path):
    log = samples.SampleLog(str(tmp_path), 0, states=True)
    assert not log.on and log.pick(8) == [] and log.write(1, "train", [{"problem": "a"}]) == []
    for step in (1, 2, 3):
        log.state(step, {"problems": [{"problem": "a", "stage": f"final-{3 - step}"}]})
    assert log.forget_after(2) == 1
    _, recs, states = samples.load(str(tmp_path))
    assert recs == [] and [s["step"] for s in states] == [1, 2]
    assert "step 2: final-1" in samples.format_states(states)
    assert samples.SampleLog(str(tmp_path / "x"), 0).path is None   # no curriculum: no file


# ----------------------------------------------------------------------------- GRPO + CCCS

def test_grpo_samples_are_what_the_update_trained_on(grpo_cccs):
    rl = grpo_cccs.rows("rl")
    assert len(grpo_cccs.updates) == len(rl) == 2
    for step, (row, trained) in enumerate(zip(rl, grpo_cccs.updates), start=1):
        recs = grpo_cccs.records(step=step, phase="train")
        assert len(recs) == len(trained) == 8                   # 2 prompts x 4, all logged
        assert [r["reward"] for r in recs] == pytest.approx([s.reward for s in trained])
        assert [r["advantage"] for r in recs] == pytest.approx([s.advantage for s in trained],
                                                               abs=1e-5)
        assert [r["problem"] for r in recs] == [s.key[0] for s in trained]
        assert sum(r["reward"] for r in recs) / 8 == pytest.approx(row["reward_mean"], abs=1e-5)
        assert sum(r["verdict"] == "pass" for r in recs) / 8 == pytest.approx(row["pass_rate"])
        assert "time/samples" in row


def test_cccs_stage_and_prefix_are_the_ones_the_rollout_used(grpo_cccs):
    train, _ = trainer.load_problem_sets(grpo_cccs.args)
    solution = {p.id: p.solutions[0] for p in train}
    prompts, _, states = samples.load(grpo_cccs.out)
    after = {}                                   # problem -> stage after its last update
    for step in (1, 2):
        for r in grpo_cccs.records(step=step, phase="train"):
            starts = cccs.stage_starts(solution[r["problem"]])
            index = after.get(r["problem"], 0)   # every update moved it one stage (threshold 0)
            left = len(starts) - 1 - index
            assert r["stage"] == ("final" if left == 0 else f"final-{left}")
            assert r["prefix"] == cccs.make_subtask(solution[r["problem"]], starts[index])[0]
            assert prompts[r["prompt"]].endswith(f"```python\n{r['prefix']}" if r["prefix"]
                                                 else "")
            if r["program"] is not None:
                assert r["program"].startswith(r["prefix"].rstrip("\n"))
        drawn = {}                               # problem -> its step's records
        for r in grpo_cccs.records(step=step, phase="train"):
            drawn.setdefault(r["problem"], []).append(r)
        for p in next(s for s in states if s["step"] == step)["problems"]:
            recs = drawn[p["problem"]]           # the state names the stage it was drawn at
            assert p["drawn_stage"] == recs[0]["stage"] and p["draws"] == 1
            assert p["step_pass_rate"] == pytest.approx(
                sum(r["reward"] for r in recs) / len(recs))
            after[p["problem"]] = min(after.get(p["problem"], 0) + 1,
                                      len(cccs.stage_starts(solution[p["problem"]])) - 1)
            left = len(cccs.stage_starts(solution[p["problem"]])) - 1 - after[p["problem"]]
            assert p["stage"] == ("final" if left == 0 else f"final-{left}")
    counts = grpo_cccs.rows("rl")[-1]
    assert any(k.startswith("cccs_") for k in counts)


def test_evaluation_samples_give_the_eval_rows_pass_at_1(grpo_cccs):
    for row in grpo_cccs.rows("eval"):
        recs = grpo_cccs.records(phase="eval", when=row["when"])
        assert len(recs) == row["problems"] * grpo_cccs.args.eval_n
        assert sum(r["verdict"] == "pass" for r in recs) / len(recs) == pytest.approx(
            row["pass@1"])
        assert all(r["advantage"] is None and r["step"] == row["step"] for r in recs)


def test_reader_shows_programs_verdicts_and_filters(grpo_cccs, capsys):
    recs = grpo_cccs.records(phase="train")
    proc = subprocess.run([sys.executable, "-m", "infra.samples", grpo_cccs.out, "--step", "1",
                           "--phase", "train", "--limit", "0"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("=== step 1 train") == 8 and "=== step 2" not in proc.stdout
    for r in grpo_cccs.records(step=1, phase="train"):
        assert f"verdict: {r['verdict']}" in proc.stdout
        if r["program"]:
            assert r["program"].split("\n")[-2 if r["program"].endswith("\n") else -1] \
                in proc.stdout
    if any(r["failing_test"] for r in grpo_cccs.records(step=1, phase="train")):
        assert "first failing test" in proc.stdout
    verdict = recs[0]["verdict"]
    samples.main([grpo_cccs.out, "--verdict", verdict, "--limit", "0"])
    shown = capsys.readouterr().out
    assert shown.count("=== ") == sum(r["verdict"] == verdict for r in
                                      samples.load(grpo_cccs.out)[1])
    assert all(line.startswith(f"verdict: {verdict}") for line in shown.splitlines()
               if line.startswith("verdict:"))
    family = recs[0]["family"]
    samples.main([grpo_cccs.out, "--family", family, "--phase", "train", "--limit", "0"])
    shown = capsys.readouterr().out
    assert shown.count("=== ") == sum(r["family"] == family for r in recs)
    samples.main([grpo_cccs.out, "--state"])
    shown = capsys.readouterr().out
    assert recs[0]["problem"] in shown and "average" in shown


def test_grpo_run_ends_with_its_curves(grpo_cccs):
    last = grpo_cccs.stdout.strip().splitlines()[-1]
    path = os.path.join(grpo_cccs.out, "curves.png")
    assert last.endswith(f"curves: {path}")
    with open(path, "rb") as f:
        assert f.read(8) == PNG
    names = curves.plot_curves(grpo_cccs.out, os.path.join(grpo_cccs.out, "again.png"))
    rl_keys = {k for r in grpo_cccs.rows("rl") for k in r}
    assert {"reward_mean", "pass_rate", "loss", "eval/pass@1", "cccs_final"} <= set(names)
    assert {n for n in names if not n.startswith("eval/")} <= rl_keys
    assert {n.removeprefix("eval/") for n in names if n.startswith("eval/")} <= \
        {k for r in grpo_cccs.rows("eval") for k in r}


# ----------------------------------------------------------------------------- PPO + FGO

def test_fgo_masked_lines_are_the_loss_mask(ppo_fgo_run):
    from infra.model import load_tokenizer, resolve_model
    from world import tiny
    a = ppo_fgo_run.args
    tokenizer = load_tokenizer(tiny.model_path(a.model_seed) if a.model == "tiny"
                               else resolve_model(a.model))
    masked_any = 0
    for step, (row, trained) in enumerate(zip(ppo_fgo_run.rows("rl"), ppo_fgo_run.updates),
                                          start=1):
        recs = ppo_fgo_run.records(step=step, phase="train")
        assert len(recs) == len(trained)
        tokens = sum(len(s.response_ids) for s in trained)
        masked = sum(r.get("masked_tokens", 0) for r in recs)
        assert masked == sum(s.token_mask.count(0) for s in trained if s.token_mask)
        assert masked / tokens == pytest.approx(row["fgo_masked_share"], abs=1e-5)
        for r, s in zip(recs, trained):
            assert r["advantage"] == pytest.approx(s.advantage, abs=1e-4)   # one a token
            assert r["reward"] == ppo_fgo.stepcoder_reward(
                None if r["verdict"] == "no_code" else r["verdict"])
            if not r.get("masked_lines"):
                continue
            masked_any += 1
            # every non-blank character of a masked line was written by a masked token
            dropped = "".join(tokenizer.decode([t]) for t, k in zip(s.response_ids,
                                                                    s.token_mask) if k == 0)
            lines = r["program"].split("\n")
            for n in r["masked_lines"]:
                assert "".join(lines[n - 1].split()) in "".join(dropped.split())
        passed = [r for r in recs if r["verdict"] == "pass"]
        if passed:
            assert sum(r["false_pass"] for r in passed) / len(passed) == pytest.approx(
                row["false_pass_frac"], abs=1e-5)
    assert masked_any > 0       # --max-train-tests 1 leaves branches no test runs


def test_reader_marks_masked_lines(ppo_fgo_run, capsys):
    rec = next(r for r in ppo_fgo_run.records(phase="train") if r.get("masked_lines"))
    samples.main([ppo_fgo_run.out, "--step", str(rec["step"]), "--problem", rec["problem"],
                  "--limit", "0"])
    shown = capsys.readouterr().out
    lines = rec["program"].split("\n")
    for n in rec["masked_lines"]:
        assert f"{n:4d} x {lines[n - 1]}" in shown
    assert "FGO:" in shown and f"verdict: {rec['verdict']}" in shown


def test_ppo_curves_hold_the_fgo_share(ppo_fgo_run):
    names = curves.plot_curves(ppo_fgo_run.out, os.path.join(ppo_fgo_run.out, "again.png"))
    assert {"reward_mean", "fgo_masked_share", "kl_ref", "clip_frac"} <= set(names)
    with open(os.path.join(ppo_fgo_run.out, "curves.png"), "rb") as f:
        assert f.read(8) == PNG


# ----------------------------------------------------------------------------- AT-GRPO

def test_agent_samples_are_the_candidates_the_models_trained_on(agents_run):
    recs = agents_run.records(phase="train")
    row = agents_run.rows("rl")[0]
    assert len(agents_run.updates) == 2            # per-role: the tester's model, the coder's
    for role, roles_samples in zip(("tester", "coder"), agents_run.updates):
        mine = [r for r in recs if r["role"] == role]
        assert [r["reward"] for r in mine] == pytest.approx([s.reward for s in roles_samples])
        assert [r["advantage"] for r in mine] == pytest.approx(
            [s.advantage for s in roles_samples], abs=1e-5)
    testers = [r for r in recs if r["role"] == "tester"]
    assert sum(len(r["tests"]) for r in testers) == row["tests_written"]
    assert sum(sum(r["valid"]) for r in testers) == row["tests_valid"]
    groups = {}
    for r in recs:
        groups.setdefault((r["problem"], r["episode"], r["turn"], r["role"]), []).append(r)
    for group in groups.values():                  # K candidates, the best by reward chosen
        assert len(group) == agents_run.args.group_size
        chosen = [i for i, r in enumerate(group) if r["chosen"]]
        rewards = [r["reward"] for r in group]
        assert chosen == [rewards.index(max(rewards))]


def test_reader_shows_an_episode_as_its_turns(agents_run, capsys):
    samples.main([agents_run.out, "--phase", "train", "--limit", "1"])
    shown = capsys.readouterr().out
    assert "turn 0" in shown and "tester *" in shown and "coder  *" in shown
    samples.main([agents_run.out, "--phase", "train", "--role", "coder", "--limit", "0"])
    shown = capsys.readouterr().out
    assert "tester" not in shown.replace("of the tester's", "")
    names = curves.plot_curves(agents_run.out, os.path.join(agents_run.out, "again.png"))
    assert {"reward_mean", "tester_valid_share_mean", "eval/tester_valid_share"} <= set(names)


# ----------------------------------------------------------------------------- sinks, no picture

def test_without_matplotlib_a_run_says_so_in_one_line(grpo_cccs, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib -> ImportError
    assert curves.plot_run(grpo_cccs.out) == curves.MISSING


def test_samples_reach_tensorboard_as_text(tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard is not installed (optional: "
                                              "--report-to tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from infra import metrics
    log = metrics.MetricsLog(str(tmp_path), True, ["tensorboard"])
    log.text("samples/train", "=== step 1 train | problem p\nverdict: pass", 1)
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    assert "samples/train/text_summary" in events.Tags()["tensors"]
