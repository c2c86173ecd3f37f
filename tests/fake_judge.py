"""A stand-in for harness/service/judge.py that speaks its protocol (a ready line, then a request
a line in and a reply a line out, and the end of the front's pipe) without torch or workers:
what the service's supervision, queue and restarts are tested with, in a fraction of a second a
candidate.

A candidate passes unless its source says `wrong`; `sleep S` in it holds the judge S seconds, or
until the front cancels it (its reply then says `cancelled`); `ignores cancel` makes the sleep
hold through a cancel;
`no worker` makes its first case end in the worker's start (an environment fault, not the
file's). Each judged id is appended, with this process's id, to the file FAKE_JUDGE_LOG names, with its mode and when its run began and ended.
With `--replenished`, each run takes one of its `--waiting-workers` and a `replenish` request
starts them all again in FAKE_REPLENISH_S seconds (0.2 by default), logged as a run whose id is
`replenish`.
"""

import argparse
import json
import os
import re
import sys
import threading
import time

from harness.service.judge import watch_the_front


class Cancels:
    """The id the front cancelled last, and the running candidate's sleep cut short by it."""

    def __init__(self):
        self._lock = threading.Lock()
        self.cancelled_id = self.running_id = None
        self.event = threading.Event()

    def cancel(self, candidate_id: str) -> None:
        with self._lock:
            self.cancelled_id = candidate_id
            if candidate_id == self.running_id:
                self.event.set()

    def begin(self, candidate_id) -> threading.Event:
        with self._lock:
            self.running_id, self.event = candidate_id, threading.Event()
            if candidate_id is not None and candidate_id == self.cancelled_id:
                self.event.set()
            return self.event


CANCELS = Cancels()


def _overlapped(candidate_id) -> bool:
    """Whether a run of another candidate is going on now: its start is in FAKE_JUDGE_RUNNING."""
    running = os.environ.get("FAKE_JUDGE_RUNNING")
    return bool(running) and any(name != str(candidate_id) for name in os.listdir(running))


def reply_to(request: dict) -> dict:
    source = request["source"]
    cancelled = CANCELS.begin(request.get("id"))
    sleep = re.search(r"sleep ([0-9.]+)", source)
    if sleep and "ignores cancel" in source:
        time.sleep(float(sleep.group(1)))
    elif sleep and cancelled.wait(float(sleep.group(1))):
        return {"exit_status": 112, "report": "", "document": {"passed": False, "cancelled": True, "cases": []}}
    lines = (request.get("tests") or "one case\n").splitlines()
    if "no worker" in source:
        cases = [{"index": 0, "status": "crash", "message": "worker process died without a result", "phases_s": {"start": 0.1}}]
        return {"exit_status": 112, "report": "", "document": {"passed": False, "cases": cases}}
    # `wrong beside others`: fails where another candidate's run overlapped this one (FAKE_JUDGE_LOG's
    # runs so far, and the runs still going that it names), as a run short of a shared resource.
    passed = "wrong" not in source or ("wrong beside others" in source and not _overlapped(request.get("id")))
    cases = [{"index": index, "status": "pass" if passed else "fail", "message": None, "phases_s": {"start": 0.1, "import": 0.1}}
             for index, _ in enumerate(lines)]
    return {"exit_status": 0 if passed else 112, "report": f"judged {request.get('name')}\n",
            "document": {"passed": passed, "cases": cases, "submission": request.get("name")}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--memory-limit-mib", type=int, default=None)
    parser.add_argument("--front-fd", type=int, default=None)
    parser.add_argument("--test-only", action="store_true")
    parser.add_argument("--waiting-workers", type=int, default=None)
    parser.add_argument("--replenished", action="store_true")
    arguments = parser.parse_args()
    ready = arguments.waiting_workers or 1
    if arguments.front_fd is not None:
        watch_the_front(arguments.front_fd, CANCELS.cancel)
    log = os.environ.get("FAKE_JUDGE_LOG")
    print(json.dumps({"ready": True, "device": arguments.device, "device_name": "fake device", "pid": os.getpid(),
                      "waiting_workers": arguments.waiting_workers}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        started = time.time()
        if request.get("replenish"):
            time.sleep(float(os.environ.get("FAKE_REPLENISH_S", "0.2")))
            ready = arguments.waiting_workers or 1
            if log:
                with open(log, "a") as out:
                    out.write(f"replenish {os.getpid()} replenish {started} {time.time()}\n")
            print(json.dumps({"replenished": True, "judge": {"workers_ready": ready}}), flush=True)
            continue
        if arguments.replenished:
            ready = max(ready - 1, 0)
        running = os.environ.get("FAKE_JUDGE_RUNNING")
        if running:
            open(os.path.join(running, str(request.get("id"))), "w").close()
        try:
            reply = reply_to(request)
        finally:
            if running:
                os.unlink(os.path.join(running, str(request.get("id"))))
        if log:
            with open(log, "a") as out:
                out.write(f"{request.get('id')} {os.getpid()} {request.get('mode')} {started} {time.time()}\n")
        print(json.dumps({"id": request.get("id"), **reply, "judge": {"workers_ready": ready}}), flush=True)


if __name__ == "__main__":
    main()
