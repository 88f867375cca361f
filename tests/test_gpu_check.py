"""bench/gpu_check.py: its pure helpers, and `--cpu-smoke` run end to end as a subprocess.

The smoke run is the GPU check's code path on the CPU (FSDP2 over gloo on one rank, the tiny
model and a tiny-layered Qwen3 at the full 151,936 vocabulary); the test reads the JSON and
Markdown it writes. It must not rot before a GPU is lent.
"""
import json
import os
import subprocess
import sys
import types

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_check  # noqa: E402

SMOKE_SIZES = ("tiny", "qwen3-mini")
BUDGET_SKIPPED = "qwen2.5-0.5b"


def run_check(out_dir, tmp_dir, *flags, timeout=400):
    """gpu_check.py --cpu-smoke with tmp_dir as its temporary directory, which it must leave
    without the folder it saved the big sizes' weights in (a run's own: two runs at once on
    one machine must not load or delete each other's)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "VLLM_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LD_PRELOAD", "CUDA_VISIBLE_DEVICES")}
    env.update(OMP_NUM_THREADS="1", TMPDIR=str(tmp_dir))
    cmd = [sys.executable, os.path.join(ROOT, "bench", "gpu_check.py"), "--cpu-smoke",
           "--out", str(out_dir), *flags]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not [n for n in os.listdir(tmp_dir) if n.startswith("gpu_check_models")]
    with open(os.path.join(out_dir, "gpu_check.json")) as f:
        report = json.load(f)
    with open(os.path.join(out_dir, "gpu_check.md")) as f:
        md = f.read()
    return report, md, proc.stdout


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    # A generous budget: on a loaded machine the smoke run must not skip a small size; the
    # 0.5B (expected to take minutes on the CPU) must be skipped for the budget, not run.
    return run_check(tmp_path_factory.mktemp("smoke"), tmp_path_factory.mktemp("smoke-tmp"),
                     "--peak-tflops", "0.5",
                     "--budget", "200", "--sizes", ",".join(SMOKE_SIZES + (BUDGET_SKIPPED,)))


def by_size(report):
    return {r["size"]: r for r in report["sizes"]}


# ----------------------------------------------------------------------------- pure helpers

def test_peak_flops_table_and_override():
    assert gpu_check.peak_flops_for("NVIDIA H200", None) == 989e12
    assert gpu_check.peak_flops_for("NVIDIA H100 PCIe", None) == 756e12   # before plain H100
    assert gpu_check.peak_flops_for("NVIDIA H100 80GB HBM3", None) == 989e12
    assert gpu_check.peak_flops_for("NVIDIA A100-SXM4-80GB", None) == 312e12
    assert gpu_check.peak_flops_for("Some CPU", None) is None
    assert gpu_check.peak_flops_for("NVIDIA H200", 500.0) == 500e12


def test_mfu_formula():
    # 6 * 1e9 params * 1e4 tokens in 1 s on a 1e15 FLOP/s device = 6%.
    assert gpu_check.mfu(10**9, 1e4, 1.0, 1e15) == pytest.approx(0.06)
    assert gpu_check.mfu(10**9, 1e4, 1.0, None) is None


def test_update_phase_is_the_trainers_update(monkeypatch):
    # The measured update is actor.update itself on the step's samples (prompt + completion,
    # its group's advantage) with the GRPO loss on-policy; tokens count prompt and response.
    import torch

    import actor
    calls = []

    def recording_update(policy, optimizer, samples, loss_fn, **kw):
        calls.append((samples, loss_fn, kw))
        return {"loss": 0.5, "clip_frac": 0.25, "grad_norm": 1.5, "entropy": 3.0}
    monkeypatch.setattr(actor, "update", recording_update)
    args = gpu_check.parse_args(["--cpu-smoke"])               # group 2
    comps = [types.SimpleNamespace(token_ids=t) for t in ([7, 8], [9], [4, 5, 6], [])]
    out = gpu_check.update_phase("policy", "optimizer", [[1, 2], [3]], comps,
                                 torch.tensor([1.0, -1.0, 0.5, -0.5]), 0,
                                 types.SimpleNamespace(device="cpu"), args)
    (samples, loss_fn, kw), = calls
    assert [(s.prompt_ids, s.response_ids, s.advantage) for s in samples] == [
        ([1, 2], [7, 8], 1.0), ([1, 2], [9], -1.0), ([3], [4, 5, 6], 0.5), ([3], [], -0.5)]
    assert kw["agg"] == "token-mean" and kw["micro_batch"] == args.micro_batch
    assert out == {"tokens": 4 + 3 + 4 + 1, "loss": 0.5, "clip_frac": 0.25, "grad_norm": 1.5}
    # On-policy the ratio is 1: loss = -sum(mask * A) / the global denominator = -(2 + 2) / 4.
    batch = types.SimpleNamespace(advantages=torch.tensor([[5.0, 2.0, 2.0]]),
                                  mask=torch.tensor([[0.0, 1.0, 1.0]]))
    loss, _ = loss_fn(types.SimpleNamespace(logp=torch.zeros(1, 3)), batch,
                      types.SimpleNamespace(mask=4.0))
    assert float(loss) == pytest.approx(-1.0)


def test_prediction_rescales_by_the_measured_size():
    assert gpu_check.predict_seconds("qwen2.5-1.5b", {}, cpu=False) == \
        gpu_check.SIZES["qwen2.5-1.5b"]["est_s"]
    # The 0.5B took twice its guess: the 1.5B is expected to as well.
    measured = {"qwen2.5-0.5b": {"seconds": 2 * gpu_check.SIZES["qwen2.5-0.5b"]["est_s"],
                                 "est_s": gpu_check.SIZES["qwen2.5-0.5b"]["est_s"]}}
    assert gpu_check.predict_seconds("qwen2.5-1.5b", measured, cpu=False) == \
        pytest.approx(2 * gpu_check.SIZES["qwen2.5-1.5b"]["est_s"])


def quiet_device():
    return types.SimpleNamespace(device="cuda", free=lambda: None)


def test_missing_vllm_is_a_skip_not_a_crash(monkeypatch):
    from infra import engines

    def no_vllm(*a, **kw):                    # what engines.make_engine does without vLLM
        raise SystemExit("--engine vllm: no vLLM build for cuda imports here")
    monkeypatch.setattr(engines, "make_engine", no_vllm)
    args, res, dev = gpu_check.parse_args([]), {}, quiet_device()
    gpu_check.run_phase(res, "vllm", lambda: gpu_check.start_engine("vllm", "x", dev, args),
                        dev, deadline=1e9, need_s=0, save=lambda: None)
    assert res["vllm"]["status"] == "skipped" and "no vLLM build" in res["vllm"]["reason"]


def test_run_phase_reports_oom_errors_and_budget():
    res, dev, saves = {}, quiet_device(), []

    def oom():
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    def broken():
        raise ValueError("shape mismatch")
    for key, fn, deadline in (("a", oom, 1e9), ("b", broken, 1e9),
                              ("c", lambda: {"status": "ok"}, 0.0)):
        gpu_check.run_phase(res, key, fn, dev, deadline=deadline, need_s=5,
                            save=lambda: saves.append(1))
    assert res["a"]["status"] == "oom" and "out of memory" in res["a"]["reason"]
    assert res["b"]["status"] == "error" and "ValueError" in res["b"]["reason"]
    assert res["c"]["status"] == "skipped" and res["c"]["reason"].startswith("budget:")
    assert len(saves) == 3                    # the report is rewritten after every phase


def test_half_rewards_never_leave_a_group_constant():
    import random

    import torch

    import grpo
    r = gpu_check.half_rewards(12, 4, random.Random(0))
    assert len(r) == 12 and all(sum(r[i:i + 4]) == 2 for i in range(0, 12, 4))
    assert (grpo.group_advantages(torch.tensor(r), 4) != 0).all()
    assert r != gpu_check.half_rewards(12, 4, random.Random(1))   # seeded, not fixed


def test_every_flag_has_help():
    for action in gpu_check.build_parser()._actions:
        assert action.help, action.option_strings


# ----------------------------------------------------------------------------- the smoke run

def test_smoke_runs_the_small_sizes_and_skips_the_rest_with_a_reason(smoke):
    report, _, _ = smoke
    sizes = by_size(report)
    assert set(sizes) == set(gpu_check.SIZES)
    for name, r in sizes.items():
        if name in SMOKE_SIZES:
            assert r["status"] == "ok", r
        elif name == BUDGET_SKIPPED:
            assert r["status"] == "skipped" and r["reason"].startswith("budget:"), r
        else:
            assert r["status"] == "skipped" and "--cpu-smoke" in r["reason"], r
    assert report["meta"]["cpu_smoke"] is True and report["meta"]["device"] == "cpu"
    assert sizes["qwen3-mini"]["vocab"] == gpu_check.BIG_VOCAB


def test_overlap_lines_set_generation_against_the_reference_sandbox_time():
    """generate 3 s beside a 1 s sandbox: overlapped about 3 s instead of 4 (25% less); a
    size without steps or a failed sandbox phase gives no line."""
    measured = {"generate_s": 3.2, "overlapped_s": 3.5}
    report = {"sandbox_reference": {"status": "ok", "seconds": 1.0},
              "sizes": [{"size": "qwen2.5-0.5b", "grpo": {"vllm": {"mean": {"generate_s": 3.0},
                                                                   "overlap": measured},
                                                          "hf": {"status": "failed"}}},
                        {"size": "tiny"}]}
    lines = gpu_check.overlap_lines(report)
    assert lines[1:] == ["- qwen2.5-0.5b vllm: generate 3.00 s, reward 1.00 s: overlapped "
                         "about 3.00 s instead of 4.00 s (25% less); measured (overlap_round): "
                         "generate 3.20 s with the sandbox beside it, 3.50 s to the last "
                         "verdict", ""]
    assert gpu_check.overlap_lines({**report, "sandbox_reference": {"status": "failed"}}) == []


def test_smoke_fsdp_and_throughput(smoke):
    report, _, _ = smoke
    for name in SMOKE_SIZES:
        r = by_size(report)[name]
        assert r["params"] > 0
        assert r["fsdp"]["world"] == 1 and r["fsdp"]["dtensor_params"] is True
        tr = r["train"]
        assert tr["status"] == "ok" and tr["tokens_per_s"] > 0
        assert 0 < tr["mfu"] < 1                  # --peak-tflops 0.5 gives the CPU a peak
        assert tr["peak_gib"] is None             # not measured on the CPU


def test_smoke_logprobs_agree_in_bf16(smoke):
    report, _, _ = smoke
    for name in SMOKE_SIZES:
        lp = by_size(report)[name]["logprobs"]
        assert lp["status"] == "ok" and lp["dtype"] == "bfloat16"
        assert lp["chunk"] < lp["seq"]            # the chunking really splits the sequence
        assert lp["chunked_vs_plain_max_abs"] < 0.05
        assert lp["chunked_vs_fp32_max_abs"] < 0.25   # bf16 logits vs fp32 ones
        assert lp["grad_rel_diff"] < 0.05


def test_smoke_grpo_steps_and_weight_sync(smoke):
    report, _, _ = smoke
    m = report["meta"]
    for name in SMOKE_SIZES:
        g = by_size(report)[name]["grpo"]["hf"]
        assert g["status"] == "ok" and len(g["steps"]) == m["steps"]
        for st in g["steps"]:
            assert st["gen_tokens"] > 0 and st["tokens"] > st["gen_tokens"]
            assert st["programs"] + st["no_code"] == m["prompts"] * m["group"]
            assert st["programs"] > 0             # the sandbox judged something
            assert st["zero_adv_frac"] == 0       # --reward half: every group has signal
            assert "sandbox_error" not in st
        assert set(g["mean"]) == {"generate_s", "reward_s", "update_s", "sync_s", "step_s"}
        assert all(v >= 0 for v in g["mean"].values())
        assert g["gen_tokens_per_s"] > 0 and g["update_tokens_per_s"] > 0
        assert 0 < g["update_mfu"] < 1
        # After the last sync the engine scores the probe like the trainer (fp32 on the CPU),
        # and it has moved with the updates: a sync that does nothing fails the second check.
        assert g["sync_max_abs_diff"] < 1e-3
        assert g["sync_engine_shift"] > 100 * max(g["sync_max_abs_diff"], 1e-6)


def test_smoke_overlap_round_judges_the_batch_while_generating(smoke):
    report, md, _ = smoke
    m = report["meta"]
    g = by_size(report)["tiny"]["grpo"]["hf"]
    assert g["overlap"]["programs"] == m["prompts"] * m["group"]
    assert g["overlap"]["overlapped_s"] >= g["overlap"]["generate_s"] > 0
    assert "--overlap-reward's bound" in md


def test_smoke_sandbox_reference_passes(smoke):
    report, md, _ = smoke
    sb, m = report["sandbox_reference"], report["meta"]
    assert sb["status"] == "ok" and sb["programs"] == m["prompts"] * m["group"]
    assert sb["pass_rate_mean"] == 1.0 and sb["tests"] >= sb["programs"] and sb["seconds"] > 0
    assert "Sandbox on " in md


def test_smoke_markdown_table(smoke):
    report, md, stdout = smoke
    assert "| size | params | engine | status | gen tok/s |" in md
    rows = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(gpu_check.SIZES)   # header, one row per size (hf only)
    for name in SMOKE_SIZES:
        assert any(r.startswith(f"| {name} |") and "| hf | ok |" in r for r in rows)
    assert any("skipped" in r and "--cpu-smoke runs the tiny sizes only" in r for r in rows)
    assert any(r.startswith(f"| {BUDGET_SKIPPED} |") and "budget:" in r for r in rows)
    assert "[gpu_check" in stdout                 # progress lines
