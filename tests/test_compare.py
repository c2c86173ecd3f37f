"""`compare` on a history written by harness.results.rows and harness.results.store themselves, so all agree
on the schema: your runs in the store (as the benchmark command keeps them), the reference ones
in a CSV."""

import math
import re
from pathlib import Path

import pandas
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.judge.jobs import CaseResult
from harness.problems import PROBLEMS
from harness.problems.shapes import parse_cases
from harness.problems.sol import DEVICES
from harness.results.compare import (CPU_NOISE_FRACTION, NOISE_FRACTION, NOISE_SIGMAS, DeviceHistory, compare_command, histories,
                                     load_history, noise_band, repeat_scatter, runs_table, stored_runs)
from harness.results.rows import append_rows, rows_for_run
from harness.results.store import Store, verdict_key
from harness.shared.stats import Stats

ROOT = Path(__file__).resolve().parent.parent
CASES = parse_cases("m: 128; n: 7168; k: 16384; l: 1; seed: 1111\nm: 128; n: 4096; k: 7168; l: 1; seed: 1111\n")
BIG, SMALL = "128x7168x16384", "128x4096x7168"
H100, B200 = "NVIDIA H100 80GB HBM3", "NVIDIA B200"


def run_rows(device: str, means_ns, time: str, mode="benchmark", failed: dict | None = None,
             relative_error: float = 1e-3) -> list[dict]:
    results = []
    for index, mean in enumerate(means_ns):
        status = (failed or {}).get(index, "pass")
        stats = Stats(runs=100, mean=mean, std=mean / 100, err=mean * relative_error, best=mean * 0.98, worst=mean * 1.1)
        result = CaseResult(status, stats=stats if status == "pass" else None, host_ns=2000.0)
        result.device_name = device
        results.append(result)
    ceilings = DEVICES["B200" if "B200" in device else "H100"]
    works = [PROBLEMS["nvfp4_gemm"].work(case.args) for case in CASES]
    rows = rows_for_run(CASES, results, works, mode, ROOT / "reference.py", ceilings, "table", None, PROBLEMS["nvfp4_gemm"])
    return [{**row, "time": time} for row in rows]


def record_run(path: Path, *run, **options) -> None:
    """One run's rows into the CSV at `path`."""
    append_rows(run_rows(*run, **options), path)


def store_run(path: Path, *run, **options) -> None:
    """One run kept as the benchmark command keeps it: its verdict and rows in the store at `path`."""
    rows = run_rows(*run, **options)
    fields = verdict_key("source", "nvfp4_gemm", rows[0]["mode"], None, {}, "fixed", rows[0]["commit"], rows[0]["device"])
    store = Store(path)
    store.add(fields, "reference.py", {"passed": all(row["status"] == "pass" for row in rows)}, 0, rows)
    store.close()


HISTORY = [
    ((H100, [120e3, 60e3], "2026-11-20T10:00:00+00:00"), {}),
    ((B200, [20e3, 6e3], "2026-11-20T11:00:00+00:00"), {"mode": "leaderboard"}),
    ((H100, [100e3, 66e3], "2026-11-21T10:00:00+00:00"), {}),
    ((H100, [90e3, 0], "2026-11-22T10:00:00+00:00"), {"failed": {1: "timeout"}}),
    ((H100, [90e3, 55e3], "2026-11-22T11:00:00+00:00"), {}),
]


@pytest.fixture
def history_store(tmp_path):
    path = tmp_path / "verdicts.sqlite"
    for run, options in HISTORY:
        store_run(path, *run, **options)
    return path


@pytest.fixture
def history_csv(tmp_path):
    path = tmp_path / "runs.csv"
    for run, options in HISTORY:
        record_run(path, *run, **options)
    return path


def by_device(source, last=None):
    """Histories per device from a store (a .sqlite path) or a CSV."""
    yours = runs_table(stored_runs(source)) if source.suffix == ".sqlite" else source
    return {history.device: history for history in histories(load_history(("yours", yours)), last)}


def test_runs_are_grouped_per_device_and_changes_never_cross_devices(history_store):
    found = by_device(history_store)
    h100, b200 = found[H100], found[B200]
    assert len(h100.runs) == 4 and len(b200.runs) == 1
    assert h100.shapes == [BIG, SMALL]
    # The H100 run after the B200 run compares with the earlier H100 run, 120 -> 100 us.
    assert h100.change.loc[BIG].tolist()[1] == pytest.approx(100 / 120 - 1)
    assert b200.change.loc[BIG].isna().all()


def test_change_skips_a_run_where_the_shape_did_not_pass(history_store):
    h100 = by_device(history_store)[H100]
    assert h100.status.loc[SMALL].tolist() == ["pass", "pass", "timeout", "pass"]
    assert h100.change.loc[SMALL].tolist()[3] == pytest.approx(55 / 66 - 1)


def test_score_only_for_complete_runs_and_its_change_against_the_last_complete_one(history_store):
    h100 = by_device(history_store)[H100]
    first, second, broken, fourth = h100.runs
    assert broken not in h100.score
    assert h100.score[first] == pytest.approx((120e3 * 60e3) ** 0.5)
    assert h100.score_change[fourth] == pytest.approx(((90e3 * 55e3) / (100e3 * 66e3)) ** 0.5 - 1)


def test_pct_sol_comes_from_the_recorded_rows(history_store):
    h100 = by_device(history_store)[H100]
    sol_ns = DEVICES["H100"].sol_seconds(128, 7168, 16384, 1) * 1e9
    assert h100.pct_sol.loc[BIG].iloc[0] == pytest.approx(100 * sol_ns / 120e3)


def test_last_keeps_changes_against_runs_no_longer_shown(history_store):
    h100 = by_device(history_store, last=1)[H100]
    assert len(h100.runs) == 1
    assert h100.change.loc[BIG].iloc[0] == pytest.approx(0.0)
    assert h100.change.loc[SMALL].iloc[0] == pytest.approx(55 / 66 - 1)


def test_one_shape_at_two_seeds_in_a_run_gets_two_rows(tmp_path):
    path = tmp_path / "runs.csv"
    record_run(path, H100, [120e3, 60e3], "2026-11-20T10:00:00+00:00")
    table = load_history(("yours", path))
    table.loc[1, ["n", "k", "seed"]] = [7168, 16384, 2222]
    table.drop(columns=["source", "shape", "when", "run"]).to_csv(path, index=False)
    h100 = by_device(path)[H100]
    assert h100.shapes == [f"{BIG} seed 1111", f"{BIG} seed 2222"]
    assert h100.mean.iloc[:, 0].tolist() == [120e3, 60e3]


def run_compare(*args, reference: bool = False):
    extra = [] if reference else ["--no-reference"]
    return CliRunner().invoke(compare_command, [*args, *extra], env={"COLUMNS": "250"})


def test_command_prints_one_table_per_device(history_store):
    result = run_compare("--store", str(history_store))
    assert result.exit_code == 0, result.output
    assert result.output.index(H100) < result.output.index(B200)
    assert "-16.7%" in result.output  # 120 -> 100 us on the H100
    assert "timeout" in result.output
    assert "leaderboard" in result.output


def test_filters(history_store):
    result = run_compare("--store", str(history_store), "--device", "b200")
    assert result.exit_code == 0 and B200 in result.output and H100 not in result.output
    result = run_compare("--store", str(history_store), "--mode", "leaderboard", "--device", "h100")
    assert result.exit_code == 1 and "no runs match" in result.output


def test_plot_writes_a_png_with_a_panel_per_device(history_store, tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib draws --plot (pip install '.[plot]')")
    import matplotlib.image

    png = tmp_path / "history.png"
    result = run_compare("--store", str(history_store), "--plot", str(png))
    assert result.exit_code == 0, result.output
    assert f"plot written to {png}" in result.output
    height, width, _ = matplotlib.image.imread(png).shape
    assert height > 800 and width > 1000  # two panels stacked


def test_the_plot_says_in_the_picture_which_runs_it_leaves_out(history_store, tmp_path, monkeypatch):
    """A CPU run records no ceilings, so it has no % SOL to plot: the picture names its panel
    under the others, as the terminal does."""
    pytest.importorskip("matplotlib", reason="matplotlib draws --plot (pip install '.[plot]')")
    from matplotlib.figure import Figure

    cpu_rows = [{**row, "device": "cpu", "ceilings": "", "peak_flops": None, "bandwidth": None, "pct_sol": None, "sol_ns": None}
                for row in run_rows(H100, [9e6, 4e6], "2026-11-23T10:00:00+00:00")]
    store_rows(history_store, cpu_rows)
    texts = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *args, **kwargs: texts.extend(text.get_text() for text in figure.texts))
    result = run_compare("--store", str(history_store), "--plot", str(tmp_path / "plot.png"))
    assert result.exit_code == 0, result.output
    (note,) = texts
    assert "not plotted" in note and "nvfp4_gemm on cpu" in note and H100 not in note
    assert note.split(";")[0] in " ".join(result.output.split())


def test_missing_results_say_how_to_make_them(tmp_path):
    for source in (["--store", str(tmp_path / "none.sqlite")], ["--results", str(tmp_path / "none.csv")]):
        result = run_compare(*source)
        assert result.exit_code == 1
        assert "make bench" in result.output


def test_the_store_and_its_csv_export_show_the_same_runs(history_store, history_csv, tmp_path):
    """The export holds the rows the benchmark command appended, byte for byte, and compare shows
    the same tables from the store, from the appended CSV and from the export."""
    export = tmp_path / "export.csv"
    result = run_compare("--store", str(history_store), "--export", str(export))
    assert result.exit_code == 0 and "wrote 5 runs (10 rows)" in result.output
    assert export.read_text() == history_csv.read_text()
    shown = [run_compare(*source).output for source in
             (["--store", str(history_store)], ["--results", str(history_csv)], ["--results", str(export)])]
    tables = [text[:text.index("runs headed")] for text in shown]
    assert "-16.7%" in tables[0] and tables[1:] == [tables[0]] * 2
    assert run_compare("--store", str(tmp_path / "none.sqlite"), "--export", str(export)).exit_code == 1


def test_your_runs_and_the_reference_ones_are_shown_together_and_labelled(history_store, tmp_path):
    reference = tmp_path / "reference.csv"
    record_run(reference, H100, [80e3, 50e3], "2026-11-21T12:00:00+00:00")
    result = run_compare("--store", str(history_store), "--reference", str(reference), reference=True)
    assert result.exit_code == 0, result.output
    # five runs of yours (H100 and B200), one reference run
    assert len(re.findall(r"#\d+ (?:yours|reference)\b", result.output)) == 6
    assert len(re.findall(r"#\d+ yours", result.output)) == 5 and len(re.findall(r"#\d+ reference", result.output)) == 1
    yours = runs_table(stored_runs(history_store))
    h100 = {h.device: h for h in histories(load_history(("yours", yours), ("reference", reference)))}[H100]
    assert [h100.run_info(run)["source"] for run in h100.runs] == ["yours", "yours", "reference", "yours", "yours"]
    # Without runs of yours, the reference ones are still shown.
    result = run_compare("--store", str(tmp_path / "none.sqlite"), "--reference", str(reference), reference=True)
    assert result.exit_code == 0 and "no runs of yours" in result.output and "reference" in result.output


def test_a_run_of_yours_recorded_as_reference_too_is_shown_once(history_store, tmp_path):
    """A reference measurement is recorded with --results results/reference/runs.csv, and the
    store keeps it as well: compare shows it once, as reference."""
    reference = tmp_path / "reference.csv"
    run = (H100, [80e3, 50e3], "2026-11-21T12:00:00+00:00")
    record_run(reference, *run)
    store_run(history_store, *run)
    result = run_compare("--store", str(history_store), "--reference", str(reference), reference=True)
    assert result.exit_code == 0, result.output
    assert len(re.findall(r"#\d+ yours", result.output)) == 5 and len(re.findall(r"#\d+ reference", result.output)) == 1


def test_piped_compare_keeps_each_cell_on_its_lines(history_store):
    """Piped, the table is not squeezed into 80 columns: a run's header keeps its commit whole."""
    result = CliRunner().invoke(compare_command, ["--store", str(history_store), "--no-reference"], env={"COLUMNS": None})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) > 80
    assert "120.000 µs" in result.stdout
    legend = [line for line in result.stdout.splitlines() if line.startswith("runs headed")]
    assert len(legend) == 1 and legend[0].endswith("over runs where every shape passed")  # one line, whole


def test_a_ceiling_a_run_beat_is_raised_and_the_table_and_the_plot_say_so_alike(tmp_path, monkeypatch):
    """A run recorded at 102 % of its ceiling: the table reads 100 % and the caption names the
    ceiling raised, the shape and the run that reached it; the plot's title says the same, and
    no other line speaks of ceilings."""
    from matplotlib.figure import Figure

    from harness.results.compare import ceilings_caption, common_ceilings

    path = tmp_path / "verdicts.sqlite"
    sol_ns = DEVICES["H100"].sol_seconds(128, 7168, 16384, 1) * 1e9
    store_run(path, H100, [0.98 * sol_ns, 60e3], "2026-11-20T10:00:00+00:00")  # 102 % as recorded
    store_run(path, H100, [1.10 * sol_ns, 61e3], "2026-11-21T10:00:00+00:00")
    h100 = by_device(path)[H100]
    ceilings = common_ceilings(h100)
    assert ceilings.peak_flops == pytest.approx(DEVICES["H100"].peak_flops / 0.98)
    caption = ceilings_caption(ceilings)
    assert caption.startswith(f"% SOL of every run at {DEVICES['H100'].peak_flops / 0.98 / 1e12:.0f} TFLOP/s and 3.35 TB/s: "
                              "run #1's recorded ceilings (")
    assert caption.endswith(f"beaten, so raised: peak to {DEVICES['H100'].peak_flops / 0.98 / 1e12:.0f} TFLOP/s, "
                            f"reached on {BIG} in run #0")
    titles = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, *args, **kwargs: titles.extend(axis.get_title() for axis in figure.axes))
    result = run_compare("--store", str(path), "--plot", str(tmp_path / "plot.png"))
    text = " ".join(result.output.split())
    assert caption in text and titles == [f"nvfp4_gemm on {H100}: {caption}; bar labels: mean per call"]
    big_row = next(line for line in result.output.splitlines() if line.startswith(f"│ {BIG}"))
    percents = [float(figure) for figure in re.findall(r"([\d.]+)% SOL", big_row + next(
        line for line in result.output.splitlines()[result.output.splitlines().index(big_row) + 1:] if "% SOL" in line))]
    assert percents == [100.0, pytest.approx(98 / 1.10, abs=0.05)], result.output
    # The caption, and the footer pointing to it (the test's folder, named after the test, left out).
    assert text.replace(str(tmp_path), "").count("ceiling") == caption.count("ceiling") + 1


def test_the_plot_sets_every_run_of_a_panel_against_its_latest_ceilings(tmp_path):
    from harness.results.compare import common_ceilings, histories, load_history, pct_sol_at, time_label

    path = tmp_path / "runs.csv"
    record_run(path, H100, [37.9e3, 11.0e3], "2026-11-24T10:00:00+00:00")
    # The same times, recorded against other ceilings: % SOL as each run recorded it differs.
    table = pandas.read_csv(path)
    table["peak_flops"] *= 0.8
    table["pct_sol"] /= 0.8
    table.to_csv(path, index=False)
    record_run(path, H100, [37.9e3, 11.0e3], "2026-11-25T10:00:00+00:00")
    (history,) = histories(load_history(("yours", path)))
    assert history.pct_sol.iloc[1, 0] != pytest.approx(history.pct_sol.iloc[1, 1])
    ceilings = common_ceilings(history)
    assert ceilings.peak_flops == DEVICES["H100"].peak_flops
    pct = pct_sol_at(history, ceilings)
    assert pct.iloc[0, 0] == pytest.approx(pct.iloc[0, 1]) and pct.iloc[1, 0] == pytest.approx(pct.iloc[1, 1])
    assert pct.iloc[0, 1] == pytest.approx(history.pct_sol.iloc[0, 1])
    assert [time_label(ns) for ns in (1.8e6, 37.93e3, 5.857e3)] == ["1,800 µs", "37.9 µs", "5.86 µs"]


def test_the_table_sets_every_run_against_the_plots_ceilings(tmp_path):
    """Two runs at the same times, recorded against other ceilings, read the same % SOL in the
    table, as in the plot: a person reads no regression where the time did not move."""
    from harness.results.compare import histories, history_table, load_history

    path = tmp_path / "runs.csv"
    record_run(path, H100, [37.9e3, 11.0e3], "2026-11-24T10:00:00+00:00")
    table = pandas.read_csv(path)
    table["peak_flops"] *= 0.8
    table.to_csv(path, index=False)
    record_run(path, H100, [37.9e3, 11.0e3], "2026-11-25T10:00:00+00:00")
    (history,) = histories(load_history(("yours", path)))
    console = Console(width=250, record=True)
    console.print(history_table(history))
    text = console.export_text()
    big_row = next(line for line in text.splitlines() if "% SOL" in line)
    percents = re.findall(r"([\d.]+)% SOL", big_row)
    assert len(percents) == 2 and percents[0] == percents[1], big_row
    assert "% SOL of every run at 989 TFLOP/s and 3.35 TB/s: run #1's recorded ceilings (table)" in text  # the caption on one line
    assert text.splitlines()[0].strip() == "nvfp4_gemm on " + H100


def store_rows(path: Path, rows: list[dict]) -> None:
    fields = verdict_key(rows[0]["submission"], "nvfp4_gemm", rows[0]["mode"], None, {}, "fixed", rows[0]["commit"], rows[0]["device"])
    store = Store(path)
    store.add(fields, rows[0]["submission"], {"passed": True}, 0, rows)
    store.close()


def at_commit(rows: list[dict], commit: str) -> list[dict]:
    return [{**row, "commit": commit} for row in rows]


def of_file(rows: list[dict], name: str, sha: str) -> list[dict]:
    return [{**row, "submission": name, "submission_sha256": sha} for row in rows]


def test_change_is_against_the_previous_run_of_the_same_file(tmp_path):
    """A fixture's run, then yours, then the fixture's again, then yours: each run's change is
    against its own file's previous run, and each column names its file."""
    path = tmp_path / "verdicts.sqlite"
    fixture, mine = ("tests/fixtures/torch_submission.py", "f" * 64), ("/home/me/mine.py", "a" * 64)
    for (name, sha), means, time in ((fixture, [500e3, 300e3], "2026-11-20T10:00:00+00:00"),
                                     (mine, [120e3, 60e3], "2026-11-20T11:00:00+00:00"),
                                     (fixture, [510e3, 303e3], "2026-11-20T12:00:00+00:00"),
                                     (mine, [100e3, 66e3], "2026-11-20T13:00:00+00:00")):
        store_rows(path, of_file(run_rows(H100, means, time), name, sha))
    h100 = by_device(path)[H100]
    assert h100.change.loc[BIG].tolist()[1:] == [pytest.approx(math.nan, nan_ok=True), pytest.approx(510 / 500 - 1),
                                                 pytest.approx(100 / 120 - 1)]
    first, mine_first, _, mine_second = h100.runs
    assert mine_first not in h100.score_change
    assert h100.score_change[mine_second] == pytest.approx(((100e3 * 66e3) / (120e3 * 60e3)) ** 0.5 - 1)
    assert h100.run_label(mine_second).splitlines()[-1] == "mine.py aaaaaaaa"
    assert h100.run_label(first).splitlines()[-1] == "torch_submission.py ffffffff"
    assert "-16.7%" in run_compare("--store", str(path)).output and "+393" not in run_compare("--store", str(path)).output


def test_a_change_within_the_runs_own_errors_reads_as_noise_and_one_beyond_them_as_a_change(tmp_path):
    """Runs whose err_ns says they scatter by several per cent: a 15 % difference between two of
    them, each 6 % uncertain, is within two standard errors of the difference (17 %); the same
    difference between two runs 0.1 % uncertain is a speed-up. Each device gets its own band."""
    path = tmp_path / "verdicts.sqlite"
    for device, error in ((H100, 1e-3), (B200, 0.06)):
        for means, time, sha in (([100e3, 60e3], "2026-11-20T10:00:00+00:00", "a" * 64), ([85e3, 51e3], "2026-11-20T11:00:00+00:00", "b" * 64)):
            store_rows(path, of_file(run_rows(device, means, time, relative_error=error), "mine.py", sha))
    devices = by_device(path)
    noisy, steady = devices[B200], devices[H100]
    assert noisy.band.loc[BIG].iloc[1] == pytest.approx(2 * math.hypot(0.06, 0.06))
    assert steady.band.loc[BIG].iloc[1] == pytest.approx(NOISE_FRACTION)
    geomean_error = math.hypot(0.06, 0.06) / 2  # two shapes' errors in quadrature over their count
    assert noisy.score_band[noisy.runs[1]] == pytest.approx(2 * math.hypot(geomean_error, geomean_error))
    output = run_compare("--store", str(path)).output
    output = output[:output.index("runs headed")]  # the tables, without the legend under them
    starts = sorted((output.index(f"nvfp4_gemm on {device}"), device) for device in (H100, B200))
    tables = {device: output[start:end] for (start, device), (end, _) in zip(starts, starts[1:] + [(len(output), None)])}
    assert "-15.0% ±17%" in tables[B200]
    assert "-15.0%" in tables[H100] and "±" not in tables[H100]


def cpu_rows(means, time: str, relative_error: float) -> list[dict]:
    """A CPU run's rows as the benchmark command records them there: no ceilings, no SOL."""
    return [{**row, "device": "cpu", "ceilings": "", "peak_flops": None, "bandwidth": None, "pct_sol": None, "sol_ns": None}
            for row in run_rows(H100, means, time, relative_error=relative_error)]


def test_a_cpus_scatter_between_runs_of_one_file_reads_as_noise_though_each_run_is_sure_of_itself(tmp_path):
    """The same file benchmarked three times on a CPU: 1173, 1401 and 1207 µs, each within 1 to
    2.4 % by its own error. Those errors say nothing of the scatter between runs (the machine's
    load moves every call of a run alike), so the changes (+19 %, -14 %) are noise: no green, no red."""
    path = tmp_path / "verdicts.sqlite"
    for mean, error, time in ((1173.5e3, 0.012, "2026-12-03T03:54:09+00:00"), (1400.6e3, 0.024, "2026-12-03T03:55:06+00:00"),
                              (1207.3e3, 0.014, "2026-12-03T03:56:23+00:00")):
        store_rows(path, cpu_rows([mean, mean / 2], time, error))
    cpu = by_device(path)["cpu"]
    assert cpu.noise_floor >= CPU_NOISE_FRACTION
    output = run_compare("--store", str(path)).output
    assert "+19.4%" in output and "-13.8%" in output
    assert "[green]" not in run_compare_markup(path) and "[red]" not in run_compare_markup(path)
    assert "is noise here" in output


def run_compare_markup(path: Path) -> str:
    """The change cells as compare marks them up (colour names, not terminal codes)."""
    from harness.results.compare import _change_text
    history = by_device(path)["cpu"]
    return " ".join(_change_text(history.change.at[shape, run], history.band.at[shape, run])
                    for shape in history.shapes for run in history.runs)


def test_a_devices_own_repeated_runs_widen_its_band_to_their_scatter(tmp_path):
    """A GPU whose runs of one file, by one kit, scatter by 5 % (a shared or throttled card): a
    later 8 % change of another file there is within that noise, not a change."""
    path = tmp_path / "verdicts.sqlite"
    same = ("tests/fixtures/torch_submission.py", "f" * 64)
    for means, time in (([100e3, 60e3], "2026-11-20T10:00:00+00:00"), ([105e3, 63e3], "2026-11-20T10:10:00+00:00"),
                        ([95e3, 57e3], "2026-11-20T10:20:00+00:00")):
        store_rows(path, at_commit(of_file(run_rows(H100, means, time), *same), "0123abc"))
    # The same file again with a kit being edited: its scatter may be the edit's, so it is not counted.
    store_rows(path, at_commit(of_file(run_rows(H100, [150e3, 90e3], "2026-11-20T10:30:00+00:00"), *same), "0123abc-dirty"))
    store_rows(path, at_commit(of_file(run_rows(H100, [50e3, 30e3], "2026-11-20T10:40:00+00:00"), *same), "0123abc-dirty"))
    for means, time, sha in (([100e3, 60e3], "2026-11-20T11:00:00+00:00", "a" * 64), ([92e3, 55.2e3], "2026-11-20T11:10:00+00:00", "b" * 64)):
        store_rows(path, at_commit(of_file(run_rows(H100, means, time), "/home/me/mine.py", sha), "0123abc"))
    h100 = by_device(path)[H100]
    logs = [math.log(m) for m in (100, 105, 95)]
    sample_std = math.sqrt(sum((x - sum(logs) / 3) ** 2 for x in logs) / 2)
    assert h100.repeat_scatter == pytest.approx(sample_std)
    assert h100.noise_floor == pytest.approx(NOISE_SIGMAS * math.sqrt(2) * sample_std)
    assert h100.band.loc[BIG, h100.runs[-1]] == pytest.approx(h100.noise_floor) and h100.noise_floor > 0.08
    assert "scatter by 5%" in run_compare("--store", str(path)).output


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(1.0, 1e6), min_size=1, max_size=5), min_size=1, max_size=4))
def test_repeat_scatter_is_the_pooled_standard_deviation_of_log_means(sets):
    """Sets of repeated runs of one shape: the pooled sample deviation of their log means, each
    set about its own centre (a set of one adds nothing); none where nothing ran twice."""
    columns = [value for values in sets for value in values]
    mean = pandas.DataFrame([columns], columns=range(len(columns)))
    repeats, start = [], 0
    for values in sets:
        repeats.append(list(range(start, start + len(values))))
        start += len(values)
    squares = sum(sum((math.log(v) - sum(map(math.log, values)) / len(values)) ** 2 for v in values) for values in sets)
    freedom = sum(len(values) - 1 for values in sets)
    found = repeat_scatter(mean, repeats)
    if freedom == 0:
        assert math.isnan(found)
    else:
        assert found == pytest.approx(math.sqrt(squares / freedom), abs=1e-12)


# A shape's runs, each its mean (None: the run did not measure it) and its relative error.
measured_runs = st.lists(st.lists(st.one_of(st.none(), st.tuples(st.floats(1.0, 1e6), st.floats(0.0, 0.5))),
                                  min_size=1, max_size=6), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None)
@given(measured_runs)
def test_each_change_and_its_band_are_against_the_previous_run_that_measured_the_shape(shapes):
    """Runs that skipped a shape (a failure, a sweep of other shapes) are stepped over alike by the
    change and by its band: both set a run's mean against the last one measured before it."""
    runs = max(map(len, shapes))
    cells = [row + [None] * (runs - len(row)) for row in shapes]
    mean = pandas.DataFrame([[math.nan if cell is None else cell[0] for cell in row] for row in cells])
    relative_error = pandas.DataFrame([[math.nan if cell is None else cell[1] for cell in row] for row in cells])
    change, band = DeviceHistory._changes(mean), DeviceHistory._bands(mean, relative_error)
    for shape, row in enumerate(cells):
        before = None
        for run, cell in enumerate(row):
            if cell is not None and before is not None:
                assert change.iat[shape, run] == pytest.approx(cell[0] / before[0] - 1)
                assert band.iat[shape, run] == pytest.approx(noise_band(cell[1], before[1]))
            else:
                assert math.isnan(change.iat[shape, run]) and math.isnan(band.iat[shape, run])
            before = cell if cell is not None else before


def test_runs_recorded_with_long_and_short_hashes_show_them_at_one_length(tmp_path):
    path = tmp_path / "verdicts.sqlite"
    for commit, time in (("0123456789ab-dirty", "2026-11-20T10:00:00+00:00"), ("fedcba9", "2026-11-20T11:00:00+00:00")):
        store_rows(path, [{**row, "commit": commit} for row in run_rows(H100, [100e3, 60e3], time)])
    h100 = by_device(path)[H100]
    assert [h100.run_label(run).splitlines()[2] for run in h100.runs] == ["0123456-dirty", "fedcba9"]


def test_a_band_is_never_narrower_than_event_timings_noise_and_an_unknown_error_gets_that_floor():
    assert noise_band(0.0, 0.0) == NOISE_FRACTION
    assert noise_band(math.nan, 0.2) == NOISE_FRACTION
    assert noise_band(0.03, 0.04) == pytest.approx(NOISE_SIGMAS * 0.05)


def test_the_device_of_your_latest_run_is_shown_first(tmp_path):
    """Reference runs on GPUs, then yours on the CPU: the CPU's table comes first."""
    reference, store = tmp_path / "reference.csv", tmp_path / "verdicts.sqlite"
    record_run(reference, H100, [80e3, 50e3], "2026-11-21T12:00:00+00:00")
    record_run(reference, B200, [20e3, 6e3], "2026-11-21T13:00:00+00:00")
    store_run(store, B200, [30e3, 9e3], "2026-11-20T10:00:00+00:00")
    store_rows(store, of_file([{**row, "device": "cpu"} for row in run_rows(H100, [9e6, 4e6], "2026-11-22T10:00:00+00:00")],
                              "mine.py", "a" * 64))
    output = run_compare("--store", str(store), "--reference", str(reference), reference=True).output
    titles = re.findall(r"^nvfp4_gemm on (.+?)\s*$", output, flags=re.MULTILINE)
    assert titles == ["cpu", B200, H100], output


def test_an_80_column_terminal_keeps_every_figure_whole_and_names_the_runs_left_out(history_store, tmp_path):
    from harness.results.compare import history_table

    reference = tmp_path / "reference.csv"
    record_run(reference, H100, [80e3, 50e3], "2026-11-21T12:00:00+00:00")
    (h100, *_) = histories(load_history(("yours", runs_table(stored_runs(history_store))), ("reference", reference)))
    console = Console(width=80, record=True)
    console.print(history_table(h100))
    text = console.export_text()
    assert "…" not in text and max(map(len, text.splitlines())) <= 80, text
    assert "90.000 µs" in text and "55.000 µs" in text  # your latest run, whole
    joined = " ".join(text.split())
    assert "left out to fit 80 columns: #0 yours, #2 yours, #3 reference (a wider terminal or a pipe shows them)" in joined
    assert "% SOL of every run at 989 TFLOP/s and 3.35 TB/s: run #" in joined


def test_an_official_run_is_compared_only_with_the_files_official_runs(tmp_path):
    """The judge's figures, then --official's (the competition's, other clocks), then the judge's
    again: no change is set across the two kinds, and the label says which a run is."""
    path = tmp_path / "verdicts.sqlite"
    for means, time, official in (([120e3, 60e3], "2026-11-20T10:00:00+00:00", False),
                                  ([30e3, 15e3], "2026-11-20T11:00:00+00:00", True),
                                  ([100e3, 66e3], "2026-11-20T12:00:00+00:00", False),
                                  ([33e3, 15e3], "2026-11-20T13:00:00+00:00", True)):
        store_rows(path, [{**row, "official": official} for row in run_rows(H100, means, time)])
    h100 = by_device(path)[H100]
    first, official_first, second, official_second = h100.runs
    assert math.isnan(h100.change.loc[BIG, official_first])
    assert h100.change.loc[BIG, second] == pytest.approx(100 / 120 - 1)
    assert h100.change.loc[BIG, official_second] == pytest.approx(33 / 30 - 1)
    assert "benchmark --official" in h100.run_label(official_first) and "--official" not in h100.run_label(first)
