"""What a worker's start costs the machine, forked from a service pool's template against started
afresh: `--starts` workers of a pool that keeps none waiting (each started when asked, so no
replacement's start overlaps the one measured), each started, sent its first request (the fast
torch file's `load`: the interpreter's imports, torch's among them, and the file's) and closed.
Prints, per kind, the machine's busy CPU seconds per start (every process: the judge's side, the
sandbox, the worker) and the wall seconds per start.

    python experiments/throughput/worker_starts.py --device cpu --starts 10
    python experiments/throughput/worker_starts.py --device cuda --starts 10
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import machine  # noqa: E402  (experiments/throughput/machine.py, beside this file)

FAST_TORCH = ROOT / "tests" / "fixtures" / "torch_submission.py"


def per_start(device: str, starts: int, templates: bool) -> dict:
    """Busy CPU seconds of the machine and wall seconds per start, and what the pool used."""
    import torch

    from harness.judge.layers import LAYERS_OFF_ENV
    from harness.judge.memory import SharedPool
    from harness.runner.files import runner_files
    from harness.service.pool import WorkerPool

    os.environ[LAYERS_OFF_ENV] = "" if templates else "template"
    pool = WorkerPool(device, 42, depth=0)
    options = SimpleNamespace(device=device, rng_seed=42)
    files = {**runner_files(), "submission.py": FAST_TORCH}
    describe = SharedPool(torch.device(device)).describe
    try:
        machine.settle(2.0, 30.0)
        with tempfile.TemporaryDirectory(prefix="worker-starts-") as scratch:
            busy, started = machine.busy_s(), time.monotonic()
            for _ in range(starts):
                worker = pool.workers().worker(pool.sandbox, scratch, files, options, describe)
                worker.begin_case(300.0, lambda text: None)
                worker.request("load")
                worker.close()
            wall_s, busy_s = time.monotonic() - started, machine.busy_s() - busy
    finally:
        pool.close()
    return {"template": pool.sandbox.layers.get("template"), "cpu_s_per_start": busy_s / starts,
            "wall_s_per_start": wall_s / starts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None, help="the figures' JSON")
    arguments = parser.parse_args()
    device = "cuda:0" if arguments.device == "cuda" else "cpu"
    if arguments.device == "cuda":  # as the service's GPU judge starts: before torch's import (harness/service/judge.py)
        from harness.judge import dev_shm, judge_user

        dev_shm.own_dev_shm()
        judge_user.drop_root()
    from harness.judge.isolation import protect_the_judge

    protect_the_judge()
    figures = {"device": device, "cores": os.cpu_count(), "starts": arguments.starts}
    for kind, templates in (("afresh", False), ("from a template", True)):
        figures[kind] = found = per_start(device, arguments.starts, templates)
        print(f"a worker started {kind} (template: {found['template']}): {found['cpu_s_per_start']:.2f} CPU-s of the "
              f"machine, {found['wall_s_per_start']:.2f} s wall, per start", flush=True)
    print(f"from a template: {figures['from a template']['cpu_s_per_start'] / figures['afresh']['cpu_s_per_start']:.2f} "
          "of a fresh start's CPU-s")
    if arguments.out:
        arguments.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
