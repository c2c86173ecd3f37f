"""A judge process seen from the process that feeds it (the service's front, or a Ray actor):
started as `python -m harness.service.judge`, one request at a time, started again when it
ended (a device a candidate broke, a crash of the judge itself) or stopped answering.

The judge runs in a process of its own because it makes itself a subreaper and non-dumpable,
which its caller must never become.
"""

import json
import os
import subprocess
import sys
import threading
import time

from harness.runner.files import REPO_ROOT
from harness.exits import EXIT_DEV_SHM_FULL, EXIT_DEVICE_LOST, EXIT_FILES_CHANGED

# Beyond a run's own wall-time limit, how long a judge may take to reply before it is ended.
REPLY_GRACE_S = 120.0
UNLIMITED_RUN_S = 3600.0
# How a judge ends right after a reply, never while it judges (harness/service/judge.py `serve`): a
# request written while it was ending was never read, and goes to the judge started next.
ENDS_AFTER_A_REPLY = (EXIT_DEVICE_LOST, EXIT_DEV_SHM_FULL)


class JudgeEnded(Exception):
    pass


class LocalJudge:
    """A judge process on `device`; `visible_devices`, where given, is its CUDA_VISIBLE_DEVICES
    (a judge per GPU sees its GPU alone, as `cuda`)."""

    def __init__(self, device: str, visible_devices: str | None = None, memory_limit_mib: int | None = None,
                 environment: dict | None = None):
        self.device, self.visible_devices, self.memory_limit_mib = device, visible_devices, memory_limit_mib
        self._environment = dict(environment if environment is not None else os.environ)
        if visible_devices is not None:
            self._environment["CUDA_VISIBLE_DEVICES"] = visible_devices
        self._process: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self.starts = 0
        self.judged = 0
        self.busy_with: str | None = None
        self.last_exit: int | None = None
        self.sandbox: dict | None = None  # the layers its workers run under, from its ready line

    @property
    def name(self) -> str:
        return self.device if self.visible_devices is None else f"{self.device} (GPU {self.visible_devices})"

    def start(self) -> dict:
        """Start the process and wait for its `ready` line (its imports and first workers)."""
        command = [sys.executable, "-m", "harness.service.judge", "--device", self.device]
        if self.memory_limit_mib:
            command += ["--memory-limit-mib", str(self.memory_limit_mib)]
        self._process = subprocess.Popen(command, cwd=REPO_ROOT, env=self._environment, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, text=True, bufsize=1)
        self.starts += 1
        line = self._process.stdout.readline()
        if not line:
            self._process.wait()
            raise JudgeEnded(f"the judge on {self.name} ended before it was ready (exit status {self._process.returncode})")
        ready = json.loads(line)
        self.sandbox = ready.get("sandbox")
        return ready

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def judge(self, request: dict) -> dict:
        """The judge's reply to `request`; the judge is started (again) where it is not running."""
        with self._lock:
            self._running()
            self.busy_with = request.get("id")
            try:
                try:
                    return self._exchange(request)
                except JudgeEnded:
                    if self.last_exit not in ENDS_AFTER_A_REPLY:
                        raise
                    self._running()
                    return self._exchange(request)
            finally:
                self.busy_with = None

    def _running(self) -> None:
        """The judge started (again) where it is not running."""
        if not self.alive:
            if self._process is not None:
                self.last_exit = self._process.returncode
            if self.last_exit == EXIT_FILES_CHANGED:
                raise JudgeEnded(f"the judge on {self.name} ended: a candidate changed the judge's files; "
                                 "check the checkout (git status) and start the service again")
            self.start()

    def _exchange(self, request: dict) -> dict:
        options = request.get("options", {})
        limit_s = (options.get("wall_limit_s") or UNLIMITED_RUN_S) + REPLY_GRACE_S
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        reply = {}
        reader = threading.Thread(target=lambda: reply.update(line=self._process.stdout.readline()), daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(limit_s)
        line = reply.get("line")
        if not line:
            self._end()
            why = (f"no reply within {time.monotonic() - started:.0f} s" if reader.is_alive()
                   else f"the judge process ended (exit status {self._process.returncode})")
            raise JudgeEnded(f"the judge on {self.name} gave no verdict: {why}; it starts again for the next candidate")
        self.judged += 1
        return json.loads(line)

    def _end(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        if self._process is not None:
            self._process.wait()
            self.last_exit = self._process.returncode

    def close(self) -> None:
        if self.alive:
            self._process.stdin.close()  # the judge ends its pool and exits
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._end()

    def status(self) -> dict:
        return {"judge": self.name, "device": self.device, "alive": self.alive, "busy_with": self.busy_with,
                "judged": self.judged, "starts": self.starts, "last_exit": self.last_exit, "sandbox": self.sandbox}
