"""Where `--official` may part from the competition's eval: the same batch of calls timed on one GPU
four ways, in turn, round by round, each after the problem's L2 flush:

- one queue: the flush, the start event, the calls and the end event on one queue of one process,
  as the competition's eval does;
- two contexts: the flush and an interprocess go event in this process; a second process's queue
  waits for go, then records its start event, makes the calls and records its end event, as the
  judge and its worker do under `--official` (harness/judge/rounds.py, harness/runner/calls.py);
- two contexts, settled: the same with a short kernel between the wait and the start event, so
  that the GPU has switched to the second process's context before its start event;
- two contexts, shared inputs: the second process's calls read inputs this process allocated,
  mapped through CUDA IPC, as a worker's do.

The calls are a bf16 matrix product of a benchmark shape's size, whose time is close to the
kit's kernel's on Hopper: what is measured is the timing's, not a kernel's. Prints each way's
mean per call and its difference from the one-queue figure.

    python experiments/official_vs_eval/contexts.py --shape 128x7168x2048 --rounds 30
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


def timed_calls(a, b) -> float:
    """ns a call of a batch of CALLS products, by events on the current queue around them."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        torch.mm(a, b)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e6 / CALLS


def second_process(connection, go_handle, shape: tuple) -> None:
    """Waits for each round's request: (settle, shared inputs or None); replies the batch's ns."""
    device = torch.device("cuda", 0)
    go = torch.cuda.Event.from_ipc_handle(device, go_handle)
    own = operands(*shape, device)
    while True:
        request = connection.recv()
        if request is None:
            return
        settle, shared = request
        torch.cuda.current_stream().wait_event(go)
        if settle:
            torch.cuda._sleep(SETTLE_CYCLES)
        connection.send(timed_calls(*(shared if shared is not None else own)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="128x7168x2048", help="MxNxK of the product [128x7168x2048]")
    parser.add_argument("--rounds", type=int, default=30)
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: the ways differ in how a GPU's contexts take turns")
    shape = tuple(int(size) for size in arguments.shape.split("x"))
    device = torch.device("cuda", 0)
    flush = L2Flush(device, load_problem("nvfp4_gemm").eval.flush_bytes)
    own = operands(*shape, device)
    shared = operands(*shape, device)
    go = torch.cuda.Event(interprocess=True)
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=second_process, args=(there, go.ipc_handle(), shape))
    process.start()
    ways = {"one queue": None, "two contexts": (False, None), "two contexts, settled": (True, None),
            "two contexts, shared inputs": (False, shared)}
    figures = {way: [] for way in ways}
    try:
        timed_calls(*own)  # the first calls' library start, outside any round
        torch.cuda.synchronize()
        flush()
        go.record()
        here.send((False, None))  # the second process's too
        here.recv()
        for _ in range(arguments.rounds):
            for way, request in ways.items():
                torch.cuda.synchronize()
                flush()
                if request is None:
                    figures[way].append(timed_calls(*own))
                else:
                    go.record()
                    here.send(request)
                    figures[way].append(here.recv())
    finally:
        here.send(None)
        process.join(timeout=30)
    print(f"{torch.cuda.get_device_name(device)}, bf16 {arguments.shape}, {CALLS} calls a batch, "
          f"{arguments.rounds} rounds a way, {flush.description}")
    baseline = statistics.mean(figures["one queue"])
    for way, values in figures.items():
        mean = statistics.mean(values)
        error = statistics.stdev(values) / len(values) ** 0.5
        print(f"{way:>28}  {mean:9.1f} ns a call  ± {error:5.1f}  {mean / baseline - 1:+.2%}")


if __name__ == "__main__":
    main()
