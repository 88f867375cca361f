"""The comparison rules of each benchmark's own harness, and the number tokens they read.

sandbox.py holds the project's own rules (outputs_match, values_match) and RULES, which names
the rule of each data source; here are the benchmarks' rules it points to, each judging as its
harness judges (the docstrings cite the harness), and CompactText, program output rewritten as
the project's line rule reads it (the worker keeps stdout past its byte cap that way).
Pure functions, run in the parent; linear in the size of their inputs, no regex on program
output.
"""

from __future__ import annotations

import codecs
import decimal
import math

from infra.sandbox_wire import python_equal, to_wire, wire_tag  # noqa: F401  (doctests)

FLOAT_TOL = 1e-6            # absolute for |e| <= 1, relative above
CC_FLOAT_TOL = 1e-5         # CodeContests' checker: any two numbers within this, absolute
FLOAT_REPR_MAX = 24         # no repr(float) is longer: a longer decimal token can only shrink


def floats_close(expected: float, actual: float) -> bool:
    return abs(actual - expected) <= FLOAT_TOL * max(1.0, abs(expected))


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit()


def plain_number(token: str) -> bool:
    """[+-]? (d+ | d+. | d+.d+ | .d+) ([eE][+-]?d+)?, ASCII only; str methods, no regex."""
    if token[:1] in "+-":
        token = token[1:]
    mantissa, e, exponent = token.replace("E", "e").partition("e")
    if e:
        if exponent[:1] in "+-":
            exponent = exponent[1:]
        if not _digits(exponent):
            return False
    whole, dot, frac = mantissa.partition(".")
    if not dot:
        return _digits(whole)
    return (whole == "" or _digits(whole)) and (frac == "" or _digits(frac)) and bool(whole + frac)


def is_decimal(token: str) -> bool:
    """A number with a '.' or an exponent (the tokens compared within FLOAT_TOL)."""
    return plain_number(token) and ("." in token or "e" in token or "E" in token)



def apps_values_match(expected, actual) -> bool:
    """APPS and APPS+ (refined from APPS; its own harness is not public), call-based: APPS's
    checker (eval/testing_util.py) compares with Python's `==` after making a returned tuple a
    list ("ground truth sequences are not tuples": its answers are JSON), and also accepts a
    list whose items are tuples once each item is made a list. So True == 1 and 2 == 2.0 as in
    Python; a float must be exact, a set is not a list, a tuple deeper down is not a list.
    Not taken: its fallback `output == expected[0]`, meant for answers stored as [value] (data.py
    unwraps those): for a longer list it would pass a program returning only the first item.

    >>> apps_values_match([1, 2], to_wire((1, 2))), apps_values_match([[1, 2]], to_wire([(1, 2)]))
    (True, True)
    >>> apps_values_match(0.3, to_wire(0.1 + 0.2)), apps_values_match([1, 3], to_wire({1, 3}))
    (False, False)
    """
    tag, items = wire_tag(actual)
    if tag == "tuple":
        actual = items
    if python_equal(expected, actual):
        return True
    if type(actual) is list and actual and wire_tag(actual[0])[0] == "tuple":
        as_lists = [wire_tag(item)[1] if wire_tag(item)[0] == "tuple"
                    else list(item) if type(item) is str else item for item in actual]
        return all(type(item) is list for item in as_lists) and python_equal(expected, as_lists)
    return False


def livecodebench_values_match(expected, actual) -> bool:
    """LiveCodeBench functional tests (lcb_runner/evaluation/testing_util.py, grade_call_based):
    the expected output is JSON; a returned tuple is made a list ("don't penalize model if it
    produces tuples instead of lists"), then Python's `==`: no float tolerance, a nested tuple is
    not a list, a set is not a list.

    >>> livecodebench_values_match([1, 2], to_wire((1, 2))), livecodebench_values_match(
    ...     [[1, 2]], to_wire([(1, 2)]))
    (True, False)
    """
    tag, items = wire_tag(actual)
    return python_equal(expected, items if tag == "tuple" else actual)


def python_values_match(expected, actual) -> bool:
    """Python's `expected == actual`, nothing forgiven: HumanEval's rule (its harness runs
    `check(candidate)`, whose asserts use `==`), for call-based tests of a source that has no
    JSON answers.

    >>> python_values_match([1, 2], to_wire((1, 2))), python_values_match(0.5, to_wire(0.5000001))
    (False, False)
    >>> python_values_match((1, {2}), to_wire((1, {2}))), python_values_match(1, to_wire(True))
    (True, True)
    """
    return python_equal(expected, actual)


_CC_SEPARATORS = str.maketrans("\n\t\r\v", "    ")       # with " ": absl::ByAnyChar(" \n\t\r\v")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def code_contests_outputs_match(expected: str, actual: str) -> bool:
    """CodeContests (execution/tester_sandboxer.cc, OutputsMatch): both texts are split on
    spaces, newlines, tabs, CRs and vertical tabs (so line structure does not count) and
    lowercased (ASCII); equal token lists match; else, with as many tokens, each pair must match:
    if either is not a number the strings must be equal, else the two numbers (whatever
    absl::SimpleAtod reads: [+-]digits[.digits][e[+-]digits], inf, nan; an integer reads as one
    too) must be within CC_FLOAT_TOL = 1e-5, absolute. So "YES" == "yes", "1" == "1.0", and
    integers past 2**53 compare as the doubles they round to, as in the benchmark.

    >>> code_contests_outputs_match("YES\\n0.5 2", "yes 0.500009 2.0"), code_contests_outputs_match(
    ...     "0.5", "0.50002")
    (True, False)
    """
    exp_tokens, act_tokens = _cc_tokens(expected), _cc_tokens(actual)
    if exp_tokens == act_tokens:
        return True
    return len(exp_tokens) == len(act_tokens) and all(map(_cc_tokens_match, exp_tokens,
                                                          act_tokens))


def _cc_tokens(text: str) -> list[str]:
    return [t for t in text.translate(_CC_SEPARATORS).translate(_ASCII_LOWER).split(" ") if t]


def _cc_number(token: str) -> float | None:
    """The double absl::SimpleAtod reads from a token, or None (a leading '+' is dropped, then
    std::from_chars: '-'?, decimal digits with '.' and exponent, inf, infinity or nan)."""
    unsigned = token[1:] if token[:1] in "+-" else token
    if unsigned in ("inf", "infinity", "nan") or (
            plain_number(unsigned) and unsigned[:1] not in "+-"):
        return float(token)
    return None


def _cc_tokens_match(expected: str, actual: str) -> bool:
    e, a = _cc_number(expected), _cc_number(actual)
    if e is None or a is None:
        return expected == actual
    return abs(e - a) < CC_FLOAT_TOL


def livecodebench_outputs_match(expected: str, actual: str) -> bool:
    """LiveCodeBench standard I/O (lcb_runner/evaluation/testing_util.py, grade_stdio): both
    texts stripped and split on "\\n", each line stripped; the line counts must agree; a line
    matches when equal, or when every whitespace-separated token of both lines reads as a
    Decimal and the two lists are equal. Exact: "0.50" == "0.5" and "1" == "1.0", but no float
    tolerance, and two words are equal only with the same spacing.

    >>> livecodebench_outputs_match("\\n1 2\\n0.5\\n", "1  2\\n0.50 "), livecodebench_outputs_match(
    ...     "0.5", "0.5000001"), livecodebench_outputs_match("a b", "a  b")
    (True, False, False)
    """
    exp_lines, act_lines = _stripped_lines(expected), _stripped_lines(actual)
    if len(exp_lines) != len(act_lines):
        return False
    for e, a in zip(exp_lines, act_lines):
        if e == a:
            continue
        exp_numbers, act_numbers = _decimals(e), _decimals(a)
        try:
            if exp_numbers is None or act_numbers is None or exp_numbers != act_numbers:
                return False
        except ArithmeticError:   # decimal.InvalidOperation: a signalling NaN compared
            return False
    return True


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list | None:
    try:
        return [decimal.Decimal(token) for token in line.split()]
    except (ArithmeticError, ValueError):
        return None


# Which rule judges a source's tests: source -> (standard-I/O rule, call-based rule). The
# sources are data.py's Problem.source; one not named here gets the project's own rule.

class CompactText:
    """Program output rewritten as outputs_match reads it, so that it equals the original under
    that rule against ANY expected text: one space between the tokens of a line, no trailing
    whitespace, no trailing blank lines, and a decimal token longer than any float's repr
    written as repr(float(token)) (its float, hence every comparison with it, is unchanged; an
    expected token equal to either form is a decimal with that float). The worker uses it for
    stdout past its byte cap (_StdoutBuffer). Fed bytes in chunks, decoded as the parent
    decodes them (UTF-8, invalid bytes replaced); `text` holds the compacted form.

    >>> c = CompactText(); c.feed(b"1   2  \\n\\n0.50000000000000000000000001\\n\\n\\n")
    >>> c.feed(b"", final=True); bytes(c.text)
    b'1 2\\n\\n0.5'
    """

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = bytearray()
        self.partial = ""             # the last token of the unfinished line, maybe unfinished
        self.newlines = 0             # line ends not written yet: dropped if no token follows
        self.line_has_tokens = False

    def feed(self, data, final: bool = False):
        *lines, last = (self.partial + self.decoder.decode(data, final)).split("\n")
        for line in lines:
            self._add_tokens(line.split())
            self.newlines += 1
            self.line_has_tokens = False
        tokens = last.split()
        self.partial = "" if final or not tokens or last[-1].isspace() else tokens.pop()
        self._add_tokens(tokens)

    def size(self) -> int:
        return len(self.text) + len(self.partial)

    def _add_tokens(self, tokens: list[str]):
        if not tokens:
            return
        if max(map(len, tokens)) > FLOAT_REPR_MAX:
            tokens = [_short_decimal(t) for t in tokens]
        self.text += b"\n" * self.newlines + (b" " if self.line_has_tokens else b"")
        self.text += " ".join(tokens).encode()
        self.newlines, self.line_has_tokens = 0, True


def _short_decimal(token: str) -> str:
    if len(token) > FLOAT_REPR_MAX and is_decimal(token):
        value = float(token)
        if math.isfinite(value):
            return repr(value)
    return token

