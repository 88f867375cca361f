"""A user's mistake gets one clear line and exit status 2, never a traceback.

Each row runs an entry point as a user would (a subprocess, the repository as working
directory, no network: HF_HUB_OFFLINE=1 so a hub id fails at once instead of after retries)
and checks the four promises: exit status 2, no "Traceback" on stderr, at most two lines on
stderr, and a message that names the bad value. The sandbox CLI and
`python -m world.sources prepare` have their own tables in test_sandbox.py and test_data.py.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bad_files(tmp: str) -> dict[str, str]:
    """Files a user might point a flag at by mistake."""
    garbage = os.path.join(tmp, "garbage.jsonl")
    with open(garbage, "w") as f:
        f.write("this is not json\n{\"also\": broken\n")
    empty = os.path.join(tmp, "empty.jsonl")
    open(empty, "w").close()
    a_file = os.path.join(tmp, "a_file")
    with open(a_file, "w") as f:
        f.write("x")
    model_dir = os.path.join(tmp, "not_a_model")   # exists, but holds no config.json
    os.makedirs(model_dir)
    other_world = os.path.join(tmp, "other_world")   # a whole checkpoint written by 2 ranks
    _model_dir(other_world, "step_3")
    with open(os.path.join(other_world, "latest"), "w") as f:
        f.write("step_3")
    with open(os.path.join(other_world, "step_3", "trainer_state.json"), "w") as f:
        json.dump({"step": 3, "world": 2}, f)
    truncated = _model_dir(tmp, "truncated")               # model.safetensors cut in half
    _cut(os.path.join(truncated, "model.safetensors"))
    missing_shard = _model_dir(tmp, "missing_shard", shards=2)
    os.remove(os.path.join(missing_shard, "model-00002-of-00002.safetensors"))
    damaged_ckpt = os.path.join(tmp, "damaged_ckpt")        # --resume from a cut checkpoint
    step = _model_dir(damaged_ckpt, "step_2")
    _cut(os.path.join(step, "model.safetensors"))
    with open(os.path.join(damaged_ckpt, "latest"), "w") as f:
        f.write("step_2")
    with open(os.path.join(step, "trainer_state.json"), "w") as f:
        json.dump({"step": 2, "world": 1}, f)
    files = dict(garbage=garbage, empty=empty, a_file=a_file, model_dir=model_dir,
                 other_world=other_world, truncated=truncated, missing_shard=missing_shard,
                 damaged_ckpt=damaged_ckpt)
    return {**files, **_bad_rows(tmp), **_bad_runs(tmp), **_bad_model_dirs(tmp)}


def _bad_model_dirs(tmp: str) -> dict[str, str]:
    """Model folders whose weights are whole but another file is not: a config.json cut short,
    one naming an architecture transformers does not know, no tokenizer, a chat template that
    does not parse."""
    from infra.model import BASE_DIR
    paths = {}
    for name in ("cut_config", "unknown_type", "no_tokenizer", "bad_template"):
        paths[name] = _model_dir(tmp, name)
        if name != "no_tokenizer":
            shutil.copy(os.path.join(BASE_DIR, "tokenizer.json"), paths[name])
    with open(os.path.join(paths["cut_config"], "config.json"), "w") as f:
        f.write('{"model_type": "qwe')
    with open(os.path.join(paths["unknown_type"], "config.json"), "w") as f:
        json.dump({"model_type": "qwen99"}, f)
    with open(os.path.join(paths["bad_template"], "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": "{% for m in messages %}{{ m.content }"}, f)
    return paths


def _bad_rows(tmp: str) -> dict[str, str]:
    """Data files whose only row is bad: each is counted, skipped, and leaves no problem (and
    no_solutions, whose row only agents.py cannot train on)."""
    row = dict(id="p/0", source="apps", question="Add.", starter_code="", fn_name="add",
               tests=[{"input": [1, 2], "output": 3}], solutions=[], difficulty="", metadata={})
    paths = {}
    for name, text in (("not_utf8", json.dumps(row).replace("Add.", "Caf\u00e9.")),
                       ("int_tests", json.dumps({**row, "tests": 3})),
                       ("json_tests", json.dumps({**row, "tests": json.dumps(row["tests"])})),
                       ("huge_statement",                                   # 10.8 MB
                        json.dumps({**row, "question": "add them " * 1_200_000}))):
        paths[name] = os.path.join(tmp, f"{name}.jsonl")
        with open(paths[name], "wb") as f:
            f.write(text.encode("latin-1") + b"\n")      # not_utf8: a raw 0xe9 byte
    # A good row without a reference solution: grpo.py trains on it, agents.py's tester cannot.
    paths["no_solutions"] = os.path.join(tmp, "no_solutions.jsonl")
    with open(paths["no_solutions"], "w") as f:
        f.write(json.dumps(row) + "\n")
    return paths


def _bad_runs(tmp: str) -> dict[str, str]:
    """--out folders a new run must not write into, and checkpoints --resume cannot use."""
    earlier = os.path.join(tmp, "earlier_run")      # a finished run that saved no checkpoint
    os.makedirs(earlier)
    with open(os.path.join(earlier, "metrics.jsonl"), "w") as f:
        f.write(json.dumps({"phase": "rl", "step": 1, "reward_mean": 0.5}) + "\n")
    with open(os.path.join(earlier, "summary.json"), "w") as f:
        json.dump({"pass_at_1_after_rl": 0.5}, f)
    paths = {"earlier_run": earlier}
    def whole(method, model):   # a checkpoint's trainer state, as save_step writes it
        return json.dumps({"step": 2, "world": 1, "rng": [3, [0], None], "method": method,
                           "model": model})
    for name, state in (("cut_state", '{"step": 2, "wor'),
                        ("keyless_state", '{"step": 2, "world": 1}'),   # no "rng"
                        ("ppo_run", whole("ppo", "base")), ("grpo_run", whole("grpo", "base")),
                        ("tiny_run", whole("grpo", "tiny"))):
        paths[name] = os.path.join(tmp, name)
        step = _model_dir(paths[name], "step_2")
        with open(os.path.join(paths[name], "latest"), "w") as f:
            f.write("step_2")
        with open(os.path.join(step, "trainer_state.json"), "w") as f:
            f.write(state)
    return paths


def _model_dir(parent: str, name: str, shards: int = 1) -> str:
    """A directory with a config.json and whole safetensors weights (one file, or `shards`
    files and the index naming them), as save_pretrained writes them; no real model."""
    from safetensors.torch import save_file
    path = os.path.join(parent, name)
    os.makedirs(path)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump({"model_type": "qwen3"}, f)
    if shards == 1:
        save_file({"w": torch.zeros(64)}, os.path.join(path, "model.safetensors"))
        return path
    weight_map = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({f"w{i}": torch.zeros(64)}, os.path.join(path, shard))
        weight_map[f"w{i}"] = shard
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return path


def _cut(file: str) -> None:
    """Truncate a file to half its size: a download or copy that stopped early."""
    os.truncate(file, os.path.getsize(file) // 2)


# (entry point, flags, a string the one-line message must contain). {name} is a file above.
CASES = [
    # data
    ("grpo.py", ["--train-data", "apps:missing.jsonl"], "missing.jsonl"),
    ("grpo.py", ["--train-data", "foo"], "foo"),
    ("grpo.py", ["--eval-data", "prepared:{garbage}"], "garbage.jsonl"),
    ("grpo.py", ["--train-data", "prepared:{empty}"], "empty.jsonl"),
    ("grpo.py", ["--train-data", "tasks:nosplit"], "nosplit"),
    # model
    ("grpo.py", ["--model", "./no/such/dir"], "no/such/dir"),
    ("grpo.py", ["--model", "{model_dir}"], "not_a_model"),
    ("grpo.py", ["--model", "Qwen/Qwen3-1.7B"], "Qwen/Qwen3-1.7B"),
    # damaged weights: named before any engine starts, not vLLM's and transformers' errors
    ("grpo.py", ["--model", "{truncated}"], "truncated/model.safetensors cannot be loaded"),
    ("grpo.py", ["--model", "{missing_shard}"], "model-00002-of-00002.safetensors"),
    # the rest of a model folder: named before any engine starts
    ("grpo.py", ["--model", "{cut_config}"], "cut_config/config.json is not a JSON object"),
    ("grpo.py", ["--model", "{unknown_type}"], "model_type 'qwen99'"),
    ("grpo.py", ["--model", "{no_tokenizer}"], "holds no tokenizer"),
    ("grpo.py", ["--model", "{bad_template}"], "chat template"),
    ("grpo.py", ["--resume", "--out", "{damaged_ckpt}"], "step_2/model.safetensors"),
    # numbers out of range and values of the wrong type
    ("grpo.py", ["--steps", "-1"], "--steps"),
    ("grpo.py", ["--steps", "abc"], "abc"),
    ("grpo.py", ["--group-size", "1"], "--group-size"),
    ("grpo.py", ["--top-p", "1.5"], "--top-p"),
    ("grpo.py", ["--temperature", "0"], "--temperature"),
    ("grpo.py", ["--lr", "-0.001"], "--lr"),
    ("grpo.py", ["--eps-low", "1.5"], "--eps-low"),
    ("grpo.py", ["--micro-batch", "0"], "--micro-batch"),
    ("grpo.py", ["--test-timeout", "0"], "--test-timeout"),
    ("grpo.py", ["--hard-focus", "lots"], "lots"),
    ("grpo.py", ["--lr", "inf"], "--lr"),
    ("grpo.py", ["--sft-lr", "inf"], "--sft-lr"),
    ("grpo.py", ["--test-timeout", "inf"], "--test-timeout"),
    ("grpo.py", ["--temperature", "1e-300"], "--temperature"),
    ("grpo.py", ["--seed", "-1"], "--seed"),
    ("grpo.py", ["--seed", str(2**70)], "--seed"),
    # flags argparse rejects, flag combinations that cannot work
    ("grpo.py", ["--preset", "nope"], "nope"),
    ("grpo.py", ["--no-such-flag"], "--no-such-flag"),
    ("grpo.py", ["--engine-tp", "2"], "--engine-tp"),
    ("grpo.py", ["--max-model-len", "64", "--max-new-tokens", "96"], "--max-model-len"),
    # files and checkpoints
    ("grpo.py", ["--out", "{a_file}"], "a_file"),
    ("grpo.py", ["--resume", "--out", "{other_world}"], "2 ranks"),
    ("grpo.py", ["--out", "{a_file}/run"], "is a file"),
    ("grpo.py", ["--out", "/sys"], "cannot write in '/sys'"),   # sysfs: no new file, not root's
    ("grpo.py", ["--resume", "--out", "{cut_state}"], "step_2/trainer_state.json is not"),
    ("grpo.py", ["--resume", "--out", "{keyless_state}"], "trainer_state.json lacks rng"),
    # an earlier run in --out: continued (--resume, from a checkpoint) or replaced, never mixed
    ("grpo.py", ["--out", "{earlier_run}"], "holds an earlier run (metrics.jsonl, summary.json)"),
    ("grpo.py", ["--resume", "--out", "{earlier_run}"], "no checkpoint to continue from"),
    ("grpo.py", ["--resume", "--overwrite"], "pass one of them"),
    # a checkpoint is continued by its own method, from its own model
    ("grpo.py", ["--resume", "--out", "{ppo_run}"], "holds a ppo run and this run is grpo"),
    ("grpo.py", ["--resume", "--out", "{tiny_run}"], "trained from --model tiny"),
    # bad rows are skipped at load; a file of nothing else leaves no problem to train on
    ("grpo.py", ["--train-data", "prepared:{not_utf8}"], "not_utf8.jsonl"),
    ("grpo.py", ["--train-data", "prepared:{int_tests}"], "int_tests.jsonl"),
    ("grpo.py", ["--train-data", "prepared:{json_tests}"], "json_tests.jsonl"),
    ("grpo.py", ["--engine", "hf", "--train-data", "prepared:{huge_statement}"],
     "huge_statement.jsonl"),
    # the other trainers share the same entry point and flag checks
    ("ppo_fgo.py", ["--train-data", "foo"], "foo"),
    ("ppo_fgo.py", ["--gamma", "1.5"], "--gamma"),
    ("ppo_fgo.py", ["--critic", "nope"], "nope"),
    ("ppo_fgo.py", ["--model", "./no/such/dir"], "no/such/dir"),
    ("ppo_fgo.py", ["--train-data", "prepared:{not_utf8}"], "not_utf8.jsonl"),
    ("ppo_fgo.py", ["--out", "{earlier_run}"], "holds an earlier run"),
    ("ppo_fgo.py", ["--resume", "--out", "{grpo_run}"], "holds a grpo run and this run is ppo"),
    ("ppo_fgo.py", ["--reward-table", "{{bad"], "--reward-table"),   # {{: format()'s brace
    ("agents.py", ["--max-turns", "0"], "--max-turns"),
    ("agents.py", ["--policy", "bogus"], "bogus"),
    ("agents.py", ["--turn-order", "tester-first"], "--role-rewards ours"),
    ("agents.py", ["--train-data", "foo"], "foo"),
    ("agents.py", ["--train-data", "prepared:{not_utf8}"], "not_utf8.jsonl"),
    ("agents.py", ["--train-data", "prepared:{no_solutions}"], "no problem has a reference"),
    ("agents.py", ["--out", "{earlier_run}"], "holds an earlier run"),
    ("agents.py", ["--resume", "--out", "{grpo_run}"], "holds a grpo run and this run is "
     "agents"),
]


# Each entry point is imported once in a subprocess, which then forks a child per row: the
# child runs main() exactly as `python SCRIPT FLAGS` would (sys.argv, stderr, the exit status
# the interpreter would give), without paying torch's import once per row.
DRIVER = r"""
import importlib, json, os, sys, tempfile, time, traceback
script, rows = sys.argv[1], json.loads(sys.argv[2])
module = importlib.import_module(script[:-3])
results = []
for flags in rows:
    err = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        os.dup2(err.fileno(), 2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        sys.argv = [script, *flags]
        code = 0
        try:
            module.main(flags)
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    deadline = time.time() + 120   # a mistake nobody caught goes on to train: stop it
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.time() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            status = None
            break
        time.sleep(0.05)
    err.seek(0)
    text = err.read().decode(errors="replace")
    if status is None:
        results.append([-9, text + "\n(killed: still running after 120 s)"])
    else:
        results.append([os.waitstatus_to_exitcode(status), text])
print(json.dumps(results))
"""


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def _run_rows(script: str, rows: list[list[str]]) -> list[tuple[int, str]]:
    proc = subprocess.run([sys.executable, "-c", DRIVER, script, json.dumps(rows)], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [tuple(r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """{index: (row, (exit status, stderr))} for the rows of CASES whose test was selected
    (all of them in the suite; `-k` one row runs that row only)."""
    tmp = str(tmp_path_factory.mktemp("bad_inputs"))
    files = _bad_files(tmp)
    rows = [(script, _own_out([f.format(**files) for f in flags], os.path.join(tmp, f"out{i}")),
             want) for i, (script, flags, want) in enumerate(CASES)]
    selected = {item.callspec.params["index"] for item in request.session.items
                if getattr(item, "function", None) is test_a_user_error_is_one_line_and_exit_2}
    by_script: dict[str, list[int]] = {}
    for i, (script, _, _) in enumerate(rows):
        if i in selected:
            by_script.setdefault(script, []).append(i)
    done: dict[int, tuple[int, str]] = {}
    for script, idx in by_script.items():
        for i, result in zip(idx, _run_rows(script, [rows[i][1] for i in idx])):
            done[i] = result
    return {i: (rows[i], done[i]) for i in done}


def _own_out(flags: list[str], out: str) -> list[str]:
    """flags with --out `out` added unless they name one: a row reports its own mistake, not
    an earlier run that the checkout's runs/<method> holds."""
    return flags if "--out" in flags else [*flags, "--out", out]


def test_the_table_is_large_enough():
    assert len(CASES) >= 15
    assert {script for script, _, _ in CASES} == {"grpo.py", "ppo_fgo.py", "agents.py"}


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"{s}:{' '.join(f)}" for s, f, _ in CASES])
def test_a_user_error_is_one_line_and_exit_2(outcomes, index):
    (script, flags, want), (rc, stderr) = outcomes[index]
    _check_one_line(script, flags, want, rc, stderr)


def _check_one_line(script, flags, want, rc, stderr):
    err_lines = [line for line in stderr.splitlines() if line.strip()]
    shown = f"{script} {' '.join(flags)}\nrc={rc}\nstderr:\n{stderr[-3000:]}"
    assert rc == 2, shown
    assert "Traceback" not in stderr, shown
    assert 1 <= len(err_lines) <= 2, shown
    assert want in stderr, shown
    assert "[rank" not in stderr, shown   # torch's per-rank prefix: not a one-liner


@pytest.mark.parametrize("script, flags, want", [
    ("grpo.py", ["--train-data", "apps:missing.jsonl"], "missing.jsonl"),
    ("ppo_fgo.py", ["--model", "./no/such/dir"], "no/such/dir"),
    ("agents.py", ["--steps", "-1"], "--steps"),
])
def test_as_a_plain_process(script, flags, want, tmp_path):
    """A few rows again as `python SCRIPT FLAGS`, with nothing between the user and main()."""
    argv = _own_out(flags, str(tmp_path / "out"))
    proc = subprocess.run([sys.executable, script, *argv], cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    _check_one_line(script, flags, want, proc.returncode, proc.stderr)


def test_a_real_bug_keeps_its_traceback(tmp_path):
    """Only the errors a user can fix are shortened: a crash inside the code is not."""
    from infra import flags
    def buggy(args):
        raise ZeroDivisionError("a bug")
    with pytest.raises(ZeroDivisionError):
        flags.run_entry_point(buggy, lambda argv: None, [])


def test_only_the_main_rank_prints_the_error(tmp_path):
    """Under torchrun every rank hits the same mistake; the user reads it once. (torchrun then
    adds its own failure summary, which is not ours to shorten.)"""
    env = _env()
    env.pop("HF_HUB_OFFLINE")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node", "2", "grpo.py", "--train-data", "foo",
                           "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode != 0
    ours = [line for line in (proc.stdout + proc.stderr).splitlines()
            if "grpo.py: error: Unknown data set 'foo'" in line]
    assert len(ours) == 1, proc.stderr[-3000:]
    assert "Traceback" not in ours[0]


def test_weight_files_are_checked_by_their_header_and_size(tmp_path):
    """model.weight_problem: whole files pass; a cut file, a missing shard, a Git LFS pointer
    and a bad index are each named with the file and the reason."""
    from infra import model
    whole, sharded = _model_dir(str(tmp_path), "whole"), _model_dir(str(tmp_path), "sh", 3)
    assert model.weight_problem(whole) is None and model.weight_problem(sharded) is None
    _cut(os.path.join(sharded, "model-00003-of-00003.safetensors"))
    file, why = model.weight_problem(sharded)
    assert file.endswith("model-00003-of-00003.safetensors") and "truncated" in why
    with open(os.path.join(whole, "model.safetensors"), "ab") as f:
        f.write(b"x")                                   # one byte more than the header says
    assert "extra bytes" in model.weight_problem(whole)[1]
    with open(os.path.join(whole, "model.safetensors"), "w") as f:
        f.write("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n")
    assert "git lfs pull" in model.weight_problem(whole)[1]
    with open(os.path.join(sharded, "model.safetensors.index.json"), "w") as f:
        f.write("{")
    assert "index" in model.weight_problem(sharded)[1]
    os.remove(os.path.join(whole, "model.safetensors"))
    assert "no weights" in model.weight_problem(whole)[1]


def test_a_resume_names_a_cut_optimizer_file(tmp_path):
    """The checkpoint's rank files are checked too (a torch.save zip whose end is missing)."""
    from infra import model
    ckpt = _model_dir(str(tmp_path), "step_1")
    torch.save({"optimizer": {}}, os.path.join(ckpt, "rank0.pt"))
    model.check_checkpoint(ckpt, rank=0)                 # whole: no error
    with pytest.raises(model.UserError, match="rank1.pt"):
        model.check_checkpoint(ckpt, rank=1)
    _cut(os.path.join(ckpt, "rank0.pt"))
    with pytest.raises(model.UserError, match="rank0.pt cannot be loaded"):
        model.check_checkpoint(ckpt, rank=0)


def test_a_model_folder_is_checked_before_anything_loads_it(tmp_path):
    """model.resolve_model names the file that transformers, the tokenizer or the engine would
    fail on: a config.json cut short, an unknown model_type, no tokenizer, a chat template
    that does not parse (in tokenizer_config.json or chat_template.jinja). The shipped base
    and a folder with a template that compiles pass."""
    from infra import model
    dirs = _bad_model_dirs(str(tmp_path))
    for name, want in (("cut_config", "is not a JSON object"), ("unknown_type", "qwen99"),
                       ("no_tokenizer", "holds no tokenizer"),
                       ("bad_template", r"tokenizer_config.json does not parse \(line 1")):
        with pytest.raises(model.UserError, match=want):
            model.resolve_model(dirs[name])
    good = dirs["bad_template"]
    with open(os.path.join(good, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": [{"name": "default", "template":
                                      "{% for m in messages %}{{ m.content }}{% endfor %}"}]},
                  f)
    assert model.resolve_model(good) == good
    with open(os.path.join(good, "chat_template.jinja"), "w") as f:
        f.write("{% if %}")
    with pytest.raises(model.UserError, match="chat_template.jinja does not parse"):
        model.resolve_model(good)
    assert model.resolve_model("base") == model.BASE_DIR
