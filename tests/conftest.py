"""Shared test set-up: every test module starts from the environment pytest started with.

An in-process vLLM engine (test_engines.py) and torch.distributed set MASTER_PORT, RANK,
LD_PRELOAD, VLLM_* ... in os.environ; without this, the subprocesses of later modules (torchrun,
grpo.py, ppo_fgo.py) would inherit them and, e.g., try to listen on a port still held here.
"""
import atexit
import os
import shutil
import tempfile

import pytest
import torch

# One torch thread, here and in the trainers the tests start as subprocesses: the suite must
# pass on a loaded 2-core machine, where the tiny models run 3-5x faster on one thread than
# on two (the trainers' own default, 0, takes every core).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

# world/tasks.py's worlds (the base world: ~30 s of one core) made once for the session and read
# from this folder by every process the tests start: the trainers load tasks:rl / tasks:eval.
if "TASKS_CACHE_DIR" not in os.environ:
    os.environ["TASKS_CACHE_DIR"] = tempfile.mkdtemp(prefix="tasks-cache-")
    atexit.register(lambda folder, pid: os.getpid() == pid and shutil.rmtree(folder, True),
                    os.environ["TASKS_CACHE_DIR"], os.getpid())   # not in a forked child


# The longest modules, longest first (seconds each took in a 2-worker run on a loaded 2-core
# machine; every other module took under 45): they run before the others. `./run.sh test` gives
# whole files to its 2 workers as they come free, in this order (--no-loadscope-reorder): a long
# module left for the end would keep one worker busy after the other ran out of files.
LONGEST_FIRST = ("test_base.py",          # 320: the corpus made again, 3 trainings
                 "test_grpo.py",          # 135: torchrun ranks, resume, invariance
                 "test_ppo_fgo.py",       # 120
                 "test_tasks.py",         # 95: the worlds made again, every reference run
                 "test_rehearse_gpu.py",  # 85: 2 ranks with vLLM, twice
                 "test_engines.py",       # 55: vLLM in-process and under torchrun
                 "test_bench_vs_trl.py",  # 55
                 "test_samples.py",       # 55: a GRPO, a PPO and an AT-GRPO run
                 "test_cli_errors.py")    # 50: a trainer start-up per mistake


def pytest_collection_modifyitems(items):
    here = os.path.dirname(os.path.abspath(__file__))
    missing = [n for n in LONGEST_FIRST if not os.path.exists(os.path.join(here, n))]
    assert not missing, f"conftest.LONGEST_FIRST names no such module: {missing}"
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: file order kept


@pytest.fixture(autouse=True, scope="module")
def _restore_environment():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def tiny_lm():
    """tiny_lm(seed) -> a 1-layer Qwen2 causal LM (vocab 50, hidden 32) built in memory."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def make(seed=0):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(Qwen2Config(
            vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64))
    return make
