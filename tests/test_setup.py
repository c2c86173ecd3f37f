"""Set-up is one way, the README's, in CI too: `make setup` picks the torch build that fits the
machine, `TORCH=` overrides it with any pip arguments, and CI's set-up asks no host but the
package index. The tests are two targets, `make test` and `make test-e2e`, and CI runs both."""

import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKE = shutil.which("make")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_BUILD = ["torch", "--index-url", CPU_INDEX]
FIRST_INDEX_OPTIONS = ["--timeout", "10", "--retries", "1"]
PROJECT = ["-e", ".[test]"]

pytestmark = pytest.mark.skipif(MAKE is None, reason="no make on this machine")


def run_setup(tmp_path: Path, nvidia_smi: str | None, torch_installed: bool = False, *make_args: str,
              cpu_index_answers: bool = True) -> tuple[list[list[str]], subprocess.CompletedProcess]:
    """The argument lists of each `pip install` that `make setup` runs, as the shell split them,
    and make's own run.

    PYTHON is a script that logs its arguments, and fails a pip install from an `--index-url`
    where `cpu_index_answers` is false; PATH holds nothing but the `nvidia-smi` given (a shell
    script body) and a `bwrap`, so the machine's own GPU, if any, plays no part."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {"bwrap": "exit 0"} | ({} if nvidia_smi is None else {"nvidia-smi": nvidia_smi})
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "pip.log"
    python = tmp_path / "python"
    unreachable = "" if cpu_index_answers else 'for arg in "$@"; do [ "$arg" = --index-url ] && exit 1; done; exit 0\n'
    python.write_text("#!/bin/sh\n"
                      f'[ "$1" = -c ] && exit {0 if torch_installed else 1}\n'
                      f"""printf '%s\\n' "$@" ---- >> '{log}'\n""" + unreachable)
    python.chmod(0o755)
    run = subprocess.run([MAKE, "setup", f"PYTHON={python}", *make_args], cwd=ROOT, env={"PATH": str(bin_dir)},
                         check=True, capture_output=True, text=True)
    commands = log.read_text().split("----\n")[:-1]
    installs = [command.splitlines() for command in commands]
    assert all(install[:3] == ["-m", "pip", "install"] for install in installs), installs
    return [install[3:] for install in installs], run


def pip_installs(tmp_path: Path, nvidia_smi: str | None, torch_installed: bool = False, *make_args: str) -> list[list[str]]:
    return run_setup(tmp_path, nvidia_smi, torch_installed, *make_args)[0]


@pytest.mark.parametrize("nvidia_smi", [None, "echo 'No devices were found'; exit 6"],
                         ids=["no-nvidia-smi", "nvidia-smi-failing"])
def test_without_a_working_nvidia_smi_setup_installs_the_cpu_build(tmp_path, nvidia_smi):
    installs, run = run_setup(tmp_path, nvidia_smi)
    assert installs == [FIRST_INDEX_OPTIONS + CPU_BUILD, PROJECT]
    assert run.stdout.splitlines() == [f"torch: the CPU build from {CPU_INDEX}"]


def test_an_unreachable_cpu_index_is_left_after_one_short_retry_for_the_package_index(tmp_path):
    """pip's own timeout and retries (15 s, five) spend minutes on an index it cannot reach."""
    installs, run = run_setup(tmp_path, None, cpu_index_answers=False)
    timeout = installs[0][installs[0].index("--timeout") + 1]
    retries = installs[0][installs[0].index("--retries") + 1]
    assert float(timeout) <= 10 and int(retries) <= 1
    assert installs == [FIRST_INDEX_OPTIONS + CPU_BUILD, ["torch"], PROJECT]
    assert run.stdout.splitlines() == ["torch: the package index's default build"]
    assert f"{CPU_INDEX} did not answer" in run.stderr


def test_with_an_nvidia_gpu_setup_installs_the_index_default(tmp_path):
    gpu = "echo 'GPU 0: NVIDIA B200 (UUID: GPU-0)'"
    installs, run = run_setup(tmp_path, gpu)
    assert installs == [["torch"], PROJECT]
    assert run.stdout.splitlines() == ["torch: the package index's default build"]


def test_an_installed_torch_is_kept(tmp_path):
    assert pip_installs(tmp_path, None, True) == [PROJECT]


def test_torch_takes_index_options_as_separate_arguments(tmp_path):
    torch = "torch==2.13.0 --index-url https://example.org/whl/cpu"
    assert pip_installs(tmp_path, None, False, f"TORCH={torch}") == [torch.split(), PROJECT]


def test_cis_torch_names_no_index_url(tmp_path):
    assert pip_installs(tmp_path, None, False, "TORCH=torch==2.13.0") == [["torch==2.13.0"], PROJECT]


def test_ci_sets_up_with_the_readmes_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make setup TORCH=torch==2.13.0\n" in ci
    assert "python3 -m venv .venv && . .venv/bin/activate\nmake setup" in readme


def test_make_test_leaves_out_exactly_the_tests_make_test_e2e_runs():
    """pytest's default selection (`python -m pytest`, `make test`) is everything but the e2e
    marker, which `make test-e2e` selects, so each test runs in one target; CI runs both."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["addopts"]
    assert addopts == ["-m", "not e2e"]

    def pytest_arguments(target: str) -> list[str]:
        # --no-print-directory: under `make test` this make is nested and would announce its folder.
        (command,) = subprocess.run([MAKE, "-n", "--no-print-directory", target, "PYTHON=python"], cwd=ROOT, capture_output=True, text=True,
                                    check=True).stdout.splitlines()
        arguments = shlex.split(command)
        assert arguments[:3] == ["python", "-m", "pytest"], command
        return arguments[3:]

    assert "-m" not in pytest_arguments("test")
    e2e = pytest_arguments("test-e2e")
    assert e2e[e2e.index("-m") + 1] == "e2e"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test ||" in ci and "make test-e2e ||" in ci


def test_pytest_hides_only_cutedsls_notices_that_names_of_cutlass_utils_moved_and_starlettes_of_httpx():
    import warnings

    from _pytest.config import parse_warning_filter

    filters = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["filterwarnings"]
    moved = ("cutlass.utils.tmem_allocator.TmemAllocator is deprecated; use cutlass.memory.TmemAllocator instead. "
             "It will be removed in a future release.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for line in filters:
            warnings.filterwarnings(*parse_warning_filter(line, escape=False))
        warnings.warn(moved, DeprecationWarning)
        warnings.warn(moved.replace("tmem", "smem").replace("Tmem", "Smem"), DeprecationWarning)
        warnings.warn("cutlass.utils.LayoutEnum is deprecated; use cutlass.tensor_utils.LayoutEnum instead. It will be "
                      "removed in a future release.", DeprecationWarning)
        warnings.warn("cutlass.cute.foo is deprecated; use cutlass.cute.bar instead", DeprecationWarning)
        warnings.warn(moved, UserWarning)
        warnings.warn("torch.cuda.amp.autocast is deprecated", FutureWarning)
        warnings.warn("Using `httpx` with `starlette.testclient` is deprecated; install `httpx2` instead.", DeprecationWarning)
        warnings.warn("Using `requests` with `starlette.testclient` is deprecated", DeprecationWarning)
    assert [str(warning.message)[:24] for warning in caught] == ["cutlass.cute.foo is depr", moved[:24], "torch.cuda.amp.autocast ",
                                                                 "Using `requests` with `s"]
