"""What the worker's calls take: the judge's shared inputs, or under --official copies of the
worker's own, as the competition's eval's calls take inputs its own process allocated."""

import pytest
import torch

from harness.judge.rounds import OWN_FLUSH_L2S
from harness.runner import calls as runner_calls
from reference import generate_input


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of the tensor's storage, whatever its type (fp4 has no comparison of its own)."""
    return torch.empty(0, dtype=torch.uint8).set_(tensor.untyped_storage())


@pytest.mark.parametrize("private", [False, True])
def test_official_calls_take_inputs_of_the_workers_own_and_hand_back_outputs_of_their_own(private):
    shared = [generate_input(128, 256, 256, 1, seed, device="cpu") for seed in (3, 4)]
    shared_memory = {tensor.untyped_storage().data_ptr() for data in shared for tensor in data}
    shared_c = [data[6].clone() for data in shared]
    taken = []

    def kernel(data):
        taken.append({tensor.untyped_storage().data_ptr() for tensor in data})
        return data[6].fill_(1.0)

    worker_side = runner_calls.Calls(".", "cpu", 42, progress=lambda text: None, kernel=kernel)
    assert worker_side.hold("batch", shared, private) == 2
    returned, _ = worker_side.run_batch("batch")
    worker_side.batch_time()

    kinds = [description[0] for description in returned]
    if private:
        assert all(not (memory & shared_memory) for memory in taken)
        assert "view" not in kinds  # the judge copies the worker's own outputs
        assert all(torch.equal(data[6], before) for data, before in zip(shared, shared_c))
    else:
        assert all(memory <= shared_memory for memory in taken)
        assert kinds == ["view", "view"]
        assert all(bool((data[6] == 1.0).all()) for data in shared)


def test_a_new_draw_written_into_the_shared_inputs_reaches_the_private_copies_at_their_addresses():
    """--official leaderboard draws every timed round afresh into the same inputs: the worker's
    copies take the new values where they are, so that a cache keyed on addresses sees the same
    addresses with new values, as it does on the judge's shared inputs."""
    shared = [generate_input(128, 256, 256, 1, 3, device="cpu")]
    worker_side = runner_calls.Calls(".", "cpu", 42, progress=lambda text: None, kernel=lambda data: data[6])
    worker_side.hold("batch", shared, private=True)
    (held,) = worker_side._held["batch"]
    addresses = [tensor.data_ptr() for tensor in held]
    fresh = generate_input(128, 256, 256, 1, 4, device="cpu")
    for mine, new in zip(shared[0], fresh):
        mine.copy_(new)
    assert not torch.equal(_bytes(held[0]), _bytes(fresh[0]))
    worker_side.refresh("batch")
    assert [tensor.data_ptr() for tensor in held] == addresses
    assert all(torch.equal(_bytes(mine), _bytes(new)) for mine, new in zip(held, fresh))


needs_a_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="the batch's own L2 overwrite (--official) runs on a CUDA queue: needs a CUDA device")


@pytest.mark.gpu
@needs_a_gpu
@pytest.mark.parametrize("own_flush_bytes, recorded", [(0, False), (1 << 20, False), (1 << 20, True)])
def test_under_official_the_batch_overwrites_l2_on_its_own_queue_between_go_and_its_start(monkeypatch, own_flush_bytes,
                                                                                         recorded):
    """The overwrite lies after the wait for the judge's go and before the batch's start event, on
    the calls' queue; the recorded batch leaves it out."""
    happened = []

    class Overwrite:
        def __init__(self, device, nbytes):
            happened.append(("made", torch.device(device).type, nbytes))

        def __call__(self):
            happened.append(("overwrote", torch.cuda.current_stream().cuda_stream))

    class JudgeEvent(torch.cuda.Event):
        def wait(self, stream=None):
            happened.append(("waited for", self.role))
            return super().wait(stream)

    go, done = JudgeEvent(interprocess=True), JudgeEvent(interprocess=True)
    go.role, done.role = "go", "done"
    record = torch.cuda.Event.record

    def logged_record(event, stream=None):
        happened.append(("recorded", getattr(event, "role", "its own event")))
        return record(event, stream)

    def kernel(data):
        happened.append(("called", torch.cuda.current_stream().cuda_stream))
        return data[6]

    monkeypatch.setattr(runner_calls, "L2Flush", Overwrite)
    monkeypatch.setattr(torch.cuda.Event, "from_ipc_handle", staticmethod(lambda device, handle: handle))
    monkeypatch.setattr(torch.cuda.Event, "record", logged_record)
    worker_side = runner_calls.Calls(".", "cuda", 42, progress=lambda text: None, kernel=kernel)
    worker_side.hold("batch", [generate_input(128, 256, 256, 1, 3, device="cuda")], private=True)
    worker_side.open_events((go, done), own_flush_bytes)
    worker_side.run_batch("batch", recorded)
    worker_side.batch_time()
    queue = torch.cuda.current_stream().cuda_stream
    made = [("made", "cuda", own_flush_bytes)] if own_flush_bytes else []
    overwrote = [("overwrote", queue)] if own_flush_bytes and not recorded else []
    assert happened[:happened.index(("called", queue)) + 1] == [
        *made, ("waited for", "go"), *overwrote, ("recorded", "its own event"), ("called", queue)]
    assert happened[-1] == ("recorded", "done")


class _AnsweringWorker:
    """Answers the clock's requests for an empty batch, keeping what it was asked."""

    def __init__(self):
        self.asked = []

    def request(self, name, *arguments):
        kept = arguments[1:] if name == "open_events" else arguments  # not the events' handles
        self.asked.append((name, *kept))
        return ([], 0.0) if name == "run_batch" else None

    def request_behind(self, name, launched, end):
        launched.result()
        torch.cuda.synchronize()  # a worker's done follows the judge's go: everything queued before it, start included, has run
        return 1.0, None


@pytest.mark.gpu
@needs_a_gpu
@pytest.mark.parametrize("official", [False, True])
@pytest.mark.parametrize("l2s", [1 / 64, OWN_FLUSH_L2S + 1])
def test_the_clock_hands_the_overwrites_size_over_under_official_only(official, l2s):
    """An eval's flush of a 64th of L2 is overwritten whole; one beyond eight L2s (better-bench's)
    gets eight."""
    from harness.judge.rounds import BATCH, JudgeClock, own_flush_bytes

    device = torch.device("cuda", torch.cuda.current_device())
    flush_bytes = int(l2s * torch.cuda.get_device_properties(device).L2_cache_size) // 4 * 4
    clock, worker = JudgeClock(device, flush_bytes, own_flush=official), _AnsweringWorker()
    clock.connect(worker)
    clock.round(worker, [])
    clock.round(worker, [], record=True)
    handed = min(flush_bytes, own_flush_bytes(device)) if official else 0
    assert worker.asked == [("open_events", handed), ("run_batch", BATCH, False), ("run_batch", BATCH, True)]
