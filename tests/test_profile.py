"""The profile mode's calls, as a profiler wrapped around it sees them."""

import contextlib

import pytest

from harness.runner import calls as runner_calls
from reference import generate_input


@pytest.mark.parametrize("ncu, expected", [
    # Compiling and a submission's tuning of its configs happen in the first call: under ncu,
    # every launch of it would be replayed, so it runs before the range.
    (True, [(), ("custom_kernel",)]),
    (False, [("custom_kernel",)]),  # the torch profiler's table, as the competition's profile mode
])
def test_profile_calls_and_their_nvtx_ranges(monkeypatch, ncu, expected):
    open_ranges, calls = [], []

    @contextlib.contextmanager
    def recording_range(name):
        open_ranges.append(name)
        yield
        open_ranges.pop()

    monkeypatch.setattr(runner_calls, "nvtx_range_for", lambda device: recording_range)

    def kernel(data):
        calls.append(tuple(open_ranges))
        return data[6].fill_(1.0)

    worker_side = runner_calls.Calls(".", "cpu", 42, progress=lambda text: None, kernel=kernel)
    worker_side.hold("handed", [generate_input(128, 256, 256, 1, 3, device="cpu")])
    report = worker_side.profile("handed", ncu)
    assert calls == expected
    assert ("aten::fill_" in report) != ncu  # the table of what the call ran, or nothing under ncu
