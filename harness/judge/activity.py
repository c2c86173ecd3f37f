"""The recorded round's GPU activity, judged: every kernel, copy and memset the calls ran, on any
queue, set against the judge's own timed window and the worker's events.

The worker records the round under CUPTI (harness/runner/gpu_activity.py) with a marker kernel on
the timed queue right behind its wait for the judge's go, so that the marker starts once the
judge's window is open, and another after the batch. The judge's window opened before the
opening marker started, so it closed no later than the judge's own window time after that
start. Work on any queue that runs between the two is inside the window: the judge's clock timed
it, and its copy of the outputs, taken at the window's end, holds what it wrote. So is honest
work on a side queue that waits for the timed queue and is joined back into it (a CUDA graph's
warm-up, as torch's documentation shows it). Work that started before the opening marker did
not wait for the judge's go (it ran during the judge's flush, untimed); work still running once
the window closed is outside the judge's clock and copy. And the worker's events, read from the
GPU's clock, can be neither shorter than the span of the timed queue's kernels they bracket nor
longer than the judge's window that holds them.
"""

import dataclasses
from collections import Counter

MARKER_KERNEL = "spin_kernel"
# Event and CUPTI timestamps both come from the GPU's timer; this covers their resolution.
AGREEMENT_RELATIVE = 0.02
AGREEMENT_ABSOLUTE_NS = 2_000
NOT_RECORDED = "the round's GPU activity was not recorded"


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    queue: str  # "stream S of cuda:D"
    start_ns: int
    end_ns: int


def _short(name: str) -> str:
    return name if len(name) <= 80 else name[:77] + "..."


def summary(kernels: list[Kernel]) -> str:
    """`N kernels on queue Q: name xcount, ...` for the report."""
    counts = Counter((kernel.queue, _short(kernel.name)) for kernel in kernels)
    return "; ".join(f"{name} x{count} ({queue})" for (queue, name), count in counts.most_common(4))


def queues(records: list | None) -> set[str]:
    """The queues the calls' GPU activity ran on (the markers' queue among them)."""
    return {str(queue) for _, queue, _, _ in records or []}


def judge_round(records: list | None, window_ns: float, event_ns_per_call: float | None,
                calls: int) -> tuple[str | None, str]:
    """(the problem, or None; what the calls launched) for the records of calls
    [(name, queue, start ns, end ns)], the judge's window around them (ns, its own clock) and,
    where events timed them, the worker's event time per call."""
    kernels = sorted((Kernel(str(name), str(queue), int(start), int(end)) for name, queue, start, end in records or []),
                     key=lambda kernel: kernel.start_ns)
    markers = [kernel for kernel in kernels if MARKER_KERNEL in kernel.name]
    if len(markers) < 2:
        return (f"{NOT_RECORDED} (CUPTI unavailable or switched off in the worker): what ran on the GPU, "
                "and when, cannot be verified"), "not recorded"
    opening, closing = markers[0], markers[-1]
    launched = [kernel for kernel in kernels if kernel is not opening and kernel is not closing]
    seen = f"{len(launched)} GPU activities: {summary(launched)}" if launched else "no GPU activity"
    slack_ns = max(AGREEMENT_RELATIVE * window_ns, AGREEMENT_ABSOLUTE_NS)
    early = [kernel for kernel in launched if kernel.start_ns < opening.start_ns - AGREEMENT_ABSOLUTE_NS]
    if early:
        kernel = early[0]
        return (f"{len(early)} GPU activities started before the judge's timed window opened ({_short(kernel.name)} on "
                f"{kernel.queue}, {(opening.start_ns - kernel.start_ns) / 1e3:.1f} us before): work that did not wait "
                "for the judge's go, outside its clock"), seen
    closes_ns = opening.start_ns + window_ns
    late = [kernel for kernel in launched if kernel.end_ns > closes_ns + slack_ns]
    if late:
        kernel = late[0]
        return (f"{len(late)} GPU activities ran past the end of the judge's timed window ({_short(kernel.name)} on "
                f"{kernel.queue}, ending {(kernel.end_ns - closes_ns) / 1e3:.1f} us after it closed): work outside the "
                "judge's clock and its copy of the outputs"), seen
    if event_ns_per_call is None:
        return None, seen
    timed = [kernel for kernel in launched if kernel.queue == opening.queue]
    span_ns = max(kernel.end_ns for kernel in timed) - min(kernel.start_ns for kernel in timed) if timed else 0
    event_ns = event_ns_per_call * calls
    if not span_ns - slack_ns <= event_ns <= window_ns + slack_ns:
        return (f"the events timed the round at {event_ns / 1e3:.1f} us, but the timed queue's kernels they bracket ran "
                f"for {span_ns / 1e3:.1f} us within the judge's window of {window_ns / 1e3:.1f} us: the times were not "
                "read from the GPU's clock"), seen
    return None, seen
