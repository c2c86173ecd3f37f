"""The worker process: loads the submission, runs the cases it is sent, reports each result.

Started with multiprocessing's `spawn`, so it shares no state with the harness. It runs in a
runner folder (harness/runner_files.py) and imports the submission from there, as the
competition's eval does. Its stdout and stderr go to a log file the harness shows beside the
verdict.
"""

import os
import sys
import time
import traceback
from pathlib import Path


def _redirect_output(log_path: str) -> None:
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(log_fd, 1)  # a standard stream the harness closed to its workers comes back here
    os.dup2(log_fd, 2)
    os.close(log_fd)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def _is_op_error(error: BaseException) -> bool:
    """Whether the competition's eval catches `error`: CuTeDSL's OpError, and nothing else. The
    eval imports it from cutlass.cute.nvgpu.common of the release its image pins (4.5); later
    releases have no such class, so it is recognised by name and package."""
    return any(cls.__name__ == "OpError" and cls.__module__.startswith("cutlass.") for cls in type(error).__mro__)


def serve(connection, log_path: str, repo_root: str, runner_folder: str) -> None:
    _redirect_output(log_path)
    # Like the competition: every process compiles CuTeDSL kernels afresh.
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    sys.path.insert(0, repo_root)
    os.chdir(runner_folder)
    from harness import clock
    from harness.cases import RUNNERS
    from harness.jobs import ERROR, CaseResult
    from harness.runner_files import import_submission
    from utils import set_seed

    kernel = None
    seeded = False
    true_clock = clock.capture()  # before the submission can reach it
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
                set_seed(job.global_seed)
                seeded = True
            if kernel is None and job.kind != "ceilings":
                progress("importing submission")
                kernel = import_submission(Path(runner_folder)).custom_kernel
            result = RUNNERS[job.kind](job, kernel, progress)
        except BaseException as error:  # the submission's failure is the verdict, whatever it is
            traceback.print_exc()
            result = CaseResult(ERROR, _describe(error), exception=str(error), uncaught_officially=not _is_op_error(error))
        clock.judge(result, true_clock, job.rules.strict)
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
