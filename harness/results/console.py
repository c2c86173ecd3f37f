"""What people read (rich tables, progress) and what machines read (POPCORN_FD lines)."""

import contextlib
import dataclasses
import importlib
import re
import sys
import textwrap
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness.judge.exits import EXIT_FAIL
from harness.judge.jobs import CRASH, ERROR, NOT_RUN, TIMEOUT
from harness.results.document import RunDocument, labelled_mismatches
from harness.results.popcorn import PopcornLog
from harness.results.tables import Fitted, console_for
from harness.shared.stats import RANKINGS, geomean
from harness.shared.stats import score as score_of


LOG_EVERY_S = 10.0
STATUS_STYLE = {"pass": "green", "fail": "red", "error": "red", "crash": "red", "timeout": "yellow", "not run": "dim"}
STATS_FIELDS = ("runs", "mean", "std", "err", "best", "worst")


# Terminal control sequences (CSI colours and cursor moves, OSC titles and links, two-byte
# escapes): CuTeDSL colours its messages, and inside a panel they show as raw bytes.
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
# Frames of the harness's own code and of the import machinery say nothing about the user's file.
HIDDEN_FRAME_FILES = (str(Path(__file__).resolve().parents[1]) + "/", str(Path(importlib.__file__).resolve().parent) + "/",
                      "<frozen importlib.")
_FRAME = re.compile(r'^(\s*)File "([^"]+)", line \d+')


# The line boundaries str.splitlines knows besides "\n": a terminal, a text-mode reader or a
# splitlines would end a line (or go back to its start) where the judge's report does not.
OTHER_LINE_BOUNDARIES = re.compile("\r\n?|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def strip_ansi(text: str) -> str:
    return ANSI_ESCAPE.sub("", text)


def visible_boundaries(text: str) -> str:
    """`text` with every line boundary but "\\n" written as its escape (`\\r`, `\\u2028`), so that
    its lines are its "\\n"-separated ones however it is read; "\\r\\n" is one boundary, "\\n"."""
    def shown(found: re.Match) -> str:
        return "\n" if found.group() == "\r\n" else found.group().encode("unicode_escape").decode()
    return OTHER_LINE_BOUNDARIES.sub(shown, text)


def without_hidden_frames(text: str) -> str:
    """`text` with each traceback frame (its `File` line and the lines indented under it) left
    out where the frame is the harness's or importlib's."""
    kept, hiding_below = [], None
    for line in text.splitlines(keepends=True):
        frame = _FRAME.match(line)
        if frame:
            indent, path = frame.groups()
            hiding_below = len(indent) if path.startswith(HIDDEN_FRAME_FILES) else None
        elif hiding_below is not None and len(line) - len(line.lstrip()) <= hiding_below:
            hiding_below = None
        if hiding_below is None:
            kept.append(line)
    return "".join(kept)


def as_the_user_wrote_it(text: str, runner_copies: re.Pattern | Path | None, submission: Path | None) -> str:
    """What the worker said, for a person: no terminal escapes, no line boundary but "\\n" (the others
    escaped), no harness or importlib frames, and the runner folders' copies of the submission
    (`runner_copies`: a path, or a pattern matching their paths) named by the user's own path (a
    syntax error names the copy by its bare file name)."""
    text = without_hidden_frames(visible_boundaries(strip_ansi(text)))
    if isinstance(runner_copies, Path):
        runner_copies = re.compile(re.escape(str(runner_copies)))
    if runner_copies is not None and submission is not None:
        text = runner_copies.sub(lambda _: str(submission), text)
        text = text.replace("(submission.py, line ", f"({submission}, line ")
    return text


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


class Reporter:
    def __init__(self, popcorn: PopcornLog, console: Console | None = None, json_document: bool = False,
                 keep_document: bool = False):
        """`json_document`: the --json document is built and the people's report leaves stdout to
        it; `keep_document`: the document is built all the same (a recorded run's store keeps it)."""
        self.popcorn = popcorn
        # People read whichever standard stream the verdicts and the --json document leave free:
        # stderr when POPCORN_FD is set (it may be 1, and on the runner stdout is captured) or
        # with --json, stdout when POPCORN_FD is 2.
        json_or_popcorn = json_document or (popcorn.active and popcorn.fd != 2)
        stream = sys.stderr if json_or_popcorn else sys.stdout
        if console is None and hasattr(stream, "reconfigure"):
            # A worker's text may hold a lone surrogate (a str crosses the wire whole), which no
            # encoding writes: shown escaped, never raised on.
            stream.reconfigure(errors="backslashreplace")
        self.console = console or console_for(stream)
        self._test_rows = []
        self._official = False
        self._builds_document = json_document or keep_document
        self.document: RunDocument | None = None
        self._runner_copy: re.Pattern | None = None
        self._submission: str | None = None
        self._last_error: tuple[str, str] | None = None  # (which case, its message): the error panel shown last
        self._after_verdict: list[str] = []  # what to do instead, once a repeated error stopped the run
        self._not_run_reason = ""
        self._problem = None  # the run's Problem, from its options

    # -- shared ------------------------------------------------------------------------------
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

    def runs_copy(self, runner_copies: re.Pattern, submission: str) -> None:
        """The workers import copies of `submission` (at paths `runner_copies` matches): messages name the latter."""
        self._runner_copy, self._submission = runner_copies, submission

    def case_started(self, kind: str, index: int, case) -> None:
        self.popcorn.log(f"{kind}.{index}.spec", case.spec)

    def _header(self, what: str, cases, options) -> None:
        self._official = options.official
        self._problem = options.problem
        if self._builds_document:
            self.document = RunDocument(what, options, cases)
        self._precheck(options)
        if options.official:
            rules = "competition verdicts only, one shared worker"
        elif what == "profile":
            rules = "all verdicts, one process per case"
        else:
            rules = "all verdicts, a worker reused while its cases pass"
        self.console.print(f"[bold]{what}[/bold] {escape(options.submission_name)} for {escape(options.problem.name)} on {options.device} "
                           f"({len(cases)} case{'s' if len(cases) != 1 else ''}, {rules})")

    def _readable(self, text: str) -> str:
        return escape(as_the_user_wrote_it(text, self._runner_copy, self._submission))

    def _show_failure(self, title: str, result) -> None:
        """A panel on a terminal; piped, the title and the text as lines of their own, whole, so
        that no box folds a long line (a path, a number) or cuts the title."""
        message = result.message or result.status
        body = self._readable(message if self._official else labelled_mismatches(message))
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

    def repeated_error(self, kind: str, first_index: int, result, options, needs_gpu: bool, importing: bool = False) -> str:
        """The run stops at an error every case would raise (harness/judge/modes.py RepeatedError):
        the reason the remaining cases are not run. What to do instead follows the verdict."""
        first, submission = f"{kind} {first_index}", escape(options.submission_name)
        if needs_gpu:
            self._after_verdict = [
                f"[bold]{submission} needs a CUDA GPU[/bold]: on --device {options.device}, {first} raised an error naming CUDA, "
                "which every case would raise. Without a GPU, these run:",
                f"  python -m harness lint --submission {submission}                    the leaderboard's checks of the file",
                f"  python -m harness compile --arch sm_100a --submission {submission}   its kernels compiled for every shape, SASS checked",
                "  python -m harness test --device cpu --submission FILE   a FILE whose custom_kernel runs on torch alone",
            ]
            return f"not run: {first} raised an error naming CUDA on --device {options.device}"
        if importing:
            self._after_verdict = [
                f"[bold]{submission} does not import[/bold]: every case would raise what {first} raised; fix that and run again "
                f"(`python -m harness lint --submission {submission}` reads the file without importing it)",
            ]
            return f"not run: the submission does not import ({first})"
        # What was seen: two cases in a row, of different shapes, alike (modes._same_failure).
        both = f"{first} and {kind} {first_index + 1}"
        origin = result.origin.replace(" at submission.py:", f" at {options.submission_name}:")
        if result.status == ERROR:
            same = f"{both} raised the same error" + (f" ({escape(origin)})" if origin else "")
        else:
            same = {TIMEOUT: f"{both} ran out of time", CRASH: f"{both} crashed alike"}.get(result.status, f"{both} failed alike")
        self._after_verdict = [f"[bold]{same}[/bold] on different shapes: the file's doing, not a shape's; "
                               "fix that and run again (the cases after them would meet it too)"]
        return f"not run: {same} on different shapes"

    def _precheck(self, options) -> None:
        found = options.precheck
        if found is None:
            return
        if self.document:
            self.document.data["precheck"] = found.fields()
        if not found.available:
            self.console.print("[yellow]kernelguard is not installed[/yellow]: no static hack detection before this run")
        if found.unfinished:
            self.console.print(f"[{'bold red' if options.strict else 'yellow'}]kernelguard {escape(found.unfinished)}[/]: "
                               "no static hack detection for this file")
        for hit in found.hits:
            self.console.print(f"[{'bold red' if options.strict else 'yellow'}]kernelguard {found.classification}[/]: {escape(str(hit))}")

    def refused(self, reason: str) -> int:
        """--strict and kernelguard flagged the file, or did not finish reading it (`reason`): no case runs."""
        self._verdict(False, f"refused before any case: {escape(reason)} (--strict)")
        if self.document:
            self.document.finish(False, refused=f"{reason} (--strict)")
        return EXIT_FAIL

    def _warn(self, result) -> None:
        if result.warning:
            self.console.print(f"  [yellow]warning[/yellow]: {escape(visible_boundaries(result.warning))}")

    def _log_failure(self, kind: str, index: int, result) -> None:
        """`KIND.N.status: fail` and its error line: as the competition words it under --official
        (its check's message, or what the caught OpError says), with our status word otherwise."""
        self.popcorn.log(f"{kind}.{index}.status", "fail")
        if not self._official:
            error = f"{result.status}: {result.message}"
        elif result.status == ERROR:
            error = result.exception if kind == "test" else f"Encountered {result.exception}"
        else:
            error = result.message
        self.popcorn.log(f"{kind}.{index}.error", error)

    def eval_stopped(self, result) -> None:
        """--official: what the submission raised is not an OpError, which the competition's eval
        does not catch: it stops there with a traceback and logs no verdict."""
        if self.document:
            self.document.finish(False, eval_stopped=result.message)
        self._show_failure("the competition's eval stops here", result)
        self.console.print("[bold red]eval stopped[/bold red]: the competition's eval catches only CuTeDSL's OpError; "
                           "it would end with this traceback and log no `check` line")

    def _verdict(self, passed: bool, summary: str) -> None:
        self.popcorn.log("check", "pass" if passed else "fail")
        style = "bold green" if passed else "bold red"
        self.console.print(f"[{style}]check: {'pass' if passed else 'fail'}[/{style}] {summary}")
        for line in self._after_verdict:
            self.console.print(line, soft_wrap=True)

    # -- test --------------------------------------------------------------------------------
    def begin_tests(self, cases, options) -> None:
        self._header("test", cases, options)
        self.popcorn.log("test-count", len(cases))

    def test_result(self, index: int, case, result) -> None:
        if self.document:
            self.document.case(index, result)
        if result.passed:
            self.popcorn.log(f"test.{index}.status", "pass")
        else:
            self._log_failure("test", index, result)
            self._show_case_failure(f"test {index}", case, result)
        self._test_rows.append((index, case, result))
        style = STATUS_STYLE.get(result.status, "red")
        self.console.print(f"  test {index:2d} {case.label:>18}  [{style}]{result.status:7}[/{style}] {result.wall_s:6.1f} s")
        self._warn(result)

    def end_tests(self, passed: bool) -> None:
        if self.document:
            self.document.finish(passed)
        failed = [row for row in self._test_rows if not row[2].passed]
        not_run = sum(row[2].status == NOT_RUN for row in self._test_rows)
        self._verdict(passed, f"{len(self._test_rows) - len(failed)} of {len(self._test_rows)} tests passed"
                              + (f", {not_run} not run" if not_run else ""))

    # -- benchmark / leaderboard -------------------------------------------------------------
    def begin_benchmarks(self, cases, options, mode: str) -> None:
        self._header(mode, cases, options)
        self.popcorn.log("benchmark-count", len(cases))

    def ceilings_measured(self, result) -> None:
        if result.passed:
            measured = result.ceilings
            self.console.print(f"measured ceilings on {result.device_name}: {measured['bandwidth'] / 1e12:.2f} TB/s copy, {measured['peak_flops'] / 1e12:.0f} TFLOP/s bf16")
        else:
            self._show_failure("measuring ceilings", result)

    def benchmark_result(self, index: int, case, result) -> None:
        if self.document:
            self.document.case(index, result)
        if result.passed:
            for field in STATS_FIELDS:
                self.popcorn.log(f"benchmark.{index}.{field}", getattr(result.stats, field))
            s = result.stats
            events = f"; the worker's events {us(result.worker_stats.mean)} us" if result.worker_stats else ""
            self.console.print(f"  {case.label:>18}  mean {us(s.mean)} us  ± {us(s.err)}  ({s.runs} rounds, {result.wall_s:.1f} s{events})")
            self._warn(result)
        else:
            self._log_failure("benchmark", index, result)
            self._show_case_failure(f"benchmark {index}", case, result)

    def end_benchmarks(self, cases, results, works, ceilings, ceilings_note: str, mode: str, floor=None,
                       ranking_by: str = "geom") -> None:
        """`works`: each case's (flops, DRAM bytes), None without a SOL formula (RunRecord.works);
        `ceilings` give SOL and % SOL; `floor` (measured) gives the exact path's floor beside the baselines."""
        passed = all(result.passed for result in results)
        if self.document:
            self.document.benchmark_summary(cases, results, ceilings, ceilings_note, works, ranking_by)
            self.document.finish(passed)
        device = next((r.device_name for r in results if r.device_name), "?")
        if ceilings is not None and None in works:
            ceilings, ceilings_note = None, f"no speed-of-light formula for {self._problem.name}"
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
        if passed:
            means = [result.stats.mean for result in results]
            sol_geo = geomean(ceilings.seconds(work) * 1e9 for work in works) if ceilings else None
            rows.append(({"shape": "geomean", "mean µs": us(geomean(means)), "SOL µs": us(sol_geo),
                          "% SOL": f"{100 * sol_geo / geomean(means):.1f}" if sol_geo else "-"}, "bold"))
        self.console.print(_table(f"{mode} on {device}", BENCHMARK_COLUMNS, rows))
        if ceilings:
            self.console.print(f"[dim]SOL = max(flops / {ceilings.peak_flops / 1e12:.0f} TFLOP/s, bytes / {ceilings.bandwidth / 1e12:.2f} TB/s) ({ceilings_note}: {escape(ceilings.source)})[/dim]")
        else:
            self.console.print(f"[dim]{escape(ceilings_note)}[/dim]")
        flush = next((r.flush for r in results if r.flush), "")
        if flush:
            self.console.print(f"[dim]L2 flush: {flush}[/dim]")
        self._baselines_table(cases, results, works, floor)
        score = f"score ({RANKINGS[ranking_by][0]}) {us(score_of([r.stats.mean for r in results], ranking_by))} µs" if passed else f"{sum(not r.passed for r in results)} of {len(results)} cases failed"
        self._verdict(passed, score)

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
    def profile_result(self, index: int, case, result) -> None:
        if self.document:
            self.document.case(index, result)
        if result.passed:
            self.popcorn.log_report(f"benchmark.{index}.report", result.report)
            if result.report:
                self.console.print(f"[bold]{case.spec}[/bold]")
                self.console.print(result.report, markup=False)
        else:
            self._log_failure("benchmark", index, result)
            self._show_case_failure(f"profile {index}", case, result)

    def end_profile(self, passed: bool) -> None:
        if self.document:
            self.document.finish(passed)
        self._verdict(passed, "profiled" if passed else "a case failed")
