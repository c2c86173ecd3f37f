"""Static hack detection before anything runs: kernelguard's rules, which GPU MODE's bot applies
to every submission, read from the file without importing it.

kernelguard classifies a file from the patterns it matches: `hacked` (a rule that alone shows a
hack: a patched clock, a replaced checker, replayed outputs), `suspicious` (support signals that
come together), `low_confidence` (telemetry only, such as importing the runner's `reference`
for a constant) or `valid`. The first two make its patterns hits, each reported with its rule
name; the others' patterns are listed as notes and never fail a file. Hits warn; `--strict`
makes them fail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAGGED = frozenset({"hacked", "suspicious"})


@dataclass(frozen=True)
class Signal:
    rule: str
    severity: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.rule} ({self.evidence})"


@dataclass
class Precheck:
    classification: str  # kernelguard's, or "unavailable" where it is not installed
    hits: list[Signal] = field(default_factory=list)
    notes: list[Signal] = field(default_factory=list)

    @property
    def available(self) -> bool:
        return self.classification != "unavailable"

    def fields(self) -> dict:
        return {"classification": self.classification, "hits": [vars(s) for s in self.hits],
                "notes": [vars(s) for s in self.notes]}


def precheck(source: str) -> Precheck:
    try:
        import kernelguard
    except ImportError:
        return Precheck("unavailable")
    result = kernelguard.analyze_code(source, compute_structural_hash=False)
    signals = [Signal(match["pattern"], match.get("severity", ""), match.get("evidence", ""))
               for match in result["matched_patterns"] if match.get("field") == "code"]
    if result["classification"] in FLAGGED:
        return Precheck(result["classification"], hits=signals)
    return Precheck(result["classification"], notes=signals)
