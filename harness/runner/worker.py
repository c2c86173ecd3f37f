"""The worker process: imports the submission and does what the judge asks, nothing more.

The judge starts it sandboxed (harness/judge/sandbox.py) as `python -I -B -c BOOTSTRAP SETTINGS`
(harness/runner/confine.py), which confines it further and calls `main` before anything but the
standard library is imported. It runs in a folder of its own, which holds the submission and
the problem's files (`task`, `utils`, `reference`) by its first request (the judge's copies, taken
from where the sandbox shows them: harness/runner/files.py `take_handed_over`), and imports them
from there, as the competition's eval does. Its stdout and stderr go to a log the
judge opened and shows beside the verdict. Requests come from the judge (trusted); replies go
through harness/shared/wire.py, which the judge reads as untrusted.
"""

import contextlib
import multiprocessing.connection
import os
import socket
import sys
import traceback

from harness.runner import confine


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def _origin(error: BaseException, folder: str) -> tuple[str, str, int]:
    """(the exception's type, file, line) of its innermost frame in the worker's own folder (the
    submission's; no file where it came through none): what tells one failure of the file from
    another whatever the message says (the shape it names, say), and where the user looks."""
    own = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename.startswith(folder)]
    return (type(error).__name__, os.path.basename(own[-1].filename), int(own[-1].lineno or 0)) if own else (type(error).__name__, "", 0)


def _is_op_error(error: BaseException) -> bool:
    """Whether the competition's eval catches `error`: CuTeDSL's OpError, and nothing else. The
    eval imports it from cutlass.cute.nvgpu.common of the release its image pins (4.5); later
    releases have no such class, so it is recognised by name and package."""
    return any(cls.__name__ == "OpError" and cls.__module__.startswith("cutlass.") for cls in type(error).__mro__)


def main(settings: dict) -> None:
    """Confine this process, then answer the judge's requests until it closes the socket."""
    begin(settings, confine.confine(settings))


def begin(settings: dict, refused: list[str]) -> None:
    """A confined worker's start: what the system refused printed, then its requests served."""
    for what in refused:
        print(f"worker: the system refused {what}", file=sys.stderr, flush=True)
    # Like the competition: every process compiles CuTeDSL kernels afresh.
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    os.chdir(settings["folder"])
    serve(settings)


def serve(settings: dict) -> None:
    from harness.shared import cuda_ipc, wire

    connection = multiprocessing.connection.Connection(settings["socket"])
    request_socket = socket.socket(fileno=os.dup(settings["socket"]))
    opened = cuda_ipc.OpenedBlocks()
    handler = _handler(settings)
    if settings["device"].startswith("cuda"):
        import torch

        # The device's context made now, while no request waits: a worker started before its
        # candidate is known (harness/service/pool.py) has it ready when its candidate comes. A
        # device that fails here fails again in the first request, whose error the judge reads.
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(torch.device(settings["device"]))
    # Said at once: a pool sees which of its waiting workers have their context (WorkerPool.replenish).
    wire.send(connection, (wire.READY,))
    calls = None
    while True:
        try:
            request = wire.receive_request(connection, request_socket, opened)
        except (EOFError, OSError):
            return
        if request is None:
            return
        operation, arguments = request
        try:
            if calls is None:  # the judge has copied the runner's files by the first request
                from harness.runner.files import take_handed_over

                take_handed_over(settings.get("handed_over"), settings["folder"])
                calls = handler(settings["folder"], settings["device"], settings["rng_seed"],
                                lambda text: wire.send(connection, (wire.PROGRESS, text)))
            encoded = wire.encode((wire.REPLY, getattr(calls, operation)(*arguments)))
        except BaseException as error:  # the submission's failure is the judge's to read, whatever it is
            traceback.print_exc()
            encoded = wire.encode((wire.RAISED, _describe(error), str(error), _is_op_error(error),
                                   _origin(error, settings["folder"])))
        sys.stdout.flush()
        sys.stderr.flush()
        connection.send_bytes(encoded)


def _handler(settings: dict):
    """The requests' handler class: the submission's (harness/runner/calls.py), or the judge's
    calibration partner's (harness/runner/echo.py), which never imports the submission."""
    if settings["echo"]:
        from harness.runner.echo import EchoCalls

        return EchoCalls
    from harness.runner.calls import Calls

    return Calls
