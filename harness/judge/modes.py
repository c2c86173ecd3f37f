"""The modes: test, benchmark, leaderboard, profile. The judge runs each case here; the
submission runs in a worker process (harness/judge/isolation.py). The problem (RunOptions.problem)
gives the runner folder's files, the inputs and their check, and the eval's schedule."""

import contextlib
import dataclasses
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import torch

from harness.judge import given_up
from harness.judge.cases import PARTNER_TIME_LIMIT_S, RUNNERS, Judging
from harness.judge.exits import EXIT_EVAL_STOPPED, EXIT_FAIL, EXIT_PASS
from harness.judge.integrity import CodeWatch, import_the_row_writer
from harness.judge.isolation import CaseStopped, WorkerProcess, end_strays, protect_the_judge
from harness.judge.jobs import CRASH, ERROR, FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult, Job, Rules
from harness.judge.memory import SharedPool
from harness.judge.phases import PhaseTimer
from harness.judge.precheck import Precheck
from harness.judge.record import RepeatedFailure, RunListener, RunRecord
from harness.judge.rounds import BATCH, JudgeClock
from harness.judge.sandbox import Sandbox
from harness.judge.self_check import fallbacks_in
from harness.judge.verdicts import beyond_the_competition
from harness.problems import PROBLEMS, Problem
from harness.problems import sol
from harness.problems.shapes import EVAL_RNG_SEED, Case
from harness.runner.files import runner_files
from harness.shared.wire import UntrustedMessageError

# A failure's message with its numbers (sizes, indices) masked names its kind; the check's
# message for wrong values (the competition's utils.py) is never one failure repeated.
NUMBERS = re.compile(r"\d+")
VALUE_MISMATCH = "mismatch found!"
# The statuses a failure every remaining case would repeat can have (RepeatedError).
REPEATABLE = (ERROR, FAIL, CRASH, TIMEOUT)
# The problem whose inputs benchmark --baselines knows (harness/runner/baselines.py).
BASELINES_PROBLEM = PROBLEMS["nvfp4_gemm"]


@dataclasses.dataclass(frozen=True)
class RunOptions:
    submission: Path
    problem: Problem = PROBLEMS["nvfp4_gemm"]
    device: str = "cuda"
    official: bool = False  # one shared worker and only the competition's verdicts
    timeout_s: float = 300.0
    rng_seed: int = EVAL_RNG_SEED  # the worker's generators' (shapes.worker_rng_seed), never the secret seed
    eval_seed: int | None = None  # the secret seed a folder's own eval is handed (POPCORN_SEED) under --official
    baselines: bool = False
    measure_ceilings: bool = False
    ncu: bool = False
    max_repeats: int | None = None  # cap on timed rounds, for quick runs
    strict: bool = False  # kernelguard's hits refuse the file instead of warning
    precheck: Precheck | None = None  # kernelguard's reading of the file, made before any worker
    stop_on_first_failure: bool = False  # the cases after a failed one are not run
    wall_limit_s: float | None = None  # the whole run's limit, worker starts included; each case's is the smaller
    wall_clock_from: float | None = None  # time.monotonic() when wall_limit_s began counting (before the static check); None: the run's start
    shown_as: str | None = None  # the file's name in reports where `submission` is a copy (the service's)
    cancelled: threading.Event | None = None  # set: no case begins any more (the service's cancel, which ends the run's workers)
    code_watch: CodeWatch | None = None  # the judge's code as stamped before (KeptCodeWatches); None: stamped as the run opens

    def __post_init__(self):
        if self.baselines and self.problem != BASELINES_PROBLEM:
            raise ValueError(f"--baselines times cuBLAS and torch on {BASELINES_PROBLEM.name}'s inputs; "
                             f"{self.problem.name} has none")

    @property
    def submission_name(self) -> str:
        """The submission as reports name it: as the user named it."""
        return self.shown_as or str(self.submission)

    @property
    def refused(self) -> bool:
        return self.strict and self.precheck is not None and bool(self.precheck.refusal)

    @property
    def runs_the_folders_eval(self) -> bool:
        """--official on a problem folder: its own eval runs whole (harness/judge/folder_eval.py)."""
        return self.official and bool(self.problem.eval_main)

    @property
    def rules(self) -> Rules:
        return Rules(strict=not self.official)

    def job(self, kind: str, case: Case | None, **fields) -> Job:
        return Job(kind=kind, case=case, device=self.device, rules=self.rules, problem=self.problem, **fields)


class OfficialEvalStopped(Exception):
    """--official: the submission raised what the competition's eval does not catch (anything but
    CuTeDSL's OpError), so that eval ends there with a traceback and logs no verdict."""

    def __init__(self, result: CaseResult):
        super().__init__(result.message)
        self.result = result


class FreshWorkers:
    """Where a run's worker processes come from: started when the run asks for each (the
    one-shot commands). The service's judge hands out pre-started ones instead
    (harness/service/pool.py); `pids` are the processes such a source keeps beside the run's."""

    pids: frozenset[int] = frozenset()
    folders_root: str | None = None  # where the workers' folders are, other than the run's logs folder
    memory_limit_bytes: int | None = None  # the most memory a worker's cgroup holds (a folder's eval's too); None: no limit

    def worker(self, sandbox: Sandbox, log_dir: str, files: dict[str, Path], options: "RunOptions", describe,
               echo: bool = False) -> WorkerProcess:
        return WorkerProcess(sandbox, log_dir, files, options.device, options.rng_seed, describe, echo=echo)


class Executor:
    """Runs jobs: the judge's side of each case here, the submission in a worker process started
    in the run's runner folder. `Executor.open` builds a run's pieces; constructing one only
    holds them.

    Official: one worker for the whole run, as the competition's pool, kept after a failed case.
    Otherwise a worker is reused only while its cases pass (`reuse`: the test and timed modes):
    a failure, a crash, a hang or a broken CUDA context ends it, and the next case starts in a
    fresh process. Without `reuse` (profile) every case starts one. Timed modes also run one
    calibration partner for the run (harness/judge/rounds.py). Whatever a case's worker
    started is ended with the case.

    A case after which one of the judge's files changed fails, and the run stops there
    (harness/judge/integrity.py).
    """

    def __init__(self, options: RunOptions, listener: RunListener, clock: JudgeClock, pool: SharedPool,
                 worker: WorkerProcess, partner: WorkerProcess | None, workers: FreshWorkers, watch: CodeWatch,
                 reuse: bool, deadline: float, sandbox_layers: dict, runner_copies: re.Pattern):
        self._options, self._listener = options, listener
        self._clock, self._pool = clock, pool
        self._worker, self._partner, self._workers = worker, partner, workers
        self._watch = watch
        self._reuse = reuse
        self._deadline = deadline
        self._tampered: list[str] = []
        self.sandbox_layers, self.runner_copies = sandbox_layers, runner_copies

    @classmethod
    @contextlib.contextmanager
    def open(cls, options: RunOptions, listener: RunListener, reuse: bool = False, timed: bool = False,
             workers: FreshWorkers | None = None) -> Iterator["Executor"]:
        """A run's pieces, built in this order and taken down in the reverse one:

        1. the judge's protection (harness/judge/isolation.py): its /proc files closed to its
           workers and the processes they orphan adopted, before any worker exists;
        2. the workers' sandbox (harness/judge/sandbox.py): bubblewrap, seccomp, a cgroup;
        3. the folder of the run's runner folders and worker logs;
        4. on the run's device, the judge's clock (harness/judge/rounds.py) and the memory it
           shares with the workers (harness/judge/memory.py);
        5. the submission's worker and, in a timed mode, the calibration partner, from `workers`
           (started as asked, or the service's pool); none starts before a case asks for it;
        6. the watch of the judge's code (`_watch_the_judges_code`), stamped before any worker starts,
           or kept from a judge's earlier runs (`KeptCodeWatches`).
        """
        began = time.monotonic() if options.wall_clock_from is None else options.wall_clock_from
        deadline = began + (options.wall_limit_s or float("inf"))
        for refused in protect_the_judge():
            listener.warning(f"the system refused the judge {refused}")
        with contextlib.ExitStack() as stack:
            sandbox = Sandbox(options.device)
            stack.callback(sandbox.close)
            for refused in sandbox.refused:
                listener.warning(f"the workers' sandbox lacks a layer: {refused}")
            logs = stack.enter_context(tempfile.TemporaryDirectory(prefix="nvfp4-harness-"))
            workers = workers or FreshWorkers()
            # The worker's copy of the file, wherever its folder is, reads as the file's own name.
            roots = "|".join(re.escape(root) for root in (logs, workers.folders_root) if root)
            runner_copies = re.compile(rf"(?:{roots})/runner-[^/\s]+/submission\.py")
            device = torch.device(options.device)
            # Test mode flushes nothing, as the competition's test mode: an untimed run holds no
            # flush buffer, which lanes of test-mode runs on one GPU would each take a share of.
            clock = JudgeClock(device, options.problem.eval.flush_bytes if timed else 0, own_flush=options.official)
            pool = SharedPool(device)
            # Where a queue was given up, the pool's memory is never freed: its end would wait on it.
            stack.callback(given_up.keep_or, pool, lambda: None)
            reuse = reuse or options.official
            files = runner_files(options.problem)
            worker = workers.worker(sandbox, logs, {**files, "submission.py": options.submission}, options, pool.describe)
            partner = workers.worker(sandbox, logs, files, options, pool.describe, echo=True) if timed else None
            stack.callback(_end_processes, worker, partner, workers, options.ncu)
            watch = options.code_watch or _watch_the_judges_code(options.problem)
            yield cls(options, listener, clock, pool, worker, partner, workers, watch, reuse, deadline, sandbox.layers,
                      runner_copies)

    def _processes(self) -> list[WorkerProcess]:
        return [process for process in (self._worker, self._partner) if process is not None]

    def run(self, job: Job, label: str) -> CaseResult:
        if self._tampered:
            return CaseResult(NOT_RUN, "not run: a submission wrote the judge's own files in an earlier case")
        if given_up.any_given_up():
            return CaseResult(NOT_RUN, "not run: the judge gave up a queue behind an earlier case's GPU work, which never "
                                       "ended (the process judges nothing more)")
        if self._options.cancelled is not None and self._options.cancelled.is_set():
            return CaseResult(NOT_RUN, "not run: the run was cancelled")
        started = time.monotonic()
        timeout_s = min(self._options.timeout_s, self._deadline - started)
        if timeout_s <= 0:
            return CaseResult(NOT_RUN, f"not run: the run's wall-time limit ({self._options.wall_limit_s:g} s) is spent")
        phases = PhaseTimer()
        with self._listener.case_progress(label) as on_listener_progress:
            on_progress = phases.wrap(on_listener_progress)
            try:
                # Every process started first, then each connected: their starts overlap.
                new_processes = [process for process in self._processes() if process.begin_case(timeout_s, on_progress)]
                for process in new_processes:
                    self._clock.connect(process)
                # The time limit counts again once the inputs are drawn (Judging.restart_time_limit):
                # at most what the run's --wall-limit left when the case started.
                result = RUNNERS[job.kind](job, Judging(self._worker, self._partner, self._clock, self._pool, on_progress,
                                                     timeout_s))
            except CaseStopped as stopped:
                result = stopped.result
            except UntrustedMessageError as error:
                result = CaseResult(FAIL, str(error))
            except (TypeError, ValueError, KeyError, IndexError, AttributeError, RuntimeError) as error:
                # Replies are the worker's, so the submission's to forge: one the judge cannot
                # read is a failure, not the harness's crash.
                result = CaseResult(FAIL, f"the judge could not read the worker's reply ({type(error).__name__}: {error})")
            self._release_inputs()
        result.output = self._worker.output_of_case()
        self._judge_fallbacks(result, job)
        self._tampered = self._watch.changed()
        if self._tampered:
            result.status = FAIL
            result.message = ("the judge's own files changed while the submission ran (a worker wrote them): "
                              + ", ".join(self._tampered[:5]) + (" ..." if len(self._tampered) > 5 else ""))
        result.device_name = device_name(job.device)
        result.wall_s = time.monotonic() - started
        result.phases_s = phases.finish()
        if self._options.official and result.status == ERROR and result.uncaught_officially:
            raise OfficialEvalStopped(result)
        if not self._reuse or (result.status != PASS and not self._options.official):
            self._worker.close(ask_to_exit=self._options.ncu)
        end_strays(self._worker.pids | (self._partner.pids if self._partner else set()) | self._workers.pids)
        return result

    def _judge_fallbacks(self, result: CaseResult, job: Job) -> None:
        """A case where the submission's self-check took a fallback fails (a warning under
        --official): the answer is right, but not from the configuration the file chose."""
        fallbacks = fallbacks_in(result.output)
        if result.passed and fallbacks:
            said = f"the submission's self-check fell back ({len(fallbacks)}x): {fallbacks[0]}"
            if beyond_the_competition(said, job.rules.strict, result):
                result.status, result.message = FAIL, said

    def _release_inputs(self) -> None:
        """The workers let go of the case's shared memory, so that the judge can free it. The
        partner's time limit starts afresh: a case that ran out of time is the worker's, and the
        judge's own limit must not end the partner, which no later case could then replace."""
        if self._partner is not None and self._partner.alive:
            self._partner.begin_case(max(self._options.timeout_s, PARTNER_TIME_LIMIT_S), lambda text: None)
        for process in self._processes():
            if process.alive:
                try:
                    process.request("release", BATCH)
                except CaseStopped:
                    pass
        self._pool.release()


class RepeatedError:
    """Stops a run at a failure that every remaining case would meet, not under --official (whose
    eval runs every case): the first case's error naming CUDA on a CPU run, which the device will
    raise again; an import error; or two cases in a row, of different shapes, the second in a
    fresh worker (a failed case ends its worker), that raised the same exception type at the same
    line of the submission (whatever their messages say), failed with the same message (a
    wrong dtype), crashed by the same signal or both ran out of time: that comes from the file,
    not from a case. A file that hangs or dies on every shape thus holds the judge for two
    cases' limits, not for all of them."""

    def __init__(self, kind: str, cases: list[Case], options: RunOptions):
        self._kind, self._cases, self._options = kind, cases, options
        self._previous: CaseResult | None = None
        self.found: RepeatedFailure | None = None

    def not_run(self) -> CaseResult | None:
        """The result of a case the run no longer reaches, or None while it goes on."""
        return CaseResult(NOT_RUN, self._reason()) if self.found else None

    def judged(self, index: int, result: CaseResult) -> None:
        previous, self._previous = self._previous, result
        if self.found or self._options.official or result.status not in REPEATABLE:
            return
        if result.status == ERROR and index == 0 and not self._options.device.startswith("cuda") and "cuda" in result.message.lower():
            self.found = RepeatedFailure(self._kind, index, result, "needs_gpu")
        elif result.while_importing:
            self.found = RepeatedFailure(self._kind, index, result, "importing")
        elif (previous is not None and _same_failure(previous, result)
              and self._cases[index].shape != self._cases[index - 1].shape):
            self.found = RepeatedFailure(self._kind, index - 1, result, "alike")

    def _reason(self) -> str:
        """Why the remaining cases are not run."""
        found, first = self.found, f"{self.found.kind} {self.found.first_index}"
        if found.cause == "needs_gpu":
            return f"not run: {first} raised an error naming CUDA on --device {self._options.device}"
        if found.cause == "importing":
            return f"not run: the submission does not import ({first})"
        return f"not run: {found.seen(self._options.submission_name)} on different shapes"


class FirstFailure:
    """--stop-on-first-failure: the cases after the first that did not pass are not run."""

    def __init__(self, kind: str, on: bool):
        self._kind, self._on = kind, on
        self._reason = ""

    def not_run(self) -> CaseResult | None:
        return CaseResult(NOT_RUN, self._reason) if self._reason else None

    def judged(self, index: int, result: CaseResult) -> None:
        if self._on and not self._reason and result.status not in (PASS, NOT_RUN):
            self._reason = f"not run: {self._kind} {index} did not pass (--stop-on-first-failure)"


def _end_processes(worker: WorkerProcess, partner: WorkerProcess | None, workers: FreshWorkers,
                   ask_to_exit: bool) -> None:
    """A run's processes ended, and whatever they started; the waiting ones of `workers` are kept.
    `ask_to_exit`: a profiler wrapped around the run (`profile --ncu`) collects at their exit."""
    for process in (worker, partner):
        if process is not None:
            process.close(ask_to_exit=ask_to_exit)
    end_strays(set(workers.pids))


def _watch_the_judges_code(problem: Problem) -> CodeWatch:
    """The code the judge runs after workers have run, loaded now and then stamped: the judge runs
    only code it loaded before a submission could write its files (harness/judge/integrity.py).
    Besides the harness, that is the problem's files (the reference and the check, imported under
    names of their own) and what appends the results' rows once the cases are over."""
    problem.modules()
    import_the_row_writer()
    return CodeWatch(extra=tuple(problem.runner_files().values()))


class KeptCodeWatches:
    """The watch of the judge's code kept across the runs of a judge that judges one candidate
    after another (the service's), stamped for a problem's first run and again wherever the judge
    has loaded a module since (each module is watched from the run after its load, as a stamp at
    each run's start would watch it). Keeping it is safe: a run that sees a watched file changed
    fails its case, and that judge ends (harness/service/judge.py), so every run of a judge that
    goes on starts with the files as stamped; a change made between two runs, which a stamp at the
    next run's start would take for the files' own, shows at the next case instead."""

    def __init__(self):
        self._kept: dict[str, tuple[frozenset, CodeWatch]] = {}

    def watch(self, problem: Problem) -> CodeWatch:
        kept = self._kept.get(problem.name)
        if kept is None or kept[0] != _loaded():
            watch = _watch_the_judges_code(problem)
            kept = self._kept[problem.name] = (_loaded(), watch)
        return kept[1]


def _loaded() -> frozenset:
    """The names of the modules loaded now (a copy first: another thread may import meanwhile)."""
    return frozenset(sys.modules.copy())


def _same_failure(first: CaseResult, second: CaseResult) -> bool:
    """Two errors of one exception type through one line of the submission; two timeouts; or two
    failures or crashes whose messages agree but for their numbers (a wrong dtype, whatever shape
    each names; one signal). Wrong values are not one failure repeated: which shapes go wrong is
    what the run is there to tell."""
    if first.status != second.status:
        return False
    if first.status == TIMEOUT:
        return True
    if first.status == ERROR:
        return (first.origin or first.message) == (second.origin or second.message)
    return (VALUE_MISMATCH not in first.message
            and NUMBERS.sub("#", first.message) == NUMBERS.sub("#", second.message))


def device_name(device: str) -> str:
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return "cpu"


@contextlib.contextmanager
def _judging(record: RunRecord, listener: RunListener, workers: FreshWorkers | None, **executor) -> Iterator[Executor | None]:
    """Around a run's cases: the listener told of its start and end, the record's exit status set;
    None in place of an executor where --strict refused the file (no case runs), and an official
    eval's uncaught exception ends the run where the competition's would."""
    listener.run_started(record)
    options = record.options
    try:
        if options.refused:
            record.refused = True
            yield None
        else:
            with Executor.open(options, listener, workers=workers, **executor) as opened:
                record.sandbox, record.runner_copies = opened.sandbox_layers, opened.runner_copies
                yield opened
    except OfficialEvalStopped as stopped:
        record.eval_stopped = stopped.result
    record.exit_status = EXIT_EVAL_STOPPED if record.eval_stopped else EXIT_PASS if record.passed else EXIT_FAIL
    listener.run_ended(record)


def run_tests(cases: list[Case], options: RunOptions, listener: RunListener, workers: FreshWorkers | None = None) -> RunRecord:
    record = RunRecord("test", cases, options)
    repeated, first_failure = RepeatedError("test", cases, options), FirstFailure("test", options.stop_on_first_failure)
    with _judging(record, listener, workers, reuse=True) as executor:
        for index, case in enumerate(cases if executor else ()):
            listener.case_started(index, case)
            result = (first_failure.not_run() or repeated.not_run()
                      or executor.run(options.job("test", case), f"test {index}: {case.label}"))
            record.results.append(result)
            listener.case_judged(index, case, result)
            repeated.judged(index, result)
            first_failure.judged(index, result)
        record.repeated = repeated.found
    return record


def _benchmark_jobs(cases, options: RunOptions, leaderboard: bool):
    """(warm-up jobs, measured jobs) following the competition's schedule for the mode: the
    problem's eval's caps, warm-ups and recheck."""
    eval_parameters = options.problem.eval
    warmup = eval_parameters.leaderboard_warmup if leaderboard else eval_parameters.benchmark_warmup
    run = eval_parameters.leaderboard_run if leaderboard else eval_parameters.benchmark_run
    recheck = leaderboard and eval_parameters.leaderboard_rechecks
    if options.max_repeats:
        warmup, run = ((min(repeats, options.max_repeats), time_ns) for repeats, time_ns in (warmup, run))
    if options.official:
        warm_cases = cases if leaderboard and eval_parameters.leaderboard_warms_every_case else cases[:1]
        warmups = [options.job("benchmark", case, run=warmup) for case in warm_cases]
        measured = [options.job("benchmark", case, run=run, recheck=recheck) for case in cases]
        return warmups, measured
    # Each case warms up its own shape right before it is measured.
    measured = [
        options.job("benchmark", case, warmup=warmup, run=run, recheck=recheck, baselines=options.baselines)
        for case in cases
    ]
    return [], measured


def run_benchmarks(cases: list[Case], options: RunOptions, listener: RunListener, leaderboard: bool,
                   workers: FreshWorkers | None = None) -> RunRecord:
    mode = "leaderboard" if leaderboard else "benchmark"
    record = RunRecord(mode, cases, options)
    results = record.results
    warmups, measured = _benchmark_jobs(cases, options, leaderboard)
    repeated, first_failure = RepeatedError("benchmark", cases, options), FirstFailure("benchmark", options.stop_on_first_failure)
    with _judging(record, listener, workers, reuse=True, timed=True) as executor:
        if executor is None:
            return record
        measured_ceilings = None
        if (options.measure_ceilings or options.baselines) and options.device.startswith("cuda"):
            measured_ceilings = executor.run(options.job("ceilings", None), "measuring ceilings")
            listener.ceilings_measured(measured_ceilings)
        for job in warmups:
            executor.run(job, f"warm-up {job.case.label}")
        stop = False
        for index, (case, job) in enumerate(zip(cases, measured)):
            listener.case_started(index, case)
            if stop:
                result = CaseResult(NOT_RUN, "not run: an earlier case failed (the competition stops there)")
            else:
                result = first_failure.not_run() or repeated.not_run() or executor.run(job, f"{mode} {index}: {case.label}")
            results.append(result)
            listener.case_judged(index, case, result)
            repeated.judged(index, result)
            first_failure.judged(index, result)
            stop = options.official and leaderboard and not result.passed
        record.repeated = repeated.found
        set_speed_of_light(record, measured_ceilings)
    return record


def set_speed_of_light(record: RunRecord, measured_ceilings: CaseResult | None = None) -> None:
    """A timed run's speed-of-light, set before the listener hears the run ended: each case's
    work, and the ceilings from the devices table or measured, raised where a case beat them."""
    options, cases, results = record.options, record.cases, record.results
    name = next((result.device_name for result in results if result.device_name), "")
    measured_values = measured_ceilings.ceilings if measured_ceilings is not None and measured_ceilings.passed else None
    ceilings, note = sol.ceilings_for(name, measured_values if options.measure_ceilings else None)
    floor = (sol.Ceilings(name, measured_values["peak_flops"], measured_values["bandwidth"], measured_values["source"])
             if measured_values else None)
    works = record.works = [options.problem.work(case.args) for case in cases]
    reached = [(case.label, work, result.stats.mean / 1e9)
               for case, result, work in zip(cases, results, works) if result.passed and work]
    ceilings, floor = (limit.held_by(reached) if limit else None for limit in (ceilings, floor))
    record.ceilings, record.ceilings_note, record.floor = ceilings, note, floor


def run_profile(cases: list[Case], options: RunOptions, listener: RunListener, workers: FreshWorkers | None = None) -> RunRecord:
    record = RunRecord("profile", cases, options)
    repeated = RepeatedError("profile", cases, options)
    with _judging(record, listener, workers) as executor:
        for index, case in enumerate(cases if executor else ()):
            listener.case_started(index, case)
            result = repeated.not_run() or executor.run(options.job("profile", case, ncu=options.ncu), f"profile {index}: {case.label}")
            record.results.append(result)
            listener.case_judged(index, case, result)
            repeated.judged(index, result)
        record.repeated = repeated.found
    return record
