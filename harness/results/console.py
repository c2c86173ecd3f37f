"""What people read of a run: progress as it goes, failure panels, tables and the verdict."""

import contextlib
import dataclasses
import sys
import textwrap
import time

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.judge.jobs import ERROR, NOT_RUN
from harness.judge.record import RunListener, RunRecord
from harness.results.tables import Fitted, console_for
from harness.results.worker_text import as_the_user_wrote_it, labelled_mismatches, visible_boundaries
from harness.shared.stats import RANKINGS
from harness.shared.stats import score as score_of


LOG_EVERY_S = 10.0
STATUS_STYLE = {"pass": "green", "fail": "red", "error": "red", "crash": "red", "timeout": "yellow", "not run": "dim"}


def us(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e3:.3f}"




@dataclasses.dataclass(frozen=True)
class Columns:
    """A table's headers in order, those left-aligned, and those a narrow terminal leaves out, in
    the order it does (the shape and the time are never left out)."""
    headers: tuple[str, ...]
    left: tuple[str, ...]
    left_out_first: tuple[str, ...]


BENCHMARK_COLUMNS = Columns(
    headers=("shape", "runs", "mean µs", "± err", "best", "worst", "host µs/call", "SOL µs", "% SOL", "bound"),
    left=("shape", "bound"),
    left_out_first=("host µs/call", "worst", "best", "bound", "SOL µs", "runs", "± err"),
)
# The bold last row of the table, by task.yml's `ranking_by` (harness/shared/stats.py's RANKINGS).
SCORE_ROW_LABELS = {"geom": "geomean", "mean": "mean", "last": "last"}
BASELINE_COLUMNS = Columns(
    headers=("shape", "submission µs", "cuBLAS bf16 µs", "torch dequant+mm µs", "exact-path floor µs", "sub / cuBLAS",
             "sub / floor", "host µs/call", "empty-call host µs"),
    left=("shape",),
    left_out_first=("empty-call host µs", "host µs/call", "torch dequant+mm µs", "exact-path floor µs", "sub / floor"),
)


def _measured(header: str, rows: list[tuple[dict, str | None]]) -> bool:
    """Whether a column holds a figure: not one where every row says `-`, nothing measured (the
    speed-of-light's columns on a CPU), which would take the room of measured ones."""
    cells = [cells.get(header, "") for cells, _ in rows]
    return "-" not in cells or any(cell not in ("", "-") for cell in cells)


def _table(title: str, columns: Columns, rows: list[tuple[dict, str | None]]) -> Fitted:
    # No cell wraps: a number or a shape is read whole or not shown (tables.Fitted).
    table = Table(title=title, title_justify="left")
    headers = [header for header in columns.headers if _measured(header, rows)]
    for header in headers:
        table.add_column(header, justify="left" if header in columns.left else "right", no_wrap=True, overflow="fold")
    for cells, style in rows:
        table.add_row(*(cells.get(header, "") for header in headers), style=style)
    return Fitted(table, columns.left_out_first, shown_by="a wider terminal, a pipe or --json")


class Reporter(RunListener):
    """What people read of a run, printed as it goes: its header, each case's line (or panel) as
    it is judged, and once it ends the tables and the verdict, made from its record."""

    def __init__(self, console: Console | None = None, stream=None):
        """`stream`: where people read the report (stdout unless the command line picks the one
        its --json document and POPCORN lines leave free); `console`: one made already, which it
        is on."""
        stream = stream or sys.stdout
        if console is None and hasattr(stream, "reconfigure"):
            # A worker's text may hold a lone surrogate (a str crosses the wire whole), which no
            # encoding writes: shown escaped, never raised on.
            stream.reconfigure(errors="backslashreplace")
        self.console = console or console_for(stream)
        self._record: RunRecord | None = None
        self._last_error: tuple[str, str] | None = None  # (which case, its message): the error panel shown last
        self._not_run_reason = ""

    # -- as the run goes ---------------------------------------------------------------------
    @contextlib.contextmanager
    def case_progress(self, label: str):
        """A spinner on a terminal; elsewhere (a pipe, a log) a line per phase of the case, and
        one every LOG_EVERY_S while a phase goes on (timing rounds)."""
        if not self.console.is_terminal:
            last = {"phase": None, "at": 0.0}

            def log_progress(text):
                if not text:
                    return
                phase, now = text.split(",")[0], time.monotonic()
                if phase != last["phase"] or now - last["at"] >= LOG_EVERY_S:
                    last.update(phase=phase, at=now)
                    self.console.print(f"  {escape(label)}: {escape(text)}", style="dim")

            yield log_progress
            return
        progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=self.console, transient=True)
        task = progress.add_task(label)

        def on_progress(text):
            if text:
                progress.update(task, description=f"{label} [dim]{escape(text)}[/dim]")

        with progress:
            yield on_progress

    def run_started(self, record: RunRecord) -> None:
        self._record = record
        options, what = record.options, record.mode
        self._precheck(options)
        if options.runs_the_folders_eval:
            rules = f"the folder's own {options.problem.eval_main}, run whole in a worker's sandbox"
        elif options.official:
            rules = "competition verdicts only, one shared worker"
        elif what == "profile":
            rules = "all verdicts, one process per case"
        else:
            rules = "all verdicts, a worker reused while its cases pass"
        cases = record.cases
        self.console.print(f"[bold]{what}[/bold] {escape(options.submission_name)} for {escape(options.problem.name)} on {options.device} "
                           f"({len(cases)} case{'s' if len(cases) != 1 else ''}, {rules})")

    def warning(self, text: str) -> None:
        self.console.print(f"[yellow]warning[/yellow]: {escape(text)}")

    def ceilings_measured(self, result) -> None:
        if result.passed:
            measured = result.ceilings
            self.console.print(f"measured ceilings on {result.device_name}: {measured['bandwidth'] / 1e12:.2f} TB/s copy, {measured['peak_flops'] / 1e12:.0f} TFLOP/s bf16")
        else:
            self._show_failure("measuring ceilings", result)

    def case_judged(self, index: int, case, result) -> None:
        mode = self._record.mode
        if mode == "test":
            self._test_line(index, case, result)
        elif mode == "profile":
            self._profile_result(index, case, result)
        else:
            self._benchmark_line(index, case, result)

    def run_ended(self, record: RunRecord) -> None:
        if record.eval_stopped is not None:
            self._eval_stopped(record.eval_stopped)
        elif record.refused:
            self._verdict(record, f"refused before any case: {escape(record.options.precheck.refusal)} (--strict)")
        elif record.mode == "test":
            self._end_tests(record)
        elif record.mode == "profile":
            self._verdict(record, "profiled" if record.passed else "a case failed")
        else:
            self._end_benchmarks(record)

    # -- what the run's lines are made of ----------------------------------------------------
    def _readable(self, text: str) -> str:
        return escape(as_the_user_wrote_it(text, self._record.runner_copies, self._record.options.submission_name))

    def _show_failure(self, title: str, result) -> None:
        """A panel on a terminal; piped, the title and the text as lines of their own, whole, so
        that no box folds a long line (a path, a number) or cuts the title."""
        message = result.message or result.status
        body = self._readable(message if self._record.options.official else labelled_mismatches(message))
        if result.output.strip():
            body += "\n[dim]--- worker output ---[/dim]\n" + self._readable(result.output.rstrip())
        style = STATUS_STYLE.get(result.status, "red")
        if self.console.is_terminal:
            self.console.print(Panel(body, title=escape(title), border_style=style))
        else:
            # Indented, each line whole: no line of the worker's text starts where the judge's own
            # lines (a case's verdict, `check:`) do.
            self.console.print(f"[{style}]--- {escape(title)} ---[/{style}]")
            self.console.print(textwrap.indent(body, "    ", lambda line: True), soft_wrap=True)

    def _show_case_failure(self, what: str, case, result) -> None:
        """A failed case's panel; the first case not run gives the reason in a line, the rest
        nothing, and an error the case before raised already is named, not shown again."""
        if result.status == NOT_RUN:
            if result.message != self._not_run_reason:
                self._not_run_reason = result.message
                self.console.print(f"  [dim]{escape(what)} and those after it: {escape(result.message)}[/dim]")
            return
        if result.status == ERROR and self._last_error and self._last_error[1] == result.message:
            self.console.print(f"  [dim]{escape(what)}: the same error as {escape(self._last_error[0])}[/dim]")
            return
        self._show_failure(f"{what} {case.spec}: {result.status}", result)
        self._last_error = (what, result.message) if result.status == ERROR else None

    def _precheck(self, options) -> None:
        found = options.precheck
        if found is None:
            return
        if not found.available:
            self.console.print("[yellow]kernelguard is not installed[/yellow]: no static hack detection before this run")
        if found.unfinished:
            self.console.print(f"[{'bold red' if options.strict else 'yellow'}]kernelguard {escape(found.unfinished)}[/]: "
                               "no static hack detection for this file")
        for hit in found.hits:
            self.console.print(f"[{'bold red' if options.strict else 'yellow'}]kernelguard {found.classification}[/]: {escape(str(hit))}")

    def _warn(self, result) -> None:
        if result.warning:
            self.console.print(f"  [yellow]warning[/yellow]: {escape(visible_boundaries(result.warning))}")

    def _eval_stopped(self, result) -> None:
        """--official: what the submission raised is not an OpError, which the competition's eval
        does not catch: it stops there with a traceback and logs no verdict."""
        self._show_failure("the competition's eval stops here", result)
        if self._record.options.runs_the_folders_eval:
            self.console.print("[bold red]eval stopped[/bold red]: the folder's eval ended there and logged no `check` line")
        else:
            self.console.print("[bold red]eval stopped[/bold red]: the competition's eval catches only CuTeDSL's OpError; "
                               "it would end with this traceback and log no `check` line")

    def _verdict(self, record: RunRecord, summary: str) -> None:
        style = "bold green" if record.passed else "bold red"
        self.console.print(f"[{style}]check: {'pass' if record.passed else 'fail'}[/{style}] {summary}")
        for line in _instead(record):
            self.console.print(line, soft_wrap=True)

    # -- test --------------------------------------------------------------------------------
    def _test_line(self, index: int, case, result) -> None:
        if not result.passed:
            self._show_case_failure(f"test {index}", case, result)
        style = STATUS_STYLE.get(result.status, "red")
        self.console.print(f"  test {index:2d} {case.label:>18}  [{style}]{result.status:7}[/{style}] {result.wall_s:6.1f} s")
        self._warn(result)

    def _end_tests(self, record: RunRecord) -> None:
        results = record.results
        failed = sum(not result.passed for result in results)
        not_run = sum(result.status == NOT_RUN for result in results)
        self._verdict(record, f"{len(results) - failed} of {len(results)} tests passed" + (f", {not_run} not run" if not_run else ""))

    # -- benchmark / leaderboard -------------------------------------------------------------
    def _benchmark_line(self, index: int, case, result) -> None:
        if result.passed:
            s = result.stats
            events = f"; the worker's events {us(result.worker_stats.mean)} us" if result.worker_stats else ""
            self.console.print(f"  {case.label:>18}  mean {us(s.mean)} us  ± {us(s.err)}  ({s.runs} rounds, {result.wall_s:.1f} s{events})")
            self._warn(result)
        else:
            self._show_case_failure(f"benchmark {index}", case, result)

    def _end_benchmarks(self, record: RunRecord) -> None:
        """The table of a timed run: SOL and % SOL where its ceilings and each case's work
        (RunRecord.works, None without a SOL formula) give them; beside the baselines, the exact
        path's floor where the ceilings were measured (RunRecord.floor)."""
        cases, results, works, floor = record.cases, record.results, record.works, record.floor
        ceilings, ceilings_note, ranking_by = record.ceilings, record.ceilings_note, record.options.problem.ranking_by
        passed = record.passed
        device = next((r.device_name for r in results if r.device_name), "?")
        if ceilings is not None and None in works:
            ceilings, ceilings_note = None, f"no speed-of-light formula for {record.options.problem.name}"
        rows = []
        for case, result, work in zip(cases, results, works):
            if not result.passed:
                style = STATUS_STYLE.get(result.status, "red")
                rows.append(({"shape": case.label, "runs": f"[{style}]{result.status}[/{style}]"}, None))
                continue
            s = result.stats
            sol_ns = ceilings.seconds(work) * 1e9 if ceilings else None
            rows.append(({"shape": case.label, "runs": str(s.runs), "mean µs": us(s.mean), "± err": us(s.err), "best": us(s.best),
                          "worst": us(s.worst), "host µs/call": us(result.host_ns), "SOL µs": us(sol_ns),
                          "% SOL": f"{100 * sol_ns / s.mean:.1f}" if sol_ns else "-",
                          "bound": ceilings.bound_of(work) if ceilings else "-"}, None))
        if passed:  # the score's row: the means and the SOLs made one figure each the way the problem ranks
            score_ns = score_of([result.stats.mean for result in results], ranking_by)
            sol_score = score_of([ceilings.seconds(work) * 1e9 for work in works], ranking_by) if ceilings else None
            rows.append(({"shape": SCORE_ROW_LABELS[ranking_by], "mean µs": us(score_ns), "SOL µs": us(sol_score),
                          "% SOL": f"{100 * sol_score / score_ns:.1f}" if sol_score else "-"}, "bold"))
        self.console.print(_table(f"{record.mode} on {device}", BENCHMARK_COLUMNS, rows))
        if ceilings:
            self.console.print(f"[dim]SOL = max(flops / {ceilings.peak_flops / 1e12:.0f} TFLOP/s, bytes / {ceilings.bandwidth / 1e12:.2f} TB/s) ({ceilings_note}: {escape(ceilings.source)})[/dim]")
        else:
            self.console.print(f"[dim]{escape(ceilings_note)}[/dim]")
        flush = next((r.flush for r in results if r.flush), "")
        if flush:
            self.console.print(f"[dim]L2 flush: {flush}[/dim]")
        self._baselines_table(cases, results, works, floor)
        score = f"score ({RANKINGS[ranking_by][0]}) {us(score_of([r.stats.mean for r in results], ranking_by))} µs" if passed else f"{sum(not r.passed for r in results)} of {len(results)} cases failed"
        self._verdict(record, score)

    def _baselines_table(self, cases, results, works, floor) -> None:
        rows = []
        for case, result, work in zip(cases, results, works):
            if not (result.passed and result.baselines):
                continue
            floor_ns = floor.seconds(work) * 1e9 if floor else None
            cublas = result.baselines["cublas_bf16"].mean
            empty_call = result.baselines.get("empty_cutedsl_call_host")
            rows.append(({"shape": case.label, "submission µs": us(result.stats.mean), "cuBLAS bf16 µs": us(cublas),
                          "torch dequant+mm µs": us(result.baselines["torch_dequant_matmul"].mean),
                          "exact-path floor µs": us(floor_ns), "sub / cuBLAS": f"{result.stats.mean / cublas:.2f}",
                          "sub / floor": f"{result.stats.mean / floor_ns:.2f}" if floor_ns else "-",
                          "host µs/call": us(result.host_ns), "empty-call host µs": us(empty_call.mean if empty_call else None)}, None))
        if not rows:
            return
        self.console.print(_table("baselines (same inputs, same timing loop)", BASELINE_COLUMNS, rows))
        self.console.print("[dim]cuBLAS bf16: operands dequantized beforehand (not timed). Exact-path floor: max(flops / measured bf16 peak, fp4 bytes / measured copy bandwidth). "
                           "Empty-call host: one call of an empty CuTeDSL kernel taking the five operand pointers, arguments made beforehand "
                           "(TVM-FFI where installed): the host floor of a compiled call here.[/dim]")

    # -- profile -----------------------------------------------------------------------------
    def _profile_result(self, index: int, case, result) -> None:
        if result.passed:
            if result.report:
                self.console.print(f"[bold]{case.spec}[/bold]")
                self.console.print(result.report, markup=False)
        else:
            self._show_case_failure(f"profile {index}", case, result)


def _instead(record: RunRecord) -> list[str]:
    """What to do instead, where a failure every case would meet stopped the run
    (harness/judge/modes.py RepeatedError): the lines that follow the verdict."""
    found = record.repeated
    if found is None:
        return []
    options = record.options
    first, submission = f"{found.kind} {found.first_index}", escape(options.submission_name)
    if found.cause == "needs_gpu":
        return [
            f"[bold]{submission} needs a CUDA GPU[/bold]: on --device {options.device}, {first} raised an error naming CUDA, "
            "which every case would raise. Without a GPU, these run:",
            f"  python -m harness lint --submission {submission}                    the leaderboard's checks of the file",
            f"  python -m harness compile --arch sm_100a --submission {submission}   its kernels compiled for every shape, SASS checked",
            "  python -m harness test --device cpu --submission FILE   a FILE whose custom_kernel runs on torch alone",
        ]
    if found.cause == "importing":
        return [
            f"[bold]{submission} does not import[/bold]: every case would raise what {first} raised; fix that and run again "
            f"(`python -m harness lint --submission {submission}` reads the file without importing it)",
        ]
    stopped = any(result.status == NOT_RUN for result in record.results)  # found at the last case, it stopped none
    return [f"[bold]{escape(found.seen(options.submission_name))}[/bold] on different shapes: the file's doing, not a shape's; "
            "fix that and run again" + (" (the cases after them would meet it too)" if stopped else "")]
