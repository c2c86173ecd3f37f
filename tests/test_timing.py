import torch

from harness.stats import StoppingRule
from harness.timing import L2Flush, time_rounds

CPU = torch.device("cpu")


def test_rounds_time_every_input_and_stop_at_the_cap():
    calls = []
    measurement = time_rounds(lambda x: calls.append(x) or x, list(range(5)), StoppingRule(4, 1e12), L2Flush(CPU), CPU)
    assert len(measurement.durations_ns) == 4 == len(measurement.host_ns)
    assert calls == list(range(5)) * 4
    assert all(d > 0 for d in measurement.durations_ns)


def test_a_failed_round_check_stops_timing_with_its_message():
    seen = []

    def check(outputs):
        seen.append(outputs)
        return "bad output" if len(seen) == 2 else None

    measurement = time_rounds(lambda x: x * 2, [1, 2], StoppingRule(10, 1e12), L2Flush(CPU), CPU, check_round=check)
    assert measurement.error == "bad output"
    assert len(measurement.durations_ns) == 2 and seen[0] == [2, 4]
