"""Which of a problem's tests RL's reward runs (--max-train-tests N, --train-tests).

A benchmark ships a few tests a problem for training (APPS+: 3) and keeps the rest for judging.
Which few matters to StepCoder: FGO masks the code they leave unrun, and a CCCS stage whose new
code they never run is a stage the reward cannot check. rollouts.train_view keeps a problem's
first N tests; the order here decides which N those are:

  first  as stored. world/tasks.py stores the base world's so that a first few run as little of
         the reference as an example set does (few_tests_first: the first 3 run two paths)
  drawn  a shuffle seeded by the problem's id alone (the same in every run, seed and arm): the
         first N are N tests drawn at random, not chosen for what they run, as APPS+ ships them

sources.load_problem_sets orders every problem, train and eval alike, so the reward's N tests,
the false passes' other tests and the evaluation's train-style pass@1 read one order; a verdict
on every test does not depend on it.
"""
from __future__ import annotations

import random
from dataclasses import replace

CHOICES = ("first", "drawn")


def train_test_order(problem, choice: str) -> list[int]:
    """Indices of the problem's tests in the order `choice` gives them (module docstring).

    >>> from data import Problem
    >>> p = Problem("a", "tasks", "", "", None, [{}] * 6, [], "easy")
    >>> train_test_order(p, "first"), sorted(train_test_order(p, "drawn"))
    ([0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5])
    """
    if choice not in CHOICES:
        raise ValueError(f"train test choice must be one of {CHOICES}, got {choice!r}")
    order = list(range(len(problem.tests)))
    if choice == "drawn":
        random.Random(f"train-tests:{problem.id}").shuffle(order)
    return order


def with_train_tests(problem, choice: str):
    """The problem with its tests in train_test_order (the problem itself under "first")."""
    if choice == "first":
        return problem
    return replace(problem, tests=[problem.tests[i] for i in train_test_order(problem, choice)])
