"""Event-timed rounds of back-to-back calls in a worker (the baselines), each after the L2 flush
(harness/shared/l2_flush.py)."""

import time
from typing import Callable

import torch

from harness.shared.l2_flush import L2Flush, synchronize
from harness.shared.stats import StoppingRule


def timed_round(call: Callable, inputs: list, flush: L2Flush, device: torch.device) -> tuple[float, float, list]:
    """One round: sync, flush, start event, all inputs back to back, end event, sync.

    Returns (GPU time per call, host time per call, what the calls returned), in ns. The host
    time is the wall time of the loop of calls (no sync inside it): it bounds short kernels
    launched back to back. On a CPU device the round's wall time stands in for the events.
    """
    synchronize(device)
    flush()
    if device.type == "cuda":
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        start_event.record()
    host_start = time.perf_counter_ns()
    outputs = [call(data) for data in inputs]
    host_ns = time.perf_counter_ns() - host_start
    if device.type == "cuda":
        end_event.record()
    synchronize(device)
    if device.type == "cuda":
        round_ns = start_event.elapsed_time(end_event) * 1e6
    else:
        round_ns = float(time.perf_counter_ns() - host_start)
    return round_ns / len(inputs), host_ns / len(inputs), outputs


def time_rounds(call: Callable, inputs: list, rule: StoppingRule, flush: L2Flush, device: torch.device) -> tuple[list, list]:
    """Rounds until `rule` stops them: (GPU time per call, host time per call), one per round."""
    durations_ns, host_ns = [], []
    started = rule.start()
    while not durations_ns or not rule.should_stop(durations_ns, started):
        duration, host, _ = timed_round(call, inputs, flush, device)
        durations_ns.append(duration)
        host_ns.append(host)
    return durations_ns, host_ns
