"""The worker process: imports the submission and does what the judge asks, nothing more.

Started with multiprocessing's `spawn`, so it shares no state with the judge. It runs in a
runner folder (harness/runner/files.py) and imports the submission, and the problem's files the
submission imports, from there, as the competition's eval does. Its stdout and stderr go to a
log file the judge shows beside the verdict. Requests come from the judge (trusted); replies go
through harness/wire.py, which the judge reads as untrusted.

Before the submission can run, the process gives up what would let it reach the judge: it
leaves the judge's session and, where it runs as root, every capability (for good: the bounding
set too, and no exec can win them back), so that the judge's descriptors under /proc stay closed
to it and everything it starts (harness/judge/isolation.py).
"""

import ctypes
import os
import sys
import traceback

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522
HIGHEST_CAPABILITY = 63


def _redirect_output(log_path: str) -> None:
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    os.dup2(log_fd, 1)  # a standard stream the harness closed to its workers comes back here
    os.dup2(log_fd, 2)
    os.close(log_fd)


def stay_out_of_reach() -> None:
    """The calibration partner, not dumpable: with no capability left it would otherwise be open
    to its sibling workers of the same user (ptrace, /proc/<pid>/mem), which could slow its
    rounds and so inflate the fixed cost the judge subtracts from theirs."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            print(f"partner: the system refused prctl(PR_SET_DUMPABLE) ({os.strerror(ctypes.get_errno())}): "
                  "workers can reach this process", file=sys.stderr, flush=True)


def give_up_privileges() -> None:
    """Leave the judge's session; drop every Linux capability, bounding set included, and forbid
    gaining new ones. A judge that runs as root (GPU machines, containers) can then not be reached
    by its workers through /proc/<judge>/fd, which the kernel grants a process of the same user
    only with CAP_SYS_PTRACE. The user stays the judge's: CUDA IPC, which shares the judge's
    inputs, refuses a process of another user ("mapping of buffer object failed", H100)."""
    os.setsid()
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(HIGHEST_CAPABILITY + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # fails harmlessly for numbers the kernel lacks
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    no_capabilities = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two words each
    # A sandbox that refuses either still runs the case; the case's output says so.
    for what, call in (("prctl(PR_SET_NO_NEW_PRIVS)", lambda: libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
                       ("capset", lambda: libc.capset(header, no_capabilities))):
        if call() != 0:  # errno read right after its own call
            print(f"worker: the system refused {what} ({os.strerror(ctypes.get_errno())}): "
                  "this worker keeps privileges it should not", file=sys.stderr, flush=True)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip()


def _origin(error: BaseException) -> str:
    """The exception's type and the submission's line it was raised at or through (its deepest
    frame in submission.py): what tells one failure of the file from another whatever the
    message says (the shape it names, say)."""
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if os.path.basename(frame.filename) == "submission.py"]
    where = f" at submission.py:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}"


def _is_op_error(error: BaseException) -> bool:
    """Whether the competition's eval catches `error`: CuTeDSL's OpError, and nothing else. The
    eval imports it from cutlass.cute.nvgpu.common of the release its image pins (4.5); later
    releases have no such class, so it is recognised by name and package."""
    return any(cls.__name__ == "OpError" and cls.__module__.startswith("cutlass.") for cls in type(error).__mro__)


def serve(connection, log_path: str, repo_root: str, runner_folder: str, device: str, global_seed: int,
          echo: bool = False) -> None:
    """Answer the judge's requests until it closes the connection. With `echo`, the process is
    the judge's calibration partner: it runs the same requests with a kernel of the judge's own
    (harness/judge/calibration.py) and never imports the submission."""
    _redirect_output(log_path)
    give_up_privileges()
    if echo:
        stay_out_of_reach()
    # Like the competition: every process compiles CuTeDSL kernels afresh.
    os.environ["CUTE_DSL_DISABLE_FILE_CACHING"] = "1"
    # The harness from the repository; `task`, `utils` and `reference` (the submission's imports,
    # the set_seed this process calls) from the runner folder, the problem's, ahead of any other.
    sys.path[:0] = [runner_folder, repo_root]
    os.chdir(runner_folder)
    from harness import wire
    from harness.runner.calls import Calls

    progress = lambda text: wire.send(connection, (wire.PROGRESS, text))  # noqa: E731
    if echo:
        from harness.judge.calibration import EchoCalls

        calls = EchoCalls(runner_folder, device, global_seed, progress)
    else:
        calls = Calls(runner_folder, device, global_seed, progress)
    while True:
        try:
            request = connection.recv()  # from the judge
        except EOFError:
            return
        if request is None:
            return
        operation, arguments = request
        try:
            encoded = wire.encode((wire.REPLY, getattr(calls, operation)(*arguments)))
        except BaseException as error:  # the submission's failure is the judge's to read, whatever it is
            traceback.print_exc()
            encoded = wire.encode((wire.RAISED, _describe(error), str(error), _is_op_error(error), _origin(error)))
        sys.stdout.flush()
        sys.stderr.flush()
        connection.send_bytes(encoded)
