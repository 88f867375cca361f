"""Verdict names, shared by the judge (sandbox.py) and the harness that serves it.

Per test: pass | wrong_answer | runtime_error | timeout | memory_limit | output_limit, and
not_run for a test after the first failing one of a job judged stop_at_first_failure.
Per program also compile_error (decided by the parent before any test runs).
"""

PASS, WRONG_ANSWER, RUNTIME_ERROR, TIMEOUT, MEMORY_LIMIT, OUTPUT_LIMIT, COMPILE_ERROR = (
    "pass", "wrong_answer", "runtime_error", "timeout", "memory_limit", "output_limit",
    "compile_error")
NOT_RUN = "not_run"
