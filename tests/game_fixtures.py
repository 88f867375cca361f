"""The AT-GRPO game's test fixtures, shared by test_agents.py and test_tester_judge.py: a
reference solution and its ground truth, a program right on small inputs only, a reference
with a branch, the tester's reply formats (blocks of stdin / stdout, assert lines)."""
import data

REF = "a, b = map(int, input().split())\nprint(a + b)\n"
# Right on small inputs only: passes 2 of the 3 ground-truth tests below.
SMALL_ONLY = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)\n"
GT = [
    {"input": "1 2\n", "output": "3"},
    {"input": "5 7\n", "output": "12"},
    {"input": "10 4\n", "output": "14"},
]
# A reference with a branch: executable lines 1, 2, 3, 5 (`else:` holds no bytecode).
ABS = "n = int(input())\nif n < 0:\n    print(-n)\nelse:\n    print(n)\n"


def make_problem(pid="add", reference=REF, fn_name=None, tests=GT, starter=""):
    return data.Problem(
        id=pid,
        source="test",
        question=f"[{pid}] Read two integers a and b and print a + b.",
        starter_code=starter,
        fn_name=fn_name,
        tests=tests,
        solutions=[reference],
        difficulty="easy",
        metadata={},
    )


def blocks(*pairs):
    """A tester's reply in the stdin / stdout format: one block per (input, output) pair."""
    return "\n".join(
        f"**Test Input:**\n```\n{i}\n```\n**Test Output:**\n```\n{o}\n```" for i, o in pairs
    )


def asserts(*lines):
    """A tester's reply for a call-based problem: assert lines in one code block."""
    return "```python\n" + "\n".join(lines) + "\n```"


GOOD_TESTS = blocks(("1 1", "2"), ("20 3", "23"))
