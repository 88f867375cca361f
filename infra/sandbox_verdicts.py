"""Verdict names, shared by the judge (sandbox.py) and the harness that serves it.

Per test: pass | wrong_answer | runtime_error | timeout | memory_limit | output_limit.
Per program also compile_error (decided by the parent before any test runs).
"""

PASS, WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT, COMPILE_ERROR = (
    "pass", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit",
    "compile_error")
