"""The harness end to end on a GPU with the plain-torch submission (skipped without CUDA)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: end-to-end GPU runs of the harness need one")]

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


def test_benchmark_baselines_time_cublas_torch_and_an_empty_cutedsl_call(tmp_path):
    pytest.importorskip("cutlass", reason="the empty-call baseline is a CuTeDSL kernel: needs nvidia-cutlass-dsl")
    cases = tmp_path / "bench.txt"
    cases.write_text("m: 128; n: 1536; k: 512; l: 1; seed: 1111\n")
    result = harness("benchmark", str(cases), "--baselines", "--max-repeats", "3", "--no-record")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    table = output[output.index("baselines (same inputs"):]
    row = next(line for line in table.splitlines() if "128x1536x512" in line)
    cells = [cell.strip() for cell in row.strip().strip("│").split("│")]
    assert cells[0] == "128x1536x512" and len(cells) == 9, row
    # submission, cuBLAS, torch, floor, two ratios, host time, the empty call's host time: all measured
    assert all(float(cell) > 0 for cell in cells[1:]), row


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason="needs two CUDA devices: with one, a case's device is always the current one")
def test_a_case_runs_with_its_device_current(tmp_path):
    """`--device cuda:N` makes cuda:N the current device in the worker, as the competition's
    device is: otherwise a kernel launched without naming a device, and the timing events,
    would run on device 0 while the inputs live on N."""
    submission = tmp_path / "current_device_only.py"
    submission.write_text(
        "import torch\n"
        "from reference import ref_kernel\n\n\n"
        "def custom_kernel(data):\n"
        "    c = data[-1]\n"
        "    if c.get_device() != torch.cuda.current_device():\n"
        "        raise RuntimeError(f'inputs on cuda:{c.get_device()}, current device cuda:{torch.cuda.current_device()}')\n"
        "    return c.copy_(ref_kernel(data))\n")
    cases = tmp_path / "tests.txt"
    cases.write_text("m: 128; n: 256; k: 512; l: 1; seed: 1111\n")
    last = f"cuda:{torch.cuda.device_count() - 1}"
    for mode_args in (["test"], ["benchmark", "--max-repeats", "3", "--no-record"]):
        result = subprocess.run([sys.executable, "-m", "harness", *mode_args, str(cases), "--device", last,
                                 "--submission", str(submission)], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr


def test_a_device_the_machine_lacks_is_refused_before_any_case():
    result = harness("test", "--device", f"cuda:{torch.cuda.device_count()}")
    assert result.returncode == 114, result.stdout + result.stderr
    assert f"no CUDA device {torch.cuda.device_count()}" in result.stderr


def test_the_sanitizer_write_back_leaves_every_shared_byte_as_it_was():
    """Under `make sanitize` the worker copies the inputs the judge shares to the host and back
    (harness/runner/calls.py): every byte of every storage, views and fp4 included, unchanged."""
    from harness.runner.calls import _write_back_shared_memory
    from reference import generate_input

    def storage_bytes(tensor):
        return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage()).clone()

    data_list = [generate_input(128, 256, 512, 2, seed, device="cuda") for seed in (5, 6)]
    before = [[storage_bytes(tensor) for tensor in data] for data in data_list]
    assert any(bool(b.any()) for data in before for b in data)  # not all zeros
    _write_back_shared_memory(data_list)
    for data, saved in zip(data_list, before):
        for tensor, expected in zip(data, saved):
            assert torch.equal(storage_bytes(tensor), expected)
