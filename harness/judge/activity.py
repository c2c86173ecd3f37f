"""The recorded round's GPU activity, judged: every kernel the calls launched, with its queue
and its time, set against the CUDA events that timed the same round.

The worker records the round under CUPTI (harness/runner/gpu_activity.py) with a marker kernel on the timed
queue before the start event and after the end event. Honest work runs on that queue between
the markers. A kernel on another queue escaped the events' bracket; one that starts after the
closing marker was launched after the timed window closed. And the events, read from the GPU's
clock, can be neither shorter than the span of the kernels they bracket nor longer than the
window between the markers (launch gaps only widen that window, so no closer agreement holds
for an honest round whose host is slower than its GPU).
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


def judge_round(records: list | None, event_ns_per_call: float | None, calls: int) -> tuple[str | None, str]:
    """(the problem, or None; what the calls launched) for the records of calls
    [(name, queue, start ns, end ns)] and, where events timed them, the event time per call."""
    kernels = sorted((Kernel(str(name), str(queue), int(start), int(end)) for name, queue, start, end in records or []),
                     key=lambda kernel: kernel.start_ns)
    markers = [kernel for kernel in kernels if MARKER_KERNEL in kernel.name]
    if len(markers) < 2:
        return (f"{NOT_RECORDED} (CUPTI unavailable or switched off in the worker): what ran on the GPU, "
                "and on which queue, cannot be verified"), "not recorded"
    opening, closing = markers[0], markers[-1]
    launched = [kernel for kernel in kernels if kernel is not opening and kernel is not closing]
    seen = f"{len(launched)} GPU activities: {summary(launched)}" if launched else "no GPU activity"
    elsewhere = [kernel for kernel in launched if kernel.queue != opening.queue]
    if elsewhere:
        kernel = elsewhere[0]
        return (f"{len(elsewhere)} of the calls' kernels ran on another queue than the timed one ({_short(kernel.name)} on "
                f"{kernel.queue}, the timed queue being {opening.queue}): work the events do not bracket"), seen
    late = [kernel for kernel in launched if kernel.start_ns >= closing.start_ns]
    if late:
        return (f"{len(late)} kernel(s) started after the timed window closed ({_short(late[0].name)}): "
                "work launched after custom_kernel's calls returned"), seen
    if event_ns_per_call is None:
        return None, seen
    window_ns = closing.start_ns - opening.end_ns
    span_ns = max(kernel.end_ns for kernel in launched) - min(kernel.start_ns for kernel in launched) if launched else 0
    event_ns = event_ns_per_call * calls
    slack_ns = max(AGREEMENT_RELATIVE * window_ns, AGREEMENT_ABSOLUTE_NS)
    if not span_ns - slack_ns <= event_ns <= window_ns + slack_ns:
        return (f"the events timed the round at {event_ns / 1e3:.1f} us, but its kernels ran for {span_ns / 1e3:.1f} us "
                f"within a window of {window_ns / 1e3:.1f} us: the times were not read from the GPU's clock"), seen
    return None, seen
