"""The repository's layers: infra/ (what a learner may skip) imports nothing from the top level
(the methods and the pieces their loops call) nor from world/ (the CPU world), so that a reader
of a method never has to look up from infra/, and infra/ can be lifted into another project."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def top_level_modules() -> set[str]:
    return {f[:-3] for f in os.listdir(ROOT) if f.endswith(".py")}


def imported_modules(path: str) -> set[str]:
    """The first component of every module `path` imports, at any depth (function bodies too:
    a lazy import is an import)."""
    tree = ast.parse(open(path).read(), path)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def infra_files() -> list[str]:
    folder = os.path.join(ROOT, "infra")
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))


def test_infra_imports_nothing_above_it():
    above = top_level_modules() | {"world", "models"}
    assert len(infra_files()) >= 5                     # the folder is there and read
    found = {os.path.relpath(f, ROOT): sorted(imported_modules(f) & above) for f in infra_files()}
    assert {f: m for f, m in found.items() if m} == {}


def test_the_check_sees_an_import_from_above(tmp_path):
    """The check itself: a lazy import of a top-level module inside a function is found."""
    path = tmp_path / "x.py"
    path.write_text("import os\n\ndef f():\n    import grpo\n    from world.tasks import SPLITS\n")
    assert imported_modules(str(path)) & (top_level_modules() | {"world"}) == {"grpo", "world"}


def top_level_closure(entry: str) -> set[str]:
    """The top-level modules `entry` imports, directly or through each other (entry included)."""
    top, seen, todo = top_level_modules(), set(), [entry]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += imported_modules(os.path.join(ROOT, name + ".py")) & top
    return seen


def test_grpo_reads_in_few_top_level_files_and_the_judge_in_one_short_one():
    """What a reader of grpo.py opens at the top level: at most 9 files, 3,100 lines; the
    judge a learner reads (sandbox.py) at most 500 lines, its machinery in infra/."""
    files = top_level_closure("grpo")
    lines = {f: sum(1 for _ in open(os.path.join(ROOT, f + ".py"))) for f in files}
    assert {"grpo", "losses", "rollouts", "actor", "sandbox", "data"} <= files
    assert len(files) <= 9 and sum(lines.values()) <= 3100, lines
    assert lines["sandbox"] <= 500
