"""Tests for ppo_fgo.py: hand-worked GAE, whitening, value loss, KL-in-reward, the reward
table, FGO line and token masks (with a real byte-level BPE tokenizer built offline), critic."""
import math
import sys

import pytest
import torch

import ppo_fgo
from ppo_fgo import (ValueModel, executable_lines, fgo_line_mask, fgo_token_mask, gae,
                     kl_in_reward, masked_share, stepcoder_reward, token_char_spans, value_loss,
                     whiten)

# ----------------------------------------------------------------------------- GAE


def test_gae_by_hand_with_padding_and_a_masked_gap():
    gamma, lam = 0.9, 0.5                       # gamma * lam = 0.45
    rewards = torch.tensor([[0.0, 0.0, 1.0, 3.0],
                            [0.0, 5.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.4, 0.8, 7.0],
                           [0.2, 9.0, 0.6, 0.3]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0],   # right padding
                         [1.0, 0.0, 1.0, 1.0]])  # a masked position inside the row
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    # row 0: t2: 1 - 0.8 = 0.2; t1: 0.9*0.8 - 0.4 + 0.45*0.2 = 0.41;
    #        t0: 0.9*0.4 - 0.5 + 0.45*0.41 = 0.0445
    # row 1: t3: 1 - 0.3 = 0.7; t2: 0.9*0.3 - 0.6 + 0.45*0.7 = -0.015; t1 skipped (its reward 5
    #        and value 9 are ignored); t0 bootstraps from t2: 0.9*0.6 - 0.2 + 0.45*(-0.015)
    #        = 0.33325
    expected_adv = torch.tensor([[0.0445, 0.41, 0.2, 0.0],
                                 [0.33325, 0.0, -0.015, 0.7]])
    expected_ret = torch.tensor([[0.5445, 0.81, 1.0, 0.0],
                                 [0.53325, 0.0, 0.585, 1.0]])
    torch.testing.assert_close(adv, expected_adv)
    torch.testing.assert_close(ret, expected_ret)


def test_gae_gamma_lambda_one_is_score_minus_value():
    # gamma = lam = 1 and a single terminal reward: A_t = R - V_t, returns = R everywhere.
    rewards = torch.tensor([[0.0, 0.0, -0.3]])
    values = torch.tensor([[0.1, -0.2, 0.4]])
    adv, ret = gae(rewards, values, torch.ones(1, 3), gamma=1.0, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[-0.4, -0.1, -0.7]]))
    torch.testing.assert_close(ret, torch.full((1, 3), -0.3))


# ----------------------------------------------------------------------------- whitening


def test_whiten_over_valid_tokens_only():
    x = torch.tensor([[1.0, 2.0], [3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # valid 1, 2, 3: mean 2, population variance 2/3, std 0.816497
    s = 1 / math.sqrt(2 / 3)
    torch.testing.assert_close(whiten(x, mask), torch.tensor([[-s, 0.0], [s, 0.0]]))
    torch.testing.assert_close(whiten(x, mask, shift_mean=False),
                               torch.tensor([[2 - s, 2.0], [2 + s, 0.0]]))


# ----------------------------------------------------------------------------- value loss


def test_value_loss_clipped_case_by_hand():
    values = torch.tensor([[0.6, 0.5, 50.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.4, 0.0]])
    returns = torch.tensor([[1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, stats = value_loss(values, old, returns, mask, clip=0.2)
    # token 0: unclipped (0.6-1)^2 = 0.16, clipped V = 0.2 -> (0.2-1)^2 = 0.64: max 0.64 -> 0.32
    # token 1: V within 0.4 +- 0.2: both 0.25 -> 0.125 ; token 2 masked. mean = 0.2225
    assert loss.item() == pytest.approx(0.2225)
    assert stats["vf_clip_frac"] == pytest.approx(0.5)
    loss.backward()
    # The clipped term wins on token 0 and is constant in V: no gradient there.
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, 0.25, 0.0]]))


def test_value_loss_global_denominator():
    v = torch.tensor([[1.0, 1.0]])
    loss, _ = value_loss(v, v, torch.zeros(1, 2), torch.ones(1, 2), denom=4.0)
    assert loss.item() == pytest.approx((0.5 + 0.5) / 4)


# ----------------------------------------------------------------------------- KL in reward


def test_kl_in_reward_puts_score_on_last_valid_token():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -1.0, -9.0], [-1.0, -2.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    r = kl_in_reward(torch.tensor([1.0, -0.3]), logp, ref, mask, beta=0.1)
    # -0.1 * (logp - ref): row 0: -0.05, +0.1 (+1 on t=1), 0 (pad); row 1: 0, -0.1, 0 (-0.3)
    torch.testing.assert_close(r, torch.tensor([[-0.05, 1.1, 0.0], [0.0, -0.1, -0.3]]))


# ----------------------------------------------------------------------------- rewards


def test_stepcoder_reward_table():
    assert stepcoder_reward("pass") == 1.0
    assert stepcoder_reward("wrong_answer") == -0.3
    assert stepcoder_reward("runtime_error") == -0.6
    assert stepcoder_reward("timeout") == -0.6
    assert stepcoder_reward("memory_limit") == -0.6
    assert stepcoder_reward("output_limit") == -0.6
    assert stepcoder_reward("compile_error") == -1.0
    assert stepcoder_reward(None) == -1.0                        # no code extracted
    assert stepcoder_reward("wrong_answer", {"wrong_answer": -0.5}) == -0.5
    with pytest.raises(ValueError):
        stepcoder_reward("exploded")


# ----------------------------------------------------------------------------- FGO lines

SIGN = ("def sign(x):\n"           # 1
        "    # positive or zero\n"  # 2
        "    if x >= 0:\n"         # 3
        "        return 1\n"       # 4
        "    else:\n"              # 5
        "        # negative\n"     # 6
        "        return -1\n"      # 7
        "\n"                       # 8
        "print(sign(int(input())))\n")  # 9
ELSE_BRANCH = "    else:\n        # negative\n        return -1\n"


def traced_lines(program: str, stdin_lines: list[str]) -> set[int]:
    """What a settrace-based sandbox reports: lines of `program` run over all inputs."""
    lines = set()

    def tracer(frame, event, arg):
        if frame.f_code.co_filename == "<prog>" and event == "line":
            lines.add(frame.f_lineno)
        return tracer
    for stdin in stdin_lines:
        env = {"input": lambda s=stdin: s, "print": lambda *a: None}
        sys.settrace(tracer)
        try:
            exec(compile(program, "<prog>", "exec"), env)
        finally:
            sys.settrace(None)
    return lines


def test_executable_lines_match_what_the_tracer_can_report():
    assert executable_lines(SIGN) == {1, 3, 4, 7, 9}      # no comment, else:, blank lines
    assert traced_lines(SIGN, ["3", "0"]) == {1, 3, 4, 9}
    assert traced_lines(SIGN, ["3", "-2"]) == {1, 3, 4, 7, 9}
    assert executable_lines("def f(:\n") == set()


def test_fgo_line_mask_unreached_else_branch():
    assert fgo_line_mask(SIGN, {1, 3, 4, 9}) == [1, 1, 1, 1, 0, 0, 0, 1, 1]
    assert fgo_line_mask(SIGN, {1, 3, 4, 7, 9}) == [1] * 9


def test_fgo_line_mask_multiline_statement_and_compile_error():
    program = "x = int(input())\nif x:\n    y = max(x,\n            2)\nprint(x)\n"
    # lines 3-4 are one statement: one status for both, the `2)` line included
    assert fgo_line_mask(program, {1, 2, 5}) == [1, 1, 0, 0, 1]
    assert fgo_line_mask(program, {1, 2, 3, 5}) == [1] * 5
    assert fgo_line_mask("def f(:\n  pass\n", set()) == [1, 1]   # compile error: keep all


# ----------------------------------------------------------------------------- FGO tokens


def char_spans(text):
    return [(i, i + 1) for i in range(len(text))]


def test_fgo_token_mask_char_tokens_and_straddling_token():
    response = "Sure:\n```python\n" + SIGN + "```\nok"
    cs = response.index("def")
    span = (cs, cs + len(SIGN))
    keep = fgo_token_mask(response, char_spans(response), span, {1, 3, 4, 9})
    assert "".join(c for c, k in zip(response, keep) if k == 0) == ELSE_BRANCH
    # A token holding the end of an executed line and the start of the unexecuted one is kept.
    i = response.index("1\n    else")
    j = i + len("1\n    else")
    k = response.index("\n\nprint")
    spans = [(0, i), (i, j), (j, k), (k, len(response))]
    assert fgo_token_mask(response, spans, span, {1, 3, 4, 9}) == [1, 1, 0, 1]
    # No coverage or no code: nothing masked.
    assert set(fgo_token_mask(response, char_spans(response), span, None)) == {1}
    assert set(fgo_token_mask(response, char_spans(response), None, set())) == {1}


def test_fgo_token_mask_line_offset_for_a_completion():
    # CCCS: the prompt holds the prefix (3 lines), the response completes the program.
    prefix = "def sign(x):\n    if x >= 0:\n        return 1\n"
    completion = "    else:\n        return -1\nprint(sign(3))\n"
    response = "```python\n" + completion + "```"
    program = prefix + completion          # run by the sandbox; executed in its line numbers
    span = (10, 10 + len(completion))
    keep = fgo_token_mask(response, char_spans(response), span, {1, 2, 3, 6}, line_offset=3,
                          program=program)
    assert "".join(c for c, k in zip(response, keep) if k == 0) == \
        "    else:\n        return -1\n"


@pytest.fixture(scope="module")
def bpe_tokenizer():
    """A real byte-level BPE tokenizer, trained here on a few strings (no hub)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    bpe.train_from_iterator([SIGN, "def f(x):\n    return x + 1\n", "Here is the code."] * 3,
                            trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>")


def test_token_char_spans_tile_the_text_and_share_multibyte_chars(bpe_tokenizer):
    tok = bpe_tokenizer
    text = "Here is the code.\n```python\n" + SIGN + "```\n# ok → done"
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    spans = token_char_spans(tok, ids)
    assert len(spans) == len(ids)
    # contiguous, nothing lost (tokens of one multi-byte character share its span)
    assert "".join(text[s:e] for s, e in dict.fromkeys(spans)) == text
    assert spans[-1] == (len(text), len(text))               # EOS: empty span
    arrow = text.index("→")
    arrow_tokens = [i for i, (s, e) in enumerate(spans) if s <= arrow < e]
    # "→" is 3 UTF-8 bytes, unseen in training: 3 byte tokens sharing the character's span
    assert len(arrow_tokens) == 3 and len({spans[i] for i in arrow_tokens}) == 1
    for i, (s, e) in enumerate(spans):
        if i not in arrow_tokens and i != len(ids) - 1:
            assert tok.decode([ids[i]]) == text[s:e]


def test_fgo_masks_exactly_the_unreached_else_branch_tokens(bpe_tokenizer):
    tok = bpe_tokenizer
    response = "Here is the code.\n```python\n" + SIGN + "```\nDone."
    ids = tok.encode(response, add_special_tokens=False)
    spans = token_char_spans(tok, ids)
    code_span = ppo_fgo.code_char_span(response, SIGN)
    executed = traced_lines(SIGN, ["3", "0"])                  # the tests never reach `else`
    keep = fgo_token_mask(response, spans, code_span, executed)
    masked = [i for i, k in enumerate(keep) if k == 0]
    assert masked == list(range(masked[0], masked[-1] + 1))    # one contiguous run
    masked_text = "".join(tok.decode([ids[i]]) for i in masked)
    kept_text = "".join(tok.decode([ids[i]]) for i in range(len(ids)) if keep[i])
    assert masked_text.split() == ELSE_BRANCH.split()
    assert kept_text.split() == response.replace(ELSE_BRANCH, "\n").split()
    share = masked_share(torch.tensor([keep], dtype=torch.float), torch.ones(1, len(ids)))
    assert share == pytest.approx(len(masked) / len(ids))
    # When a test reaches the branch nothing is masked.
    assert set(fgo_token_mask(response, spans, code_span, traced_lines(SIGN, ["3", "-1"]))) == {1}


def test_fgo_trusts_coverage_only_from_complete_runs():
    assert ppo_fgo.fgo_executed_lines("wrong_answer", {1, 2}) == {1, 2}
    assert ppo_fgo.fgo_executed_lines("runtime_error", {1}) == {1}
    for killed in ("timeout", "memory_limit", "output_limit", "compile_error", None):
        assert ppo_fgo.fgo_executed_lines(killed, set()) is None


# ----------------------------------------------------------------------------- critic


def tiny_lm(seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=50, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=64)
    return Qwen2ForCausalLM(config)


def test_value_model_shapes_gradients_and_sharing(tmp_path):
    lm = tiny_lm()
    ids = torch.randint(0, 50, (2, 6))
    attn = torch.ones(2, 6, dtype=torch.long)
    critic = ValueModel.from_policy(lm)                     # default: a separate copy
    values = critic(ids, attn)
    assert values.shape == (2, 6) and values.dtype == torch.float32
    assert torch.all(values == 0)                           # zero-initialised head
    (values - 1.0).pow(2).mean().backward()
    assert critic.head.weight.grad.abs().sum() > 0 and critic.head.bias.grad.item() != 0
    assert all(p.grad is None for p in lm.parameters())     # the policy is untouched
    shared = ValueModel.from_policy(lm, share_body=True)
    assert shared.body is lm.get_decoder()
    assert critic.body is not lm.get_decoder()
    # from_pretrained loads the same body as the checkpoint's policy.
    lm.save_pretrained(tmp_path)
    loaded = ValueModel.from_pretrained(str(tmp_path))
    torch.manual_seed(1)
    w = torch.randn(1, 32)
    for c in (loaded, critic):
        c.head.weight.data.copy_(w)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, attn), critic(ids, attn))
