"""What moves a problem folder's own eval.py's figure for one file: the eval run alone, then
under each condition a judge's machine can put around it (other CUDA contexts, the worker's
environment and sandbox, the driver's way of waiting, work between rounds), one at a time, then
`benchmark --official`, which runs the eval whole in a worker's sandbox; one line per variant, the
eval's mean per call of each benchmark case timed and its difference from the eval alone.

A file whose calls wait on the GPU (pmpp_v2/grayscale_py's ref.py makes its weights with
`torch.tensor(..., device=cuda)`, a synchronous copy from pageable memory, in every call) has its
host's work after that wait inside the timed window; one whose calls only queue work has it
hidden behind the flush. The variants tell which condition moves the first kind:

- other CUDA contexts on the GPU: the judge's and the calibration partner's (idle), a process
  that exports memory and an interprocess event to another that imports them (the judge and a
  worker), one polling an event's state every END_POLL_S (the judge waiting for a batch's end),
  one running a short kernel every millisecond (time-slicing when both have work);
- the process: the worker's environment (the sandbox's allow-list), one CPU (`taskset`), the
  CUDA driver's way of waiting for the GPU (spin, yield or blocking sync, set on the primary
  context before the eval's processes use it);
- what lies between rounds: the judge's work between a worker's batches, 2 ms of it, with the
  GPU and the host idle, the GPU busy and the host asleep, or the host busy and the GPU idle;
- how long the call's sync waits: the judge's flush and the worker's overwrite before the window
  are longer than the eval's flush (the eval's made longer by GPU work after it);
- --official, which runs the folder's eval whole in a worker's sandbox (bubblewrap's root,
  seccomp, Landlock, its cgroup and user: harness/judge/folder_eval.py), and the same with one
  of the sandbox's layers left out (NVFP4_SANDBOX_OFF).

The eval runs as experiments/problem_folders/check.py runs it (in a folder laid out as the
runner lays it out, `POPCORN_FD=N python eval.py benchmark cases.txt`); the changes to its
processes come from a sitecustomize.py on PYTHONPATH, which the eval's spawned process imports
too. Each command's output goes to the log named at the end.

    experiments/problem_folders/stage.sh PATH_TO_REFERENCE_KERNELS
    python experiments/official_vs_eval/process_context.py [--folder .reference-kernels/problems/pmpp_v2/grayscale_py]
        [--submission solutions/correct/ref.py] [--cases 1] [--variants REGEX]
"""

import argparse
import dataclasses
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "problem_folders"))

import check  # noqa: E402
from harness.judge.isolation import END_POLL_S  # noqa: E402
from harness.judge.layers import LAYERS, LAYERS_OFF_ENV  # noqa: E402
from harness.judge.sandbox import Sandbox  # noqa: E402
from harness.problems.folder_task import read_task, cases_as_tests_file  # noqa: E402

PATCH_ENV = "OFFICIAL_VS_EVAL_PATCH"
GAP_S = 0.002
GAP_CYCLES = 4_000_000  # about 2 ms of torch.cuda._sleep at Hopper's clocks
LONGER_WAIT_CYCLES = 600_000  # about 300 us: as long as the judge's flush and the worker's overwrite take beyond the eval's flush
EVAL_FLUSH_BYTES = 256 * 2**20  # pmpp_v2's and linalg's utils.clear_l2_cache: a fill_ of this many bytes
NEIGHBOUR_LIMIT_S = 120  # a neighbour that does not come up in this time fails the variant
SCHEDULING = {"spin": 1, "yield": 2, "blocking sync": 4}  # CU_CTX_SCHED_*

# Imported by every Python process of a patched variant, before the eval's own imports.
SITECUSTOMIZE = f'''
import os
import sys

patch = os.environ.get("{PATCH_ENV}", "")
if patch in {sorted(SCHEDULING)!r}:
    import ctypes

    try:  # a failure here is the variant's: the eval must not run with the driver's own choice
        cuda = ctypes.CDLL("libcuda.so.1")
        device = ctypes.c_int()
        failed = cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(device), 0) or \\
            cuda.cuDevicePrimaryCtxSetFlags_v2(device, {SCHEDULING!r}[patch])
    except OSError as error:
        failed = error
    if failed:
        print(f"sitecustomize: the context's scheduling not set to {{patch}}: {{failed}}", file=sys.stderr, flush=True)
        sys.exit(3)
elif patch == "longer wait":
    import torch

    fill = torch.Tensor.fill_

    def fill_then_more_gpu_work(self, value):
        """The eval's flush (the one fill_ of its size), then GPU work the call's sync waits for too."""
        filled = fill(self, value)
        if self.is_cuda and self.numel() * self.element_size() >= {EVAL_FLUSH_BYTES}:
            torch.cuda._sleep({LONGER_WAIT_CYCLES})
        return filled

    torch.Tensor.fill_ = fill_then_more_gpu_work
elif patch in ("idle gap", "gpu gap", "host gap"):
    import time

    import torch

    synchronize = torch.cuda.synchronize

    def synchronize_then_gap(device=None):
        """The eval's synchronize before and after each round, then the gap."""
        synchronize(device)
        if patch == "gpu gap":
            torch.cuda._sleep({GAP_CYCLES})
            time.sleep({GAP_S})
            synchronize(device)
        elif patch == "idle gap":
            time.sleep({GAP_S})
        else:
            until = time.perf_counter() + {GAP_S}
            while time.perf_counter() < until:
                pass

    torch.cuda.synchronize = synchronize_then_gap
'''

# A process beside the eval on the same GPU: prints "ready" once set up, ends when its stdin closes.
NEIGHBOUR = f'''
import select
import sys
import time

import torch
import torch.multiprocessing as multiprocessing


def stdin_closed(timeout=0.0):
    return bool(select.select([sys.stdin], [], [], timeout)[0])


def importer(queue, ready, finished):
    held, handle = queue.get()
    event = torch.cuda.Event.from_ipc_handle(torch.device("cuda", 0), handle)
    torch.cuda.current_stream().wait_event(event)
    torch.cuda.synchronize()
    ready.set()
    finished.wait()


if __name__ == "__main__":
    kind = sys.argv[1]
    device = torch.device("cuda", 0)
    held = torch.ones(16 << 20, device=device)
    event = torch.cuda.Event(interprocess=kind == "exports")
    event.record()
    torch.cuda.synchronize()
    if kind == "exports":
        context = multiprocessing.get_context("spawn")
        queue, ready, finished = context.Queue(), context.Event(), context.Event()
        child = context.Process(target=importer, args=(queue, ready, finished))
        child.start()
        queue.put((held, event.ipc_handle()))
        ready.wait()
    print("ready", flush=True)
    if kind == "polls":
        while not stdin_closed():
            event.query()
            time.sleep({END_POLL_S})
    elif kind == "busy":
        while not stdin_closed():
            torch.cuda._sleep(20_000)
            torch.cuda.synchronize()
            time.sleep(0.001)
    else:
        stdin_closed(None)
    if kind == "exports":
        finished.set()
        child.join(30)
'''


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    neighbours: tuple[str, ...] = ()  # NEIGHBOUR kinds started beside the eval
    patch: str = ""  # what SITECUSTOMIZE changes in the eval's processes
    worker_environment: bool = False  # the sandbox's environment for a worker in place of this process's
    prefix: tuple[str, ...] = ()  # before the eval's command line
    official: bool = False  # `python -m harness benchmark --official` (check.run_ours), not the eval alone
    layers_off: tuple[str, ...] = ()  # the sandbox's layers left out (harness/judge/layers.py)


VARIANTS = (
    Variant("eval"),
    Variant("eval beside an idle CUDA context", neighbours=("context",)),
    Variant("eval beside two idle CUDA contexts", neighbours=("context", "context")),
    Variant("eval beside a context exporting memory and an event to another", neighbours=("exports",)),
    Variant(f"eval beside a context polling an event every {END_POLL_S * 1e3:g} ms", neighbours=("polls",)),
    Variant("eval beside a context running a short kernel every ms", neighbours=("busy",)),
    Variant("eval in the worker's environment", worker_environment=True),
    Variant("eval on one CPU (taskset -c 0)", prefix=("taskset", "-c", "0")),
    Variant("eval, the driver spinning while it waits", patch="spin"),
    Variant("eval, the driver yielding while it waits", patch="yield"),
    Variant("eval, the driver blocking while it waits", patch="blocking sync"),
    Variant(f"eval, {GAP_S * 1e3:g} ms idle between rounds", patch="idle gap"),
    Variant(f"eval, {GAP_S * 1e3:g} ms GPU work between rounds, host asleep", patch="gpu gap"),
    Variant(f"eval, {GAP_S * 1e3:g} ms host busy between rounds, GPU idle", patch="host gap"),
    Variant(f"eval, its flush {LONGER_WAIT_CYCLES / 2e3:g} us longer (the call's sync waits longer)", patch="longer wait"),
    Variant("--official (the eval in a worker's sandbox)", official=True),
    *(Variant(f"--official, the sandbox's {layer} off", official=True, layers_off=(layer,)) for layer in LAYERS),
    Variant("eval again"),
)


def worker_environment(folder: Path) -> dict:
    """The environment the sandbox gives a CUDA worker whose folder is `folder`."""
    return Sandbox.environment(types.SimpleNamespace(_bwrap=True, _cuda=True), folder)


def start_neighbours(kinds: tuple[str, ...], log) -> list[subprocess.Popen]:
    started = []
    for kind in kinds:
        process = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, kind], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        started.append(process)
        line = process.stdout.readline() if select.select([process.stdout], [], [], NEIGHBOUR_LIMIT_S)[0] else ""
        if line.strip() != "ready":
            process.kill()
            stop_neighbours(started)
            raise RuntimeError(f"the {kind} neighbour did not come up: {process.stderr.read()[-2000:]}")
        log(f"neighbour {kind}: pid {process.pid}")
    return started


def stop_neighbours(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.stdin.close()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_variant(variant: Variant, submission: check.Submission, cases: list[dict], patches: Path, log) -> tuple[str, list[float]]:
    """(the check verdict, the means in ns) of `variant`."""
    if variant.official:
        kept = os.environ.get(LAYERS_OFF_ENV)
        os.environ[LAYERS_OFF_ENV] = ",".join(variant.layers_off)  # read by the judge's sandbox
        try:
            return check.run_ours(submission, "benchmark", cases, "cuda", True, log)
        finally:
            if kept is None:
                del os.environ[LAYERS_OFF_ENV]
            else:
                os.environ[LAYERS_OFF_ENV] = kept
    environment = None
    with tempfile.TemporaryDirectory(prefix="worker-home-") as home:
        if variant.worker_environment:
            environment = worker_environment(Path(home))
        elif variant.patch:
            environment = {**os.environ, "PYTHONPATH": str(patches), PATCH_ENV: variant.patch}
        neighbours = start_neighbours(variant.neighbours, log)
        try:
            return check.run_eval(submission, "benchmark", cases, log, environment=environment, prefix=variant.prefix)
        finally:
            stop_neighbours(neighbours)


def line(name: str, means: list[float], verdict: str, baseline: list[float] | None, seconds: float) -> str:
    if not means:
        return f"{name:<62} {verdict}  ({seconds:.0f} s)"
    figures = "  ".join(f"{mean / 1e3:8.2f}" for mean in means)
    if baseline and len(baseline) == len(means):
        figures += "  " + "  ".join(f"{mean / base - 1:+7.1%}" for mean, base in zip(means, baseline))
    return f"{name:<62} {figures}  ({seconds:.0f} s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, default=ROOT / ".reference-kernels" / "problems" / "pmpp_v2" / "grayscale_py")
    parser.add_argument("--submission", default="solutions/correct/ref.py",
                        help="relative to --folder, or a path of its own (grayscale_cached_weights.py beside this file)")
    parser.add_argument("--cases", type=int, default=1, help="the first benchmark cases timed [1]")
    parser.add_argument("--variants", default="", help="a regular expression the variants' names must match")
    parser.add_argument("--log", type=Path, default=None, help="each command's output [a temporary file]")
    arguments = parser.parse_args()
    if not arguments.folder.is_dir():
        sys.exit(f"{arguments.folder} is not there: stage the folders first (experiments/problem_folders/stage.sh)")
    submission = check.Submission(arguments.folder.resolve(), arguments.folder.resolve() / arguments.submission, "pass")
    cases = read_task(submission.folder).benchmarks[:arguments.cases]
    variants = [variant for variant in VARIANTS if re.search(arguments.variants, variant.name)]
    log_path = arguments.log or Path(tempfile.mkstemp(prefix="process-context-", suffix=".log")[1])
    patches = Path(tempfile.mkdtemp(prefix="eval-patches-"))
    (patches / "sitecustomize.py").write_text(SITECUSTOMIZE)
    print(f"{submission.label}, benchmark cases {[cases_as_tests_file([case]).strip() for case in cases]}: "
          f"mean us per call, then the difference from the first variant", flush=True)
    baseline = None
    try:
        with open(log_path, "w") as log_file:
            def log(text: str) -> None:
                log_file.write(text + "\n\n")
                log_file.flush()

            for variant in variants:
                started = time.monotonic()
                try:
                    verdict, means = run_variant(variant, submission, cases, patches, log)
                except RuntimeError as error:
                    verdict, means = str(error).splitlines()[0], []
                if baseline is None:
                    baseline = means
                print(line(variant.name, means, verdict, baseline, time.monotonic() - started), flush=True)
    finally:
        shutil.rmtree(patches, ignore_errors=True)
    print(f"log: {log_path}")


if __name__ == "__main__":
    main()
