"""`--json`: one JSON document a command, on stdout, for programs that drive the harness.

Kernel-search loops read verdicts, messages, statistics, speed-of-light and the score from it
instead of parsing tables; the people's report goes to stderr meanwhile. The schema is in the
README (Machine-readable output); `SCHEMA` names its version and changes with any field that
changes meaning.
"""

from __future__ import annotations

import json
import sys

from harness.results import file_sha256
from harness.stats import geomean

SCHEMA = "nvfp4-harness/1"


def stats_fields(stats) -> dict | None:
    if stats is None:
        return None
    return {"runs": stats.runs, "mean_ns": stats.mean, "std_ns": stats.std, "err_ns": stats.err,
            "best_ns": stats.best, "worst_ns": stats.worst}


def ceilings_fields(ceilings, note: str) -> dict | None:
    if ceilings is None:
        return None
    return {"peak_flops": ceilings.peak_flops, "bandwidth": ceilings.bandwidth, "source": ceilings.source, "origin": note}


class RunDocument:
    """What test, benchmark, leaderboard and profile found, filled in as the run goes."""

    def __init__(self, command: str, options, cases):
        self.data = {
            "schema": SCHEMA,
            "command": command,
            "problem": options.problem.name,
            "submission": str(options.submission),
            "submission_sha256": file_sha256(options.submission),
            "device": options.device,
            "device_name": None,
            "official": options.official,
            "cases": [{"index": index, "spec": case.spec, "shape": dict(case.args), "status": None}
                      for index, case in enumerate(cases)],
            "passed": None,
            "exit_status": None,
        }

    def case(self, index: int, result, **extra) -> None:
        entry = self.data["cases"][index]
        entry.update(status=result.status, message=result.message, warning=result.warning, activity=result.activity, wall_s=result.wall_s,
                     stats=stats_fields(result.stats), judged_stats=stats_fields(result.judged_stats),
                     worker_stats=stats_fields(result.worker_stats), fixed_ns=result.fixed_ns, host_ns=result.host_ns,
                     baselines={name: stats_fields(stats) for name, stats in result.baselines.items()}, **extra)
        if result.report:
            entry["profile_table"] = result.report
        if result.device_name:
            self.data["device_name"] = result.device_name

    def benchmark_summary(self, cases, results, ceilings, note: str, works: list) -> None:
        """`works`: each case's (flops, DRAM bytes), or None where its problem has no SOL."""
        if None in works:
            ceilings = None
        for index, (result, work) in enumerate(zip(results, works)):
            if result.passed and ceilings is not None:
                sol_ns = ceilings.seconds(work) * 1e9
                self.data["cases"][index].update(sol_ns=sol_ns, pct_sol=100 * sol_ns / result.stats.mean,
                                                 bound=ceilings.bound_of(work))
        passed = all(result.passed for result in results)
        means = [result.stats.mean for result in results] if passed else []
        self.data.update(
            ceilings=ceilings_fields(ceilings, note),
            score_ns=geomean(means) if means else None,
            sol_geomean_ns=geomean(ceilings.seconds(work) * 1e9 for work in works) if means and ceilings else None,
        )

    def finish(self, passed: bool, **extra) -> None:
        self.data.update(passed=passed, **extra)


def write(document: dict, exit_status: int) -> None:
    """The document on stdout, with the exit status the command is about to end with."""
    json.dump({**document, "exit_status": exit_status}, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()
