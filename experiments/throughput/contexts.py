"""How a GPU's driver takes CUDA contexts made at once: N processes that imported torch are let go
together, and each times its context and a first 1024² matmul; then the same under an MPS
daemon of this command's own, which it quits at the end (nothing of the device's settings is
changed). One JSON line per set.

    python experiments/throughput/contexts.py [N ...]        (default: 1 4 8 16)

Where a test-mode lane's time goes (docs/service.md, Throughput): every candidate takes a fresh
worker, whose context the driver makes device-wide in turn.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, time
import torch
print("ready", flush=True)
sys.stdin.read(1)
started = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
made = time.perf_counter()
matrix = torch.randn(1024, 1024, device="cuda")
(matrix @ matrix).sum().item()
print(json.dumps({"context_s": made - started, "matmul_s": time.perf_counter() - made, "ended": time.time()}))
"""


def contexts_at_once(count: int, environment: dict) -> dict:
    children = [subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=environment) for _ in range(count)]
    for child in children:  # every child past torch's import before any is let go
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("a child did not start")
    let_go = time.time()
    for child in children:
        child.stdin.write("g")
        child.stdin.flush()
    rows = [json.loads(child.communicate(timeout=300)[0].strip().splitlines()[-1]) for child in children]
    contexts = [row["context_s"] for row in rows]
    return {"processes": count, "context_s_median": round(statistics.median(contexts), 3), "context_s_max": round(max(contexts), 3),
            "matmul_s_median": round(statistics.median(row["matmul_s"] for row in rows), 3),
            "all_ended_s": round(max(row["ended"] for row in rows) - let_go, 3)}


def sets(label: str, environment: dict, counts: list[int]) -> None:
    for count in counts:
        print(json.dumps({"mps": label, **contexts_at_once(count, environment)}), flush=True)


def main() -> None:
    counts = [int(count) for count in sys.argv[1:]] or [1, 4, 8, 16]
    sets("off", dict(os.environ), counts)
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        print(json.dumps({"mps": "no nvidia-cuda-mps-control on PATH"}))
        return
    pipes, logs = tempfile.mkdtemp(prefix="mps-pipe-"), tempfile.mkdtemp(prefix="mps-log-")
    environment = dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipes, CUDA_MPS_LOG_DIRECTORY=logs)
    started = subprocess.run([control, "-d"], env=environment, capture_output=True, text=True)
    try:
        if started.returncode != 0:
            print(json.dumps({"mps": f"the daemon did not start: {started.stderr[-300:]}"}))
            return
        sets("on", environment, counts)
    finally:
        subprocess.run([control], input="quit\n", env=environment, capture_output=True, text=True)


if __name__ == "__main__":
    main()
