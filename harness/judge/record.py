"""What one run of a mode found, returned by the modes (harness/judge/modes.py): its cases and their
results, the ceilings its speed-of-light is set against, why it stopped before its last case,
and its exit status. The reports are read from it: the people's, the POPCORN lines, the --json
document, the service's reply and store."""

import dataclasses

from harness.judge.jobs import NOT_RUN, CaseResult


@dataclasses.dataclass
class RunRecord:
    mode: str
    cases: list
    results: list[CaseResult] = dataclasses.field(default_factory=list)
    ceilings: object = None  # sol.Ceilings the run's SOL is set against (timed modes on a GPU)
    ceilings_note: str = ""
    floor: object = None  # measured ceilings, where measured
    works: list = dataclasses.field(default_factory=list)  # a timed run's (flops, DRAM bytes) per case, None without a SOL formula
    refused: bool = False  # --strict: kernelguard flagged the file, no case ran
    exit_status: int | None = None

    @property
    def passed(self) -> bool:
        return not self.refused and bool(self.results) and all(result.passed for result in self.results)

    @property
    def stop_reason(self) -> str:
        """Why cases were not run (the first such case's reason), or ""."""
        return next((result.message for result in self.results if result.status == NOT_RUN), "")
