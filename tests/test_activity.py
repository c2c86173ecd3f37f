"""The verification round's GPU activity, judged from records like those CUPTI gives: work on any
queue inside the judge's window passes, work outside it fails."""

from harness.judge.activity import NOT_RECORDED, judge_round

TIMED, SIDE = "stream 7 of cuda:0", "stream 13 of cuda:0"
MARKER = "at::cuda::spin_kernel(long)"
# The judge's copies of the outputs and its end event, after the batch's last kernel.
COPIES_NS = 20_000


def _round(kernels, queue=TIMED, gap_ns=3_000):
    """The opening marker (once go fired), `kernels` [(name, ns)] laid end to end on `queue` after
    a launch gap, the closing marker; (records, the kernels' span, the judge's window)."""
    records, now = [(MARKER, TIMED, 0, 1_000)], 1_000 + gap_ns
    for name, duration in kernels:
        records.append((name, queue, now, now + duration))
        now += duration
    records.append((MARKER, TIMED, now + gap_ns, now + gap_ns + 1_000))
    return records, now - 1_000 - gap_ns, now + COPIES_NS


def test_an_honest_round_passes_and_lists_its_kernels():
    records, span, window = _round([("gemm", 10_000)] * 50)
    problem, seen = judge_round(records, window, (span + 1_000) / 50, 50)
    assert problem is None
    assert seen == "50 GPU activities: gemm x50 (stream 7 of cuda:0)"


def test_a_side_queue_that_waits_for_the_timed_one_and_is_joined_back_passes():
    """torch's documented patterns: a CUDA graph's warm-up on a side queue, then its replays on the
    timed queue; a side queue joined back with wait_stream or an event."""
    records, span, window = _round([("gemm", 10_000)] * 4)
    records[1:3] = [("warm_up_gemm", SIDE, 4_000, 14_000), ("warm_up_gemm", SIDE, 14_000, 24_000)]
    assert judge_round(records, window, (span + 1_000) / 4, 4) == (
        None, "4 GPU activities: warm_up_gemm x2 (stream 13 of cuda:0); gemm x2 (stream 7 of cuda:0)")


def test_work_on_a_side_queue_that_did_not_wait_for_the_judges_go_fails():
    records, span, window = _round([("gemm", 10_000)] * 2)
    records.append(("hidden_gemm", SIDE, -30_000, 2_000))  # during the judge's flush
    problem, _ = judge_round(records, window, span / 2, 2)
    assert problem.startswith("1 GPU activities started before the judge's timed window opened (hidden_gemm on "
                              "stream 13 of cuda:0, 30.0 us before)")


def test_work_still_running_when_the_judges_window_closed_fails_on_any_queue():
    for queue in (SIDE, TIMED):
        records, span, window = _round([("gemm", 10_000)] * 2)
        records.append(("late_gemm", queue, 5_000, window + 50_000))
        problem, _ = judge_round(records, window, span / 2, 2)
        assert problem.startswith(f"1 GPU activities ran past the end of the judge's timed window (late_gemm on {queue}, "
                                  "ending 50.0 us after it closed)"), problem


def test_work_launched_after_the_window_closed_fails():
    records, span, window = _round([("gemm", 10_000)] * 2)
    records.append(("after_gemm", TIMED, window + 10_000, window + 19_000))
    assert "ran past the end of the judge's timed window (after_gemm" in judge_round(records, window, span / 2, 2)[0]


def test_unjoined_work_that_ends_inside_the_window_passes_here():
    """The judge's clock timed it and its copy holds it; the worker's events, which bracket none of
    it, are a claim the benchmark's figures verdict sets against the judge's clock."""
    records, span, window = _round([("gemm", 10_000)] * 2)
    records.append(("side_gemm", SIDE, 2_000, window - 5_000))
    assert judge_round(records, window, (span + 1_000) / 2, 2)[0] is None


def test_events_shorter_than_the_timed_queues_kernels_fail():
    records, span, window = _round([("gemm", 10_000)] * 50)
    problem, _ = judge_round(records, window, 1_000.0, 50)  # a clock that says 1 us a call
    assert "the events timed the round at 50.0 us, but the timed queue's kernels they bracket ran for 500.0 us" in problem


def test_events_longer_than_the_judges_window_fail():
    records, span, window = _round([("gemm", 10_000)] * 50)
    problem, _ = judge_round(records, window, 2 * window / 50, 50)
    assert problem is not None and "not read from the GPU's clock" in problem


def test_a_host_slower_than_the_gpu_is_no_disagreement():
    """Launch gaps widen the judge's window far past the events: that is the host's time."""
    records, span, window = _round([("gemm", 2_000)] * 50, gap_ns=150_000)
    assert judge_round(records, window, span / 50 + 100, 50)[0] is None


def test_activity_not_recorded_is_a_problem_of_its_own():
    """CUPTI switched off (or unavailable) in the worker leaves no markers: that is no pass."""
    for records in ([], None):
        problem, seen = judge_round(records, 1e6, 1_000.0, 50)
        assert problem.startswith(NOT_RECORDED) and seen == "not recorded"


def test_a_test_call_without_events_is_judged_on_the_window_only():
    records, _, window = _round([("gemm", 10_000)])
    assert judge_round(records, window, None, 1) == (None, "1 GPU activities: gemm x1 (stream 7 of cuda:0)")
    records.append(("late_gemm", SIDE, window, window + 10_000))
    assert judge_round(records, window, None, 1)[0].startswith("1 GPU activities ran past the end")
