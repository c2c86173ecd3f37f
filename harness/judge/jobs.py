"""What the harness asks of a worker process, and what comes back."""

import dataclasses

from harness.problems import PROBLEMS, Problem
from harness.problems.shapes import Case
from harness.shared.stats import Stats

# Case statuses, in the words the reports use.
PASS = "pass"
FAIL = "fail"  # the submission ran and its output or behaviour broke a rule
ERROR = "error"  # the submission raised (including CUDA errors surfacing as exceptions)
CRASH = "crash"  # the worker process died without reporting (segfault, abort, os._exit)
TIMEOUT = "timeout"  # the case ran past its time limit and its process was killed
# The run stopped before the case (docs/judge.md, "Statuses"): leaderboard --official after a failed
# case; not under --official, a failure every case would repeat; --stop-on-first-failure after a
# case that did not pass; --wall-limit spent; the judge's own files changed in an earlier case; or
# after an earlier case whose GPU work never ended (a queue of the judge's given up behind it).
NOT_RUN = "not run"


@dataclasses.dataclass(frozen=True)
class Rules:
    """Which verdicts apply. `strict` adds ours to the competition's; off reproduces its eval."""

    strict: bool = True


@dataclasses.dataclass(frozen=True)
class Job:
    kind: str  # "test", "benchmark", "profile" or "ceilings"
    case: Case | None
    device: str = "cuda"
    rules: Rules = Rules()
    warmup: tuple[int, float] | None = None  # (max_repeats, max_time_ns) before the measured run
    run: tuple[int, float] | None = None
    recheck: bool = False  # check outputs of every timed round (leaderboard)
    baselines: bool = False
    ncu: bool = False  # profile: one bare call in an NVTX range, for a profiler wrapped around us
    problem: Problem = PROBLEMS["nvfp4_gemm"]  # the inputs, the reference, the check and the eval's numbers


@dataclasses.dataclass
class CaseResult:
    status: str
    message: str = ""
    stats: Stats | None = None  # the figures reported: the judge's own (the worker's under --official)
    judged_stats: Stats | None = None  # per call by the judge's clock, its calibrated fixed cost subtracted
    worker_stats: Stats | None = None  # per call by the worker's events, the competition's way (a claim)
    fixed_ns: float | None = None  # the judge's calibrated fixed cost of a round
    host_ns: float | None = None  # host time of one custom_kernel call, back to back, no sync
    baselines: dict = dataclasses.field(default_factory=dict)  # name -> Stats
    report: str = ""  # profile table
    flush: str = ""  # the L2 flush used
    device_name: str = ""
    ceilings: dict = dataclasses.field(default_factory=dict)  # measured: peak_flops, bandwidth
    output: str = ""  # what the worker printed
    exception: str = ""  # str() of what the submission raised (ERROR), as the competition prints it
    origin: str = ""  # ERROR: the exception's type and the submission's line it came through (`ValueError at submission.py:12`)
    while_importing: bool = False  # ERROR: raised by importing the submission, before any call
    uncaught_officially: bool = False  # ERROR: the competition's eval would not catch it and would stop
    warning: str = ""  # --official: what the competition's verdict missed
    activity: str = ""  # what the recorded round's calls launched on the GPU
    wall_s: float = 0.0
    phases_s: dict = dataclasses.field(default_factory=dict)  # seconds per phase (harness/judge/phases.py)

    @property
    def raised_at(self) -> str:
        """ERROR: `file:line` of `origin`, or nothing where no frame of the worker's was found."""
        return self.origin.partition(" at ")[2]

    def warn(self, text: str) -> None:
        self.warning = f"{self.warning}; {text}" if self.warning else text

    @property
    def passed(self) -> bool:
        return self.status == PASS
