"""Where `--official` may part from the competition's eval: the same batch of calls timed on one GPU
several ways, in turn, round by round, each after the problem's L2 flush:

- one queue: the flush, the start event, the calls and the end event on one queue of one process,
  as the competition's eval does;
- two contexts: the flush and an interprocess go event in this process; a second process's queue
  waits for go, then records its start event, makes the calls, records its end event and an
  interprocess done event, as the judge and its worker do (harness/judge/rounds.py,
  harness/runner/calls.py); this process queues nothing more;
- two contexts, settled: the same with a short kernel between the wait and the start event, so
  that the GPU has switched to the second process's context before its start event;
- two contexts, shared inputs: the second process's calls read inputs this process allocated,
  mapped through CUDA IPC, as a worker's do;
- first queue waits for done: once the second process has queued its batch, this process's queue
  waits for done and copies the last output behind it, as the judge does: a queue of the first
  context then waits on the GPU while the second context runs;
- first waits for done on the host: this process waits for done on the host, then queues the copy.

The calls are a bf16 matrix product of each benchmark shape's size, whose time is close to the
kit's kernel's on Hopper: what is measured is the timing's, not a kernel's. Prints each way's
mean per call and its difference from the one-queue figure.

    python experiments/official_vs_eval/contexts.py --shapes 128x7168x2048 --rounds 30
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch
import torch.multiprocessing as multiprocessing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.l2_flush import L2Flush  # noqa: E402
from harness.problems import load_problem  # noqa: E402

CALLS = 50  # the eval's calls per batch
SETTLE_CYCLES = 20_000  # about 10 us at Hopper's clocks: a kernel, not a wait


def operands(m: int, n: int, k: int, device) -> tuple:
    generator = torch.Generator(device=device).manual_seed(1111)
    return (torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=generator),
            torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=generator).t())


def queue_calls(a, b) -> tuple:
    """CALLS products between a start and an end event on the current queue: (events, last output)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        output = torch.mm(a, b)
    end.record()
    return (start, end), output


def ns_per_call(events: tuple) -> float:
    start, end = events
    end.synchronize()
    return start.elapsed_time(end) * 1e6 / CALLS


def second_process(connection, handles: tuple, shapes: list) -> None:
    """Each request: (shape index, settle, shared inputs or None). Replies "queued" once its batch is
    queued, then the batch's ns a call once it ran."""
    device = torch.device("cuda", 0)
    go, done = (torch.cuda.Event.from_ipc_handle(device, handle) for handle in handles)
    own = [operands(*shape, device) for shape in shapes]
    while True:
        request = connection.recv()
        if request is None:
            return
        index, settle, shared = request
        torch.cuda.current_stream().wait_event(go)
        if settle:
            torch.cuda._sleep(SETTLE_CYCLES)
        events, _ = queue_calls(*(shared if shared is not None else own[index]))
        done.record()
        connection.send("queued")
        connection.send(ns_per_call(events))


def first_queue_copy(sink: torch.Tensor, done, on_host: bool) -> None:
    """The judge's side of a round once the batch is queued: its queue waits for done (or its host
    does) and copies behind it."""
    if on_host:
        done.synchronize()
    else:
        torch.cuda.current_stream().wait_event(done)
    sink.add_(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="128x7168x16384,128x4096x7168,128x7168x2048",
                        help="MxNxK of each product, comma-separated [the three benchmark shapes]")
    parser.add_argument("--rounds", type=int, default=30)
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: the ways differ in how a GPU's contexts take turns")
    names = arguments.shapes.split(",")
    shapes = [tuple(int(size) for size in name.split("x")) for name in names]
    device = torch.device("cuda", 0)
    flush = L2Flush(device, load_problem("nvfp4_gemm").eval.flush_bytes)
    own = [operands(*shape, device) for shape in shapes]
    shared = [operands(*shape, device) for shape in shapes]
    sink = torch.zeros(1 << 20, device=device)
    go, done = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=second_process, args=(there, (go.ipc_handle(), done.ipc_handle()), shapes))
    process.start()
    # way -> (settle, shared inputs, the first's wait for done: None, "queue" or "host")
    ways = {"one queue": None, "two contexts": (False, False, None), "two contexts, settled": (True, False, None),
            "two contexts, shared inputs": (False, True, None),
            "first queue waits for done": (False, False, "queue"),
            "first waits for done on the host": (False, False, "host")}
    figures = {(name, way): [] for name in names for way in ways}
    try:
        for index, operands_ in enumerate(own):  # the first calls' library start, outside any round
            ns_per_call(queue_calls(*operands_)[0])
            go.record()
            here.send((index, False, None))
            here.recv(), here.recv()
        for _ in range(arguments.rounds):
            for index, name in enumerate(names):
                for way, request in ways.items():
                    torch.cuda.synchronize()
                    flush()
                    if request is None:
                        figures[name, way].append(ns_per_call(queue_calls(*own[index])[0]))
                        continue
                    settle, use_shared, waits = request
                    go.record()
                    here.send((index, settle, shared[index] if use_shared else None))
                    here.recv()
                    if waits is not None:
                        first_queue_copy(sink, done, waits == "host")
                    figures[name, way].append(here.recv())
    finally:
        here.send(None)
        process.join(timeout=30)
    print(f"{torch.cuda.get_device_name(device)}, bf16 products, {CALLS} calls a batch, "
          f"{arguments.rounds} rounds a way, {flush.description}")
    for name in names:
        baseline = statistics.mean(figures[name, "one queue"])
        for way in ways:
            values = figures[name, way]
            mean = statistics.mean(values)
            error = statistics.stdev(values) / len(values) ** 0.5
            print(f"{name:>15} {way:>33}  {mean:9.1f} ns a call  ± {error:5.1f}  {mean / baseline - 1:+.2%}")


if __name__ == "__main__":
    main()
