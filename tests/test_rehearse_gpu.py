"""bench/rehearse_gpu.py: the GPU launch (`grpo.py --preset gpu`) rehearsed on 2 CPU ranks.

One test pins the distance to the real run: the rehearsal's flags differ from the GPU preset
in exactly the flags listed in OVERRIDES (and --out). The other runs the rehearsal end to end
(a small Qwen3 built from a config, the hub formats read from tests/fixtures, vLLM's CPU
engine on each of 2 torchrun ranks, SFT, two GRPO steps, LiveCodeBench evaluation, a
checkpoint, a resume) and reads what it wrote. Measured: 92-100 s wall for that test on the
2-core machine while other jobs ran (load 4-5); 47-85 s of it the first run, 31-48 s the resume.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import rehearse_gpu  # noqa: E402

import grpo  # noqa: E402
from infra import model  # noqa: E402


def test_the_overrides_are_the_whole_distance_to_the_gpu_preset(tmp_path):
    """Parsed, the rehearsal's flags equal `--preset gpu` except in OVERRIDES' flags."""
    preset = vars(grpo.parse_args(["--preset", "gpu"]))
    rehearsal = vars(grpo.parse_args(rehearse_gpu.grpo_flags(str(tmp_path / "m"),
                                                             str(tmp_path / "run"))))
    differ = {k for k in preset if preset[k] != rehearsal[k]}
    listed = {flag.removeprefix("--").replace("-", "_") for flag in rehearse_gpu.OVERRIDES}
    assert differ == listed | {"out"}
    for kept in ("grad_checkpointing", "prompt_order", "eval_temperature", "eval_n",
                 "save_every", "group_size", "lr", "micro_batch", "logprob_chunk"):
        assert kept not in listed                       # what the rehearsal exists to run
    assert all(why for _, why in rehearse_gpu.OVERRIDES.values())


def _clean_env() -> dict:
    """The environment without what an in-process engine or process group left behind."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("MASTER_", "VLLM_", "TORCHELASTIC_")) and k not in
           ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "LD_PRELOAD")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    return env


def test_the_gpu_preset_trains_evaluates_checkpoints_and_resumes_on_two_cpu_ranks(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "rehearse_gpu.py"),
                           "--out", str(tmp_path)], cwd=ROOT, env=_clean_env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    train_log = (tmp_path / "train.log").read_text() if (tmp_path / "train.log").exists() else ""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + train_log[-3000:]
    resume_log = (tmp_path / "resume.log").read_text()
    # Both hub formats read by their converters (the APPS row without tests dropped), vLLM on
    # both ranks, the chat-template model, evaluation at the preset's temperature.
    assert re.search(r"engine vllm \(KV cache [0-9.]+ GiB\), 2 rank\(s\) on cpu, "
                     r"6 train / 3 eval problems", train_log)
    assert "[data] apps train: kept 3 of 4 rows; dropped no tests: 1" in train_log
    assert "(3 problems, 4 samples each, T=0.6)" in train_log
    run = tmp_path / "run"
    rows = [json.loads(line) for line in open(run / "metrics.jsonl")]
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2, 3]           # 2 steps, then 1 after the resume
    for r in rl:
        assert (r["trained_tokens"] > 0) != (r["zero_adv_frac"] == 1.0)
        assert r["sampler_logp_diff"] < 1e-3              # the engine has the trainer's weights
    assert any(r["trained_tokens"] > 0 for r in rl)       # the warm start made rewards differ
    evals = [(r["when"], r["problems"], r["k"]) for r in rows if r["phase"] == "eval"
             and not r["when"].startswith("train_")]
    # the first run's after-RL evaluation is dropped on resume: one after_rl row, the last
    assert evals == [("before_rl", 3, 4), ("after_rl", 3, 4)]
    assert [r["step"] for r in rows if r["phase"] == "eval" and r["when"] == "after_rl"] == [3]
    # step_2 written by the first run (its last step), resumed from, step_3 written after.
    assert f"resumed from {run}/step_2 at step 2" in resume_log
    assert (run / "latest").read_text() == "step_3"
    for step in ("step_2", "step_3"):
        assert model.weight_problem(str(run / step)) is None
        assert {"rank0.pt", "rank1.pt"} <= set(os.listdir(run / step))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 3 and "pass_at_1_after_rl" in summary
