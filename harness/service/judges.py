"""A judge process seen from the process that feeds it (the service's front, or a Ray actor):
started as `python -m harness.service.judge`, one request at a time, started again when it
ended (a device a candidate broke, a crash of the judge itself) or stopped answering.

The judge runs in a process of its own because it makes itself a subreaper and non-dumpable,
which its caller must never become. It ends with whoever started it: it holds the read end of a
pipe whose write end only its starter holds (harness/service/judge.py `watch_the_front`).
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time

from harness.judge.exits import EXIT_DEV_SHM_FULL, EXIT_DEVICE_LOST, EXIT_FILES_CHANGED
from harness.service.lanes import REPLENISH_LIMIT_S, replenished_lanes, waiting_workers
from harness.shared.paths import REPO_ROOT

# Beyond a run's own wall-time limit, how long a judge may take to reply before it is ended.
REPLY_GRACE_S = 120.0
# Beyond a replenish's own limit: the GPU's other lanes wait for it, so a judge that hangs in one
# is ended soon (and started again, with workers of its own).
REPLENISH_REPLY_GRACE_S = 10.0
UNLIMITED_RUN_S = 3600.0
# How long a judge has to reply once its candidate is cancelled (it ends the run's workers, then
# replies) before it is ended and started again.
CANCEL_REPLY_S = 20.0
WAIT_POLL_S = 0.2  # how often a wait for a reply looks for a cancel
# How a judge ends right after a reply, never while it judges (harness/service/judge.py `serve`): a
# request written while it was ending was never read, and goes to the judge started next.
ENDS_AFTER_A_REPLY = (EXIT_DEVICE_LOST, EXIT_DEV_SHM_FULL)


class JudgeEnded(Exception):
    pass


def workers_ready_after(reply: dict) -> int:
    """The judge's waiting workers ready once a run or a replenish of it ended, as its reply counts them."""
    return int((reply.get("judge") or {}).get("workers_ready", 0))


JUDGE_PROGRAM = (sys.executable, "-m", "harness.service.judge")


class LocalJudge:
    """A judge process on `device`; `visible_devices`, where given, is its CUDA_VISIBLE_DEVICES
    (a judge per GPU sees its GPU alone, as `cuda`); `slot` tells CPU judges of one host apart.
    `program` is the judge's command line before its options. `lane` 0 judges every mode; a
    judge of another lane takes test-mode candidates only, beside lane 0 of its GPU (or CPU slot),
    which the front gives a timed candidate alone (harness/service/front.py); `lanes` judges
    share the device."""

    def __init__(self, device: str, visible_devices: str | None = None, memory_limit_mib: int | None = None,
                 environment: dict | None = None, slot: int = 0, program: tuple[str, ...] = JUDGE_PROGRAM, lane: int = 0,
                 lanes: int = 1):
        self.device, self.visible_devices, self.memory_limit_mib = device, visible_devices, memory_limit_mib
        self.slot, self.program, self.lane = slot, tuple(program), lane
        self.waiting = waiting_workers(device, lanes)  # its share of the workers its device's lanes keep waiting
        self.replenished = replenished_lanes(device, lanes)  # its workers start on `replenish` only
        self.workers_ready = self.waiting  # as its last reply counted them
        self.modes = None if lane == 0 else ("test",)
        self._environment = dict(environment if environment is not None else os.environ)
        if visible_devices is not None:
            self._environment["CUDA_VISIBLE_DEVICES"] = visible_devices
        self._process: subprocess.Popen | None = None
        self._front_end: int | None = None  # the write end of the pipe the judge ends with
        self._ready = False
        self._lock = threading.Lock()
        self._cancel_lock = threading.Lock()  # busy_with and the cancel's deadline, against cancel()
        self._cancel_by: float | None = None
        self._cancelled_id: str | None = None  # the last cancel, for a run that begins after it
        self.host = socket.gethostname()
        self.starts = 0
        self.judged = 0
        self.busy_with: str | None = None
        self.last_exit: int | None = None
        self.sandbox: dict | None = None  # the layers its workers run under, from its ready line

    @property
    def shares(self) -> str:
        """What this judge's lanes share: its GPU, or its CPU slot."""
        return f"{self.host} GPU {self.visible_devices}" if self.visible_devices is not None else f"{self.host} {self.device} #{self.slot}"

    @property
    def name(self) -> str:
        return self.shares if self.lane == 0 else f"{self.shares} lane {self.lane}"

    def start(self) -> dict:
        """Start the process and wait for its `ready` line (its imports and first workers)."""
        self._end()
        self._ready = False
        watched, self._front_end = os.pipe()
        command = [*self.program, "--device", self.device, "--front-fd", str(watched), "--waiting-workers", str(self.waiting)]
        if self.memory_limit_mib:
            command += ["--memory-limit-mib", str(self.memory_limit_mib)]
        if self.modes == ("test",):
            command.append("--test-only")
        if self.replenished:
            command.append("--replenished")
        try:
            self._process = subprocess.Popen(command, cwd=REPO_ROOT, env=self._environment, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, text=True, bufsize=1, pass_fds=(watched,))
        finally:
            os.close(watched)
        self.starts += 1
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            self.last_exit = self._process.returncode
            raise JudgeEnded(f"the judge on {self.name} ended before it was ready (exit status {self._process.returncode})")
        self._ready = True
        self.workers_ready = self.waiting
        ready = json.loads(line)
        self.sandbox = ready.get("sandbox")
        return ready

    @property
    def alive(self) -> bool:
        """Started, ready, and still running."""
        return self._ready and self._process is not None and self._process.poll() is None

    def heartbeat(self) -> bool:
        return self.alive

    def revive(self) -> None:
        """Started again where it ended between candidates (what `judge` would do before its next)."""
        with self._lock:
            self._running()

    def cancel(self, candidate_id: str) -> bool:
        """End the run of `candidate_id` where it is this judge's: the judge is told (the id, a
        line on the pipe it ends with), ends the run's workers and replies, and judges the next
        candidate; one that has not replied within CANCEL_REPLY_S of the first cancel is ended and
        started again."""
        with self._cancel_lock:
            self._cancelled_id = candidate_id  # the front may cancel a candidate it gave this judge before its run began
            if self.busy_with != candidate_id:
                return False
            self._tell_cancel()
        return True

    def _tell_cancel(self) -> None:
        # Told once a run: a cancel again neither puts off its deadline nor fills the pipe.
        if self._front_end is None or "\n" in self.busy_with or self._cancel_by is not None:
            return
        self._cancel_by = time.monotonic() + CANCEL_REPLY_S
        try:
            os.write(self._front_end, f"{self.busy_with}\n".encode())
        except OSError:  # the judge has ended: the wait for its reply ends with it
            pass

    def _busy(self, candidate_id: str | None) -> None:
        with self._cancel_lock:
            self.busy_with, self._cancel_by = candidate_id, None
            if candidate_id is not None and candidate_id == self._cancelled_id:
                self._tell_cancel()  # before its request: the judge keeps the id for the run it begins

    def judge(self, request: dict) -> dict:
        """The judge's reply to `request`; the judge is started (again) where it is not running."""
        with self._lock:
            self._running()
            self._busy(request.get("id"))
            try:
                try:
                    return self._exchange(request)
                except JudgeEnded:
                    if self.last_exit not in ENDS_AFTER_A_REPLY:
                        raise
                    self._running()
                    return self._exchange(request)
            finally:
                self._busy(None)

    def _running(self) -> None:
        """The judge started (again) where it is not running."""
        if not self.alive:
            if self._process is not None:
                self.last_exit = self._process.returncode
            if self.last_exit == EXIT_FILES_CHANGED:
                raise JudgeEnded(f"the judge on {self.name} ended: a candidate changed the judge's files; "
                                 "check the checkout (git status) and start the service again")
            self.start()

    def replenish(self) -> None:
        """Its waiting workers started again and ready (harness/service/judge.py Judge.replenish);
        nothing where the judge is not running (a judge started again starts its own)."""
        with self._lock:
            if self.alive:
                self._exchange({"replenish": True}, REPLENISH_LIMIT_S + REPLENISH_REPLY_GRACE_S)

    def _exchange(self, request: dict, limit_s: float | None = None) -> dict:
        options = request.get("options", {})
        limit_s = limit_s or (options.get("wall_limit_s") or UNLIMITED_RUN_S) + REPLY_GRACE_S
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        reply = {}
        reader = threading.Thread(target=lambda: reply.update(line=self._process.stdout.readline()), daemon=True)
        started = time.monotonic()
        reader.start()
        while reader.is_alive():
            cancel_by, now = self._cancel_by, time.monotonic()
            if now - started >= limit_s or (cancel_by is not None and now >= cancel_by):
                break
            reader.join(WAIT_POLL_S)
        line = reply.get("line")
        if not line:
            self._end()
            why = (f"no reply within {CANCEL_REPLY_S:.0f} s of its candidate's cancel" if reader.is_alive() and self._cancel_by
                   else f"no reply within {time.monotonic() - started:.0f} s" if reader.is_alive()
                   else f"the judge process ended (exit status {self._process.returncode})")
            raise JudgeEnded(f"the judge on {self.name} gave no verdict: {why}; it starts again for the next candidate")
        reply = json.loads(line)
        if "replenished" not in reply:
            self.judged += 1
        self.workers_ready = workers_ready_after(reply)
        return reply

    def _end(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self._process is not None:
            self._process.wait()
            self.last_exit = self._process.returncode
        with self._cancel_lock:  # a cancel writes on it: never once its number may be another file's
            if self._front_end is not None:
                os.close(self._front_end)
                self._front_end = None

    def end(self) -> None:
        """The process ended now, whatever it is doing (the front is stopping)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()

    def close(self) -> None:
        if self.alive:
            self._process.stdin.close()  # the judge ends its pool and exits
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self._end()

    def status(self) -> dict:
        return {"judge": self.name, "host": self.host, "device": self.device, "gpu": self.visible_devices, "modes": self.modes,
                "alive": self.alive, "busy_with": self.busy_with, "judged": self.judged, "starts": self.starts,
                "last_exit": self.last_exit, "pid": self._process.pid if self.alive else None, "sandbox": self.sandbox}
