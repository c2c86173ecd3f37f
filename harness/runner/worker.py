"""The worker process: imports the submission and does what the judge asks, nothing more.

Started with multiprocessing's `spawn`, so it shares no state with the judge. It runs in a
runner folder (harness/runner/files.py) and imports the submission from there, as the
competition's eval does. Its stdout and stderr go to a log file the judge shows beside the
verdict. Requests come from the judge (trusted); replies go through harness/wire.py, which the
judge reads as untrusted.
"""

import os
import sys
import traceback


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


def serve(connection, log_path: str, repo_root: str, runner_folder: str, device: str, global_seed: int) -> None:
    _redirect_output(log_path)
    # Like the competition: every process compiles CuTeDSL kernels afresh.
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    sys.path.insert(0, repo_root)
    os.chdir(runner_folder)
    from harness import wire
    from harness.runner import clock
    from harness.runner.calls import Calls

    true_clock = clock.capture()  # before the submission can reach it
    calls = Calls(runner_folder, device, global_seed, progress=lambda text: wire.send(connection, (wire.PROGRESS, text)))
    while True:
        try:
            request = connection.recv()  # from the judge
        except EOFError:
            return
        if request is None:
            return
        operation, arguments = request
        try:
            message = (wire.REPLY, getattr(calls, operation)(*arguments), clock.replaced(true_clock))
            encoded = wire.encode(message)
        except BaseException as error:  # the submission's failure is the judge's to read, whatever it is
            traceback.print_exc()
            encoded = wire.encode((wire.RAISED, _describe(error), str(error), _is_op_error(error)))
        sys.stdout.flush()
        sys.stderr.flush()
        connection.send_bytes(encoded)
