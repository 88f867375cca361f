"""world/train_tests.py: which N tests the reward runs, and what they run of each CCCS stage."""
import os
import sys

import pytest

import cccs
import losses
import trainer
from data import Problem
from infra import flags
from world import sources, tasks
from world.train_tests import train_test_order, with_train_tests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import grids  # noqa: E402
import stepcoder_gates  # noqa: E402


def _problem(pid, n):
    return Problem(pid, "test", "q", "", None, [{"input": f"{i}\n", "output": f"{i}\n"}
                                                 for i in range(n)], [], "easy")


def test_drawn_order_is_a_permutation_fixed_by_the_problem_id():
    """The same problem gets the same order in every call (runs, seeds and arms agree); two
    problems get different ones; "first" keeps the stored order and the object itself."""
    a, b = _problem("a", 8), _problem("b", 8)
    order = train_test_order(a, "drawn")
    assert sorted(order) == list(range(8)) and order != list(range(8))
    assert train_test_order(_problem("a", 8), "drawn") == order
    assert train_test_order(b, "drawn") != order
    assert train_test_order(a, "first") == list(range(8)) and with_train_tests(a, "first") is a
    drawn = with_train_tests(a, "drawn")
    assert drawn.tests == [a.tests[i] for i in order] and a.tests[0]["input"] == "0\n"  # a copy
    with pytest.raises(ValueError, match="first"):
        train_test_order(a, "best")


def test_load_problem_sets_orders_train_and_eval_tests_alike():
    """--train-tests drawn reaches every problem the trainers load, train and eval: the
    reward's first N, the false passes' rest and the train-style evaluation read one order."""
    def sets(*argv):
        p = flags.new_parser("t", "t")
        flags.add_common_flags(p, "ppo", aggregations=losses.AGGREGATIONS)
        return trainer.load_problem_sets(p.parse_args(["--train-data", "tasks:rl@tiers",
                                                       "--eval-data", "tasks:eval@tiers",
                                                       "--max-problems", "4", *argv]))
    (train, evals), (dtrain, devals) = sets(), sets("--train-tests", "drawn")
    for old, new in zip(train + evals, dtrain + devals):
        assert new.tests == [old.tests[i] for i in train_test_order(old, "drawn")]
        assert new.tests != old.tests


def _pool():
    """The claims grid's CCCS pool, as its --train-data and --max-problems cut it."""
    spec = grids.STEPCODER[grids.STEPCODER.index("--train-data") + 1]
    n = int(grids.STEPCODER[grids.STEPCODER.index("--max-problems") + 1])
    name, _, path = spec.partition(":")
    return sources.load_problems(name, split="train", path=path)[:n]


def _stage_shares(problem, choice, rungs, n_tests=3):
    code = problem.solutions[0]
    executed = set().union(*(tasks.reference_lines(code, problem.tests[i], problem.fn_name)
                             for i in train_test_order(problem, choice)[:n_tests]))
    starts = cccs.stage_starts(code, rungs=rungs)
    # the stages below the whole program
    return stepcoder_gates.new_code_shares(code, starts, executed)[:-1]


@pytest.mark.parametrize("rungs", cccs.RUNGS)
def test_drawn_train_tests_run_every_cccs_stages_new_code_on_the_shipped_pool(rungs):
    """On the claims grid's CCCS pool (25 problems of the five branchy families), the 3 drawn
    train tests run some of every stage's new code, for both ladders: no stage is one the
    reward cannot check. The stored order's first 3 (few_tests_first: two paths) leave the
    first stage unrun in tiers and piecewise problems."""
    pool = _pool()
    assert len(pool) == 25 and {p.metadata["family"] for p in pool} == set(
        grids.STEPCODER_FAMILIES.split("+"))
    drawn = {p.id: _stage_shares(p, "drawn", rungs) for p in pool}
    unrun = [(pid, j) for pid, shares in drawn.items() for j, s in enumerate(shares) if s == 0]
    assert unrun == []
    assert all(s is not None for shares in drawn.values() for s in shares)
    first = {p.id: _stage_shares(p, "first", rungs) for p in pool}
    unrun_first = {pid.split("/")[1] for pid, shares in first.items() if shares[0] == 0}
    assert {"tiers", "piecewise"} <= unrun_first


def test_the_claims_grid_gives_each_pool_problem_the_draws_its_ladder_needs():
    """bench/grids.py's StepCoder cells draw every pool problem at least span x its stages +
    10 times (chain_long's rungs of one conditional: up to 6 x 2 + 10 = 22), the train
    tests drawn, not the stored order."""
    budget = stepcoder_gates.ladder_budget(_pool(), grids.STEPCODER_CELL)
    assert budget["chain_long"]["stages"] >= 4 and budget["chain_long"]["need"] >= 18
    assert all(b["ok"] for b in budget.values()), budget
    assert grids.STEPCODER[grids.STEPCODER.index("--train-tests") + 1] == "drawn"
