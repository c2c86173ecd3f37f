import subprocess

import pandas
import pytest

from harness.judge.jobs import FAIL, PASS, CaseResult
from harness.problems import PROBLEMS
from harness.problems.shapes import parse_cases
from harness.problems.sol import DEVICES
from harness.results.rows import append_rows, rows_for_run
from harness.shared.stats import calculate_stats

CASES = parse_cases("m: 128; n: 7168; k: 16384; l: 1; seed: 1111\nm: 128; n: 4096; k: 7168; l: 1; seed: 1111\n")


def results():
    passed = CaseResult(PASS, stats=calculate_stats([20000.0, 22000.0, 21000.0]), host_ns=9000.0, device_name="NVIDIA B200")
    failed = CaseResult(FAIL, "mismatch", device_name="NVIDIA B200")
    return [passed, failed]


def test_rows_carry_stats_sol_and_provenance(tmp_path):
    submission = tmp_path / "submission.py"
    submission.write_text("def custom_kernel(data):\n    return data[-1]\n")
    works = [PROBLEMS["nvfp4_gemm"].work(case.args) for case in CASES]
    rows = rows_for_run(CASES, results(), works, "benchmark", str(submission), DEVICES["B200"], "table", None, PROBLEMS["nvfp4_gemm"])
    first, second = rows
    assert first["mean_ns"] == 21000.0 and first["runs"] == 3 and first["host_ns"] == 9000.0
    assert first["sol_ns"] == pytest.approx(8994, abs=0.5)
    assert first["pct_sol"] == pytest.approx(100 * first["sol_ns"] / 21000.0)
    assert len(first["submission_sha256"]) == 64 and first["device"] == "NVIDIA B200"
    assert second["status"] == "fail" and "mean_ns" not in second


def test_append_keeps_old_rows_and_adds_new_columns(tmp_path):
    path = tmp_path / "runs.csv"
    append_rows([{"time": "t0", "mean_ns": 1.0}], path)
    append_rows([{"time": "t1", "mean_ns": 2.0, "cublas_bf16_ns": 3.0}], path)
    table = pandas.read_csv(path)
    assert list(table["time"]) == ["t0", "t1"]
    assert table["cublas_bf16_ns"].isna().tolist() == [True, False]


def test_append_leaves_earlier_rows_byte_for_byte(tmp_path):
    """Counts stay counts and float digits stay as written, through appends with the same
    columns and with new ones."""
    path = tmp_path / "runs.csv"
    path.write_text("time,runs,mean_ns\nt0,3,185.39588240154572\nt1,,0.1\n")
    before = path.read_text()
    append_rows([{"time": "t2", "runs": 5, "mean_ns": 2.5}], path)
    assert path.read_text() == before + "t2,5,2.5\n"
    append_rows([{"time": "t3", "runs": 7, "mean_ns": 1.0, "host_ns": 9.0}], path)
    lines = path.read_text().splitlines()
    assert lines == ["time,runs,mean_ns,host_ns", "t0,3,185.39588240154572,", "t1,,0.1,", "t2,5,2.5,",
                     "t3,7,1.0,9.0"]


def test_commit_can_be_named_where_git_history_is_missing(monkeypatch):
    from harness.results.rows import git_commit

    monkeypatch.setenv("HARNESS_COMMIT", "abc123")
    assert git_commit() == "abc123"
    monkeypatch.delenv("HARNESS_COMMIT")
    assert git_commit() != "abc123"


def test_your_runs_file_is_ignored_and_the_reference_file_is_tracked():
    """A user's first recorded run must not mark every later row `-dirty`: neither the store nor
    its CSV export is tracked."""
    from harness.results.rows import REFERENCE_CSV, RESULTS_CSV
    from harness.results.store import DEFAULT_PATH

    root = RESULTS_CSV.parent.parent
    if not (root / ".git").exists():
        pytest.skip("not a git checkout: nothing decides what is tracked")
    ignored = [subprocess.run(["git", "check-ignore", "-q", str(path)], cwd=root).returncode for path in (RESULTS_CSV, DEFAULT_PATH)]
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", str(REFERENCE_CSV)], cwd=root, capture_output=True)
    assert ignored == [0, 0] and tracked.returncode == 0


def test_rows_appended_to_an_empty_file_start_it_with_its_header(tmp_path):
    """An empty runs file (truncated, or made by hand) is a new one, not a run's failure."""
    path = tmp_path / "runs.csv"
    path.write_text("")
    append_rows([{"a": 1, "b": "x"}], path)
    assert path.read_text().splitlines() == ["a,b", "1,x"]


def test_a_commit_is_recorded_at_the_length_every_output_prints(tmp_path, monkeypatch):
    """git_commit of a repository (clean, then with a tracked file changed): the hash's first
    seven characters, with `-dirty` after them; `compare` prints older rows' longer hashes at the
    same length."""
    import subprocess

    from harness.results.rows import COMMIT_CHARACTERS, git_commit, short_commit

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    monkeypatch.delenv("HARNESS_COMMIT", raising=False)
    git("init", "-q")
    (tmp_path / "file").write_text("one")
    git("add", "file")
    git("commit", "-q", "-m", "one")
    full = git("rev-parse", "HEAD")
    assert git_commit(tmp_path) == full[:COMMIT_CHARACTERS] == full[:7]
    (tmp_path / "file").write_text("two")
    assert git_commit(tmp_path) == f"{full[:7]}-dirty"
    assert short_commit(f"{full[:12]}-dirty") == f"{full[:7]}-dirty"
    assert short_commit(full[:12]) == short_commit(full[:7]) == full[:7]
