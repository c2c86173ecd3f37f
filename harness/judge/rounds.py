"""A round, as the judge sees it: its own clock around one batch of calls in the worker, and its
own copy of every output the batch returned, taken inside that window.

On a GPU the judge flushes L2 on its queue, records its start event and the interprocess go
event; the worker's queue waits for go, runs the batch (timed by the worker's own events, the
competition's way) and records the interprocess done event, replying at once. A queue of the
judge's for that worker waits for done, copies every output into the judge's own memory and
records the end event; a thread of the judge's makes those launches, and the judge's host waits
for the end event within the case's time limit, so that GPU work that never ends times its case
out (harness/judge/given_up.py says what the judge then gives up). Once those launches are made
(nothing of the worker's is read beside them, which would lengthen them in the window), the worker
is asked its own figure, which it reads once its work ends: work that faulted (its context then
never records done) stops the case with the worker's error at once. Work
the batch leaves unfinished when done fires (a lazy tensor, a thread, another queue, another
process) is then either inside the judge's window or missing from its copy. On the CPU the
judge's wall clock around the request plays the same part.

The window also holds a fixed cost (the hand-over between the two processes' contexts, the
reply, the copies): the same rounds run with the judge's calibration partner
(harness/runner/echo.py) measure it (`Calibration`), and it is subtracted from each round's.

Under --official the batch's process also overwrites L2 on its own queue right after go, before
its start event (`own_flush`, its size handed over with the events, harness/runner/calls.py):
the competition's eval flushes in the process that makes the calls, and a batch whose L2 holds
another context's writes runs slower (a chain of programmatic dependent kernels, by a fixed time
a call: docs/timing.md). The judge's flush before it still evicts the inputs whatever the worker
does; the partner runs the same overwrite, so that the judge's figure does not count it.
"""

import concurrent.futures
import dataclasses
import statistics
import time

import torch

from harness.judge import claims, given_up
from harness.judge.isolation import ran_through
from harness.judge.verdicts import shared_outputs
from harness.shared import wire
from harness.shared.l2_flush import L2Flush

BATCH = "batch"  # the name under which a worker holds the case's inputs
# The batch's own overwrite of L2 under --official, in multiples of the L2's size: enough that none
# of the judge's flush's lines is left (docs/timing.md has the sizes measured).
OWN_FLUSH_L2S = 8


def own_flush_bytes(gpu: torch.device) -> int:
    """What a batch's process overwrites of L2 on its own queue under --official, on `gpu`, at most."""
    return OWN_FLUSH_L2S * torch.cuda.get_device_properties(gpu).L2_cache_size


@dataclasses.dataclass
class Round:
    window_ns: float  # the judge's own clock, the whole batch and the copies
    worker_ns: float  # the worker's figure for the batch (a claim)
    host_ns: float  # the worker's host time of its loop of calls (a claim)
    outputs: list  # the judge's copies of what each call returned
    own_share: float  # the share of calls that returned something but views of the memory the judge shares
    records: list | None  # the batch's GPU activity as the worker's CUPTI recorded it (a claim)
    flush_ns: float | None  # the judge's L2 flush before the window, by its own clock
    sharing: str | None = None  # outputs of different calls in the same memory, if any
    # Whether the GPU had finished the batch when the reply came: the reply's hand-over (the
    # worker describing its outputs, the judge reading them) then lengthens the window; otherwise
    # it ran while the GPU still worked. Always so on the CPU.
    exposed: bool = True

    @property
    def returned_own(self) -> bool:
        return self.own_share > 0


def _copy(output):
    return wire.map_tensors(output, torch.Tensor.clone)


def _mapped(returned, held: list, worker) -> list:
    """What each call of the batch returned, rebuilt from the worker's reply: one description per
    held input, or the reply is refused."""
    if not isinstance(returned, list) or len(returned) != len(held):
        count = len(returned) if isinstance(returned, list) else type(returned).__name__
        raise wire.UntrustedMessageError(f"the worker answered a batch of {len(held)} calls with {count} outputs")
    return [wire.rebuild(spec, held, worker.opened) for spec in returned]


def _batch_claims(reply) -> tuple[float, list | None]:
    """The worker's figure for a batch and its GPU activity, each read as what it must be: a
    claim of another form is refused here, before any verdict computes with it."""
    if not (isinstance(reply, tuple) and len(reply) == 2):
        raise wire.UntrustedMessageError(f"the worker answered batch_time with {type(reply).__name__}")
    return claims.batch_ns(reply[0], "the batch's time"), claims.activity(reply[1])


def _own_share(returned: list) -> float:
    """The share of calls whose description held anything but views (an own tensor, a list
    holding one, anything else)."""
    def own(spec) -> bool:
        if spec[0] == "sequence":
            return any(own(item) for item in spec[2])
        return spec[0] != "view"
    return sum(own(spec) for spec in returned) / len(returned) if returned else 0.0


@dataclasses.dataclass(frozen=True)
class _Connection:
    """What the judge keeps for one worker process: the interprocess events it hands the process
    to wait on (go) and record (done), and its own queue behind the process's batches with the
    thread that launches on it."""

    go: torch.cuda.Event
    done: torch.cuda.Event
    behind: torch.cuda.Stream
    launcher: concurrent.futures.ThreadPoolExecutor


class JudgeClock:
    """The judge's events, flush and copies for the rounds of one run on one device; `flush_bytes`
    is the problem's eval's L2 flush."""

    def __init__(self, device: torch.device, flush_bytes: int, own_flush: bool = False):
        self.device = device
        self.flush = L2Flush(device, flush_bytes)
        self.is_cuda = device.type == "cuda"
        self.gpu = torch.device("cuda", device.index if device.index is not None else torch.cuda.current_device()) if self.is_cuda else None
        # Bytes each batch's process overwrites on its own queue after go (--official), or 0: the
        # eval's own flush, at most OWN_FLUSH_L2S of L2.
        self.own_flush_bytes = min(flush_bytes, own_flush_bytes(self.gpu)) if own_flush and self.is_cuda else 0
        self._connections: dict[int, _Connection] = {}  # a worker -> its current process's connection

    def connect(self, worker) -> None:
        """Hand a new worker process interprocess events of its own to wait on and record: no
        process can record another's done, the calibration partner's least of all. The judge's
        copies of its outputs wait for its done on a queue of the judge's, launched by a thread of
        the judge's kept for the process (its start stays out of the rounds); both are given up
        with the process if its work never ends (`round`)."""
        if self.is_cuda:
            connection = _Connection(torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True),
                                     torch.cuda.Stream(self.device),
                                     concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-behind-a-batch"))
            replaced = self._connections.get(id(worker))
            if replaced is not None:  # the process before, ended with its case; its launcher is idle
                replaced.launcher.shutdown(wait=False)
            self._connections[id(worker)] = connection
            worker.request("open_events", (connection.go.ipc_handle(), connection.done.ipc_handle()), self.own_flush_bytes)

    def round(self, worker, held: list, before_flush=None, before_window=None, record: bool = False) -> Round:
        """One batch of `held` (the tensors the worker holds as BATCH) through the worker.
        `before_flush` and `before_window` write into them on the judge's queue: the output buffers
        refilled (and a new draw's inputs) before the flush, a recheck's new input values after it
        (so that nothing could read them before the window)."""
        if before_flush is not None:
            before_flush()
        if not self.is_cuda:
            if before_window is not None:
                before_window()
            started = time.perf_counter_ns()
            returned, host_ns = worker.request("run_batch", BATCH, record)
            mapped = _mapped(returned, held, worker)
            outputs = [_copy(output) for output in mapped]
            window_ns = time.perf_counter_ns() - started
            worker_ns, records = _batch_claims(worker.request("batch_time"))
            return Round(window_ns, worker_ns, claims.batch_ns(host_ns, "its host time"), outputs, _own_share(returned),
                         records, None, shared_outputs(mapped))
        connection = self._connections[id(worker)]
        go, done, behind = connection.go, connection.done, connection.behind
        flush_start, flushed, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
        flush_start.record()
        self.flush()
        flushed.record()
        if before_window is not None:
            before_window()
        start.record()
        go.record()
        returned, host_ns = worker.request("run_batch", BATCH, record)
        exposed = done.query()
        mapped = _mapped(returned, held, worker)
        on_another_device = [tensor.device for output in mapped for _, tensor in wire.leaves(output) if tensor.device != self.gpu]
        if on_another_device:
            raise wire.UntrustedMessageError(f"the worker answered with an output on {on_another_device[0]}, not the judge's {self.gpu}")
        # Allocated here, before anything waits on the worker: an allocation behind the wait could
        # need cudaFree, which would wait on the whole device, the wait included.
        outputs = [wire.map_tensors(output, torch.empty_like) for output in mapped]

        def copy_behind_done() -> None:  # on the launcher's thread, whose device is named here
            with torch.cuda.device(behind.device), torch.cuda.stream(behind):
                behind.wait_event(done)
                for copy, output in zip(outputs, mapped):
                    for (_, into), (_, source) in zip(wire.leaves(copy), wire.leaves(output), strict=True):
                        into.copy_(source)
                end.record(behind)

        launched = connection.launcher.submit(copy_behind_done)
        try:
            # The worker's own figure asked for once the launches are made: its wait for its own
            # events is where a fault of its queued work shows, long before the judge's time limit.
            reply = worker.request_behind("batch_time", launched, end)
        except BaseException:
            if not ran_through(launched, end):  # the launches may have queued the wait, behind work that never ends
                given_up.give_up(behind, connection.launcher, mapped, outputs, end)
            raise
        torch.cuda.current_stream().wait_stream(behind)
        sharing = shared_outputs(mapped)
        del mapped  # the worker's own memory, mapped here: not kept past the copies
        worker_ns, records = _batch_claims(reply)
        return Round(start.elapsed_time(end) * 1e6, worker_ns, claims.batch_ns(host_ns, "its host time"), outputs,
                     _own_share(returned), records, flush_start.elapsed_time(flushed) * 1e6, sharing, exposed)


@dataclasses.dataclass(frozen=True)
class Calibration:
    """The fixed cost of a round, from the calibration partner's rounds, for each kind of round:
    whether its calls returned tensors of their own or views of the judge's memory (a costlier
    hand-over), and whether the reply's hand-over was hidden under the GPU's work (the partner
    replies at once, during the flush) or exposed (it replies once the GPU is idle, as a worker
    whose calls are bound by the host does). A round is charged the cost of its own kind, so no
    style a worker shows at one time and drops at another moves what its timed rounds are charged."""

    fixed_by_kind: dict  # (own tensors, exposed) -> median window of a round with no work
    spread_ns: float  # the largest of the kinds' standard deviations
    flush_ns: float | None  # median L2 flush while the partner waited
    longest_flush_ns: float | None  # the longest of the kinds' median flushes (a kind's rounds run in a row)

    @classmethod
    def of(cls, rounds: list[Round]) -> "Calibration":
        windows: dict[tuple[bool, bool], list[float]] = {}
        flushes: dict[tuple[bool, bool], list[float]] = {}
        for round_ in rounds:
            kind = (round_.returned_own, round_.exposed)
            windows.setdefault(kind, []).append(round_.window_ns)
            if round_.flush_ns is not None:
                flushes.setdefault(kind, []).append(round_.flush_ns)
        every_flush = [flush for values in flushes.values() for flush in values]
        return cls({kind: statistics.median(values) for kind, values in windows.items()},
                   max(statistics.stdev(values) if len(values) > 1 else 0.0 for values in windows.values()),
                   statistics.median(every_flush) if every_flush else None,
                   max(statistics.median(values) for values in flushes.values()) if flushes else None)

    @property
    def hidden_ns(self) -> float:
        """The least fixed cost measured: views handed back while the GPU works."""
        return min(self.fixed_by_kind.values())

    def fixed_ns(self, round_: Round) -> float:
        """The fixed cost of a round of `round_`'s kind: views' cost, plus the share of its calls
        that handed back tensors of their own times what the partner's own tensors cost more, a
        round being charged for the hand-overs it made and no other; of the other exposure where
        its own was not measured (the CPU has only exposed rounds)."""
        views = self._cost(False, round_.exposed)
        own = self._cost(True, round_.exposed) if round_.own_share else None
        return views + round_.own_share * max(own - views, 0.0) if own is not None else views

    def _cost(self, own: bool, exposed: bool) -> float | None:
        for kind in ((own, exposed), (own, not exposed)):
            if kind in self.fixed_by_kind:
                return self.fixed_by_kind[kind]
        return None if own else self.hidden_ns
