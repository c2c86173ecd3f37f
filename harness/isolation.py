"""Worker processes with time limits: a hang becomes a timeout, a dead process a crash report."""

import multiprocessing
import signal
import tempfile
import time
from pathlib import Path

from harness import worker
from harness.jobs import CRASH, TIMEOUT, CaseResult, Job

REPO_ROOT = str(Path(__file__).resolve().parent.parent)
POLL_S = 0.2
OUTPUT_TAIL_CHARS = 4000


def _exit_description(exitcode: int | None) -> str:
    if exitcode is None:
        return "still running"
    if exitcode < 0:
        try:
            return f"killed by signal {signal.Signals(-exitcode).name} (exit status {exitcode})"
        except ValueError:
            return f"killed by signal {-exitcode} (exit status {exitcode})"
    return f"exit status {exitcode}"


class WorkerProcess:
    """One spawned worker; `run` sends a job and waits for its result at most `timeout_s`."""

    def __init__(self, log_dir: str, runner_folder: Path):
        self._context = multiprocessing.get_context("spawn")
        self._log_dir = log_dir
        self._runner_folder = str(runner_folder)
        self._process = None
        self._connection = None
        self.log_path = None

    def _start(self) -> None:
        self._connection, child_end = self._context.Pipe()
        log = tempfile.NamedTemporaryFile(dir=self._log_dir, prefix="worker-", suffix=".log", delete=False)
        log.close()
        self.log_path = log.name
        self._process = self._context.Process(target=worker.serve, args=(child_end, self.log_path, REPO_ROOT, self._runner_folder), name="nvfp4-worker")
        self._process.start()
        child_end.close()

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def run(self, job: Job, timeout_s: float, on_progress=lambda text: None) -> CaseResult:
        if not self.alive:
            self._start()
        log_start = Path(self.log_path).stat().st_size
        started = time.monotonic()
        try:
            self._connection.send(job)
            result = self._wait(started + timeout_s, on_progress)
        except (BrokenPipeError, EOFError, ConnectionResetError):
            result = self._crashed()
        if result.status == TIMEOUT:
            result.message = f"no result within the {timeout_s:.0f} s time limit; worker killed (raise it with --timeout)"
        result.output = self._output_since(log_start)
        result.wall_s = time.monotonic() - started
        return result

    def _wait(self, deadline: float, on_progress) -> CaseResult:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return CaseResult(TIMEOUT)
            if self._connection.poll(min(remaining, POLL_S)):
                kind, payload = self._connection.recv()
                if kind == "result":
                    return payload
                on_progress(payload)
            elif not self._process.is_alive():
                return self._crashed()
            else:
                on_progress(None)

    def _crashed(self) -> CaseResult:
        self._process.join(timeout=5)
        return CaseResult(CRASH, f"worker process died without a result: {_exit_description(self._process.exitcode)}")

    def _output_since(self, offset: int) -> str:
        with open(self.log_path, "rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", errors="replace")
        return text[-OUTPUT_TAIL_CHARS:]

    def kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)

    def close(self) -> None:
        if self.alive:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=10)
        self.kill()
