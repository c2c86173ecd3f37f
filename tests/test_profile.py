"""The profile mode's calls, as a profiler wrapped around it sees them."""

import contextlib

import pytest

from harness import cases
from harness.jobs import PASS, Job
from harness.shapes import parse_cases


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

    monkeypatch.setattr(cases, "nvtx_range_for", lambda device: recording_range)

    def kernel(data):
        calls.append(tuple(open_ranges))
        return data[6]

    case = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 3")[0]
    job = Job(kind="profile", case=case, device="cpu", ncu=ncu)
    result = cases.run_profile(job, kernel, progress=lambda text: None)
    assert result.status == PASS
    assert calls == expected
