"""results/: one CSV row per benchmarked shape and run, appended through pandas.

A user's own runs go to results/runs.csv, which git ignores: recording one leaves the tree
clean. This kit's reference measurements, the figures its README relies on, live apart in
results/reference/runs.csv (tracked), written with `--results results/reference/runs.csv`.
"""

import datetime
import hashlib
from pathlib import Path

from harness.shared.paths import RESULTS_DIR, git_commit

RESULTS_CSV = RESULTS_DIR / "runs.csv"
REFERENCE_CSV = RESULTS_DIR / "reference" / "runs.csv"


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _size_column(value) -> int | str:
    """A case's size as a CSV cell: an integer, or a grouped size's list as `80 176 128`."""
    return value if isinstance(value, int) else " ".join(map(str, value))


def rows_for_run(cases, results, works: list, mode: str, submission: Path, ceilings, ceilings_note: str, floor, problem,
                 official: bool = False) -> list[dict]:
    """One row per case; stats are empty for a case that did not pass. Each row names its problem
    and carries its case's work (flops, DRAM bytes), so that `compare` can keep problems apart
    and judge % SOL without the problem's definition. `works`: each case's (flops, DRAM bytes),
    as the run computed them (RunRecord.works)."""
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    common = {
        "time": stamp,
        "commit": git_commit(),
        "submission": str(submission),
        "submission_sha256": file_sha256(submission),
        "mode": mode,
        "official": official,  # the competition's figures (--official), set apart from the judge's own by `compare`
        "problem": problem.name,
        "ceilings": ceilings_note if ceilings else "",
        "peak_flops": ceilings.peak_flops if ceilings else None,
        "bandwidth": ceilings.bandwidth if ceilings else None,
    }
    rows = []
    for case, result, work in zip(cases, results, works, strict=True):
        row = {**common, "device": result.device_name, "shape": case.label,
               **{key: _size_column(value) for key, value in case.args.items()}, "status": result.status,
               "flops": work[0] if work else None, "dram_bytes": work[1] if work else None}
        if result.passed:
            s = result.stats
            sol_ns = ceilings.seconds(work) * 1e9 if ceilings and work else None
            row.update(runs=s.runs, mean_ns=s.mean, std_ns=s.std, err_ns=s.err, best_ns=s.best, worst_ns=s.worst, host_ns=result.host_ns)
            row.update(sol_ns=sol_ns, pct_sol=100 * sol_ns / s.mean if sol_ns else None)
            if result.baselines:
                row.update(
                    cublas_bf16_ns=result.baselines["cublas_bf16"].mean,
                    torch_dequant_matmul_ns=result.baselines["torch_dequant_matmul"].mean,
                    exact_floor_ns=floor.seconds(work) * 1e9 if floor and work else None,
                )
                if "empty_cutedsl_call_host" in result.baselines:
                    row.update(empty_cutedsl_call_host_ns=result.baselines["empty_cutedsl_call_host"].mean)
        rows.append(row)
    return rows


def append_rows(rows: list[dict], path: Path = RESULTS_CSV) -> Path:
    """Append to the CSV; columns new to this run are added, older rows keep them empty.

    Earlier rows are never re-serialized: read back as text, they are written out exactly as
    they were (a round trip through floats would rewrite their digits and turn counts into
    "3.0"), and only the header changes when a column is new.
    """
    import pandas  # here, not at import: the compile check's minimal environment has none

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    new = pandas.DataFrame(rows)
    if not path.exists() or path.stat().st_size == 0:  # an empty file (truncated, or made by hand) starts anew
        new.to_csv(path, index=False)
        return path
    old = pandas.read_csv(path, dtype=str, keep_default_na=False)
    columns = list(old.columns) + [column for column in new.columns if column not in old.columns]
    if columns == list(old.columns):
        new.reindex(columns=columns).to_csv(path, mode="a", header=False, index=False)
    else:
        text = old.reindex(columns=columns, fill_value="").to_csv(index=False)
        path.write_text(text + new.reindex(columns=columns).to_csv(index=False, header=False))
    return path
