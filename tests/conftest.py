"""Shared test set-up: every test module starts from the environment pytest started with.

An in-process vLLM engine (test_engines.py) and torch.distributed set MASTER_PORT, RANK,
LD_PRELOAD, VLLM_* ... in os.environ; without this, the subprocesses of later modules (torchrun,
grpo.py, ppo_fgo.py) would inherit them and, e.g., try to listen on a port still held here.
"""
import os

import pytest


@pytest.fixture(autouse=True, scope="module")
def _restore_environment():
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)
