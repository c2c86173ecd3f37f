"""Tables that fit the width they are drawn in: no number is ever cut. Text wraps between words,
a column never gets narrower than its longest word (a `no_wrap` column than its widest cell), and a
table that does not fit even so leaves out whole columns, least read first, and says which."""

import copy
import dataclasses
import sys
from collections.abc import Sequence

from rich.console import Console, ConsoleOptions, RenderResult
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Column, Table

# Piped to a file or a log, rich would assume 80 columns: there a table may take this much before
# it is fitted, and lines are written whole.
PIPED_WIDTH = 250


def console_for(stream=None) -> Console:
    """A console on `stream` (stdout by default): the terminal's width on a terminal, and piped,
    lines written whole and tables as wide as their cells (up to PIPED_WIDTH)."""
    stream = stream or sys.stdout
    piped = not stream.isatty()
    return Console(file=stream, highlight=False, width=PIPED_WIDTH if piped else None, soft_wrap=piped)


def _column_range(console: Console, options: ConsoleOptions, column: Column) -> tuple[int, int]:
    """The least and the natural width of `column`'s text (padding excluded)."""
    wide = options.update_width(10_000)
    measures = [Measurement.get(console, wide, cell) for cell in (column.header, *column.cells)]
    natural = max(measure.maximum for measure in measures)
    return (natural if column.no_wrap else max(measure.minimum for measure in measures)), natural


def _fixed(table: Table, widths: list[int], shown: list[Column]) -> Table:
    """A copy of `table` with only the `shown` columns, each drawn `widths` wide."""
    fitted = copy.copy(table)
    fitted.columns = [dataclasses.replace(column, width=width, _index=index)
                      for index, (column, width) in enumerate(zip(shown, widths))]
    return fitted


def _widths(ranges: list[tuple[int, int]], room: int) -> list[int] | None:
    """Column widths summing to at most `room`: every column as wide as it needs where they fit,
    else the widest narrowed first, none below its least width; None where even that is too wide."""
    if sum(least for least, _ in ranges) > room:
        return None
    widths = [natural for _, natural in ranges]
    while sum(widths) > room:
        narrowable = [index for index, (least, _) in enumerate(ranges) if widths[index] > least]
        widest = max(narrowable, key=lambda index: widths[index])
        widths[widest] -= 1
    return widths


@dataclasses.dataclass
class Fitted:
    """`table` drawn in the width it is given: columns from `left_out_first` left out, in that
    order, only while the rest cannot fit; a dim line names them and what would show them."""
    table: Table
    left_out_first: Sequence[str] = ()
    shown_by: str = "a wider terminal or a pipe"

    def _frame_width(self, columns: int) -> int:
        """What `columns` columns take besides their text: their padding and the vertical rules."""
        padding = self.table.padding[1] + self.table.padding[3]
        rules = columns + 1 if self.table.box and self.table.show_edge else columns - 1 if self.table.box else 0
        return padding * columns + rules

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        shown = list(self.table.columns)
        left_out = []
        queue = [header for header in self.left_out_first if any(column.header == header for column in shown)]
        while True:
            ranges = [_column_range(console, options, column) for column in shown]
            widths = _widths(ranges, options.max_width - self._frame_width(len(shown)))
            if widths is not None or not queue:
                break
            header = queue.pop(0)
            left_out.append(header)
            shown = [column for column in shown if column.header != header]
        if widths is None:  # nothing more to leave out: rich folds what does not fit
            widths = [natural for _, natural in ranges]
        yield _fixed(self.table, widths, shown)
        if left_out:
            names = ", ".join(column.header.splitlines()[0]  # a header of several lines by its first
                              for column in self.table.columns if column.header in left_out)
            yield f"[dim]left out to fit {options.max_width} columns: {escape(names)} ({self.shown_by} shows them)[/dim]"
