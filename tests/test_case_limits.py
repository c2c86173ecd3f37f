"""What bounds a run end to end on the CPU: a file over the size limit is refused before anything
runs, kernelguard's reading counts in --wall-limit, a file that hangs or dies on every shape stops
the run after two cases, and a case's time limit counts the file's calls, not its worker's start."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
# Three shapes: a stop after the second case leaves the third `not run`.
THREE_SHAPES = ("m: 128; n: 256; k: 256; l: 1; seed: 1\nm: 256; n: 128; k: 256; l: 1; seed: 2\n"
                "m: 128; n: 512; k: 256; l: 1; seed: 3\n")
LIMIT_S = 600


def judged(tmp_path: Path, fixture: str | Path, *args: str, limit_s: float = LIMIT_S, device: str = "cpu") -> dict:
    tests_file = tmp_path / "cases.txt"
    tests_file.write_text(THREE_SHAPES)
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}
    submission = fixture if isinstance(fixture, Path) else FIXTURES / f"{fixture}.py"
    result = subprocess.run([sys.executable, "-m", "harness", "test", str(tests_file), "--device", device, "--json",
                             "--submission", str(submission), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=limit_s)
    document = json.loads(result.stdout)
    document["returncode"] = result.returncode
    return document


def statuses(document: dict) -> list[str]:
    return [case["status"] for case in document["cases"]]


@pytest.mark.e2e
@pytest.mark.parametrize("fixture, status, said", [
    ("broken_hangs", "timeout", "ran out of time"),
    ("broken_segfaults", "crash", "crashed alike"),
])
def test_a_file_that_hangs_or_crashes_on_every_shape_is_stopped_after_two_cases(tmp_path, fixture, status, said):
    document = judged(tmp_path, fixture, "--timeout", "3")
    assert document["returncode"] == 112, document
    assert statuses(document) == [status, status, "not run"], document
    assert said in document["cases"][2]["message"], document


@pytest.mark.e2e
def test_under_official_a_hanging_file_meets_every_case(tmp_path):
    """The competition's eval runs every case whatever the last one did."""
    document = judged(tmp_path, "broken_hangs", "--timeout", "3", "--official")
    assert statuses(document) == ["timeout"] * 3, document


@pytest.mark.e2e
def test_a_case_time_limit_shorter_than_a_workers_start_judges_a_correct_file(tmp_path):
    """The first case starts the worker (reused while its cases pass), whose start (the sandbox,
    the interpreter, torch's import) takes longer than this limit on a loaded machine; the file's
    own calls do not."""
    document = judged(tmp_path, "torch_submission", "--timeout", "2")
    assert document["returncode"] == 0, document
    assert statuses(document) == ["pass"] * 3, document
    first = document["cases"][0]["phases_s"]
    assert first["start"] > 0, first  # the start is measured apart, outside the case's limit


def with_a_constant(tmp_path: Path, constant: str) -> Path:
    """The torch fixture, which passes, with a module constant added."""
    path = tmp_path / "with_a_constant.py"
    path.write_text((FIXTURES / "torch_submission.py").read_text() + f"\nCONSTANT = '{constant}'\n")
    return path


def test_a_file_over_the_size_limit_is_refused_before_anything_runs(harness_in_process, tmp_path):
    from harness.judge.exits import EXIT_REJECTED

    tests_file = tmp_path / "cases.txt"
    tests_file.write_text(THREE_SHAPES)
    started = time.monotonic()
    result = harness_in_process("test", str(tests_file), "--device", "cpu", "--json",
                                "--submission", str(with_a_constant(tmp_path, "x" * 3_000_000)))
    document = json.loads(result.stdout)
    assert result.returncode == document["exit_status"] == EXIT_REJECTED, document
    assert "over the 1,000,000-byte limit" in document["error"] and "cases" not in document, document
    assert time.monotonic() - started < 60


@pytest.mark.e2e
def test_kernelguards_reading_counts_in_the_wall_limit(tmp_path):
    """A 100 KB word takes kernelguard far longer than the whole run may: its reading ends at the
    wall limit, unfinished, and no case is run."""
    started = time.monotonic()
    document = judged(tmp_path, with_a_constant(tmp_path, "0123456789abcdef" * 6400), "--wall-limit", "4", limit_s=300)
    assert time.monotonic() - started < 120
    assert document["precheck"]["unfinished"] == "did not finish within its 4 s limit", document["precheck"]
    assert statuses(document) == ["not run"] * 3, document
    assert "wall-time limit (4 s) is spent" in document["cases"][0]["message"], document


@pytest.mark.gpu
@pytest.mark.e2e
@pytest.mark.skipif(not torch.cuda.is_available(), reason="a worker's start on a GPU makes its CUDA context: needs a CUDA device")
def test_on_a_gpu_the_case_limit_leaves_out_the_start_and_a_hanging_file_stops_after_two_cases(tmp_path):
    """On a GPU a fresh worker's start also makes its device's context; the file's calls fit in
    a limit of 2 s all the same, and a file that hangs meets two cases' limits."""
    passed = judged(tmp_path, "torch_submission", "--timeout", "2", device="cuda")
    assert passed["returncode"] == 0 and statuses(passed) == ["pass"] * 3, passed
    hanging = judged(tmp_path, "broken_hangs", "--timeout", "3", device="cuda")
    assert statuses(hanging) == ["timeout", "timeout", "not run"], hanging
    assert "ran out of time" in hanging["cases"][2]["message"], hanging
