"""Tests for ppo_fgo.py: hand-worked GAE, whitening, value loss, KL-in-reward, the reward
table, FGO line and token masks (with a real byte-level BPE tokenizer built offline), critic."""
import copy
import math
import sys

import pytest
import torch

import actor
import losses
import ppo_fgo
from infra import bookkeeping  # noqa: E402
from infra.model import ValueModel
from losses import gae, kl_in_reward, value_loss, whiten
from ppo_fgo import fgo_line_mask, fgo_token_mask, stepcoder_reward, token_char_spans
from sandbox import executable_lines

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


def test_fgo_token_mask_for_a_completion_of_a_prefix():
    # CCCS: the prompt holds the prefix (3 lines), the response completes the program. As in
    # completion_fgo_mask, the text starts with the prefix and only the completion has tokens.
    prefix = "def sign(x):\n    if x >= 0:\n        return 1\n"
    completion = "    else:\n        return -1\nprint(sign(3))\n"
    program = prefix + completion          # run by the sandbox; executed in its line numbers
    text = "```python\n" + program + "```"
    head = len("```python\n" + prefix)
    spans = [(head + i, head + i + 1) for i in range(len(completion) + 3)]
    keep = fgo_token_mask(text, spans, ppo_fgo.code_char_span(text, program), {1, 2, 3, 6})
    assert "".join(text[s] for (s, _), k in zip(spans, keep) if k == 0) == \
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
    # When a test reaches the branch nothing is masked.
    assert set(fgo_token_mask(response, spans, code_span, traced_lines(SIGN, ["3", "-1"]))) == {1}


def test_fgo_trusts_coverage_only_from_complete_runs():
    assert ppo_fgo.fgo_executed_lines("wrong_answer", {1, 2}) == {1, 2}
    assert ppo_fgo.fgo_executed_lines("runtime_error", {1}) == {1}
    for killed in ("timeout", "memory_limit", "output_limit", "compile_error", None):
        assert ppo_fgo.fgo_executed_lines(killed, set()) is None
    # A passing run that reports no line has no coverage: mask nothing, not everything.
    assert ppo_fgo.fgo_executed_lines("pass", set()) is None


def test_fgo_masks_nothing_when_a_passing_program_reports_no_coverage(bpe_tokenizer):
    """A program that ends with os._exit(0) can pass while its tracer never writes the
    executed lines (a sandbox then reports pass with no line run). FGO must treat that as no
    coverage and mask nothing, not mask every line as unexecuted."""
    from types import SimpleNamespace

    from infra.engines import Completion
    program = ("import os, sys\nx = int(input())\nif x >= 0:\n    print(1)\nelse:\n"
               "    print(-1)\nsys.stdout.flush()\nos._exit(0)\n")
    text = "```python\n" + program + "```"
    ids = bpe_tokenizer.encode(text, add_special_tokens=False)
    completion = Completion(bpe_tokenizer.decode(ids), ids, "stop")
    lost = SimpleNamespace(status="pass", executed_lines=set())
    assert ppo_fgo.completion_fgo_mask(bpe_tokenizer, completion, "", program, lost) is None
    # With its coverage (the else branch never ran) the same response is masked there.
    ran = SimpleNamespace(status="pass", executed_lines={1, 2, 3, 4, 7, 8})
    mask = ppo_fgo.completion_fgo_mask(bpe_tokenizer, completion, "", program, ran)
    masked = "".join(bpe_tokenizer.decode([ids[i]]) for i, k in enumerate(mask) if k == 0)
    assert masked.split() == ["else:", "print(-1)"]


# ----------------------------------------------------------------------------- critic


def test_value_model_shapes_gradients_and_sharing(tmp_path, tiny_lm):
    lm = tiny_lm()
    ids = torch.randint(0, 50, (2, 6))
    attn = torch.ones(2, 6, dtype=torch.long)
    critic = ValueModel(copy.deepcopy(lm.get_decoder()), lm.config.hidden_size)  # a copy
    values = critic(ids, attn)
    assert values.shape == (2, 6) and values.dtype == torch.float32
    assert torch.all(values == 0)                           # zero-initialised head
    (values - 1.0).pow(2).mean().backward()
    assert critic.head.weight.grad.abs().sum() > 0 and critic.head.bias.grad.item() != 0
    assert all(p.grad is None for p in lm.parameters())     # the policy is untouched
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


# ----------------------------------------------------------------------------- the trainer

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FakeEngine:
    """Returns fixed completions (the i-th prompt's n completions = texts[i*n:(i+1)*n])."""

    def __init__(self, tok, responses):
        from infra.engines import Completion
        self.name, self.prompts = "fake", []
        ids = [tok.encode(r, add_special_tokens=False) + [tok.eos_token_id] for r in responses]
        self.comps = [Completion(tok.decode(i, skip_special_tokens=True), i, "stop") for i in ids]

    def generate(self, prompts, n, **kw):
        self.prompts += prompts
        return [self.comps[i * n:(i + 1) * n] for i in range(len(prompts))]


class FixedPrefix:
    """The curriculum hooks ppo_rollout uses (cccs.py's object), with one fixed prefix."""

    def __init__(self, prefix):
        self.prefix_text, self.updates = prefix, []

    def pool(self, problems, step):
        return problems

    def prefix(self, problem):
        return self.prefix_text

    def update(self, pid, rates):
        self.updates.append((pid, list(rates)))


# generate_and_score's settings (flags.sampling): two samples a prompt, one sandbox worker.
SAMPLING = dict(group_size=2, temperature=1.0, top_p=1.0, max_new_tokens=64, max_train_tests=0,
                reward="binary", test_timeout=5.0, workers=1)


def ppo_rollout(engine, tok, problems, rng, curriculum=None, step=0, fgo=True,
                epoch_order=None):
    """ppo_fgo.ppo_rollout of one prompt a step on one rank, StepCoder's own table."""
    from infra.model import Dist
    return ppo_fgo.ppo_rollout(engine, tok, problems, rng, Dist(0, 1, 0, torch.device("cpu")),
                               SAMPLING, prompts_per_step=1, fgo=fgo, reward_table=None,
                               tis_cap=0.0, epoch_order=epoch_order, curriculum=curriculum,
                               step=step)


def sign_problem():
    import data
    return data.Problem("sign", "test", "Print the sign of n.", "", None,
                        [{"input": "3\n", "output": "1\n"}, {"input": "0\n", "output": "1\n"}],
                        [SIGN], "introductory")


def test_prompt_order_epoch_reaches_the_ppo_rollouts(bpe_tokenizer):
    """--prompt-order epoch (trainer's flag, every trainer): three problems, one prompt a step:
    steps 0-2 play each once, steps 3-5 again; drawn with replacement this seed repeats one."""
    import dataclasses
    import random

    import rollouts
    problems = [dataclasses.replace(sign_problem(), id=f"sign{i}") for i in range(3)]
    played = {}
    for order in ("epoch", "replacement"):
        rng, played[order] = random.Random(0), []
        for step in range(6):
            engine = FakeEngine(bpe_tokenizer, ["```python\nprint(1)\n```"] * 2)
            samples, _ = ppo_rollout(engine, bpe_tokenizer, problems, rng, step=step, fgo=False,
                                     epoch_order=rollouts.epoch_order(order, 0, step))
            played[order].append(samples[0].key[0])
    ids = sorted(p.id for p in problems)
    assert sorted(played["epoch"][:3]) == ids and sorted(played["epoch"][3:]) == ids
    assert sorted(played["replacement"][:3]) != ids or sorted(played["replacement"][3:]) != ids


@pytest.mark.parametrize("cccs", [False, True])
def test_rollout_rewards_and_logged_fgo_share(bpe_tokenizer, cccs):
    import random

    tok = bpe_tokenizer
    prefix = "def sign(x):\n    # positive or zero\n    if x >= 0:\n        return 1\n"
    if cccs:      # the answer was opened in the prompt: the response continues the program
        good = SIGN[len(prefix):] + "```\nDone."
        wrong = "print(2)\n```"              # sign's body (prefix lines) never runs
    else:
        good = "Here is the code.\n```python\n" + SIGN + "```\nDone."
        wrong = "```python\nprint(2)\n```"
    engine = FakeEngine(tok, [good, wrong])
    cur = FixedPrefix(prefix) if cccs else None
    samples, st = ppo_rollout(engine, tok, [sign_problem()], random.Random(0), cur)
    assert [s.reward for s in samples] == [1.0, -0.3]           # pass, wrong answer
    assert samples[1].token_mask == [1] * len(samples[1].response_ids)   # all of it ran
    # The mask is what fgo_token_mask gives on the sandbox-free trace of the same program.
    ids = engine.comps[0].token_ids
    spans = token_char_spans(tok, ids)
    head = "```python\n" + prefix if cccs else ""
    full = head + good
    spans = [(s + len(head), e + len(head)) for s, e in spans]
    expected = fgo_token_mask(full, spans, ppo_fgo.code_char_span(full, SIGN),
                              traced_lines(SIGN, ["3", "0"]))
    assert samples[0].token_mask == expected and 0 in expected
    masked = "".join(tok.decode([ids[i]]) for i, k in enumerate(expected) if k == 0)
    assert masked.split() == ELSE_BRANCH.split()
    # The logged share = masked tokens / response tokens over both samples.
    row = ppo_fgo.rollout_log(st, {"tok": 1, "kl_sum": 0, "value_sum": 0, "ret_sum": 0,
                                   "ret_sq": 1, "err_sq": 0}, fgo=True)
    n_masked = expected.count(0)
    n_tokens = len(ids) + len(samples[1].response_ids)
    assert row["fgo_masked_share"] == pytest.approx(n_masked / n_tokens)
    assert row["fgo_covered_frac"] == 1.0 and row["pass_rate"] == 0.5
    assert row["reward_mean"] == pytest.approx(0.35)
    if cccs:
        assert engine.prompts[0].endswith("```python\n" + prefix)
        assert cur.updates == [("sign", [1.0, 0.0])]
    # Without --fgo nothing is masked and nothing about FGO is logged.
    samples, st = ppo_rollout(engine, tok, [sign_problem()], random.Random(0), cur, fgo=False)
    assert all(s.token_mask is None for s in samples)


def test_ppo_advantages_assembly_by_hand():
    from actor import Sample, Scores
    a = Sample([1], [5, 6, 7], 0.0, None, 1.0)
    b = Sample([1, 2], [8, 9], 0.0, [1, 0], -0.3)
    scores = Scores(logp=[[-1.0, -1.0, -1.0], [-1.0, -1.0]],
                    ref_logp=[[-1.5, -1.0, -1.0], [-1.0, -1.0]],
                    values=[[0.0, 0.0, 0.0], [0.0, 0.0]])
    gae_settings = dict(kl_coef=0.2, gamma=1.0, lam=1.0)
    (na, nb), st = ppo_fgo.ppo_advantages([a, b], scores, **gae_settings,
                                          whiten_advantages=False)
    # a: KL reward -0.2 * 0.5 = -0.1 on token 0, score 1 on token 2: returns 0.9, 1, 1
    assert na.returns == pytest.approx([0.9, 1.0, 1.0])
    assert na.advantage == pytest.approx([0.9, 1.0, 1.0])       # V = 0, gamma = lam = 1
    assert nb.returns == pytest.approx([-0.3, -0.3])  # value targets: every token
    assert nb.advantage == pytest.approx([-0.3, 0.0])           # FGO-masked token: 0
    assert na.old_logp == scores.logp[0] and na.old_values == scores.values[0]
    assert na.ref_logp is None and na.sampler_logp is None
    assert st["tok"] == 5 and st["kl_sum"] == pytest.approx(0.5)
    assert a.advantage == 0.0 and a.returns is None and a.old_logp is None  # not mutated
    # Whitening over the 4 kept tokens (0.9, 1, 1, -0.3).
    (na, nb), _ = ppo_fgo.ppo_advantages([a, b], scores, **gae_settings,
                                         whiten_advantages=True)
    kept = torch.tensor([0.9, 1.0, 1.0, -0.3])
    z = (kept - kept.mean()) / kept.var(unbiased=False).sqrt()
    assert na.advantage + nb.advantage[:1] == pytest.approx(z.tolist(), abs=1e-5)
    assert nb.advantage[1] == 0.0


def test_score_samples_align_with_unpadded_forwards(tiny_lm):
    from actor import Sample
    from infra.model import PolicyLogprobs
    lm = tiny_lm(0)
    policy = PolicyLogprobs(lm, chunk_size=4)
    critic = ValueModel(copy.deepcopy(lm.get_decoder()), lm.config.hidden_size)
    torch.nn.init.normal_(critic.head.weight)
    samples = [Sample([3, 4, 5], [6, 7]), Sample([3], [9, 8, 7, 6]), Sample([1, 2], [3])]
    scores = actor.score(samples, micro_batch=2, pad_id=0, device="cpu", temperature=0.7,
                         policy=policy, with_values=True,
                         forward_fn=ppo_fgo.forward_with_values(policy, critic, 0.7))
    assert scores.ref_logp is None                   # no reference: ppo_advantages uses logp
    with torch.no_grad():
        for i, s in enumerate(samples):
            ids = torch.tensor([s.prompt_ids + s.response_ids])
            attn = torch.ones_like(ids)
            a, n = len(s.prompt_ids) - 1, len(s.response_ids)
            lp = policy(ids, attn, temperature=0.7).logp[0, a:a + n]
            v = critic(ids, attn)[0, a:a + n]       # state before each response token
            assert scores.logp[i] == pytest.approx(lp.tolist(), abs=1e-5)
            assert scores.values[i] == pytest.approx(v.tolist(), abs=1e-5)


def test_on_policy_ppo_scores_the_critic_alone_and_trains_as_with_old_log_probs(tiny_lm):
    """One optimizer step a batch, no reference, a separate critic: the pass before the update
    runs the critic alone (values as the full pass gives them, no log-probs), the samples
    carry no old_logp, and the loss against logp.detach() has the value and gradients of the
    loss against log-probs scored beforehand (ratio 1 either way); the advantages are the
    same."""
    from types import SimpleNamespace

    from actor import Sample
    from infra.model import PolicyLogprobs
    lm = tiny_lm(0)
    policy = PolicyLogprobs(lm, chunk_size=4)
    critic = ValueModel(copy.deepcopy(lm.get_decoder()), lm.config.hidden_size)
    torch.nn.init.normal_(critic.head.weight)
    samples = [Sample([3, 4, 5], [6, 7], reward=1.0), Sample([3], [9, 8, 7, 6], reward=-0.3)]
    kw = dict(micro_batch=2, pad_id=0, device="cpu", temperature=1.0, policy=policy,
              with_values=True)
    full = actor.score(samples, **kw, forward_fn=ppo_fgo.forward_with_values(policy, critic, 1.0))
    alone = actor.score(samples, **kw, logp=False, forward_fn=ppo_fgo.values_only(critic))
    assert alone.logp is None
    for a, b in zip(alone.values, full.values):
        assert a == pytest.approx(b)
    gae_settings = dict(kl_coef=0.0, gamma=1.0, lam=0.95, whiten_advantages=False)
    with_old, _ = ppo_fgo.ppo_advantages(samples, full, **gae_settings)
    without, st = ppo_fgo.ppo_advantages(samples, alone, **gae_settings)
    assert all(s.old_logp is None for s in without) and st["kl_sum"] == 0
    for a, b in zip(without, with_old):
        assert a.advantage == pytest.approx(b.advantage)
    run = SimpleNamespace(ref=None, critic=critic)
    on = SimpleNamespace(mini_batches=1, epochs=1)
    assert ppo_fgo.scores_values_only(on, run)
    assert not ppo_fgo.scores_values_only(SimpleNamespace(mini_batches=2, epochs=1), run)
    assert not ppo_fgo.scores_values_only(on, SimpleNamespace(ref=object(), critic=critic))
    assert not ppo_fgo.scores_values_only(on, SimpleNamespace(ref=None, critic=None))
    grads = []
    for batch_samples in (with_old, without):
        lm.zero_grad()
        ((_, batch),) = actor.micro_batches(batch_samples, 2, 0, "cpu")
        out = ppo_fgo.forward_with_values(policy, critic, 1.0)(batch)
        denom = batch.mask.sum()
        loss, _ = losses.ppo_loss(out.logp, out.values, batch.advantages, batch.mask,
                                  batch.response_mask, old_logp=batch.old_logp,
                                  old_values=batch.old_values, returns=batch.returns,
                                  denom=denom, value_denom=batch.response_mask.sum())
        loss.backward()
        grads.append((loss.item(), [p.grad.clone() for p in lm.parameters()
                                    if p.grad is not None]))
    assert grads[0][1] and any(g.abs().sum() > 0 for g in grads[0][1])   # the policy trains
    assert grads[0][0] == pytest.approx(grads[1][0], abs=1e-6)
    for a, b in zip(grads[0][1], grads[1][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_shared_value_head_values_exports_and_gradients(tiny_lm):
    """PolicyLogprobs(value_head=True): same log-probs, values = head(hidden) in the same
    forward; the head never shows in the exported (HF / engine) weights; actor.forward gives
    the PPO loss its (logp, entropy, values) and the value loss trains head and body."""
    from actor import Sample
    from infra.model import PolicyLogprobs, iter_full_params
    lm = tiny_lm(0)
    policy = PolicyLogprobs(lm, chunk_size=4, value_head=True)
    assert torch.all(policy.value_head.weight == 0) and policy.value_head.bias.item() == 0
    torch.manual_seed(2)
    torch.nn.init.normal_(policy.value_head.weight)
    ids = torch.randint(1, 50, (2, 7))
    attn = torch.ones_like(ids)
    with torch.no_grad():
        out = policy(ids, attn, temperature=0.7, with_values=True)
        logp, values = out.logp, out.values
        assert out.entropy is None
        torch.testing.assert_close(logp, PolicyLogprobs(lm, 4)(ids, attn, temperature=0.7).logp)
        hidden = lm.get_decoder()(input_ids=ids, attention_mask=attn).last_hidden_state
        head = policy.value_head
        expect = torch.nn.functional.linear(hidden, head.weight, head.bias).squeeze(-1)[:, :-1]
        torch.testing.assert_close(values, expect)
    assert values.shape == (2, 6)
    with pytest.raises(ValueError):
        PolicyLogprobs(lm, 4)(ids, attn, with_values=True)
    assert [n for n, _ in iter_full_params(policy)] == [n for n, _ in
                                                              lm.named_parameters()]
    # actor.score with with_values takes the values from the policy's own forward.
    samples = [Sample([3, 4, 5], [6, 7]), Sample([3], [9, 8, 7, 6])]
    scores = actor.score(samples, micro_batch=2, pad_id=0, device="cpu", temperature=0.7,
                         policy=policy, with_values=True)
    with torch.no_grad():
        for i, s in enumerate(samples):
            row = torch.tensor([s.prompt_ids + s.response_ids])
            a, n = len(s.prompt_ids) - 1, len(s.response_ids)
            v = policy(row, torch.ones_like(row), with_values=True).values[0, a:a + n]
            assert scores.values[i] == pytest.approx(v.tolist(), abs=1e-5)
    # One forward with values: the loss's view, and the value loss reaches head + body.
    samples = [Sample(s.prompt_ids, s.response_ids, [0.0] * len(s.response_ids),
                      old_logp=scores.logp[i], old_values=scores.values[i],
                      returns=[1.0] * len(s.response_ids)) for i, s in enumerate(samples)]  # no PG
    batch = actor.collate(samples, 0, "cpu")
    out = actor.forward(policy, batch, temperature=0.7, with_entropy=True, with_values=True)
    assert out.logp.shape == out.entropy.shape == out.values.shape == (2, 4)   # L = 5 tokens
    denom = actor.Denominators(float(batch.mask.sum()), float(batch.response_mask.sum()))
    loss_fn = ppo_fgo.update_loss(eps_low=0.2, eps_high=0.2, vf_clip=0.2, vf_coef=1.0,
                                  agg="token-mean")
    loss, st = loss_fn(out, batch, denom)
    assert "vf_clip_frac" in st and loss.item() > 0
    loss.backward()
    assert policy.value_head.weight.grad.abs().sum() > 0
    assert lm.model.layers[0].mlp.down_proj.weight.grad.abs().sum() > 0


def test_shared_critic_optimizer_groups_and_schedule(tiny_lm):
    from infra.model import PolicyLogprobs
    policy = PolicyLogprobs(tiny_lm(0), 4, value_head=True)
    schedule = dict(lr=1e-3, weight_decay=0.0, warmup_steps=2, steps=4, min_lr_ratio=0.1)
    opt, sched = bookkeeping.policy_optimizer(policy, **schedule, head_lr=5e-2)
    body, head = opt.param_groups
    assert {id(p) for p in head["params"]} == {id(p) for p in policy.value_head.parameters()}
    assert len(body["params"]) + 2 == len(list(policy.parameters()))
    lrs = []
    for _ in range(4):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    assert [h for _, h in lrs] == [5e-2] * 4                  # head: constant --critic-lr
    assert lrs[0][0] == pytest.approx(5e-4) and lrs[1][0] == pytest.approx(1e-3)  # warm-up
    # Without a head: one group, grpo's schedule as before.
    opt, _ = bookkeeping.policy_optimizer(PolicyLogprobs(tiny_lm(0), 4), **schedule)
    assert len(opt.param_groups) == 1


def _run_cli(out, *extra):
    cmd = [sys.executable, os.path.join(ROOT, "ppo_fgo.py"), "--max-problems", "4",
           "--sft-steps", "2", "--steps", "1", "--group-size", "2", "--prompts-per-step", "2",
           "--eval-n", "1", "--max-new-tokens", "24", "--save-every", "1", "--out", str(out),
           *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": ROOT}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_cli_ppo_step_trains_the_critic_checkpoints_and_resumes(tmp_path):
    out = tmp_path / "run"
    rows = _run_cli(out, "--fgo")
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1]
    assert {"fgo_masked_share", "vf_clip_frac", "kl_ref", "reward_mean"} <= set(rl[0])
    assert sorted(k for k in rl[0] if k.startswith("time/")) == [
        "time/generate", "time/reward", "time/samples", "time/score", "time/step", "time/sync",
        "time/update"]
    assert 0.0 <= rl[0]["fgo_masked_share"] <= 1.0
    assert rl[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-4)   # one epoch: on-policy
    for step in (0, 1):
        assert {"critic.pt", "ref.pt", "model.safetensors"} <= set(os.listdir(out / f"step_{step}"))
    # Critic body and reference start from the warm-started policy (step_0), not the base.
    from safetensors.torch import load_file
    policy0 = load_file(out / "step_0" / "model.safetensors")
    before = torch.load(out / "step_0" / "critic.pt")
    ref0 = torch.load(out / "step_0" / "ref.pt")
    for k, v in policy0.items():
        assert torch.equal(ref0["lm." + k], v)
        if k.startswith("model."):
            assert torch.equal(before["body." + k[len("model."):]], v)
    after = torch.load(out / "step_1" / "critic.pt")
    assert torch.all(before["head.weight"] == 0)                  # zero-initialised head
    assert after["head.weight"].abs().sum() > 0                   # ... trained by the step
    # The head was 0, so the body had no gradient in step 1; it moves from step 2 on.
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("body."))
    # The reference is frozen: unchanged by the step.
    r0, r1 = torch.load(out / "step_0" / "ref.pt"), torch.load(out / "step_1" / "ref.pt")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)
    rows = _run_cli(out, "--fgo", "--resume", "--steps", "2")
    assert [r["step"] for r in rows if r["phase"] == "rl"] == [1, 2]
    step2 = torch.load(out / "step_2" / "critic.pt")
    assert any(not torch.equal(after[k], step2[k]) for k in after if k.startswith("body."))


def test_cli_shared_critic_trains_the_head_keeps_it_out_of_hf_weights_and_resumes(tmp_path):
    from safetensors.torch import load_file
    out = tmp_path / "shared"
    fast = ("--critic", "shared", "--engine", "hf", "--eval-n", "0")
    rows = _run_cli(out, *fast)
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1]
    assert rl[0]["value_mean"] == 0.0                             # zero head scored step 1
    assert "critic_grad_norm" not in rl[0]                        # no separate critic
    for step in (0, 1):
        files = set(os.listdir(out / f"step_{step}"))
        assert {"value_head.pt", "ref.pt", "model.safetensors"} <= files
        assert "critic.pt" not in files
        weights = load_file(out / f"step_{step}" / "model.safetensors")
        assert not any("value" in k for k in weights)             # HF checkpoint: LM only
        assert not any(k.startswith("value_head") for k in torch.load(
            out / f"step_{step}" / "ref.pt"))
    h0 = torch.load(out / "step_0" / "value_head.pt")
    h1 = torch.load(out / "step_1" / "value_head.pt")
    assert set(h0) == {"weight", "bias"} and torch.all(h0["weight"] == 0)
    assert h1["weight"].abs().sum() > 0                           # trained by the step
    opt = torch.load(out / "step_1" / "rank0.pt", weights_only=False)["optimizer"]
    assert len(opt["param_groups"]) == 2                          # body lr, head lr
    rows = _run_cli(out, *fast, "--resume", "--steps", "2")
    rl = [r for r in rows if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    # Step 2 scored with the restored (trained) head: a fresh zero head would give exactly 0.
    assert rl[1]["value_mean"] != 0.0
    h2 = torch.load(out / "step_2" / "value_head.pt")
    assert not torch.equal(h1["weight"], h2["weight"])


def test_cli_help_and_reward_table_check():
    out = subprocess.run([sys.executable, os.path.join(ROOT, "ppo_fgo.py"), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--fgo" in out.stdout and "--critic-lr" in out.stdout
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "ppo_fgo.py"), "--reward-table",
                          '{"crash": -2}'], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown key" in bad.stderr


def test_fgo_value_mask_restricts_the_value_loss_to_fgo_kept_tokens():
    """One response of 4 tokens, FGO keeps the first 2. The policy term is 0 (advantages 0);
    the value error is 1 on the kept tokens and 3 on the masked ones (V = R + err, no clip
    binding: V_old = V). Default: 0.5 * mean over all 4 = 0.5 * (1 + 1 + 9 + 9) / 4 = 2.5;
    with --fgo-value-mask: over the kept 2 with their own normaliser = 0.5 * (1 + 1) / 2 = 0.5."""
    from infra.model import Forward
    ones = torch.ones(1, 4)
    kept = torch.tensor([[1.0, 1.0, 0.0, 0.0]])
    returns = torch.zeros(1, 4)
    values = torch.tensor([[1.0, -1.0, 3.0, -3.0]])
    batch = actor.Batch(input_ids=torch.zeros(1, 5, dtype=torch.long),
                        attention_mask=torch.ones(1, 5, dtype=torch.long), response_mask=ones,
                        mask=kept, advantages=torch.zeros(1, 4), old_logp=torch.zeros(1, 4),
                        old_values=values.clone(), returns=returns)
    out = Forward(logp=torch.zeros(1, 4), values=values)
    denom = actor.Denominators(mask=2.0, response=4.0)
    settings = dict(eps_low=0.2, eps_high=0.2, vf_clip=0.2, vf_coef=1.0, agg="token-mean")
    full, _ = ppo_fgo.update_loss(**settings)(out, batch, denom)
    masked, _ = ppo_fgo.update_loss(**settings, fgo_value_mask=True)(out, batch, denom)
    assert float(full) == pytest.approx(2.5) and float(masked) == pytest.approx(0.5)


def test_fgo_value_mask_is_off_by_default_and_needs_fgo():
    assert ppo_fgo.parse_args([]).fgo_value_mask is False
    assert ppo_fgo.parse_args(["--fgo", "--fgo-value-mask"]).fgo_value_mask is True
    with pytest.raises(SystemExit):
        ppo_fgo.parse_args(["--fgo-value-mask"])
