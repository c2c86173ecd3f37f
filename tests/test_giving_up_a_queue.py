"""What the judge's process can still do once it gave up a queue behind a worker's done event
(harness/judge/given_up.py): the driver calls the judge makes after a timeout, each probed
in a process of its own that is first left as such a timeout leaves the judge.

The state: a worker process opens the judge's interprocess done event, queues a spin of days,
records done behind it and hands the judge a block of its own memory; the judge maps that block,
holds memory of its own cached free in its caching allocator and in a MemPool (the SharedPool of a
run), and from a thread of its own queues, on a queue of its own, a wait for done, a copy of the
worker's block and its end event; then the worker is killed. One call of the judge's main thread
follows, given PROBE_WAIT_S to return.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="probes the CUDA driver: needs a CUDA device")]

REPO = Path(__file__).resolve().parents[1]
PROBE_WAIT_S = 10
PROCESS_LIMIT_S = 180

WORKER = textwrap.dedent("""
    import sys, time, torch
    from harness.shared import cuda_ipc
    device = torch.device("cuda", torch.cuda.current_device())
    done = torch.cuda.Event.from_ipc_handle(device, bytes.fromhex(sys.argv[1]))
    own = torch.randn(1 << 22, device=device)  # 16 MiB the judge maps and copies
    torch.cuda.synchronize()
    index, handle, place, nbytes = cuda_ipc.export(own)
    print(index, handle.hex(), place, nbytes, flush=True)
    torch.cuda._sleep(1 << 50)  # about a week at Hopper's clocks
    done.record()
    print("spinning", flush=True)
    time.sleep(3600)
""")

JUDGE = textwrap.dedent("""
    import os, subprocess, sys, threading, time, torch
    from harness.shared import cuda_ipc
    device = torch.device("cuda", torch.cuda.current_device())
    done = torch.cuda.Event(interprocess=True)
    worker = subprocess.Popen([sys.executable, "-c", WORKER, done.ipc_handle().hex()], stdout=subprocess.PIPE, text=True)
    index, handle, place, nbytes = worker.stdout.readline().split()
    assert worker.stdout.readline().strip() == "spinning"
    opened = cuda_ipc.OpenedBlocks()
    mapped = opened.storage(int(index), bytes.fromhex(handle), int(place), int(nbytes))
    torch.ones(1024, device=device).sum().item()  # kernels the judge launched before, as earlier cases did
    cached = torch.empty(64 << 20, dtype=torch.uint8, device=device)
    del cached  # a free block of the judge's own, as every earlier round leaves some
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        shared = torch.empty(64 << 20, dtype=torch.uint8, device=device)
    del shared  # a run's SharedPool after its cases
    behind, end, copy = torch.cuda.Stream(device), torch.cuda.Event(enable_timing=True), torch.empty_like(mapped)

    def launch():
        with torch.cuda.device(device), torch.cuda.stream(behind):
            behind.wait_event(done)
            copy.copy_(mapped)
            end.record(behind)

    launcher = threading.Thread(target=launch, daemon=True)
    launcher.start()
    launcher.join(5)
    worker.kill()
    worker.wait()
    time.sleep(2)
    print("QUEUE", "held in the launch" if launcher.is_alive() else ("held on the GPU" if not end.query() else "released"),
          flush=True)
    CALL
    answered = threading.Event()

    def run():
        call()
        answered.set()

    threading.Thread(target=run, daemon=True).start()
    started = time.monotonic()
    returned = answered.wait(PROBE_WAIT_S)
    print("PROBE", "returned" if returned else "held", f"{time.monotonic() - started:.1f} s", flush=True)
    os._exit(0)
""")

# What the judge's main thread calls after a give-up (today, or in a later case), and where.
CALLS = {
    # work on the judge's own queue with kernels it launched before (torch's fill and sum, which
    # the state's setup launched): a later case's refills and copies
    "a kernel launched before": "call = lambda: torch.ones(1024, device=device).sum().item()",
    # a kernel the process never launched before: the service's device check
    "a kernel's first launch": "call = lambda: torch.arange(1024, device=device).cumsum(0)[-1].item()",
    # cases._hand_over of a later case
    "the judge's own queue synchronized": "call = lambda: torch.cuda.current_stream(device).synchronize()",
    # a later case's first allocation of a size the judge's cache lacks
    "a fresh cudaMalloc": "call = lambda: torch.empty(256 << 20, dtype=torch.uint8, device=device)",
    # isolation._Spawned.close via modes.Executor.run's WorkerProcess.close, on the timed-out case
    "closing the worker's mapping": "call = opened.close",
    # the end of a run: its JudgeClock's events let go, the done event the given-up queue waits on
    "destroying the done event": "def call():\n    global done\n    del done",
    # the caching allocator's retry after a failed cudaMalloc (an output the judge clones past the
    # device's free memory: a worker's stride-0 view, or a worker that filled the device)
    "an allocation past free memory": (
        "def call():\n"
        "    try:\n"
        "        torch.empty(1 << 50, dtype=torch.uint8, device=device)\n"
        "    except torch.OutOfMemoryError:\n"
        "        pass"),
}


def _probe(name: str) -> tuple[str, str]:
    program = (f"WORKER = {WORKER!r}\nPROBE_WAIT_S = {PROBE_WAIT_S}\n"
               + JUDGE.replace("CALL\n", CALLS[name] + "\n"))
    ended = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=PROCESS_LIMIT_S)
    lines = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in ended.stdout.splitlines() if " " in line}
    assert "QUEUE" in lines and "PROBE" in lines, ended.stdout + ended.stderr
    print(f"{name}: queue {lines['QUEUE']}, call {lines['PROBE']}")
    return lines["QUEUE"], lines["PROBE"].split()[0]


# What each call does, as measured on an H200 (docs/figures.md): "returned", or "held" its thread
# for PROBE_WAIT_S; either, where the driver did both. What can hold, the judge must not call once
# it gave a queue up: given_up.py keeps memory instead of freeing it, and the process launches
# nothing more before it ends.
OUTCOMES = {
    "a kernel launched before": {"returned"},
    "a kernel's first launch": {"held"},  # loading the kernel's module waits for the device
    "the judge's own queue synchronized": {"returned"},
    "a fresh cudaMalloc": {"returned"},
    "closing the worker's mapping": {"returned"},
    "destroying the done event": {"returned"},
    "an allocation past free memory": {"returned", "held"},  # its retry's cudaFree of cached blocks
}


@pytest.mark.parametrize("name", list(CALLS))
def test_what_a_call_does_once_a_queue_was_given_up(name):
    """Each call the judge could make after giving a queue up, and whether it returns."""
    queue, call = _probe(name)
    assert queue != "released", "the driver released the judge's wait when the worker died: nothing to give up"
    assert call in OUTCOMES[name]
