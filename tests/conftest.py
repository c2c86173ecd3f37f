"""Fixtures shared by the test modules that ask for them."""

import pytest
import torch


@pytest.fixture
def one_thread():
    """Many small references on the CPU run quickest on one thread: a shared machine's cores are few."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
