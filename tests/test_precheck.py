"""The static check bounded: a file over the competition's size limit is refused before anything
reads it, and kernelguard, whose time grows faster than a file's length, gives a verdict within
its time limit whatever the text, in a process of its own, started for the file or ahead of it."""

import os
import signal
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from harness.judge import precheck as precheck_module
from harness.judge.precheck import UNFINISHED, ReaderAhead, precheck
from harness.submitting.lint import FAIL, MAX_BYTES, PASS, WARN, failed, lint_bytes, lint_file

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
HONEST = (FIXTURES / "torch_submission.py").read_text()
# kernelguard's limit in these tests, and the time each may take beyond it: bounds on meaning,
# not timings (a process start and an interpreter's on a loaded machine).
LIMIT_S = 5.0
SLACK_S = 30.0
# A word (letters, digits, underscores) just short of the size limit: a hex blob's shape, on
# which kernelguard's regular expressions take time with the square of the word's length.
LONG_WORD = HONEST + "BLOB = '" + "0123456789abcdef" * ((MAX_BYTES - len(HONEST) - 16) // 16) + "'\n"
# A string constant three times the size limit.
THREE_MEGABYTES = HONEST + "TABLE = '" + "x" * 3_000_000 + "'\n"


def timed(function, *args):
    started = time.monotonic()
    return function(*args), time.monotonic() - started


def by_check(findings) -> dict:
    return {finding.check: finding for finding in findings}


def test_a_file_over_the_size_limit_gets_that_finding_alone_and_at_once(tmp_path):
    findings, elapsed_s = timed(lint_bytes, THREE_MEGABYTES.encode())
    assert [(f.check, f.level) for f in findings] == [("size", FAIL)] and "over the 1,000,000-byte limit" in findings[0].detail
    path = tmp_path / "big.py"
    path.write_text(THREE_MEGABYTES)
    assert lint_file(path) == findings
    assert elapsed_s < SLACK_S


@pytest.mark.e2e  # seconds of real processes: the e2e suite's, keeping the fast one short
def test_a_megabyte_word_gets_a_verdict_within_the_limit_and_the_other_checks_theirs(monkeypatch):
    """The honest file's checks all as without the word; kernelguard's unfinished reading warns,
    and under --strict fails, naming its limit."""
    monkeypatch.setattr(precheck_module, "LIMIT_S", LIMIT_S)
    assert len(LONG_WORD.encode()) <= MAX_BYTES
    findings, elapsed_s = timed(lint_bytes, LONG_WORD.encode())
    assert elapsed_s < LIMIT_S + SLACK_S
    found, honest = by_check(findings), by_check(lint_bytes(HONEST.encode()))
    assert set(found) == set(honest)
    assert {check: f.level for check, f in found.items() if check not in ("kernelguard", "size")} == \
        {check: f.level for check, f in honest.items() if check not in ("kernelguard", "size")}
    assert found["size"].level == PASS and honest["kernelguard"].level == PASS
    assert found["kernelguard"].level == WARN and f"did not finish within its {LIMIT_S:g} s limit" in found["kernelguard"].detail
    assert not failed(findings)
    assert by_check(lint_bytes(LONG_WORD.encode(), strict=True))["kernelguard"].level == FAIL


@pytest.mark.parametrize("fixture", ["torch_submission", "template_torch_submission", "cheat_fakes_the_clock",
                                     "cheat_rewrites_the_captured_clock"])
def test_kernelguard_in_its_own_process_reads_as_in_the_judges(fixture):
    """The classification and the rules kernelguard's own call gives, hits and notes alike."""
    import kernelguard

    source = (FIXTURES / f"{fixture}.py").read_text()
    own = kernelguard.analyze_code(source, compute_structural_hash=False)
    found = precheck(source)
    assert found.classification == own["classification"] and not found.unfinished
    assert sorted(str(signal) for signal in found.hits + found.notes) == \
        sorted(f"{match['pattern']} ({match.get('evidence', '')})" for match in own["matched_patterns"] if match.get("field") == "code")
    assert bool(found.refusal) == (own["classification"] in ("hacked", "suspicious"))


def test_kernelguard_is_read_from_where_the_judge_found_it_a_pythonpath_entry_included(tmp_path, monkeypatch):
    # A kernelguard reachable only through the judge's import path (PYTHONPATH, a vendored folder):
    # the isolated reader takes the judge's path, not the interpreter's own.
    (tmp_path / "kernelguard.py").write_text(
        "def analyze_code(code, compute_structural_hash=False):\n"
        "    return {'classification': 'read-by-the-judges-own', 'matched_patterns': []}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert precheck("x = 1\n").classification == "read-by-the-judges-own"


def test_a_module_in_the_judges_working_folder_is_never_the_readers(tmp_path, monkeypatch):
    # `python -m harness` puts the working folder first on the judge's import path, where the file
    # judged may lie: named kernelguard.py (or json.py), the reader, root, would run it unsandboxed.
    for name in ("kernelguard", "json"):
        (tmp_path / f"{name}.py").write_text(f"open({str(tmp_path / name)!r} + '.ran', 'w').close()\n"
                                             "def analyze_code(code, compute_structural_hash=False):\n"
                                             "    return {'classification': 'valid', 'matched_patterns': []}\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    flagged = "import torch\ntorch.cuda.Event.elapsed_time = lambda start, end: 0.0\n"
    assert precheck(flagged).classification == "hacked"
    assert sorted(path.name for path in tmp_path.glob("*.ran")) == []


def test_an_unfinished_reading_is_a_refusal_under_strict():
    found = precheck("x = " + "1" * 200_000 + "\n", 0.5)
    assert found.classification == UNFINISHED and found.unfinished == "did not finish within its 0.5 s limit"
    assert found.refusal == "kernelguard did not finish within its 0.5 s limit" and not found.hits


# Text an attacker chooses: any characters, and long runs of one (words, digits, spaces, quotes).
ANY_TEXT = st.one_of(
    st.text(max_size=3000),
    st.builds(lambda head, run, count, tail: head + run * count + tail,
              st.text(max_size=200), st.sampled_from(["a", "1", "_", " ", "'", "\n", "(", "#", "x = ", "ab+/"]),
              st.integers(min_value=0, max_value=60_000), st.text(max_size=200)),
)


@pytest.mark.e2e  # a kernelguard process an example: the e2e suite's
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_TEXT)
def test_kernelguard_gives_a_verdict_within_its_limit_whatever_the_text(text):
    found, elapsed_s = timed(precheck, text, LIMIT_S)
    assert elapsed_s < LIMIT_S + SLACK_S
    assert found.classification in {"valid", "low_confidence", "suspicious", "hacked", UNFINISHED}, found
    assert bool(found.unfinished) == (found.classification == UNFINISHED)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=3000), ANY_TEXT.map(lambda text: text.encode("utf-8", "replace"))))
def test_lint_gives_every_check_a_verdict_whatever_the_bytes(data):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(precheck_module, "LIMIT_S", LIMIT_S)
        findings, elapsed_s = timed(lint_bytes, data)
    assert elapsed_s < LIMIT_S + SLACK_S
    assert findings[0].check == "size" and all(f.level in (PASS, WARN, FAIL) for f in findings)
    assert failed(findings) or findings[-1].check == "kernelguard"


def test_a_reader_started_ahead_reads_one_file_as_a_fresh_one_and_the_next_is_another():
    """The service's judge hands each candidate's file to a kernelguard process started before
    the file was known: it reads as one started for the file, reads that file alone, and the
    next file goes to another process."""
    ahead = ReaderAhead()
    try:
        waiting = ahead.pids
        assert len(waiting) == 1 and all(Path(f"/proc/{pid}").exists() for pid in waiting)
        taken = []

        def take():
            taken.append(ahead.take())
            return taken[-1]

        for fixture in ("torch_submission", "cheat_fakes_the_clock"):
            source = (FIXTURES / f"{fixture}.py").read_text()
            assert precheck(source, reader=take).fields() == precheck(source).fields()
        assert taken[0].pid in waiting and taken[0].pid != taken[1].pid
        assert all(process.returncode is not None for process in taken)  # each ended with its one file
        assert ahead.pids and ahead.pids.isdisjoint(process.pid for process in taken)
    finally:
        ahead.close()
    assert not ahead.pids


def test_a_reader_that_ended_while_it_waited_is_replaced_and_never_a_files_reading():
    """A waiting kernelguard process that died (killed, out of memory) is the machine's fault:
    the file goes to a fresh process and gets its true reading, never `unfinished`."""
    ahead = ReaderAhead()
    try:
        (pid,) = ahead.pids
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        given = []
        found = precheck(HONEST, reader=lambda: given.append(ahead.take()) or given[-1])
        assert given[0].pid != pid and found.classification != UNFINISHED and not found.unfinished
        assert found.fields() == precheck(HONEST).fields()
    finally:
        ahead.close()


@pytest.mark.e2e  # two kernelguard processes an example: the e2e suite's
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ANY_TEXT)
def test_a_reader_started_ahead_reads_any_text_as_a_fresh_one(text):
    ahead = ReaderAhead()
    try:
        ahead_found = precheck(text, LIMIT_S, reader=ahead.take)
    finally:
        ahead.close()
    fresh = precheck(text, LIMIT_S)
    assert ahead_found.classification in {"valid", "low_confidence", "suspicious", "hacked", UNFINISHED}
    if UNFINISHED not in (ahead_found.classification, fresh.classification):  # a time limit's reading may differ by load
        assert ahead_found.fields() == fresh.fields()
