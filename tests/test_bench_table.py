"""The benchmark's tables on an 80-column terminal and piped: columns left out whole where the
width is short, never a number or a shape cut."""

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from harness.judge.jobs import CaseResult
from harness.judge.modes import RunOptions
from harness.judge.record import RunRecord
from harness.problems import PROBLEMS
from harness.problems.shapes import parse_cases
from harness.problems.sol import DEVICES
from harness.results.console import BASELINE_COLUMNS, BENCHMARK_COLUMNS, Reporter, us
from harness.shared.stats import Stats

GEMM, GROUPED = PROBLEMS["nvfp4_gemm"], PROBLEMS["nvfp4_group_gemm"]
GEMM_CASES = parse_cases("m: 128; n: 7168; k: 16384; l: 1; seed: 1111\nm: 128; n: 4096; k: 7168; l: 1; seed: 1111\n"
                         "m: 128; n: 7168; k: 2048; l: 1; seed: 1111\n")
DEVICE = "NVIDIA H100 80GB HBM3"


def stats(mean_ns: float) -> Stats:
    return Stats(runs=137, mean=mean_ns, std=mean_ns / 97, err=mean_ns / 1013, best=mean_ns * 0.9713, worst=mean_ns * 1.1187)


def passed(mean_ns: float, baselines: bool = False) -> CaseResult:
    result = CaseResult("pass", stats=stats(mean_ns), host_ns=mean_ns / 7.31, device_name=DEVICE)
    if baselines:
        result.baselines = {"cublas_bf16": stats(mean_ns * 0.8123), "torch_dequant_matmul": stats(mean_ns * 4.377),
                            "empty_cutedsl_call_host": stats(3141.0)}
    return result


def render(width: int, problem, cases, results, ceilings, floor=None) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=width < 250, color_system=None, highlight=False)
    works = [problem.work(case.args) for case in cases]
    Reporter(console=console).run_ended(RunRecord("benchmark", cases, RunOptions(submission=Path("submission.py"), problem=problem),
                                                  results, ceilings, "the device's table", floor, works))
    return console.file.getvalue()


def table_cells(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The headers and rows of the table titled `title` in `text`, read from its drawn lines."""
    lines = text.splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip().startswith(title))
    body = []
    for line in lines[start + 1:]:
        if not line.strip() or line.strip()[0] not in "┏┃┡│└╇┣━":
            break
        if line.strip()[0] in "┃│":
            body.append([cell.strip() for cell in re.split("[┃│]", line)[1:-1]])
    return body[0], body[1:]


def expected_rows(cases, results, ceilings, works) -> list[dict]:
    rows = []
    for case, result, work in zip(cases, results, works):
        s = result.stats
        sol_ns = ceilings.seconds(work) * 1e9
        rows.append({"shape": case.label, "runs": str(s.runs), "mean µs": us(s.mean), "± err": us(s.err), "best": us(s.best),
                     "worst": us(s.worst), "host µs/call": us(result.host_ns), "SOL µs": us(sol_ns),
                     "% SOL": f"{100 * sol_ns / s.mean:.1f}", "bound": ceilings.bound_of(work)})
    return rows


@pytest.mark.parametrize("width", [80, 250])
def test_every_figure_and_shape_of_the_benchmark_table_is_whole(width):
    results = [passed(mean) for mean in (1_234_567.891, 98_765.4321, 45_678.9)]
    ceilings = DEVICES["H100"]
    text = render(width, GEMM, GEMM_CASES, results, ceilings)
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= width
    headers, rows = table_cells(text, "benchmark on")
    assert {"shape", "mean µs", "% SOL"} <= set(headers)
    works = [GEMM.work(case.args) for case in GEMM_CASES]
    for expected, row in zip(expected_rows(GEMM_CASES, results, ceilings, works), rows):
        assert dict(zip(headers, row)) == {header: expected[header] for header in headers}
    left_out = [header for header in BENCHMARK_COLUMNS.headers if header not in headers]
    if width == 80:
        assert left_out and f"left out to fit 80 columns: {', '.join(left_out)}" in " ".join(text.split())
    else:
        assert left_out == [] and "left out" not in text


def test_a_grouped_shape_and_a_failed_case_read_whole_at_80_columns():
    cases = parse_cases("m: [80, 176, 128, 72, 64, 248, 96, 160]; n: [4096, 4096, 4096, 4096, 4096, 4096, 4096, 4096]; "
                        "k: [7168, 7168, 7168, 7168, 7168, 7168, 7168, 7168]; g: 8; seed: 1111\n"
                        "m: [96, 128]; n: [128, 256]; k: [256, 512]; g: 2; seed: 1111\n", case_format=GROUPED.case_format)
    results = [passed(2_345.678), CaseResult("timeout", device_name=DEVICE)]
    text = render(80, GROUPED, cases, results, DEVICES["H100"])
    headers, rows = table_cells(text, "benchmark on")
    assert [row[0] for row in rows] == [case.label for case in cases]
    assert rows[1][1] == "timeout" and dict(zip(headers, rows[0]))["mean µs"] == "2.346"
    assert "…" not in text and max(map(len, text.splitlines())) <= 80


def test_on_the_cpu_the_columns_nothing_measured_give_their_room_to_measured_ones():
    """Without ceilings (a CPU) SOL µs, % SOL and bound would be `-` on every row: they are left
    out, and at 80 columns every measured column of the CPU's benchmark (nvfp4_gemm's test of
    least work) stays, worst and host time included."""
    cases = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1111\nm: 128; n: 512; k: 256; l: 1; seed: 1111\n")
    results = [passed(1_234.567), CaseResult("timeout", device_name="cpu")]
    text = render(80, GEMM, cases, results, None)
    headers, rows = table_cells(text, "benchmark on")
    assert headers == ["shape", "runs", "mean µs", "± err", "best", "worst", "host µs/call"]
    assert "left out" not in text and max(map(len, text.splitlines())) <= 80
    first = dict(zip(headers, rows[0]))
    assert first["worst"] == us(results[0].stats.worst) and first["host µs/call"] == us(results[0].host_ns)
    assert rows[1][:2] == [cases[1].label, "timeout"]


def test_the_baselines_table_keeps_its_figures_whole_at_80_columns():
    results = [passed(mean, baselines=True) for mean in (1_234_567.891, 98_765.4321, 45_678.9)]
    floor = DEVICES["H100"]
    text = render(80, GEMM, GEMM_CASES, results, DEVICES["H100"], floor)
    assert "…" not in text and max(map(len, text.splitlines())) <= 80
    headers, rows = table_cells(text, "baselines")
    assert {"shape", "submission µs", "cuBLAS bf16 µs", "sub / cuBLAS"} <= set(headers)
    for case, result, row in zip(GEMM_CASES, results, rows):
        cells = dict(zip(headers, row))
        assert cells["shape"] == case.label and cells["submission µs"] == us(result.stats.mean)
        assert cells["cuBLAS bf16 µs"] == us(result.baselines["cublas_bf16"].mean)
        assert cells["sub / cuBLAS"] == f"{result.stats.mean / result.baselines['cublas_bf16'].mean:.2f}"
    assert [header for header in BASELINE_COLUMNS.headers if header not in headers]


def test_each_cases_work_is_computed_once_a_run(monkeypatch, tmp_path):
    """The mode computes each case's work once (RunRecord.works); the tables, the --json document
    and the results' rows read that list."""
    import contextlib

    from harness.judge import modes
    from harness.results.document import run_document
    from harness.problems import Problem
    from harness.results.recording import run_rows

    computed = []
    work = Problem.work
    monkeypatch.setattr(Problem, "work", lambda self, spec: computed.append(spec) or work(self, spec))
    means = iter((1_234_567.891, 98_765.4321, 45_678.9))

    class Judged:
        sandbox_layers, runner_copies = {}, None

        def run(self, job, label):
            return passed(next(means), baselines=True)

    @contextlib.contextmanager
    def judged(*args, **kwargs):
        yield Judged()

    monkeypatch.setattr(modes.Executor, "open", judged)
    submission = tmp_path / "submission.py"
    submission.write_text("def custom_kernel(data):\n    return data[-1]\n")
    options = modes.RunOptions(submission=submission, device="cpu")
    console = Console(file=io.StringIO(), width=250)
    record = modes.run_benchmarks(GEMM_CASES, options, Reporter(console=console), leaderboard=False)
    run_document(record)
    rows = run_rows(record)
    assert len(computed) == len(GEMM_CASES)
    assert [(row["flops"], row["dram_bytes"]) for row in rows] == [GEMM.work(case.args) for case in GEMM_CASES]
    assert "128x7168x16384" in console.file.getvalue()


@pytest.mark.parametrize("ranking_by", ["geom", "mean", "last"])
def test_the_tables_bold_row_is_the_score_the_problem_ranks_by(ranking_by):
    """The last row aggregates the means and the SOLs by task.yml's `ranking_by`, named so, and
    its mean is the score the verdict line prints."""
    import dataclasses
    import statistics

    from harness.shared.stats import geomean

    problem = dataclasses.replace(GEMM, ranking_by=ranking_by)
    means = (1_234_567.891, 98_765.4321, 45_678.9)
    text = render(250, problem, GEMM_CASES, [passed(mean) for mean in means], DEVICES["H100"])
    headers, rows = table_cells(text, "benchmark on")
    last = dict(zip(headers, rows[-1]))
    score_ns = {"geom": geomean(means), "mean": statistics.fmean(means), "last": means[-1]}[ranking_by]
    sols = [DEVICES["H100"].seconds(GEMM.work(case.args)) * 1e9 for case in GEMM_CASES]
    sol_ns = {"geom": geomean(sols), "mean": statistics.fmean(sols), "last": sols[-1]}[ranking_by]
    assert last["shape"] == {"geom": "geomean", "mean": "mean", "last": "last"}[ranking_by]
    assert last["mean µs"] == us(score_ns) and last["SOL µs"] == us(sol_ns)
    assert last["% SOL"] == f"{100 * sol_ns / score_ns:.1f}"
    assert f"{us(score_ns)} µs" in text.split("score (")[1].splitlines()[0]
