"""Where the CPU default's seconds go, beside what the machine could do at best: each phase of
a GRPO step (and of an evaluation) in CPU seconds, next to its floor.

    OMP_NUM_THREADS=1 python bench/step_floor.py [--steps 4] [--eval-problems 300]

Floors (what no implementation on this machine can beat, so the gap says where a lever is):
  generation  the model's forward FLOPs for the tokens a phase must compute (each prompt
              once, every generated token) at the FLOP rate a plain fp32 matmul reaches here;
  update      6 x the matmul parameters per token (forward and backward) for every token of
              the trained samples (prompt + response), at the same rate;
  sandbox     the CPU seconds of the programs' own work: every distinct program run on the
              tests the sandbox ran, in ONE process (no fork per job or test), itself run as
              a single sandbox job so the programs stay confined (bench/step_floor's harness).
Measured: the same phases of real steps (grpo.grpo_step on the shipped base, tasks:rl, the CPU
default's flags) and of an evaluation (rollouts.evaluate on tasks:eval, --eval-n 4), each
phase's CPU seconds from metrics.Timer on a CPU clock (this process and its reaped children:
the sandbox's workers). CPU seconds, not wall: the 2-core machine is shared.
Prints a markdown table; bench/results/step-floor/README.md holds one run's."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import platform
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import rollouts  # noqa: E402
import sandbox  # noqa: E402
from infra import flags, metrics  # noqa: E402
from infra.bookkeeping import policy_optimizer  # noqa: E402


def cpu_clock() -> float:
    """CPU seconds (user + sys) of this process and of its children that were waited for."""
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def matmul_gflops(n: int = 1024, seconds: float = 2.0) -> float:
    """fp32 GFLOP per CPU-second of torch.mm on n x n matrices, with torch's threads as set
    (process_time sums the threads; best of repeats over `seconds` of CPU: the least
    disturbed by other processes)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best, spent = 0.0, 0.0
    while spent < seconds:
        t = time.process_time()
        torch.mm(a, b)
        dt = time.process_time() - t
        spent += dt
        if dt > 0:
            best = max(best, 2 * n ** 3 / dt / 1e9)
    return best


def matmul_params(config) -> int:
    """Parameters a token's forward multiplies by: each layer's q, k, v, o and MLP matrices and
    the output head (the embedding lookup is free)."""
    h, i, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    kv = (getattr(config, "num_key_value_heads", None) or config.num_attention_heads) * \
        (h // config.num_attention_heads)
    return L * (2 * h * h + 2 * h * kv + 3 * h * i) + config.vocab_size * h


def forward_flops(config, tokens: int, context: float) -> float:
    """2 x matmul_params per token, plus attention's scores and values (2 x 2 x layers x
    hidden x the mean context a token attends to)."""
    return tokens * (2 * matmul_params(config)
                     + 4 * config.num_hidden_layers * config.hidden_size * context)


# --- the sandbox's floor: the programs' own work in one confined process ----------------------

HARNESS = r'''
import io, json, os, signal, sys, time
class Limit(BaseException):
    pass
def alarm(*_):
    raise Limit()
signal.signal(signal.SIGPROF, alarm)
real_exit, real_stdin, real_stdout = os._exit, sys.stdin, sys.stdout
os._exit = lambda status=0: (_ for _ in ()).throw(SystemExit(status))
jobs = json.loads(real_stdin.read())
cpu = 0.0
tests = 0
for code, fn_name, inputs, timeout in jobs:
    try:
        compiled = compile(code, "<solution>", "exec")
    except BaseException:
        continue
    for given in inputs:
        tests += 1
        ns = {"__name__": "__main__"}
        if fn_name is not None:
            ns.update(PRELUDE)
        sys.stdin, sys.stdout = io.StringIO("" if fn_name else given), io.StringIO()
        start = time.process_time()
        signal.setitimer(signal.ITIMER_PROF, timeout)
        try:
            exec(compiled, ns)
            if fn_name is not None:
                fn = ns.get(fn_name) or getattr(ns["Solution"](), fn_name)
                fn(*given)
        except BaseException:
            pass
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            cpu += time.process_time() - start
            sys.stdin, sys.stdout = real_stdin, real_stdout
print(json.dumps({"cpu": round(cpu, 4), "tests": tests}))
'''


def own_work(jobs: list[dict], results: list | None = None) -> dict:
    """{"cpu": seconds, "tests": count} of running the distinct jobs' programs on the tests
    the sandbox ran (each job's result in `results`: not those it did not run, after a
    timeout or the first failure; None: every test) in one process (HARNESS), with each
    test's CPU limit; check tests (HumanEval) are skipped. The harness is one sandbox job:
    the programs run confined, as in training."""
    unique = {}
    for job, res in zip(jobs, results or [None] * len(jobs)):
        if not any("check" in t for t in job["tests"]):
            unique.setdefault(job_digest(job), (job, ran_tests(job, res)))
    payload = [(j["code"], j.get("fn_name"), [t["input"] for t in tests],
                float(j.get("timeout", 4.0))) for j, tests in unique.values()]
    prelude = "from typing import *\nfrom collections import *\nimport math, heapq, bisect\n" \
              "PRELUDE = {k: v for k, v in globals().items() if not k.startswith('__')}\n"
    res = sandbox.run_batch([dict(code=prelude + HARNESS,
                                  tests=[{"input": json.dumps(payload), "output": ""}],
                                  timeout=max(60.0, 3 * sum(p[3] for p in payload)),
                                  memory_mb=2048)], workers=1)[0]
    try:
        return json.loads(res.tests[0].output)
    except (ValueError, IndexError):   # the harness died: say how
        raise SystemExit(f"the own-work harness failed ({res.status}): "
                         f"{res.tests[0].stderr[-500:] if res.tests else res.error}") from None


def ran_tests(job: dict, result) -> list[dict]:
    """The job's tests the sandbox ran (all of them when result is None)."""
    if result is None:
        return job["tests"]
    return [t for t, r in zip(job["tests"], result.tests) if not r.stderr.startswith("not run")]


def job_digest(job: dict) -> bytes:
    return hashlib.sha256(pickle.dumps(sorted(job.items()))).digest()


def recording_sandbox(jobs_seen: list, results_seen: list):
    """sandbox.run_batch that also keeps every job it was given and its result."""
    real = sandbox.run_batch

    def run_batch(jobs, workers=None):
        jobs = list(jobs)
        results = real(jobs, workers=workers)
        jobs_seen.extend(jobs)
        results_seen.extend(results)
        return results
    return run_batch


def tests_past_first_failure(jobs: list, results: list) -> dict:
    """{"ran": tests the sandbox ran, "after": of which after the job's first failing test,
    "after_<verdict>": those by the first failure's verdict} over the distinct jobs: what a
    judge that stops at the first failure would not run, where only pass/fail counts. Tests
    not run (after a timeout) count in neither; a compile error runs none."""
    out: dict = {"ran": 0, "after": 0}
    done = set()
    for job, res in zip(jobs, results):
        key = job_digest(job)
        if key in done:
            continue
        done.add(key)
        statuses = [t.status for t in res.tests if not t.stderr.startswith("not run")]
        first = next((i for i, s in enumerate(statuses) if s != "pass"), len(statuses))
        past = max(len(statuses) - first - 1, 0)
        out["ran"] += len(statuses)
        out["after"] += past
        if past:
            out[f"after_{statuses[first]}"] = out.get(f"after_{statuses[first]}", 0) + past
    return out


# --- the measurements --------------------------------------------------------------------------

def measure(a) -> dict:
    from transformers import AutoConfig

    import grpo
    import trainer
    args = grpo.parse_args(["--steps", str(a.steps), "--eval-n", "0", "--train-eval-problems",
                            "0", "--seed", str(a.seed), "--out", a.out, "--overwrite"])
    r = trainer.start(args, "grpo", coder_prompts=True)
    trainer.prepare_run(r)
    r.optimizer, r.scheduler = policy_optimizer(r.policy, **flags.optimizer(args))
    trainer.first_step(r, None)
    config = AutoConfig.from_pretrained(r.model_path)
    r.timer = metrics.Timer(clock=cpu_clock)
    seen, verdicts = [], []
    sandbox_run_batch = sandbox.run_batch     # rollouts calls it as sandbox.run_batch
    sandbox.run_batch = recording_sandbox(seen, verdicts)
    steps = []
    for step in range(a.steps):
        c0 = cpu_clock()
        m = grpo.grpo_step(r, step)
        steps.append({**m, **r.timer.pop(), "cpu/step": cpu_clock() - c0})
    step_jobs, step_verdicts = list(seen), list(verdicts)
    step_past = tests_past_first_failure(seen, verdicts)
    prompt_len = trainer_prompt_len(r, r.train_problems)
    sandbox.run_batch = sandbox_run_batch
    evaluation = {}
    if a.eval_problems:
        problems = r.eval_problems[:a.eval_problems]
        seen.clear()
        verdicts.clear()
        outs, generate = [], r.engine.generate

        def recording_generate(*x, **kw):   # keeps the samples, for their token count
            outs.extend(generate(*x, **kw))
            return outs
        r.engine.generate = recording_generate
        sandbox.run_batch = recording_sandbox(seen, verdicts)
        timer = metrics.Timer(clock=cpu_clock)
        res = rollouts.evaluate(r.engine, r.tokenizer, problems, r.d, n=4, temperature=1.0,
                                top_p=1.0, max_new_tokens=args.max_new_tokens, seed=a.seed,
                                reward=args.reward, test_timeout=args.test_timeout,
                                workers=args.sandbox_workers, timer=timer)
        sandbox.run_batch, r.engine.generate = sandbox_run_batch, generate
        evaluation = dict(problems=len(problems), n=4, **timer.pop(),
                          jobs=len(seen), distinct=len({job_digest(j) for j in seen}),
                          prompt_tokens=sum(len(r.tokenizer(rollouts.prompt_text(
                              r.tokenizer, p))["input_ids"]) for p in problems),
                          gen_tokens=sum(len(c.token_ids) for o in outs for c in o),
                          own=own_work(seen, verdicts), pass_at_1=res["pass@1"],
                          past=tests_past_first_failure(seen, verdicts))
    return dict(steps=steps, step_own=own_work(step_jobs, step_verdicts),
                step_jobs=len(step_jobs),
                step_past=step_past,
                step_distinct=len({job_digest(j) for j in step_jobs}),
                prompt_len=prompt_len, evaluation=evaluation,
                matmul_params=matmul_params(config), config=config,
                gflops_1=threads(1, matmul_gflops), gflops_all=threads(os.cpu_count(),
                                                                      matmul_gflops))


def trainer_prompt_len(r, problems) -> float:
    """Mean prompt tokens over (up to 500 of) the problems."""
    some = problems[:500]
    return sum(len(r.tokenizer(rollouts.prompt_text(r.tokenizer, p))["input_ids"])
               for p in some) / max(len(some), 1)


def threads(n: int, fn):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        return fn()
    finally:
        torch.set_num_threads(old)


def past_by_verdict(past: dict, per: int = 1) -> str:
    return ", ".join(f"{v / per:.0f} after {k[6:]}" for k, v in sorted(past.items())
                     if k.startswith("after_")) or "none"


def report(m: dict, a) -> str:
    # process_time sums the threads: a rate per CPU-second, comparable with CPU seconds
    config, peak = m["config"], max(m["gflops_1"], m["gflops_all"]) * 1e9
    steps = m["steps"][1:] or m["steps"]      # the first step warms up the engine and caches
    mean = {k: sum(s.get(k, 0.0) for s in steps) / len(steps) for k in steps[0]}
    samples = 128
    gen_tokens = mean["response_len"] * samples
    prompts = 8
    gen_flops = forward_flops(config, int(prompts * m["prompt_len"] + gen_tokens),
                              m["prompt_len"] + mean["response_len"] / 2)
    trained = (1 - mean["zero_adv_frac"]) * samples * (m["prompt_len"] + mean["response_len"])
    upd_flops = 3 * forward_flops(config, int(trained), (m["prompt_len"] +
                                                         mean["response_len"]) / 2)
    own = m["step_own"]["cpu"] / len(m["steps"])
    rows = [("generate", mean["time/generate"], gen_flops / peak,
             f"{prompts} prompts x {m['prompt_len']:.0f} + {gen_tokens:.0f} generated tokens, "
             f"{gen_flops / 1e9:.1f} GFLOP"),
            ("reward (sandbox)", mean["time/reward"], own,
             f"{m['step_jobs'] / len(m['steps']):.0f} jobs, "
             f"{m['step_distinct'] / len(m['steps']):.0f} distinct, "
             f"{m['step_own']['tests'] / len(m['steps']):.0f} tests run in-process; the "
             f"sandbox ran {m['step_past']['ran'] / len(m['steps']):.0f}, "
             f"{m['step_past']['after'] / len(m['steps']):.0f} of them after a job's first "
             f"failure ({past_by_verdict(m['step_past'], len(m['steps']))})"),
            ("update", mean["time/update"], upd_flops / peak,
             f"{trained:.0f} tokens trained, {upd_flops / 1e9:.1f} GFLOP"),
            ("sync", mean.get("time/sync", 0.0), 0.0, "weights copied in-process")]
    out = [f"matmul peak (torch.mm 1024^2 fp32, GFLOP per CPU-second, best of 2 s): "
           f"{m['gflops_1']:.1f} on 1 thread, {m['gflops_all']:.1f} on {os.cpu_count()}; "
           f"floors use the higher; the model: "
           f"{m['matmul_params'] / 1e6:.2f} M matmul parameters, "
           f"{2 * m['matmul_params'] / 1e6:.1f} MFLOP a token forward",
           "", f"A GRPO step (mean of steps {len(m['steps']) - len(steps) + 1}-"
               f"{len(m['steps'])}; CPU seconds):", "",
           "| phase | measured CPU s | floor s | gap | what the floor counts |",
           "|---|---|---|---|---|"]
    out += [f"| {name} | {cpu:.2f} | {floor:.3f} | "
            f"{'' if not floor else f'{cpu / floor:.0f}x'} | {what} |"
            for name, cpu, floor, what in rows]
    out.append(f"| step (all) | {mean['cpu/step']:.2f} | {sum(r[2] for r in rows):.3f} | | |")
    e = m["evaluation"]
    if e:
        flops = forward_flops(config, e["prompt_tokens"] + e["gen_tokens"],
                              e["prompt_tokens"] / e["problems"])
        out += ["", f"An evaluation: {e['problems']} problems of tasks:eval x {e['n']} samples "
                    f"(pass@1 {e['pass_at_1']:.3f}; CPU seconds):", "",
                "| phase | measured CPU s | floor s | gap | what the floor counts |",
                "|---|---|---|---|---|",
                f"| generate | {e['time/generate']:.2f} | {flops / peak:.3f} | "
                f"{e['time/generate'] / (flops / peak):.0f}x | {e['prompt_tokens']} prompt "
                f"tokens (each prompt once; x {e['n']} = {e['n'] * e['prompt_tokens']}) + "
                f"{e['gen_tokens']} generated |",
                f"| reward (sandbox) | {e['time/reward']:.2f} | {e['own']['cpu']:.3f} | "
                f"{e['time/reward'] / max(e['own']['cpu'], 1e-3):.0f}x | {e['jobs']} jobs, "
                f"{e['distinct']} distinct, {e['own']['tests']} tests in-process; the sandbox "
                f"ran {e['past']['ran']}, {e['past']['after']} of them after a job's first "
                f"failure ({past_by_verdict(e['past'])}) |"]
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="GRPO steps measured (the first is "
                                                        "left out of the means)")
    p.add_argument("--eval-problems", type=int, default=300,
                   help="tasks:eval problems of the evaluation measured (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="/tmp/step-floor-run", help="the run's scratch folder")
    p.add_argument("--json", help="also write the raw figures here")
    a = p.parse_args(argv)
    m = measure(a)
    print(report(m, a))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({k: v for k, v in m.items() if k != "config"}, f, indent=1, default=str)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                            capture_output=True).stdout.strip()
    print(f"\nmachine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"load {os.getloadavg()[0]:.2f}; commit {commit}")
    os._exit(0)   # the engine's teardown is not what is measured


if __name__ == "__main__":
    main()
