"""What one run of a mode found, filled in by the modes (harness/judge/modes.py) as the run goes
and returned whole: the options it ran under, its cases and their results, the ceilings its
speed-of-light is set against, why it stopped before its last case, and its exit status. Every
output is made from it (harness/results/): the people's report (console.py), the POPCORN lines
(popcorn.py), the --json document (document.py), the store's rows and the CSV export
(recording.py).

`RunListener` is what a caller attaches to watch a run as it goes (the people's progress, the
POPCORN lines as the competition writes them): the modes call it and know nothing of what it
prints or writes."""

import contextlib
import dataclasses
import re
from typing import Callable, Iterator

from harness.judge.jobs import CRASH, ERROR, NOT_RUN, TIMEOUT, CaseResult


@dataclasses.dataclass(frozen=True)
class RepeatedFailure:
    """A failure every remaining case would meet, which stopped the run (modes.RepeatedError):
    `kind` `first_index` and the case after it alike (`cause` "alike"), or `first_index` alone,
    where every case would raise its error: one naming CUDA off a GPU ("needs_gpu"), or the
    file's import ("importing"). `result`: the case that showed it."""
    kind: str
    first_index: int
    result: CaseResult
    cause: str

    def seen(self, submission_name: str) -> str:
        """What was seen, where the cause is "alike": the two cases named, and how alike."""
        both = f"{self.kind} {self.first_index} and {self.kind} {self.first_index + 1}"
        if self.result.status == ERROR:
            origin = self.result.origin.replace(" at submission.py:", f" at {submission_name}:")
            return f"{both} raised the same error" + (f" ({origin})" if origin else "")
        return {TIMEOUT: f"{both} ran out of time", CRASH: f"{both} crashed alike"}.get(self.result.status, f"{both} failed alike")


@dataclasses.dataclass
class RunRecord:
    mode: str
    cases: list
    options: object = None  # the modes.RunOptions the run ran under
    results: list[CaseResult] = dataclasses.field(default_factory=list)
    ceilings: object = None  # sol.Ceilings the run's SOL is set against (timed modes on a GPU)
    ceilings_note: str = ""
    floor: object = None  # measured ceilings, where measured
    works: list = dataclasses.field(default_factory=list)  # a timed run's (flops, DRAM bytes) per case, None without a SOL formula
    refused: bool = False  # --strict: kernelguard flagged the file, no case ran
    sandbox: dict | None = None  # the workers' sandbox's layers in force (Sandbox.layers), once it is built
    runner_copies: re.Pattern | None = None  # paths of the workers' copies of the submission, named in their messages
    repeated: RepeatedFailure | None = None
    eval_stopped: CaseResult | None = None  # --official: the case whose exception the competition's eval does not catch
    exit_status: int | None = None

    @property
    def passed(self) -> bool:
        return (not self.refused and self.eval_stopped is None and bool(self.results)
                and all(result.passed for result in self.results))

    @property
    def stop_reason(self) -> str:
        """Why cases were not run (the first such case's reason), or ""."""
        return next((result.message for result in self.results if result.status == NOT_RUN), "")


class RunListener:
    """A run's events as they happen, each a no-op here: a caller's listener overrides those it
    shows. `record` is the run's own, filled in as the run goes."""

    def run_started(self, record: RunRecord) -> None:
        """The run's options and cases are known; no case has run (a --strict refusal ends it next)."""

    def warning(self, text: str) -> None:
        """Something the run goes on without (a protection the system refused, a sandbox layer missing)."""

    @contextlib.contextmanager
    def case_progress(self, label: str) -> Iterator[Callable[[str], None]]:
        """Around one job of a worker: yields what is told each phase's text as the job goes."""
        yield lambda text: None

    def ceilings_measured(self, result: CaseResult) -> None:
        """The measured ceilings' job (timed modes, --ceilings measured or --baselines) is over."""

    def case_started(self, index: int, case) -> None:
        """Case `index` is next (it may still not run)."""

    def case_judged(self, index: int, case, result: CaseResult) -> None:
        """Case `index`'s verdict, `result` (also in record.results)."""

    def run_ended(self, record: RunRecord) -> None:
        """The record is whole: its exit status set."""


class Listeners(RunListener):
    """Several listeners, each told every event in the order given."""

    def __init__(self, *listeners: RunListener):
        self._listeners = listeners

    def run_started(self, record: RunRecord) -> None:
        for listener in self._listeners:
            listener.run_started(record)

    def warning(self, text: str) -> None:
        for listener in self._listeners:
            listener.warning(text)

    @contextlib.contextmanager
    def case_progress(self, label: str) -> Iterator[Callable[[str], None]]:
        with contextlib.ExitStack() as stack:
            callbacks = [stack.enter_context(listener.case_progress(label)) for listener in self._listeners]

            def on_progress(text: str) -> None:
                for callback in callbacks:
                    callback(text)

            yield on_progress

    def ceilings_measured(self, result: CaseResult) -> None:
        for listener in self._listeners:
            listener.ceilings_measured(result)

    def case_started(self, index: int, case) -> None:
        for listener in self._listeners:
            listener.case_started(index, case)

    def case_judged(self, index: int, case, result: CaseResult) -> None:
        for listener in self._listeners:
            listener.case_judged(index, case, result)

    def run_ended(self, record: RunRecord) -> None:
        for listener in self._listeners:
            listener.run_ended(record)
