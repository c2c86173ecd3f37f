"""Static checks the leaderboard applies to a submission file before it runs anything.

The file is read and parsed, never imported: a submission that hangs or crashes on import
must still get a lint verdict.
"""

from __future__ import annotations

import ast
import sys
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from harness.judge.precheck import precheck
from harness.results import document
from harness.runner.files import KIT_LOCAL_MODULES, RUNNER_MODULES
from harness.submitting.options import json_option, problem_option, strict_option, submission_option

DEFAULT_LEADERBOARD = "nvfp4_gemm"
GPU = "NVIDIA"
# The server answers 413 above this many bytes.
MAX_BYTES = 1_000_000
# The server refuses any file containing this word, in any case, wherever it appears
# (comments and strings included), because side streams can escape the timing.
FORBIDDEN_WORD = "stream"
ALLOWED_IMPORT_ROOTS = frozenset({"torch", "cutlass", "cuda", "numpy"})

PASS, WARN, FAIL = "pass", "warn", "fail"


@dataclass(frozen=True)
class Finding:
    check: str
    level: str
    detail: str


def over_the_size_limit(size: int) -> str:
    """Why the server refuses a file of `size` bytes, or nothing."""
    return f"{size:,} bytes, over the {MAX_BYTES:,}-byte limit" if size > MAX_BYTES else ""


def _size(size: int) -> Finding:
    if not size:
        return Finding("size", FAIL, "the file is empty")
    over = over_the_size_limit(size)
    if over:
        return Finding("size", FAIL, over)
    return Finding("size", PASS, f"{size:,} bytes (limit {MAX_BYTES:,})")


def _forbidden_word(lines: list[str]) -> Finding:
    hits = [number for number, line in enumerate(lines, 1) if FORBIDDEN_WORD in line.lower()]
    if not hits:
        return Finding("forbidden word", PASS, f'no "{FORBIDDEN_WORD}" in any case')
    shown = ", ".join(map(str, hits[:20])) + (", ..." if len(hits) > 20 else "")
    return Finding(
        "forbidden word",
        FAIL,
        f'"{FORBIDDEN_WORD}" (any case) on line{"s" if len(hits) > 1 else ""} {shown}; '
        "the leaderboard rejects the file",
    )


def _directives(lines: list[str]) -> dict[str, list[str]]:
    """`#!POPCORN key value...` lines, read the way the popcorn client reads them."""
    found: dict[str, list[str]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "#!POPCORN":
            key = parts[1].lower()
            key = "gpu" if key == "gpus" else key
            found.setdefault(key, []).extend(parts[2:])
    return found


def _headers(lines: list[str], leaderboard: str) -> list[Finding]:
    directives = _directives(lines)
    findings = []
    for key, expected in (("leaderboard", leaderboard), ("gpu", GPU)):
        line = f"#!POPCORN {key} {expected}"
        values = directives.get(key)
        if values is None:
            findings.append(Finding(f"header {key}", WARN, f"no `{line}`: give the client --{key} {expected} "
                                                           "(`make submit` does)"))
        elif values != [expected]:
            findings.append(
                Finding(f"header {key}", FAIL, f"says {' '.join(values) or 'nothing'}; expected `{line}`")
            )
        else:
            findings.append(Finding(f"header {key}", PASS, line))
    return findings


def _module_level(statements: list[ast.stmt]):
    """Statements that run at import time: the module body and the blocks of its if/try/with."""
    for node in statements:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "handlers", "finalbody"):
                for child in getattr(node, block, []):
                    yield from _module_level(child.body if isinstance(child, ast.ExceptHandler) else [child])


def _entry_point(tree: ast.Module) -> Finding:
    for node in _module_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "custom_kernel":
            return Finding("custom_kernel", PASS, f"defined on line {node.lineno}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "custom_kernel" for t in targets):
                return Finding("custom_kernel", PASS, f"assigned on line {node.lineno}")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name) == "custom_kernel" for alias in node.names):
                return Finding("custom_kernel", PASS, f"imported on line {node.lineno}")
    return Finding("custom_kernel", FAIL, "no module-level `custom_kernel` in the file")


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types)


def _guarded_imports(tree: ast.Module) -> set[int]:
    """ids of the import statements in the body of a `try` whose handlers catch ImportError:
    the file runs on where the module is missing."""
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_catches_import_error(h) for h in node.handlers):
            guarded.update(id(child) for statement in node.body for child in ast.walk(statement)
                           if isinstance(child, (ast.Import, ast.ImportFrom)))
    return guarded


def _imports(tree: ast.Module) -> Finding:
    outside: dict[str, int] = {}
    optional: dict[str, int] = {}
    provided: dict[str, int] = {}
    kit_local: dict[str, int] = {}
    guarded = _guarded_imports(tree)
    loading = {id(node) for node in _module_level(tree.body)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            # A relative import reaches a file the leaderboard never receives.
            if node.level:
                roots = [f"{'.' * node.level}{node.module or ''} (relative)"]
            else:
                roots = [node.module.split(".")[0]]
        else:
            continue
        for root in roots:
            if root in RUNNER_MODULES:
                provided.setdefault(root, node.lineno)
            elif root in KIT_LOCAL_MODULES and id(node) not in loading:
                kit_local.setdefault(root, node.lineno)
            elif root not in ALLOWED_IMPORT_ROOTS and root not in sys.stdlib_module_names:
                (optional if id(node) in guarded else outside).setdefault(root, node.lineno)
    kit_local_loaded = {root: line for root, line in outside.items() if root in KIT_LOCAL_MODULES}
    if kit_local_loaded:
        return Finding("imports", FAIL, f"the kit's local-only modules imported as the file loads: {_listed(kit_local_loaded)}; "
                                        "the leaderboard's runner lacks them")
    if not outside:
        found = "torch, cutlass, cuda, numpy and the standard library only"
        if provided:
            found += f"; from the runner's files: {_listed(provided)}"
        if optional:
            found += f"; where installed: {_listed(optional)} (ImportError caught)"
        if kit_local:
            found += f"; the kit's local-only modules, inside functions: {_listed(kit_local)} (off the B200 path only)"
        return Finding("imports", PASS, found)
    return Finding("imports", WARN, f"outside torch/cutlass/cuda/numpy/stdlib: {_listed(outside)}; the runner may lack them")


def _listed(lines: dict[str, int]) -> str:
    return ", ".join(f"{name} (line {line})" for name, line in sorted(lines.items(), key=lambda i: i[1]))


def _kernelguard(source: str, strict: bool) -> Finding:
    found = precheck(source)
    if found.unfinished:
        return Finding("kernelguard", FAIL if strict else WARN, f"{found.unfinished}: no static hack detection for this file")
    if not found.available:
        return Finding("kernelguard", WARN, "kernelguard is not installed: no static hack detection (pip install kernelguard)")
    if found.hits:
        level = FAIL if strict else WARN
        return Finding("kernelguard", level, f"{found.classification}: " + "; ".join(map(str, found.hits)))
    notes = f"; low-confidence signals only: {'; '.join(map(str, found.notes))}" if found.notes else ""
    return Finding("kernelguard", PASS, f"{found.classification}{notes}")


def lint_bytes(data: bytes, strict: bool = False, leaderboard: str = DEFAULT_LEADERBOARD) -> list[Finding]:
    """Every check, the headers against `leaderboard` (the problem's); a file over the size limit
    gets that one, as the server answers before it reads any further."""
    findings = [_size(len(data))]
    if failed(findings):
        return findings
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return findings + [Finding("encoding", FAIL, f"not UTF-8: {error}")]
    lines = source.splitlines()
    findings.append(_forbidden_word(lines))
    findings.extend(_headers(lines, leaderboard))
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return findings + [Finding("syntax", FAIL, f"line {error.lineno}: {error.msg}")]
    findings.append(_entry_point(tree))
    findings.append(_imports(tree))
    findings.append(_kernelguard(source, strict))
    return findings


def lint_file(path: Path, strict: bool = False, leaderboard: str = DEFAULT_LEADERBOARD) -> list[Finding]:
    """lint_bytes of the file; one over the size limit is never read."""
    size = Path(path).stat().st_size
    if over_the_size_limit(size):
        return [_size(size)]
    return lint_bytes(Path(path).read_bytes(), strict, leaderboard)


def failed(findings: list[Finding]) -> bool:
    return any(f.level == FAIL for f in findings)


_STYLE = {PASS: "green", WARN: "yellow", FAIL: "bold red"}


def print_report(path: Path, findings: list[Finding], console: Console) -> None:
    table = Table(title=f"lint {path}", title_justify="left")
    table.add_column("check")
    table.add_column("verdict")
    table.add_column("detail", overflow="fold")
    for f in findings:
        table.add_row(f.check, f"[{_STYLE[f.level]}]{f.level.upper()}[/]", f.detail)
    console.print(table)
    failures = sum(f.level == FAIL for f in findings)
    warnings = sum(f.level == WARN for f in findings)
    if failures:
        console.print(f"[bold red]LINT FAIL[/]: {failures} check(s) failed, {warnings} warning(s)")
    else:
        console.print(f"[green]LINT PASS[/]: {warnings} warning(s)")


@click.command("lint")
@submission_option
@problem_option
@strict_option
@json_option
def lint_command(submission: Path, problem, strict: bool, as_json: bool) -> None:
    """Static checks the leaderboard applies (size, forbidden word, headers naming the problem's
    leaderboard, entry point, imports) and kernelguard's."""
    findings = lint_file(submission, strict, problem.leaderboard)
    print_report(submission, findings, Console(stderr=as_json))
    status = 1 if failed(findings) else 0
    if as_json:
        document.write({"schema": document.SCHEMA, "command": "lint", "problem": problem.name, "submission": str(submission),
                        "passed": not status, "findings": [dataclasses.asdict(f) for f in findings]}, status)
    sys.exit(status)
