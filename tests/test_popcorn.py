"""The harness standing in for the competition's eval.py: POPCORN_FD lines, seeds, exit statuses."""

import io
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.results.popcorn import PopcornLog

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TORCH_SUBMISSION = FIXTURES / "torch_submission.py"
TEMPLATE_SUBMISSION = FIXTURES / "template_torch_submission.py"
CASES = "m: 128; n: 256; k: 256; l: 1; seed: 1111\nm: 256; n: 128; k: 512; l: 2; seed: 7\n"
# What the competition's eval writes for CASES when both pass.
LINES_OF_TWO_PASSES = [
    "test-count: 2",
    "test.0.spec: m: 128; n: 256; k: 256; l: 1; seed: 1111",
    "test.0.status: pass",
    "test.1.spec: m: 256; n: 128; k: 512; l: 2; seed: 7",
    "test.1.status: pass",
    "check: pass",
]


def run_with_fd(tmp_path, *args, env_extra=None, with_stdout=False):
    """Run the CLI with POPCORN_FD on a pipe, as the competition's runner does; return (status,
    lines, stderr), and stdout after them `with_stdout`."""
    read_end, write_end = os.pipe()
    env = {key: value for key, value in os.environ.items() if key != "POPCORN_SEED"}
    env.update(POPCORN_FD=str(write_end), **(env_extra or {}))
    process = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, pass_fds=(write_end,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        lines = reader.read().splitlines()
    stdout, stderr = process.communicate(timeout=600)
    return (process.returncode, lines, stderr, stdout) if with_stdout else (process.returncode, lines, stderr)


@pytest.fixture
def cases_file(tmp_path):
    path = tmp_path / "tests.txt"
    path.write_text(CASES)
    return path


@pytest.mark.e2e
def test_test_mode_writes_the_official_lines(tmp_path, cases_file):
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(TORCH_SUBMISSION))
    assert status == 0
    assert lines == LINES_OF_TWO_PASSES


@pytest.mark.e2e
def test_a_failing_test_writes_status_error_and_check_fail(tmp_path, cases_file):
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def custom_kernel(data):\n    c = data[-1]\n    c.fill_(1.0)\n    return c\n")
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(wrong))
    assert status == 112
    assert "test.0.status: fail" in lines and lines[-1] == "check: fail"
    error = next(line for line in lines if line.startswith("test.0.error: "))
    assert "fail: mismatch found! custom implementation doesn't match reference: Number of mismatched elements:" in error


@pytest.mark.e2e
def test_benchmark_mode_writes_stats_lines(tmp_path):
    cases = tmp_path / "bench.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    status, lines, _ = run_with_fd(tmp_path, "benchmark", str(cases), "--device", "cpu", "--max-repeats", "3", "--submission", str(TORCH_SUBMISSION))
    assert status == 0
    keys = [line.split(":", 1)[0] for line in lines]
    assert keys == ["benchmark-count", "benchmark.0.spec"] + [f"benchmark.0.{field}" for field in ("runs", "mean", "std", "err", "best", "worst")] + ["check"]
    values = dict(line.split(": ", 1) for line in lines)
    assert values["benchmark.0.runs"] == "3" and float(values["benchmark.0.mean"]) > 0


@pytest.mark.e2e
def test_secret_seed_never_reaches_the_submission(tmp_path, cases_file):
    peeking = tmp_path / "peeking.py"
    peeking.write_text(
        "import os\n"
        "def custom_kernel(data):\n"
        "    assert 'POPCORN_SEED' not in os.environ, 'the submission can read the secret seed'\n"
        "    from reference import ref_kernel\n"
        "    return ref_kernel(data)\n"
    )
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(peeking), env_extra={"POPCORN_SEED": "123456789"})
    assert status == 0, lines
    assert lines[-1] == "check: pass"



@pytest.mark.e2e
def test_the_secret_seed_is_nowhere_a_worker_looks(tmp_path, cases_file):
    """A worker raises every long number in its argv (its settings), /proc/self/cmdline, its
    environment and every process's it can see: the secret seed's value is in none of the
    verdict, the --json document or the POPCORN_FD lines, which show the worker's reading."""
    secret = str(secrets.randbelow(10**9) + 10**9)  # the case seeds it combines with stay within an int64
    status, lines, stderr, stdout = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--json",
                                                "--submission", str(FIXTURES / "cheat_reads_the_secret_seed.py"),
                                                env_extra={"POPCORN_SEED": secret}, with_stdout=True)
    assert status == 112, stderr
    document = json.loads(stdout)
    error = next(line for line in lines if line.startswith("test.0.error: "))
    seen = re.search(r"seen by the worker: initial_seed=(\d+) read=(\d+) numbers=", error)
    assert seen and seen.group(0) in document["cases"][0]["message"], error
    # Under a secret seed the worker's generators start from a seed of their own, neither the
    # eval's default nor the secret; the worker read its argv, environment and the rest.
    assert seen.group(1) not in ("42", secret) and int(seen.group(2)) >= 4, error
    assert secret not in "\n".join(lines) and secret not in stderr and secret not in stdout



# Every line boundary str.splitlines knows ("\r\n" is one).
LINE_BOUNDARIES = ("\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(LINE_BOUNDARIES) | st.just("test.0.status: pass")
                         | st.text(st.characters(blacklist_categories=()), max_size=6), max_size=8).map("".join),
                min_size=1, max_size=6))
def test_every_value_is_one_line_however_the_file_is_read(values):
    """Whatever a value holds (every line boundary, a lone surrogate), the file holds one
    `key: value` line per value, read with splitlines and read as a text-mode file alike."""
    with tempfile.TemporaryFile() as file:
        log = PopcornLog(os.dup(file.fileno()))
        for index, value in enumerate(values):
            log.log(f"test.{index}.error", value)
        log.close()
        file.seek(0)
        data = file.read()
    keys = [f"test.{index}.error" for index in range(len(values))]
    assert [line.split(": ", 1)[0] for line in data.decode("utf-8").splitlines()] == keys
    text_mode = list(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    assert [line.split(": ", 1)[0] for line in text_mode] == keys


@pytest.mark.e2e
def test_a_raised_message_adds_no_line(tmp_path, cases_file):
    """A message that follows every line boundary with `test.0.status: pass` and `check: pass`: the
    POPCORN_FD lines, read in text mode and split with splitlines, are the judge's alone, and no
    line of the people's report is one of the message's where the judge's own lines stand."""
    status, lines, stderr = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu",
                                        "--submission", str(FIXTURES / "cheat_forges_lines_in_its_message.py"))
    assert status == 112, stderr
    assert [line.split(": ", 1)[0] for line in lines] == ["test-count", "test.0.spec", "test.0.status", "test.0.error",
                                                          "test.1.spec", "test.1.status", "test.1.error", "check"]
    assert "test.0.status: fail" in lines and lines[-1] == "check: fail"
    assert "RuntimeError: wrong test.0.status: pass check: pass" in lines[3]
    report = stderr.splitlines()
    forged = [line for line in report if "test.0.status: pass" in line or "check: pass" in line]
    assert forged and all(line.startswith("    ") for line in forged), stderr  # the judge's own lines: two spaces, or none
    assert [line for line in report if line.startswith("check:")] == [next(line for line in report if line.startswith("check: fail"))]



@pytest.mark.e2e
def test_a_lone_surrogate_in_a_message_is_shown_escaped(tmp_path, cases_file):
    """A message no encoding writes (a lone surrogate): the people's report, on stdout, and the
    POPCORN_FD lines show it escaped, and every case gets its verdict."""
    raising = tmp_path / "surrogate.py"
    raising.write_text('def custom_kernel(data):\n    raise RuntimeError("lone \\ud800 surrogate")\n')
    env = {key: value for key, value in os.environ.items() if key not in ("POPCORN_SEED", "POPCORN_FD")}
    result = subprocess.run([sys.executable, "-m", "harness", "test", str(cases_file), "--device", "cpu", "--submission", str(raising)],
                            cwd=ROOT, env=env, capture_output=True, timeout=600)
    assert result.returncode == 112, result.stderr.decode(errors="replace")
    assert b"lone \\ud800 surrogate" in result.stdout and b"check: fail" in result.stdout
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(raising))
    assert status == 112 and "test.0.error: error: RuntimeError: lone \\ud800 surrogate" in lines

def test_bad_tests_file_exits_113(harness_in_process, tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("m: 128; n: 256; k = 256\n")
    result = harness_in_process("test", str(bad), "--device", "cpu")
    assert result.returncode == 113 and "invalid test case" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present: the no-GPU exit cannot be observed")
def test_gpu_mode_without_cuda_exits_114(harness_in_process):
    result = harness_in_process("test", "--submission", str(TORCH_SUBMISSION))
    assert result.returncode == 114 and "no CUDA device" in result.stderr


@pytest.mark.e2e
def test_profile_mode_writes_a_base64_report(tmp_path):
    import base64

    cases = tmp_path / "profile.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\n")
    status, lines, _ = run_with_fd(tmp_path, "profile", str(cases), "--device", "cpu", "--submission", str(TORCH_SUBMISSION))
    assert status == 0
    values = dict(line.split(": ", 1) for line in lines)
    assert values["benchmark-count"] == "1" and values["check"] == "pass"
    report = base64.b64decode(values["benchmark.0.report"], altchars=b"+*").decode()
    assert "aten::mm" in report  # the submission's matmul shows in the profile table


def popcorn_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"^(test|benchmark|check)[\w.-]*: ", line)]


@pytest.mark.parametrize("fd", [1, 2])
@pytest.mark.e2e
def test_popcorn_fd_may_be_a_standard_stream(fd, cases_file):
    """POPCORN_FD=1 (the README's stand-in example) or 2: verdicts on that stream, the people's
    report on the other one, and the workers keep a stdout of their own."""
    env = {key: value for key, value in os.environ.items() if key != "POPCORN_SEED"}
    result = subprocess.run([sys.executable, "-m", "harness", "test", str(cases_file), "--device", "cpu",
                             "--submission", str(TEMPLATE_SUBMISSION)],
                            cwd=ROOT, env={**env, "POPCORN_FD": str(fd)}, capture_output=True, text=True, timeout=600)
    verdicts, people = (result.stdout, result.stderr) if fd == 1 else (result.stderr, result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert popcorn_lines(verdicts) == LINES_OF_TWO_PASSES
    assert "2 of 2 tests passed" in people and "test-count" not in people


@pytest.mark.e2e
def test_official_error_lines_are_the_competitions(tmp_path, cases_file):
    """--official: the check's message, or the caught OpError's text, with no status word before it."""
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def custom_kernel(data):\n    c = data[-1]\n    c.fill_(1.0)\n    return c\n")
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--official", "--submission", str(wrong))
    assert status == 112
    error = next(line for line in lines if line.startswith("test.0.error: "))
    assert error.startswith("test.0.error: mismatch found! custom implementation doesn't match reference: Number of mismatched elements:")
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--official",
                                   "--submission", str(FIXTURES / "broken_raises_op_error.py"))
    assert status == 112
    assert lines == [
        "test-count: 2",
        "test.0.spec: m: 128; n: 256; k: 256; l: 1; seed: 1111",
        "test.0.status: fail",
        "test.0.error: expects the M mode to be 128-aligned",
        "test.1.spec: m: 256; n: 128; k: 512; l: 2; seed: 7",
        "test.1.status: fail",
        "test.1.error: expects the M mode to be 128-aligned",
        "check: fail",
    ]


@pytest.mark.e2e
def test_official_eval_stops_on_an_exception_it_does_not_catch(tmp_path, cases_file):
    """The competition's eval catches only OpError: anything else ends it with no verdict lines."""
    status, lines, stderr = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--official",
                                        "--submission", str(FIXTURES / "broken_raises.py"))
    assert status == 1
    assert lines == ["test-count: 2", "test.0.spec: m: 128; n: 256; k: 256; l: 1; seed: 1111"]
    assert "eval stopped" in stderr and "RuntimeError: illegal tile configuration" in stderr
    # The default mode gives every case its verdict.
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(FIXTURES / "broken_raises.py"))
    assert status == 112 and lines[-1] == "check: fail"
    assert "test.1.error: error: RuntimeError: illegal tile configuration 96x80 for this shape" in lines


@pytest.mark.e2e
def test_official_worker_outlives_a_failed_case_and_ours_does_not(tmp_path, cases_file):
    """A file that is wrong on its process's first call only: the competition's one worker goes on
    to pass the second case; the default mode starts a fresh process after a failure."""
    first_call_wrong = tmp_path / "first_call_wrong.py"
    first_call_wrong.write_text(
        "from reference import ref_kernel\n"
        "calls = 0\n"
        "def custom_kernel(data):\n"
        "    global calls\n"
        "    calls += 1\n"
        "    c = ref_kernel(data)\n"
        "    if calls == 1:\n"
        "        c += 1\n"
        "    return c\n")
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--official", "--submission", str(first_call_wrong))
    assert status == 112
    assert "test.0.status: fail" in lines and "test.1.status: pass" in lines
    status, lines, _ = run_with_fd(tmp_path, "test", str(cases_file), "--device", "cpu", "--submission", str(first_call_wrong))
    assert "test.0.status: fail" in lines and "test.1.status: fail" in lines
