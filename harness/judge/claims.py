"""The one gate every number a worker sends passes before the judge uses it.

The worker runs the submission, so each number in its replies is the submission's to choose: a
batch's time and its host time (every round), the baselines' rounds, the ceilings it measures,
the timestamps of its GPU activity, the line a raised exception names. Each is read here, as it
arrives, as what it must be: a number of its kind within the range every honest value lies in,
or refused with wire.UntrustedMessageError naming the claim, which fails the case
(harness/judge/modes.py). Another type (a bool, a string, None), nan, an infinity, a negative, a
subnormal, an int no float holds and a value past the range are all refused alike.

Within these ranges every sum, square, ratio and count that the statistics, the stopping rule,
the progress line, the verdicts, the report and the --json document form stays finite, so no
claim, and no mix of claims across rounds, can end the judge with an arithmetic error
(tests/test_claims.py drives arbitrary claims through all of them).

A problem folder's eval run whole (harness/judge/folder_eval.py) sends text, not numbers: its
`key: value` lines pass `eval_lines` and each case's figures `eval_stats`, alike.
"""

import re

from harness.shared.stats import Stats
from harness.shared.wire import UntrustedMessageError

# A time in ns is 0 or within [SHORTEST_NS, LONGEST_NS]. The worker's clocks tick no finer than a
# nanosecond (perf_counter_ns counts whole ones, CUDA events about half a microsecond), so a time
# below one is no reading; 0 is one: events recorded back to back, as the calibration partner's
# batch, which holds no work, may read (a submission's batch claimed at 0 fails in the figures'
# verdict, harness/judge/verdicts.py). LONGEST_NS is days, past any case's time limit; its square
# summed over a million rounds is far inside a float.
SHORTEST_NS = 1.0
LONGEST_NS = 1e15
# A measured ceiling (FLOP/s, bytes/s): above 1 and below a million times any GPU's.
LEAST_RATE = 1.0
MOST_RATE = 1e22
# A line of a source file.
MOST_LINES = 10**7
# The rounds a case's figures may count.
MOST_ROUNDS = 10**9
# A number as Python prints an int or a float, at most 64 characters (no nan, no inf).
NUMBER_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
NUMBER_CHARACTERS = 64


def _number(value, what: str) -> float:
    if type(value) not in (int, float):  # a bool is an int to isinstance, not to type
        raise UntrustedMessageError(f"the worker reported {what} as {type(value).__name__}, which is no number")
    try:
        return float(value)
    except OverflowError:
        raise UntrustedMessageError(f"the worker reported {what} beyond a float's range") from None


def batch_ns(value, what: str) -> float:
    """A batch's time in ns as the worker's own clock read it: 0, or SHORTEST_NS to LONGEST_NS."""
    number = _number(value, what)
    if number == 0:
        return 0.0  # -0.0 included
    if not SHORTEST_NS <= number <= LONGEST_NS:  # nan compares false
        raise UntrustedMessageError(f"the worker reported {what} as {number!r} ns: no time a clock reads (0, or "
                                    f"{SHORTEST_NS:g} to {LONGEST_NS:g} ns)")
    return number


def call_ns(value, what: str) -> float:
    """A timed call's time in ns (a baseline's round): SHORTEST_NS to LONGEST_NS, never 0, since
    every such call does work."""
    number = batch_ns(value, what)
    if number == 0:
        raise UntrustedMessageError(f"the worker reported {what} as 0 ns: no time a call that does work takes")
    return number


def rate(value, what: str) -> float:
    """A measured ceiling, per second: LEAST_RATE to MOST_RATE."""
    number = _number(value, what)
    if not LEAST_RATE <= number <= MOST_RATE:
        raise UntrustedMessageError(f"the worker reported {what} as {number!r} per second: no rate a GPU reaches "
                                    f"({LEAST_RATE:g} to {MOST_RATE:g})")
    return number


def line_number(value) -> int:
    """The line of its own file an exception was raised at: 0 (none) to MOST_LINES."""
    if type(value) is not int or not 0 <= value <= MOST_LINES:
        raise UntrustedMessageError(f"the worker named the line it raised at as no line of a file ({type(value).__name__})")
    return value


def activity(records) -> list | None:
    """A round's GPU activity: None, or (name, queue, start ns, end ns) records of two strings and
    two unsigned 64-bit ints (CUPTI's timestamps)."""
    if records is None:
        return None
    if not isinstance(records, list):
        raise UntrustedMessageError(f"the worker reported GPU activity as {type(records).__name__}")
    checked = []
    for record in records:
        if not (isinstance(record, (tuple, list)) and len(record) == 4 and all(type(part) is str for part in record[:2])
                and all(type(part) is int and 0 <= part < 2**64 for part in record[2:])):
            raise UntrustedMessageError(f"the worker reported a GPU activity that is no (name, queue, start, end) record "
                                        f"({str(type(record).__name__)})")
        checked.append(tuple(record))
    return checked


def eval_lines(text: str) -> dict[str, str]:
    """The `key: value` lines a folder's eval wrote, read as the competition's runner reads them:
    split at the first colon, both sides stripped, a later line of a key in place of an earlier
    one; a line with no colon is none of them."""
    lines = {}
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip():
            lines[key.strip()] = value.strip()
    return lines


def _eval_number(lines: dict[str, str], key: str) -> float:
    text = lines.get(key)
    if text is None:
        raise UntrustedMessageError(f"the eval wrote no {key}")
    if len(text) > NUMBER_CHARACTERS or not NUMBER_TEXT.fullmatch(text):
        raise UntrustedMessageError(f"the eval wrote {key} as {text[:NUMBER_CHARACTERS]!r}, which is no number")
    try:
        return float(text)
    except (OverflowError, ValueError):
        raise UntrustedMessageError(f"the eval wrote {key} beyond a float's range") from None


def eval_stats(lines: dict[str, str], prefix: str) -> Stats:
    """A case's figures as its eval wrote them, each field `PREFIX.FIELD` (`benchmark.3.mean`), in
    ns: the rounds a whole count from 1 to MOST_ROUNDS; the mean a call's time (SHORTEST_NS to
    LONGEST_NS); the best and the worst a clock's reading (0 too); the spread and its error 0 to
    LONGEST_NS. Anything else is refused with UntrustedMessageError naming the field."""
    runs = _eval_number(lines, f"{prefix}.runs")
    if not (runs.is_integer() and 1 <= runs <= MOST_ROUNDS):
        raise UntrustedMessageError(f"the eval wrote {prefix}.runs as {runs!r}: no count of rounds (1 to {MOST_ROUNDS:g})")
    spreads = {}
    for field in ("std", "err"):
        spreads[field] = _eval_number(lines, f"{prefix}.{field}")
        if not 0 <= spreads[field] <= LONGEST_NS:
            raise UntrustedMessageError(f"the eval wrote {prefix}.{field} as {spreads[field]!r} ns: no spread of times "
                                        f"(0 to {LONGEST_NS:g} ns)")
    return Stats(runs=int(runs), mean=call_ns(_eval_number(lines, f"{prefix}.mean"), f"{prefix}.mean"),
                 std=spreads["std"], err=spreads["err"],
                 best=batch_ns(_eval_number(lines, f"{prefix}.best"), f"{prefix}.best"),
                 worst=batch_ns(_eval_number(lines, f"{prefix}.worst"), f"{prefix}.worst"))
