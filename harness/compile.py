"""`python -m harness compile --arch sm_100a|sm_90a`: prove what can be proven without the GPU.

Compiles the submission's kernel for one arch, for every official test and benchmark shape,
with fake pointers (no device needed), disassembles each cubin with cuobjdump (PyPI wheel
nvidia-cuda-cuobjdump) and fails unless the SASS shows the instructions that kernel must be
made of, no local memory, and shared/tensor memory within the chip's limits. Shapes that share
a configuration share one compile.

The kernel side of the contract (see submission.py): `KERNELS_BY_ARCH[arch]` is a class with
`config_for(problem)` and `compile_for_check(problem, arch, extra_options) -> CompileFacts`.
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
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from harness import shapes
from harness.options import submission_option

# Shared memory one block may use (dynamic + static) on both sm_90 and sm_100.
SMEM_LIMIT_BYTES = 232_448
TMEM_COLUMNS = 512

EXIT_CHECK_FAILED = 1
EXIT_PATH_MISSING = 3


LOCAL_MEMORY = r"\b(?:STL|LDL)(?:\.\w+)*\b"


@dataclass(frozen=True)
class ArchRules:
    """What the SASS of the kernel for one arch must and must not contain."""

    required: dict[str, str]  # column name -> regex on SASS instructions
    forbidden: dict[str, str] = field(default_factory=lambda: {"STL/LDL": LOCAL_MEMORY})
    tmem_columns: int | None = None


RULES = {
    # UTCOMMA with .4X: the block-scaled MMA consuming 4 scales per operand row per K=64,
    # i.e. e4m3 scales over 16 elements (kind::mxf4nvf4.block16).
    "sm_100a": ArchRules(
        required={
            "UTCOMMA.4X": r"\bUTCOMMA(?:\.\w+)*\.4X\b",
            "UTCCP": r"\bUTCCP\b",
            "UTMALDG": r"\bUTMALDG\b",
        },
        tmem_columns=TMEM_COLUMNS,
    ),
    # ptxas serializes the wgmma of a kernel short of registers (its info C7512, which the
    # DSL's in-process compile does not show): every HGMMA is then followed by a wait for all
    # MMAs (WARPGROUP.DEPBAR.LE gsb0, 0x0) a few instructions before the next HGMMA, and the
    # MMAs overlap nothing. Counted once per HGMMA so followed.
    "sm_90a": ArchRules(
        required={"HGMMA": r"\bHGMMA\b", "UTMALDG": r"\bUTMALDG\b"},
        forbidden={
            "STL/LDL": LOCAL_MEMORY,
            "serialized HGMMA": r"\bHGMMA\b.*\n(?:(?!.*HGMMA).*\n){0,3}WARPGROUP\.DEPBAR\.LE gsb0, 0x0 ;\n"
                                r"(?:(?!.*HGMMA).*\n){0,3}(?=HGMMA\b)",
        },
    ),
}


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


def load_submission(path: Path):
    spec = importlib.util.spec_from_file_location("submission_under_check", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


def count_instructions(sass: str, patterns: dict[str, str]) -> dict[str, int]:
    """Matches of each pattern in the instruction stream of cuobjdump's SASS, one instruction
    a line (addresses and encodings dropped), so that a pattern may span instructions."""
    stream = "\n".join(re.findall(r"/\*[0-9a-f]{4,}\*/\s+([^;]*;)", sass)) + "\n"
    return {name: len(re.findall(pattern, stream)) for name, pattern in patterns.items()}


def resource_usage(text: str) -> tuple[int, int, int]:
    """(registers, static shared bytes, local bytes) in `cuobjdump -res-usage`: the largest of
    each over the kernels in the cubin (a call may launch more than one)."""
    usages = [tuple(int(v) for v in match.groups())
              for match in re.finditer(r"REG:(\d+).*?SHARED:(\d+).*?LOCAL:(\d+)", text)]
    if not usages:
        raise click.ClickException(f"no resource usage in cuobjdump output:\n{text}")
    return tuple(max(column) for column in zip(*usages))


def check_config(kernel_class, problem, arch: str, rules: ArchRules, sass_dir: Path | None) -> ConfigResult:
    cuobjdump = find_tool("cuobjdump")
    with tempfile.TemporaryDirectory(prefix="compile-check-") as dump_dir:
        start = time.perf_counter()
        facts = kernel_class.compile_for_check(problem, arch, f"--keep-cubin --dump-dir={dump_dir}")
        seconds = time.perf_counter() - start
        cubins = sorted(Path(dump_dir).glob("*.cubin"))
        if len(cubins) != 1:
            raise click.ClickException(f"expected one cubin for {facts.config}, found {len(cubins)}")
        sass = _cuobjdump(cuobjdump, "-sass", cubins[0])
        usage = _cuobjdump(cuobjdump, "-res-usage", cubins[0])
    if sass_dir is not None:
        sass_dir.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9]+", "_", facts.config).strip("_")
        (sass_dir / f"{arch}_{name}.sass").write_text(sass)

    counts = count_instructions(sass, {**rules.required, **rules.forbidden})
    registers, static_smem, local_bytes = resource_usage(usage)
    failures = [f"no {name}" for name in rules.required if counts[name] == 0]
    failures += [f"{counts[name]} {name}" for name in rules.forbidden if counts[name]]
    if local_bytes:
        failures.append(f"{local_bytes} bytes of local memory")
    smem = facts.smem_bytes + static_smem
    if smem > SMEM_LIMIT_BYTES:
        failures.append(f"shared memory {smem} > {SMEM_LIMIT_BYTES}")
    if rules.tmem_columns is not None:
        if facts.tmem_columns is None or facts.tmem_columns > rules.tmem_columns:
            failures.append(f"tensor memory columns {facts.tmem_columns} not within {rules.tmem_columns}")
    return ConfigResult(facts.config, counts, registers, static_smem, facts.smem_bytes,
                        facts.tmem_columns, seconds, failures)


def official_problems(problem_type) -> list:
    seen = {}
    for name in ("tests", "benchmarks"):
        for case in shapes.official_cases(name):
            seen.setdefault(case.mnkl, problem_type(*case.mnkl))
    return list(seen.values())


def run_check(submission: Path, arch: str, sass_dir: Path | None, console: Console) -> int:
    started = time.perf_counter()
    module = load_submission(submission)
    kernel_class = getattr(module, "KERNELS_BY_ARCH", {}).get(arch)
    if kernel_class is None:
        path = "Hopper" if arch == "sm_90a" else arch
        console.print(f"[bold red]the {path} path ({arch}) is not present in {submission}[/]: "
                      f"no KERNELS_BY_ARCH[{arch!r}] to compile")
        return EXIT_PATH_MISSING
    rules = RULES[arch]
    problems = official_problems(module.Problem)
    by_config: dict = {}
    for problem in problems:
        by_config.setdefault(kernel_class.config_for(problem), []).append(problem)
    results = {config: check_config(kernel_class, group[0], arch, rules, sass_dir)
               for config, group in by_config.items()}

    table = Table(title=f"compile check {arch}: {submission} ({kernel_class.__name__})", title_justify="left")
    for column in ("shape (MxNxKxL)", "configuration", *rules.required, *rules.forbidden,
                   "regs", "smem bytes", "tmem cols", "verdict"):
        table.add_column(column)
    for problem in problems:
        result = results[kernel_class.config_for(problem)]
        counts = [str(result.counts[name]) for name in (*rules.required, *rules.forbidden)]
        smem = result.dynamic_smem + result.static_smem
        tmem = "-" if result.tmem_columns is None else str(result.tmem_columns)
        verdict = "[green]PASS[/]" if not result.failures else "[bold red]FAIL[/]: " + "; ".join(result.failures)
        table.add_row("x".join(map(str, problem)), result.config, *counts, str(result.registers),
                      f"{smem:,}", tmem, verdict)
    console.print(table)
    compile_seconds = sum(r.seconds for r in results.values())
    failed = [r for r in results.values() if r.failures]
    console.print(f"{len(problems)} shapes, {len(results)} configurations compiled in "
                  f"{compile_seconds:.1f} s; whole check {time.perf_counter() - started:.1f} s")
    if failed:
        console.print(f"[bold red]COMPILE CHECK FAIL[/]: {len(failed)} of {len(results)} configurations")
        return EXIT_CHECK_FAILED
    console.print(f"[green]COMPILE CHECK PASS[/] ({arch})")
    return 0


@click.command("compile")
@click.option("--arch", type=click.Choice(sorted(RULES)), required=True, help="Target to compile and check.")
@submission_option
@click.option("--keep-sass", "sass_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Write each configuration's SASS into this folder.")
def compile_command(arch: str, submission: Path, sass_dir: Path | None) -> None:
    """Compile the kernel for every official shape without a GPU and check its SASS."""
    sys.exit(run_check(submission, arch, sass_dir, Console(width=200)))


if __name__ == "__main__":
    compile_command()
