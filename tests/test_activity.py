"""The verification round's GPU activity, judged from records like those CUPTI gives."""

from harness.judge.activity import NOT_RECORDED, judge_round

TIMED, OTHER = "stream 7 of cuda:0", "stream 13 of cuda:0"


def _round(kernels, queue=TIMED, gap_ns=3_000):
    """Markers around `kernels` [(name, ns)], laid end to end on `queue` after a launch gap."""
    records, now = [("at::cuda::spin_kernel(long)", TIMED, 0, 1_000)], 1_000 + gap_ns
    for name, duration in kernels:
        records.append((name, queue, now, now + duration))
        now += duration
    records.append(("at::cuda::spin_kernel(long)", TIMED, now + gap_ns, now + gap_ns + 1_000))
    return records, now - 1_000 - gap_ns


def test_an_honest_round_passes_and_lists_its_kernels():
    records, span = _round([("gemm", 10_000)] * 50)
    problem, seen = judge_round(records, (span + 1_000) / 50, 50)
    assert problem is None
    assert seen == "50 GPU activities: gemm x50 (stream 7 of cuda:0)"


def test_a_kernel_on_another_queue_fails():
    records, span = _round([("gemm", 10_000)] * 2)
    records.append(("hidden_gemm", OTHER, 2_000, 30_000))
    problem, _ = judge_round(records, span / 2, 2)
    assert "1 of the calls' kernels ran on another queue than the timed one (hidden_gemm on stream 13 of cuda:0, the timed queue being stream 7 of cuda:0)" in problem


def test_a_kernel_after_the_window_fails():
    records, span = _round([("gemm", 10_000)] * 2)
    closing_start = records[-1][2]
    records.append(("late_gemm", TIMED, closing_start + 2_000, closing_start + 9_000))
    problem, _ = judge_round(records, span / 2, 2)
    assert problem.startswith("1 kernel(s) started after the timed window closed (late_gemm)")


def test_events_shorter_than_the_kernels_they_bracket_fail():
    records, span = _round([("gemm", 10_000)] * 50)
    problem, _ = judge_round(records, 1_000.0, 50)  # a clock that says 1 us a call
    assert "the events timed the round at 50.0 us, but its kernels ran for 500.0 us" in problem


def test_events_longer_than_the_markers_window_fail():
    records, span = _round([("gemm", 10_000)] * 50)
    problem, _ = judge_round(records, 2 * span / 50, 50)
    assert problem is not None and "not read from the GPU's clock" in problem


def test_a_host_slower_than_the_gpu_is_no_disagreement():
    """Launch gaps widen the markers' window far past the events: that is the host's time."""
    records, span = _round([("gemm", 2_000)] * 50, gap_ns=150_000)
    assert judge_round(records, span / 50 + 100, 50)[0] is None


def test_activity_not_recorded_is_a_problem_of_its_own():
    """CUPTI switched off (or unavailable) in the worker leaves no markers: that is no pass."""
    for records in ([], None):
        problem, seen = judge_round(records, 1_000.0, 50)
        assert problem.startswith(NOT_RECORDED) and seen == "not recorded"

def test_a_test_call_without_events_is_judged_on_queues_only():
    records, _ = _round([("gemm", 10_000)])
    assert judge_round(records, None, 1) == (None, "1 GPU activities: gemm x1 (stream 7 of cuda:0)")
