"""`python -m harness compile --arch sm_100a|sm_90a`: prove what can be proven without the GPU.

Compiles a submission's kernels for one arch, for every official test and benchmark shape of its
problem (`--problem`, nvfp4_gemm by default), on a machine that needs no GPU: every `cute.compile` is captured (harness/submitting/compile_capture.py), each
cubin is disassembled with cuobjdump (PyPI wheel nvidia-cuda-cuobjdump), and the check reports,
per compiled kernel, registers, shared memory, tensor-memory columns, local memory (spills) and
the tcgen05 / wgmma / TMA instructions in its SASS. It fails on spills and on shared or tensor
memory beyond the chip's limits.

Any CuTeDSL submission: its `custom_kernel` is called on CPU tensors of each shape and stops
where it would launch. A file whose call needs more than that (a device query, a stream) may
define `compile_for_check(<the problem's sizes>, arch)` (nvfp4_gemm's: `m, n, k, l, arch`),
which must `cute.compile` what custom_kernel would launch for that shape, and is called instead.

This kit's nvfp4_gemm submission declares more (see submission.py): `kernel_for_arch(arch)` gives a class with
`config_for(problem)` and `compile_for_check(problem, arch, extra_options) -> CompileFacts`, and
its SASS must also show the instructions that kernel must be made of. Shapes that share a
configuration share one compile.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from harness.b200 import model as b200_model, report as b200_report
from harness.judge.exits import EXIT_CHECK_FAILED, EXIT_PATH_MISSING
from harness.problems import PROBLEMS, Problem
from harness.problems import shapes
from harness.results import document
from harness.results.console import as_the_user_wrote_it
from harness.results.tables import Fitted, console_for
from harness.runner.files import import_submission, make_runner_folder
from harness.submitting.compile_capture import LaunchStopped, capturing_compiles, launch_smem_bytes, tmem_columns
from harness.submitting.options import json_option, problem_option, submission_option

# Shared memory one block may use (dynamic + static) on both sm_90 and sm_100.
SMEM_LIMIT_BYTES = 232_448
TMEM_COLUMNS = 512


@dataclass(frozen=True)
class Instruction:
    """What the tables count in a kernel's SASS, under one name whichever file the kernel comes
    from: PTX's name where one PTX instruction has it (tcgen05.*, wgmma), else the mechanism's
    (TMA, PDL, local memory), with the SASS it compiles to beside it."""

    name: str
    sass: str
    pattern: str  # regex on the SASS instruction stream (count_instructions)

    @property
    def column(self) -> str:
        return f"{self.name}\n{self.sass}"


MMA = Instruction("tcgen05.mma", "UTC*MMA", r"\bUTC\w*MMA\b")
# UTCOMMA with .4X: the block-scaled MMA consuming 4 scales per operand row per K=64, i.e. e4m3
# scales over 16 elements (kind::mxf4nvf4.block16).
MMA_BLOCK16 = Instruction("tcgen05.mma block16", "UTCOMMA.4X", r"\bUTCOMMA(?:\.\w+)*\.4X\b")
TMEM_COPY = Instruction("tcgen05.cp", "UTCCP", r"\bUTCCP\b")
TMEM_LOAD = Instruction("tcgen05.ld", "LDTM", r"\bLDTM\b")
TMA_LOAD = Instruction("TMA load", "UTMALDG", r"\bUTMALDG\b")
TMA_STORE = Instruction("TMA store", "UTMASTG", r"\bUTMASTG\b")
# Programmatic dependent launch: griddepcontrol.wait and griddepcontrol.launch_dependents; the
# launch overlaps the previous one's tail.
PDL_WAIT = Instruction("PDL wait", "ACQBULK", r"\bACQBULK\b")
PDL_TRIGGER = Instruction("PDL trigger", "PREEXIT", r"\bPREEXIT\b")
LOCAL_MEMORY = Instruction("local memory", "STL/LDL", r"\b(?:STL|LDL)(?:\.\w+)*\b")
WGMMA = Instruction("wgmma", "HGMMA", r"\bHGMMA\b")
# ptxas serializes the wgmma of a kernel short of registers (its info C7512, which the DSL's
# in-process compile does not show): every HGMMA is then followed by a wait for all MMAs
# (WARPGROUP.DEPBAR.LE gsb0, 0x0) a few instructions before the next HGMMA, and the MMAs overlap
# nothing. Counted once per HGMMA so followed.
SERIALIZED_WGMMA = Instruction("serialized wgmma", "HGMMA, DEPBAR gsb0",
                               r"\bHGMMA\b.*\n(?:(?!.*HGMMA).*\n){0,3}WARPGROUP\.DEPBAR\.LE gsb0, 0x0 ;\n"
                               r"(?:(?!.*HGMMA).*\n){0,3}(?=HGMMA\b)")


@dataclass(frozen=True)
class ArchRules:
    """What the tables count in any kernel for one arch, and what this kit's declared kernel for
    it must and must not contain."""

    instructions: tuple[Instruction, ...]  # counted in every kernel: the tables' columns
    required: tuple[Instruction, ...]
    forbidden: tuple[Instruction, ...] = (LOCAL_MEMORY,)
    tmem_columns: int | None = None


RULES = {
    "sm_100a": ArchRules(
        instructions=(MMA, MMA_BLOCK16, TMEM_COPY, TMEM_LOAD, TMA_LOAD, TMA_STORE, PDL_WAIT, PDL_TRIGGER, LOCAL_MEMORY),
        required=(MMA_BLOCK16, TMEM_COPY, TMA_LOAD),
        tmem_columns=TMEM_COLUMNS,
    ),
    "sm_90a": ArchRules(
        instructions=(WGMMA, SERIALIZED_WGMMA, TMA_LOAD, TMA_STORE, PDL_WAIT, PDL_TRIGGER, LOCAL_MEMORY),
        required=(WGMMA, TMA_LOAD),
        forbidden=(LOCAL_MEMORY, SERIALIZED_WGMMA),
    ),
}
# The columns after the instructions', in both tables.
RESOURCE_COLUMNS = ("registers", "shared memory\nbytes", "tensor memory\ncolumns", "verdict")


def left_out_first(rules: ArchRules, *extra: str) -> tuple[str, ...]:
    """The columns a narrow terminal leaves out of a table of kernels, in that order: the counts
    the check neither requires nor forbids (the last listed first), `extra`, then the resources."""
    optional = [instruction.column for instruction in rules.instructions
                if instruction not in rules.required and instruction not in rules.forbidden]
    return (*reversed(optional), *extra, "tensor memory\ncolumns", "shared memory\nbytes", "registers")


def shape_text(mnkl) -> str:
    """A shape as both tables and the --json document write it: M x N x K x L."""
    return "x".join(map(str, mnkl))


@dataclass
class ConfigResult:
    config: str
    counts: dict[str, int]
    registers: int
    static_smem: int
    dynamic_smem: int
    tmem_columns: int | None
    seconds: float
    failures: list[str]


def find_tool(name: str) -> str:
    """A CUDA binary utility from the PATH or from the nvidia-cuda-* PyPI wheels."""
    found = shutil.which(name)
    if found:
        return found
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        for candidate in sorted(Path(root).glob(f"*/bin/{name}")):
            return str(candidate)
    raise click.ClickException(
        f"{name} not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")


def _cuobjdump(cuobjdump: str, flag: str, cubin: Path) -> str:
    # `-sass` runs nvdisasm, which the wheels install beside cuobjdump.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(find_tool("nvdisasm")).parent), os.environ.get("PATH", "")])}
    done = subprocess.run([cuobjdump, flag, str(cubin)], capture_output=True, text=True, env=env)
    if done.returncode:
        raise click.ClickException(f"cuobjdump {flag} failed: {done.stderr.strip()}")
    return done.stdout


def count_instructions(sass: str, instructions: tuple[Instruction, ...]) -> dict[str, int]:
    """Matches of each instruction's pattern in the instruction stream of cuobjdump's SASS, one
    instruction a line (addresses and encodings dropped), so that a pattern may span
    instructions; by instruction name."""
    stream = "\n".join(re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*;)", sass)) + "\n"
    return {instruction.name: len(re.findall(instruction.pattern, stream)) for instruction in instructions}


def resource_usage(text: str) -> tuple[int, int, int]:
    """(registers, static shared bytes, local bytes) in `cuobjdump -res-usage`: the largest of
    each over the kernels in the cubin (a call may launch more than one)."""
    usages = [tuple(int(v) for v in match.groups())
              for match in re.finditer(r"REG:(\d+).*?SHARED:(\d+).*?LOCAL:(\d+)", text)]
    if not usages:
        raise click.ClickException(f"no resource usage in cuobjdump output:\n{text}")
    return tuple(max(column) for column in zip(*usages))


@dataclass
class CubinFacts:
    sass: str
    counts: dict[str, int]
    registers: int
    static_smem: int
    local_bytes: int


def read_cubin(cubin: Path, instructions: tuple[Instruction, ...]) -> CubinFacts:
    cuobjdump = find_tool("cuobjdump")
    sass = _cuobjdump(cuobjdump, "-sass", cubin)
    registers, static_smem, local_bytes = resource_usage(_cuobjdump(cuobjdump, "-res-usage", cubin))
    return CubinFacts(sass, count_instructions(sass, instructions), registers, static_smem, local_bytes)


def _one_cubin(record) -> Path:
    cubins = record.cubins
    if len(cubins) != 1:
        raise click.ClickException(f"expected one cubin for compile {record.index} ({record.function}), found {len(cubins)}")
    return cubins[0]


def _keep_sass(sass_dir: Path | None, arch: str, name: str, sass: str) -> None:
    if sass_dir is not None:
        sass_dir.mkdir(parents=True, exist_ok=True)
        (sass_dir / f"{arch}_{re.sub(r'[^A-Za-z0-9]+', '_', name).strip('_')}.sass").write_text(sass)


def _limit_failures(local_bytes: int, smem: int | None, tmem: int | None) -> list[str]:
    failures = [f"{local_bytes} bytes of local memory"] if local_bytes else []
    if smem is not None and smem > SMEM_LIMIT_BYTES:
        failures.append(f"shared memory {smem} > {SMEM_LIMIT_BYTES}")
    if tmem is not None and tmem > TMEM_COLUMNS:
        failures.append(f"tensor memory columns {tmem} > {TMEM_COLUMNS}")
    return failures


def check_config(kernel_class, problem, arch: str, rules: ArchRules, sass_dir: Path | None) -> ConfigResult:
    with capturing_compiles(arch) as capture:
        start = time.perf_counter()
        facts = kernel_class.compile_for_check(problem, arch, "")
        seconds = time.perf_counter() - start
        cubin = read_cubin(_one_cubin(capture.compiles[-1]), rules.instructions)
    _keep_sass(sass_dir, arch, facts.config, cubin.sass)
    counts = cubin.counts
    failures = [f"no {need.name} ({need.sass})" for need in rules.required if counts[need.name] == 0]
    failures += [f"{counts[banned.name]} {banned.name} ({banned.sass})" for banned in rules.forbidden if counts[banned.name]]
    failures += _limit_failures(cubin.local_bytes, facts.smem_bytes + cubin.static_smem, None)
    if rules.tmem_columns is not None:
        if facts.tmem_columns is None or facts.tmem_columns > rules.tmem_columns:
            failures.append(f"tensor memory columns {facts.tmem_columns} not within {rules.tmem_columns}")
    return ConfigResult(facts.config, counts, cubin.registers, cubin.static_smem, facts.smem_bytes,
                        facts.tmem_columns, seconds, failures)


GEMM = PROBLEMS["nvfp4_gemm"]


def shape_column(problem: Problem) -> str:
    return "shape\n" + " x ".join(key.upper() for key in problem.spec_keys)


def case_text(case: shapes.Case) -> str:
    """`128x256x256x1` (every size, an `l` of 1 too), or the label of a grouped case."""
    sizes = [value for _, value in case.shape]
    return shape_text(sizes) if all(isinstance(value, int) for value in sizes) else case.label


def official_shapes(problem: Problem = GEMM) -> list[shapes.Case]:
    """The problem's official tests' and benchmarks' cases, one per shape."""
    unique = {}
    for name in ("tests", "benchmarks"):
        for case in problem.cases(name):
            unique.setdefault(case.shape, case)
    return list(unique.values())


def _check_declared_kernels(module, kernel_class, submission: Path, arch: str, sass_dir: Path | None, console: Console,
                            facts: dict) -> int:
    """This kit's contract: one compile per configuration, and the arch's required instructions."""
    rules = RULES[arch]
    problems = [module.Problem(*case.mnkl) for case in official_shapes()]
    by_config: dict = {}
    for problem in problems:
        by_config.setdefault(kernel_class.config_for(problem), []).append(problem)
    results = {config: check_config(kernel_class, group[0], arch, rules, sass_dir)
               for config, group in by_config.items()}

    number = {config: index for index, config in enumerate(results)}
    shape_table = Table(title=f"compile check {arch}: {submission} ({kernel_class.__name__})", title_justify="left")
    for column in (shape_column(GEMM), "served by configuration", "as the kernel describes it", "verdict"):
        shape_table.add_column(column)
    for problem in problems:
        config = kernel_class.config_for(problem)
        result = results[config]
        smem = result.dynamic_smem + result.static_smem
        shape_table.add_row(shape_text(problem), f"#{number[config]}", result.config,
                            "[bold red]FAIL[/]" if result.failures else "[green]PASS[/]")
        facts.setdefault("shapes", []).append({
            "shape": shape_text(problem), "configuration": result.config, "instructions": result.counts,
            "registers": result.registers, "smem_bytes": smem, "tmem_columns": result.tmem_columns, "failures": result.failures})
    console.print(Fitted(shape_table))
    table = Table(title="configurations compiled", title_justify="left")
    for column in ("configuration", *(instruction.column for instruction in rules.instructions), *RESOURCE_COLUMNS):
        table.add_column(column)
    for config, result in results.items():
        tmem = "-" if result.tmem_columns is None else str(result.tmem_columns)
        table.add_row(f"#{number[config]}", *[str(result.counts[instruction.name]) for instruction in rules.instructions],
                      str(result.registers), f"{result.dynamic_smem + result.static_smem:,}", tmem, _verdict_cell(result.failures))
    console.print(Fitted(table, left_out_first(rules)))
    compile_seconds = sum(r.seconds for r in results.values())
    console.print(f"{len(problems)} shapes, {len(results)} configurations compiled in {compile_seconds:.1f} s")
    if arch == "sm_100a":
        _print_model(module, kernel_class, console, facts)
    return _summary(console, arch, sum(bool(r.failures) for r in results.values()), len(results), "configurations")


HOOK = "compile_for_check"


def _call_for_shape(module, problem: Problem, case: shapes.Case, arch: str) -> str:
    """Run the submission's call for one shape up to its launch; what happened, in words."""
    try:
        if hasattr(module, HOOK):
            getattr(module, HOOK)(*(value for _, value in case.shape), arch)
        else:
            module.custom_kernel(problem.generate(case.args, case.args["seed"], "cpu"))
    except LaunchStopped:
        return "stopped at its launch"
    return "returned without a launch" if not hasattr(module, HOOK) else f"{HOOK} returned"


def _check_captured(module, problem: Problem, capture, submission: Path, arch: str, sass_dir: Path | None, console: Console,
                    facts: dict) -> int:
    """Any CuTeDSL submission: its own calls, every compile captured."""
    shape_table = Table(title=f"compile check {arch}: {submission} (its {HOOK if hasattr(module, HOOK) else 'custom_kernel'} on CPU tensors)",
                        title_justify="left")
    for column in (shape_column(problem), "served by compile", "outcome"):
        shape_table.add_column(column)
    failures = 0
    for case in official_shapes(problem):
        label = case_text(case)
        capture.shape, before = label, len(capture.compiles)
        try:
            outcome = _call_for_shape(module, problem, case, arch)
        except Exception as error:  # the submission's own failure is the finding
            outcome = as_the_user_wrote_it(f"raised {type(error).__name__}: {error}", Path(module.__file__), submission)
            if len(capture.compiles) == before:
                failures += 1
                outcome = (f"[bold red]FAIL[/]: {escape(outcome)} before any compile "
                           f"(define {HOOK}({', '.join(problem.spec_keys)}, arch): see README)")
        used = [record.index for record in capture.compiles if label in record.shapes or record.index >= before]
        shape_table.add_row(label, ", ".join(f"#{index}" for index in used) or "-", outcome)
        facts.setdefault("shapes", []).append({"shape": label, "compiles": used, "outcome": outcome})
    console.print(Fitted(shape_table))
    if not capture.compiles:
        console.print("[bold red]COMPILE CHECK FAIL[/]: no cute.compile was reached for any shape")
        return EXIT_CHECK_FAILED

    instructions = RULES[arch].instructions
    table = Table(title="compiled kernels", title_justify="left")
    for column in ("compile", "@cute.jit function", "shapes served", "launches", *(instruction.column for instruction in instructions),
                   *RESOURCE_COLUMNS):
        table.add_column(column)
    for record in capture.compiles:
        cubin = read_cubin(_one_cubin(record), instructions)
        _keep_sass(sass_dir, arch, f"{record.index}_{record.function}", cubin.sass)
        launches = launch_smem_bytes(record.host_ir)
        dynamic = None if None in launches or not launches else max(launches)
        smem = None if dynamic is None else dynamic + cubin.static_smem
        tmem = tmem_columns(record.ptx)
        kernel_failures = _limit_failures(cubin.local_bytes or cubin.counts[LOCAL_MEMORY.name], smem, tmem)
        failures += bool(kernel_failures)
        facts.setdefault("kernels", []).append({
            "compile": record.index, "jit_function": record.function, "shapes": record.shapes, "launches": len(launches),
            "instructions": cubin.counts, "registers": cubin.registers, "static_smem_bytes": cubin.static_smem,
            "smem_bytes": smem, "tmem_columns": tmem, "local_bytes": cubin.local_bytes, "failures": kernel_failures})
        table.add_row(f"#{record.index}", record.function, str(len(record.shapes)), str(len(launches)),
                      *[str(cubin.counts[instruction.name]) for instruction in instructions], str(cubin.registers),
                      f"{smem:,}" if smem is not None else f"{cubin.static_smem:,} static + run-time dynamic",
                      "-" if tmem is None else str(tmem), _verdict_cell(kernel_failures))
    console.print(Fitted(table, left_out_first(RULES[arch], "launches", "shapes served")))
    return _summary(console, arch, failures, len(capture.compiles) + len(official_shapes(problem)), "shapes and compiles")


def _print_model(module, kernel_class, console: Console, facts: dict) -> None:
    """The B200 cost model's time per benchmark shape for the kernel's configurations (a model's
    figures: nothing here has run on a B200)."""
    configs = {shape: kernel_class.config_for(module.Problem(*shape)) for shape in b200_model.BENCHMARK_SHAPES}
    console.print(b200_report.predictions_table(configs))
    facts["model"] = [{"shape": "x".join(map(str, shape)), "configuration": config.describe(), "pdl": config.pdl,
                       "cluster_m": b200_model.kernel_for(config).cluster_m,
                       "share_k": b200_model.kernel_for(config).share_k,
                       "model_us": b200_model.call_seconds(b200_model.kernel_for(config), shape) * 1e6,
                       "share_k_every_sm_us": b200_model.k_share_alternative(config, shape)[0] * 1e6}
                      for shape, config in configs.items()]


def _verdict_cell(failures: list[str]) -> str:
    return "[green]PASS[/]" if not failures else "[bold red]FAIL[/]: " + escape("; ".join(failures))


def _summary(console: Console, arch: str, failed: int, total: int, what: str) -> int:
    if failed:
        console.print(f"[bold red]COMPILE CHECK FAIL[/]: {failed} of {total} {what}")
        return EXIT_CHECK_FAILED
    console.print(f"[green]COMPILE CHECK PASS[/] ({arch})")
    return 0


def _import_failed(error: Exception, runner_copy: Path, submission: Path, console: Console, facts: dict) -> int:
    """A file that does not import: the cause, in the user's words, as the verdict."""
    cause = as_the_user_wrote_it(f"{type(error).__name__}: {error}", runner_copy, submission)
    trace = as_the_user_wrote_it("".join(traceback.format_exception(error)), runner_copy, submission)
    facts["error"] = cause
    if 'File "' in trace:  # frames of the file's own remain
        console.print(f"[dim]{escape(trace.rstrip())}[/dim]")
    console.print(f"[bold red]COMPILE CHECK FAIL[/]: {escape(str(submission))} cannot be loaded: {escape(cause)}", soft_wrap=True)
    return EXIT_CHECK_FAILED


def run_check(submission: Path, arch: str, sass_dir: Path | None, console: Console, facts: dict | None = None,
              problem: Problem = GEMM) -> int:
    """The check's exit status; `facts` (the --json document) receives what it found. The kit's
    declared kernels (`kernel_for_arch`) are nvfp4_gemm's: for another problem every file's
    compiles are captured from its own calls."""
    facts = {} if facts is None else facts
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="compile-check-") as folder:
        with capturing_compiles(arch) as capture:  # a file may compile as it is imported
            runner_folder = make_runner_folder(submission, folder, problem)
            try:
                module = import_submission(runner_folder, "submission_under_check")
            except Exception as error:  # the file's own failure is the finding
                return _import_failed(error, runner_folder / "submission.py", submission, console, facts)
            kernel_for_arch = getattr(module, "kernel_for_arch", None) if problem.name == GEMM.name else None
            if kernel_for_arch is None:
                status = _check_captured(module, problem, capture, submission, arch, sass_dir, console, facts)
        if kernel_for_arch is not None:
            kernel_class = kernel_for_arch(arch)
            if kernel_class is None:
                console.print(f"[bold red]no {arch} kernel in {submission}[/]: kernel_for_arch({arch!r}) gave None")
                return EXIT_PATH_MISSING
            status = _check_declared_kernels(module, kernel_class, submission, arch, sass_dir, console, facts)
    console.print(f"[dim]whole check {time.perf_counter() - started:.1f} s[/dim]")
    return status


@click.command("compile")
@click.option("--arch", type=click.Choice(sorted(RULES)), required=True, help="Target to compile and check.")
@submission_option
@problem_option
@click.option("--keep-sass", "sass_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each configuration's SASS into this folder.")
@json_option
def compile_command(arch: str, submission: Path, problem: Problem, sass_dir: Path | None, as_json: bool) -> None:
    """Compile the kernels for every official shape of the problem without a GPU and report their SASS facts."""
    facts = {"schema": document.SCHEMA, "command": "compile", "problem": problem.name, "arch": arch, "submission": str(submission)}
    status = run_check(submission, arch, sass_dir, console_for(sys.stderr if as_json else sys.stdout), facts, problem)
    if as_json:
        document.write({**facts, "passed": status == 0}, status)
    sys.exit(status)


if __name__ == "__main__":
    compile_command()
