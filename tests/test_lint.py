"""The static lint: each check fires on the fault it names, and only on it."""

from pathlib import Path

from harness.submitting.lint import FAIL, MAX_BYTES, PASS, WARN, failed, lint_bytes

CLEAN = """#!POPCORN leaderboard nvfp4_gemm
#!POPCORN gpu NVIDIA
import functools
import numpy as np
import torch
from cutlass import cute
from cuda.bindings import driver


def custom_kernel(data):
    return data[-1]
"""


def levels(source: str | bytes) -> dict[str, str]:
    data = source.encode() if isinstance(source, str) else source
    return {f.check: f.level for f in lint_bytes(data)}


def detail(source: str, check: str) -> str:
    return next(f.detail for f in lint_bytes(source.encode()) if f.check == check)


def test_clean_file_passes_every_check():
    found = levels(CLEAN)
    assert set(found) == {"size", "forbidden word", "header leaderboard", "header gpu", "custom_kernel", "imports", "kernelguard"}
    assert set(found.values()) == {PASS}
    assert not failed(lint_bytes(CLEAN.encode()))


def test_forbidden_word_in_any_case_reports_every_line():
    source = CLEAN + "# uses the current CUDA Stream\ns = torch.cuda.current_STREAM()\n"
    assert levels(source)["forbidden word"] == FAIL
    text = detail(source, "forbidden word")
    first = len(CLEAN.splitlines()) + 1
    assert f"lines {first}, {first + 1}" in text


def test_forbidden_word_inside_an_identifier_still_counts():
    assert levels(CLEAN + "upstream_value = 1\n")["forbidden word"] == FAIL


def test_missing_headers_warn_and_wrong_headers_fail():
    """The client takes the leaderboard and GPU from its flags where the file names none; a file
    that names others would go to another leaderboard."""
    no_headers = lint_bytes(CLEAN.split("\n", 2)[2].encode())  # each lint runs kernelguard: once a source
    found = {finding.check: finding for finding in no_headers}
    assert found["header leaderboard"].level == found["header gpu"].level == WARN
    assert "--leaderboard nvfp4_gemm" in found["header leaderboard"].detail
    assert not failed(no_headers)
    wrong = CLEAN.replace("nvfp4_gemm", "nvfp4_gemv").replace("gpu NVIDIA", "gpu B200")
    found = {finding.check: finding for finding in lint_bytes(wrong.encode())}
    assert found["header leaderboard"].level == FAIL
    assert "nvfp4_gemv" in found["header leaderboard"].detail
    assert "B200" in found["header gpu"].detail


def test_header_in_the_middle_of_the_file_is_accepted_like_the_client_does():
    body = CLEAN.split("\n", 2)[2]
    moved = body + "#!POPCORN gpus NVIDIA\n#!POPCORN leaderboard nvfp4_gemm\n"
    assert levels(moved)["header leaderboard"] == PASS
    assert levels(moved)["header gpu"] == PASS


def test_custom_kernel_must_be_defined_at_top_level():
    nested = CLEAN.replace("def custom_kernel(data):\n    return data[-1]", "class K:\n    def custom_kernel(self):\n        pass")
    assert levels(nested)["custom_kernel"] == FAIL
    aliased = CLEAN.replace("def custom_kernel(data):", "def _kernel(data):") + "custom_kernel = _kernel\n"
    assert levels(aliased)["custom_kernel"] == PASS
    guarded = CLEAN.replace("def custom_kernel(data):\n    return data[-1]", "try:\n    import x\nexcept ImportError:\n    def custom_kernel(data):\n        return data[-1]")
    assert levels(guarded)["custom_kernel"] == PASS


def test_imports_outside_the_allowed_set_warn_and_name_the_module():
    source = CLEAN.replace("import functools", "import triton\nfrom .helpers import thing")
    assert levels(source)["imports"] == WARN
    text = detail(source, "imports")
    assert "triton (line 3)" in text and ".helpers (relative)" in text
    assert not failed(lint_bytes(source.encode()))


def test_an_import_that_catches_import_error_passes_and_is_named():
    source = CLEAN.replace("import functools", "try:\n    import tvm_ffi\nexcept ImportError:\n    tvm_ffi = None")
    assert levels(source)["imports"] == PASS
    assert "where installed: tvm_ffi (line 4)" in detail(source, "imports")
    unguarded = CLEAN.replace("import functools", "try:\n    import tvm_ffi\nexcept KeyError:\n    tvm_ffi = None")
    assert levels(unguarded)["imports"] == WARN


def test_size_limit_is_the_servers_byte_count(monkeypatch):
    # kernelguard takes tens of seconds over a megabyte (harness/judge/precheck.py): here it reads the
    # clean file, since the size finding alone is under test.
    read = lint_bytes.__globals__["precheck"]
    monkeypatch.setitem(lint_bytes.__globals__, "precheck", lambda source, *args: read(CLEAN, *args))
    padding = "#" * (MAX_BYTES - len(CLEAN.encode()) - 1) + "\n"
    assert levels(CLEAN + padding)["size"] == PASS
    assert levels(CLEAN + padding + "#\n")["size"] == FAIL
    assert levels("")["size"] == FAIL


def test_syntax_error_and_bad_encoding_fail_without_importing():
    assert levels(CLEAN + "def broken(:\n")["syntax"] == FAIL
    assert levels(CLEAN.encode() + b"\xff\xfe")["encoding"] == FAIL


def test_the_shipped_submission_passes_the_leaderboards_lint():
    """submission.py is what users submit: a comment with a forbidden word once slipped in."""
    findings = lint_bytes((Path(__file__).parent.parent / "submission.py").read_bytes())
    assert not failed(findings), [(f.check, f.detail) for f in findings if f.level == FAIL]


def test_the_runners_modules_are_imports_that_pass():
    """task, utils and reference sit beside the submission on the runner (task.yml's files)."""
    source = CLEAN + "from task import input_t, output_t\nimport utils\nfrom reference import to_blocked\n"
    assert levels(source)["imports"] == PASS
    assert "from the runner's files: task (line 12), utils (line 13), reference (line 14)" in detail(source, "imports")


def test_the_kits_hopper_stand_in_passes_only_where_a_function_imports_it():
    """The runner folder here holds hopper_stand_in.py; the leaderboard's does not, so a file
    that imports it as it loads would fail there on import."""
    inside = CLEAN + "def kernel_for_hopper():\n    from hopper_stand_in import HopperNvfp4Gemm\n    return HopperNvfp4Gemm\n"
    assert levels(inside)["imports"] == PASS
    assert "the kit's local-only modules, inside functions: hopper_stand_in (line 13)" in detail(inside, "imports")
    loading = CLEAN + "import hopper_stand_in\n"
    assert levels(loading)["imports"] == FAIL
    assert "imported as the file loads: hopper_stand_in (line 12)" in detail(loading, "imports")
