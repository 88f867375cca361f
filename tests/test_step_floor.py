"""bench/step_floor.py's counting: the model's matmul parameters and the tests a judge that
stops at the first failure would skip."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import step_floor  # noqa: E402

import sandbox  # noqa: E402
from infra import model  # noqa: E402


def test_matmul_params_of_the_shipped_base_by_hand():
    """3 layers of hidden 192, 2 KV heads of 48, MLP 512, vocabulary 1,024:
    a layer: q, o 192 x 192 each; k, v 192 x 96 each; gate, up, down 192 x 512 each."""
    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(model.BASE_DIR)
    layer = 2 * 192 * 192 + 2 * 192 * 96 + 3 * 192 * 512
    assert step_floor.matmul_params(config) == 3 * layer + 1024 * 192 == 1_413_120
    # forward: 2 FLOPs a parameter, plus attention over a 100-token context in 3 layers
    assert step_floor.forward_flops(config, 10, 100) == 10 * (2 * 1_413_120 + 4 * 3 * 192 * 100)


def _result(*statuses, not_run=0):
    tests = [sandbox.TestResult(s, 0.0) for s in statuses] + \
        [sandbox.TestResult("timeout", 0.0, "", "not run: an earlier test timed out")] * not_run
    failed = [s for s in statuses if s != "pass"]
    return sandbox.Result(failed[0] if failed else "pass", len(statuses) - len(failed), len(tests),
                  tests, set(), 0.0)


def test_tests_past_the_first_failure_over_distinct_jobs():
    """pass, wrong, pass, wrong: 2 tests after the first failure; a runtime error first: 2;
    a timeout then 2 tests not run: 0 (not run counts nowhere); all pass: 0. The copy of the
    first job counts once."""
    jobs = [dict(code=f"p{i}", tests=[]) for i in range(4)]
    results = [_result("pass", "wrong_answer", "pass", "wrong_answer"),
               _result("runtime_error", "pass", "runtime_error"),
               _result("pass", "timeout", not_run=2), _result("pass", "pass")]
    got = step_floor.tests_past_first_failure(jobs + jobs[:1], results + results[:1])
    assert got == {"ran": 4 + 3 + 2 + 2, "after": 4, "after_wrong_answer": 2,
                   "after_runtime_error": 2}
    assert step_floor.past_by_verdict(got, per=2) == "1 after runtime_error, 1 after wrong_answer"


def test_the_floor_runs_only_the_tests_the_sandbox_ran():
    """A job stopped at its first failure (the second test) ran two of its four tests: the
    floor's harness gets those two; without a result, all four."""
    job = dict(code="p", tests=[{"input": str(i), "output": ""} for i in range(4)])
    stopped = _result("pass", "wrong_answer")
    stopped.tests += [sandbox.TestResult("not_run", 0.0, "", "not run: an earlier test failed")] * 2
    assert step_floor.ran_tests(job, stopped) == job["tests"][:2]
    assert step_floor.ran_tests(job, None) == job["tests"]
    assert step_floor.past_by_verdict({"ran": 2, "after": 0}) == "none"
