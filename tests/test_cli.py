"""The command line as a user meets it: arguments refused up front, progress in a log."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.stats import StoppingRule

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "tests" / "fixtures" / "template_torch_submission.py"


def harness(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, said", [
    (("test", "--device", "gpu"), "Invalid value for '--device': 'gpu' is not cpu, cuda or cuda:N"),
    (("test", "--device", "cpu:3"), "Invalid value for '--device': 'cpu:3' is not cpu, cuda or cuda:N"),
    (("benchmark", "--timeout", "-1"), "Invalid value for '--timeout': -1.0 is not in the range x>0."),
    (("test", "--max-repeats", "5"), "No such option '--max-repeats'."),  # it would do nothing there
    (("profile", "--max-repeats", "5"), "No such option '--max-repeats'."),
])
def test_bad_arguments_get_one_line_and_exit_2_before_any_worker(args, said):
    result = harness(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {said}"]
    assert result.stdout == ""


@pytest.mark.e2e
def test_a_piped_benchmark_logs_a_line_per_phase_with_the_round_cap(tmp_path):
    cases = tmp_path / "cases.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    result = harness("benchmark", str(cases), "--device", "cpu", "--no-record", "--max-repeats", "5",
                     "--submission", str(TEMPLATE))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    prefix = "  benchmark 0: 128x256x256: "
    phases = [line.removeprefix(prefix) for line in lines if line.startswith(prefix)]
    assert phases[:4] == ["generating inputs", "correctness pass", "importing submission", "warm-up"]
    assert any(phase.startswith("timing, round 1 of at most 5, at most ") for phase in phases), phases
    assert "recheck on fresh inputs" in phases
    # On the CPU the host time would repeat the mean: the column shows none.
    row = next(line for line in lines if line.startswith("│ 128x256x256"))
    assert [cell.strip() for cell in row.split("│")][7] == "-"
    assert "use --ceilings measured" not in result.stdout and "no speed-of-light on the CPU" in result.stdout


def test_the_round_estimate_is_bounded_by_the_cap_the_budget_and_the_wall_limit():
    now = [0]
    rule = StoppingRule(max_repeats=200, max_time_ns=10e9, clock=lambda: now[0])
    started = rule.start()
    now[0] = 2e9  # 10 rounds of 1 ms kernels took 2 s of wall time: 0.2 s a round
    assert rule.progress([1e6] * 10, started) == "round 10 of at most 200, at most 38 s left"
    # 100 ms kernels: the 10 s budget ends the run after 101 rounds, 91 more.
    assert rule.progress([1e8] * 10, started) == "round 10 of at most 200, at most 18 s left"
    now[0] = 110e9  # ten seconds short of the two-minute wall limit
    assert rule.progress([1e6] * 10, started) == "round 10 of at most 200, at most 10 s left"
