"""losses.py: pure math on tensors and keyword arguments, importable without the rest."""
import doctest
import os
import subprocess
import sys

import pytest
import torch

import losses

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_importing_losses_pulls_in_torch_only():
    """Nothing but losses itself beyond what `import torch` loads (torch itself loads tqdm
    here); in particular not the sandbox, the engines, the run object or transformers."""
    code = ("import sys; import torch; before = set(sys.modules); import losses; "
            "print(sorted(set(sys.modules) - before)); "
            "print([m for m in ('sandbox', 'engines', 'trainer', 'model', 'data', "
            "'transformers', 'isolation', 'grpo', 'ppo_fgo') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert res.stdout.split("\n")[:2] == ["['losses']", "[]"]


def test_doctests():
    assert doctest.testmod(losses).failed == 0


def test_grpo_loss_on_policy_equals_policy_loss_against_detached_logp():
    torch.manual_seed(0)
    logp = torch.randn(2, 5, requires_grad=True)
    adv = torch.tensor([[1.0] * 5, [-0.5] * 5])
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]], dtype=torch.float)
    loss, st = losses.grpo_loss(logp, adv, mask, denom=7.0)
    ref, ref_st = losses.policy_loss(logp, logp.detach(), adv, mask, denom=7.0)
    assert loss.item() == ref.item() and st == ref_st
    assert "sampler_logp_diff" not in st               # no sampler log-probs: nothing logged


def test_grpo_loss_sampler_mismatch_and_tis():
    logp = torch.zeros(1, 3, requires_grad=True)
    old = torch.tensor([[-1.0, -2.0, -3.0]])
    sampler = torch.tensor([[-1.5, -1.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    adv = torch.ones(1, 3)
    loss, st = losses.grpo_loss(logp, adv, mask, old_logp=old, sampler_logp=sampler,
                                eps_low=10.0, eps_high=10.0, tis_cap=1.5)
    assert st["sampler_logp_diff"] == pytest.approx((0.5 + 1.0) / 2)
    w = losses.tis_weights(old, sampler, 1.5)
    ratio = torch.exp(logp - old)
    assert loss.item() == pytest.approx(float(-(ratio * w * mask).sum().detach() / 2))


def test_grpo_loss_kl_only_with_beta():
    logp = torch.zeros(1, 2)
    ref = torch.tensor([[-1.0, 0.0]])
    mask = torch.ones(1, 2)
    _, off = losses.grpo_loss(logp, torch.zeros(1, 2), mask, ref_logp=ref, beta=0.0)
    loss, on = losses.grpo_loss(logp, torch.zeros(1, 2), mask, ref_logp=ref, beta=0.5)
    k3 = float(torch.exp(torch.tensor(-1.0)) + 1 - 1) / 2
    assert off["kl"] == 0 and on["kl"] == pytest.approx(k3)
    assert loss.item() == pytest.approx(0.5 * k3)


def test_ppo_loss_is_policy_plus_weighted_value_loss():
    torch.manual_seed(1)
    logp, old = torch.randn(2, 4), torch.randn(2, 4)
    values, old_v, ret = torch.randn(2, 4), torch.randn(2, 4), torch.randn(2, 4)
    adv = torch.randn(2, 4)
    resp = torch.ones(2, 4)
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    loss, st = losses.ppo_loss(logp, values, adv, mask, resp, old_logp=old, old_values=old_v,
                               returns=ret, vf_coef=0.5, denom=6.0, value_denom=8.0)
    pl, pst = losses.policy_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.2, denom=6.0)
    vl, vst = losses.value_loss(values, old_v, ret, resp, denom=8.0)
    assert loss.item() == pytest.approx((pl + 0.5 * vl).item())
    assert "kl" not in st and st["vf_clip_frac"] == vst["vf_clip_frac"]
    assert st["clip_frac"] == pst["clip_frac"]


def test_local_denominator_matches_aggregate_divisor():
    masks = [torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])]
    assert losses.local_denominator(masks, "token-mean") == 6.0
    assert losses.local_denominator(masks, "seq-mean-token-mean") == 3
    assert losses.local_denominator(masks, "seq-mean-token-sum-norm") == 9
    assert losses.local_denominator(masks, "seq-mean-token-sum-norm", max_len=5) == 15
