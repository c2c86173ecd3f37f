"""`--json`: one JSON document a command, on stdout, for programs that drive the harness.

Kernel-search loops read verdicts, messages, statistics, speed-of-light and the score from it
instead of parsing tables; the people's report goes to stderr meanwhile. The schema is in the
README (Machine-readable output); `SCHEMA` names its version and changes with any field that
changes meaning.
"""

from __future__ import annotations

import ast
import json
import re
import sys

from harness.results.rows import file_sha256
from harness.shared.paths import git_commit
from harness.shared.stats import geomean, score

SCHEMA = "nvfp4-harness/1"
TRACEBACK_START = "Traceback (most recent call last):"
# A frame of the runner folder's copy of the submission, wherever that folder was.
_SUBMISSION_FRAME = re.compile(r'File "([^"]*/)?submission\.py", line (\d+)')
_ERRORED = ("error", "crash", "timeout")


def stats_fields(stats) -> dict | None:
    if stats is None:
        return None
    return {"runs": stats.runs, "mean_ns": stats.mean, "std_ns": stats.std, "err_ns": stats.err,
            "best_ns": stats.best, "worst_ns": stats.worst}


def error_trace(output: str, submission) -> str | None:
    """The last traceback the worker printed, its harness and importlib frames left out and the
    submission named by the user's path, or None."""
    from harness.results.console import strip_ansi, without_hidden_frames  # console.py builds this document

    start = output.rfind(TRACEBACK_START)
    if start < 0:
        return None
    text = without_hidden_frames(strip_ansi(output[start:])).rstrip()
    return _SUBMISSION_FRAME.sub(lambda frame: f'File "{submission}", line {frame.group(2)}', text)


def raised_where(raised_at: str, submission) -> dict | None:
    """{"file", "line"} from a case's `file:line` (the worker's innermost frame of the submission's,
    else its innermost), the submission named by the user's path."""
    name, _, line = raised_at.rpartition(":")
    if not name or not line.isdigit():
        return None
    return {"file": str(submission) if name == "submission.py" else name, "line": int(line)}


def ceilings_fields(ceilings, note: str) -> dict | None:
    if ceilings is None:
        return None
    return {"peak_flops": ceilings.peak_flops, "bandwidth": ceilings.bandwidth, "source": ceilings.source, "origin": note}


# The competition's check names a mismatch `ERROR AT (i, j, l): <got> <expected>`.
MISMATCH = re.compile(r"\s*ERROR AT (\([^)]*\)): (\S+) (\S+)(?=\s|$)")


# The grouped problem's check names the group that failed by its bare index, then its reasons as
# a Python list: `mismatch found! ...: 1 ['Number of mismatched elements: 3', 'ERROR AT ...']`.
GROUP_MISMATCH = re.compile(r"(mismatch found![^:]*: )(\d+) (\[.*\])", re.DOTALL)


def _group_named(message: str) -> str:
    """A grouped check's message with its group named and its reasons as the other problems'
    checks give theirs (joined by spaces); any other message as it is."""
    found = GROUP_MISMATCH.fullmatch(message)
    if found is None:
        return message
    try:
        reasons = ast.literal_eval(found[3])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return message
    if not isinstance(reasons, list) or not all(isinstance(reason, str) for reason in reasons):
        return message
    return f"{found[1]}group {found[2]}: " + " ".join(reasons)


def labelled_mismatches(message: str) -> str:
    """The check's mismatch lines with their two numbers named, one a line, and a grouped check's
    group named: what the judge shows and the --json document's `message` (its
    `competition_message`, POPCORN_FD's lines and everything under --official keep the
    competition's text)."""
    return MISMATCH.sub(lambda found: f"\nERROR AT {found[1]}: got {found[2]}, expected {found[3]}", _group_named(message))


class RunDocument:
    """What test, benchmark, leaderboard and profile found, filled in as the run goes."""

    def __init__(self, command: str, options, cases):
        self.data = {
            "schema": SCHEMA,
            "command": command,
            "problem": options.problem.name,
            "submission": options.submission_name,
            "submission_sha256": file_sha256(options.submission),
            "commit": git_commit(),
            "device": options.device,
            "device_name": None,
            "official": options.official,  # `message` is then the competition's text, as the report's
            "cases": [{"index": index, "spec": case.spec, "shape": dict(case.args), "status": None}
                      for index, case in enumerate(cases)],
            "passed": None,
            "exit_status": None,
        }

    def case(self, index: int, result, **extra) -> None:
        entry = self.data["cases"][index]
        message = result.message if self.data["official"] or result.message is None else labelled_mismatches(result.message)
        entry.update(status=result.status, message=message, competition_message=result.message, warning=result.warning, activity=result.activity, wall_s=result.wall_s,
                     stats=stats_fields(result.stats), judged_stats=stats_fields(result.judged_stats),
                     worker_stats=stats_fields(result.worker_stats), fixed_ns=result.fixed_ns, host_ns=result.host_ns,
                     baselines={name: stats_fields(stats) for name, stats in result.baselines.items()}, **extra)
        entry["phases_s"] = dict(result.phases_s)
        if result.status in _ERRORED:
            entry["traceback"] = error_trace(result.output, self.data["submission"])
            entry["raised_at"] = raised_where(result.raised_at, self.data["submission"])
        if result.report:
            entry["profile_table"] = result.report
        if result.device_name:
            self.data["device_name"] = result.device_name

    def benchmark_summary(self, cases, results, ceilings, note: str, works: list, ranking_by: str = "geom") -> None:
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
            score_ns=score(means, ranking_by) if means else None,
            ranking_by=ranking_by,
            sol_geomean_ns=geomean(ceilings.seconds(work) * 1e9 for work in works) if means and ceilings else None,
        )

    def finish(self, passed: bool, **extra) -> None:
        """The verdict; `passed_cases` and, for a test or a profile, `score` (the fraction of the
        cases that passed), and `phases_s`, the cases' seconds per phase summed."""
        cases = self.data["cases"]
        passed_cases = sum(case["status"] == "pass" for case in cases)
        phases: dict[str, float] = {}
        for case in cases:
            for phase, seconds in (case.get("phases_s") or {}).items():
                phases[phase] = phases.get(phase, 0.0) + seconds
        self.data.update(passed=passed, passed_cases=passed_cases, phases_s=phases, **extra)
        if self.data["command"] in ("test", "profile"):
            self.data["score"] = passed_cases / len(cases) if cases else 0.0


def write(document: dict, exit_status: int) -> None:
    """The document on stdout, with the exit status the command is about to end with."""
    json.dump({**document, "exit_status": exit_status}, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()
