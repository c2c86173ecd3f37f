"""The service's front: the candidates in SQLite, one dispatching thread per judge, the verdicts.

The front never judges: it hands each candidate to the next free judge (a process per local
GPU, harness/service/judges.py, or a Ray actor per GPU of a cluster, harness/service/ray_judges.py),
keeps each candidate in the candidates table (harness/service/candidates.py) from the moment it
accepts it, and stores every verdict (harness/results/store.py), answering a candidate already judged
under the same key from the store unless a re-run is asked for.

Every reply names its class (harness/service/faults.py). Only a verdict is stored as the file's;
a candidate whose reply is the machinery's fault goes back to the queue, for another judge or the
same one started afresh, `attempts` times at most, then ends with that reply.

Each dispatching thread is its judge's supervisor too: between candidates it checks its judge
every HEARTBEAT_S (a process that ended, an actor that stopped answering) and starts it again; a
judge that ends during a candidate ends the call at once, and the candidate goes back to the
queue. A front that stops (SIGTERM, SIGINT) ends its judges and puts their candidates back in the
queue, which a front started again on the same file takes first.
"""

import os
import sys
import threading
import time
import traceback
from pathlib import Path

from harness.results.document import SCHEMA
from harness.shared.paths import git_commit
from harness.results.store import Store, verdict_key
from harness.service.candidate_files import CandidateFiles
from harness.service.candidates import CANCELLED, DONE, ENDED, QUEUED, RUNNING, Candidates, KeyTaken
from harness.service.faults import INFRASTRUCTURE, VERDICT, classify
from harness.service.judges import JudgeEnded
from harness.service.lanes import DeviceGate
from harness.submitting.lint import MAX_BYTES

# The options a request may set; everything else is the judge's.
OPTION_NAMES = ("official", "strict", "timeout_s", "stop_on_first_failure", "wall_limit_s", "max_repeats", "baselines")
MODES = ("test", "benchmark", "leaderboard")
ATTEMPTS = 3  # runs of a candidate whose reply is the machinery's fault, before it is returned as such
HEARTBEAT_S = 0.5
RESTART_AFTER_S = 5.0  # between attempts to start a judge that would not start
MAX_SOURCE_BYTES = MAX_BYTES  # the competition's limit on a submission
# A candidate that names no wall-time limit runs under these: a hanging file holds a judge for
# minutes, not for ten cases of their own limit each.
DEFAULT_WALL_LIMIT_S = {"test": 300.0, "benchmark": 900.0, "leaderboard": 900.0}
NOTE_RESTARTED = "running when the front ended; queued again by the front started next"
NOTE_STOPPED = "running when the front was stopped; queued again"
CANCEL_WAIT_S = 30.0  # a cancel's answer waits this long for a running candidate's end (its judge's bound is less)


class Refused(ValueError):
    """Requests no judge could run: `errors`, one per request (None for those that could)."""

    def __init__(self, errors: list[str | None]):
        self.errors = errors
        super().__init__("; ".join(f"candidate {index}: {error}" for index, error in enumerate(errors) if error))


class Service:
    def __init__(self, judges: list, store: Store | None = None, commit: str | None = None,
                 candidates: Candidates | None = None, attempts: int = ATTEMPTS, max_source_bytes: int = MAX_SOURCE_BYTES,
                 default_wall_limit_s: dict | None = None, candidate_dirs=()):
        """`judges`: objects with start(), judge(request), cancel(id), status(), close(), end(),
        heartbeat(), revive(), `alive`, `name`, `modes` (those it takes, None for all),
        `shares` (the device its lanes share: harness/service/lanes.py) and `replenished` (where
        true, with replenish(), `waiting` and `workers_ready`: its workers start between runs), as
        harness/service/judges.py LocalJudge. `candidates`: the table (kept in memory without
        one: nothing outlives the front). `candidate_dirs`: the folders whose files a request may
        name by `path` (harness/service/candidate_files.py); none, no path is read."""
        if not judges:
            raise ValueError("a service needs at least one judge")
        self.judges = judges
        self.store = store
        self.candidates = candidates or Candidates(":memory:")
        self.commit = commit or git_commit()
        self.attempts, self.max_source_bytes = attempts, max_source_bytes
        self.candidate_files = CandidateFiles(candidate_dirs, max_source_bytes)
        self.default_wall_limit_s = DEFAULT_WALL_LIMIT_S if default_wall_limit_s is None else default_wall_limit_s
        self.seed_policy = "secret" if os.environ.get("POPCORN_SEED") else "fixed"
        self._work = threading.Condition()  # a candidate queued, or one that ended
        self._stopping = threading.Event()
        self._cancelled: set[str] = set()
        self._busy_s = {id(judge): 0.0 for judge in judges}  # a Ray judge takes its name once started
        self._gates = {judge.shares: DeviceGate() for judge in judges}
        self.retried = 0
        self.judged_again_alone = 0  # test-mode runs that failed beside another, judged again alone
        self._threads: list[threading.Thread] = []
        self.device_names: list[str] = []
        self.started_at = time.time()
        self.recovered = 0

    def start(self) -> None:
        """The candidates a front before this one left running queued again, every judge started
        (in parallel: each imports torch and starts its workers), then a dispatching thread each."""
        self.recovered = self.candidates.recover(NOTE_RESTARTED)
        ready = [None] * len(self.judges)
        failed = []

        def start_one(index):
            try:
                ready[index] = self.judges[index].start()
            except JudgeEnded as error:  # its dispatching thread starts it again; raised below where none started
                print(f"front: {error}", file=sys.stderr, flush=True)
                failed.append(error)
            except Exception as error:  # noqa: BLE001 - as above, with the machinery's own fault shown whole
                traceback.print_exc()
                failed.append(error)

        starters = [threading.Thread(target=start_one, args=(index,)) for index in range(len(self.judges))]
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        if not any(ready):  # no judge got ready (a sandbox lacking a layer among the reasons): the start stops
            raise failed[0] if failed else RuntimeError("no judge started")
        self.device_names = sorted({(line or {}).get("device_name") or judge.device for line, judge in zip(ready, self.judges) if line})
        for judge in self.judges:
            thread = threading.Thread(target=self._dispatch, args=(judge,), name=f"dispatch {judge.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        """Stop taking candidates; end the judges (a candidate running goes back to the queue)."""
        self._stopping.set()
        with self._work:
            self._work.notify_all()
        for judge in self.judges:
            judge.end()
        for thread in self._threads:
            thread.join(timeout=60)
        for judge in self.judges:
            judge.close()
        self.candidates.recover(NOTE_STOPPED)
        self.candidates.close()
        if self.store is not None:
            self.store.close()

    # -- candidates in ---------------------------------------------------------------------
    def submit(self, source: str | None = None, **fields) -> str:
        """Queue one candidate; its id. Raises Refused for a request no judge could run."""
        return self.submit_batch([{"source": source, **fields}])[0]

    def submit_batch(self, requests: list[dict]) -> list[str]:
        """Queue every request, or none: their ids in order; Refused names each refused one."""
        entries, errors = [], []
        for fields in requests:
            try:
                entries.append(self._entry(**fields))
                errors.append(None)
            except (ValueError, OSError) as error:
                errors.append(str(error))
        if any(errors):
            raise Refused(errors)
        try:
            ids = self.candidates.add(entries)
        except KeyTaken as taken:
            raise Refused([str(taken) if index == taken.index else None for index in range(len(requests))]) from None
        with self._work:
            self._work.notify_all()
        return ids

    def _entry(self, source: str | None = None, path: str | None = None, name: str | None = None, problem: str = "nvfp4_gemm",
               mode: str = "test", tests: str | None = None, rerun: bool = False, idempotency_key: str | None = None,
               **options) -> dict:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        if (source is None) == (path is None):
            raise ValueError("give a candidate's source or its path, one of the two")
        unknown = set(options) - set(OPTION_NAMES)
        if unknown:
            raise ValueError(f"unknown options: {', '.join(sorted(unknown))}")
        if path is not None:
            source, name = self.candidate_files.read(path), name or Path(path).name
        if len(source.encode("utf-8", errors="surrogatepass")) > self.max_source_bytes:
            raise ValueError(f"the source is over {self.max_source_bytes} bytes")
        options = {key: value for key, value in options.items() if value is not None and value is not False}
        if "wall_limit_s" not in options and self.default_wall_limit_s.get(mode):
            options["wall_limit_s"] = self.default_wall_limit_s[mode]
        request = {"source": source, "name": name or "submission.py", "problem": problem, "mode": mode, "tests": tests,
                   "options": options}
        fields = verdict_key(source, problem, mode, tests, options, self.seed_policy, self.commit, "+".join(self.device_names))
        entry = {"request": request, "fields": fields, "idempotency_key": idempotency_key}
        stored = None if rerun or self.store is None or self.seed_policy == "secret" else self.store.find(fields["key"])
        if stored is not None:
            entry.update(state=DONE, cached=True, error_class=VERDICT, reply=self._from_the_store(stored, request["name"], fields))
        return entry

    def _from_the_store(self, stored: dict, name: str, fields: dict) -> dict:
        """A stored verdict as this candidate's reply: its document naming this candidate, and the
        report of the run that judged the file, under a line that says so."""
        judged = self.candidates.latest_reply(fields["key"])
        earlier = (judged or {}).get("reply") or {}
        header = (f"{name}: answered from the store (the verdict of this file under the same key, judged "
                  f"{stored['stored_at']}{' as ' + judged['name'] if judged else ''})\n")
        return {"exit_status": stored["exit_status"], "document": {**stored["document"], "submission": name},
                "report": header + (earlier.get("report") or "")}

    # -- candidates out --------------------------------------------------------------------
    def get(self, candidate_id: str, wait_s: float = 0.0) -> dict | None:
        """The candidate's state (its verdict once ended), waiting up to `wait_s` for it."""
        deadline = time.monotonic() + wait_s
        with self._work:
            while True:
                row = self.candidates.get(candidate_id)
                if row is None:
                    return None
                remaining = deadline - time.monotonic()
                if row["state"] in ENDED or remaining <= 0:
                    return view(row)
                self._work.wait(min(remaining, HEARTBEAT_S))

    def list(self, state: str | None = None, since: str | None = None, sha256: str | None = None, limit: int = 100) -> dict:
        rows = self.candidates.page(state, since, sha256, limit)
        return {"candidates": [view(row, full=False) for row in rows], "next": rows[-1]["id"] if len(rows) == limit else None}

    def cancel(self, candidate_id: str) -> dict | None:
        """A queued candidate ended as `cancelled`; a running one's judge told to end its run
        (its workers killed; the judge goes on to the next candidate), then the same."""
        with self._work:  # a dispatching thread takes a queued candidate under the same lock
            row = self.candidates.get(candidate_id)
            if row is None:
                return None
            if row["state"] == QUEUED:
                self.candidates.finish(candidate_id, CANCELLED, {"exit_status": None, "document": None, "report": ""}, None)
                self._work.notify_all()
            elif row["state"] == RUNNING:
                self._cancelled.add(candidate_id)
        if row["state"] == RUNNING:
            for judge in self.judges:
                if judge.name == row["judge"]:
                    judge.cancel(candidate_id)
        return self.get(candidate_id, wait_s=CANCEL_WAIT_S if row["state"] == RUNNING else 0.0)

    def alive_judges(self) -> int:
        return sum(bool(judge.alive) for judge in self.judges)

    def healthy(self) -> bool:
        """Every judge configured is alive and fed."""
        return self.alive_judges() == len(self.judges) and all(thread.is_alive() for thread in self._threads)

    def status(self) -> dict:
        counts = self.candidates.counts()
        return {"commit": self.commit, "seed_policy": self.seed_policy, "devices": self.device_names, **counts,
                "recovered": self.recovered, "up_s": time.time() - self.started_at,
                "judges": [{**judge.status(), "judge": judge.name, "alive": bool(judge.alive)} for judge in self.judges],
                "devices_held": {shares: gate.state() for shares, gate in self._gates.items()}}

    def metrics(self) -> dict:
        """What /metrics shows (harness/service/app.py writes it in Prometheus' text format)."""
        up_s = max(time.time() - self.started_at, 1e-9)
        return {"counts": self.candidates.counts(), "classes": self.candidates.counts_by_class(), "retried": self.retried,
                "judged_again_alone": self.judged_again_alone,
                "alive": {judge.name: bool(judge.alive) for judge in self.judges},
                "busy_share": {judge.name: self._busy_s[id(judge)] / up_s for judge in self.judges}}

    # -- judging ---------------------------------------------------------------------------
    def _dispatch(self, judge) -> None:
        last_start = 0.0
        while not self._stopping.is_set():
            if not judge.alive:
                if time.monotonic() - last_start < RESTART_AFTER_S:
                    self._stopping.wait(HEARTBEAT_S)
                    continue
                last_start = time.monotonic()
                try:
                    judge.revive()
                except JudgeEnded as error:  # tried again after RESTART_AFTER_S; its candidates wait meanwhile
                    print(f"front: {error}; starting it again", file=sys.stderr, flush=True)
                    continue
                except Exception:
                    traceback.print_exc()
                    continue
            with self._work:
                candidate = None if self._stopping.is_set() else self.candidates.take(judge.name, judge.modes)
                if candidate is None:
                    self._work.wait(HEARTBEAT_S)
            if candidate is None:
                judge.heartbeat()
                continue
            gate = self._gates[judge.shares]
            with gate.held(candidate["mode"]) as hold:
                settled = self._judge_one(judge, candidate, hold)
            if not settled:  # a test-mode run that failed beside another: its verdict is the one alone
                self._replenish(judge, gate)  # its cases' fresh workers waiting, not started while it has the GPU alone
                with gate.held(candidate["mode"], alone=True) as hold:
                    self._judge_one(judge, candidate, hold)
            self._replenish(judge, gate)

    def _replenish(self, judge, gate: DeviceGate) -> None:
        """A lane whose waiting workers start between runs (harness/service/lanes.py) starts them
        where it has none left ready, or where another lane of its device is starting its own."""
        if not judge.replenished or not judge.alive:
            return
        if judge.workers_ready >= judge.waiting or (judge.workers_ready > 0 and not gate.replenish_wanted()):
            return
        with gate.replenishing():
            try:
                judge.replenish()
            except JudgeEnded as error:  # started again by its dispatching thread, with workers of its own
                print(f"front: {error}", file=sys.stderr, flush=True)
            except Exception:  # noqa: BLE001 - a judge gone mid-request (a broken pipe, Ray's own error): as above
                traceback.print_exc()

    def _judge_one(self, judge, candidate: dict, hold) -> bool:
        """Judge `candidate` and end it; or, where it did not pass while the device was shared
        (`hold.shared`), leave it running and return False: the caller judges it again alone."""
        identifier = candidate["id"]
        request = {**candidate["request"], "id": identifier}
        self.candidates.began(identifier)
        started = time.monotonic()
        try:
            if self._stopping.is_set() or identifier in self._cancelled:  # before its judge had it
                raise RuntimeError("the front is stopping" if self._stopping.is_set() else "cancelled")
            reply = judge.judge(request)
            error_class, why = classify(reply)
        except Exception as error:  # a judge that ended, stopped answering or could not start
            error_class, why = INFRASTRUCTURE, f"{type(error).__name__}: {error}"
            reply = {"exit_status": 2, "report": traceback.format_exc(),
                     "document": {"schema": SCHEMA, "command": request["mode"], "passed": False, "error": why}}
        finally:
            self._busy_s[id(judge)] += time.monotonic() - started
        with self._work:
            if identifier in self._cancelled:
                self._cancelled.discard(identifier)
                self.candidates.finish(identifier, CANCELLED, {**reply, "error": "cancelled while it ran"}, None)
            elif (hold.shared and error_class == VERDICT and not (reply.get("document") or {}).get("passed")
                  and not self._stopping.is_set()):
                self.judged_again_alone += 1
                return False
            elif error_class == INFRASTRUCTURE and self._stopping.is_set():
                self.candidates.requeue(identifier, NOTE_STOPPED)
            elif error_class == INFRASTRUCTURE and candidate["attempts"] < self.attempts:
                self.retried += 1
                self.candidates.requeue(identifier, f"attempt {candidate['attempts']} on {judge.name}: {why}")
            else:
                # The candidate ends before its verdict is stored: a front killed between the two
                # leaves the store one answer short, never a candidate judged again and stored twice.
                ended = self.candidates.finish(identifier, DONE, {**reply, "error": why}, error_class)
                if ended and error_class == VERDICT and self.store is not None and self.seed_policy != "secret":
                    self.store.add(candidate["fields"], request["name"], reply["document"], reply["exit_status"],
                                   reply.get("rows") or ())
            self._work.notify_all()
        return True


def view(row: dict, full: bool = True) -> dict:
    """A candidate as the API answers it: with its verdict's document and report where `full`."""
    reply = row.get("reply") or {}
    document = reply.get("document") or {}
    found = {"id": row["id"], "state": row["state"], "name": row["name"], "problem": row["problem"], "mode": row["mode"],
             "sha256": row["sha256"], "idempotency_key": row["idempotency_key"], "cached": row["cached"], "judge": row["judge"],
             "submitted_at": row["submitted_at"], "started_at": row["started_at"], "finished_at": row["finished_at"],
             "attempts": row["attempts"], "notes": row["notes"], "error_class": row["error_class"], "error": reply.get("error"),
             "exit_status": reply.get("exit_status"), "passed": document.get("passed")}
    if full:
        found.update(document=reply.get("document"), report=reply.get("report"))
    return found
