"""`--json`: one JSON document a command, on stdout, for programs that drive the harness.

Kernel-search loops read verdicts, messages, statistics, speed-of-light and the score from it
instead of parsing tables; the people's report goes to stderr meanwhile. A run's document is made
from its record once the run is over (`run_document`); the store keeps the same document. The
schema is in docs/output-formats.md; `SCHEMA` names its version and changes with any field that
changes meaning.
"""

from __future__ import annotations

import json
import re
import sys

from harness.results.rows import file_sha256
from harness.results.worker_text import labelled_mismatches, strip_ansi, without_hidden_frames
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


def run_document(record) -> dict:
    """What a test, benchmark, leaderboard or profile run found (its harness.judge.record.RunRecord)."""
    options = record.options
    data = {
        "schema": SCHEMA,
        "command": record.mode,
        "problem": options.problem.name,
        "submission": options.submission_name,
        "submission_sha256": file_sha256(options.submission),
        "commit": git_commit(),
        "device": options.device,
        "device_name": None,
        "official": options.official,  # `message` is then the competition's text, as the report's
        "cases": [{"index": index, "spec": case.spec, "shape": dict(case.args), "status": None}
                  for index, case in enumerate(record.cases)],
        "passed": None,
        "exit_status": record.exit_status,
    }
    if options.precheck is not None:
        data["precheck"] = options.precheck.fields()
    if record.sandbox is not None:
        data["sandbox"] = record.sandbox
    for index, result in enumerate(record.results):
        _case(data, index, result)
    if record.eval_stopped is not None:
        _finish(data, False, eval_stopped=record.eval_stopped.message)
        return data
    if record.refused:
        _finish(data, False, refused=f"{options.precheck.refusal} (--strict)")
    else:
        if record.mode in ("benchmark", "leaderboard"):
            _benchmark_summary(data, record.results, record.ceilings, record.ceilings_note, record.works,
                               options.problem.ranking_by)
        _finish(data, record.passed)
    data["stop_reason"] = record.stop_reason or None
    return data


def _case(data: dict, index: int, result) -> None:
    entry = data["cases"][index]
    message = result.message if data["official"] or result.message is None else labelled_mismatches(result.message)
    entry.update(status=result.status, message=message, competition_message=result.message, warning=result.warning, activity=result.activity, wall_s=result.wall_s,
                 stats=stats_fields(result.stats), judged_stats=stats_fields(result.judged_stats),
                 worker_stats=stats_fields(result.worker_stats), fixed_ns=result.fixed_ns, host_ns=result.host_ns,
                 baselines={name: stats_fields(stats) for name, stats in result.baselines.items()})
    entry["phases_s"] = dict(result.phases_s)
    if result.status in _ERRORED:
        entry["traceback"] = error_trace(result.output, data["submission"])
        entry["raised_at"] = raised_where(result.raised_at, data["submission"])
    if result.report:
        entry["profile_table"] = result.report
    if result.device_name:
        data["device_name"] = result.device_name


def _benchmark_summary(data: dict, results, ceilings, note: str, works: list, ranking_by: str) -> None:
    """`works`: each case's (flops, DRAM bytes), or None where its problem has no SOL."""
    if None in works:
        ceilings = None
    for index, (result, work) in enumerate(zip(results, works)):
        if result.passed and ceilings is not None:
            sol_ns = ceilings.seconds(work) * 1e9
            data["cases"][index].update(sol_ns=sol_ns, pct_sol=100 * sol_ns / result.stats.mean,
                                        bound=ceilings.bound_of(work))
    passed = all(result.passed for result in results)
    means = [result.stats.mean for result in results] if passed else []
    data.update(
        ceilings=ceilings_fields(ceilings, note),
        score_ns=score(means, ranking_by) if means else None,
        ranking_by=ranking_by,
        sol_geomean_ns=geomean(ceilings.seconds(work) * 1e9 for work in works) if means and ceilings else None,
    )


def _finish(data: dict, passed: bool, **extra) -> None:
    """The verdict; `passed_cases` and, for a test or a profile, `score` (the fraction of the
    cases that passed), and `phases_s`, the cases' seconds per phase summed."""
    cases = data["cases"]
    passed_cases = sum(case["status"] == "pass" for case in cases)
    phases: dict[str, float] = {}
    for case in cases:
        for phase, seconds in (case.get("phases_s") or {}).items():
            phases[phase] = phases.get(phase, 0.0) + seconds
    data.update(passed=passed, passed_cases=passed_cases, phases_s=phases, **extra)
    if data["command"] in ("test", "profile"):
        data["score"] = passed_cases / len(cases) if cases else 0.0


def write(document: dict, exit_status: int) -> None:
    """The document on stdout, with the exit status the command is about to end with."""
    json.dump({**document, "exit_status": exit_status}, sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()
