"""Every target's stdout is its commands' alone: make echoes no recipe line, so `make check
ARGS=--json` prints the judge's document and nothing before it, and a target's notes go to stderr."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKE = shutil.which("make")
COMMAND_OUTPUT = "what the command printed"

pytestmark = pytest.mark.skipif(MAKE is None, reason="no make on this machine")


def phony_targets() -> list[str]:
    (line,) = re.findall(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.MULTILINE)
    return line.split()


def test_the_phony_list_holds_every_target():
    defined = re.findall(r"^([a-z][a-z0-9-]*):(?!=)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert sorted(defined) == sorted(phony_targets())


@pytest.mark.parametrize("target", phony_targets())
def test_a_targets_stdout_is_its_commands_alone(tmp_path, target):
    """PYTHON and every program a recipe calls are scripts that print one line; PATH holds
    nothing else, so no recipe reaches the machine's pip, apt or GPU (b200-first-run's shell and
    mkdir, which write its log under results/logs, are such scripts too)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "compute-sanitizer", "bwrap", "bash", "mkdir"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho '{COMMAND_OUTPUT}'\n")
        (bin_dir / name).chmod(0o755)
    run = subprocess.run([MAKE, target, f"PYTHON={bin_dir / 'python'}", "ARGS=--json"], cwd=ROOT,
                         env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert set(lines) <= {COMMAND_OUTPUT}, run.stdout
    # sandbox-tools calls none of the scripts here (apt-get is not on PATH): it only notes so, on stderr.
    assert lines or (target == "sandbox-tools" and "install bubblewrap" in run.stderr)
