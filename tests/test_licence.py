"""The project's licence and its NOTICE: every problem file that follows GPU MODE's
reference-kernels is named there with the version it follows, each from before the repository's
licence changed from MIT (2026-06-09); the README points to both."""

import datetime
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPROCITY_LICENCE_FROM = datetime.date(2026, 6, 9)
ROW = re.compile(r"^(\S+)\s+(\S+/\S+.*?)\s+([0-9a-f]{7}), (\d{4}-\d\d-\d\d)$")


def notice_rows() -> dict[str, datetime.date]:
    rows = [ROW.match(line) for line in (ROOT / "NOTICE").read_text().splitlines()]
    return {row[1]: datetime.date.fromisoformat(row[4]) for row in rows if row}


def problem_files() -> set[str]:
    """The files of every built-in problem: the repository root's for nvfp4_gemm, a folder each
    for the others (Python modules, task.yml, the cases' files)."""
    root = {"reference.py", "task.py", "utils.py", "task.yml", "shapes/tests.txt", "shapes/benchmarks.txt"}
    folders = {str(path.relative_to(ROOT)) for path in (ROOT / "harness" / "problems").glob("nvfp4_*/*")
               if path.suffix in {".py", ".yml", ".txt"}}
    return root | folders


def test_the_project_is_under_the_mit_licence():
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")


def test_the_notice_names_every_problem_file_and_nothing_that_is_not_there():
    named = set(notice_rows())
    assert named == problem_files()


def test_every_file_follows_a_version_from_before_the_reciprocity_licence():
    dates = notice_rows()
    assert dates and max(dates.values()) < RECIPROCITY_LICENCE_FROM
    assert "June 9 Researcher Reciprocity License" in (ROOT / "NOTICE").read_text()


def test_the_readme_names_the_licence_and_the_notice():
    readme = (ROOT / "README.md").read_text()
    assert "[LICENSE](LICENSE)" in readme and "[NOTICE](NOTICE)" in readme
