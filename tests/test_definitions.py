"""What the harness defines once: each exit status, the sanitizer's environment flag, the rules."""

import dataclasses
import re
from pathlib import Path

import harness
from harness.jobs import Rules

HARNESS = Path(harness.__file__).resolve().parent
SOURCES = {path.relative_to(HARNESS).as_posix(): path.read_text() for path in HARNESS.rglob("*.py")}


def test_every_exit_status_is_defined_in_exits_py_alone():
    defining = sorted(name for name, text in SOURCES.items() if re.search(r"^EXIT_\w+ = ", text, re.M))
    assert defining == ["exits.py"]


def test_the_sanitizer_flag_is_named_once():
    naming = sorted(name for name, text in SOURCES.items() if "NVFP4_HARNESS_UNDER_SANITIZER" in text)
    assert naming == ["runner/calls.py"]


def test_the_rules_are_one_switch_read_as_itself():
    assert [field.name for field in dataclasses.fields(Rules)] == ["strict"]
    assert not [name for name, value in vars(Rules).items() if isinstance(value, property)]


def test_no_docstring_names_a_class_the_harness_lacks():
    defined = {name for text in SOURCES.values() for name in re.findall(r"^\s*class (\w+)", text, re.M)}
    named = {name for text in SOURCES.values() for name in re.findall(r"`([A-Z][a-z]+(?:[A-Z][a-z]+)+)`", text)}
    assert named <= defined, named - defined
