"""Static hack detection before anything runs: kernelguard's rules, which GPU MODE's bot applies
to every submission, read from the file without importing it.

kernelguard classifies a file from the patterns it matches: `hacked` (a rule that alone shows a
hack: a patched clock, a replaced checker, replayed outputs), `suspicious` (support signals that
come together), `low_confidence` (telemetry only, such as importing the runner's `reference`
for a constant) or `valid`. The first two make its patterns hits, each reported with its rule
name; the others' patterns are listed as notes and never fail a file. Hits warn; `--strict`
makes them fail.

kernelguard's rules are regular expressions whose time grows faster than a file's length, with
the square of its longest word (a run of letters, digits and underscores: a hex blob, a long
number), so it reads the file in a process of its own, ended at a time limit; a file it did not
finish is `unfinished`, which warns like a hit, and fails like one under `--strict`.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from harness.judge import judge_user

FLAGGED = frozenset({"hacked", "suspicious"})
UNFINISHED = "unfinished"
# Seconds kernelguard may read a file: this kit's submission.py (100 KB) takes about a second.
LIMIT_S = 60.0
# The process that reads the file: kernelguard and the standard library only, the file on stdin.
_ANALYZE = """
import json, sys
import kernelguard
result = kernelguard.analyze_code(sys.stdin.buffer.read().decode("utf-8"), compute_structural_hash=False)
json.dump({"classification": str(result["classification"]),
           "matched_patterns": [{key: str(match.get(key, "")) for key in ("pattern", "severity", "evidence", "field")}
                                for match in result["matched_patterns"]]}, sys.stdout)
"""


@dataclass(frozen=True)
class Signal:
    rule: str
    severity: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.evidence})"


@dataclass
class Precheck:
    classification: str  # kernelguard's, "unavailable" where it is not installed, or UNFINISHED
    hits: list[Signal] = field(default_factory=list)
    notes: list[Signal] = field(default_factory=list)
    unfinished: str = ""  # UNFINISHED: why kernelguard gave no classification (its time limit, its failure)

    @property
    def available(self) -> bool:
        return self.classification != "unavailable"

    @property
    def refusal(self) -> str:
        """Why --strict refuses the file, or nothing."""
        if self.unfinished:
            return f"kernelguard {self.unfinished}"
        return "kernelguard flagged the file" if self.hits else ""

    def fields(self) -> dict:
        return {"classification": self.classification, "hits": [vars(s) for s in self.hits],
                "notes": [vars(s) for s in self.notes], "unfinished": self.unfinished}


def _reader_import_path() -> list[str]:
    """The judge's import path (a PYTHONPATH entry included, where kernelguard may lie) less its
    working folder, which `python -m` puts first and where the file judged may lie: a file named
    kernelguard.py, or after a module kernelguard imports, would be the reader's, run as root
    outside any sandbox."""
    working = os.path.realpath(os.getcwd())
    return [entry for entry in sys.path if entry and os.path.isabs(entry) and os.path.realpath(entry) != working]


def kernelguard_found() -> bool:
    """Whether the reader finds kernelguard (`_reader_import_path`)."""
    return importlib.machinery.PathFinder.find_spec("kernelguard", _reader_import_path()) is not None


def start_reader() -> subprocess.Popen:
    """A kernelguard process, its interpreter up and kernelguard imported, waiting for its file on
    stdin: it reads one file. Isolated (no environment variable, working folder or user site
    reaches its imports), with the judge's own import path less its working folder
    (`_reader_import_path`). As root where a root judge changed its user: the interpreter's
    packages may be root's alone."""
    import_path = _reader_import_path()
    return subprocess.Popen([sys.executable, "-I", "-c", f"import sys\nsys.path[:] = {import_path!r}\n{_ANALYZE}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=judge_user.regain_root)


class ReaderAhead:
    """The next file's kernelguard process, started before the file is known (the service's
    judge): a candidate's static check then waits for no interpreter's start and no import. Each
    process reads one file; the next starts as one is taken, and one that ended while it waited
    is replaced by a fresh one, never handed a file."""

    def __init__(self):
        self._next = start_reader() if kernelguard_found() else None

    def take(self) -> subprocess.Popen:
        """A started process no file has reached."""
        if self._next is None:
            return start_reader()
        taken, self._next = self._next, start_reader()
        if taken.poll() is not None:
            taken.communicate()
            taken = start_reader()
        return taken

    @property
    def pids(self) -> set[int]:
        """The waiting process's: kept from the sweeps of a run's strays."""
        return {self._next.pid} if self._next is not None and self._next.poll() is None else set()

    def close(self) -> None:
        if self._next is not None:
            self._next.kill()
            self._next.communicate()
            self._next = None


def precheck(source: str, limit_s: float | None = None, reader=start_reader) -> Precheck:
    """kernelguard's reading of `source`, within `limit_s` (LIMIT_S by default), by the process
    `reader()` gives (one started now, or ReaderAhead.take's)."""
    if not kernelguard_found():
        return Precheck("unavailable")
    limit_s = LIMIT_S if limit_s is None else limit_s
    reader = reader()
    try:
        output, errors = reader.communicate(source.encode("utf-8", "replace"), timeout=limit_s)
    except subprocess.TimeoutExpired:
        reader.kill()
        reader.communicate()
        return Precheck(UNFINISHED, unfinished=f"did not finish within its {limit_s:g} s limit")
    if reader.returncode != 0:
        said = errors.decode("utf-8", "replace").strip().splitlines()
        return Precheck(UNFINISHED, unfinished=f"failed on the file ({said[-1][:200] if said else f'exit status {reader.returncode}'})")
    result = json.loads(output)
    signals = [Signal(match["pattern"], match["severity"], match["evidence"])
               for match in result["matched_patterns"] if match["field"] == "code"]
    if result["classification"] in FLAGGED:
        return Precheck(result["classification"], hits=signals)
    return Precheck(result["classification"], notes=signals)
