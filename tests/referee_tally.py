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

    def record(self, kind: str, case: str) -> None:
        self.tried.setdefault(kind, {})[case] = None

    def record_skip(self, kind: str, case: str) -> None:
        self.skipped.setdefault(kind, {})[case] = None

    def pytest_terminal_summary(self, terminalreporter) -> None:
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
