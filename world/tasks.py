"""Problem sets of our own: seeded procedural families and the hand-written built-in set.

Both are data. world/sources.py turns the rows made here (dicts with data.Problem's fields) into
Problems: load_problems("tasks", split="train"|"test"|"heldout"|"train_sample") and
load_problems("builtin"); on the command line `--train-data tasks:train --eval-data tasks:test`.

Procedural families
-------------------
A family is a template with parameters (constants, thresholds, words, operations). An
instance draws them from a seeded random.Random and gets
    question    the statement, naming every parameter the program needs
    solutions   [reference], short enough for a tiny model (1-16 lines)
    tests       >= 6, inputs chosen so that every branch of the reference runs (a value in
                each if/elif/else interval, each command letter, ...); the expected outputs
                come from a separate Python function of the parameters, not from running
                the reference, so "the reference passes its tests" is a real check
    metadata    family, io ("stdio" | "call"), params, and the difficulty as numbers:
                branches (if/elif conditions), loops, steps (operations: BinOp, AugAssign,
                Compare, Call, Subscript nodes), lines (of the reference), and
                score = lines + 2 * branches + 2 * loops + steps
    difficulty  a label from the score, for filters: easy < 8 <= medium < 16 <= hard

Families (SPLIT_FAMILIES give train and test; HELDOUT_FAMILIES only the heldout split)
    arith       (n + 3) * 5 - 2                      1-3 operations, no branch
    strings     replace, reverse, upper, slice, ...  1-2 string operations chained
    aggregate   sum / count / max of a filtered list a comprehension with a filter
    classify    if / elif ... / else on thresholds   1-6 conditions (2-7 bodies)
    accumulate  for i in 1..n: update total          a loop, 0-1 if/else inside
    simulate    for c in s: if c == 'A': ... elif    a loop over commands, 2-5 conditions
  held out (never in SFT or RL: what transfers to a new composition or construct)
    piecewise   classify whose bodies compute arithmetic on x   1-4 conditions
    digits      while n > 0: d = n % 10 ...                     a while loop, 0-1 condition
  RL only (the base world's rl and eval splits, never its corpus)
    arith_long  ((n - 17) % 2) // 2 + 7 - 6                     4-5 operations
  length (only the length_train / length_test splits: a testbed of their own)
    chain_short if x > 12: x -= 5 / if x % 3 == 0: ...  1-3 guarded steps in sequence
    chain_long  the same pattern                        4-6 guarded steps
Long, branchy references (classify, simulate, piecewise) are what CCCS splits at
(cccs.split_points) and what FGO masks; the score's spread gives DRIVE's hard focus a tail.
The tiny model copies a statement's numbers but not its words (classify's labels), so in
classify and simulate a CCCS subtask is as hard as the whole program. The chain families
are built for CCCS's claim instead: every step is one small numeric pattern, so a policy
that writes one to three steps (SFT on chain_short) can complete a chain_long reference from
its last steps, while the whole of it may be out of its reach; they are drawn from a
Random of their own, so the other splits are what they were before.

Split: the split of an instance is fixed by a hash of its family and parameters (not of its
io kind): sha256 % 100 < TEST_PERCENT -> test, else train. So no test instance shares its
parameters with a train instance, for every seed. Duplicates (same statement, or same
reference after ast.unparse) are skipped across all splits. generate(seed) draws each
family's instances until its quotas (COUNTS) are met; each split's list interleaves the
families, so any prefix is a mix. Deterministic: the same seed gives the same rows.
"""
from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import random
import re
import sys
from dataclasses import dataclass
from functools import lru_cache, wraps

SPLIT_FAMILIES = ("arith", "strings", "aggregate", "classify", "accumulate", "simulate")
HELDOUT_FAMILIES = ("piecewise", "digits")
COUNTS = {"train": 160, "test": 16, "heldout": 16}   # instances per family and split
TEST_PERCENT = 25
LENGTH_FAMILIES = ("chain_short", "chain_long")
LENGTH_COUNTS = {"train": 160, "test": 32}
LENGTH_SPLITS = ("length_train", "length_test")
# The base world (generate_base): the shipped base model's corpus, RL's problems, held-out eval.
# Each family is there for a method's precondition (generate_base's docstring):
#   CORPUS_FAMILIES  whole programs in the corpus; the branchy ones (BRANCHY_FAMILIES: 1-5
#                    conditionals) give FGO code that a few tests leave unexecuted
#   CCCS_FAMILY      chain_long (4-6 guarded steps): the corpus holds only completions of its
#                    last step (CCCS's easiest stage), never a whole program, so writing it
#                    whole is rare for the base and finishing it is not: exploration is the
#                    bottleneck, which is what CCCS's curriculum acts on
#   RL_ONLY_FAMILY   arith with 4-5 operations where the corpus has 1-3: never in the corpus,
#                    solved rarely (pass@8 > 0): what RL alone must teach
CORPUS_FAMILIES = ("arith", "strings", "aggregate", "accumulate", "simulate", "tiers",
                   "piecewise", "chain_short")
BRANCHY_FAMILIES = ("simulate", "tiers", "piecewise", "chain_short", "chain_long")
CCCS_FAMILY = "chain_long"
RL_ONLY_FAMILY = "arith_long"
BASE_FAMILIES = CORPUS_FAMILIES + (CCCS_FAMILY, RL_ONLY_FAMILY)
BASE_SPLITS = ("corpus", "rl", "eval")
BASE_COUNTS = {"corpus": 3000, "rl": 400, "eval": 160}   # at most, per family
# Fewer for the two families the base rarely solves, so that they do not fill the hard
# quarter of the eval split alone (DRIVE's tail is the hardest quarter of all problems);
# the CCCS family's corpus instances only give last-step completions.
BASE_COUNT_OVERRIDES = {CCCS_FAMILY: {"corpus": 1000, "eval": 80},
                        RL_ONLY_FAMILY: {"corpus": 0, "eval": 80}}
SPLITS = ("train", "test", "heldout", "train_sample") + LENGTH_SPLITS + BASE_SPLITS
MIN_TESTS = 6
WORDS = ("low mid high cold warm hot tiny small big huge red blue green gold iron wood "
         "few many ok bad good fast slow odd north south").split()


@dataclass
class Draft:
    """One instance before it gets an id and a split."""
    family: str
    io: str                 # "stdio" | "call"
    params: dict            # what the split hash sees: the family's parameters, no io
    question: str
    solution: str
    tests: list


# ----------------------------------------------------------------------------- rendering

def render(io: str, fn_name: str, arg: str, read: str, body: list[str]) -> str:
    """A reference from body lines in which `@expr` means "the answer is expr".

    stdio: `read` (e.g. "n = int(input())"), then the body with @expr -> print(expr);
    call:  def fn_name(arg):, then the body indented, @expr -> return expr.
    """
    def emit(line: str, call: bool) -> str:
        m = re.match(r"(\s*)@(.*)$", line)
        if not m:
            return line
        return f"{m.group(1)}return {m.group(2)}" if call else f"{m.group(1)}print({m.group(2)})"
    if io == "stdio":
        return "\n".join([read] + [emit(ln, False) for ln in body])
    return "\n".join([f"def {fn_name}({arg}):"] + ["    " + emit(ln, True) for ln in body])


def make_tests(io: str, inputs: list, answer, show_input=str) -> list[dict]:
    """stdio: {"input": show_input(v) + "\\n", "output": f"{answer(v)}\\n"}; call: one argument."""
    if io == "stdio":
        return [{"input": show_input(v) + "\n", "output": f"{answer(v)}\n"} for v in inputs]
    return [{"input": [v], "output": answer(v)} for v in inputs]


def _io(rng: random.Random) -> str:
    return rng.choice(("stdio", "call"))


def _fill(rng: random.Random, inputs: list, draw, n: int = MIN_TESTS) -> list:
    """Pad the branch-covering inputs with random ones up to n, without repeats."""
    out = list(dict.fromkeys(inputs))
    for _ in range(100):
        if len(out) >= n:
            break
        v = draw()
        if v not in out:
            out.append(v)
    return out


# ----------------------------------------------------------------------------- families

ARITH_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
             "//": lambda a, b: a // b, "%": lambda a, b: a % b}


def _arith_ops(rng: random.Random, lo: int = 1, hi: int = 3) -> list[tuple[str, int]]:
    """lo-hi (operator, constant) pairs, applied left to right."""
    ops = []
    for _ in range(rng.randint(lo, hi)):
        op = rng.choice(list(ARITH_OPS))
        ops.append((op, rng.randint(1, 20) if op in "+-" else rng.randint(2, 9)))
    return ops


def _arith_expr(ops: list[tuple[str, int]], var: str) -> str:
    """The expression of `ops` on `var`, parenthesised where Python's precedence needs it."""
    expr = var
    for op, c in ops:
        expr = f"({expr}) {op} {c}" if op not in "+-" and expr != var else f"{expr} {op} {c}"
    return expr


def _apply_ops(ops: list[tuple[str, int]], n: int) -> int:
    for op, c in ops:
        n = ARITH_OPS[op](n, c)
    return n


def arith(rng: random.Random, family: str = "arith", lo: int = 1, hi: int = 3) -> Draft:
    """(n + 3) * 5 - 2: 1-3 integer operations applied left to right (arith_long: 4-5)."""
    ops = _arith_ops(rng, lo, hi)
    expr = _arith_expr(ops, "n")

    def answer(n):
        return _apply_ops(ops, n)
    io = _io(rng)
    q = (f"Read an integer n and print the value of {expr}." if io == "stdio" else
         f"Return the value of {expr} for the integer n.")
    code = render(io, "compute", "n", "n = int(input())", [f"@{expr}"])
    inputs = _fill(rng, [0, rng.randint(1, 9)], lambda: rng.randint(0, 60))
    return Draft(family, io, {"ops": ops}, q, code, make_tests(io, inputs, answer))


STRING_OPS = {  # name -> (parameters, phrase, code suffix, python function of (s, params))
    "upper": ((), "turn it into upper case", ".upper()", lambda s, p: s.upper()),
    "reverse": ((), "reverse it", "[::-1]", lambda s, p: s[::-1]),
    "replace": (("c", "d"), "replace every '{c}' with '{d}'", ".replace('{c}', '{d}')",
                lambda s, p: s.replace(p["c"], p["d"])),
    "remove": (("c",), "remove every '{c}'", ".replace('{c}', '')",
               lambda s, p: s.replace(p["c"], "")),
    "first": (("k",), "keep its first {k} characters", "[:{k}]", lambda s, p: s[:p["k"]]),
    "last": (("k",), "keep its last {k} characters", "[-{k}:]", lambda s, p: s[-p["k"]:]),
    "repeat": (("k",), "repeat it {k} times", " * {k}", lambda s, p: s * p["k"]),
}
LETTERS = "abcdexyz"


def strings(rng: random.Random) -> Draft:
    """s.replace('a', 'e')[::-1]: 1-2 string operations applied in order."""
    steps = []
    for name in rng.sample(sorted(STRING_OPS), rng.randint(1, 2)):
        c, d = rng.sample(LETTERS, 2)
        drawn = {"c": c, "d": d, "k": rng.randint(2, 4)}
        steps.append((name, {key: drawn[key] for key in STRING_OPS[name][0]}))
    expr, phrases = "s", []
    for name, p in steps:
        _, phrase, suffix, _ = STRING_OPS[name]
        if expr.endswith(tuple("0123456789")) and not suffix.startswith(" "):
            expr = f"({expr})"          # s * 3 must be bracketed before [::-1] or .upper()
        expr += suffix.format(**p)
        phrases.append(phrase.format(**p))
    used = {p["c"] for name, p in steps if name in ("replace", "remove")}

    def answer(s):
        for name, p in steps:
            s = STRING_OPS[name][3](s, p)
        return s

    def word():
        w = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 8)))
        return w if answer(w) else word()
    inputs = _fill(rng, [word() + c for c in sorted(used)], word)
    io = _io(rng)
    todo = ", then ".join(phrases)
    q = (f"Read a word, {todo}, and print the result." if io == "stdio" else
         f"Take the string s, {todo}, and return the result.")
    code = render(io, "transform", "s", "s = input()", [f"@{expr}"])
    return Draft("strings", io, {"steps": steps}, q, code, make_tests(io, inputs, answer))


AGGREGATES = {  # name -> (phrase, expression over xs, python function of (xs, k))
    "sum_gt": ("the sum of {nums} greater than {k}", "sum(x for x in xs if x > {k})",
               lambda xs, k: sum(x for x in xs if x > k)),
    "count_lt": ("how many of {nums} are less than {k}", "len([x for x in xs if x < {k}])",
                 lambda xs, k: len([x for x in xs if x < k])),
    "count_div": ("how many of {nums} are divisible by {k}",
                  "len([x for x in xs if x % {k} == 0])",
                  lambda xs, k: len([x for x in xs if x % k == 0])),
    "max_times": ("the largest of {nums} times {k}", "max(xs) * {k}", lambda xs, k: max(xs) * k),
    "min_plus": ("the smallest of {nums} plus {k}", "min(xs) + {k}", lambda xs, k: min(xs) + k),
    "sum_times": ("the sum of {nums}, each multiplied by {k}", "sum(x * {k} for x in xs)",
                  lambda xs, k: sum(x * k for x in xs)),
}


def aggregate(rng: random.Random) -> Draft:
    """sum(x for x in xs if x > 5): one aggregate of a list of integers, with a parameter."""
    name = rng.choice(sorted(AGGREGATES))
    scale = name in ("count_div", "max_times", "sum_times")
    k = rng.randint(2, 12) if scale else rng.randint(-5, 40)
    phrase, expr, fn = AGGREGATES[name]

    def draw():
        return tuple(rng.randint(-9, 45) for _ in range(rng.randint(1, 7)))
    inputs = _fill(rng, [draw(), draw(), (k + 1, k - 1, 2 * k)], draw)
    io = _io(rng)
    q = (f"Read a line of integers and print {phrase.format(k=k, nums='the numbers')}."
         if io == "stdio" else f"Return {phrase.format(k=k, nums='the numbers in the list xs')}.")
    code = render(io, "aggregate", "xs", "xs = list(map(int, input().split()))",
                  [f"@{expr.format(k=k)}"])
    tests = (make_tests(io, inputs, lambda xs: fn(xs, k), lambda xs: " ".join(map(str, xs)))
             if io == "stdio" else [{"input": [list(xs)], "output": fn(xs, k)} for xs in inputs])
    return Draft("aggregate", io, {"name": name, "k": k}, q, code, tests)


def _thresholds(rng: random.Random, n: int) -> list[int]:
    return sorted(rng.sample(range(-10, 100), n))


def _interval_inputs(rng: random.Random, cuts: list[int]) -> list[int]:
    """One value inside each of the len(cuts) + 1 intervals of `x < cut`, then the cuts."""
    inside = [cuts[0] - rng.randint(1, 10)]
    inside += [rng.randint(a, b - 1) for a, b in zip(cuts, cuts[1:])]
    inside.append(cuts[-1] + rng.randint(0, 10))
    return inside + cuts


def _chain(cuts: list[int], bodies: list[str]) -> list[str]:
    """if x < c1: body1 / elif x < c2: ... / else: last body, as body lines (`@` = answer)."""
    lines = []
    for i, (c, b) in enumerate(zip(cuts, bodies)):
        lines += [f"{'if' if i == 0 else 'elif'} x < {c}:", f"    @{b}"]
    return lines + ["else:", f"    @{bodies[-1]}"]


def _rule_statement(io: str, cuts: list[int], answers: list[str]) -> str:
    """The chain in the order the code has it: "If x < 4 print 'a', else if x < 9 print 'b',
    otherwise print 'c'." (the constants and words appear as the program writes them)."""
    verb = "print" if io == "stdio" else "return"
    first = "If" if io == "stdio" else "if"
    rule = ", ".join(f"{first if i == 0 else 'else if'} x < {c} {verb} {a}"
                     for i, (c, a) in enumerate(zip(cuts, answers)))
    rule += f", otherwise {verb} {answers[-1]}."
    return f"Read an integer x. {rule}" if io == "stdio" else f"For the integer x: {rule}"


def _first_interval(cuts: list[int], x: int) -> int:
    return next((i for i, c in enumerate(cuts) if x < c), len(cuts))


def classify(rng: random.Random) -> Draft:
    """if x < 10: 'low' / elif x < 25: 'mid' / else: 'high': 1-6 thresholds, 2-7 labels."""
    k = rng.randint(1, 6)
    cuts, labels = _thresholds(rng, k), rng.sample(WORDS, k + 1)
    io = _io(rng)
    q = _rule_statement(io, cuts, [f"'{w}'" for w in labels])
    code = render(io, "classify", "x", "x = int(input())", _chain(cuts, [f"'{w}'" for w in labels]))
    inputs = _fill(rng, _interval_inputs(rng, cuts), lambda: rng.randint(-20, 110))
    tests = make_tests(io, inputs, lambda x: labels[_first_interval(cuts, x)])
    return Draft("classify", io, {"cuts": cuts, "labels": labels}, q, code, tests)


def tiers(rng: random.Random) -> Draft:
    """if x < 12: 4 / elif x < 40: 9 / else: 1: 2-4 thresholds, numbers as the answers.

    classify with numbers where classify has words: a small model copies a statement's
    numbers, so the branches, not the labels, are what it has to get right."""
    k = rng.randint(2, 4)
    cuts, values = _thresholds(rng, k), rng.sample(range(100), k + 1)
    io = _io(rng)
    q = _rule_statement(io, cuts, [str(v) for v in values])
    code = render(io, "tiers", "x", "x = int(input())", _chain(cuts, [str(v) for v in values]))
    inputs = _fill(rng, _interval_inputs(rng, cuts), lambda: rng.randint(-20, 110))
    tests = make_tests(io, inputs, lambda x: values[_first_interval(cuts, x)])
    return Draft("tiers", io, {"cuts": cuts, "values": values}, q, code, tests)


ARITH_BODIES = {  # name -> (code with x and {c}, python function)
    "times": ("x * {c}", lambda x, c: x * c), "plus": ("x + {c}", lambda x, c: x + c),
    "minus": ("x - {c}", lambda x, c: x - c), "square": ("x * x", lambda x, c: x * x),
    "neg": ("-x", lambda x, c: -x), "half": ("x // {c}", lambda x, c: x // c),
}


def piecewise(rng: random.Random) -> Draft:
    """Held out: classify whose bodies compute x * 2, x + 5, ... instead of naming a label."""
    k = rng.randint(1, 4)
    cuts = _thresholds(rng, k)
    bodies = [(name, rng.randint(2, 9)) for name in rng.sample(sorted(ARITH_BODIES), k + 1)]
    exprs = [ARITH_BODIES[n][0].format(c=c) for n, c in bodies]
    io = _io(rng)
    q = _rule_statement(io, cuts, exprs)
    code = render(io, "piecewise", "x", "x = int(input())", _chain(cuts, exprs))

    def answer(x):
        name, c = bodies[_first_interval(cuts, x)]
        return ARITH_BODIES[name][1](x, c)
    inputs = _fill(rng, _interval_inputs(rng, cuts), lambda: rng.randint(-20, 110))
    return Draft("piecewise", io, {"cuts": cuts, "bodies": bodies}, q, code,
                 make_tests(io, inputs, answer))


UPDATES = {  # name -> (phrase, statement, python function of (total, i, c))
    "add_i": ("add i", "total += i", lambda t, i, c: t + i),
    "sub_i": ("subtract i", "total -= i", lambda t, i, c: t - i),
    "add_c": ("add {c}", "total += {c}", lambda t, i, c: t + c),
    "sub_c": ("subtract {c}", "total -= {c}", lambda t, i, c: t - c),
    "add_ic": ("add i * {c}", "total += i * {c}", lambda t, i, c: t + i * c),
}
CONDITIONS = {  # name -> (phrase, code, python predicate of (i, k))
    "div": ("i is divisible by {k}", "i % {k} == 0", lambda i, k: i % k == 0),
    "gt": ("i is greater than {k}", "i > {k}", lambda i, k: i > k),
}


def accumulate(rng: random.Random) -> Draft:
    """total = 3; for i in range(1, n + 1): [if i % 4 == 0:] total += i * 2 [else: ...]."""
    start, k = rng.randint(0, 9), rng.randint(2, 5)
    cond = rng.choice([None, "div", "gt"])
    ups = [(u, rng.randint(1, 9)) for u in rng.sample(sorted(UPDATES), 2 if cond else 1)]
    phrase = [UPDATES[u][0].format(c=c) for u, c in ups]
    stmt = [UPDATES[u][1].format(c=c) for u, c in ups]
    loop = ["for i in range(1, n + 1):"]
    if cond:
        cp, cc, _ = CONDITIONS[cond]
        loop += [f"    if {cc.format(k=k)}:", f"        {stmt[0]}",
                 "    else:", f"        {stmt[1]}"]
        rule = f"{phrase[0]} to the total if {cp.format(k=k)}, otherwise {phrase[1]}"
    else:
        loop += [f"    {stmt[0]}"]
        rule = f"{phrase[0]} to the total"
    rule = rule.replace("subtract i to the total", "subtract i from the total")
    rule = re.sub(r"subtract (\d+) to the total", r"subtract \1 from the total", rule)

    def answer(n):
        total = start
        for i in range(1, n + 1):
            pick = 0 if cond is None or CONDITIONS[cond][2](i, k) else 1
            total = UPDATES[ups[pick][0]][2](total, i, ups[pick][1])
        return total
    io = _io(rng)
    q = (f"Read an integer n. Start with a total of {start}; for every i from 1 to n, {rule}. "
         + ("Print the total." if io == "stdio" else "Return the total."))
    code = render(io, "accumulate", "n", "n = int(input())",
                  [f"total = {start}"] + loop + ["@total"])
    inputs = _fill(rng, [0, k, k + 3], lambda: rng.randint(1, 15))
    params = {"start": start, "ups": ups, "cond": cond, "k": k if cond else None}
    return Draft("accumulate", io, params, q, code, make_tests(io, inputs, answer))


COMMANDS = {  # name -> (phrase, statement, python function of (x, c))
    "add": ("adds {c}", "x += {c}", lambda x, c: x + c),
    "sub": ("subtracts {c}", "x -= {c}", lambda x, c: x - c),
    "mul": ("multiplies it by {c}", "x *= {c}", lambda x, c: x * c),
    "set": ("sets it to {c}", "x = {c}", lambda x, c: c),
}


def simulate(rng: random.Random) -> Draft:
    """x = 2; for c in s: if c == 'A': x += 3 / elif c == 'B': ...: 2-5 command letters."""
    k = rng.randint(2, 5)
    letters = sorted(rng.sample("ABCDLRUX", k))
    names = [rng.choice(sorted(COMMANDS)) for _ in letters]
    cmds = [(n, rng.randint(2, 3) if n == "mul" else rng.randint(1, 9)) for n in names]
    start = rng.randint(0, 5)
    body = [f"x = {start}", "for c in s:"]
    for j, (ch, (name, c)) in enumerate(zip(letters, cmds)):
        body += [f"    {'if' if j == 0 else 'elif'} c == '{ch}':",
                 f"        {COMMANDS[name][1].format(c=c)}"]
    body.append("@x")

    def answer(s):
        x = start
        for ch in s:
            name, c = cmds[letters.index(ch)]
            x = COMMANDS[name][2](x, c)
        return x

    def draw():
        return "".join(rng.choice(letters) for _ in range(rng.randint(1, 8)))
    inputs = _fill(rng, ["".join(rng.sample(letters, k))] + list(letters[:2]), draw)
    io = _io(rng)
    rules = ", ".join(f"'{ch}' {COMMANDS[n][0].format(c=c)}" for ch, (n, c) in zip(letters, cmds))
    src = "Read a string of the letters " if io == "stdio" else "The string s holds the letters "
    q = (f"A counter starts at {start}. {src}{', '.join(letters)}; apply each in order: "
         f"{rules}. " + ("Print" if io == "stdio" else "Return") + " the final value.")
    code = render(io, "simulate", "s", "s = input()", body)
    return Draft("simulate", io, {"start": start, "letters": letters, "cmds": cmds}, q, code,
                 make_tests(io, inputs, answer))


def digits(rng: random.Random) -> Draft:
    """Held out: while n > 0: d = n % 10; [if d > 4:] total += d * 2 [else: ...]; n //= 10."""
    c, k = rng.randint(2, 5), rng.randint(2, 7)
    cond = rng.choice([None, "gt", "even"])
    loop = ["total = 0", "while n > 0:", "    d = n % 10"]
    if cond:
        test, said = (f"d > {k}", f"d > {k}") if cond == "gt" else ("d % 2 == 0", "d is even")
        loop += [f"    if {test}:", f"        total += d * {c}", "    else:", "        total += 1"]
        rule = f"add d * {c} to the total if {said}, otherwise add 1"
    else:
        loop += [f"    total += d * {c}"]
        rule = f"add d * {c} to the total"
    loop += ["    n //= 10", "@total"]

    def answer(n):
        total = 0
        for d in map(int, str(n) if n else ""):
            hit = cond is None or (d > k if cond == "gt" else d % 2 == 0)
            total += d * c if hit else 1
        return total
    io = _io(rng)
    q = (f"Read a non-negative integer n. Start with a total of 0; for each digit d of n, {rule}. "
         + ("Print" if io == "stdio" else "Return") + " the total (0 when n is 0).")
    code = render(io, "digits", "n", "n = int(input())", loop)
    inputs = _fill(rng, [0, 10 * rng.randint(1, 9) + k + 1, 10 * (k + 1) + 2 * rng.randint(0, 4)],
                   lambda: rng.randint(1, 99999))
    return Draft("digits", io, {"c": c, "k": k, "cond": cond}, q, code,
                 make_tests(io, inputs, answer))


CHAIN_CONDS = {  # name -> (phrase, code, python predicate of (x, t))
    "gt": ("x is greater than {t}", "x > {t}", lambda x, t: x > t),
    "lt": ("x is less than {t}", "x < {t}", lambda x, t: x < t),
    "div": ("x is divisible by {t}", "x % {t} == 0", lambda x, t: x % t == 0),
}
CHAIN_OPS = {  # name -> (phrase, statement, python function of (x, c))
    "add": ("add {c} to x", "x += {c}", lambda x, c: x + c),
    "sub": ("subtract {c} from x", "x -= {c}", lambda x, c: x - c),
    "mul": ("multiply x by {c}", "x *= {c}", lambda x, c: x * c),
}
CHAIN_LENGTHS = {"chain_short": (1, 3), "chain_long": (4, 6)}   # guarded steps an instance
CHAIN_MAX_TESTS = 10


def chain(rng: random.Random, family: str = "chain_long",
          lengths: tuple[int, int] | None = None) -> Draft:
    """x = int(input()); if x > 12: x -= 5; if x % 3 == 0: x *= 2; ...; print(x).

    A length family: every step is the same small pattern (a condition from the statement,
    an update from the statement), so a model that writes one step can write the next;
    what makes chain_long (4-6 steps) hard is only its length. Each step's condition is
    tested on x as the earlier steps left it. The tests make every step both fire and not
    fire (so a program that drops a step or its condition fails), at most 10 tests.
    lengths=(lo, hi) overrides the family's number of steps (bench/probe_length.py).
    """
    lo, hi = lengths or CHAIN_LENGTHS[family]

    def run(steps, x):
        fired = []
        for cond, t, op, c in steps:
            hit = CHAIN_CONDS[cond][2](x, t)
            fired.append(hit)
            x = CHAIN_OPS[op][2](x, c) if hit else x
        return x, fired

    for _ in range(100):      # redraw the few chains whose later steps can never fire
        steps = []
        for _ in range(rng.randint(lo, hi)):
            cond, op = rng.choice(sorted(CHAIN_CONDS)), rng.choice(sorted(CHAIN_OPS))
            t = rng.randint(2, 5) if cond == "div" else rng.randint(-5, 40)
            steps.append((cond, t, op, rng.randint(2, 3) if op == "mul" else rng.randint(1, 9)))
        todo = {(j, b) for j in range(len(steps)) for b in (True, False)}
        inputs = []
        for _ in range(300):   # greedy: keep an input when it fires or skips a step not yet seen
            if not todo or len(inputs) >= CHAIN_MAX_TESTS:
                break
            x = rng.randint(-20, 60)
            seen = set(enumerate(run(steps, x)[1]))
            if x not in inputs and seen & todo:
                inputs.append(x)
                todo -= seen
        if not todo:
            break
    else:
        raise RuntimeError("chain: no covering inputs in 100 draws")
    inputs = _fill(rng, inputs, lambda: rng.randint(-20, 60))
    body = []
    for cond, t, op, c in steps:
        body += [f"if {CHAIN_CONDS[cond][1].format(t=t)}:", f"    {CHAIN_OPS[op][1].format(c=c)}"]
    io = _io(rng)
    rule = "; ".join(f"if {CHAIN_CONDS[cond][0].format(t=t)}, {CHAIN_OPS[op][0].format(c=c)}"
                     for cond, t, op, c in steps)
    q = (f"Read an integer x. Then, in order: {rule}. Print x." if io == "stdio" else
         f"For the integer x, in order: {rule}. Return x.")
    code = render(io, "chain", "x", "x = int(input())", body + ["@x"])
    return Draft(family, io, {"steps": steps}, q, code,
                 make_tests(io, inputs, lambda x: run(steps, x)[0]))


FAMILIES = {"arith": arith, "strings": strings, "aggregate": aggregate, "classify": classify,
            "accumulate": accumulate, "simulate": simulate, "piecewise": piecewise,
            "digits": digits, "tiers": tiers,
            "arith_long": lambda rng: arith(rng, "arith_long", 4, 5),
            "chain_short": lambda rng: chain(rng, "chain_short"),
            "chain_long": lambda rng: chain(rng, "chain_long")}


# ----------------------------------------------------------------------------- difficulty

_STEP_NODES = (ast.BinOp, ast.AugAssign, ast.Compare, ast.Call, ast.Subscript)


def difficulty(code: str) -> dict:
    """Numbers that make a program long or hard to get right for a small model.

    >>> difficulty("x = int(input())\\nif x < 3:\\n    print('a')\\nelse:\\n    print('b')")
    {'branches': 1, 'loops': 0, 'steps': 5, 'lines': 5, 'score': 12}
    """
    nodes = list(ast.walk(ast.parse(code)))
    d = {"branches": sum(isinstance(n, ast.If) for n in nodes),
         "loops": sum(isinstance(n, (ast.For, ast.While)) for n in nodes),
         "steps": sum(isinstance(n, _STEP_NODES) for n in nodes),
         "lines": len([ln for ln in code.splitlines() if ln.strip()])}
    d["score"] = d["lines"] + 2 * d["branches"] + 2 * d["loops"] + d["steps"]
    return d


def difficulty_label(score: int) -> str:
    return "easy" if score < 8 else "medium" if score < 16 else "hard"


def normalized_code(code: str) -> str:
    """The reference as the AST sees it: formatting and comments do not hide a duplicate."""
    return ast.unparse(ast.parse(code))


# ----------------------------------------------------------------------------- the split

def params_split(family: str, params: dict) -> str:
    """train | test, fixed by the parameters alone (stable across seeds and io kinds)."""
    key = json.dumps([family, params], sort_keys=True)
    bucket = int(hashlib.sha256(key.encode()).hexdigest(), 16) % 100
    return "test" if bucket < TEST_PERCENT else "train"


def _row(draft: Draft, split: str, index: int) -> dict:
    d = difficulty(draft.solution)
    fn_name = None if draft.io == "stdio" else draft.solution.split("(")[0][len("def "):]
    return {"id": f"tasks/{draft.family}/{split}/{index}", "source": "tasks",
            "question": draft.question,
            "starter_code": draft.solution.split("\n")[0] + "\n" if fn_name else "",
            "fn_name": fn_name, "tests": draft.tests, "solutions": [draft.solution],
            "difficulty": difficulty_label(d["score"]),
            "metadata": {"family": draft.family, "io": draft.io, "params": draft.params, **d}}


def _interleave(lists: list[list]) -> list:
    out = []
    for i in range(max(map(len, lists), default=0)):
        out += [lst[i] for lst in lists if i < len(lst)]
    return out


def _draw_quotas(rng: random.Random, family: str, want: dict[str, int], split_of,
                 seen_q: set, seen_code: set, seed) -> dict[str, list[dict]]:
    """Draw instances of `family` until every split has its quota: {split: rows}.

    split_of(draft) names the split of a draft; duplicates (statement or normalised
    reference in seen_q / seen_code, shared across families and splits) are skipped."""
    got = {s: [] for s in want}
    for _ in range(200 * sum(want.values())):
        if all(len(got[s]) >= n for s, n in want.items()):
            break
        draft = FAMILIES[family](rng)
        split = split_of(draft)
        norm = normalized_code(draft.solution)
        if len(got[split]) >= want[split] or draft.question in seen_q or norm in seen_code:
            continue
        seen_q.add(draft.question)
        seen_code.add(norm)
        got[split].append(_row(draft, split, len(got[split])))
    if any(len(got[s]) < n for s, n in want.items()):
        raise RuntimeError(f"family {family} cannot fill its quotas {want} (seed {seed})")
    return got


def _by_params(draft: Draft) -> str:
    return params_split(draft.family, draft.params)


def _kept_in_cache_dir(make):
    """make(seed, ...) -> JSON text, also kept as a file in the folder $TASKS_CACHE_DIR names
    (when set), so that other processes read it instead of making it again: the base world
    takes ~10 s of a free core (over a minute on a loaded one), and the test suite
    (tests/conftest.py sets the folder for its session) starts dozens of trainers that load
    it. The file is named by the function, the arguments and this file's sha256, so a
    changed generator never reads an older world. One process makes it: others that want it
    meanwhile (the suite's two workers start together) wait on a lock and read the file."""
    @wraps(make)
    def cached(*key) -> str:
        folder = os.environ.get("TASKS_CACHE_DIR")
        if not folder:
            return make(*key)
        name = "-".join(map(str, (make.__name__, *key, _SOURCE_SHA256[:16])))
        path = os.path.join(folder, name + ".json")
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            with open(path + ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if not os.path.exists(path):
                    text = make(*key)
                    with open(f"{path}.{os.getpid()}", "w") as f:    # whole or absent
                        f.write(text)
                    os.replace(f"{path}.{os.getpid()}", path)
                    return text
        with open(path) as f:
            return f.read()
    return cached


with open(__file__, "rb") as _source:
    _SOURCE_SHA256 = hashlib.sha256(_source.read()).hexdigest()


@lru_cache(maxsize=4)
@_kept_in_cache_dir
def _generate(seed: int) -> str:
    """JSON of {split: rows} (cached as text so that callers get fresh, unshared rows)."""
    rng = random.Random(seed)
    seen_q, seen_code = set(), set()
    per_split = {"train": [], "test": [], "heldout": []}
    for family in SPLIT_FAMILIES + HELDOUT_FAMILIES:
        held = family in HELDOUT_FAMILIES
        want = {"heldout": COUNTS["heldout"]} if held else {s: COUNTS[s] for s in ("train", "test")}
        got = _draw_quotas(rng, family, want, (lambda d: "heldout") if held else _by_params,
                           seen_q, seen_code, seed)
        for s, rows in got.items():
            per_split[s].append(rows)
    out = {s: _interleave(lists) for s, lists in per_split.items()}
    n_sample = COUNTS["test"]
    out["train_sample"] = _interleave([lst[:n_sample] for lst in per_split["train"]])
    return json.dumps(out)


@lru_cache(maxsize=4)
@_kept_in_cache_dir
def _generate_length(seed: int) -> str:
    """JSON of {"length_train": rows, "length_test": rows}: the chain families, from a Random
    of their own, so that adding them left every row of the other splits as it was."""
    rng = random.Random(f"length-{seed}")
    seen_q, seen_code = set(), set()
    per_split = {"train": [], "test": []}
    for family in LENGTH_FAMILIES:
        got = _draw_quotas(rng, family, dict(LENGTH_COUNTS), _by_params, seen_q, seen_code,
                           seed)
        for s, rows in got.items():
            per_split[s].append(rows)
    return json.dumps({f"length_{s}": _interleave(lists) for s, lists in per_split.items()})


def _distinct(rng: random.Random, family: str, split: str, want: int, seen_q: set,
              seen_code: set, draws: int) -> list[Draft]:
    """Up to `want` drafts of `family` whose parameters fall in `split` (params_split) and
    whose statement and normalised reference are new (added to seen_q / seen_code); at most
    `draws` draws, so a family with few distinct instances (aggregate) gives what it has."""
    out = []
    for _ in range(draws):
        if len(out) >= want:
            break
        draft = FAMILIES[family](rng)
        if params_split(family, draft.params) != split:
            continue
        norm = normalized_code(draft.solution)
        if draft.question in seen_q or norm in seen_code:
            continue
        seen_q.add(draft.question)
        seen_code.add(norm)
        out.append(draft)
    return out


def base_count(family: str, split: str) -> int:
    """How many instances of `family` the base world's `split` holds at most."""
    return BASE_COUNT_OVERRIDES.get(family, {}).get(split, BASE_COUNTS[split])


def reference_lines(code: str, test: dict, fn_name: str | None) -> frozenset[int]:
    """The lines of one of OUR references that `test` executes, traced in this process.

    Only for the generator's own programs (trusted, short, no loops without bounds): the
    sandbox is for everything a model writes. stdio: input() reads the test's lines and
    print() is discarded; call: the function is called on the test's arguments."""
    compiled = compile(code, "<reference>", "exec")
    lines: set[int] = set()

    def trace(frame, event, arg):
        if frame.f_code.co_filename != "<reference>":
            return None
        if event == "line":
            lines.add(frame.f_lineno)
        return trace
    feed = iter(test["input"].splitlines() if fn_name is None else ())
    env = {"input": lambda *a: next(feed), "print": lambda *a, **k: None}
    before = sys.gettrace()
    sys.settrace(trace)
    try:
        exec(compiled, env)
        if fn_name is not None:
            env[fn_name](*test["input"])
    finally:
        sys.settrace(before)
    return frozenset(lines)


def few_tests_first(code: str, tests: list, fn_name: str | None) -> list:
    """`tests` reordered so that a first few leave branches of the reference unexecuted,
    as the three tests APPS+ ships for training often do (StepCoder: one test runs about 75%
    of a canonical solution), the way an example set goes: a common case, a second path,
    another input on a path already shown, a third path, ...

    First the test that runs the fewest lines; then, alternately, the test that adds the
    fewest lines not yet run but at least one (a new path), and a test that adds none
    (another input on a path run already); where no test of the wanted kind is left, the one
    adding the fewest. Ties keep the original order. So the first three run two paths, and
    every prefix is one --max-train-tests may keep; the whole list still runs every branch
    (evaluation uses all of it)."""
    runs = [reference_lines(code, t, fn_name) for t in tests]
    left = list(range(len(tests)))
    first = min(left, key=lambda i: len(runs[i]))
    order, seen = [first], set(runs[first])
    left.remove(first)
    while left:
        gains = {i: len(runs[i] - seen) for i in left}
        new_path = len(order) % 2 == 1
        wanted = [i for i in left if (gains[i] > 0) == new_path]
        pick = min(wanted or left, key=lambda i: gains[i])
        order.append(pick)
        seen |= runs[pick]
        left.remove(pick)
    return [tests[i] for i in order]


def _few_first(draft: Draft) -> Draft:
    fn_name = None if draft.io == "stdio" else draft.solution.split("(")[0][len("def "):]
    return Draft(draft.family, draft.io, draft.params, draft.question, draft.solution,
                 few_tests_first(draft.solution, draft.tests, fn_name))


@lru_cache(maxsize=2)
@_kept_in_cache_dir
def _generate_base(seed: int) -> str:
    """JSON of {"corpus", "rl", "eval"}: see generate_base."""
    seen_q, seen_code = set(), set()
    # The first testbed's test and heldout instances stay out of everything made here.
    old = generate(seed)
    for row in old["test"] + old["heldout"]:
        seen_q.add(row["question"])
        seen_code.add(normalized_code(row["solutions"][0]))
    held = {f: _distinct(random.Random(f"base-eval-{f}-{seed}"), f, "test",
                         base_count(f, "eval"), seen_q, seen_code, 40 * base_count(f, "eval"))
            for f in BASE_FAMILIES}
    rl, corpus = {}, {}
    for f in BASE_FAMILIES:
        want = base_count(f, "rl") + base_count(f, "corpus")
        drafts = _distinct(random.Random(f"base-train-{f}-{seed}"), f, "train", want, seen_q,
                           seen_code, 4 * want)
        # RL's share first; a family with few distinct instances keeps 3/4 for the corpus.
        k = min(base_count(f, "rl"), len(drafts) // 4 if base_count(f, "corpus") else
                len(drafts))
        rl[f], corpus[f] = drafts[:k], drafts[k:]
    out = {}
    for split, per_family in (("corpus", corpus), ("rl", rl), ("eval", held)):
        order = (lambda d: d) if split == "corpus" else _few_first
        lists = [[_row(order(d), split, i) for i, d in enumerate(per_family[f])]
                 for f in BASE_FAMILIES if per_family[f]]
        out[split] = _interleave(lists)
    return json.dumps(out)


def generate_base(seed: int = 0) -> dict[str, list[dict]]:
    """The base world: {"corpus", "rl", "eval"}, each interleaving its families.

    corpus  the base model's supervised corpus: up to 3000 instances of each CORPUS_FAMILY
            and 1000 of CCCS_FAMILY (base.py makes only last-step completions of those),
            parameters in the train split (params_split)
    rl      the problems RL trains on: up to 400 more train-parameter instances of every
            family of BASE_FAMILIES (3/4 of a family with few distinct instances, aggregate,
            go to the corpus)
    eval    held out: up to 160 instances of each family (80 of CCCS_FAMILY and
            RL_ONLY_FAMILY) whose parameters are in the test split
    The tests of rl and eval problems are ordered by few_tests_first, so that the first N
    (--max-train-tests N) need not run every branch; all of them still do.
    No statement or normalised reference appears twice across the three, nor in the first
    testbed's test and heldout splits. Each family and purpose draws from a Random of its own
    (named by family, purpose and seed), so changing one quota leaves the other lists as
    they were. Deterministic for the seed."""
    return json.loads(_generate_base(seed))


@lru_cache(maxsize=8)
@_kept_in_cache_dir
def _base_split(seed: int, split: str) -> str:
    """JSON of one split of the base world: a trainer reads rl and eval, not the corpus too
    (20,000 of the world's 25,000 rows)."""
    return json.dumps(generate_base(seed)[split])


def generate(seed: int = 0) -> dict[str, list[dict]]:
    """{split: rows} for train, test, heldout and train_sample; rows have Problem's fields."""
    return json.loads(_generate(seed))


def generate_length(seed: int = 0) -> dict[str, list[dict]]:
    """{split: rows} for length_train and length_test (the chain families)."""
    return json.loads(_generate_length(seed))


def split_families(split: str) -> tuple[str, ...]:
    """The families a split holds (what tasks:SPLIT@FAMILY may name)."""
    return (HELDOUT_FAMILIES if split == "heldout" else
            LENGTH_FAMILIES if split in LENGTH_SPLITS else
            BASE_FAMILIES if split in ("rl", "eval") else
            CORPUS_FAMILIES + (CCCS_FAMILY,) if split == "corpus" else SPLIT_FAMILIES)


def task_rows(split: str, seed: int = 0) -> list[dict]:
    if split not in SPLITS:
        raise ValueError(f"unknown tasks split {split!r}; use one of {list(SPLITS)}")
    if split in BASE_SPLITS:
        return json.loads(_base_split(seed, split))
    return (generate_length(seed) if split in LENGTH_SPLITS else generate(seed))[split]


# ----------------------------------------------------------------------------- the built-in set
# Ours, hand-written, for the CPU default run and the tests: short questions and 1-5 line
# references; solutions[0] is the canonical one, the others add variety to the SFT data.

def _stdio(*pairs) -> list[dict]:
    return [{"input": i + "\n", "output": o + "\n"} for i, o in pairs]


def _calls(*pairs) -> list[dict]:
    return [{"input": list(args), "output": out} for args, out in pairs]


BUILTIN = [
    # (name, difficulty, question, solutions, tests[, fn_name])
    ("add_two", "easy", "Read two integers on one line and print their sum.",
     ["a, b = map(int, input().split())\nprint(a + b)", "print(sum(map(int, input().split())))"],
     _stdio(("1 2", "3"), ("-5 5", "0"), ("100 23", "123"), ("0 0", "0"))),
    ("sum_line", "easy", "Read a line of integers and print their sum.",
     ["print(sum(map(int, input().split())))",
      "total = 0\nfor x in input().split():\n    total += int(x)\nprint(total)"],
     _stdio(("1 2 3", "6"), ("10", "10"), ("-1 -2 4", "1"), ("5 5 5 5", "20"))),
    ("max_line", "easy", "Read a line of integers and print the largest.",
     ["print(max(map(int, input().split())))", "print(sorted(map(int, input().split()))[-1])"],
     _stdio(("1 9 3", "9"), ("-4 -2 -7", "-2"), ("5", "5"), ("2 2 1", "2"))),
    ("min_line", "easy", "Read a line of integers and print the smallest.",
     ["print(min(map(int, input().split())))", "print(sorted(map(int, input().split()))[0])"],
     _stdio(("1 9 3", "1"), ("-4 -2 -7", "-7"), ("5", "5"), ("8 3 3", "3"))),
    ("reverse_line", "easy", "Read a line and print it reversed.",
     ["print(input()[::-1])", "print(''.join(reversed(input())))"],
     _stdio(("abc", "cba"), ("hello world", "dlrow olleh"), ("a", "a"), ("racecar", "racecar"))),
    ("upper_line", "easy", "Read a line and print it in upper case.",
     ["print(input().upper())"],
     _stdio(("abc", "ABC"), ("Hello World", "HELLO WORLD"), ("x1y2", "X1Y2"))),
    ("line_length", "easy", "Read a line and print its number of characters.",
     ["print(len(input()))"],
     _stdio(("abc", "3"), ("hello world", "11"), ("a", "1"), ("1234567890", "10"))),
    ("square", "easy", "Read an integer n and print n squared.",
     ["n = int(input())\nprint(n * n)", "print(int(input()) ** 2)"],
     _stdio(("3", "9"), ("-4", "16"), ("0", "0"), ("12", "144"))),
    ("even_odd", "easy", "Read an integer and print even if it is even, otherwise odd.",
     ["print('even' if int(input()) % 2 == 0 else 'odd')",
      "print(['even', 'odd'][int(input()) % 2])"],
     _stdio(("4", "even"), ("7", "odd"), ("0", "even"), ("-3", "odd"))),
    ("greet", "easy", "Read a name and print Hello, followed by the name and an exclamation mark.",
     ["print(f'Hello, {input()}!')", "print('Hello, ' + input() + '!')"],
     _stdio(("Ada", "Hello, Ada!"), ("Bob", "Hello, Bob!"), ("x", "Hello, x!"))),
    ("count_vowels", "easy",
     "Read a lower-case word and print how many vowels (a, e, i, o, u) it has.",
     ["print(sum(c in 'aeiou' for c in input()))",
      "print(len([c for c in input() if c in 'aeiou']))"],
     _stdio(("hello", "2"), ("sky", "0"), ("aeiou", "5"), ("banana", "3"))),
    ("abs_diff", "easy", "Read two integers and print the absolute value of their difference.",
     ["a, b = map(int, input().split())\nprint(abs(a - b))"],
     _stdio(("3 10", "7"), ("10 3", "7"), ("-2 2", "4"), ("5 5", "0"))),
    ("product_line", "easy", "Read a line of integers and print their product.",
     ["import math\nprint(math.prod(map(int, input().split())))",
      "p = 1\nfor x in input().split():\n    p *= int(x)\nprint(p)"],
     _stdio(("2 3 4", "24"), ("5", "5"), ("-1 2 3", "-6"), ("7 0 9", "0"))),
    ("count_words", "easy", "Read a line and print how many words it has.",
     ["print(len(input().split()))"],
     _stdio(("hello world", "2"), ("one", "1"), ("a b c d e", "5"), ("  spaced   out  ", "2"))),
    ("sort_line", "easy",
     "Read a line of integers and print them in increasing order, separated by spaces.",
     ["print(*sorted(map(int, input().split())))",
      "print(' '.join(map(str, sorted(map(int, input().split())))))"],
     _stdio(("3 1 2", "1 2 3"), ("5", "5"), ("-1 -3 2 0", "-3 -1 0 2"), ("2 2 1", "1 2 2"))),
    ("factorial", "easy", "Read an integer n (0 <= n <= 20) and print n factorial.",
     ["import math\nprint(math.factorial(int(input())))",
      "f = 1\nfor i in range(2, int(input()) + 1):\n    f *= i\nprint(f)"],
     _stdio(("0", "1"), ("1", "1"), ("5", "120"), ("10", "3628800"))),
    ("sum_to_n", "easy", "Read an integer n and print 1 + 2 + ... + n.",
     ["n = int(input())\nprint(n * (n + 1) // 2)", "print(sum(range(int(input()) + 1)))"],
     _stdio(("1", "1"), ("4", "10"), ("100", "5050"), ("0", "0"))),
    ("palindrome", "easy",
     "Read a word and print YES if it reads the same backwards, otherwise NO.",
     ["s = input()\nprint('YES' if s == s[::-1] else 'NO')"],
     _stdio(("level", "YES"), ("hello", "NO"), ("a", "YES"), ("abba", "YES"), ("ab", "NO"))),
    ("range_width", "easy", "Read a line of integers and print the largest minus the smallest.",
     ["a = list(map(int, input().split()))\nprint(max(a) - min(a))"],
     _stdio(("1 5 3", "4"), ("7", "0"), ("-2 4", "6"), ("9 9 9", "0"))),
    ("fizzbuzz", "medium",
     "Read n and print the numbers 1 to n, one a line, but Fizz for multiples of 3, Buzz for "
     "multiples of 5 and FizzBuzz for multiples of both.",
     ["for i in range(1, int(input()) + 1):\n"
      "    print('FizzBuzz' if i % 15 == 0 else 'Fizz' if i % 3 == 0 else 'Buzz' if i % 5 == 0 "
      "else i)",
      "for i in range(1, int(input()) + 1):\n"
      "    print(('Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0)) or i)"],
     _stdio(("3", "1\n2\nFizz"), ("5", "1\n2\nFizz\n4\nBuzz"),
            ("15", "1\n2\nFizz\n4\nBuzz\nFizz\n7\n8\nFizz\nBuzz\n11\nFizz\n13\n14\nFizzBuzz"),
            ("1", "1"))),
    ("sum_n_lines", "medium",
     "The first line holds n; each of the next n lines holds an integer. Print their sum.",
     ["n = int(input())\nprint(sum(int(input()) for _ in range(n)))",
      "import sys\nprint(sum(map(int, sys.stdin.read().split()[1:])))"],
     _stdio(("3\n1\n2\n3", "6"), ("1\n-7", "-7"), ("4\n10\n20\n30\n40", "100"), ("2\n0\n0", "0"))),
    ("gcd", "medium", "Read two positive integers and print their greatest common divisor.",
     ["import math\na, b = map(int, input().split())\nprint(math.gcd(a, b))",
      "a, b = map(int, input().split())\nwhile b:\n    a, b = b, a % b\nprint(a)"],
     _stdio(("12 18", "6"), ("7 13", "1"), ("100 10", "10"), ("9 9", "9"))),
    ("is_prime", "medium", "Read an integer n and print YES if it is prime, otherwise NO.",
     ["n = int(input())\n"
      "print('YES' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO')"],
     _stdio(("2", "YES"), ("1", "NO"), ("17", "YES"), ("21", "NO"), ("97", "YES"), ("100", "NO"))),
    ("fibonacci", "medium",
     "Read n and print the n-th Fibonacci number, where F(0) = 0 and F(1) = 1.",
     ["a, b = 0, 1\nfor _ in range(int(input())):\n    a, b = b, a + b\nprint(a)"],
     _stdio(("0", "0"), ("1", "1"), ("2", "1"), ("10", "55"), ("30", "832040"))),
    ("digit_sum", "medium", "Read a non-negative integer and print the sum of its digits.",
     ["print(sum(map(int, input())))", "print(sum(int(c) for c in input()))"],
     _stdio(("123", "6"), ("0", "0"), ("9999", "36"), ("105", "6"))),
    ("to_binary", "medium",
     "Read a non-negative integer and print it in binary, without leading zeros.",
     ["print(bin(int(input()))[2:])", "print(format(int(input()), 'b'))"],
     _stdio(("5", "101"), ("0", "0"), ("8", "1000"), ("255", "11111111"))),
    ("count_distinct", "medium", "Read a line of words and print how many different words it has.",
     ["print(len(set(input().split())))"],
     _stdio(("a b a", "2"), ("x", "1"), ("the cat and the hat", "4"), ("b b b b", "1"))),
    ("second_largest", "medium",
     "Read a line of integers with at least two different values and print the second largest "
     "different value.",
     ["print(sorted(set(map(int, input().split())))[-2])"],
     _stdio(("1 2 3", "2"), ("5 5 4", "4"), ("-1 -5 -3", "-3"), ("10 20", "10"))),
    ("prefix_sums", "medium",
     "Read a line of integers and print their running sums, separated by spaces.",
     ["from itertools import accumulate\nprint(*accumulate(map(int, input().split())))",
      "s = 0\nout = []\nfor x in input().split():\n    s += int(x)\n"
      "    out.append(s)\nprint(*out)"],
     _stdio(("1 2 3", "1 3 6"), ("5", "5"), ("3 -3 3", "3 0 3"), ("0 0 1", "0 0 1"))),
    ("star_triangle", "medium", "Read n and print n lines; line i holds i stars.",
     ["for i in range(1, int(input()) + 1):\n    print('*' * i)"],
     _stdio(("1", "*"), ("3", "*\n**\n***"), ("4", "*\n**\n***\n****"))),
    ("anagrams", "medium",
     "Read two words on one line and print YES if they are anagrams of each other, otherwise NO.",
     ["a, b = input().split()\nprint('YES' if sorted(a) == sorted(b) else 'NO')"],
     _stdio(("listen silent", "YES"), ("abc abd", "NO"), ("a a", "YES"), ("ab abb", "NO"))),
    ("most_common_word", "medium",
     "Read a line of words and print the most frequent one; on a tie, the one that appears first.",
     ["from collections import Counter\nprint(Counter(input().split()).most_common(1)[0][0])",
      "w = input().split()\nprint(max(w, key=w.count))"],
     _stdio(("a b a", "a"), ("x y z", "x"), ("b a a b c", "b"), ("one two two", "two"))),
    ("balanced", "hard",
     "Read a string of brackets ()[]{} and print YES if it is balanced, otherwise NO.",
     ["s = input()\nwhile '()' in s or '[]' in s or '{}' in s:\n"
      "    s = s.replace('()', '').replace('[]', '').replace('{}', '')\n"
      "print('NO' if s else 'YES')"],
     _stdio(("()[]{}", "YES"), ("([)]", "NO"), ("{[()]}", "YES"), ("((", "NO"), (")(", "NO"))),
    ("primes_upto", "hard", "Read n (n >= 2) and print the primes up to n, separated by spaces.",
     ["n = int(input())\n"
      "print(*[p for p in range(2, n + 1) if all(p % d for d in range(2, int(p ** 0.5) + 1))])"],
     _stdio(("10", "2 3 5 7"), ("2", "2"), ("20", "2 3 5 7 11 13 17 19"), ("3", "2 3"))),
    ("max_subarray", "hard",
     "Read a line of integers and print the largest sum of a non-empty contiguous run of them.",
     ["a = list(map(int, input().split()))\nbest = cur = a[0]\nfor x in a[1:]:\n"
      "    cur = max(x, cur + x)\n    best = max(best, cur)\nprint(best)"],
     _stdio(("1 -2 3 4 -1", "7"), ("-3 -1 -2", "-1"), ("5", "5"), ("2 -1 2", "3"))),
    ("run_length", "hard",
     "Read a word and print its run-length encoding: each run of a letter as the letter then "
     "the run's length.",
     ["from itertools import groupby\n"
      "print(''.join(f'{k}{len(list(g))}' for k, g in groupby(input())))"],
     _stdio(("aaabcc", "a3b1c2"), ("a", "a1"), ("abab", "a1b1a1b1"), ("zzzz", "z4"))),
    ("diagonal_sum", "hard",
     "Read n, then n lines of n integers (a square matrix). Print the sum of its main diagonal.",
     ["n = int(input())\nprint(sum(int(input().split()[i]) for i in range(n)))"],
     _stdio(("2\n1 2\n3 4", "5"), ("1\n7", "7"), ("3\n1 0 0\n0 5 0\n0 0 9", "15"),
            ("2\n-1 4\n4 -1", "-2"))),
    # Call-based: a top-level function; the tests call it and check the return value.
    ("add", "easy", "Return the sum of a and b.",
     ["def add(a, b):\n    return a + b"],
     _calls(((1, 2), 3), ((-1, 1), 0), ((10, 5), 15)), "add"),
    ("is_even", "easy", "Return True if n is even, else False.",
     ["def is_even(n):\n    return n % 2 == 0"],
     _calls(((2,), True), ((3,), False), ((0,), True), ((-7,), False)), "is_even"),
    ("reverse_list", "easy", "Return the list xs reversed.",
     ["def reverse_list(xs):\n    return xs[::-1]",
      "def reverse_list(xs):\n    return list(reversed(xs))"],
     _calls((([1, 2, 3],), [3, 2, 1]), (([],), []), ((['a'],), ['a'])), "reverse_list"),
    ("count_char", "easy", "Return how many times the character c occurs in the string s.",
     ["def count_char(s, c):\n    return s.count(c)",
      "def count_char(s, c):\n    return sum(x == c for x in s)"],
     _calls((("banana", "a"), 3), (("hello", "z"), 0), (("aaa", "a"), 3)), "count_char"),
    ("average", "easy", "Return the average of the non-empty list of numbers xs.",
     ["def average(xs):\n    return sum(xs) / len(xs)"],
     _calls((([1, 2, 3],), 2.0), (([5],), 5.0), (([1, 2],), 1.5)), "average"),
    ("is_palindrome", "easy", "Return True if the string s reads the same backwards, else False.",
     ["def is_palindrome(s):\n    return s == s[::-1]"],
     _calls((("level",), True), (("abc",), False), (("",), True), (("ab",), False)),
     "is_palindrome"),
    ("unique_sorted", "easy", "Return the different values of xs in increasing order.",
     ["def unique_sorted(xs):\n    return sorted(set(xs))"],
     _calls((([3, 1, 3, 2],), [1, 2, 3]), (([],), []), (([5, 5],), [5])), "unique_sorted"),
    ("flatten", "medium", "Return the list of lists xss flattened into one list.",
     ["def flatten(xss):\n    return [x for xs in xss for x in xs]",
      "def flatten(xss):\n    return sum(xss, [])"],
     _calls((([[1, 2], [3]],), [1, 2, 3]), (([],), []),
           (([[], [4], [5, 6]],), [4, 5, 6])), "flatten"),
    ("merge_sorted", "medium", "Merge the sorted lists a and b into one sorted list.",
     ["def merge_sorted(a, b):\n    return sorted(a + b)"],
     _calls((([1, 3], [2, 4]), [1, 2, 3, 4]), (([], [1]), [1]),
           (([1, 1], [1]), [1, 1, 1])), "merge_sorted"),
    ("word_count", "medium",
     "Return a dict mapping each word of the string s to its number of occurrences.",
     ["def word_count(s):\n    counts = {}\n    for w in s.split():\n"
      "        counts[w] = counts.get(w, 0) + 1\n    return counts",
      "from collections import Counter\n\ndef word_count(s):\n    return dict(Counter(s.split()))"],
     _calls((("a b a",), {'a': 2, 'b': 1}), (("",), {}), (("x",), {'x': 1})), "word_count"),
    ("rotate", "medium", "Return the non-empty list xs rotated right by k positions.",
     ["def rotate(xs, k):\n    k %= len(xs)\n    return xs[-k:] + xs[:-k]"],
     _calls((([1, 2, 3, 4], 1), [4, 1, 2, 3]), (([1, 2, 3], 0), [1, 2, 3]),
           (([1, 2, 3], 4), [3, 1, 2])), "rotate"),
    ("chunks", "medium",
     "Split the list xs into consecutive pieces of length n (the last may be shorter).",
     ["def chunks(xs, n):\n    return [xs[i:i + n] for i in range(0, len(xs), n)]"],
     _calls((([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]]), (([], 3), []),
           (([1, 2], 2), [[1, 2]])), "chunks"),
    ("two_sum", "hard",
     "Return the indices [i, j] (i < j) of the two numbers in nums that add up to target; "
     "exactly one pair does.",
     ["def two_sum(nums, target):\n    seen = {}\n    for j, x in enumerate(nums):\n"
      "        if target - x in seen:\n            return [seen[target - x], j]\n"
      "        seen[x] = j",
      "def two_sum(nums, target):\n    for i in range(len(nums)):\n"
      "        for j in range(i + 1, len(nums)):\n            if nums[i] + nums[j] == target:\n"
      "                return [i, j]"],
     _calls((([2, 7, 11, 15], 9), [0, 1]), (([3, 2, 4], 6), [1, 2]),
           (([1, 5, 1], 2), [0, 2])), "two_sum"),
    ("caesar", "hard",
     "Shift every lower-case letter of s by k places in the alphabet, wrapping around; keep "
     "other characters.",
     ["def caesar(s, k):\n"
      "    return ''.join(chr((ord(c) - 97 + k) % 26 + 97) if c.islower() else c for c in s)"],
     _calls((("abc", 1), "bcd"), (("xyz", 3), "abc"), (("hi there!", 13), "uv gurer!"),
           (("a", 26), "a")), "caesar"),

]


def builtin_rows() -> list[dict]:
    """The built-in set (51 problems, both test kinds, easy to hard) as rows of Problem fields."""
    rows = []
    for name, difficulty, question, solutions, tests, *fn in BUILTIN:
        fn_name = fn[0] if fn else None
        # Call-based problems show the signature: the question alone does not fix the argument
        # order.
        starter = next((ln + "\n" for ln in solutions[0].split("\n")
                        if ln.startswith(f"def {fn_name}(")), "") if fn_name else ""
        rows.append({"id": f"builtin/{name}", "source": "builtin", "question": question,
                     "starter_code": starter, "fn_name": fn_name, "tests": [dict(t) for t in tests],
                     "solutions": list(solutions), "difficulty": difficulty, "metadata": {}})
    return rows
