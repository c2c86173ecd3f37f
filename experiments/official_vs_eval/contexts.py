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
- two contexts, own overwrite: the same with the second process overwriting L2 on its own queue
  between the wait and the start event, as a worker does under --official (harness/judge/rounds.py
  `own_flush_bytes`);
- two contexts, first reads after its flush: the same with this process reading as many bytes,
  none of them in L2, after its flush: L2 then holds its clean lines rather than its writes;
- second process, own flush: the second process flushes L2 on its own queue and times its batch
  right behind it, as the eval does, but in the process that the other ways time across contexts;
- two contexts, shared inputs: the second process's calls read inputs this process allocated,
  mapped through CUDA IPC, as a worker's do (bf16 products only);
- first queue waits for done: once the second process has queued its batch, this process's queue
  waits for done and copies the last output behind it, as the judge does: a queue of the first
  context then waits on the GPU while the second context runs;
- first waits for done on the host: this process waits for done on the host, then queues the copy.

`--calls bf16`: a bf16 matrix product of each shape's size, whose time is close to the kit's
kernel's on Hopper: what is measured is the timing's, not a kernel's. `--calls submission`: the
submission's calls on the eval's 50 inputs of each benchmark shape (on Hopper the stand-in, a
chain of programmatic dependent kernels). Prints each way's mean per call and its difference from
the one-queue figure.

    python experiments/official_vs_eval/contexts.py --shapes 128x7168x2048 --rounds 30
    python experiments/official_vs_eval/contexts.py --calls submission --rounds 60
"""

import argparse
import shutil
import statistics
import sys
from pathlib import Path

import torch
import torch.multiprocessing as multiprocessing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.judge.rounds import own_flush_bytes  # noqa: E402
from harness.problems import load_problem  # noqa: E402
from harness.runner.files import make_runner_folder  # noqa: E402
from harness.shared.l2_flush import L2Flush  # noqa: E402

CALLS = 50  # the eval's calls per batch
SETTLE_CYCLES = 20_000  # about 10 us at Hopper's clocks: a kernel, not a wait


def operands(m: int, n: int, k: int, device) -> tuple:
    generator = torch.Generator(device=device).manual_seed(1111)
    return (torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=generator),
            torch.randn(n, k, device=device, dtype=torch.bfloat16, generator=generator).t())


def products(a, b):
    """A batch of CALLS bf16 products: queues them, returns the last output."""
    return lambda: [torch.mm(a, b) for _ in range(CALLS)][-1]


def submission_calls(args: dict, folder: str):
    """A batch of the submission's calls on the eval's inputs of one benchmark shape, from the
    runner folder."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from submission import custom_kernel

    problem = load_problem("nvfp4_gemm")
    data = [problem.generate(args, seed) for seed in problem.eval.batch_seeds(args["seed"])]
    return lambda: [custom_kernel(each) for each in data][-1]


def batches(kind: str, shapes: list, folder: str, device) -> list:
    """Each shape's batch of `kind`: shapes are (m, n, k) for bf16 products, a benchmark's args
    for the submission's calls."""
    if kind == "bf16":
        return [products(*operands(*shape, device)) for shape in shapes]
    return [submission_calls(shape, folder) for shape in shapes]


def queue_calls(batch) -> tuple:
    """A batch between a start and an end event on the current queue: (events, last output)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    output = batch()
    end.record()
    return (start, end), output


def ns_per_call(events: tuple) -> float:
    start, end = events
    end.synchronize()
    return start.elapsed_time(end) * 1e6 / CALLS


def second_process(connection, handles: tuple, kind: str, shapes: list, folder: str, flush_bytes: int) -> None:
    """Each request: (shape index, settle, shared inputs or None, own: None, "overwrite", "flush"
    or "first reads", the last the first process's work, nothing here). Replies "queued" once its
    batch is queued, then the batch's ns a call once it ran."""
    device = torch.device("cuda", 0)
    go, done = (torch.cuda.Event.from_ipc_handle(device, handle) for handle in handles)
    own_batches = batches(kind, shapes, folder, device)
    own_flush = L2Flush(device, flush_bytes)
    overwrite = L2Flush(device, own_flush_bytes(device))
    while True:
        request = connection.recv()
        if request is None:
            return
        index, settle, shared, own = request
        if own == "flush":
            torch.cuda.synchronize()
            own_flush()
        else:
            torch.cuda.current_stream().wait_event(go)
        if settle:
            torch.cuda._sleep(SETTLE_CYCLES)
        if own == "overwrite":
            overwrite()
        events, _ = queue_calls(products(*shared) if shared is not None else own_batches[index])
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
    parser.add_argument("--calls", choices=("bf16", "submission"), default="bf16",
                        help="bf16 products of each shape's size, or the submission's calls on the eval's inputs [bf16]")
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py")
    parser.add_argument("--shapes", default="128x7168x16384,128x4096x7168,128x7168x2048",
                        help="MxNxK of each batch, comma-separated, benchmark shapes under --calls submission "
                             "[the three benchmark shapes]")
    parser.add_argument("--rounds", type=int, default=30)
    arguments = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: the ways differ in how a GPU's contexts take turns")
    problem = load_problem("nvfp4_gemm")
    names = arguments.shapes.split(",")
    shapes = [tuple(int(size) for size in name.split("x")) for name in names]
    folder = ""
    if arguments.calls == "submission":
        cases = {tuple(case.args[key] for key in "mnk"): case.args for case in problem.cases("benchmarks")}
        unknown = [name for name, shape in zip(names, shapes) if shape not in cases]
        if unknown:
            sys.exit(f"no benchmark shape {', '.join(unknown)}: --calls submission draws the eval's inputs of one")
        shapes = [cases[shape] for shape in shapes]
        folder = str(make_runner_folder(arguments.submission.resolve(), problem=problem))
    device = torch.device("cuda", 0)
    flush = L2Flush(device, problem.eval.flush_bytes)
    own = batches(arguments.calls, shapes, folder, device)
    shared = [operands(*shape, device) for shape in shapes] if arguments.calls == "bf16" else None
    sink = torch.zeros(1 << 20, device=device)
    sweep = torch.ones(own_flush_bytes(device) // 4, device=device)
    go, done = torch.cuda.Event(interprocess=True), torch.cuda.Event(interprocess=True)
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=second_process, args=(there, (go.ipc_handle(), done.ipc_handle()), arguments.calls,
                                                           shapes, folder, problem.eval.flush_bytes))
    process.start()
    # way -> (settle, shared inputs, own work of the second process, the first's wait for done:
    # None, "queue" or "host"); None for the one queue
    ways = {"one queue": None, "two contexts": (False, False, None, None),
            "two contexts, settled": (True, False, None, None),
            "two contexts, own overwrite": (False, False, "overwrite", None),
            "two contexts, first reads after its flush": (False, False, "first reads", None),
            "second process, own flush": (False, False, "flush", None),
            "two contexts, shared inputs": (False, True, None, None),
            "first queue waits for done": (False, False, None, "queue"),
            "first waits for done on the host": (False, False, None, "host")}
    if shared is None:
        del ways["two contexts, shared inputs"]
    figures = {(name, way): [] for name in names for way in ways}
    try:
        for index, batch in enumerate(own):  # the first calls' library start, outside any round
            ns_per_call(queue_calls(batch)[0])
            go.record()
            here.send((index, False, None, None))
            here.recv(), here.recv()
        for turn in range(arguments.rounds):
            for index, name in enumerate(names):
                for way in (list(ways) if turn % 2 == 0 else list(reversed(ways))):
                    request = ways[way]
                    torch.cuda.synchronize()
                    if request is None:
                        flush()
                        figures[name, way].append(ns_per_call(queue_calls(own[index])[0]))
                        continue
                    settle, use_shared, own_work, waits = request
                    if own_work != "flush":
                        flush()
                        if own_work == "first reads":
                            sweep.sum()
                        go.record()
                    here.send((index, settle, shared[index] if use_shared else None, own_work))
                    here.recv()
                    if waits is not None:
                        first_queue_copy(sink, done, waits == "host")
                    figures[name, way].append(here.recv())
    finally:
        here.send(None)
        process.join(timeout=30)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    calls = "bf16 products" if arguments.calls == "bf16" else f"{arguments.submission.name}'s calls on the eval's inputs"
    print(f"{torch.cuda.get_device_name(device)}, {calls}, {CALLS} calls a batch, {arguments.rounds} rounds a way, "
          f"{flush.description}")
    for name in names:
        baseline = statistics.mean(figures[name, "one queue"])
        for way in ways:
            values = figures[name, way]
            mean = statistics.mean(values)
            error = statistics.stdev(values) / len(values) ** 0.5
            print(f"{name:>15} {way:>33}  {mean:9.1f} ns a call  ± {error:5.1f}  {mean / baseline - 1:+.2%}")


if __name__ == "__main__":
    main()
