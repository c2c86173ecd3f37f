"""--json: one JSON document on stdout for each command, the people's report on stderr."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TEMPLATE = FIXTURES / "template_torch_submission.py"
CASES = "m: 128; n: 256; k: 256; l: 1; seed: 1111\nm: 256; n: 128; k: 512; l: 2; seed: 7\n"
STATS_KEYS = {"runs", "mean_ns", "std_ns", "err_ns", "best_ns", "worst_ns"}


def run_json(*args: str, env_extra=None) -> tuple[int, dict, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}
    result = subprocess.run([sys.executable, "-m", "harness", *args, "--json"], cwd=ROOT, env={**env, **(env_extra or {})},
                            capture_output=True, text=True, timeout=600)
    return result.returncode, json.loads(result.stdout), result.stderr  # stdout is the document alone


def json_in_process(harness_in_process, *args: str) -> tuple[int, dict, str]:
    """run_json's answer for a command that ends before any run, from its main() in this process."""
    result = harness_in_process(*args, "--json")
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.fixture
def cases_file(tmp_path):
    path = tmp_path / "cases.txt"
    path.write_text(CASES)
    return path


@pytest.mark.e2e
def test_test_document_holds_every_case_and_the_verdict(cases_file):
    status, document, stderr = run_json("test", str(cases_file), "--device", "cpu", "--submission", str(TEMPLATE))
    assert status == document["exit_status"] == 0
    assert document["schema"] == "nvfp4-harness/1" and document["command"] == "test" and document["passed"] is True
    assert document["device"] == "cpu" and document["device_name"] == "cpu" and document["official"] is False
    assert [case["spec"] for case in document["cases"]] == CASES.splitlines()
    assert document["cases"][1]["shape"] == {"m": 256, "n": 128, "k": 512, "l": 2, "seed": 7}
    assert {case["status"] for case in document["cases"]} == {"pass"}
    assert "2 of 2 tests passed" in stderr


@pytest.mark.e2e
def test_a_failing_case_carries_its_message(cases_file):
    status, document, _ = run_json("test", str(cases_file), "--device", "cpu", "--submission", str(FIXTURES / "broken_wrong_values.py"))
    assert status == document["exit_status"] == 112 and document["passed"] is False
    first = document["cases"][0]
    assert first["status"] == "fail" and first["message"].startswith("mismatch found! custom implementation doesn't match reference")
    got, expected = re.search(r"ERROR AT \(0, 0, 0\): (\S+) (\S+)", first["competition_message"]).groups()
    assert f"ERROR AT (0, 0, 0): got {got}, expected {expected}" in first["message"]


def test_a_mismatch_is_labelled_in_message_and_kept_as_the_competition_wrote_it():
    from harness.results.document import run_document
    from harness.judge.jobs import FAIL, CaseResult
    from harness.judge.modes import RunOptions
    from harness.judge.record import RunRecord
    from harness.problems.shapes import parse_cases

    said = ("mismatch found! custom implementation doesn't match reference: Number of mismatched elements: 2 "
            "ERROR AT (0, 0, 0): -540.0 -949.5 ERROR AT (0, 1, 0): 12.25 234.75")
    cases = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1\n")
    for official in (False, True):
        record = RunRecord("test", cases, RunOptions(submission=TEMPLATE, device="cpu", official=official), [CaseResult(FAIL, said)])
        entry = run_document(record)["cases"][0]
        assert entry["competition_message"] == said
        if official:
            assert entry["message"] == said
        else:
            assert entry["message"].splitlines()[1:] == ["ERROR AT (0, 0, 0): got -540.0, expected -949.5",
                                                          "ERROR AT (0, 1, 0): got 12.25, expected 234.75"]


@pytest.mark.e2e
def test_benchmark_document_has_statistics_and_the_score(tmp_path):
    cases = tmp_path / "bench.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    status, document, _ = run_json("benchmark", str(cases), "--device", "cpu", "--max-repeats", "3", "--no-record",
                                   "--submission", str(TEMPLATE))
    assert status == 0 and document["command"] == "benchmark"
    case = document["cases"][0]
    assert set(case["stats"]) == STATS_KEYS and case["stats"]["runs"] == 3 and case["stats"]["mean_ns"] > 0
    assert document["score_ns"] == pytest.approx(case["stats"]["mean_ns"])
    assert document["ceilings"] is None and document["sol_geomean_ns"] is None  # no SOL on the CPU


@pytest.mark.e2e
def test_official_eval_stop_is_in_the_document(cases_file):
    status, document, _ = run_json("test", str(cases_file), "--device", "cpu", "--official", "--submission", str(FIXTURES / "broken_raises.py"))
    assert status == document["exit_status"] == 1
    assert document["passed"] is False and "RuntimeError: illegal tile configuration" in document["eval_stopped"]


def test_lint_document_lists_the_findings(harness_in_process):
    status, document, stderr = json_in_process(harness_in_process, "lint", "--submission", str(FIXTURES / "broken_uses_side_stream.py"))
    assert status == document["exit_status"] == 1 and document["passed"] is False
    levels = {finding["check"]: finding["level"] for finding in document["findings"]}
    assert levels["forbidden word"] == "fail" and levels["custom_kernel"] == "pass"
    assert "LINT FAIL" in stderr


@pytest.mark.e2e
def test_compile_document_lists_shapes_and_kernels():
    status, document, _ = run_json("compile", "--arch", "sm_100a", "--submission", str(FIXTURES / "template_cutedsl_submission.py"))
    assert status == 0 and document["passed"] is True and document["arch"] == "sm_100a"
    assert len(document["shapes"]) == 13 and all(shape["compiles"] == [0] for shape in document["shapes"])
    (kernel,) = document["kernels"]
    assert kernel["jit_function"] == "gemm" and kernel["registers"] > 0 and kernel["failures"] == []
    assert set(kernel["instructions"]) >= {"tcgen05.mma", "TMA load", "local memory"}


@pytest.mark.parametrize("args, exit_status, error", [
    (("test", "{tmp}/absent.txt", "--device", "cpu"), 113, "could not open tests file `{tmp}/absent.txt`"),
    (("test", "{tmp}/cases.txt", "--device", "cpu"), 113, "{tmp}/cases.txt:1: unknown key `sed`"),
    (("benchmark", "--device", "gpu"), 2, "Invalid value for '--device': 'gpu' is not cpu, cuda or cuda:N"),
    (("lint", "--submission", "{tmp}/absent.py"), 2, "Invalid value for '--submission': File '{tmp}/absent.py' does not exist."),
    pytest.param(("test", "--device", "cuda"), 114, "no CUDA device: ",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")),
    (("compile", "--arch", "sm_100a", "--submission", "{tmp}/no_kernel.py"), 1,
     "AttributeError: the submission defines no callable custom_kernel"),
])
def test_a_command_that_stops_early_still_writes_its_document(harness_in_process, tmp_path, args, exit_status, error):
    (tmp_path / "cases.txt").write_text("m: 128; n: 256; k: 256; l: 1; sed: 1\n")
    (tmp_path / "no_kernel.py").write_text("import torch\n\ndef kernel(data):\n    return data[-1]\n")
    status, document, _ = json_in_process(harness_in_process, *(arg.format(tmp=tmp_path) for arg in args))
    assert status == document["exit_status"] == exit_status
    assert document["schema"] == "nvfp4-harness/1" and document["command"] == args[0] and document["passed"] is False
    assert document["error"].startswith(error.format(tmp=tmp_path))


def test_json_and_popcorn_on_stdout_are_refused(harness_in_process, cases_file):
    result = harness_in_process("test", str(cases_file), "--device", "cpu", "--json", env={"POPCORN_FD": "1"})
    assert result.returncode == 2
    assert result.stderr.strip() == "error: --json and POPCORN_FD=1 would both write to stdout"


@pytest.mark.e2e
def test_profile_document_carries_each_shapes_table(tmp_path):
    cases = tmp_path / "profile.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    status, document, _ = run_json("profile", str(cases), "--device", "cpu", "--submission", str(TEMPLATE))
    assert status == 0 and document["command"] == "profile" and document["passed"] is True
    assert "aten::" in document["cases"][0]["profile_table"]


@pytest.mark.e2e
def test_an_error_carries_its_traceback_and_line_and_every_run_its_commit_phases_and_score(cases_file):
    status, document, _ = run_json("test", str(cases_file), "--device", "cpu", "--submission", str(FIXTURES / "broken_raises.py"))
    raised_line = next(number for number, line in enumerate((FIXTURES / "broken_raises.py").read_text().splitlines(), 1)
                       if line.strip().startswith("raise RuntimeError"))
    first = document["cases"][0]
    assert first["status"] == "error" and first["raised_at"] == {"file": str(FIXTURES / "broken_raises.py"), "line": raised_line}
    assert first["traceback"].startswith("Traceback (most recent call last):") and "harness/" not in first["traceback"]
    assert first["traceback"].rstrip().endswith("RuntimeError: illegal tile configuration 96x80 for this shape")
    assert document["score"] == 0.0 and document["passed_cases"] == 0
    assert re.fullmatch(r"[0-9a-f]{7}(-dirty)?", document["commit"])
    status, document, _ = run_json("test", str(cases_file), "--device", "cpu", "--submission", str(TEMPLATE))
    assert document["score"] == 1.0 and document["passed_cases"] == 2
    phases = document["cases"][0]["phases_s"]
    assert {"start", "references", "import", "first call"} <= set(phases) and all(seconds >= 0 for seconds in phases.values())
    assert sum(phases.values()) <= document["cases"][0]["wall_s"] + 0.01
    assert document["phases_s"]["first call"] == pytest.approx(sum(case["phases_s"]["first call"] for case in document["cases"]))
    assert "traceback" not in document["cases"][0]
