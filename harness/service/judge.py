"""The service's judge: one process per GPU (or per CPU judge), alive across candidates.

`python -m harness.service.judge --device DEVICE` reads one request a line on stdin and writes
one reply a line on the descriptor stdout was when it started (its own prints, and every
worker's, go to stderr or the workers' logs). A request names a candidate (its source), the
problem, the mode, an optional tests file's text and the run's options; the reply holds the
run's `--json` document, its exit status and the people's report. The run is the one-shot
command's (harness/api.py `prepare` and `run`), with what can be shared kept here: the
interpreter and its imports, the drawn inputs and references of cases whose seeds are fixed
(harness/judge/references.py), and a pool of pre-started workers, one candidate each, with the
next candidate's kernelguard process (harness/service/pool.py).

A candidate the front cancels (its id, a line on the pipe the judge ends with) ends here: no case
of it begins any more and its workers are killed; the judge replies and takes the next one.

This process is made non-dumpable and a subreaper (harness/judge/isolation.py), as the one-shot
judge makes itself: that is why it is a process of its own, never the caller's. After a case that
crashed, hung or raised it checks its GPU; a device that no longer answers ends the process with
EXIT_DEVICE_LOST, and whoever started it starts another; so does one that gave up a queue behind a
candidate's GPU work that never ended (harness/judge/given_up.py), and one whose own /dev/shm stays
full after a candidate (EXIT_DEV_SHM_FULL, harness/judge/dev_shm.py). A candidate that changed the judge's
own files (harness/judge/integrity.py) ends it with EXIT_FILES_CHANGED: a judge started from
those files would not be this one, so none is started again.
"""

import argparse
import contextlib
import dataclasses
import io
import json
import os
import queue
import secrets
import signal
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from harness.judge import dev_shm, given_up, judge_user  # the standard library alone: imported before torch
from harness.judge.exits import (EXIT_DEV_SHM_FULL, EXIT_DEVICE_LOST, EXIT_FILES_CHANGED, EXIT_INFRASTRUCTURE,
                                 EXIT_SANDBOX_REFUSED)
from harness.service.lanes import REPLENISH_LIMIT_S, TIMED_MODES, waiting_workers  # the standard library alone
from harness.service.names import checked_name  # the standard library alone

FILES_CHANGED = "the judge's own files changed while the submission ran"
REFERENCES_MAX_BYTES = 8 * 2**30
RUN_OPTIONS = ("official", "strict", "timeout_s", "stop_on_first_failure", "wall_limit_s")
TIMED_OPTIONS = ("max_repeats", "baselines")
REJECTED = "rejected"  # harness/service/faults.py: a request no judge could run
CANCEL_POLL_S = 0.1  # a cancelled run's workers are killed this often until it ends (one handed out late included)
# What is left of a wall limit that the static check spent: the run still starts, and stops at
# its first case (modes.py: the limit is checked before each case).
MINIMUM_RUN_S = 0.001


class Judge:
    def __init__(self, device: str, memory_limit_bytes: int | None = None, test_only: bool = False,
                 waiting: int | None = None, replenished: bool = False):
        """`test_only`: a lane that takes test-mode candidates alone (harness/service/lanes.py),
        which starts no calibration partner ahead (a test-mode run has none). `waiting`: workers
        kept waiting (lanes.waiting_workers of a lone judge by default). `replenished`: a lane
        whose waiting workers start when the front asks (`replenish`), never beside a run."""
        if device.startswith("cuda"):
            dev_shm.own_dev_shm()  # before torch's import starts a thread, and before CUDA starts
            judge_user.drop_root()  # after its /dev/shm (a mount), before CUDA starts: its workers' uid
        self.secret = _secret_seed()
        import torch  # noqa: F401  (the imports every run shares, done once, before any worker starts)

        import harness.api, harness.results.console, harness.results.document, harness.results.recording  # noqa: F401  (as torch)
        from harness.judge import modes
        from harness.problems import shapes
        from harness.judge.isolation import protect_the_judge
        from harness.judge.references import REFERENCES
        from harness.service.pool import WorkerPool
        from harness.shared.paths import git_commit

        self.dev_shm_full: str | None = None
        self.refused = protect_the_judge()
        self.device = device
        self.device_name = modes.device_name(device)
        self.commit = git_commit()
        if self.secret is None:  # a secret seed's cases are not kept beyond their run
            REFERENCES.enable(REFERENCES_MAX_BYTES)
        self.references = REFERENCES
        self.code_watches = modes.KeptCodeWatches()
        self.pool = WorkerPool(device, shapes.worker_rng_seed(self.secret),
                               depth=waiting if waiting is not None else waiting_workers(device),
                               memory_limit_bytes=memory_limit_bytes, replaces_on_take=not replenished)
        self.pool.prime()
        if not test_only:
            self.pool.prime(echo=True)  # the timed modes' calibration partner
        self._scratch = tempfile.TemporaryDirectory(prefix="nvfp4-judge-")
        self._runs = threading.Lock()  # the candidate running and its cancel, against the front's cancels
        self._running_id = self._cancelled_id = None
        self._cancel = threading.Event()
        # Workers of a cancelled run are ended by a thread of the judge's own, born here, after its
        # change of user (harness/judge/judge_user.py): capabilities are a thread's, and the thread
        # that reads the front's cancels was started before the change, holding none.
        self._cancels: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._end_cancelled_runs, name="judge-cancel", daemon=True).start()

    def close(self) -> None:
        self.pool.close()
        self._scratch.cleanup()

    def run(self, request: dict) -> dict:
        """One candidate judged: the reply to `request`."""
        import click
        from rich.console import Console

        from harness import api
        from harness.results.document import SCHEMA, run_document
        from harness.problems import load_problem
        from harness.results.recording import run_rows
        from harness.results.console import Reporter
        from harness.shared.l2_flush import L2Flush

        started = time.monotonic()
        cancelled = self._begin(request.get("id"))
        rows: list[dict] = []  # a timed run's rows, stored with its verdict for `compare`
        mode = request.get("mode", "test")
        folder = Path(tempfile.mkdtemp(dir=self._scratch.name))
        name = request.get("name") or "submission.py"  # how the report names the candidate, not its copy here
        submission = folder / copy_name(name)
        submission.write_text(request["source"])
        tests_file = None
        if request.get("tests"):
            tests_file = folder / "tests.txt"
            tests_file.write_text(request["tests"])
        options = request.get("options", {})
        extra = {key: options[key] for key in RUN_OPTIONS if options.get(key) is not None}
        if mode in TIMED_MODES:
            extra.update({key: options[key] for key in TIMED_OPTIONS if options.get(key) is not None})
        report = io.StringIO()
        reporter = Reporter(console=Console(file=report, highlight=False, width=132))
        error_class = None
        try:
            try:
                problem = load_problem(request.get("problem", "nvfp4_gemm"))
            except ValueError:
                error_class = REJECTED
                raise
            cases, run_options = api.prepare(mode, tests_file, submission, problem, self.device, secret=self.secret,
                                             kernelguard=self.pool.kernelguard.take, shown_as=name, **extra)
            if run_options.wall_limit_s:  # the static check's time is the candidate's too
                spent = time.monotonic() - started
                run_options = dataclasses.replace(run_options, wall_limit_s=max(run_options.wall_limit_s - spent, MINIMUM_RUN_S))
            run_options = dataclasses.replace(run_options, cancelled=cancelled, code_watch=self.code_watches.watch(problem))
            if run_options.eval_seed is not None:
                # A folder's own eval under --official is handed its seed as the runner hands it,
                # where the candidate can read it: a seed of its own, never the judge's secret.
                run_options = dataclasses.replace(run_options, eval_seed=secrets.randbits(32))
            record = api.run(mode, cases, run_options, reporter, workers=self.pool.workers())
            status, document = record.exit_status, run_document(record)
            if mode in TIMED_MODES:
                rows = [{**row, "submission": submission.name} for row in run_rows(record)]
        except api.Stopped as stopped:
            status, document = stopped.status, {"schema": SCHEMA, "command": mode, "passed": False, "error": stopped.message}
        except Exception as error:  # a request the judge cannot run (an unknown problem, a bad option), or the judge's fault
            if isinstance(error, click.UsageError):
                error_class = REJECTED
            status = 2
            document = {"schema": SCHEMA, "command": mode, "passed": False, "error": f"{type(error).__name__}: {error}",
                        "traceback": traceback.format_exc()}
        finally:
            with self._runs:
                self._running_id = None
            with contextlib.suppress(OSError):
                for path in folder.iterdir():
                    path.unlink()
                folder.rmdir()
            if mode in TIMED_MODES:
                L2Flush.release()
            dev_shm.sweep_own_dev_shm()  # the candidate's workers have ended: what they left goes
            self.dev_shm_full = dev_shm.full_after_sweep()
        document = {**document, "exit_status": status, "submission": name}
        return {"id": request.get("id"), "exit_status": status, "document": document, "report": report.getvalue(), "rows": rows,
                **({"error_class": error_class} if error_class else {}),
                "judge": {"device": self.device, "commit": self.commit, "pid": os.getpid(), "wall_s": time.monotonic() - started,
                          "references_kept": self.references.hits, "workers_started": self.pool.started,
                          "workers_ready": self.pool.ready_waiting()}}

    def replenish(self) -> dict:
        """The reply to the front's `replenish` request: the waiting workers started again up to
        their count, each waited for until it has made its context (REPLENISH_LIMIT_S at most)."""
        started = time.monotonic()
        ready = self.pool.replenish(REPLENISH_LIMIT_S)
        return {"replenished": True, "judge": {"workers_ready": ready, "wall_s": time.monotonic() - started}}

    def cancel(self, candidate_id: str) -> None:
        """End the run of `candidate_id`, now or as it begins (the front's cancel may come before
        its request is read): no case of it begins any more, and its workers are killed until the
        run ends, one handed out after the first kill included. The run then replies as any run
        does, and the judge goes on to the next candidate."""
        with self._runs:
            self._cancelled_id = candidate_id
            if candidate_id != self._running_id:
                return
            self._cancel.set()
            cancel = self._cancel
        self._cancels.put(cancel)

    def _begin(self, candidate_id: str | None) -> threading.Event:
        """The run of `candidate_id` begins: its cancel, set already where the front sent it first."""
        with self._runs:
            self._running_id, self._cancel = candidate_id, threading.Event()
            if candidate_id is not None and candidate_id == self._cancelled_id:
                self._cancel.set()
            return self._cancel

    def _end_cancelled_runs(self) -> None:
        while True:
            self._end_workers(self._cancels.get())

    def _end_workers(self, cancel: threading.Event) -> None:
        while True:
            with self._runs:  # never a later run's workers: that run begins under this lock
                if self._cancel is not cancel or self._running_id is None:
                    return
                self.pool.end_handed_out()
            time.sleep(CANCEL_POLL_S)

    def device_answers(self) -> bool:
        """Whether the judge's GPU still runs work: after a case that crashed, hung or raised, a
        context the candidate broke must not judge the next one."""
        import torch

        if not self.device.startswith("cuda"):
            return True
        try:
            probe = torch.arange(1024, device=self.device, dtype=torch.float32)
            return float(probe.sum().item()) == 1023 * 1024 / 2 and torch.cuda.synchronize(self.device) is None
        except Exception:
            return False


def copy_name(name: str) -> str:
    """The name the candidate's copy takes in its folder: the request's own where it is a plain
    file name (tracebacks then name the file as the one-shot command's do), `submission.py`
    otherwise (the front refuses other names; a judge fed by another caller stays up)."""
    try:
        return checked_name(name.rsplit("/", 1)[-1])
    except ValueError:
        return "submission.py"


def watch_the_front(descriptor: int, cancel=lambda candidate_id: None) -> None:
    """End this process once the front that started it has ended, whatever it is doing: the
    front holds the write end of this pipe open and writes on it only the ids of the candidates
    it cancels, a line each, which go to `cancel`; a read returns nothing only at its end. The
    workers end with the judge (the sandbox's --die-with-parent)."""

    def watch():
        pending = b""
        while True:
            try:
                data = os.read(descriptor, 4096)
            except InterruptedError:
                continue
            except OSError:
                break
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                try:
                    cancel(line.decode("utf-8", "replace"))
                except Exception:  # noqa: BLE001 - the watch must outlive a cancel that failed
                    traceback.print_exc()
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="judge-front-watch", daemon=True).start()


def _secret_seed() -> int | None:
    value = os.environ.pop("POPCORN_SEED", None)
    return int(value) if value else None


def _cases(reply: dict) -> list[dict]:
    return reply["document"].get("cases") or []


def _troubled(reply: dict) -> bool:
    return any(case.get("status") in ("crash", "timeout", "error") for case in _cases(reply))


def _changed_the_judge(reply: dict) -> bool:
    return any(FILES_CHANGED in (case.get("message") or "") for case in _cases(reply))


def serve(device: str, memory_limit_bytes: int | None, made: list | None = None, test_only: bool = False,
          waiting: int | None = None, replenished: bool = False) -> int:
    """Judge requests until stdin ends (a request `{"replenish": true}` starts the waiting
    workers instead: Judge.replenish); `made` gets the judge once it is made (the front's
    cancels go to it)."""
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # what anything else prints stays off the replies
    try:
        judge = Judge(device, memory_limit_bytes, test_only, waiting, replenished)
    except judge_user.JudgeCannotStart as error:
        print(f"judge on {device}: cannot start: {error}", file=sys.stderr, flush=True)
        return EXIT_INFRASTRUCTURE
    if made is not None:
        made.append(judge)
    from harness.judge.sandbox import UNSAFE_ENV  # after Judge: it imports torch, which the judge enters its namespace before

    sandbox = judge.pool.sandbox
    if sandbox.refused and os.environ.get(UNSAFE_ENV) != "1":
        print(f"judge on {device}: the workers' sandbox lacks layers ({'; '.join(sandbox.refused)}); "
              "this judge serves only under `serve --unsafe-sandbox`", file=sys.stderr, flush=True)
        judge.close()
        return EXIT_SANDBOX_REFUSED
    print(json.dumps({"ready": True, "device": device, "device_name": judge.device_name, "pid": os.getpid(), "commit": judge.commit,
                      "refused": judge.refused, "sandbox": sandbox.layers}), file=replies, flush=True)
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("replenish"):
                print(json.dumps(judge.replenish()), file=replies, flush=True)
                continue
            reply = judge.run(request)
            print(json.dumps(reply, default=str), file=replies, flush=True)
            if _changed_the_judge(reply):
                print(f"judge on {device}: a candidate changed the judge's files; this judge ends", file=sys.stderr, flush=True)
                return EXIT_FILES_CHANGED
            if judge.dev_shm_full:
                print(f"judge on {device}: {judge.dev_shm_full}; this judge ends", file=sys.stderr, flush=True)
                return EXIT_DEV_SHM_FULL
            if given_up.any_given_up():
                print(f"judge on {device}: a candidate's GPU work never ended, and a queue of this judge's waits behind it; "
                      "this judge ends", file=sys.stderr, flush=True)
                return EXIT_DEVICE_LOST
            if _troubled(reply) and not judge.device_answers():
                print(f"judge on {device}: the device no longer answers; this judge ends", file=sys.stderr, flush=True)
                return EXIT_DEVICE_LOST
    finally:
        judge.close()
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--memory-limit-mib", type=int, default=None)
    parser.add_argument("--front-fd", type=int, default=None, help="a pipe whose end is the front's: this judge ends with it")
    parser.add_argument("--test-only", action="store_true", help="a lane the front gives test-mode candidates alone")
    parser.add_argument("--waiting-workers", type=int, default=None,
                        help="workers kept waiting [harness/service/lanes.py waiting_workers, one lane]")
    parser.add_argument("--replenished", action="store_true",
                        help="a lane whose waiting workers start only on a `replenish` request, never beside a run")
    arguments = parser.parse_args()
    made: list[Judge] = []  # the judge, once made: where the front's cancels go
    if arguments.front_fd is not None:
        watch_the_front(arguments.front_fd, lambda candidate_id: [judge.cancel(candidate_id) for judge in made])
    limit = arguments.memory_limit_mib * 2**20 if arguments.memory_limit_mib else None
    try:
        status = serve(arguments.device, limit, made, arguments.test_only, arguments.waiting_workers, arguments.replenished)
    except Exception:
        given_up.end_on_own_error()
        raise
    given_up.end_process(status)


if __name__ == "__main__":
    main()
