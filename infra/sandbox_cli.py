"""The sandbox's command line: read a program and its tests, print the verdict as JSON.

    python sandbox.py PROGRAM.py TESTS.json [--fn-name NAME] [--timeout S] [--memory-mb M]
                      [--coverage] [--source NAME]

Exit status 0 when every test passes, 1 when one does not, 2 for a usage error (one line).
"""

from __future__ import annotations

import argparse
import json
import sys


class UsageError(Exception):
    """A mistake the user can fix (bad path, bad JSON): one line on stderr, exit status 2."""


def load_tests(path: str) -> tuple[list[dict], str | None]:
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read the tests file {path!r}: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise UsageError(f"the tests file {path!r} is not valid JSON: {e}") from None
    if isinstance(data, dict) and isinstance(data.get("inputs"), list) and isinstance(
            data.get("outputs"), list):   # APPS input_output style
        if len(data["inputs"]) != len(data["outputs"]):
            raise UsageError(f"the tests file {path!r} has {len(data['inputs'])} inputs but "
                             f"{len(data['outputs'])} outputs") from None
        tests = [{"input": i, "output": o} for i, o in zip(data["inputs"], data["outputs"])]
        return tests, data.get("fn_name")
    if isinstance(data, list):
        return data, None
    raise UsageError(f"the tests file {path!r} must hold a JSON list of {{'input', 'output'}} "
                     "objects or an object with 'inputs' and 'outputs' lists") from None


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value
    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, not the usage block
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)



def parse_args(argv: list[str] | None, sources) -> argparse.Namespace:
    """The command line's arguments (sources: the names --source accepts); a usage error
    prints one line and exits with status 2."""
    parser = _Parser(prog="sandbox.py", description="Run a Python program on unit tests in the "
                     "sandbox and print the verdict as JSON. Exit status: 0 when every test "
                     "passes, 1 when one does not, 2 for a usage error.")
    parser.add_argument("program", help="path of the Python program to judge")
    parser.add_argument("tests", help="JSON file: a list of {'input', 'output'} objects (or "
                        "one {'check': code}, with --fn-name), or an APPS-style object "
                        "{'inputs': [...], 'outputs': [...], 'fn_name'?}")
    parser.add_argument("--fn-name", default=None, help="call-based tests: the function (or "
                        "Solution method) to call with each input list; default: standard I/O")
    parser.add_argument("--timeout", type=_positive(float), default=4.0,
                        help="CPU seconds per test (the wall cap is 3x this + 1 s)")
    parser.add_argument("--memory-mb", type=_positive(int), default=1024,
                        help="memory limit per test, MiB")
    parser.add_argument("--coverage", action="store_true", help="also report executed lines")
    parser.add_argument("--source", choices=sorted(sources), default=None,
                        help="compare outputs as this benchmark does (see RULES); default: the "
                             "project's own rules")
    return parser.parse_args(argv)


def read_program(path: str) -> str:
    """The program's source; UsageError when it cannot be read or is not UTF-8."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except OSError as e:
        raise UsageError(f"cannot read the program {path!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise UsageError(f"the program {path!r} is not UTF-8 text") from None


def result_json(result) -> str:
    """A Result as the command line prints it."""
    out = dict(status=result.status, passed=result.passed, total=result.total,
               wall_time=round(result.wall_time, 3), error=result.error,
               executed_lines=None if result.executed_lines is None
               else sorted(result.executed_lines), coverage_unknown=result.coverage_unknown,
               tests=[dict(t.__dict__, executed_lines=sorted(t.executed_lines))
                      for t in result.tests])
    return json.dumps(out, indent=1)
