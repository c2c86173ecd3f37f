"""Tables fitted to the terminal (harness/results/tables.py): the cost model's and the compile check's at
80 columns keep every figure whole, leave out whole columns and name them; piped, nothing is
left out."""

import io
import re

import pytest
from rich.console import Console
from rich.table import Table

from harness.b200 import model, report as b200_report
from harness.results.tables import Fitted
from harness.submitting import compile as checker

FIGURE = re.compile(r"(?<![\w.+-])[-+]?\d[\d,]*(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?![\w.])")


def render(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(renderable)
    return console.file.getvalue()


def figures(text: str) -> list[str]:
    return sorted(FIGURE.findall(text))


def assert_fits(text: str, width: int) -> None:
    assert "…" not in text
    assert max(map(len, text.splitlines())) <= width, text


@pytest.fixture(scope="module")
def configs():
    import submission
    return {shape: submission.sm100_config(submission.Problem(*shape), conservative=False)
            for shape in model.BENCHMARK_SHAPES}


@pytest.mark.parametrize("name", ["constants", "calibration", "predictions", "preferred", "sensitivity", "levers"])
def test_every_model_table_fits_80_columns_with_its_figures_whole(name, configs):
    make = getattr(b200_report, f"{name}_table")
    fitted = make() if name in ("constants", "calibration") else make(configs)
    narrow, piped = render(fitted, 80), render(fitted, 250)
    assert_fits(narrow, 80)
    assert "left out" not in piped
    left_out = re.search(r"left out to fit 80 columns: (.*?) \(a wider", " ".join(narrow.split()))
    if left_out is None:  # every column shown: the same figures, none cut across lines
        assert figures(narrow) == figures(piped)
    else:  # the figures shown are the piped table's, whole, and the columns left out are named
        assert set(figures(narrow.split("left out to fit")[0])) < set(figures(piped))
        named = left_out[1]
        for header in sorted((column.header.splitlines()[0] for column in fitted.table.columns), key=len, reverse=True):
            named = named.replace(header, "")
        assert set(named) <= {",", " "}, left_out[1]


def test_the_predictions_table_leaves_out_its_columns_least_read_first(configs):
    narrow = " ".join(render(b200_report.predictions_table(configs), 80).split())
    assert "left out to fit 80 columns: near-optimal constants, previous model, first place, published" in narrow
    first = model.BENCHMARK_SHAPES[0]
    point = f"{model.call_seconds(model.kernel_for(configs[first]), first) * 1e6:.2f}"
    assert "model" in narrow and point in narrow  # the model's time stays


def test_a_table_no_width_can_fit_is_drawn_whole_only_by_what_it_may_leave_out():
    table = Table(title="t")
    for header in ("shape", "a", "b"):
        table.add_column(header, no_wrap=True)
    table.add_row("128x7168x16384x1", "1234567.891", "7654321.123")
    narrow = render(Fitted(table, ("b",)), 36)
    assert "1234567.891" in narrow and "7654321.123" not in narrow and "left out to fit 36 columns: b" in narrow
    assert_fits(narrow, 36)


def test_the_compile_checks_kernel_table_keeps_the_required_counts_at_80_columns():
    rules = checker.RULES["sm_100a"]
    table = Table(title="configurations compiled")
    for header in ("configuration", *(instruction.column for instruction in rules.instructions), *checker.RESOURCE_COLUMNS):
        table.add_column(header)
    for index in range(3):
        table.add_row(f"#{index}", *[str(17 + index * 100 + column) for column in range(len(rules.instructions))],
                      "168", "212,992", "512", "PASS")
    narrow = render(Fitted(table, checker.left_out_first(rules)), 80)
    assert_fits(narrow, 80)
    required = [rules.instructions.index(instruction) for instruction in (*rules.required, *rules.forbidden)]
    for index in range(3):
        assert all(str(17 + index * 100 + column) in narrow for column in required)
    assert "left out to fit 80 columns: tcgen05.mma, tcgen05.ld, TMA store, PDL wait, PDL trigger" in " ".join(narrow.split())
