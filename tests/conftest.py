"""Fixtures shared by the test modules that ask for them, and the threads each test process uses."""

import os

import pytest
import torch


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
