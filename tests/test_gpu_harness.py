"""The harness end to end on a GPU with the plain-torch submission (skipped without CUDA)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: end-to-end GPU runs of the harness need one")

ROOT = Path(__file__).resolve().parent.parent
TORCH_SUBMISSION = ROOT / "tests" / "fixtures" / "torch_submission.py"


def harness(*args):
    return subprocess.run([sys.executable, "-m", "harness", *args, "--submission", str(TORCH_SUBMISSION)], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_official_first_test_passes_on_cuda(tmp_path):
    cases = tmp_path / "tests.txt"
    cases.write_text("m: 128; n: 1536; k: 7168; l: 1; seed: 1111\n")
    result = harness("test", str(cases))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check: pass" in result.stdout


def test_leaderboard_with_measured_ceilings_reports_sol(tmp_path):
    cases = tmp_path / "bench.txt"
    cases.write_text("m: 128; n: 4096; k: 7168; l: 1; seed: 1111\n")
    result = harness("leaderboard", str(cases), "--max-repeats", "5", "--ceilings", "measured", "--no-record")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "% SOL" in output and "geomean" in output and "measured" in output
