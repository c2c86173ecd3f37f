"""How many broken submissions and bad inputs the referee tests really tried.

Printed in pytest's terminal summary, so every run (CI or a GPU machine) states how much of the
anti-cheat suite ran there and how much was skipped for want of a GPU.
"""

from __future__ import annotations

import pytest


MAX_NAMED_SKIPS = 3  # more are counted only; `pytest -rs` lists every skip with its reason


class RefereeTally:
    plugin_name = "referee-tally"

    def __init__(self) -> None:
        # kind -> case names (dicts keep insertion order); a case counts once however many
        # checks it went through, and as skipped only if no check of it ran.
        self.tried: dict[str, dict[str, None]] = {}
        self.skipped: dict[str, dict[str, None]] = {}
        # (threat, fixture) -> {(mode, device): observed status, with its message's gist}
        self.verdicts: dict[tuple[str, str], dict[tuple[str, str], str]] = {}

    def record(self, kind: str, case: str) -> None:
        self.tried.setdefault(kind, {})[case] = None

    def record_skip(self, kind: str, case: str) -> None:
        self.skipped.setdefault(kind, {})[case] = None

    def record_verdict(self, threat: str, fixture: str, mode: str, device: str, verdict: str) -> None:
        self.verdicts.setdefault((threat, fixture), {})[(mode, device)] = verdict

    def referee_table(self) -> list[str]:
        """One line per threat and fixture: the verdict seen in each mode on each device."""
        lines = []
        for (threat, fixture), seen in sorted(self.verdicts.items()):
            cells = "; ".join(f"{mode} on {device}: {verdict}" for (mode, device), verdict in sorted(seen.items()))
            lines.append(f"{threat} | {fixture} | {cells}")
        return lines

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.verdicts:
            terminalreporter.section("referee table (threat | fixture | verdicts seen)")
            for line in self.referee_table():
                terminalreporter.write_line(line)
        terminalreporter.section("referee tally")
        for kind in sorted(set(self.tried) | set(self.skipped)):
            tried = list(self.tried.get(kind, {}))
            skipped = [case for case in self.skipped.get(kind, {}) if case not in tried]
            terminalreporter.write_line(
                f"{kind}: {len(tried)} tried, {len(skipped)} skipped"
                + (f" ({', '.join(skipped)})" if 0 < len(skipped) <= MAX_NAMED_SKIPS else "")
            )


def referee_tally(config: pytest.Config) -> RefereeTally:
    """The session's tally, registered as a plugin the first time a referee test asks for it."""
    tally = config.pluginmanager.get_plugin(RefereeTally.plugin_name)
    if tally is None:
        tally = RefereeTally()
        config.pluginmanager.register(tally, RefereeTally.plugin_name)
    return tally
