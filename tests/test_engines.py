"""Generation engines and weight sync (engines.py), with the CPU build of vLLM.

One vLLM engine and one transformers engine serve the whole module (vLLM start-up is the
slow part). The tiny model is trained with FSDP2 (world of 1, gloo) exactly as the trainer
does, its weights pushed into both engines, and vLLM is checked against transformers.
"""
import functools
import json
import os
import subprocess
import sys

import pytest
import torch

from infra import engines, model
from world import tiny as world_tiny  # noqa: E402

# The environment before any engine starts: an in-process vLLM engine adds variables
# (LD_PRELOAD, RANK, VLLM_* shared-memory names) that must not leak into the torchrun test.
CLEAN_ENV = dict(os.environ)

# Code-like texts: the tokenizer is trained on them and the fixed sequences come from them.
TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "def is_even(n):\n    return n % 2 == 0\n",
    "n = int(input())\nprint(sum(range(n + 1)))\n",
    "for i in range(10):\n    if i % 3 == 0:\n        print(i)\n",
    "s = input().strip()\nprint(s[::-1])\n",
] * 8
PROMPTS = ["def add(a, b):\n", "n = int(input())\n", "for i in range(", "s = "]
# Longer than a KV-cache block, so vLLM's prefix cache keeps it between calls: after a weight
# sync that cache is stale and must be dropped.
LONG_PROMPT = "".join(TEXTS[:5]) * 3 + "def add(a, b):\n"
TARGET = "def add(a, b):\n    return a + b\n" + world_tiny.EOS   # what the training steps teach


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return world_tiny.build_tiny_model(str(tmp_path_factory.mktemp("engines") / "tiny"), TEXTS,
                                  seed=0, hidden_size=128, intermediate_size=384,
                                  num_hidden_layers=2, vocab_size=400)


@pytest.fixture(scope="module")
def vllm_engine(tiny):
    model.init_distributed()
    return engines.VLLMEngine(tiny, torch.device("cpu"), seed=0, kv_cache_gib=0.25)


@pytest.fixture(scope="module")
def hf_engine(tiny):
    return engines.HFEngine(tiny, torch.device("cpu"))


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return model.load_tokenizer(tiny)


def policy_logprobs(policy, ids: list[int], temperature: float = 1.0) -> torch.Tensor:
    """Transformers' log-probs of ids[1:] given the prefix (the trainer's computation)."""
    x = torch.tensor([ids])
    with torch.no_grad():
        return policy(x, torch.ones_like(x), temperature=temperature).logp[0]


def train_step(policy, optimizer, tokenizer):
    """One AdamW step of next-token NLL on TARGET (lr is large so outputs change)."""
    ids = torch.tensor([tokenizer(TARGET)["input_ids"]])
    loss = -policy(ids, torch.ones_like(ids)).logp.mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def fixed_sequences(tokenizer) -> list[list[int]]:
    return [tokenizer(t)["input_ids"] for t in (TARGET, TEXTS[2], TEXTS[3])]


def assert_engine_matches(policy, vllm_engine, hf_engine, tokenizer) -> list[list[float]]:
    """vLLM == transformers: prompt log-probs, sampler log-probs, greedy continuations."""
    seqs = fixed_sequences(tokenizer)
    got = vllm_engine.prompt_logprobs(seqs)
    for ids, lp in zip(seqs, got):
        want = policy_logprobs(policy, ids)
        assert torch.allclose(torch.tensor(lp), want, atol=1e-3), (lp, want)

    # The sampler's log-probs at T = 0.7: the trainer's log_softmax(logits / T).
    outs = vllm_engine.generate(PROMPTS[:2], n=2, temperature=0.7, max_new_tokens=12, seed=3)
    for prompt, group in zip(PROMPTS, outs):
        p = tokenizer(prompt)["input_ids"]
        for c in group:
            want = policy_logprobs(policy, p + c.token_ids, temperature=0.7)[len(p) - 1:]
            assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-3)

    greedy_v = vllm_engine.generate(PROMPTS + [LONG_PROMPT], temperature=0, max_new_tokens=16)
    greedy_h = hf_engine.generate(PROMPTS + [LONG_PROMPT], temperature=0, max_new_tokens=16)
    for v, h in zip(greedy_v, greedy_h):
        assert v[0].token_ids == h[0].token_ids
        assert v[0].text == h[0].text and v[0].finish_reason == h[0].finish_reason
    return got


def test_generate_returns_n_completions_with_logprobs(vllm_engine, tokenizer):
    outs = vllm_engine.generate(PROMPTS[:3], n=4, temperature=1.0, max_new_tokens=8, seed=1)
    assert [len(g) for g in outs] == [4, 4, 4]
    for g in outs:
        for c in g:
            assert 1 <= len(c.token_ids) <= 8 and len(c.logprobs) == len(c.token_ids)
            assert all(lp <= 0 for lp in c.logprobs)
            # "stop" exactly when it ended on EOS, which is kept (HFEngine's convention)
            ended_on_eos = c.token_ids[-1] == tokenizer.eos_token_id
            assert c.finish_reason == ("stop" if ended_on_eos else "length")
            assert ended_on_eos or len(c.token_ids) == 8
    # no two samples share random draws (near-uniform tiny model: shared seeds = copies)
    assert len({tuple(c.token_ids) for g in outs for c in g}) == 12
    # seeds make calls reproducible
    again = vllm_engine.generate(PROMPTS[:3], n=4, temperature=1.0, max_new_tokens=8, seed=1)
    assert [[c.token_ids for c in g] for g in again] == [[c.token_ids for c in g] for g in outs]


def test_generate_stream_yields_generates_samples_as_each_prompt_finishes(tiny, vllm_engine):
    """generate_stream gives each prompt's n completions once they are done (vLLM: as its
    requests end; transformers: chunk by chunk, in prompt order); put back in prompt order
    they are generate's samples, and a consumer that stops early leaves no request behind."""
    def key(groups):
        return [[(c.token_ids, c.text, c.finish_reason, c.logprobs) for c in g] for g in groups]

    prompts = [LONG_PROMPT, "s = "]
    budget = dict(n=3, temperature=1.0, max_new_tokens=24, seed=5, ignore_eos=True)
    order = [i for i, _ in vllm_engine.generate_stream(prompts, **budget)]
    assert sorted(order) == [0, 1]
    streamed = engines.in_prompt_order(vllm_engine.generate_stream(prompts, **budget), 2)
    assert key(streamed) == key(vllm_engine.generate(prompts, **budget))
    # the engine is left with no request: the next call returns only its own
    assert [len(g) for g in vllm_engine.generate(prompts, n=2, max_new_tokens=4)] == [2, 2]

    sampling = dict(n=3, temperature=1.0, max_new_tokens=8, seed=5)
    hf = engines.HFEngine(tiny, torch.device("cpu"), batch_size=2)   # chunks of 2 sequences
    stream = hf.generate_stream(PROMPTS[:3], **sampling)
    assert [i for i, _ in stream] == [0, 1, 2]
    assert key(engines.in_prompt_order(hf.generate_stream(PROMPTS[:3], **sampling), 3)) == \
        key(hf.generate(PROMPTS[:3], **sampling))
    # a consumer that stops early: the engine's next call is unaffected
    next(iter(vllm_engine.generate_stream(prompts, **budget)))
    assert key(vllm_engine.generate(prompts, **budget)) == key(streamed)


def test_seeded_batch_longer_than_one_prefill_step(vllm_engine):
    """Many long seeded prompts: their prefills cannot fit one scheduler step (with chunked
    prefill, vLLM 0.32 on CPU crashed here: "CPU Generator does not use offset")."""
    prompts = [f"{LONG_PROMPT}# {i}\n" for i in range(32)]
    outs = vllm_engine.generate(prompts, n=4, temperature=1.0, max_new_tokens=2, seed=0,
                                ignore_eos=True)
    assert [len(c.token_ids) for g in outs for c in g] == [2] * 128


def test_ignore_eos_gives_exact_lengths(vllm_engine, hf_engine):
    for eng in (vllm_engine, hf_engine):
        outs = eng.generate(PROMPTS[:2], n=2, temperature=1.0, max_new_tokens=10, seed=0,
                            ignore_eos=True)
        assert all(len(c.token_ids) == 10 for g in outs for c in g)


def test_hf_engine_returns_the_sampler_logprobs_and_samples_as_transformers_does(tiny,
                                                                                 tokenizer):
    """HFEngine's log-probs are the sampling distribution's (temperature, top-p applied by
    engines.SamplerLogprobs), equal to the trainer's at top_p 1; moving the warpers into that
    processor leaves the sampled tokens exactly those of transformers' own generate."""
    eng = engines.HFEngine(tiny, torch.device("cpu"))
    policy = model.PolicyLogprobs(eng.model)
    for temperature, top_p in ((1.0, 1.0), (0.7, 1.0), (0.7, 0.9)):
        outs = eng.generate(PROMPTS[:2], n=2, temperature=temperature, top_p=top_p,
                            max_new_tokens=10, seed=5)
        torch.manual_seed(5)
        flat = [p for p in PROMPTS[:2] for _ in range(2)]
        enc = eng.tokenizer(flat, return_tensors="pt", padding=True)
        plain = eng.model.generate(**enc, do_sample=True, temperature=temperature, top_p=top_p,
                                   top_k=0, max_new_tokens=10, eos_token_id=tokenizer.eos_token_id,
                                   pad_token_id=tokenizer.pad_token_id)
        plain = plain[:, enc["input_ids"].shape[1]:].tolist()
        for row, c in zip(plain, [c for g in outs for c in g]):
            assert row[:len(c.token_ids)] == c.token_ids
            assert len(c.logprobs) == len(c.token_ids) and all(lp <= 0 for lp in c.logprobs)
        if top_p == 1.0:
            for prompt, group in zip(PROMPTS, outs):
                p = tokenizer(prompt)["input_ids"]
                for c in group:
                    want = policy_logprobs(policy, p + c.token_ids, temperature)[len(p) - 1:]
                    assert torch.allclose(torch.tensor(c.logprobs), want, atol=1e-4)


def test_tied_head_is_sent_once_right_after_the_embedding():
    emb, w = torch.ones(2), torch.zeros(2)
    named = [("model.embed_tokens.weight", emb), ("model.norm.weight", w)]
    out = list(engines.with_tied_head(iter(named), tied=True))
    assert [n for n, _ in out] == ["model.embed_tokens.weight", "lm_head.weight",
                                   "model.norm.weight"]
    assert out[1][1] is emb
    # a trainer that sends lm_head itself: not sent twice; untied models: untouched
    both = named + [("lm_head.weight", emb)]
    assert [n for n, _ in engines.with_tied_head(both, tied=True)].count("lm_head.weight") == 1
    assert list(engines.with_tied_head(named, tied=False)) == named


def test_fsdp_train_sync_matches_transformers(tiny, vllm_engine, hf_engine, tokenizer):
    """Train (FSDP2), sync, compare; twice: streamed, and from a dict of the full weights."""
    d = model.init_distributed()
    torch.manual_seed(0)
    policy = model.shard_model(model.PolicyLogprobs(model.load_causal_lm(tiny, d.device)),
                               d.device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    before = assert_engine_matches(policy, vllm_engine, hf_engine, tokenizer)

    train_step(policy, optimizer, tokenizer)
    n = vllm_engine.load_weights(model.iter_full_params(policy))
    hf_engine.load_weights(model.iter_full_params(policy))
    after1 = assert_engine_matches(policy, vllm_engine, hf_engine, tokenizer)
    assert n == len(list(policy.parameters())) + 1          # + the tied lm_head
    # the step really moved the outputs (else the comparison above proves nothing)
    assert max(abs(a - b) for a, b in zip(after1[0], before[0])) > 0.1

    train_step(policy, optimizer, tokenizer)
    full = {k: v.clone() for k, v in model.iter_full_params(policy)}
    vllm_engine.load_weights(full.items())
    hf_engine.load_weights(full.items())
    after2 = assert_engine_matches(policy, vllm_engine, hf_engine, tokenizer)
    assert max(abs(a - b) for a, b in zip(after2[0], after1[0])) > 0.1


def test_stops_on_eos_like_transformers(tiny, vllm_engine, hf_engine, tokenizer):
    """After teaching TARGET, greedy decoding ends with EOS, kept in token_ids by both."""
    d = model.init_distributed()
    torch.manual_seed(0)
    policy = model.PolicyLogprobs(model.load_causal_lm(tiny, d.device))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    for _ in range(30):
        train_step(policy, optimizer, tokenizer)
    vllm_engine.load_weights(policy.lm.named_parameters())   # plain module, no FSDP
    hf_engine.load_weights(policy.lm.named_parameters())
    eos = tokenizer.eos_token_id
    v = vllm_engine.generate(PROMPTS[:1], temperature=0, max_new_tokens=32)[0][0]
    h = hf_engine.generate(PROMPTS[:1], temperature=0, max_new_tokens=32)[0][0]
    assert v.token_ids[-1] == eos and v.finish_reason == "stop"
    assert v.token_ids == h.token_ids and v.text == h.text == "    return a + b\n"
    # a stop string ends the completion and stays in the text, as with transformers
    v = vllm_engine.generate(PROMPTS[:1], temperature=0, max_new_tokens=32, stop=["a +"])[0][0]
    h = hf_engine.generate(PROMPTS[:1], temperature=0, max_new_tokens=32, stop=["a +"])[0][0]
    assert v.text.endswith("a +") and v.finish_reason == "stop"
    assert (v.token_ids, v.text) == (h.token_ids, h.text)


def test_make_engine_picks_vllm_when_it_works_else_transformers(tiny, monkeypatch):
    assert engines.vllm_supports(torch.device("cpu"))

    class Started:
        def __init__(self, path, device, seed=0):
            self.seed = seed

    def broken(*a, **kw):
        raise RuntimeError("no memory")

    monkeypatch.setattr(engines, "VLLMEngine", Started)
    e = engines.make_engine("auto", tiny, torch.device("cpu"), seed=5, batch_size=3)
    assert isinstance(e, Started) and e.seed == 5          # options it lacks are dropped
    monkeypatch.setattr(engines, "VLLMEngine", broken)
    e = engines.make_engine("auto", tiny, torch.device("cpu"), seed=5, batch_size=3)
    assert isinstance(e, engines.HFEngine) and e.batch_size == 3
    with pytest.raises(SystemExit):
        engines.make_engine("nope", tiny, torch.device("cpu"))


def test_an_engine_that_failed_to_start_closes_quietly(tiny, monkeypatch):
    """vLLM raising inside its start leaves no open engine behind, and closing such a
    half-built engine (no .llm) is a no-op, not an AttributeError after the real error."""
    import vllm

    def broken(*a, **kw):
        raise ValueError("cannot load the weights")

    monkeypatch.setattr(vllm, "LLM", broken)
    before = set(engines.OPEN_ENGINES)
    with pytest.raises(ValueError, match="cannot load"):
        engines.VLLMEngine(tiny, torch.device("cpu"))
    assert set(engines.OPEN_ENGINES) == before
    half = engines.VLLMEngine.__new__(engines.VLLMEngine)
    half.close(wait=False)
    half.close(wait=True)


def test_kv_cache_bytes_by_hand():
    """models/base's shapes: 3 layers x 2 KV heads x 48 x 4 bytes x 2 = 2,304 bytes a token.
    128 sequences of 289 tokens take 10 blocks of 32 each; x 1.25. The floor and vLLM's
    minimum of one whole-context sequence win when the work is smaller, the ceiling (1 GiB)
    when it is larger, unless one context sequence is larger still."""
    from transformers import AutoConfig
    shape = engines.kv_shape(AutoConfig.from_pretrained(model.BASE_DIR))
    assert shape == dict(layers=3, kv_heads=2, head_dim=48)
    size = functools.partial(engines.kv_cache_bytes, dtype_bytes=4, context=1024, **shape)
    assert size(sequences=128, seq_len=289) == 128 * 320 * 2304 * 5 // 4 == 117_964_800
    assert size(sequences=128, seq_len=256) == 128 * 256 * 2304 * 5 // 4   # 8 whole blocks
    assert size(sequences=128, seq_len=257) == size(sequences=128, seq_len=288)   # 9
    assert size(sequences=128, seq_len=288) < size(sequences=128, seq_len=289)
    assert size(sequences=256, seq_len=289) == 2 * size(sequences=128, seq_len=289)
    assert size(sequences=128, seq_len=289, margin=1.0) == 128 * 320 * 2304
    assert size(sequences=4, seq_len=100) == 64 << 20                       # the floor
    assert size(sequences=256, seq_len=4096) == 1 << 30                     # the ceiling
    # vLLM's minimum of one whole-context sequence beats the ceiling
    assert size(sequences=4, seq_len=100, context=1_000_010) == 31_251 * 32 * 2304
    # one sequence of a 40,960-position context (Qwen3's) is more than 4 short ones
    assert size(sequences=4, seq_len=100, context=40_960, floor=0) == 40_960 * 2304
    assert size(sequences=4, seq_len=100, context=1000, floor=0) == 1024 * 2304


def test_the_cpu_engine_caches_prompts_in_blocks_a_short_prompt_fills(vllm_engine):
    """The prefix cache shares whole blocks only: in blocks of 32 the n samples of a 105-token
    prompt (the CPU default's mean) share its first 96 tokens; in vLLM's default 128, none."""
    config = vllm_engine.llm.llm_engine.vllm_config.cache_config
    assert config.enable_prefix_caching and config.block_size == engines.CPU_KV_BLOCK == 32


def test_kv_shape_takes_the_configs_head_dim_and_kv_heads_when_given():
    from types import SimpleNamespace
    qwen3 = SimpleNamespace(num_hidden_layers=28, num_attention_heads=16,
                            num_key_value_heads=8, head_dim=128, hidden_size=2048)
    assert engines.kv_shape(qwen3) == dict(layers=28, kv_heads=8, head_dim=128)
    plain = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, hidden_size=128)
    assert engines.kv_shape(plain) == dict(layers=2, kv_heads=4, head_dim=32)


def test_the_cpu_engine_sizes_its_kv_cache_to_the_batch_unless_told(tiny, monkeypatch):
    """What VLLMEngine asks vLLM for on CPU: kv_cache_bytes of its own config and the batch
    (at most 256 sequences at once; a sequence no longer than the context), or the GiB given."""
    import vllm
    from transformers import AutoConfig
    asked = []

    def record(**kw):
        asked.append(kw["kv_cache_memory_bytes"])
        raise ValueError("recorded")

    monkeypatch.setattr(vllm, "LLM", record)
    cpu = torch.device("cpu")
    config = AutoConfig.from_pretrained(tiny)
    per_token = (config.num_hidden_layers * config.num_key_value_heads
                 * config.hidden_size // config.num_attention_heads * 4 * 2)
    for kw in (dict(batch_sequences=300, batch_tokens=200), dict(kv_cache_gib=0.5),
               dict(batch_sequences=200, batch_tokens=10**6)):
        with pytest.raises(ValueError, match="recorded"):
            engines.VLLMEngine(tiny, cpu, **kw)
    context = -(-config.max_position_embeddings // 32) * 32
    assert asked == [256 * 224 * per_token * 5 // 4, 1 << 29,
                     max(200 * context * per_token * 5 // 4, 64 << 20)]


def test_grpo_step_with_vllm_under_torchrun(tmp_path):
    """A full GRPO step (rollouts, rewards, FSDP update, weight sync) with one vLLM engine
    per rank, 2 ranks on CPU (gloo)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
           "--standalone", "grpo.py", "--model", "tiny", "--engine", "vllm", "--steps", "1",
           "--sft-steps", "2",
           "--eval-n", "0", "--prompts-per-step", "2", "--group-size", "4",
           "--max-new-tokens", "24", "--max-problems", "8", "--out", str(tmp_path)]
    env = {**CLEAN_ENV, "OMP_NUM_THREADS": "1", "PYTHONPATH": root}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=root)
    assert res.returncode == 0, res.stderr[-3000:]
    # 4 sequences a rank: the KV cache's floor, 64 MiB
    assert "engine vllm (KV cache 0.06 GiB), 2 rank(s)" in res.stdout
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    rl = [r for r in rows if r["phase"] == "rl"]
    assert len(rl) == 1 and "time/sync" in rl[0] and rl[0]["response_len"] > 0
    # Every sample was trained, or skipped for a zero advantage (then nothing to train).
    assert (rl[0]["trained_tokens"] > 0) != (rl[0]["zero_adv_frac"] == 1.0)
