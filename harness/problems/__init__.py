"""The problems the judge can serve, as data: GPU MODE's NVFP4 series, or a folder a user brings.

A problem is what its runner folder holds (task.yml, task.py, utils.py, reference.py: generator,
reference and check), its official tests and benchmarks, the eval's parameters, its leaderboard
and its speed of light. The judge and the runner know tensors, rounds and verdicts; what differs
from one problem to the next lives here. `load_problem("nvfp4_gemv")` gives a built-in one;
`load_problem(folder)` one laid out as reference-kernels' problem folders, whose reference.py is
used as it is.
"""

import atexit
import dataclasses
import hashlib
import inspect
import os
import re
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import torch

from harness.problems import sol
from harness.problems.eval_flavours import BETTER_BENCH, GROUPED_BENCH, PLAIN_EVAL, EvalParameters, flavour_of
from harness.problems.folder import RUNNER_MODULES, import_runner_files
from harness.problems.scale_layout import permuted_index
from harness.problems.shapes import Case, CaseFormat, load_cases
from harness.shared.paths import REPO_ROOT

PROBLEMS_DIR = Path(__file__).resolve().parent
CPU_BENCHMARKS = 1  # the official tests a CPU benchmark times without a tests file


@dataclasses.dataclass(frozen=True)
class SpeedOfLight:
    """The published SOL table and the formula that reproduces it: max(flops / peak, bytes / bandwidth)."""

    work: object  # spec -> (flops, DRAM bytes)
    b200_peak_flops: float
    b200_bandwidth: float
    basis: str  # what the figures are and where they come from
    table: tuple[tuple[tuple[tuple[str, object], ...], float], ...]  # ((key, value) pairs, microseconds)

    def rows(self) -> list[tuple[dict, float]]:
        return [(dict(spec), microseconds) for spec, microseconds in self.table]


@dataclasses.dataclass(frozen=True)
class EachGroup:
    """In a Problem's input_names: a list with one entry per group, each named by `names`."""

    names: object


@dataclasses.dataclass(frozen=True)
class ScaleTwins:
    """Block scales an input holds twice: plain, (mn, k//16, l), and permuted for the tensor cores
    (the same values elsewhere, padded); a kernel may read either, so an edit is made to both.
    `pairs` names (plain, permuted) as input_names does; `permuted_index` maps a plain index
    (row, col, batch) to the permuted tensor's."""

    pairs: tuple[tuple[str, str], ...]
    permuted_index: object


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str
    folder: Path  # holds the runner folder's task.yml, and its reference.py, task.py and utils.py unless sources say otherwise
    tests_file: Path
    benchmarks_file: Path
    spec_keys: tuple[str, ...]  # what a case gives generate_input besides the seed
    leaderboard: str
    leaderboard_id: int | None
    deadline: str | None  # ISO 8601, UTC
    rtol: float
    atol: float
    eval: EvalParameters
    speed_of_light: SpeedOfLight | None = None
    # The input's parts by name, nested as the input is: a name, a tuple of them, or EachGroup.
    input_names: object = ()
    list_keys: tuple[str, ...] = ()  # spec keys whose value is a list, one entry per group
    count_key: str | None = None  # the spec key that counts the groups
    scale_twins: ScaleTwins | None = None  # the inputs' block scales, by name
    # Inputs padded past the rows the reference reads: (name, rows read).
    rows_read: tuple[tuple[str, int], ...] = ()
    multiples: tuple[tuple[str, int, str], ...] = ()  # shapes.CaseFormat.multiples
    optional_keys: tuple[str, ...] = ()  # spec keys some cases leave out (the generator's default applies)
    text_keys: tuple[str, ...] = ()  # spec keys whose value is a word
    # (runner module name, the file task.yml's `files` copies there) where not the folder's own.
    sources: tuple[tuple[str, Path], ...] = ()
    # The folder's own check_implementation(data, output) judges every output, as its eval calls
    # it; else the problem's utils.match_reference against a reference computed beforehand.
    own_check: bool = False
    timeouts_s: tuple[tuple[str, float], ...] = ()  # mode -> task.yml's seconds: a case's, the whole run's for its own eval
    ranking_by: str = "geom"
    flavour: str = ""  # the eval's flavour (harness/problems/eval_flavours.py)
    # A folder's: (name, file) for each of task.yml's `files` the runner lays beside the submission,
    # and the one it runs (config.main), which --official runs whole (harness/judge/folder_eval.py).
    eval_files: tuple[tuple[str, Path], ...] = ()
    eval_main: str = ""

    @property
    def builtin(self) -> bool:
        """One of this kit's (PROBLEMS), not a folder a user brings."""
        return PROBLEMS.get(self.name) == self

    @property
    def official_refused(self) -> str:
        """Why --official cannot run this problem's eval, where it cannot: a folder that does not
        hold the eval its task.yml runs. Empty for the built-in problems, whose eval the judge follows."""
        if self.builtin or self.eval_main:
            return ""
        return f"--official runs {self.name}'s own eval, which its folder lacks (task.yml's config.main, eval.py by default)"

    @property
    def selector(self) -> str:
        """What `--problem` takes to name this problem again: its name, or its folder."""
        return self.name if self.builtin else str(self.folder)

    @property
    def case_format(self) -> CaseFormat:
        return CaseFormat(keys=(*self.spec_keys, "seed"), list_keys=self.list_keys, count_key=self.count_key,
                          multiples=self.multiples, optional_keys=self.optional_keys, text_keys=self.text_keys)

    def cases(self, which: str) -> list[Case]:
        """The official "tests" or "benchmarks"."""
        return load_cases(self.tests_file if which == "tests" else self.benchmarks_file, self.case_format)

    def cpu_benchmarks(self, count: int = CPU_BENCHMARKS) -> list[Case]:
        """What a CPU run times without a tests file: the `count` official tests of least work, in
        their file's order. The official benchmarks draw 50 inputs a batch, each with its exact
        reference, and call the file 50 times a round: on a CPU that takes hours a case, and a
        torch-only file takes about a second a call already on the tests' mid-sized shapes."""
        tests = self.cases("tests")
        least = sorted(range(len(tests)), key=lambda index: self._size(tests[index].args))[:count]
        return [tests[index] for index in sorted(least)]

    def benchmark_sized(self, cases: list[Case]) -> list[Case]:
        """The `cases` with at least the work of the least of the official benchmarks."""
        least = min(self._size(case.args) for case in self.cases("benchmarks"))
        return [case for case in cases if self._size(case.args) >= least]

    def _size(self, spec: dict) -> float:
        """A case's work: its flops where the problem has a speed-of-light formula, else the
        product of its sizes (each list of per-group sizes summed)."""
        work = self.work(spec)
        if work is not None:
            return work[0]
        size = 1
        for key in self.spec_keys:
            value = spec.get(key)
            if isinstance(value, (list, tuple)):
                size *= sum(value)
            elif isinstance(value, int):
                size *= value
        return size

    def runner_files(self) -> dict[str, Path]:
        """The files the runner folder holds beside submission.py, by module name."""
        return {**{module: self.folder / f"{module}.py" for module in RUNNER_MODULES}, **dict(self.sources)}

    def modules(self) -> dict[str, ModuleType]:
        """The runner files imported in this process, once, under names of their own."""
        return import_runner_files(self.runner_files(), prefix=f"problem_{_identifier(self.folder)}")

    @property
    def reference(self) -> ModuleType:
        return self.modules()["reference"]

    def generate(self, spec: dict, seed: int, device="cuda"):
        """The folder's generate_input for `spec` (spec_keys) and `seed`; on `device` where it
        takes one (the competition's own draw on CUDA)."""
        generate_input = self.reference.generate_input
        args = {key: spec[key] for key in self.spec_keys if key in spec}
        if "device" in inspect.signature(generate_input).parameters:
            return generate_input(**args, seed=seed, device=device)
        return generate_input(**args, seed=seed)

    def expected(self, data):
        """The folder's ref_kernel; like it, this may write into the data's outputs (hand it a copy)."""
        return self.reference.ref_kernel(data)

    @staticmethod
    def outputs(data) -> list[torch.Tensor]:
        """The tensors custom_kernel is to write, in order: the last tensor of the input tuple,
        or where the first entry is a list of per-group tuples (a, b, c), each group's last; none
        where the input is one tensor (the output is the call's own, linalg's)."""
        if isinstance(data, torch.Tensor):
            return []
        if isinstance(data[0], list):
            return [group[-1] for group in data[0]]
        return [data[-1]]

    def named(self, path: tuple) -> tuple[str, int | None] | None:
        """(name, group or None) of the input at `path` (indices into the input, outside in) where
        input_names gives one, else None."""
        names, group = self.input_names, None
        for key in path:
            if isinstance(names, EachGroup):
                names, group = names.names, key
            elif isinstance(names, tuple) and isinstance(key, int) and 0 <= key < len(names):
                names = names[key]
            else:
                return None
        return (names, group) if isinstance(names, str) else None

    def input_name(self, path: tuple) -> str:
        """What the judge calls the input at `path`: its name where input_names gives one (`b`,
        `sfa of group 1`), else its place (`data[0][1][2]`)."""
        named = self.named(path)
        if named is None:
            return "data" + "".join(f"[{key!r}]" for key in path)
        name, group = named
        return name if group is None else f"{name} of group {group}"

    def check(self, expected, output, data=None) -> tuple[bool, str]:
        """The competition's check of `output` on the input `data` (a copy the check may write):
        the folder's own check_implementation where own_check says so, as its eval calls it; else
        against the reference `expected` computed beforehand, with the problem's tolerance and its
        utils.py's comparison and messages (lists element by element)."""
        if self.own_check:
            return self.reference.check_implementation(data, output)
        match_reference = self.modules()["utils"].match_reference
        return match_reference(None, output, lambda _: expected, rtol=self.rtol, atol=self.atol)

    def work(self, spec: dict) -> tuple[int, int] | None:
        """(flops, DRAM bytes) of one call on `spec`, by the problem's speed-of-light formula;
        None where the problem has none (a folder a user brings)."""
        return self.speed_of_light.work(spec) if self.speed_of_light is not None else None

    def ceilings(self, gpu: str) -> sol.Ceilings:
        """`gpu`'s ceilings for this problem: on a B200 the rates its published table is stated
        at, on the others harness/problems/sol.py's (H100, H200)."""
        if gpu == "B200" and self.speed_of_light is not None:
            return sol.Ceilings("B200", self.speed_of_light.b200_peak_flops, self.speed_of_light.b200_bandwidth,
                                self.speed_of_light.basis)
        return sol.DEVICES[gpu]

    def sol_ns(self, spec: dict, gpu: str = "B200") -> float:
        """The speed of light of `spec` on `gpu` in ns."""
        if self.speed_of_light is None:
            raise ValueError(f"{self.name} has no speed-of-light formula")
        return self.ceilings(gpu).seconds(self.work(spec)) * 1e9


def _identifier(path: Path) -> str:
    return re.sub(r"\W", "_", str(path.resolve()))


# ---- the speed-of-light formulas -------------------------------------------------------------
# Each table is the one in the problem's task.yml (reference-kernels), stated for a B200 at
# 1.5 GHz; each formula reproduces its table to the printed digits (tests/test_problems.py).
B200 = sol.DEVICES["B200"]
B200_SMS = sol.B200_SMS
B200_FFMA_FLOP_PER_SM_CLK = 128 * 2  # 128 fp32 lanes per SM, 2 flops per FMA: our reading of "FFMA math"
FP8_SCALE_BYTES = 1


def _gemm_work(spec: dict) -> tuple[int, int]:
    mnkl = spec["m"], spec["n"], spec["k"], spec["l"]
    return sol.gemm_flops(*mnkl), sol.gemm_bytes(*mnkl)


def _gemv_work(spec: dict) -> tuple[int, int]:
    """A and its scales, the vector b (one row), c; sfb counts its 128 padded rows, as in the
    generator. Both the unpadded (1 row) and fully padded (128 rows of b too) readings miss the
    table; this one hits all three rows."""
    m, k, l = spec["m"], spec["k"], spec["l"]
    sf_k = k // sol.SF_VEC_SIZE
    return 2 * m * k * l, l * (m * k // 2 + m * sf_k + k // 2 + 128 * sf_k * FP8_SCALE_BYTES + 2 * m)


def _dual_gemm_work(spec: dict) -> tuple[int, int]:
    m, n, k, l = spec["m"], spec["n"], spec["k"], spec["l"]
    sf_k = k // sol.SF_VEC_SIZE
    return 2 * 2 * m * n * k * l, l * (m * k // 2 + 2 * n * k // 2 + (m + 2 * n) * sf_k + 2 * m * n)


def _group_gemm_work(spec: dict) -> tuple[int, int]:
    groups = list(zip(spec["m"], spec["n"], spec["k"]))
    return (sum(sol.gemm_flops(m, n, k, 1) for m, n, k in groups),
            sum(sol.gemm_bytes(m, n, k, 1) for m, n, k in groups))


# The dual GEMM's two compute-bound rows (8.714 and 6.535 us) both put the FP4 rate at
# 6.9004e15-6.9007e15 FLOP/s (5% under the 148 SMs x 32768 FLOP/clk at 1.5 GHz that
# harness/problems/sol.py infers and no memory-bound table can confirm): the table's own rate is used.
DUAL_GEMM_TABLE_FP4_PEAK = 6.9005e15


def _table(*rows: tuple[dict, float]):
    return tuple((tuple(spec.items()), microseconds) for spec, microseconds in rows)


# Every NVFP4 problem's generator draws one fp8 scale per 16 elements along K (its reference.py's
# sf_vec_size) and its reference expands them over K: another K cannot be drawn or checked.
SCALED_K = (("k", 16, "one fp8 scale per 16 elements along K: reference.py's sf_vec_size"),)


def _builtin(name: str, **fields) -> Problem:
    folder = PROBLEMS_DIR / name
    return Problem(name=name, folder=folder, tests_file=folder / "tests.txt", benchmarks_file=folder / "benchmarks.txt",
                   leaderboard=name, rtol=1e-3, atol=1e-3, multiples=SCALED_K, **fields)


ROOT_UTILS = (("utils", REPO_ROOT / "utils.py"),)  # the competition's shared ../utils.py
GEMM_INPUT_NAMES = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted", "c")


def _scale_twins(*pairs: tuple[str, str]) -> ScaleTwins:
    return ScaleTwins(pairs, permuted_index)


GEMM_SCALES = (("sfa", "sfa_permuted"), ("sfb", "sfb_permuted"))

# Leaderboard ids are gpumode.com's; deadlines from reference-kernels' problems/nvidia.yaml.
PROBLEMS = {
    "nvfp4_gemm": Problem(
        name="nvfp4_gemm", folder=REPO_ROOT, tests_file=REPO_ROOT / "shapes" / "tests.txt",
        benchmarks_file=REPO_ROOT / "shapes" / "benchmarks.txt", spec_keys=("m", "n", "k", "l"),
        leaderboard="nvfp4_gemm", leaderboard_id=597, deadline="2025-12-21T07:59:00+00:00", rtol=1e-3, atol=1e-3,
        eval=BETTER_BENCH, input_names=GEMM_INPUT_NAMES, scale_twins=_scale_twins(*GEMM_SCALES), multiples=SCALED_K,
        speed_of_light=SpeedOfLight(
            _gemm_work, B200.peak_flops, B200.bandwidth,
            "max(FP4 math, DRAM traffic): harness/problems/sol.py's B200 ceilings", _table(
                (dict(m=128, n=7168, k=16384, l=1), 8.994), (dict(m=128, n=4096, k=7168, l=1), 2.354),
                (dict(m=128, n=7168, k=2048, l=1), 1.333))),
    ),
    "nvfp4_gemv": _builtin(
        "nvfp4_gemv", spec_keys=("m", "k", "l"), leaderboard_id=595, deadline="2025-11-29T06:59:00+00:00",
        eval=PLAIN_EVAL, sources=ROOT_UTILS, input_names=GEMM_INPUT_NAMES, scale_twins=_scale_twins(*GEMM_SCALES),
        # b and its scales are padded to 128 rows, of which the product reads the first.
        rows_read=(("b", 1), ("sfb", 1)),
        speed_of_light=SpeedOfLight(
            _gemv_work, B200_SMS * B200_FFMA_FLOP_PER_SM_CLK * sol.B200_CLOCK_HZ, B200.bandwidth,
            "max(FFMA math, DRAM traffic); every row memory-bound at harness/problems/sol.py's B200 bandwidth", _table(
                (dict(m=7168, k=16384, l=1), 8.622), (dict(m=4096, k=7168, l=8), 17.275),
                (dict(m=7168, k=2048, l=4), 4.317))),
    ),
    "nvfp4_dual_gemm": _builtin(
        "nvfp4_dual_gemm", spec_keys=("m", "n", "k", "l"), leaderboard_id=598, deadline="2026-01-20T07:59:00+00:00",
        eval=BETTER_BENCH, sources=ROOT_UTILS,
        input_names=("a", "b1", "b2", "sfa", "sfb1", "sfb2", "sfa_permuted", "sfb1_permuted", "sfb2_permuted", "c"),
        scale_twins=_scale_twins(("sfa", "sfa_permuted"), ("sfb1", "sfb1_permuted"), ("sfb2", "sfb2_permuted")),
        speed_of_light=SpeedOfLight(
            _dual_gemm_work, DUAL_GEMM_TABLE_FP4_PEAK, B200.bandwidth,
            "max(FP4 math of both products, DRAM traffic of a, b1, b2, their scales and c); the FP4 rate is the table's own",
            _table((dict(m=256, n=4096, k=7168, l=1), 4.708), (dict(m=512, n=4096, k=7168, l=1), 8.714),
                   (dict(m=256, n=3072, k=4096, l=1), 2.125), (dict(m=512, n=3072, k=7168, l=1), 6.535))),
    ),
    "nvfp4_group_gemm": _builtin(
        "nvfp4_group_gemm", spec_keys=("m", "n", "k", "g"), leaderboard_id=730, deadline="2026-02-21T07:30:00+00:00",
        eval=GROUPED_BENCH, list_keys=("m", "n", "k"), count_key="g",
        input_names=(EachGroup(("a", "b", "c")), EachGroup(("sfa", "sfb")), EachGroup(("sfa_reordered", "sfb_reordered")),
                     "problem_sizes"),
        scale_twins=_scale_twins(("sfa", "sfa_reordered"), ("sfb", "sfb_reordered")),
        speed_of_light=SpeedOfLight(
            _group_gemm_work, B200.peak_flops, B200.bandwidth,
            "max(FP4 math, DRAM traffic) summed over the groups; every row memory-bound", _table(
                (dict(m=(80, 176, 128, 72, 64, 248, 96, 160), n=(4096,) * 8, k=(7168,) * 8, g=8), 18.833),
                (dict(m=(40, 76, 168, 72, 164, 148, 196, 160), n=(7168,) * 8, k=(2048,) * 8, g=8), 10.667),
                (dict(m=(192, 320), n=(3072,) * 2, k=(4096,) * 2, g=2), 2.406),
                (dict(m=(128, 384), n=(4096,) * 2, k=(1536,) * 2, g=2), 1.525))),
    ),
}


def _tolerance(check_implementation) -> tuple[float, float]:
    """rtol and atol that a competition-style make_match_reference(ref_kernel, rtol=..., atol=...)
    closed over; match_reference's defaults where it names none (a check_implementation of the
    folder's own making, whose tolerance is its own: the judge's edits then count any change the
    defaults see as one)."""
    for cell in getattr(check_implementation, "__closure__", None) or ():
        contents = cell.cell_contents
        if isinstance(contents, dict) and {"rtol", "atol"} & contents.keys():
            return contents.get("rtol", 1e-05), contents.get("atol", 1e-08)
    return 1e-05, 1e-08


_CASES_FOLDER: Path | None = None  # this process's folder of folders' cases files, removed at its exit


def _cases_file(problem: str, which: str, text: str) -> Path:
    """A file holding `text`, a folder's `which` cases in the tests-file format, named by its
    content: a judge that loads a folder for every candidate (the service's) writes it once."""
    global _CASES_FOLDER
    if _CASES_FOLDER is None:
        _CASES_FOLDER = Path(tempfile.mkdtemp(prefix="nvfp4-folder-cases-"))
        atexit.register(shutil.rmtree, _CASES_FOLDER, True)
    path = _CASES_FOLDER / f"{problem}-{which}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.txt"
    if not path.is_file():  # written whole under another name, then moved: a reader never sees half of it
        with tempfile.NamedTemporaryFile("w", dir=_CASES_FOLDER, delete=False) as written:
            written.write(text)
        os.replace(written.name, path)
    return path


def _folder_problem(folder: Path) -> Problem:
    """A problem from a folder laid out as reference-kernels': task.yml names the runner's files
    (sources resolved from the folder), the eval and the cases, which are written out in the
    tests-file format to a folder of this process's own (the runner makes its tests file the same
    way); the user's folder is only read. The folder's generate_input, ref_kernel and
    check_implementation are applied as its eval applies them."""
    from harness.problems.folder_task import read_task, cases_as_tests_file

    task = read_task(folder)
    sources = tuple((module, task.files[f"{module}.py"]) for module in RUNNER_MODULES if f"{module}.py" in task.files)
    missing = [f"{module}.py" for module in RUNNER_MODULES if module not in dict(sources) and not (folder / f"{module}.py").is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} lacks {', '.join(missing)}, which its task.yml's files do not name either")
    flavour = flavour_of(task.eval_file)
    case_files = {which: _cases_file(folder.name, which, cases_as_tests_file(cases))
                  for which, cases in (("tests", task.tests), ("benchmarks", task.benchmarks))}
    keys, optional, words = task.case_keys()
    cases = task.tests + task.benchmarks
    problem = Problem(
        name=folder.name, folder=folder, tests_file=case_files["tests"], benchmarks_file=case_files["benchmarks"],
        spec_keys=tuple(key for key in keys if key != "seed"), leaderboard=folder.name, leaderboard_id=None,
        deadline=None, rtol=1e-05, atol=1e-08, eval=flavour.parameters,
        list_keys=tuple(key for key in keys if any(isinstance(case.get(key), list) for case in cases)),
        optional_keys=optional, text_keys=words,
        sources=sources, own_check=True,
        timeouts_s=tuple(task.timeouts_s.items()), ranking_by=task.ranking_by or "geom", flavour=flavour.name,
        eval_files=tuple((name, path) for name, path in task.files.items() if path.is_file()),
        eval_main=task.main if task.eval_file is not None and task.eval_file.is_file() else "")
    rtol, atol = _tolerance(problem.reference.check_implementation)
    return dataclasses.replace(problem, rtol=rtol, atol=atol)


def load_problem(name_or_folder: str | Path) -> Problem:
    """A built-in problem by name, or the problem in a folder laid out as reference-kernels'."""
    if str(name_or_folder) in PROBLEMS:
        return PROBLEMS[str(name_or_folder)]
    folder = Path(name_or_folder)
    if folder.is_dir():
        return _folder_problem(folder.resolve())
    raise ValueError(f"no problem {str(name_or_folder)!r}: name one of {', '.join(PROBLEMS)} or a folder "
                     "with task.yml, task.py, utils.py and reference.py")
