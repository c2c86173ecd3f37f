"""The worker process: loads the submission, runs the cases it is sent, reports each result.

Started with multiprocessing's `spawn`, so it shares no state with the harness. Its stdout and
stderr go to a log file the harness shows beside the verdict.
"""

import os
import random
import sys
import time
import traceback
from pathlib import Path


def _redirect_output(log_path: str) -> None:
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)


def _set_seed(seed: int) -> None:
    import torch

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:
        pass


def load_custom_kernel(submission: Path):
    """Import the file as the module `submission`, with its folder importable like on the server."""
    import importlib.util

    path = Path(submission).resolve()
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("submission", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "custom_kernel", None)):
        raise AttributeError(f"{path.name} defines no callable custom_kernel")
    return module.custom_kernel


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def serve(connection, log_path: str, repo_root: str) -> None:
    _redirect_output(log_path)
    # Like the competition: every process compiles CuTeDSL kernels afresh.
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    sys.path.insert(0, repo_root)
    from harness.cases import RUNNERS
    from harness.jobs import ERROR, CaseResult

    kernel = None
    seeded = False
    while True:
        try:
            job = connection.recv()
        except EOFError:
            return
        if job is None:
            return
        started = time.perf_counter()

        def progress(text: str) -> None:
            connection.send(("progress", text))

        try:
            _make_current(job.device)
            if not seeded:
                _set_seed(job.global_seed)
                seeded = True
            if kernel is None and job.kind != "ceilings":
                progress("importing submission")
                kernel = load_custom_kernel(job.submission)
            result = RUNNERS[job.kind](job, kernel, progress)
        except BaseException as error:  # the submission's failure is the verdict, whatever it is
            traceback.print_exc()
            result = CaseResult(ERROR, _describe(error))
        result.device_name = _device_name(job.device)
        result.wall_s = time.perf_counter() - started
        sys.stdout.flush()
        sys.stderr.flush()
        connection.send(("result", result))


def _make_current(device: str) -> None:
    """Make the case's device the current one, as it is where the competition runs a case: a
    submission's kernel launch, a CUDA event, anything that names no device goes where the
    inputs are (`--device cuda:1` would otherwise time device 0's idle queue)."""
    import torch

    parsed = torch.device(device)
    if parsed.type == "cuda" and parsed.index is not None:
        torch.cuda.set_device(parsed.index)


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"
