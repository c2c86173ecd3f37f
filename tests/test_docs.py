"""The documents stay navigable: every relative link in README.md, shapes/README.md, docs/ and
docs/problems/ reaches a file (and, where it names one, a heading of that file), every page is
reached from the README or the problems' index, and the README stays a guide, not a notebook."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", ROOT / "shapes" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "docs" / "problems").glob("*.md"))]
README_MAX_LINES = 320

_FENCED_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.MULTILINE)


def heading_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCED_BLOCK.sub("", path.read_text())
    return {heading_anchor(heading) for heading in _HEADING.findall(text)}


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file whose file, or whose heading, does not exist."""
    broken = []
    for target in _LINK.findall(_FENCED_BLOCK.sub("", path.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading in {linked.name})")
    return broken


def test_the_documents_exist():
    assert (ROOT / "docs").is_dir() and len(DOCUMENTS) > 3


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(document):
    assert broken_links(document) == []


def test_every_docs_page_is_linked_from_the_readme():
    readme_links = {target.partition("#")[0] for target in _LINK.findall((ROOT / "README.md").read_text())}
    unlinked = [page.name for page in sorted((ROOT / "docs").glob("*.md")) if f"docs/{page.name}" not in readme_links]
    assert unlinked == []


def test_every_problem_page_is_linked_from_the_problems_index():
    index = ROOT / "docs" / "problems" / "README.md"
    linked = {target.partition("#")[0] for target in _LINK.findall(index.read_text())}
    pages = [page.name for page in sorted(index.parent.glob("*.md")) if page != index]
    assert pages and [name for name in pages if name not in linked] == []


def test_the_readme_stays_a_guide():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines < README_MAX_LINES, f"README.md has {lines} lines; move depth to docs/"


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# A heading\n\n## `--json` and more\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[fine](other.md) [fine too](other.md#a-heading) [code](other.md#--json-and-more) [web](https://example.com)\n"
        "[gone](missing.md) [no heading](other.md#nowhere)\n"
        "```\n[inside a code block](ignored.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md (no such file)", "other.md#nowhere (no such heading in other.md)"]


MAKE_TEST_ROW = re.compile(r"^\| `make test` \(two processes\), the machine otherwise idle \| (\d{4}-\d\d-\d\d), ([0-9a-f]{7}) \| "
                           r"(\d+ min )?\d+ s, (\d+) passed, (\d+) skipped \|$", re.MULTILINE)


def test_the_make_test_figure_is_one_row_of_figures_md_which_the_readme_cites():
    """Refreshing `make test`'s figure is editing one row: the README repeats none of its numbers."""
    figures = (ROOT / "docs" / "figures.md").read_text()
    assert len(MAKE_TEST_ROW.findall(figures)) == 1
    readme = (ROOT / "README.md").read_text()
    assert "docs/figures.md#the-kit-on-a-2-core-machine-without-gpu" in readme
    assert not re.search(r"\d+ passed", readme)


JUDGE_MAX_WORDS = 4500
FIXTURES = ROOT / "tests" / "fixtures"
# A fixture as docs/judge.md names it: a broken, cheating, honest or borderline file, or one of the
# sandbox's probes, by its module name.
_FIXTURE_NAME = re.compile(r"`((?:sandbox/)?(?:broken|cheat|honest|borderline|probe|hops)_\w+)(?:\.py)?`")


def test_judge_md_stays_a_design_reference():
    """What reviews found and when goes to docs/history.md, measured figures to docs/figures.md."""
    words = len((ROOT / "docs" / "judge.md").read_text().split())
    assert words <= JUDGE_MAX_WORDS, f"docs/judge.md has {words} words; move narrative to docs/history.md"


def named_fixtures(text: str) -> set[str]:
    return set(_FIXTURE_NAME.findall(text))


def test_every_fixture_judge_md_names_exists_and_every_fixture_is_in_its_threat_table():
    judge = (ROOT / "docs" / "judge.md").read_text()
    table = judge[judge.index("| threat | defence | fixtures |"):]
    table = table[:table.index("\n\n")]
    missing = sorted(name for name in named_fixtures(judge) if not (FIXTURES / f"{name}.py").is_file())
    assert missing == []
    on_disk = {path.stem for path in FIXTURES.glob("*.py") if _FIXTURE_NAME.fullmatch(f"`{path.stem}`")}
    on_disk |= {f"sandbox/{path.stem}" for path in (FIXTURES / "sandbox").glob("*.py")}
    assert on_disk and sorted(on_disk - named_fixtures(table)) == []


def test_the_fixture_names_are_found_as_judge_md_writes_them():
    assert named_fixtures("`cheat_memoizes_on_a`, `broken_hangs.py` (GPU), `sandbox/probe_escape`, `harness/wire.py`") == {
        "cheat_memoizes_on_a", "broken_hangs", "sandbox/probe_escape"}


# Code whose comments describe it as it is: a measurement there goes stale with each retune, so a
# comment cites its row of docs/figures.md instead of repeating its date, log or figure.
COMMENTED_CODE = [*sorted((ROOT / "harness").rglob("*.py")), ROOT / "submission.py", ROOT / "hopper_stand_in.py"]
_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
_LOG = re.compile(r"results/logs/")
_TIME_FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:\s*(?:-|to)\s*\d+(?:\.\d+)?)?\s*(?:ns|us|µs|ms|s|min)\b")
# What makes a time a run's figure rather than a limit the code sets: it was measured, on a device.
_MEASURED = re.compile(r"\b(?:measured|took|seen|timed at|probed)\b|"
                       r"\bon (?:an? |one |two |four |eight )?(?:NVIDIA )?[A-Z]\d{3}s?\b", re.IGNORECASE)


def comment_blocks(source: str) -> list[tuple[int, str]]:
    """(first line, text) of each run of whole-line comments, each comment after code, and each
    docstring-like string."""
    import io
    import tokenize

    blocks: list[tuple[int, list[str]]] = []
    last_whole_line_comment = None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            whole_line = token.line.lstrip().startswith("#")
            if whole_line and blocks and last_whole_line_comment == token.start[0] - 1:
                blocks[-1][1].append(token.string)
            else:
                blocks.append((token.start[0], [token.string]))
            last_whole_line_comment = token.start[0] if whole_line else None
        elif token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            blocks.append((token.start[0], [token.string]))
    return [(line, " ".join(" ".join(parts).split())) for line, parts in blocks]


def run_figures_in_comments(source: str) -> list[str]:
    found = []
    for line, text in comment_blocks(source):
        figure = _TIME_FIGURE.search(text)
        for what, match in (("a date", _DATE.search(text)), ("a log", _LOG.search(text)),
                            ("a measured time", figure if figure and _MEASURED.search(text) else None)):
            if match:
                found.append(f"line {line}: {what}, {match.group()!r}")
    return found


@pytest.mark.parametrize("path", COMMENTED_CODE, ids=lambda path: str(path.relative_to(ROOT)))
def test_comments_cite_a_figures_row_instead_of_a_runs_date_log_or_time(path):
    assert run_figures_in_comments(path.read_text()) == []


def test_the_comment_check_finds_a_runs_figures_and_leaves_the_codes_limits():
    source = '''"""The reply's reader: measured on an H200, 2.5 ms a message."""
LIMIT_S = 120  # a worker's start may take up to 120 s
# On an NVIDIA H100 the flush took 9.5 ms
# against 17.2 ms beside a side stream.
FLOOR_NS = 1e8  # 100 ms of wall time before the rule may stop
# The hand-off, results/logs/2026-11-25-h100-pdl.log.
'''
    assert run_figures_in_comments(source) == [
        "line 1: a measured time, '2.5 ms'", "line 3: a measured time, '9.5 ms'",
        "line 6: a date, '2026-11-25'", "line 6: a log, 'results/logs/'"]
