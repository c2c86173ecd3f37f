"""The command line as a user meets it: arguments refused up front, progress in a log."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.shared.stats import StoppingRule

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
def test_bad_arguments_get_one_line_and_exit_2_before_any_worker(harness_in_process, args, said):
    result = harness_in_process(*args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: {said}"]
    assert result.stdout == ""


@pytest.mark.parametrize("line, said", [
    ("m: 128; n: 256; k: 256; l: 1; sed: 1", ":2: unknown key `sed`"),
    ("m: 128; n: abc; k: 256; l: 1; seed: 1", ":2: key `n`: 'abc' is not an integer"),
])
def test_a_mistake_in_the_tests_file_exits_113_naming_it_before_any_worker(harness_in_process, tmp_path, line, said):
    cases = tmp_path / "cases.txt"
    cases.write_text(f"m: 128; n: 256; k: 256; l: 1; seed: 1\n{line}\n")
    result = harness_in_process("test", str(cases), "--device", "cpu", "--submission", str(TEMPLATE))
    assert result.returncode == 113, result.stdout + result.stderr
    (message,) = result.stderr.splitlines()
    assert message.startswith(f"{cases}{said}")
    assert result.stdout == ""  # no case ran


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
    # In the order things happen: the import before the first call.
    # A phase that lasts is logged again every so often (a loaded machine's warm-up): each counted once.
    assert list(dict.fromkeys(phase.split(",")[0] for phase in phases))[:6] == [
        "generating inputs", "handing the inputs to the worker", "importing submission", "checking the first batch",
        "warm-up", "calibrating the judge's clock"]
    assert any(re.fullmatch(r"timing, round 1 of at most 5, (about [1-9]\d* s|under 1 s) left", phase) for phase in phases), phases
    assert "recheck on fresh and near-duplicate inputs" in phases
    # On the CPU the host time would repeat the mean and there is no speed-of-light: the table
    # leaves those columns out, and keeps the measured ones.
    header = next(line for line in lines if "mean µs" in line)
    assert "host" not in header and "SOL" not in header and "worst" in header
    row = next(line for line in lines if line.startswith("│ 128x256x256"))
    assert "-" not in [cell.strip() for cell in row.split("│")[1:-1]]
    assert "use --ceilings measured" not in result.stdout and "no speed-of-light on the CPU" in result.stdout


def test_the_round_estimate_is_bounded_by_the_cap_the_budget_and_the_wall_limit():
    now = [0]
    rule = StoppingRule(max_repeats=200, max_time_ns=10e9, clock=lambda: now[0])
    started = rule.start()
    now[0] = 2e9  # 10 rounds of 1 ms kernels took 2 s of wall time: 0.2 s a round
    assert rule.progress([1e6] * 10, started) == "round 10 of at most 200, about 38 s left"
    # 100 ms kernels: the 10 s budget ends the run after 101 rounds, 91 more.
    assert rule.progress([1e8] * 10, started) == "round 10 of at most 200, about 18 s left"
    now[0] = 110e9  # ten seconds short of the two-minute wall limit
    assert rule.progress([1e6] * 10, started) == "round 10 of at most 200, about 10 s left"


def test_the_round_estimate_never_says_no_time_is_left():
    now = [0]
    quick = StoppingRule(max_repeats=3, max_time_ns=10e9, clock=lambda: now[0])
    started = quick.start()
    now[0] = 0.1e9  # a round of 0.1 s: the two rounds left take 0.2 s
    assert quick.progress([1e6], started) == "round 1 of at most 3, under 1 s left"
    # One 4 s round spends a 1 s budget, but the rule always runs three rounds: two more.
    spent = StoppingRule(max_repeats=200, max_time_ns=1e9, clock=lambda: now[0])
    started = spent.start()
    now[0] = 4e9
    assert spent.progress([4e9], started) == "round 1 of at most 200, about 8 s left"


THREE_SHAPES = "m: 128; n: 256; k: 256; l: 1; seed: 1\nm: 256; n: 256; k: 256; l: 1; seed: 1\nm: 128; n: 512; k: 256; l: 1; seed: 1\n"


def test_an_import_failure_is_shown_once_in_the_users_words_and_the_rest_is_not_run(tmp_path):
    cases = tmp_path / "cases.txt"
    cases.write_text(THREE_SHAPES)
    failing = tmp_path / "imports_what_is_missing.py"
    failing.write_text("import torch\n"
                       "raise ImportError('\\x1b[31mno module named tile_tables\\x1b[0m')\n"
                       "def custom_kernel(data):\n"
                       "    return data[0]\n")
    result = harness("test", str(cases), "--device", "cpu", "--submission", str(failing))
    assert result.returncode == 112, result.stdout + result.stderr
    out = result.stdout
    assert out.count("ImportError: no module named tile_tables") == 2  # the message and the traceback's last line
    assert "\x1b" not in out and "runner-" not in out and "harness/runner" not in out and "importlib" not in out
    assert f'File "{failing}", line 2, in <module>' in out
    assert "test  1        256x256x256  not run" in out and "test  2        128x512x256  not run" in out
    assert out.splitlines()[-2:] == [
        "check: fail 0 of 3 tests passed, 2 not run",
        f"{failing} does not import: every case would raise what test 0 raised; fix that and run again "
        f"(`python -m harness lint --submission {failing}` reads the file without importing it)",
    ]


@pytest.mark.e2e  # a whole command run: the suite CI runs beside make test
def test_a_cuda_only_file_on_the_cpu_ends_telling_what_runs_there(tmp_path):
    cases = tmp_path / "cases.txt"
    cases.write_text(THREE_SHAPES)
    result = harness("test", str(cases), "--device", "cpu")  # this kit's submission.py
    assert result.returncode == 112, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert sum(line.startswith("    ValueError: a must be on a CUDA device, got cpu") for line in lines) == 2  # one failure shown, indented
    assert not any(line.startswith("  test 1: ") for line in lines)  # no second worker
    verdict = lines.index("check: fail 0 of 3 tests passed, 2 not run")
    assert lines[verdict + 1].startswith("submission.py needs a CUDA GPU: on --device cpu, test 0 raised an error naming CUDA")
    assert [line.split()[:4] for line in lines[verdict + 2:]] == [
        ["python", "-m", "harness", "lint"], ["python", "-m", "harness", "compile"], ["python", "-m", "harness", "test"]]


def test_a_case_the_problems_reference_refuses_is_the_tests_files_error(harness_in_process, tmp_path):
    """K = 100 is no multiple of the 16-element scale blocks: the reference cannot take it, so the
    tests file is refused as it is read (exit 113, naming the constraint), the submission never
    called."""
    tests_file = tmp_path / "bad_k.txt"
    tests_file.write_text("m: 128; n: 128; k: 256; l: 1; seed: 1\nm: 128; n: 128; k: 100; l: 1; seed: 1\n")
    result = harness_in_process("test", str(tests_file), "--device", "cpu", "--submission", str(TEMPLATE))
    assert result.returncode == 113
    assert result.stderr.strip() == (f"{tests_file}:2: `k: 100` is not a multiple of 16 (one fp8 scale per 16 elements "
                                     "along K: reference.py's sf_vec_size)")
    assert "test 0" not in result.stdout


@pytest.mark.e2e  # a judged run; test_tables keeps every table whole when piped, test_report the mismatch lines
def test_piped_output_keeps_every_line_whole(tmp_path):
    """Piped, with COLUMNS unset: the header whole, each mismatch on a line of its own with its
    numbers named, no box that folds a long path or a number, nothing cut."""
    folder = tmp_path / ("a_folder_whose_name_is_long_enough_to_push_a_line_past_any_terminal_width_" * 2)
    folder.mkdir()
    submission = folder / "wrong_values.py"
    submission.write_text((ROOT / "tests" / "fixtures" / "broken_wrong_values.py").read_text())
    cases = tmp_path / "cases.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_") and key != "COLUMNS"}
    result = subprocess.run([sys.executable, "-m", "harness", "test", str(cases), "--device", "cpu", "--submission", str(submission)],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 112, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.startswith("test ") and str(submission) in line and line.endswith("a worker reused while its cases pass)")
               for line in lines), result.stdout
    assert any(re.fullmatch(r"ERROR AT \(\d+, \d+, \d+\): got -?[\d.]+, expected -?[\d.]+", line.strip()) for line in lines), result.stdout
    assert "…" not in result.stdout and "╭" not in result.stdout


@pytest.mark.e2e
def test_a_case_that_ran_out_of_time_leaves_the_next_its_calibration_partner(tmp_path):
    """The judge's own time limit ends the worker that ran out of time, never the calibration
    partner: the next case is judged (here it times out too), not failed as a submission's doing."""
    cases = tmp_path / "cases.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1\nm: 128; n: 512; k: 256; l: 1; seed: 1\n")
    result = harness("benchmark", str(cases), "--device", "cpu", "--no-record", "--timeout", "5", "--max-repeats", "3",
                     "--submission", str(ROOT / "tests" / "fixtures" / "broken_hangs.py"))
    assert result.returncode == 112, result.stdout + result.stderr
    assert "calibration partner" not in result.stdout and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert result.stdout.count("no result within the 5 s time limit") == 2, result.stdout


@pytest.mark.parametrize("mode, target", [("test", "check"), ("benchmark", "bench"), ("leaderboard", "leaderboard"), ("profile", "profile")])
def test_without_a_gpu_the_hint_gives_the_flag_and_its_make_form(monkeypatch, mode, target):
    import torch

    from harness.api import Stopped, _require_device
    from harness.judge.exits import EXIT_NO_GPU

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Stopped) as stopped:
        _require_device("cuda", mode, "mine.py")
    assert stopped.value.status == EXIT_NO_GPU
    assert "`--device cpu` runs a file" in stopped.value.message
    assert f'(through make: `make {target} SUBMISSION=mine.py ARGS="--device cpu"`)' in stopped.value.message
    with pytest.raises(Stopped) as stopped:  # another problem's run keeps it in the hint
        _require_device("cuda", mode, "mine.py", "problems/running_sum_py")
    assert f'`make {target} PROBLEM=problems/running_sum_py SUBMISSION=mine.py ARGS="--device cpu"`' in stopped.value.message


def test_a_named_case_of_the_benchmarks_work_is_warned_of_up_front_on_the_cpu():
    import io

    from rich.console import Console

    from harness.cli import _cpu_benchmarks_note
    from harness.problems import PROBLEMS
    from harness.results.console import Reporter
    from harness.problems.shapes import parse_cases

    gemm = PROBLEMS["nvfp4_gemm"]

    def note(cases_text, wall_limit_s=None, tests_file="mine.txt"):
        console = Console(file=io.StringIO(), width=400, color_system=None)
        _cpu_benchmarks_note(Reporter(console=console), gemm, parse_cases(cases_text), tests_file, wall_limit_s)
        return console.file.getvalue()

    official = gemm.benchmarks_file.read_text()
    said = note(official)
    assert said.startswith("warning: on the CPU, 3 of these 3 cases have the work of nvfp4_gemm's official benchmarks")
    assert "50 inputs a batch" in said and "--wall-limit" not in said
    small = "m: 128; n: 256; k: 256; l: 1; seed: 1\n"
    assert "1 of these 2 cases has" in note(small + official.splitlines()[2], wall_limit_s=60)
    assert "--wall-limit 60 is checked before each case" in note(small + official.splitlines()[2], wall_limit_s=60)
    assert note(small) == ""  # a case of the tests' size: no warning
    assert note(small, tests_file=None).startswith("on the CPU without a tests file")
    from harness.problems import load_problem
    folder = load_problem(Path(__file__).parent / "fixtures" / "reference_kernels" / "practice" / "running_sum_py")
    console = Console(file=io.StringIO(), width=400, color_system=None)
    _cpu_benchmarks_note(Reporter(console=console), folder, folder.cases("benchmarks"), None, None)
    said = console.file.getvalue()
    assert "sized for a GPU" in said and "task.yml's `benchmarks`" in said and "hours" not in said


def test_a_worker_that_did_not_start_ends_the_run_without_a_verdict(monkeypatch):
    """The judge's machine failed, not the file: no case's status, its own exit status."""
    from harness import api
    from harness.judge import modes
    from harness.judge.exits import EXIT_FAIL, EXIT_INFRASTRUCTURE
    from harness.judge.isolation import WorkerNotStarted

    def not_started(*args):
        raise WorkerNotStarted("a worker sent nothing within the 120 s its start may take")

    monkeypatch.setattr(modes, "run_tests", not_started)
    with pytest.raises(api.Stopped) as stopped:
        api.run("test", [], modes.RunOptions(submission=Path("submission.py")))
    assert stopped.value.status == EXIT_INFRASTRUCTURE not in (EXIT_FAIL, 0)
    assert stopped.value.message == "no verdict: a worker sent nothing within the 120 s its start may take"
