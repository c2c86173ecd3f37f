"""`--official` on a problem folder: the folder's own eval, run whole in a worker's sandbox.

The competition's runner lays a problem out as its task.yml says (each of `files` beside the
submission, which becomes submission.py), writes the cases to a file and runs `python MAIN MODE
CASES` (MAIN: task.yml's config.main), its `key: value` lines on the descriptor POPCORN_FD names,
the secret seed in POPCORN_SEED, the whole run held to task.yml's timeout for the mode. Here the
same runs inside a worker's sandbox (harness/runner/folder_eval.py), so that the verdicts and
figures are the eval's own, holes included, whichever eval the folder ships: NVIDIA's
better-bench, linalg's in-process recheck, helion's CUDA graphs, pmpp_v2's plain one. Nothing of
the judge's runs on the GPU around the calls; docs/timing.md says why that matters for a call
that waits on the GPU.

What the eval writes is the claim of the process that imported the submission: the judge reads at
most `LINES_BYTES` of it through one gate (harness/judge/claims.py `eval_lines`, `eval_stats`),
which makes each case's result and never raises. A case its lines leave open takes its status from
how the process ended: past the time limit, killed by a signal, or ended with no verdict (an
exception the eval did not catch, `RunRecord.eval_stopped`); the cases after it are not run. A
process that ends before it started the eval is the machine's failure (WorkerNotStarted), never
the file's.
"""

import base64
import contextlib
import dataclasses
import os
import re
import select
import shutil
import subprocess
import tempfile
import threading
import time
from array import array
from bisect import bisect_left
from pathlib import Path

from harness.judge import claims
from harness.judge.exits import EXIT_EVAL_STOPPED, EXIT_FAIL, EXIT_PASS
from harness.judge.isolation import WorkerNotStarted, end_strays, exit_description, output_tail, protect_the_judge
from harness.judge.jobs import CRASH, ERROR, FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult
from harness.judge.modes import FreshWorkers, device_name, set_speed_of_light
from harness.judge.record import RunListener, RunRecord
from harness.judge.sandbox import Sandbox
from harness.problems.folder_task import cases_as_tests_file
from harness.runner import folder_eval as runner
from harness.shared.wire import UntrustedMessageError

LINES_BYTES = 1 << 20  # of the eval's POPCORN lines, the judge reads this much; the rest is drained unread
OUTPUT_BYTES = 64 << 10  # of what it printed, the last this much is kept
REPORT_BYTES = 1 << 20  # a profile's table, decoded
STARTED_LIMIT_S = 120  # from its start to the sandboxed process's word that the eval begins
ENDED_LIMIT_S = 10  # for its pipes to close once the process has ended and its cgroup is killed
POLL_S = 0.2  # how often the wait looks at the run's cancel
# A case's field: its index in ASCII digits, at most 9 (no run has a billion cases; a line can hold
# more digits than the 4300 int() reads).
FIELD = re.compile(r"(test|benchmark)\.([0-9]{1,9})\.")


class _Drained(threading.Thread):
    """Reads a pipe to its end, keeping its first `keep` bytes (`head`) or its last, and the time
    at which each read of the kept bytes arrived. A writer chooses how many reads its bytes take
    (one a byte, at most `keep` of them): they are kept in two flat arrays and searched by
    bisection."""

    def __init__(self, fd: int, keep: int, head: bool):
        super().__init__(daemon=True)
        self._fd, self._keep, self._head = fd, keep, head
        self._data = bytearray()
        self._read_ends = array("q")  # the kept bytes' length after each read
        self._read_times = array("d")  # when that read arrived, in step with _read_ends
        self.cut = False  # more came than was kept

    def run(self) -> None:
        with open(self._fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self.cut = self.cut or len(self._data) + len(chunk) > self._keep
                if self._head:
                    chunk = chunk[:self._keep - len(self._data)]
                    if chunk:  # its read recorded before its bytes show in `text`, its time before its end
                        self._read_times.append(time.monotonic())
                        self._read_ends.append(len(self._data) + len(chunk))
                        self._data += chunk
                else:
                    self._data = (self._data + chunk)[-self._keep:]

    @property
    def text(self) -> str:
        return self._data.decode("utf-8", errors="replace")

    def arrived(self, line_end: int) -> float:
        """When the kept bytes up to `line_end` had all arrived (the first read's time that reached
        them, else the last read's)."""
        reads = len(self._read_ends)
        return self._read_times[min(bisect_left(self._read_ends, line_end), reads - 1)]


@dataclasses.dataclass(frozen=True)
class Ended:
    """How the eval's process ended: its exit status (None: killed, past its time limit, cancelled,
    or the run's wall limit spent before the eval began), and when."""

    status: int | None
    timed_out: bool = False
    cancelled: bool = False
    wall_spent: bool = False  # the run's wall limit ran out before the eval began
    at: float = dataclasses.field(default_factory=time.monotonic)


def run(mode: str, cases: list, options, listener: RunListener = RunListener(), workers: FreshWorkers | None = None) -> RunRecord:
    """The folder's eval run on `cases` in `mode`; the run's record, its exit status set.
    WorkerNotStarted where the sandboxed process ended before the eval began. `workers`: where the
    run's workers would come from, whose memory limit the eval is held to and whose waiting
    processes are kept."""
    workers = workers or FreshWorkers()
    record = RunRecord(mode, cases, options)
    listener.run_started(record)
    if options.refused:
        record.refused = True
    else:
        for refused in protect_the_judge():
            listener.warning(f"the system refused the judge {refused}")
        began = time.monotonic()
        with _laid_out(options, cases) as folder, listener.case_progress(f"{mode}: {options.problem.eval_main}") as on_progress:
            on_progress("the folder's eval, run whole")
            # The eval's process is held to the memory limit of the workers the run was given (the
            # service's), as each of them is.
            sandbox = Sandbox(options.device, memory_bytes=workers.memory_limit_bytes)
            try:
                for refused in sandbox.refused:
                    listener.warning(f"the workers' sandbox lacks a layer: {refused}")
                record.sandbox = sandbox.layers
                record.runner_copies = re.compile(re.escape(f"{folder}/submission.py"))
                lines, output, ended = _run_eval(sandbox, folder, mode, options, began, set(workers.pids))
            finally:
                sandbox.close()
        kind = "test" if mode == "test" else "benchmark"
        settle(record, lines.text, _case_ends(lines, kind, began), output, ended, lines_cut=lines.cut)
    for index, (case, result) in enumerate(zip(cases, record.results)):
        listener.case_started(index, case)
        if result is not record.eval_stopped:  # that one the run's end tells, as the built-in problems' eval stopping
            listener.case_judged(index, case, result)
    record.exit_status = EXIT_EVAL_STOPPED if record.eval_stopped else EXIT_PASS if record.passed else EXIT_FAIL
    listener.run_ended(record)
    return record


def lay_out(folder: Path, files, submission: Path, cases: list[dict]) -> None:
    """`folder` laid out as the runner lays a problem out: `files` ((name, source) pairs, task.yml's),
    the submission as submission.py, the cases as `runner.CASES_FILE`."""
    for name, source in files:
        shutil.copyfile(source, folder / name)
    shutil.copyfile(submission, folder / "submission.py")
    (folder / runner.CASES_FILE).write_text(cases_as_tests_file(cases))


@contextlib.contextmanager
def _laid_out(options, cases: list):
    """A folder of the judge's laid out for the run (`lay_out`); the worker's own folder is a copy of it."""
    folder = Path(tempfile.mkdtemp(prefix="runner-"))
    try:
        lay_out(folder, options.problem.eval_files, options.submission, [case.args for case in cases])
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_eval(sandbox: Sandbox, folder: Path, mode: str, options, began: float, kept: set[int]):
    """(the eval's lines, with when each arrived; what it printed; how it ended). Once it ended,
    whatever it left behind is ended, but the judge's `kept` processes, before its pipes are read
    to their end: where the system grants it no cgroup or pid namespace, its orphans hold them."""
    started_read, started_write = os.pipe()
    lines_read, lines_write = os.pipe()
    output_read, output_write = os.pipe()
    launch = sandbox.launch(folder, started_write, output_write, False, options.rng_seed, program=runner.PROGRAM,
                            kept_fds=(lines_write,), mode=mode, eval_main=options.problem.eval_main)
    environment = {**sandbox.environment(folder), "POPCORN_FD": str(lines_write)}
    if options.eval_seed is not None:
        environment["POPCORN_SEED"] = str(options.eval_seed)
    lines, output = _Drained(lines_read, LINES_BYTES, head=True), _Drained(output_read, OUTPUT_BYTES, head=False)
    try:
        try:
            process = subprocess.Popen(launch.argv, pass_fds=launch.pass_fds, preexec_fn=launch.preexec,
                                       stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write,
                                       env=environment, start_new_session=True)
        except OSError as error:
            for fd in (lines_read, output_read):  # no reader took them
                os.close(fd)
            raise WorkerNotStarted(f"the folder's eval could not start ({error})") from None
        finally:
            launch.close()
            for fd in (started_write, lines_write, output_write):
                os.close(fd)
        lines.start()
        output.start()
        ended = None
        try:
            ended = _wait(process, started_read, options, began)
        finally:
            if ended is None:  # its exit status, where it is ending of itself, before the kill
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(timeout=ENDED_LIMIT_S)
            launch.cgroup.kill()
            if process.poll() is None:
                process.kill()
            process.wait()
            end_strays(kept)
            for reader in (lines, output):
                reader.join(ENDED_LIMIT_S)
        if ended is None:
            raise WorkerNotStarted(f"the folder's eval ended before it began ({exit_description(process.returncode)}): "
                                   f"{output.text[-2000:].strip()}")
        return lines, output_tail(output.text, OUTPUT_BYTES, left_out=output.cut), ended
    finally:
        os.close(started_read)
        launch.remove()


def _wait(process: subprocess.Popen, started: int, options, began: float) -> Ended | None:
    """How the process ended, held to the mode's time limit from the eval's start (the whole
    eval's, as the runner holds it: the sandbox's start is bounded apart, by STARTED_LIMIT_S) and
    to what the run's wall limit leaves; None where it ended, or ran out of STARTED_LIMIT_S, before
    it said the eval began."""
    wall_deadline = float("inf")
    if options.wall_limit_s:
        wall_deadline = (options.wall_clock_from or began) + options.wall_limit_s
    if not _started(process, started, min(wall_deadline, time.monotonic() + STARTED_LIMIT_S)):
        if process.poll() is None and time.monotonic() >= wall_deadline:
            return Ended(None, wall_spent=True)
        return None
    deadline = min(time.monotonic() + options.timeout_s, wall_deadline)
    while True:
        try:
            return Ended(process.wait(timeout=POLL_S))
        except subprocess.TimeoutExpired:
            if options.cancelled is not None and options.cancelled.is_set():
                return Ended(None, cancelled=True)
            if time.monotonic() >= deadline:
                return Ended(None, timed_out=True)


def _started(process: subprocess.Popen, started: int, until: float) -> bool:
    """Whether the process said it started before `until`."""
    while time.monotonic() < until:
        if select.select([started], [], [], POLL_S)[0]:
            return os.read(started, 1) == runner.STARTED
        if process.poll() is not None and not select.select([started], [], [], 0)[0]:
            return False
    return False


def settle(record: RunRecord, text: str, ends: dict[int, float], output: str, ended: Ended, lines_cut: bool = False) -> None:
    """Each case's result from the eval's lines (`text`, each case's last one arrived at `ends`,
    -1 the eval's start; `lines_cut`: they ran past LINES_BYTES), what it printed and how its
    process ended."""
    options, cases = record.options, record.cases
    claimed = claims.eval_lines(text)
    kind = "test" if record.mode == "test" else "benchmark"
    stopped_at = None
    for index in range(len(cases)):
        if stopped_at is not None:
            result = CaseResult(NOT_RUN, f"not run: the folder's eval stopped at {kind} {stopped_at}")
        else:
            result = _claimed_result(claimed, kind, index, record.mode)
            if result is None and (lines_cut or "check" not in claimed):
                stopped_at = index
                result = (CaseResult(FAIL, f"the folder's eval wrote more than the {LINES_BYTES} bytes of lines the judge "
                                           "reads before its verdict for this case") if lines_cut
                          else _stopped_result(ended, options, output))
                result.output = output
                if result.status == ERROR:
                    record.eval_stopped = result
            elif result is None:
                none_at_all = not any(key.startswith(f"{kind}.") for key in claimed)
                result = CaseResult(NOT_RUN, f"not run: the folder's eval wrote no verdict for {kind} {index}"
                                             + (f" (nor a line of any {kind} case: does it run mode `{record.mode}`?)"
                                                if none_at_all else ""))
        result.device_name = device_name(options.device)
        # From the end of the last case before it the eval wrote of, to its own last line, or to
        # the process's end for the case it stopped at.
        end = ends.get(index, ended.at if index == stopped_at else None)
        if end is not None:
            result.wall_s = max(0.0, end - max(when for earlier, when in ends.items() if earlier < index))
        record.results.append(result)
    _hold_to_the_evals_check(record, claimed, ended, output)
    failed = next((result for result in record.results if result.status in (FAIL, ERROR, CRASH, TIMEOUT)), None)
    if failed is not None and not failed.output:  # what the eval printed, shown beside the first failure
        failed.output = output
    if record.mode in ("benchmark", "leaderboard"):
        set_speed_of_light(record)


def _claimed_result(claimed: dict, kind: str, index: int, mode: str) -> CaseResult | None:
    """The case's result as the eval's lines give it; None where they give none."""
    prefix = f"{kind}.{index}"
    if claimed.get(f"{prefix}.status") == "fail":
        return CaseResult(FAIL, claimed.get(f"{prefix}.error") or "the folder's eval failed it")
    try:
        if mode == "profile" and f"{prefix}.report" in claimed:
            report = base64.b64decode(claimed[f"{prefix}.report"], b"+*", validate=True)[:REPORT_BYTES]
            return CaseResult(PASS, report=report.decode("utf-8", errors="replace"))
        if kind == "benchmark" and f"{prefix}.mean" in claimed:
            stats = claims.eval_stats(claimed, prefix)
            return CaseResult(PASS, stats=stats)
    except (UntrustedMessageError, ValueError) as error:  # base64's errors are ValueErrors
        return CaseResult(FAIL, f"the judge could not read the eval's figures: {error}")
    if claimed.get(f"{prefix}.status") == "pass":
        return CaseResult(PASS)
    return None


def _stopped_result(ended: Ended, options, output: str) -> CaseResult:
    """The result of the case at which the eval's process ended, or was ended, with no verdict;
    an error's message the last line it printed (a traceback's exception)."""
    if ended.cancelled:
        return CaseResult(NOT_RUN, "not run: the run was cancelled")
    if ended.wall_spent:
        return CaseResult(NOT_RUN, "not run: the run's wall-time limit was spent before the eval began")
    if ended.timed_out:
        return CaseResult(TIMEOUT, f"the folder's eval ran past its time limit ({options.timeout_s:g} s for the whole "
                                   "run, as the competition's runner holds it) and was killed")
    described = exit_description(ended.status)
    if ended.status is not None and (ended.status < 0 or ended.status > 128):
        return CaseResult(CRASH, f"the folder's eval was {described}")
    last_line = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), described)
    return CaseResult(ERROR, f"the folder's eval ended ({described}) before its verdict: {last_line}", exception=last_line)


def _hold_to_the_evals_check(record: RunRecord, claimed: dict, ended: Ended, output: str) -> None:
    """Where the eval's own `check` is not `pass`, or its process did not exit 0, while every case
    its lines settled passed, the last of them fails: the run's verdict is the eval's."""
    if "check" not in claimed or not record.results or not record.passed:
        return
    if claimed["check"] != "pass" or ended.status != 0:
        last = record.results[-1]
        last.status = FAIL
        last.message = (f"the folder's eval logged `check: {claimed['check']}`" if claimed["check"] != "pass"
                        else f"the folder's eval logged `check: pass` but ended with {exit_description(ended.status)}")
        last.output = output


def _case_ends(lines: _Drained, kind: str, began: float) -> dict[int, float]:
    """When each case's last line arrived, by the case's index (-1: the eval's start)."""
    ends, position = {-1: began}, 0
    for line in lines.text.splitlines(keepends=True):
        position += len(line.encode("utf-8"))  # a byte the decoding replaced counts three: a time a little late
        match = FIELD.match(line)
        if match and match[1] == kind:
            ends[int(match[2])] = lines.arrived(position)
    return ends
