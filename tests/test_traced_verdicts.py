"""bench/traced_verdicts.py: the judge as it was (each test's only run traced, at the limit)
emulated beside the judge as it is (the verdict from an untraced run), on the same jobs; and
bench/preconditions.py's reading of coverage, which may be unknown."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import preconditions  # noqa: E402
import traced_verdicts  # noqa: E402

import sandbox  # noqa: E402
from data import Problem  # noqa: E402

# Sees the tracer: its output is the verdict's only difference between the two judges.
SEES_THE_TRACER = "import sys\nprint('traced' if sys.gettrace() else 'plain')\n"
PLAIN = "n = int(input())\nprint(n * 2)\n"


def test_the_old_judges_verdict_comes_from_a_traced_run_and_the_new_ones_does_not():
    """A program that prints whether a tracer is installed: the new judge's verdict run has
    none (pass), the old judge's only run had one (wrong_answer). An ordinary program gets one
    verdict both ways, and the comparison counts the one that changed."""
    jobs = [dict(code=SEES_THE_TRACER, tests=[{"input": "", "output": "plain\n"}], timeout=4.0),
            dict(code=PLAIN, tests=[{"input": "3\n", "output": "6\n"},
                                    {"input": "4\n", "output": "9\n"}], timeout=4.0)]
    old, new = traced_verdicts.judge_both(jobs, workers=1)
    assert [r.status for r in new] == ["pass", "wrong_answer"]
    assert [r.status for r in old] == ["wrong_answer", "wrong_answer"]
    assert new[0].executed_lines is None        # its traced run printed otherwise: unknown
    assert new[1].executed_lines == {1, 2}
    figures = traced_verdicts.compare(old, new, limit=4.0)
    assert figures["verdict_changed"] == 1 and figures["verdict_changed_share"] == 0.5
    assert figures["transitions (new -> old)"] == {"pass -> wrong_answer": 1}
    assert figures["binary_reward_changed"] == 1 and figures["stepcoder_reward_changed"] == 1
    # outside the context the workers are the sandbox's own again
    assert sandbox.run_batch(jobs[:1], workers=1)[0].status == "pass"


def test_reference_coverage_leaves_out_a_reference_of_unknown_coverage(monkeypatch):
    """executed_lines None (unknown) is counted and left out, not read as a set."""
    problems = [Problem(f"p{i}", "tasks", "q", "", None, [{"input": "", "output": ""}] * 3,
                        ["print()"], "easy", {"family": "f"}) for i in range(2)]

    def run_batch(jobs, workers=None):
        lines = [{1, 2}, {1, 2, 3, 4}, None, {1}]
        return [sandbox.Result("pass", 1, 1, [], x, 0.0) for x in lines]
    monkeypatch.setattr(sandbox, "run_batch", run_batch)
    assert preconditions.reference_coverage(problems, 1, None) == ({"p0": 0.5}, 1)
