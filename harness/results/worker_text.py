"""What a worker said, made readable: terminal escapes stripped, line boundaries other than
"\\n" escaped, the harness's own traceback frames left out, the runner folder's copy of the
submission named by the user's path, and the check's mismatch lines labelled. The people's
report (harness/results/console.py) and the --json document (harness/results/document.py) both show it so."""

import ast
import importlib
import re
from pathlib import Path

import harness

# Terminal control sequences (CSI colours and cursor moves, OSC titles and links, two-byte
# escapes): CuTeDSL colours its messages, and inside a panel they show as raw bytes. An escape
# byte that starts none of these goes alone: followed by another byte it is still a command to a
# terminal (ESC c resets it).
ANSI_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])?")
# Frames of the harness's own code and of the import machinery say nothing about the user's file.
HIDDEN_FRAME_FILES = (str(Path(harness.__file__).resolve().parent) + "/", str(Path(importlib.__file__).resolve().parent) + "/",
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


# The competition's check names a mismatch `ERROR AT (i, j, l): <got> <expected>`.
MISMATCH = re.compile(r"\s*ERROR AT (\([^)]*\)): (\S+) (\S+)(?=\s|$)")


# The grouped problem's check names the group that failed by its bare index, then its reasons as
# a Python list: `mismatch found! ...: 1 ['Number of mismatched elements: 3', 'ERROR AT ...']`.
GROUP_MISMATCH = re.compile(r"(mismatch found![^:]*: )(\d+) (\[.*\])", re.DOTALL)


def _group_named(message: str) -> str:
    """A grouped check's message with its group named and its reasons as the other problems'
    checks give theirs (joined by spaces); any other message as it is."""
    found = GROUP_MISMATCH.fullmatch(message)
    if found is None:
        return message
    try:
        reasons = ast.literal_eval(found[3])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return message
    if not isinstance(reasons, list) or not all(isinstance(reason, str) for reason in reasons):
        return message
    return f"{found[1]}group {found[2]} (counting from 0): " + " ".join(reasons)


def labelled_mismatches(message: str) -> str:
    """The check's mismatch lines with their two numbers named, one a line, and a grouped check's
    group named: what the judge shows and the --json document's `message` (its
    `competition_message`, POPCORN_FD's lines and everything under --official keep the
    competition's text)."""
    return MISMATCH.sub(lambda found: f"\nERROR AT {found[1]}: got {found[2]}, expected {found[3]}", _group_named(message))
