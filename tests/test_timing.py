import pytest
import torch

from harness.judge import cases
from harness.jobs import Job
from harness.runner.timing import OFFICIAL_FLUSH_BYTES, L2Flush, flush_bytes, time_rounds
from harness.shapes import parse_cases
from harness.stats import StoppingRule
from harness.wire import returned, storage_index

CPU = torch.device("cpu")


def test_rounds_time_every_input_and_stop_at_the_cap():
    calls = []
    durations_ns, host_ns = time_rounds(lambda x: calls.append(x) or x, list(range(5)), StoppingRule(4, 1e12), L2Flush(CPU), CPU)
    assert len(durations_ns) == 4 == len(host_ns)
    assert calls == list(range(5)) * 4
    assert all(d > 0 for d in durations_ns)


class ScriptedWorker:
    """Stands in for the worker process: every timed round returns c of each input, and what the
    judge wrote into c before the round is what the round's check reads, unless `skip` says the
    "kernel" left it."""

    def __init__(self, data_list, write):
        self.data_list, self.write, self.rounds = data_list, write, 0
        self.storages = storage_index(data_list)

    def request(self, operation, *arguments):
        assert operation == "timed_round"
        self.write(self.rounds, self.data_list)
        self.rounds += 1
        return 1000.0, 10.0, [returned(data[6], self.storages) for data in self.data_list]


def _benchmark_inputs(count=3):
    return [cases._generate(Job("benchmark", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 5")[0], device="cpu"), seed)
            for seed in range(count)]


@pytest.mark.parametrize("recheck, strict, rounds_checked", [
    (False, True, "last"),  # strict benchmark: the last round only
    (True, True, "every"),  # strict leaderboard: every round
    (False, False, "none"),  # the competition's benchmark checks no round
])
def test_the_judge_checks_the_rounds_its_rules_name(recheck, strict, rounds_checked):
    from harness.jobs import Rules
    from reference import ref_kernel

    data_list = _benchmark_inputs()
    expected = [ref_kernel(tuple(t.clone() for t in data)) for data in data_list]
    job = Job("benchmark", None, device="cpu", rules=Rules(strict=strict), recheck=recheck)
    wrong_in_round = 1  # the "kernel" writes the right answer in every round but this one

    def write(round_index, data_list):
        for data, reference in zip(data_list, expected):
            data[6].copy_(reference if round_index != wrong_in_round else reference + 1)

    worker = ScriptedWorker(data_list, write)
    measurement = cases._time_rounds(worker, data_list, StoppingRule(3, 1e12), on_round=lambda text: None,
                                     check_round=cases._round_checker(expected, data_list, job))
    if rounds_checked == "every":
        assert measurement.error.startswith("recheck: ") and len(measurement.durations_ns) == 2
    else:  # round 1's wrong output goes unseen: only the last (round 2, right) is checked
        assert measurement.error == "" and len(measurement.durations_ns) == 3


def test_the_last_round_is_checked_against_a_skipped_call():
    from harness.jobs import Rules
    from harness.judge.verdicts import refill_outputs
    from reference import ref_kernel

    data_list = _benchmark_inputs()
    expected = [ref_kernel(tuple(t.clone() for t in data)) for data in data_list]
    job = Job("benchmark", None, device="cpu", rules=Rules(strict=True))

    def write(round_index, data_list):  # right in the first round only; later rounds skipped
        if round_index == 0:
            for data, reference in zip(data_list, expected):
                data[6].copy_(reference)

    worker = ScriptedWorker(data_list, write)
    measurement = cases._time_rounds(worker, data_list, StoppingRule(3, 1e12), on_round=lambda text: None,
                                     before_round=lambda index: refill_outputs(data_list, index),
                                     check_round=cases._round_checker(expected, data_list, job))
    assert measurement.error.startswith("last timed round: ") and len(measurement.durations_ns) == 3


def test_flush_is_the_competitions_size_where_the_device_holds_it():
    """64 GB on a 141 GB H200 or a 180 GB B200, as the competition writes: its GPU time hides the
    host's enqueueing of the timed calls, so a smaller flush would time host overhead it does not."""
    assert OFFICIAL_FLUSH_BYTES == 16000 * 1024 * 1024 * 4
    assert flush_bytes(139 * 2**30) == OFFICIAL_FLUSH_BYTES
    assert flush_bytes(178 * 2**30) == OFFICIAL_FLUSH_BYTES


def test_flush_leaves_half_the_memory_on_a_smaller_device():
    free = 78 * 2**30 + 6  # an 80 GB H100
    size = flush_bytes(free)
    assert size < OFFICIAL_FLUSH_BYTES
    assert size % 4 == 0 and free / 2 - 4 < size <= free / 2
