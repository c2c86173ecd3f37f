"""Set-up is one way, the README's, in CI too, and asks no host but the package index."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_setup_names_no_index_url():
    commands = subprocess.run(["make", "-n", "setup", "PYTHON=python-that-is-not-run"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
    assert "pip install" in commands and "-e \".[test]\"" in commands
    assert "index-url" not in commands and "http" not in commands


def test_ci_sets_up_with_the_readmes_command():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make setup TORCH=torch==2.13.0" in ci
    assert "python3 -m venv .venv && . .venv/bin/activate\nmake setup" in readme
