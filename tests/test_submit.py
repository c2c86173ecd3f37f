"""`submit` against a fake GPU MODE client that records how it was called."""

import dataclasses
import json
import subprocess
from datetime import datetime, timezone
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.problems import PROBLEMS
import harness.submitting.submit as submit

SUBMISSION = """#!POPCORN leaderboard nvfp4_gemm
#!POPCORN gpu NVIDIA
import torch


def custom_kernel(data):
    return data[-1]
"""

FAKE_CLIENT = """#!{python}
import json, pathlib, sys
args = sys.argv[1:]
if args[:2] == ["submit", "--help"]:
    print({help!r})
    sys.exit(0)
pathlib.Path({record!r}).write_text(json.dumps({{"argv0": sys.argv[0], "args": args}}))
if "--output" in args:
    pathlib.Path(args[args.index("--output") + 1]).write_text('{{"answer": "from the fake server"}}')
sys.exit({status})
"""

BEFORE_DEADLINE = datetime(2025, 12, 1, tzinfo=timezone.utc)
AFTER_DEADLINE = datetime(2025, 12, 21, 8, 0, tzinfo=timezone.utc)

NEW_HELP = "Usage: popcorn submit [OPTIONS] [FILEPATH]\n      --no-tui  Skip the TUI"
OLD_HELP = "Usage: popcorn-cli submit [OPTIONS] [FILEPATH]\n      --output <OUTPUT>"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "submission.py").write_text(SUBMISSION)
    (tmp_path / "bin").mkdir()
    monkeypatch.setattr(submit, "local_gpu", lambda: None)
    monkeypatch.setattr(submit, "utc_now", lambda: BEFORE_DEADLINE)
    return tmp_path


def install_client(workdir: Path, name: str = "popcorn", help_text: str = NEW_HELP, status: int = 0) -> Path:
    record = workdir / f"{name}.calls.json"
    script = workdir / "bin" / name
    script.write_text(
        FAKE_CLIENT.format(python=sys.executable, help=help_text, record=str(record), status=status)
    )
    script.chmod(0o755)
    return record


def run_submit(workdir: Path, *args: str):
    env = {"PATH": str(workdir / "bin"), "COLUMNS": "200", "POPCORN_API_URL": "http://fake"}
    return CliRunner().invoke(submit.submit_command, list(args), env=env)


def test_lint_then_client_with_the_leaderboard_command(workdir):
    record = install_client(workdir)
    result = run_submit(workdir)
    assert result.exit_code == 0, result.output
    call = json.loads(record.read_text())
    assert Path(call["argv0"]).name == "popcorn"
    output = call["args"][call["args"].index("--output") + 1]
    assert call["args"] == [
        "submit", "--leaderboard", "nvfp4_gemm", "--gpu", "NVIDIA", "--mode", "leaderboard",
        "--no-tui", "--output", output, "submission.py",
    ]
    assert Path(output).parent == Path("results") and output.endswith(".json")
    assert json.loads((workdir / output).read_text()) == {"answer": "from the fake server"}
    assert "LINT PASS" in result.output
    assert "local test skipped" in result.output and "no CUDA device" in result.output
    assert f"server's answer kept in {output}" in result.output


def test_mode_and_output_are_passed_through(workdir):
    record = install_client(workdir)
    result = run_submit(workdir, "--mode", "test", "--output", "results/mine.json")
    assert result.exit_code == 0, result.output
    args = json.loads(record.read_text())["args"]
    assert args[args.index("--mode") + 1] == "test"
    assert args[args.index("--output") + 1] == "results/mine.json"
    assert (workdir / "results" / "mine.json").exists()


def test_older_client_without_no_tui_is_called_without_it(workdir):
    record = install_client(workdir, name="popcorn-cli", help_text=OLD_HELP)
    result = run_submit(workdir)
    assert result.exit_code == 0, result.output
    call = json.loads(record.read_text())
    assert Path(call["argv0"]).name == "popcorn-cli"
    assert "--no-tui" not in call["args"]
    assert call["args"][-1] == "submission.py"


def test_lint_failure_stops_before_the_client(workdir):
    record = install_client(workdir)
    (workdir / "submission.py").write_text(SUBMISSION + "# uses a side stream\n")
    result = run_submit(workdir)
    assert result.exit_code == 1
    assert "LINT FAIL" in result.output and "not submitted" in result.output
    assert not record.exists()


def test_missing_client_says_what_to_install(workdir):
    result = run_submit(workdir)
    assert result.exit_code == 127
    assert "popcorn) is not on PATH" in result.output
    assert "install.sh" in result.output and "popcorn register discord" in result.output


def test_client_failure_is_passed_on(workdir):
    install_client(workdir, status=3)
    result = run_submit(workdir)
    assert result.exit_code == 3
    assert "the client failed (exit status 3)" in result.output


def test_local_test_runs_first_on_a_gpu_and_a_failure_stops_the_submission(workdir, monkeypatch):
    record = install_client(workdir)
    monkeypatch.setattr(submit, "local_gpu", lambda: "Fake GPU")
    harness_calls = []
    real_run = subprocess.run

    def fake_harness_run(command, *args, **kwargs):
        if command[:3] == [sys.executable, "-m", "harness"]:  # lint's kernelguard runs in a process of its own too
            harness_calls.append(command)
            return subprocess.CompletedProcess(command, 1)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(submit.subprocess, "run", fake_harness_run)
    result = run_submit(workdir)
    assert harness_calls == [[sys.executable, "-m", "harness", "test", "--submission", "submission.py", "--problem", "nvfp4_gemm"]]
    assert result.exit_code == 1
    assert "local test on Fake GPU" in result.output
    assert "the local test failed (exit status 1)" in result.output
    assert not record.exists()


def test_skip_local_test_is_stated(workdir, monkeypatch):
    install_client(workdir)
    monkeypatch.setattr(submit, "local_gpu", lambda: pytest.fail("local GPU probed despite the skip"))
    result = run_submit(workdir, "--skip-local-test")
    assert result.exit_code == 0, result.output
    assert "local test skipped: --skip-local-test" in result.output



def test_after_the_deadline_nothing_is_sent_and_it_says_why(workdir, monkeypatch):
    record = install_client(workdir)
    monkeypatch.setattr(submit, "utc_now", lambda: AFTER_DEADLINE)
    result = run_submit(workdir)
    assert result.exit_code == submit.EXIT_CLOSED
    assert "not submitted: the nvfp4_gemm leaderboard closed on 2025-12-21 07:59 UTC" in result.output
    assert "LINT" not in result.output  # said before anything else runs
    assert not record.exists()


def test_after_deadline_sends_anyway_when_asked(workdir, monkeypatch):
    record = install_client(workdir)
    monkeypatch.setattr(submit, "utc_now", lambda: AFTER_DEADLINE)
    result = run_submit(workdir, "--after-deadline")
    assert result.exit_code == 0, result.output
    assert "closed on 2025-12-21 07:59 UTC: sending anyway" in result.output
    assert record.exists()


def test_the_real_clock_is_past_this_leaderboards_deadline():
    gemm = PROBLEMS["nvfp4_gemm"]
    assert submit.closed_since(gemm, submit.utc_now()) == datetime(2025, 12, 21, 7, 59, tzinfo=timezone.utc)
    assert submit.closed_since(gemm, BEFORE_DEADLINE) is None
    assert submit.closed_since(dataclasses.replace(gemm, deadline=None), AFTER_DEADLINE) is None


def test_another_problem_is_sent_to_its_own_leaderboard_and_closes_on_its_own_deadline(workdir, monkeypatch):
    record = install_client(workdir)
    (workdir / "submission.py").write_text(SUBMISSION.replace("nvfp4_gemm", "nvfp4_group_gemm"))
    monkeypatch.setattr(submit, "utc_now", lambda: datetime(2026, 2, 1, tzinfo=timezone.utc))  # gemm's closed, grouped's open
    result = run_submit(workdir, "--problem", "nvfp4_group_gemm", "--skip-local-test")
    assert result.exit_code == 0, result.output
    args = json.loads(record.read_text())["args"]
    assert args[args.index("--leaderboard") + 1] == "nvfp4_group_gemm"
    monkeypatch.setattr(submit, "utc_now", lambda: datetime(2026, 2, 22, tzinfo=timezone.utc))
    result = run_submit(workdir, "--problem", "nvfp4_group_gemm", "--skip-local-test")
    assert result.exit_code == submit.EXIT_CLOSED
    assert "the nvfp4_group_gemm leaderboard closed on 2026-02-21 07:30 UTC" in result.output
