"""Event-timed rounds of back-to-back calls, each after an L2 flush sized to the device."""

import dataclasses
import time
from typing import Callable

import torch

from harness.stats import StoppingRule

# The competition flushes L2 by allocating a 16000 x 1024 x 1024 fp32 randn tensor (64 GB) and
# freeing it. Writing that much evicts everything; a buffer many times L2 does the same on any
# device, while staying well inside its free memory.
FLUSH_L2_MULTIPLE = 64
FLUSH_MIN_BYTES = 1 << 30
FLUSH_MAX_FREE_FRACTION = 0.25


class L2Flush:
    """Evict L2 by writing a fresh randn buffer, like the competition's flush, scaled down."""

    def __init__(self, device: torch.device):
        self.device = device
        if device.type != "cuda":
            self.bytes = 0
            self.description = "none (CPU)"
            return
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        free_bytes, _ = torch.cuda.mem_get_info(device)
        wanted = max(FLUSH_L2_MULTIPLE * l2_bytes, FLUSH_MIN_BYTES)
        self.bytes = int(min(wanted, FLUSH_MAX_FREE_FRACTION * free_bytes)) // 4 * 4
        self.description = f"{self.bytes / 2**30:.2f} GiB fp32 randn per round ({self.bytes / l2_bytes:.0f}x the {l2_bytes / 2**20:.0f} MiB L2)"

    def __call__(self) -> None:
        if self.bytes:
            scratch = torch.randn(self.bytes // 4, dtype=torch.float32, device=self.device)
            del scratch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclasses.dataclass
class Measurement:
    durations_ns: list[float]  # per call, one value per round
    host_ns: list[float]  # host time of one call, one value per round
    error: str = ""  # set when a round's check failed; timing stopped there


def time_rounds(
    call: Callable,
    inputs: list,
    rule: StoppingRule,
    flush: L2Flush,
    device: torch.device,
    check_round: Callable[[list], str | None] | None = None,
    on_round: Callable[[int], None] | None = None,
) -> Measurement:
    """Rounds of: sync, flush, start event, all inputs back to back, end event, sync.

    Per-call time = round time / len(inputs). Host time per call is the wall time of the loop of
    calls (no sync inside it) divided the same way: it bounds short kernels launched back to back.
    On a CPU device the wall time of the round stands in for the events.
    """
    measurement = Measurement([], [])
    started = rule.start()
    while True:
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
        measurement.durations_ns.append(round_ns / len(inputs))
        measurement.host_ns.append(host_ns / len(inputs))
        if check_round is not None:
            problem = check_round(outputs)
            if problem:
                measurement.error = problem
                return measurement
        if on_round is not None:
            on_round(len(measurement.durations_ns))
        if rule.should_stop(measurement.durations_ns, started):
            return measurement
