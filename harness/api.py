"""The harness as a library: `prepare` one run of a mode (its cases and options) and `run` it,
which returns its record (harness/judge/record.py). The command line (harness/cli.py) and the
service's judges (harness/service/judge.py) both call these; what each shows of a run (the
people's report, the POPCORN lines, the --json document, the store's rows) is made from the
record by a sink of its own, the streaming ones attached as listeners."""

import os
import time
from pathlib import Path

import click

from harness.submitting import lint

from harness.judge import folder_eval, modes

from harness.judge.dev_shm import own_dev_shm
from harness.judge.judge_user import JudgeCannotStart, drop_root
from harness.judge.exits import EXIT_BAD_TESTS_FILE, EXIT_INFRASTRUCTURE, EXIT_NO_GPU, EXIT_REFERENCE_CANNOT_RUN, EXIT_REJECTED
from harness.judge.isolation import WorkerNotStarted
from harness.judge.precheck import LIMIT_S as KERNELGUARD_LIMIT_S, precheck, start_reader
from harness.judge.record import RunListener, RunRecord
from harness.problems import shapes


DEFAULT_TIMEOUT_S = {"test": 180, "benchmark": 300, "leaderboard": 600, "profile": 180}
DEFAULT_SETS = {"test": "tests", "benchmark": "benchmarks", "leaderboard": "benchmarks", "profile": "benchmarks"}


class Stopped(Exception):
    """The run ends without a verdict, before it judges anything or where the judge's machine
    failed: the command line shows `message` on stderr (and in the --json document as its
    `error`) and exits with `status`; the service replies with both."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def load_cases(tests_file, default_set: str, secret_seed: int | None, problem, device: str = "cuda"):
    """The cases: the tests file's, else the problem's official set; on the CPU the benchmarks'
    stand-ins (Problem.cpu_benchmarks). Stopped where the tests file cannot be read."""
    try:
        if tests_file:
            cases = shapes.load_cases(tests_file, problem.case_format)
        elif default_set == "benchmarks" and device == "cpu":
            cases = problem.cpu_benchmarks()
        else:
            cases = problem.cases(default_set)
    except shapes.ShapeFileError as error:
        raise Stopped(EXIT_BAD_TESTS_FILE, str(error)) from None
    return shapes.apply_secret_seed(cases, secret_seed)


def _require_runnable_reference(problem, case, device: str) -> None:
    """A folder's reference.py is the user's, used as it is: where it cannot run here (the
    competition's call cuBLAS's FP4 GEMM through torch._scaled_mm, which needs a B200), say so
    once, before any case, rather than as every case's failure. The built-in ones run anywhere."""
    if problem.builtin:
        return
    try:
        problem.expected(problem.generate(case.args, case.args["seed"], device))
    except Exception as error:  # whatever the folder's reference raises is the finding
        raise Stopped(EXIT_REFERENCE_CANNOT_RUN,
                      f"{problem.name}'s reference.py cannot run on {device} ({type(error).__name__}: {error}); "
                      "nothing was judged") from None


def _as_given(path) -> str:
    """A path as a command line would name it from here: relative where it was made absolute."""
    return os.path.relpath(path) if os.path.isabs(str(path)) else str(path)


# The make target that runs each mode (Makefile): its options go in ARGS.
MAKE_TARGETS = {"test": "check", "benchmark": "bench", "leaderboard": "leaderboard", "profile": "profile"}


def _require_device(device: str, mode: str, submission: str = "FILE", problem: str | None = None) -> None:
    """Stopped where `device` is a CUDA device this machine lacks; the hint names the make target
    with the run's file and, where it is not the default one, its problem (`problem`: its selector)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            problem_part = f"PROBLEM={problem} " if problem and problem != "nvfp4_gemm" else ""
            raise Stopped(EXIT_NO_GPU, ("no CUDA device: this command needs one; without one, `lint` and `compile --arch sm_100a` "
                                       "check any file, and `--device cpu` runs a file whose custom_kernel runs on torch alone "
                                       f"(through make: `make {MAKE_TARGETS[mode]} {problem_part}SUBMISSION={submission} "
                                       "ARGS=\"--device cpu\"`)"))
        index, count = torch.device(device).index, torch.cuda.device_count()
        if index is not None and index >= count:
            raise Stopped(EXIT_NO_GPU, f"no CUDA device {index}: this machine has {count} (cuda:0 to cuda:{count - 1})")


def prepare(mode: str, tests_file, submission, problem, device: str, official: bool = False, timeout_s=None,
            strict: bool = False, secret: int | None = None, kernelguard=start_reader, **extra) -> tuple[list, "modes.RunOptions"]:
    """The cases and options of one run of `mode`, or Stopped where nothing can be judged (a
    click.UsageError where the options do not fit the problem). `kernelguard` gives the process
    that reads the file (judge/precheck.py: one started now, or one started ahead).
    First the file's size (the competition's limit, before anything reads it); the run's
    --wall-limit counts from there, kernelguard's reading of the file included."""
    began = time.monotonic()
    oversize = lint.over_the_size_limit(Path(submission).stat().st_size)
    if oversize:
        raise Stopped(EXIT_REJECTED, f"{submission} is refused before anything runs: {oversize} (the competition's server "
                                     "answers 413)")
    if device.startswith("cuda"):
        own_dev_shm()  # entered already by `python -m harness` (harness/__main__.py); here for other callers
        try:
            drop_root()  # a root judge's own user, before CUDA starts (its workers' too: CUDA IPC)
        except JudgeCannotStart as error:
            raise Stopped(EXIT_INFRASTRUCTURE, f"no verdict: {error}") from None
    if official and problem.official_refused:
        raise click.UsageError(problem.official_refused)
    # A folder's own eval draws its inputs itself, from the cases as written and POPCORN_SEED
    # (RunOptions.runs_the_folders_eval, decided here before the options exist).
    own_eval = official and bool(problem.eval_main)
    cases = load_cases(tests_file, DEFAULT_SETS[mode], None if own_eval else secret, problem, device)
    _require_device(device, mode, _as_given(submission), problem.name if problem.builtin else _as_given(problem.folder))
    _require_runnable_reference(problem, cases[0], device)
    try:
        options = modes.RunOptions(
            submission=Path(submission), problem=problem, device=device, official=official,
            timeout_s=timeout_s or dict(problem.timeouts_s).get(mode) or DEFAULT_TIMEOUT_S[mode],
            rng_seed=shapes.worker_rng_seed(secret), eval_seed=secret if own_eval else None, strict=strict,
            precheck=precheck(Path(submission).read_text(errors="replace"),
                              min(KERNELGUARD_LIMIT_S, extra.get("wall_limit_s") or float("inf")), kernelguard),
            wall_clock_from=began, **extra,
        )
    except ValueError as error:  # an option the problem does not take (--baselines beyond nvfp4_gemm)
        raise click.UsageError(str(error)) from None
    return cases, options


def run(mode: str, cases: list, options: "modes.RunOptions", listener: RunListener = RunListener(),
        workers: "modes.FreshWorkers | None" = None) -> RunRecord:
    """Judge the cases in `mode`, with worker processes from `workers` (started as asked by
    default), `listener` told of the run as it goes (under --official a problem folder's own eval
    runs whole instead: harness/judge/folder_eval.py); the run's record, its exit status set, or
    Stopped where a worker did not start (the judge's machine, not the file: EXIT_INFRASTRUCTURE)."""
    try:
        if options.runs_the_folders_eval:
            return folder_eval.run(mode, cases, options, listener, workers)
        if mode == "test":
            return modes.run_tests(cases, options, listener, workers)
        if mode == "profile":
            return modes.run_profile(cases, options, listener, workers)
        return modes.run_benchmarks(cases, options, listener, leaderboard=mode == "leaderboard", workers=workers)
    except WorkerNotStarted as failure:
        raise Stopped(EXIT_INFRASTRUCTURE, f"no verdict: {failure}") from None
