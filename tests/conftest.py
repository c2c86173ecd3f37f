"""Fixtures shared by the test modules that ask for them, and the threads each test process uses."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config):
    """Under pytest-xdist (`make test`) each of its processes takes its share of the cores, and so
    do the processes its tests start (harness commands, workers, trial processes: OMP_NUM_THREADS
    reaches them all). torch's default, a thread a core in every process, oversubscribes a machine
    of few cores, and its idle threads spin on cores the other processes wait for. A value the user
    set is kept."""
    processes = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if processes and "OMP_NUM_THREADS" not in os.environ:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)  # Linux's, or all
        share = max(1, cores // int(processes))
        os.environ["OMP_NUM_THREADS"] = str(share)
        torch.set_num_threads(share)


@pytest.fixture(scope="module")
def one_thread():
    """Many small references on the CPU run quickest on one thread: a shared machine's cores are
    few. For the whole module that asks for it, its module-scoped fixtures included."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def harness_in_process(monkeypatch, capfd):
    """`python -m harness ARGS` from the repository's root, run as its __main__ runs it (the command
    line's main()) in the test's process, for a command that ends before any run starts (refused
    arguments, a tests file or a file that cannot be read, a table): a harness process of its own
    would spend seconds importing torch. Its status and output as a finished process's; POPCORN_*
    unset, `env` set on top."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        import harness.api
        from harness.cli import main
        from harness.judge import given_up

        # A queue an earlier test of this process gave up would have main() end the whole process.
        monkeypatch.setattr(given_up, "_queues", [])
        # A CUDA run's judge enters a /dev/shm of its own and, as root, changes its user: here that
        # would be the test process's, for every later test. Such a command is the test's to stop.
        monkeypatch.setattr(harness.api, "own_dev_shm", lambda: None)
        monkeypatch.setattr(harness.api, "drop_root", lambda: None)
        for name in [name for name in os.environ if name.startswith("POPCORN_")]:
            monkeypatch.delenv(name)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "argv", ["harness", *args])
        monkeypatch.chdir(ROOT)
        capfd.readouterr()
        with pytest.raises(SystemExit) as ended:
            main()
        stdout, stderr = capfd.readouterr()
        return subprocess.CompletedProcess(["harness", *args], ended.value.code, stdout, stderr)

    return run


@pytest.fixture
def submission_loaded_under(monkeypatch):
    """submission.py executed afresh beside the imported one (which other tests hold) with the
    environment variables given set ("" unsets one): for what the module reads as it is
    imported, without a Python process of its own importing torch and CuTeDSL again."""
    import importlib.util

    def load(**variables: str):
        for name, value in variables.items():
            if value:
                monkeypatch.setenv(name, value)
            else:
                monkeypatch.delenv(name, raising=False)
        spec = importlib.util.spec_from_file_location("submission_loaded_again", ROOT / "submission.py")
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)  # where its dataclasses look themselves up
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(autouse=True)
def the_test_process_keeps_its_user():
    """A test that leaves its process another user (a judge's user change run in-process) would
    fail every later test of that process for reasons of its own: it fails itself instead."""
    before = os.geteuid() if hasattr(os, "geteuid") else None
    yield
    if before is not None:
        assert os.geteuid() == before, f"the test changed its process's user from {before} to {os.geteuid()}"
