"""The service's front: a queue of candidates, one dispatching thread per judge, the verdicts.

The front never judges: it hands each candidate to the next free judge (a process per local
GPU, harness/service/judges.py, or a Ray actor per GPU of a cluster, harness/service/ray_judges.py),
keeps each candidate's state for the HTTP API (harness/service/app.py), and stores every verdict
(harness/store.py), answering a candidate already judged under the same key from the
store unless a re-run is asked for. No scheduling beyond that: each judge takes the next
candidate when it is free.
"""

import dataclasses
import itertools
import os
import queue
import threading
import time
import traceback
from pathlib import Path

from harness.document import SCHEMA
from harness.results import git_commit
from harness.store import Store, verdict_key

QUEUED, RUNNING, DONE = "queued", "running", "done"
# The options a request may set; everything else is the judge's.
OPTION_NAMES = ("official", "strict", "timeout_s", "stop_on_first_failure", "wall_limit_s", "max_repeats", "baselines")
MODES = ("test", "benchmark", "leaderboard")


@dataclasses.dataclass
class Candidate:
    id: str
    request: dict
    fields: dict  # the store's key fields
    state: str = QUEUED
    submitted_at: float = dataclasses.field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    judge: str | None = None
    cached: bool = False
    reply: dict | None = None

    def view(self) -> dict:
        reply = self.reply or {}
        return {"id": self.id, "state": self.state, "name": self.request.get("name"), "problem": self.request.get("problem"),
                "mode": self.request.get("mode"), "cached": self.cached, "judge": self.judge,
                "submitted_at": self.submitted_at, "started_at": self.started_at, "finished_at": self.finished_at,
                "exit_status": reply.get("exit_status"), "passed": (reply.get("document") or {}).get("passed"),
                "document": reply.get("document"), "report": reply.get("report")}


class Service:
    def __init__(self, judges: list, store: Store | None = None, commit: str | None = None):
        """`judges`: objects with start(), judge(request), status(), close() and `name`."""
        if not judges:
            raise ValueError("a service needs at least one judge")
        self.judges = judges
        self.store = store
        self.commit = commit or git_commit()
        self.seed_policy = "secret" if os.environ.get("POPCORN_SEED") else "fixed"
        self._queue: queue.Queue = queue.Queue()
        self._candidates: dict[str, Candidate] = {}
        self._changed = threading.Condition()
        self._numbers = itertools.count(1)
        self._threads: list[threading.Thread] = []
        self.device_names: list[str] = []
        self.started_at = time.time()

    def start(self) -> None:
        """Every judge started (in parallel: each imports torch and starts its workers), then a
        dispatching thread each."""
        ready = [None] * len(self.judges)
        failed = []

        def start_one(index):
            try:
                ready[index] = self.judges[index].start()
            except Exception as error:  # noqa: BLE001 - raised below, in the starting thread
                failed.append(error)

        starters = [threading.Thread(target=start_one, args=(index,)) for index in range(len(self.judges))]
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        if failed:  # a judge that never got ready (a sandbox lacking a layer among the reasons) stops the start
            raise failed[0]
        self.device_names = sorted({(line or {}).get("device_name") or judge.device for line, judge in zip(ready, self.judges)})
        for judge in self.judges:
            thread = threading.Thread(target=self._dispatch, args=(judge,), name=f"dispatch {judge.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=60)
        for judge in self.judges:
            judge.close()
        if self.store is not None:
            self.store.close()

    # -- candidates in ---------------------------------------------------------------------
    def submit(self, source: str | None = None, path: str | None = None, name: str | None = None, problem: str = "nvfp4_gemm",
               mode: str = "test", tests: str | None = None, rerun: bool = False, **options) -> str:
        """Queue one candidate (its source, or a path on this machine); its id. Raises ValueError
        for a request no judge could run."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if (source is None) == (path is None):
            raise ValueError("give a candidate's source or its path, one of the two")
        unknown = set(options) - set(OPTION_NAMES)
        if unknown:
            raise ValueError(f"unknown options: {', '.join(sorted(unknown))}")
        if path is not None:
            source, name = Path(path).read_text(), name or Path(path).name
        options = {key: value for key, value in options.items() if value is not None and value is not False}
        request = {"source": source, "name": name or "submission.py", "problem": problem, "mode": mode, "tests": tests,
                   "options": options}
        fields = verdict_key(source, problem, mode, tests, options, self.seed_policy, self.commit, "+".join(self.device_names))
        candidate = Candidate(id=f"c{next(self._numbers)}", request=request, fields=fields)
        request["id"] = candidate.id
        stored = None if rerun or self.store is None or self.seed_policy == "secret" else self.store.find(fields["key"])
        with self._changed:
            self._candidates[candidate.id] = candidate
            if stored is not None:
                candidate.state, candidate.cached, candidate.finished_at = DONE, True, time.time()
                candidate.reply = {"exit_status": stored["exit_status"], "document": stored["document"], "report": ""}
                self._changed.notify_all()
                return candidate.id
        self._queue.put(candidate)
        return candidate.id

    # -- candidates out --------------------------------------------------------------------
    def get(self, candidate_id: str, wait_s: float = 0.0) -> dict | None:
        """The candidate's state (its verdict once done), waiting up to `wait_s` for it."""
        deadline = time.monotonic() + wait_s
        with self._changed:
            while True:
                candidate = self._candidates.get(candidate_id)
                if candidate is None:
                    return None
                remaining = deadline - time.monotonic()
                if candidate.state == DONE or remaining <= 0:
                    return candidate.view()
                self._changed.wait(remaining)

    def status(self) -> dict:
        with self._changed:
            states = [candidate.state for candidate in self._candidates.values()]
        return {"commit": self.commit, "seed_policy": self.seed_policy, "devices": self.device_names,
                "queued": states.count(QUEUED), "running": states.count(RUNNING), "done": states.count(DONE),
                "up_s": time.time() - self.started_at, "judges": [judge.status() for judge in self.judges]}

    def healthy(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    # -- judging ---------------------------------------------------------------------------
    def _dispatch(self, judge) -> None:
        while True:
            candidate = self._queue.get()
            if candidate is None:
                return
            with self._changed:
                candidate.state, candidate.started_at, candidate.judge = RUNNING, time.time(), judge.name
            try:
                reply = judge.judge(candidate.request)
                reached = bool(reply["document"].get("cases"))
            except Exception as error:  # a judge that ended or cannot start: the candidate's reply says so
                reply = {"exit_status": 2, "report": traceback.format_exc(),
                         "document": {"schema": SCHEMA, "command": candidate.request["mode"], "passed": False,
                                      "error": f"{type(error).__name__}: {error}"}}
                reached = False
            if reached and self.store is not None and self.seed_policy != "secret":
                self.store.add(candidate.fields, candidate.request["name"], reply["document"], reply["exit_status"],
                               reply.get("rows") or ())
            with self._changed:
                candidate.reply, candidate.state, candidate.finished_at = reply, DONE, time.time()
                self._changed.notify_all()
