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

import importlib.util
import json
import subprocess
import sys
from dataclasses import dataclass, field

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


def precheck(source: str, limit_s: float | None = None) -> Precheck:
    """kernelguard's reading of `source`, within `limit_s` (LIMIT_S by default)."""
    if importlib.util.find_spec("kernelguard") is None:
        return Precheck("unavailable")
    limit_s = LIMIT_S if limit_s is None else limit_s
    try:
        ran = subprocess.run([sys.executable, "-I", "-c", _ANALYZE], input=source.encode("utf-8", "replace"),
                             capture_output=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        return Precheck(UNFINISHED, unfinished=f"did not finish within its {limit_s:g} s limit")
    if ran.returncode != 0:
        said = ran.stderr.decode("utf-8", "replace").strip().splitlines()
        return Precheck(UNFINISHED, unfinished=f"failed on the file ({said[-1][:200] if said else f'exit status {ran.returncode}'})")
    result = json.loads(ran.stdout)
    signals = [Signal(match["pattern"], match["severity"], match["evidence"])
               for match in result["matched_patterns"] if match["field"] == "code"]
    if result["classification"] in FLAGGED:
        return Precheck(result["classification"], hits=signals)
    return Precheck(result["classification"], notes=signals)
