"""bench/bench_vs_trl.py: its pure helpers, the one-line exit without TRL, and `--smoke` end to
end as a subprocess (skipped where TRL is not installed: the core CI has no TRL)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "bench_vs_trl.py")
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_vs_trl  # noqa: E402


def clean_env() -> dict:
    """The environment without a process group's or vLLM's leftovers (see conftest.py)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "VLLM_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def ns(p, g, mb):
    return type("A", (), dict(prompts_per_step=p, group_size=g, micro_batch=mb))


def test_trl_batch_shape_is_one_optimizer_step_per_rollout_batch():
    assert bench_vs_trl.trl_batch_shape(ns(8, 16, 32)) == (32, 4)
    assert bench_vs_trl.trl_batch_shape(ns(2, 4, 32)) == (8, 1)      # micro-batch > batch
    assert bench_vs_trl.trl_batch_shape(ns(3, 5, 4)) == (3, 5)       # largest divisor <= 4


def test_the_ablation_knobs_reach_grpo_flags():
    """--ours-prompt-order / --ours-adv-eps become grpo.py's --prompt-order / --adv-eps."""
    import grpo
    a = bench_vs_trl.parse_args(["--ours-prompt-order", "replacement", "--ours-adv-eps", "1e-4"])
    args = grpo.parse_args(bench_vs_trl.grpo_argv(a, "tiny", "runs/x"))
    assert args.prompt_order == "replacement" and args.adv_eps == 1e-4
    plain = grpo.parse_args(bench_vs_trl.grpo_argv(bench_vs_trl.parse_args([]), "tiny", "x"))
    # the bench's default order is TRL's (grpo.py's own CPU default is replacement)
    assert plain.prompt_order == "epoch" and plain.adv_eps == 1e-6


def test_summarize_means_median_and_last_third():
    steps = [dict(step_s=s, generation_s=1.0, reward_s=0.5, update_s=0.5, other_s=0.0,
                  reward=r, entropy=None) for s, r in ((2.0, 0.0), (9.0, 0.3), (4.0, 0.6))]
    out = bench_vs_trl.summarize(steps)
    assert out["step_s"] == 5.0 and out["step_s_median"] == 4.0 and out["steps"] == 3
    assert out["reward_last_third"] == 0.6 and out["entropy_last_third"] is None


def test_last_third_mean():
    assert bench_vs_trl.last_third_mean([1, 2, 3, 4, 5, 6]) == 5.5
    assert bench_vs_trl.last_third_mean([4.0]) == 4.0
    assert bench_vs_trl.last_third_mean([None, None]) is None


def test_with_replacement_sampler_keeps_trl_layout():
    pytest.importorskip("trl")
    s = bench_vs_trl.with_replacement_sampler(data_source=list(range(5)), mini_repeat_count=3,
                                            batch_size=2, repeat_count=2, shuffle=True, seed=1)
    idx = list(s)
    assert len(idx) == len(s) == 2 * 2 * 2 * 3                       # 5 // 2 batches
    for block in (idx[:12], idx[12:]):                               # one batch: 2 repeats
        assert block[:6] == block[6:]
        assert block[0:3] == [block[0]] * 3 and block[3:6] == [block[3]] * 3
    # with replacement: over many batches some prompt comes twice in one batch
    many = bench_vs_trl.with_replacement_sampler(data_source=list(range(5)), mini_repeat_count=1,
                                               batch_size=5, repeat_count=1, seed=0)
    assert any(len(set(chunk)) < 5 for chunk in (list(many) for _ in range(20)))


def test_without_trl_exits_with_one_line():
    code = ("import sys, runpy; sys.modules['trl'] = None; "
            f"sys.argv = ['bench_vs_trl.py', '--smoke', '--out', {str(ROOT)!r} + '/nowhere']; "
            f"runpy.run_path({SCRIPT!r}, run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "pip install -r requirements-bench.txt" in lines[0], done.stderr
    assert not os.path.exists(os.path.join(ROOT, "nowhere"))        # exits before any work


def test_smoke_writes_both_rows(tmp_path):
    pytest.importorskip("trl")
    out, report = tmp_path / "bench", tmp_path / "table.json"
    done = subprocess.run([sys.executable, SCRIPT, "--smoke", "--out", str(out),
                           "--json", str(report)], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(report.read_text())["rows"]
    assert [r["framework"].split()[0] for r in rows] == ["grpo.py", "TRL"]
    for r in rows:
        assert r["steps"] == 2 and len(r["per_step"]) == 2
        assert r["step_s"] > 0 and r["generation_s"] > 0 and r["peak_rss_mb"] > 0
        # the whole tree (trainer + sandbox workers) holds at least the trainer itself
        assert r["peak_pss_tree_mb"] > 0 and r["peak_rss_tree_mb"] >= r["peak_pss_tree_mb"]
        assert 0 < r["peak_anon_tree_mb"] <= r["peak_pss_tree_mb"]
        assert r["rates_after"] and all(0.0 <= v <= 1.0 for v in r["rates_after"].values())
        for key in ("pass@1_before", "pass@1_after", "pass@n_before", "pass@n_after"):
            assert 0.0 <= r[key] <= 1.0
        assert os.path.exists(os.path.join(r["checkpoint"], "config.json"))
    assert "| seconds per step (mean) |" in done.stdout


def _report(seed, rows, **settings):
    st = dict(model="w", train_data="builtin", eval_data="builtin", max_problems=0, steps=130,
              prompts_per_step=8, group_size=16, lr=1.5e-4, warmup_steps=3, max_new_tokens=96,
              micro_batch=32, eval_n=8, eval_engine="hf", cpu_threads=1, seed=seed,
              ours_prompt_order="replacement", ours_adv_eps=1e-6, trl_prompt_order="epoch")
    st.update(settings)
    return {"command": f"bench/bench_vs_trl.py --seed {seed}", "settings": st, "rows": rows}


def _row(framework, engine, step_s, gain):
    return {"framework": framework, "engine": engine, "step_s": step_s, "gain_points": gain,
            "pass@1_before": 0.3, "pass@1_after": 0.3 + gain / 100}


def test_combine_groups_seeds_by_arm_with_mean_and_sample_std(tmp_path, capsys):
    ours, trl = "grpo.py", "TRL 1.16.0 GRPOTrainer"
    reports = [_report(0, [_row(ours, "vllm", 3.0, 15.0), _row(trl, "hf generate", 7.0, 18.0)]),
               _report(1, [_row(ours, "vllm", 4.0, 17.0), _row(trl, "hf generate", 6.0, 20.0)]),
               _report(0, [_row(ours, "vllm", 5.0, 10.0)], ours_prompt_order="epoch")]
    arms = bench_vs_trl.combine(reports)
    assert [a["arm"] for a in arms] == [
        "grpo.py, vllm, prompts replacement, adv eps 1e-06",
        "TRL 1.16.0 GRPOTrainer, hf generate, prompts epoch",
        "grpo.py, vllm, prompts epoch, adv eps 1e-06"]
    assert arms[0]["seeds"] == [0, 1] and arms[2]["seeds"] == [0]
    assert arms[0]["step_s"]["mean"] == 3.5 and arms[1]["gain_points"]["mean"] == 19.0
    assert abs(arms[1]["gain_points"]["std"] - 2 ** 0.5) < 1e-12      # sample std of 18, 20
    assert arms[2]["gain_points"]["std"] is None                       # one seed: no spread
    assert arms[0]["peak_rss_mb"]["mean"] is None                      # absent: not invented
    # The command line: files in, a table out, the summary as JSON.
    paths = []
    for i, rep in enumerate(reports):
        paths.append(str(tmp_path / f"r{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(rep, f)
    bench_vs_trl.main(["--combine", *paths])
    out = capsys.readouterr().out
    # mean ± standard error over the seeds: sample std / sqrt(2)
    assert "| TRL 1.16.0 GRPOTrainer, hf generate, prompts epoch | 0,1 | 6.50 ± 0.50 |" in out
    assert "+19.0 ± 1.0" in out
    saved = json.load(open(tmp_path / "combined.json"))
    assert saved["inputs"] == paths and len(saved["arms"]) == 3


def test_step_phases_split_a_metrics_row_into_the_benchs_record():
    """update holds the old/ref scoring (TRL's update holds its log-prob forward); other is
    what no timer covers."""
    row = {"phase": "rl", "time/step": 10.0, "time/generate": 4.0, "time/reward": 1.5,
           "time/update": 3.0, "time/score": 0.5, "time/sync": 0.25, "reward_mean": 0.4,
           "entropy": 0.2}
    assert bench_vs_trl.step_phases(row) == dict(step_s=10.0, generation_s=4.0, reward_s=1.5,
                                                 update_s=3.5, other_s=1.0, reward=0.4,
                                                 entropy=0.2)
    bare = bench_vs_trl.step_phases({"time/step": 2.0})
    assert bare["other_s"] == 2.0 and bare["reward"] is None


def test_paired_gain_is_ours_minus_trl_per_seed_then_over_seeds(tmp_path, capsys):
    """Per report (one seed): the mean over the problems both scored of ours - TRL, in
    points; then mean ± se over the seeds. Reports without both frameworks are left out."""
    def rows(ours, trl):
        return [{**_row("grpo.py", "vllm", 3.0, 0.0), "rates_after": ours},
                {**_row("TRL 1.16.0 GRPOTrainer", "hf generate", 6.0, 0.0), "rates_after": trl}]
    reports = [_report(0, rows({"a": 1.0, "b": 0.5}, {"a": 0.5, "b": 0.5})),   # +25
               _report(1, rows({"a": 0.0, "b": 0.5}, {"a": 0.5, "b": 0.5})),   # -25
               _report(2, [_row("grpo.py", "vllm", 3.0, 0.0)])]                 # no TRL
    diff = bench_vs_trl.paired_gain(reports)
    assert diff["seeds"] == [25.0, -25.0] and diff["mean"] == 0.0
    assert abs(diff["se"] - 25.0) < 1e-9                  # sd 35.36 / sqrt(2)
    assert bench_vs_trl.paired_gain(reports[2:]) is None
    paths = []
    for i, rep in enumerate(reports[:2]):
        paths.append(str(tmp_path / f"r{i}.json"))
        with open(paths[-1], "w") as f:
            json.dump(rep, f)
    bench_vs_trl.main(["--combine", *paths])
    assert "grpo.py - TRL (paired by seed and problem): +0.0 ± 25.0 points" in \
        capsys.readouterr().out
    saved = json.load(open(tmp_path / "combined.json"))
    assert saved["paired_gain_ours_minus_trl"]["seeds"] == [25.0, -25.0]


def test_combine_refuses_reports_that_are_not_one_experiment(tmp_path):
    row = [_row("grpo.py", "vllm", 3.0, 15.0)]
    with pytest.raises(ValueError, match="steps"):
        bench_vs_trl.combine([_report(0, row), _report(1, row, steps=30)])
    with pytest.raises(ValueError, match="seed 0 given twice"):
        bench_vs_trl.combine([_report(0, row), _report(0, row)])
    with pytest.raises(SystemExit, match="cannot read"):
        bench_vs_trl.main(["--combine", str(tmp_path / "missing.json")])


def test_combine_per_seed_model_lets_only_the_warm_start_differ_by_seed(capsys):
    """The testbed's design: seed S starts from warm start S. Without --per-seed-model that
    is refused as two experiments; with it, the model may differ between seeds (not within
    one), and every other setting must still match."""
    row = [_row("grpo.py", "vllm", 3.0, 15.0)]
    reports = [_report(0, row, model="warm0"), _report(1, row, model="warm1")]
    with pytest.raises(ValueError, match="model"):
        bench_vs_trl.combine(reports)
    arms = bench_vs_trl.combine(reports, per_seed_model=True)
    assert arms[0]["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="steps"):
        bench_vs_trl.combine(reports + [_report(2, row, model="warm2", steps=30)],
                             per_seed_model=True)
    with pytest.raises(ValueError, match="seed 0 also has warm0"):
        bench_vs_trl.combine(reports + [_report(0, row, model="warmX",
                                                 ours_prompt_order="epoch")],
                             per_seed_model=True)
    with pytest.raises(SystemExit):
        bench_vs_trl.parse_args(["--per-seed-model"])
    assert "only acts with --combine" in capsys.readouterr().err
