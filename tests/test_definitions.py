"""What the harness defines once: each exit status, the sanitizer's environment flag, the rules."""

import dataclasses
import re
from pathlib import Path

import harness
from harness.judge.jobs import Rules

HARNESS = Path(harness.__file__).resolve().parent
SOURCES = {path.relative_to(HARNESS).as_posix(): path.read_text() for path in HARNESS.rglob("*.py")}


def test_every_exit_status_is_defined_in_exits_py_alone():
    defining = sorted(name for name, text in SOURCES.items() if re.search(r"^EXIT_\w+ = ", text, re.M))
    assert defining == ["judge/exits.py"]


def test_the_sanitizer_flag_is_named_once():
    naming = sorted(name for name, text in SOURCES.items() if "NVFP4_HARNESS_UNDER_SANITIZER" in text)
    assert naming == ["runner/calls.py"]


def test_the_rules_are_one_switch_read_as_itself():
    assert [field.name for field in dataclasses.fields(Rules)] == ["strict"]
    assert not [name for name, value in vars(Rules).items() if isinstance(value, property)]


def test_no_docstring_names_a_class_the_harness_lacks():
    defined = {name for text in SOURCES.values() for name in re.findall(r"^\s*class (\w+)", text, re.M)}
    named = {name for text in SOURCES.values() for name in re.findall(r"`([A-Z][a-z]+(?:[A-Z][a-z]+)+)`", text)}
    assert named <= defined, named - defined


def _bare_numbers(expression) -> list:
    """The integer literals an exit status expression may evaluate to (`1`, `0 if x else 1`, `status or 0`)."""
    import ast

    if isinstance(expression, ast.Constant):
        return [expression.value] if isinstance(expression.value, int) else []
    if isinstance(expression, ast.IfExp):
        return _bare_numbers(expression.body) + _bare_numbers(expression.orelse)
    if isinstance(expression, ast.BoolOp):
        return [number for value in expression.values for number in _bare_numbers(value)]
    return []


def test_no_command_exits_with_a_bare_number():
    """Every sys.exit, SystemExit and early end of the commands names its status from exits.py."""
    import ast

    bare = [f"{name}:{node.lineno}" for name, text in SOURCES.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Call) and node.args and _bare_numbers(node.args[0])
            and ast.unparse(node.func) in ("sys.exit", "SystemExit", "_end_early", "Stopped")]
    assert bare == []


def test_sol_for_a_problem_without_a_formula_is_a_usage_error(harness_in_process, tmp_path):
    """A folder a user brings has no speed-of-light formula: `sol` says so in one line and exits
    EXIT_USAGE, before printing any table."""
    import shutil

    from harness.judge.exits import EXIT_USAGE
    from harness.problems import PROBLEMS

    folder = tmp_path / "my_gemv"
    shutil.copytree(PROBLEMS["nvfp4_gemv"].folder, folder)
    shutil.copyfile(PROBLEMS["nvfp4_gemv"].runner_files()["utils"], folder / "utils.py")
    result = harness_in_process("sol", "--problem", str(folder), env={"COLUMNS": "120"})
    assert result.returncode == EXIT_USAGE == 2, result.stdout + result.stderr
    assert result.stderr.strip() == "error: my_gemv has no speed-of-light formula" and result.stdout == ""


# What stops a run before a case, as docs/judge.md's `not run` row and jobs.NOT_RUN's comment
# name each: every place the modes make a `not run` result is one of these.
NOT_RUN_CAUSES = ("--official", "--stop-on-first-failure", "--wall-limit", "own files", "every case would repeat",
                  "GPU work never ended", "the service's cancel")


def test_not_run_means_one_thing_in_the_modes_the_statuses_and_the_docs():
    import harness.judge.jobs

    modes_sites = SOURCES["judge/modes.py"].count("CaseResult(NOT_RUN")
    assert modes_sites == len(NOT_RUN_CAUSES), "a new cause of `not run`: name it in jobs.py and docs/judge.md"
    jobs_text = Path(harness.judge.jobs.__file__).read_text()
    comment = jobs_text[:jobs_text.index('NOT_RUN = "not run"')].rsplit("\n\n", 1)[1]
    docs_row = next(line for line in (HARNESS.parent / "docs" / "judge.md").read_text().splitlines()
                    if line.startswith("| `not run` |"))
    for cause in NOT_RUN_CAUSES:
        assert cause in " ".join(comment.split()), cause
        assert cause in docs_row, cause


# A run's figure or where it was logged, in a comment: a comment describes the code as it is.
RUN_CITATION = re.compile(r"results/|logs?/|\.log\b|\b\d+(?:\.\d+)?\s*(?:x|×|%)\s+(?:faster|slower)|"
                          r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def test_the_hopper_stand_ins_comments_cite_no_run():
    import io
    import tokenize

    source = (HARNESS.parent / "hopper_stand_in.py").read_text()
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    prose = [(token.start[0], token.string) for token in tokens
             if token.type == tokenize.COMMENT or (token.type == tokenize.STRING and token.string.startswith('"""'))]
    assert len(prose) > 100
    assert [(line, text) for line, text in prose if RUN_CITATION.search(text)] == []
    assert RUN_CITATION.search("# 1.3x faster than the split kernel (results/logs/h200.log, 9a73185)")
