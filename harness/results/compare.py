"""History of benchmark runs from results/: per problem and device, the runs side by side, shape by shape.

Two sources feed it, each run labelled with its source: yours (the store, results/verdicts.sqlite,
where every benchmark or leaderboard run, one-shot or the service's, keeps its rows; or a CSV
export of it) and this kit's reference measurements (results/reference/runs.csv). A run is the
set of rows one benchmark or leaderboard command recorded (same time, commit, submission, mode,
problem and device); a run of yours also in the reference file is shown once, as reference. Times from different problems or devices are never set
against each other: each (problem, device) gets its own table, the device of your latest run's
first, and "change" is always against the previous run there of the same file (its name as the
run recorded it, else its content hash) timed the same way (`--official` or the judge's own). Rows written before runs named their problem are
nvfp4_gemm's.
"""

from __future__ import annotations

import io
import math
import os
import sys
import tempfile
from pathlib import Path

import click
import numpy
import pandas
from rich.console import Group
from rich.table import Table

from harness.judge.exits import EXIT_NO_RUNS
from harness.problems.shapes import GEMM_KEYS, Case
from harness.problems.sol import Ceilings, gemm_work
from harness.results.rows import REFERENCE_CSV, append_rows
from harness.shared.paths import short_commit
from harness.results.store import DEFAULT_PATH as STORE_PATH, Store
from harness.results.tables import Fitted, console_for
from harness.shared.stats import geomean

RUN_KEYS = ["source", "time", "commit", "submission_sha256", "mode", "problem", "device"]
GEMM = "nvfp4_gemm"
YOURS, REFERENCE = "yours", "reference"
DEFAULT_LAST_RUNS = 6
# A change is read as noise (shown without colour) within its band: NOISE_SIGMAS standard errors
# of the difference of the two means, from the two runs' own errors (each mean's err_ns); never
# narrower than the device's run-to-run noise (`DeviceHistory.noise_floor`): NOISE_FRACTION for
# event timing on a GPU, CPU_NOISE_FRACTION on a CPU, whose runs of one file scatter between runs
# far beyond each run's own error (docs/figures.md, "a CPU's runs of one file, run again"), or
# wider where the device's own repeated runs of one file scattered more.
NOISE_SIGMAS = 2.0
NOISE_FRACTION = 0.01
CPU_NOISE_FRACTION = 0.30
CPU_DEVICE = "cpu"


def shape_label(row) -> str:
    """The label the run recorded, or for an older nvfp4_gemm row, the one its sizes give."""
    if isinstance(row.get("shape"), str):
        return row["shape"]
    return Case(spec="", args={key: int(row[key]) for key in GEMM_KEYS}).label


def work_of(row) -> tuple[float, float]:
    """(flops, DRAM bytes) as the run recorded them, or for an older nvfp4_gemm row, the GEMM's."""
    if not math.isnan(float(row.get("flops", math.nan))):
        return float(row["flops"]), float(row["dram_bytes"])
    return gemm_work(*(int(row[key]) for key in GEMM_KEYS))


def stored_runs(path: Path) -> list[list[dict]]:
    """The store's runs, each its rows; none where there is no store yet."""
    if not Path(path).exists():
        return []
    store = Store(path)
    try:
        return store.runs()
    finally:
        store.close()


def runs_table(runs: list[list[dict]]) -> pandas.DataFrame:
    """The runs' rows as a table typed as their CSV export reads back (counts as integers, empty
    cells as NaN): the store and its export are compared alike."""
    rows = [row for run in runs for row in run]
    return pandas.read_csv(io.StringIO(pandas.DataFrame(rows).to_csv(index=False))) if rows else pandas.DataFrame()


def export_runs(runs: list[list[dict]], path: Path) -> Path:
    """The runs written to a CSV at `path`, replacing it, as the benchmark command appends them
    one run after another (results.append_rows): the same bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        written = Path(scratch) / path.name
        for rows in runs:
            append_rows(rows, written)
        if written.exists():
            os.replace(written, path)
    return path


def load_history(*sources: tuple[str, Path | pandas.DataFrame]) -> pandas.DataFrame:
    """All rows of the (label, CSV path or table) sources, those that exist, with `source`,
    `shape` and a chronological `run` number (0 = oldest) added. A run in two sources (yours,
    recorded into the reference file too) is kept from the last."""
    tables = [(source if isinstance(source, pandas.DataFrame) else pandas.read_csv(source)).assign(source=label)
              for label, source in sources if isinstance(source, pandas.DataFrame) or source.exists()]
    tables = [table.assign(problem=table["problem"].fillna(GEMM) if "problem" in table else GEMM)
              for table in tables if not table.empty]
    tables = [table[~_run_ids(table).isin(set().union(*map(set, map(_run_ids, tables[index + 1:]))))]
              for index, table in enumerate(tables)]
    table = pandas.concat(tables, ignore_index=True)
    table["shape"] = table.apply(shape_label, axis=1)
    table["when"] = pandas.to_datetime(table["time"], utc=True)
    runs = table.groupby(RUN_KEYS, sort=False, dropna=False)["when"].first().sort_values(kind="stable")
    order = {key: number for number, key in enumerate(runs.index)}
    table["run"] = [order[key] for key in table[RUN_KEYS].itertuples(index=False, name=None)]
    # A sweep may time one shape at several seeds; the seed then tells its rows apart.
    repeated = table.duplicated(["run", "shape"], keep=False)
    table.loc[repeated, "shape"] += " seed " + table.loc[repeated, "seed"].astype(str)
    return table.sort_values(["run"], kind="stable").reset_index(drop=True)


def file_of(row) -> str:
    """The file a run timed: its name as the run recorded it, else its content hash's prefix."""
    name = row.get("submission")
    return Path(name).name if isinstance(name, str) and name else str(row["submission_sha256"])[:8]


def is_official(row) -> bool:
    """Whether a run's figures are the competition's (`--official`) rather than the judge's own;
    rows written before runs recorded it are the judge's."""
    return str(row.get("official", "")).strip().lower() in ("true", "1", "1.0")


def _run_ids(table: pandas.DataFrame) -> pandas.Series:
    """Each row's run, whichever source holds it."""
    return table[RUN_KEYS[1:]].astype(str).agg("|".join, axis=1)


def _passed(rows: pandas.DataFrame, column: str) -> pandas.Series:
    return rows[column].where(rows["status"] == "pass") if column in rows else pandas.Series(math.nan, index=rows.index)


def noise_band(relative_error, other_relative_error, floor: float = NOISE_FRACTION):
    """The fraction within which a change between two figures is noise: NOISE_SIGMAS standard
    errors of their difference, from each figure's relative standard error; `floor` at least (and
    where an error is unknown). Numbers or tables of them alike."""
    return numpy.fmax(NOISE_SIGMAS * numpy.hypot(relative_error, other_relative_error), floor)


def repeat_scatter(mean: pandas.DataFrame, repeats: list[list]) -> float:
    """The relative standard deviation of a shape's mean between runs of the very same file, kit
    and timing (each list of `repeats` is such a set of runs, columns of `mean`), pooled over
    shapes and sets; NaN where nothing ran twice. Their differences are noise by construction."""
    squares, freedom = 0.0, 0
    for runs in repeats:
        logs = numpy.log(mean[runs])
        counts = logs.notna().sum(axis=1)
        squares += float((logs.sub(logs.mean(axis=1), axis=0) ** 2).sum().sum())
        freedom += int((counts - 1).clip(lower=0).sum())
    return math.sqrt(squares / freedom) if freedom else math.nan


def device_noise_fraction(device: str) -> float:
    """The run-to-run noise of a device's timing before any of its runs are seen."""
    return CPU_NOISE_FRACTION if device == CPU_DEVICE else NOISE_FRACTION


def _in_previous_run(values: pandas.DataFrame, mean: pandas.DataFrame) -> pandas.DataFrame:
    """Each shape's value in the previous run (column) that measured its mean: the alignment of a
    change and of its band."""
    return values.where(mean.notna()).ffill(axis=1).shift(1, axis=1)


class DeviceHistory:
    """One problem's runs on one device: mean and % SOL per (shape, run), and each mean's change
    against the same shape's mean in the previous run there of the same file that measured it,
    with the band within which that change is noise (`noise_band` of the two means' errors, at
    least the device's `noise_floor`)."""

    def __init__(self, rows: pandas.DataFrame, last: int | None = None):
        self.device = rows["device"].iloc[0]
        self.problem = rows["problem"].iloc[0]
        self.rows = rows
        all_runs = sorted(rows["run"].unique())
        self.shapes = list(dict.fromkeys(rows["shape"]))  # the order the runs measured them in
        indexed = rows.assign(passed_mean=_passed(rows, "mean_ns"), passed_err=_passed(rows, "err_ns")).set_index(["shape", "run"])

        def grid(column):
            return indexed[column].unstack("run").reindex(index=self.shapes, columns=all_runs)

        self.mean, self.pct_sol, self.status = grid("passed_mean"), grid("pct_sol"), grid("status")
        self.relative_error = grid("passed_err") / self.mean
        self.file = {run: file_of(self.run_info(run)) for run in all_runs}
        # What a run's figures are compared with: the same file's earlier runs timed the same way.
        self._compared_as = {run: (self.file[run], is_official(self.run_info(run))) for run in all_runs}
        # Changes over the whole history, so the oldest run shown still has its predecessor.
        per_file = self._runs_per_file(all_runs)
        self.repeat_scatter = repeat_scatter(self.mean, self._repeats(all_runs))
        self.noise_floor = float(numpy.fmax(device_noise_fraction(self.device),
                                            NOISE_SIGMAS * math.sqrt(2) * self.repeat_scatter))
        self.change = pandas.concat([self._changes(self.mean[runs]) for runs in per_file], axis=1).reindex(columns=all_runs)
        self.band = pandas.concat([self._bands(self.mean[runs], self.relative_error[runs], self.noise_floor)
                                   for runs in per_file], axis=1).reindex(columns=all_runs)
        self.runs = all_runs
        self.score, self.score_change, self.score_band = self._scores()
        if last is not None:
            self.runs = all_runs[-last:]
            self.shapes = [shape for shape in self.shapes if self.status.loc[shape, self.runs].notna().any()]
            self.mean, self.pct_sol, self.status, self.change, self.band = (
                frame.loc[self.shapes, self.runs] for frame in (self.mean, self.pct_sol, self.status, self.change, self.band)
            )

    def _runs_per_file(self, runs) -> list[list]:
        by_file: dict[tuple, list] = {}
        for run in runs:
            by_file.setdefault(self._compared_as[run], []).append(run)
        return list(by_file.values())

    def _repeats(self, runs) -> list[list]:
        """Sets of runs of the very same file (its content) by the same kit, timed the same way. A
        kit is the same only at a clean commit: a dirty one's timing may have changed in between."""
        by_content: dict[tuple, list] = {}
        for run in runs:
            info = self.run_info(run)
            if str(info["commit"]).endswith("-dirty"):
                continue
            by_content.setdefault((info["submission_sha256"], str(info["commit"]), is_official(info)), []).append(run)
        return [runs for runs in by_content.values() if len(runs) > 1]

    @staticmethod
    def _changes(mean: pandas.DataFrame) -> pandas.DataFrame:
        """Each mean against the same shape's in the previous run (column) that measured it."""
        return mean / _in_previous_run(mean, mean) - 1

    @staticmethod
    def _bands(mean: pandas.DataFrame, relative_error: pandas.DataFrame, floor: float = NOISE_FRACTION) -> pandas.DataFrame:
        """Each change's noise band, from the relative errors of the two means `_changes` sets
        against each other, `floor` at least (NaN where there is no change)."""
        had_one = _in_previous_run(mean, mean).notna() & mean.notna()
        return noise_band(relative_error, _in_previous_run(relative_error, mean), floor).where(had_one)

    def _scores(self) -> tuple[dict, dict, dict]:
        """Geomean of the means for runs where every shape passed; its change only against the
        same file's previous scored run over the very same shapes (other sets are not comparable),
        and that change's noise band (a geomean's relative error: its shapes' in quadrature over
        their count)."""
        score, change, band, previous = {}, {}, {}, {}
        for run in self.runs:
            measured = self.mean[run].dropna()
            ran = self.status[run].dropna()
            if measured.empty or len(measured) != len(ran):
                continue
            score[run] = geomean(measured.tolist())
            shapes = tuple(measured.index)
            error = math.sqrt((self.relative_error[run].loc[list(shapes)] ** 2).sum(skipna=False)) / len(shapes)
            before = previous.get(self._compared_as[run])
            if before is not None and before[0] == shapes:
                change[run] = score[run] / before[1] - 1
                band[run] = float(noise_band(error, before[2], self.noise_floor))
            previous[self._compared_as[run]] = (shapes, score[run], error)
        return score, change, band

    def run_info(self, run) -> pandas.Series:
        return self.rows[self.rows["run"] == run].iloc[0]

    def run_label(self, run, separator: str = "\n") -> str:
        info = self.run_info(run)
        when = pandas.Timestamp(info["when"]).strftime("%m-%d %H:%M")
        parts = [f"#{run} {info['source']}", when, short_commit(info["commit"]),
                 info["mode"] + (" --official" if is_official(info) else ""),
                 f"{self.file[run]} {str(info['submission_sha256'])[:8]}"]
        return separator.join(parts)


def histories(table: pandas.DataFrame, last: int | None = None) -> list[DeviceHistory]:
    """A history per (problem, device): those of the device of your latest run first (the
    problem of that run the very first), then in the order the runs came."""
    found = [DeviceHistory(rows, last) for _, rows in table.groupby(["problem", "device"], sort=False)]
    yours = table[table["source"] == YOURS]
    if yours.empty:
        return found
    latest = yours.loc[yours["run"].idxmax()]
    return sorted(found, key=lambda history: (history.device != latest["device"], history.problem != latest["problem"]))


def _change_text(change: float, band: float) -> str:
    """A change in per cent: dim with its band (`±`) where it is within it, green or red beyond it."""
    if change is None or math.isnan(change):
        return ""
    text = f"{100 * change:+.1f}%"
    if abs(change) <= band:
        return f"[dim]{text} ±{100 * band:.0f}%[/dim]" if band > NOISE_FRACTION else f"[dim]{text}[/dim]"
    return f"[green]{text}[/green]" if change < 0 else f"[red]{text}[/red]"


def _cell(history: DeviceHistory, pct_sol: pandas.DataFrame, shape: str, run) -> str:
    status = history.status.at[shape, run]
    if isinstance(status, float) and math.isnan(status):
        return "[dim]-[/dim]"
    if status != "pass":
        return f"[bold red]{status}[/bold red]"
    mean = history.mean.at[shape, run]
    pct = pct_sol.at[shape, run]
    lines = [f"{mean / 1e3:.3f} µs", f"{pct:.1f}% SOL" if not math.isnan(pct) else "[dim]no SOL[/dim]"]
    change = _change_text(history.change.at[shape, run], history.band.at[shape, run])
    return "\n".join(lines + ([change] if change else []))


def history_table(history: DeviceHistory) -> Group:
    """The runs side by side, every run's % SOL against the same ceilings as the plot's
    (`common_ceilings`), so that a figure changes only where the time did; a line under it says
    which. A terminal too narrow for every run leaves out whole runs (the reference ones first,
    the oldest first) and names them; no cell is cut."""
    ceilings = common_ceilings(history)
    pct_sol = pct_sol_at(history, ceilings) if ceilings is not None else history.pct_sol
    table = Table(title=f"{history.problem} on {history.device}", title_justify="left", show_lines=True)
    table.add_column("shape", style="bold", no_wrap=True)
    for run in history.runs:
        table.add_column(history.run_label(run), justify="right", no_wrap=True)
    for shape in history.shapes:
        table.add_row(shape, *(_cell(history, pct_sol, shape, run) for run in history.runs))
    scores = []
    for run in history.runs:
        if run not in history.score:
            scores.append("[dim]-[/dim]")
            continue
        change = _change_text(history.score_change.get(run, math.nan), history.score_band.get(run, NOISE_FRACTION))
        scores.append(f"{history.score[run] / 1e3:.3f} µs" + (f"\n{change}" if change else ""))
    table.add_row("geomean", *scores)
    # Left out first: the reference runs, then yours, each oldest first.
    runs = {run: column.header for run, column in zip(history.runs, table.columns[1:])}
    left_out_first = sorted(runs, key=lambda run: (history.run_info(run)["source"] == YOURS, run))[:-1]
    fitted = Fitted(table, [runs[run] for run in left_out_first])
    captions = ([ceilings_caption(ceilings)] if ceilings is not None else []) + (
        [noise_caption(history)] if history.noise_floor > NOISE_FRACTION else [])
    return Group(fitted, *(f"[dim italic]{caption}[/]" for caption in captions))


def noise_caption(history: DeviceHistory) -> str:
    """Why a panel's changes need more than its runs' own errors to count: the device's noise."""
    why = (f"this device's repeated runs of one file scatter by {100 * history.repeat_scatter:.0f}% between runs"
           if history.noise_floor > device_noise_fraction(history.device)
           else "a CPU's runs of one file scatter that far between runs (docs/figures.md)")
    return f"a change within ±{100 * history.noise_floor:.0f}% is noise here: {why}"


def common_ceilings(history: DeviceHistory) -> Ceilings | None:
    """The ceilings every shown run of a panel is set against, in the table and the plot alike:
    the latest shown run's that recorded any, each raised to the highest rate a shown run reached
    above it (sol.Ceilings.held_by, as the benchmark command does), so that a bar or a figure
    changes only where the time did and none is above 100 % (runs may have recorded other ceilings)."""
    recorded = history.rows[history.rows["run"].isin(history.runs) & history.rows["peak_flops"].notna()
                            & history.rows["bandwidth"].notna()]
    if recorded.empty:
        return None
    latest = recorded[recorded["run"] == recorded["run"].max()].iloc[0]
    ceilings = Ceilings(history.device, float(latest["peak_flops"]), float(latest["bandwidth"]),
                        f"run #{latest['run']}'s recorded ceilings ({latest['ceilings']})")
    works = _works(history)
    reached = [(f"{shape} in run #{run}", works[shape], history.mean.at[shape, run] / 1e9)
               for shape in history.shapes for run in history.runs if not math.isnan(history.mean.at[shape, run])]
    return ceilings.held_by(reached)


def ceilings_caption(ceilings: Ceilings) -> str:
    """What every % SOL of a panel is set against, as the table's caption and in the plot's title."""
    return f"% SOL of every run at {ceilings.peak_flops / 1e12:.0f} TFLOP/s and {ceilings.bandwidth / 1e12:.2f} TB/s: {ceilings.source}"


def _works(history: DeviceHistory) -> dict[str, tuple[float, float]]:
    return {shape: work_of(row) for shape, row in history.rows.drop_duplicates("shape").set_index("shape").iterrows()}


def pct_sol_at(history: DeviceHistory, ceilings: Ceilings) -> pandas.DataFrame:
    """% of SOL per (shape, run) against one set of ceilings: SOL at `ceilings` over each mean."""
    works = _works(history)
    sol_ns = pandas.Series({shape: ceilings.seconds(works[shape]) * 1e9 for shape in history.shapes})
    return history.mean.rdiv(sol_ns, axis=0) * 100.0


def time_label(mean_ns: float) -> str:
    """A bar's label: its mean in µs, to three significant digits up to 1000 µs, whole µs above."""
    if math.isnan(mean_ns):
        return ""
    microseconds = mean_ns / 1e3
    decimals = 0 if microseconds >= 100 else 1 if microseconds >= 10 else 2
    return f"{microseconds:,.{decimals}f} µs"


def not_plotted_note(skipped: list[str]) -> str:
    """The panels a plot leaves out and why, in the picture and on the terminal alike."""
    return f"not plotted (no speed-of-light ceilings recorded, as on a CPU): {', '.join(skipped)}"


def plot_histories(shown: list[DeviceHistory], path: Path) -> list[str]:
    """% of SOL per shape, one bar per run, one panel per problem and device, every bar of a panel
    against the same ceilings (its latest run's) and labelled with its mean. Returns the panels
    left out (no ceilings: a CPU), which a line under the panels names too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(history, common_ceilings(history)) for history in shown if history.mean.notna().any().any()]
    plotted = [(history, ceilings) for history, ceilings in panels if ceilings is not None]
    skipped = [f"{history.problem} on {history.device}" for history in shown if history not in [h for h, _ in plotted]]
    if not plotted:
        return skipped
    figure, axes = plt.subplots(
        len(plotted), 1, figsize=(max(11.0, 1.8 * max(len(h.shapes) for h, _ in plotted) + 6), 5.0 * len(plotted)),
        squeeze=False,
    )
    for axis, (history, ceilings) in zip(axes[:, 0], plotted):
        pct = pct_sol_at(history, ceilings)
        width = 0.8 / len(history.runs)
        for slot, run in enumerate(history.runs):
            passed = history.status[run] == "pass"
            values = pct[run].where(passed)
            positions = [i - 0.4 + width * (slot + 0.5) for i in range(len(history.shapes))]
            bars = axis.bar(positions, values.fillna(0).tolist(), width, label=history.run_label(run, "  "))
            axis.bar_label(bars, labels=[time_label(mean) for mean in history.mean[run].where(passed)],
                           fontsize=7, padding=2, rotation=90 if len(history.runs) > 3 else 0)
            for position, status in zip(positions, history.status[run]):
                if isinstance(status, str) and status != "pass":
                    axis.text(position, 0, f" {status}", rotation=90, ha="center", va="bottom", fontsize=8, color="firebrick")
        axis.set_title(f"{history.problem} on {history.device}: {ceilings_caption(ceilings)}; bar labels: mean per call",
                       fontsize=9, wrap=True)
        axis.set_xticks(range(len(history.shapes)), history.shapes, rotation=20, ha="right", rotation_mode="anchor")
        axis.set_ylabel("% of SOL (higher is faster)")
        axis.margins(y=0.25)
        axis.grid(axis="y", alpha=0.3)
        axis.set_axisbelow(True)
        axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="run  time (UTC)  commit  mode submission", title_fontsize=7)
    if skipped:
        figure.text(0.01, 0.0, f"{not_plotted_note(skipped)}; `make compare` lists their times", ha="left", va="top",
                    fontsize=9, color="dimgray")
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return skipped


@click.command("compare")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), default=STORE_PATH,
              show_default="results/verdicts.sqlite", help="Your runs: the store the benchmark and leaderboard commands keep them in.")
@click.option("--results", "results_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Read your runs from this CSV export (results/runs.csv, one from another machine) instead of the store.")
@click.option("--export", "export_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write every run of the store to this CSV (results/runs.csv's columns), replacing it, and show nothing.")
@click.option("--reference", "reference_path", type=click.Path(dir_okay=False, path_type=Path), default=REFERENCE_CSV,
              show_default="results/reference/runs.csv", help="This kit's reference measurements, shown beside yours.")
@click.option("--no-reference", is_flag=True, help="Only your runs.")
@click.option("--device", "device_filter", default=None, help="Only devices whose name contains this text.")
@click.option("--mode", type=click.Choice(["benchmark", "leaderboard"]), default=None, help="Only runs of this mode.")
@click.option("--problem", "problem_filter", default=None, help="Only runs of this problem (each problem is shown apart).")
@click.option("--last", "last_runs", type=click.IntRange(min=1), default=DEFAULT_LAST_RUNS, show_default=True,
              help="Runs shown per device (changes still count the older ones).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw % of SOL per shape and run into this PNG.")
def compare_command(store_path: Path, results_path: Path | None, export_path: Path | None, reference_path: Path,
                    no_reference: bool, device_filter: str | None, mode: str | None, problem_filter: str | None,
                    last_runs: int, plot_path: Path | None) -> None:
    """Runs side by side per problem and device, yours and the reference ones: mean, % SOL, change against the same file's previous run there."""
    console = console_for()
    runs = stored_runs(store_path) if results_path is None else []
    if export_path:
        if not runs:
            console.print(f"no runs in {store_path} to export")
            sys.exit(EXIT_NO_RUNS)
        export_runs(runs, export_path)
        console.print(f"wrote {len(runs)} runs ({sum(map(len, runs))} rows) from {store_path} to {export_path}")
        return
    yours_from = results_path or store_path
    yours = results_path if results_path is not None else runs_table(runs)
    sources = [(YOURS, yours)] + ([] if no_reference else [(REFERENCE, reference_path)])
    if not (results_path.exists() if results_path is not None else runs):
        console.print(f"no runs of yours in {yours_from} yet: `make bench` records one there")
        if not (reference_path.exists() and not no_reference):
            sys.exit(EXIT_NO_RUNS)
    table = load_history(*sources)
    if mode:
        table = table[table["mode"] == mode]
    if device_filter:
        table = table[table["device"].str.contains(device_filter, case=False, regex=False)]
    if problem_filter:
        table = table[table["problem"] == problem_filter]
    if table.empty:
        console.print("no runs match the filters")
        sys.exit(EXIT_NO_RUNS)
    shown = histories(table, last_runs)
    for history in shown:
        console.print(history_table(history))
    console.print(
        f"[dim]runs headed `yours` are from {yours_from}, `reference` from {reference_path}; "
        "each cell: mean per call, % of SOL, change of the mean against the previous run of the same file "
        "on the same device (green faster, red slower, dim within noise: two standard errors of the difference from the two runs' own errors, "
        "at least the device's run-to-run noise, 1% on a GPU, shown as ±band where wider); % SOL: against the ceilings named under "
        "each table; geomean: the ranking score, over runs where every shape passed[/dim]"
    )
    if plot_path:
        skipped = plot_histories(shown, plot_path)
        if skipped:
            console.print(not_plotted_note(skipped))
        if len(skipped) < len(shown):
            console.print(f"plot written to {plot_path}")
