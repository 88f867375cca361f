"""The shipped CPU base model (models/base) and base.py, which makes it: the files are the
ones the card's digests name and load in transformers and vLLM; the corpus is the card's,
made again; the stopping rule picks what it says; a stopped training resumes exactly."""
import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

import cccs
from infra import model
from models import make_base as base
from world import sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIPPED = model.BASE_DIR
CLEAN_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# The recipe of the shipped base's corpus (a card without one predates the recipes: repair-v1).
# The corpus tests build this one (a corpus build runs the sandbox for minutes; cached).
SHIPPED_RECIPE = json.load(open(os.path.join(SHIPPED, "card.json"))).get("corpus_recipe",
                                                                         "repair-v1")


def prompt() -> str:
    """The coder prompt of the first held-out arith problem, as the trainers render it."""
    import rollouts
    from world import sources
    p = next(p for p in sources.load_problems("tasks", split="eval")
             if p.metadata["family"] == "arith")
    return rollouts.prompt_text(model.load_tokenizer(SHIPPED), p)


def test_shipped_files_match_their_digests():
    sums = dict(line.split()[::-1] for line in open(os.path.join(SHIPPED, "SHA256SUMS")))
    assert set(sums) == set(base.SHIPPED)
    for name, digest in sums.items():
        assert hashlib.sha256(open(os.path.join(SHIPPED, name), "rb").read()).hexdigest() \
            == digest, name
    size = sum(os.path.getsize(os.path.join(SHIPPED, n)) for n in os.listdir(SHIPPED))
    assert size <= 30 * 2 ** 20


def test_shipped_base_loads_in_transformers_and_is_the_default():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    assert model.resolve_model("base") == SHIPPED
    lm = AutoModelForCausalLM.from_pretrained(SHIPPED)
    tok = AutoTokenizer.from_pretrained(SHIPPED)
    ids = tok(prompt(), return_tensors="pt")["input_ids"]
    out = lm.generate(ids, max_new_tokens=48, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:])
    assert "```python" in text and ("print(" in text or "return" in text), text  # code
    card = json.load(open(os.path.join(SHIPPED, "card.json")))
    assert card["parameters"] == sum(t.numel() for t in load_file(
        os.path.join(SHIPPED, "model.safetensors")).values())


def test_shipped_base_loads_in_vllm_and_agrees_with_transformers():
    pytest.importorskip("vllm")
    code = f"""
import torch
from infra import engines, model
prompt = {prompt()!r}
model.init_distributed()
v = engines.VLLMEngine(model.BASE_DIR, torch.device("cpu"), seed=0, kv_cache_gib=0.25)
h = engines.HFEngine(model.BASE_DIR, torch.device("cpu"))
a = v.generate([prompt], temperature=0, max_new_tokens=48)[0][0].text
b = h.generate([prompt], temperature=0, max_new_tokens=48)[0][0].text
print("SAME" if a == b else "DIFF", repr(a), repr(b))
v.close()
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=CLEAN_ENV, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "SAME" in res.stdout, res.stdout[-2000:]


def test_corpus_is_made_again_exactly_as_the_card_says():
    card = json.load(open(os.path.join(SHIPPED, "card.json")))
    pairs = base.corpus_pairs(card["corpus_seed"], SHIPPED_RECIPE)
    assert base.corpus_digest(pairs) == card["corpus_sha256"]
    kinds = {k: sum(1 for p in pairs if p[0] == k) for k in card["corpus_examples"]}
    assert kinds == card["corpus_examples"]


def statement(prompt: str) -> str:
    """The problem's question in a rendered prompt ("### User\n<question>\n\n...")."""
    return prompt.split("### User\n", 1)[1].split("\n\n", 1)[0]


def test_corpus_holds_no_rl_or_eval_instance_and_the_cccs_family_only_at_its_last_rungs():
    """Every prompt's problem is a corpus problem or a built-in one; none is a statement of
    the rl or eval splits. The CCCS family appears only as completions from one of its last
    split points (the recipe's cccs_rungs); the RL-only family not at all."""
    from world import tasks
    world = tasks.generate_base(0)
    corpus = {r["question"]: r for r in world["corpus"]}
    builtin = {p.question.strip() for p in sources.builtin_problems()}
    held = {r["question"] for r in world["rl"] + world["eval"]}
    kinds = set()
    for kind, prompt, _ in base.corpus_pairs(0, SHIPPED_RECIPE):
        q = statement(prompt)
        kinds.add(kind)
        assert q not in held
        assert q in corpus or q in builtin, (kind, q)
        row = corpus.get(q)
        if row and row["metadata"]["family"] == tasks.CCCS_FAMILY:
            code = row["solutions"][0]
            rungs = base.CORPUS_RECIPES[SHIPPED_RECIPE]["cccs_rungs"]
            prefixes = [cccs.make_subtask(code, s)[0]
                        for s in cccs.stage_starts(code, rungs="every")[:-1][:rungs]]
            assert kind == "completion" and any(prompt.endswith("```python\n" + prefix)
                                                for prefix in prefixes), q
        assert not row or row["metadata"]["family"] != tasks.RL_ONLY_FAMILY
    assert kinds == set(base.KINDS)


def test_cccs_family_examples_start_at_each_of_the_recipes_last_rungs_never_the_start():
    """With 2 rungs, the CCCS family's completions start at its last conditional for some
    instances and at the one before for others (drawn per instance, the same every time); the
    whole program (line 0) is never a start."""
    from world import tasks
    codes = [r["solutions"][0] for r in tasks.generate_base(0)["corpus"]
             if r["metadata"]["family"] == tasks.CCCS_FAMILY][:40]
    for rungs in (1, 2):
        seen = set()
        for i, code in enumerate(codes):
            last = cccs.stage_starts(code, rungs="every")[:-1]
            start = base.rung_start(code, rungs, f"0-{i}")
            assert start == base.rung_start(code, rungs, f"0-{i}") and start != 0
            seen.add(last.index(start))
        assert seen == set(range(rungs))


def test_corpus_repair_turns_are_right_by_the_reference():
    """The game's turn-1 examples as the corpus makes them (agents.repair_states on corpus
    problems): every answer program passes the ground truth; a "keep" example (the program
    shown is the reference) shows a test the reference fails, and its answer's tests are
    all right; a "fix" example shows only right tests, one of which the program fails."""
    import agents
    import data
    import sandbox
    from world import tasks
    rows = tasks.generate_base(0)["corpus"][1::base.REPAIR_EVERY][:40]
    problems = [data.Problem(**r) for r in rows]
    repairs = agents.repair_states(problems, base.ROLE_MAX_TESTS)
    assert len(repairs) >= 60
    jobs = []
    for state, program, tests in repairs:
        p = state.problem
        jobs += [dict(code=program, tests=p.tests, fn_name=p.fn_name),
                 dict(code=p.solutions[0], tests=state.tests, fn_name=p.fn_name),
                 dict(code=p.solutions[0], tests=tests, fn_name=p.fn_name)]
    res = sandbox.run_batch(jobs, workers=2)
    keeps = 0
    for i, (state, program, _) in enumerate(repairs):
        gt, shown, answer = res[3 * i: 3 * i + 3]
        assert gt.status == "pass" and answer.status == "pass"
        assert not all(state.passed)
        if state.program == program:           # keep the program: the shown test is wrong
            keeps += 1
            assert shown.status != "pass"
        else:                                  # fix the program: the shown tests are right
            assert shown.status == "pass" and state.program != program
    assert 0 < keeps < len(repairs)


def row(step, p1, pk, fams):
    return {"step": step, "pass@1": p1, "pass@8": pk, "k": 8, "pass@1_by_family": fams}


def test_stopping_rule_picks_the_last_checkpoint_with_room_for_rl():
    some = {"a": 0.3, "b": 0.4, "c": 0.9}
    evals = [row(250, 0.05, 0.2, some), row(500, 0.25, 0.5, some), row(750, 0.4, 0.7, some),
             row(1000, 0.45, 0.6, some),                 # pass@8 < 1.6 x pass@1: too sharp
             row(1250, 0.6, 0.9, some)]                  # pass@1 above 0.5
    assert [base.meets_rule(e) for e in evals] == [False, True, True, False, False]
    assert base.stopping_point(evals) == (evals[2], True)
    one_family = {"a": 0.3, "b": 0.9, "c": 0.95}         # only one family solved sometimes
    assert not base.meets_rule(row(1, 0.3, 0.6, one_family))
    assert base.stopping_point(evals[:1]) == (evals[0], False)      # none in the band
    # None meets the rule: the most room (pass@8 - pass@1) in the pass@1 band.
    sharp = [row(500, 0.22, 0.33, some), row(750, 0.3, 0.45, some), row(1000, 0.4, 0.5, some)]
    assert base.stopping_point(sharp) == (sharp[1], False)


def _train(out, *extra):
    """base.py on a 1-layer model; the run starts with this process's corpus in <out> (the
    cache base.load_corpus reads, as a copied run would), so no subprocess builds it again."""
    corpus = os.path.join(out, "corpus.json")
    if not os.path.exists(corpus):
        os.makedirs(out, exist_ok=True)
        with open(corpus, "w") as f:
            json.dump(base.corpus_pairs(0, SHIPPED_RECIPE), f)
    cmd = [sys.executable, "-m", "models.make_base", "--out", out, "--corpus-recipe",
           SHIPPED_RECIPE, "--layers", "1",
           "--hidden", "32", "--intermediate", "64", "--heads", "2", "--kv-heads", "1",
           "--vocab", "300", "--eval-every", "2", "--eval-n", "1", "--max-new-tokens", "4",
           "--engine", "hf", "--cpu-threads", "1", "--batch", "8", *extra]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=CLEAN_ENV,
                         timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def test_a_stopped_training_resumes_to_the_same_weights(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _train(a, "--steps", "4")
    _train(b, "--steps", "2")
    res = _train(b, "--steps", "4", "--resume")
    assert "resumed from" in res.stdout and "at step 2" in res.stdout
    wa = load_file(os.path.join(a, "step_4", "model.safetensors"))
    wb = load_file(os.path.join(b, "step_4", "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    state = json.load(open(os.path.join(b, "step_4", "trainer_state.json")))
    assert [e["step"] for e in state["evals"]] == [2, 4] and state["seconds"] > 0


def test_card_renders_the_preconditions_it_holds():
    """The shipped card's README is model_card(card.json), the precondition table included
    when card.json holds one (bench/preconditions.py's figures), and none without."""
    card = json.load(open(os.path.join(SHIPPED, "card.json")))
    text = base.model_card(card)
    assert text == open(os.path.join(SHIPPED, "README.md")).read()
    assert "## Each method's precondition" in text and "| CCCS |" in text
    bare = {k: v for k, v in card.items() if k != "preconditions"}
    assert "precondition (" not in base.model_card(bare)
