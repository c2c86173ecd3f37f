"""The problem definitions (harness/problems): generators against the competition's, exact
references against an independent float64 computation, checks, SOL tables, eval parameters, and
nvfp4_gemm's definition against the kit's behaviour before problems were data. CPU only."""

import dataclasses
import hashlib
import importlib.util
import shutil
from fractions import Fraction
from pathlib import Path

import numpy
import pytest
import torch
import yaml

import reference
from harness.judge.jobs import Job
from harness.problems import BETTER_BENCH, PLAIN_EVAL, PROBLEMS, load_problem
from harness.problems import sol
from harness.problems.folder import plain_names_bound_to

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "problems"
NEW_PROBLEMS = ("nvfp4_gemv", "nvfp4_dual_gemm", "nvfp4_group_gemm")
MISMATCH = "mismatch found! custom implementation doesn't match reference: "

# Small cases: every tensor covered, the grouped one with an m that leaves padding in the atoms.
SMALL = {
    "nvfp4_gemm": dict(m=256, n=384, k=512, l=2),
    "nvfp4_gemv": dict(m=256, k=512, l=2),
    "nvfp4_dual_gemm": dict(m=256, n=384, k=512, l=2),
    "nvfp4_group_gemm": dict(m=(96, 128), n=(128, 256), k=(256, 512), g=2),
}
SEED = 1111

# Golden values: the competition's own generate_input (gpu-mode/reference-kernels at f83cb92,
# problems/nvidia/<problem>/reference.py) run on the CPU with torch 2.13.0 (its "cuda"
# placements turned into "cpu"; not committed), SMALL's case and SEED 1111. Per tensor, in the
# order of the returned structure flattened: dtype, shape, stride, device and the first 16 hex
# digits of the sha256 of its bytes (made contiguous). They reproduce the CPU's draws only: on a
# GPU the same seed gives other numbers (CUDA's generator, whose output for large tensors also
# depends on the GPU's SM count).
COMPETITION_ON_CPU = {
    "nvfp4_gemv": [
        ("float4_e2m1fn_x2", (256, 256, 2), (256, 1, 65536), "cpu", "eccee4aa73e27148"),
        ("float4_e2m1fn_x2", (128, 256, 2), (256, 1, 32768), "cpu", "14798cd12b81ec0f"),
        ("float8_e4m3fn", (256, 32, 2), (32, 1, 8192), "cpu", "e9f57f09b1ccfd2f"),
        ("float8_e4m3fn", (128, 32, 2), (32, 1, 4096), "cpu", "2ec87dbdd29850e4"),
        ("float8_e4m3fn", (32, 4, 2, 4, 8, 2), (16, 4, 4096, 1, 512, 8192), "cpu", "8ac20cd93fbf83a7"),
        ("float8_e4m3fn", (32, 4, 1, 4, 8, 2), (16, 4, 4096, 1, 512, 4096), "cpu", "7db764687feb0ae8"),
        ("float16", (256, 1, 2), (1, 1, 256), "cpu", "51f397d322638bc5"),
    ],
    "nvfp4_dual_gemm": [
        ("float4_e2m1fn_x2", (256, 256, 2), (256, 1, 65536), "cpu", "a51e197a9f282f9b"),
        ("float4_e2m1fn_x2", (384, 256, 2), (256, 1, 98304), "cpu", "4089aff0b6e45519"),
        ("float4_e2m1fn_x2", (384, 256, 2), (256, 1, 98304), "cpu", "ab9b063620d397e1"),
        ("float8_e4m3fn", (256, 32, 2), (32, 1, 8192), "cpu", "9ca9f3a3d719b357"),
        ("float8_e4m3fn", (384, 32, 2), (32, 1, 12288), "cpu", "7a47715542e66add"),
        ("float8_e4m3fn", (384, 32, 2), (32, 1, 12288), "cpu", "3bb34ebc0ed6c93c"),
        ("float8_e4m3fn", (32, 4, 2, 4, 8, 2), (16, 4, 4096, 1, 512, 8192), "cpu", "93486355cb40793b"),
        ("float8_e4m3fn", (32, 4, 3, 4, 8, 2), (16, 4, 4096, 1, 512, 12288), "cpu", "002fd3f91d8d1aee"),
        ("float8_e4m3fn", (32, 4, 3, 4, 8, 2), (16, 4, 4096, 1, 512, 12288), "cpu", "ea6707d9510829a2"),
        ("float16", (256, 384, 2), (384, 1, 98304), "cpu", "c81eaad69b7cda6f"),
    ],
    "nvfp4_group_gemm": [
        ("float4_e2m1fn_x2", (96, 128, 1), (128, 1, 12288), "cpu", "ab0767f2559dd4f8"),
        ("float4_e2m1fn_x2", (128, 128, 1), (128, 1, 16384), "cpu", "a03e9ca8e1bb2648"),
        ("float16", (96, 128, 1), (128, 1, 12288), "cpu", "29f57538a7221fcb"),
        ("float4_e2m1fn_x2", (128, 256, 1), (256, 1, 32768), "cpu", "a7cf733c5d52edd2"),
        ("float4_e2m1fn_x2", (256, 256, 1), (256, 1, 65536), "cpu", "6e7bf202639a6c7a"),
        ("float16", (128, 256, 1), (256, 1, 32768), "cpu", "f23b3477526b1fb3"),
        ("float8_e4m3fn", (96, 16, 1), (16, 1, 1536), "cpu", "cba07f7760646c23"),
        ("float8_e4m3fn", (128, 16, 1), (16, 1, 2048), "cpu", "1c9ea75c8cd06d32"),
        ("float8_e4m3fn", (128, 32, 1), (32, 1, 4096), "cpu", "603c3371653f65a8"),
        ("float8_e4m3fn", (256, 32, 1), (32, 1, 8192), "cpu", "41d9e45100e5d29c"),
        ("float8_e4m3fn", (32, 4, 1, 4, 4, 1), (16, 4, 2048, 1, 512, 2048), "cpu", "2b364b70a083931f"),
        ("float8_e4m3fn", (32, 4, 1, 4, 4, 1), (16, 4, 2048, 1, 512, 2048), "cpu", "5e32a9fc18a260ba"),
        ("float8_e4m3fn", (32, 4, 1, 4, 8, 1), (16, 4, 4096, 1, 512, 4096), "cpu", "cb6f8a0135e9507e"),
        ("float8_e4m3fn", (32, 4, 2, 4, 8, 1), (16, 4, 4096, 1, 512, 8192), "cpu", "a994a5a87a826bab"),
    ],
}


def as_list(output) -> list[torch.Tensor]:
    return list(output) if isinstance(output, list) else [output]


def tensors(data) -> list[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (list, tuple)):
        return [tensor for item in data for tensor in tensors(item)]
    return []


def describe(tensor: torch.Tensor) -> tuple:
    digest = hashlib.sha256(tensor.contiguous().flatten().view(torch.uint8).numpy().tobytes()).hexdigest()
    return (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), tuple(tensor.stride()), tensor.device.type,
            digest[:16])


def clone(data):
    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, (list, tuple)):
        return type(data)(clone(item) for item in data)
    return data


@pytest.fixture(scope="module", params=list(PROBLEMS))
def problem(request):
    return PROBLEMS[request.param]


@pytest.fixture(scope="module")
def data(problem):
    return problem.generate(SMALL[problem.name], SEED, "cpu")


# ---- generators ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW_PROBLEMS)
def test_generator_matches_the_competitions_on_the_cpu(name):
    problem = PROBLEMS[name]
    assert [describe(t) for t in tensors(problem.generate(SMALL[name], SEED, "cpu"))] == COMPETITION_ON_CPU[name]


@pytest.mark.parametrize("name", NEW_PROBLEMS)
def test_another_seed_gives_other_data(name):
    first, other = (tensors(PROBLEMS[name].generate(SMALL[name], seed, "cpu")) for seed in (SEED, SEED + 42))
    assert all(describe(x)[-1] != describe(y)[-1] for x, y in zip(first, other) if x.dtype != torch.float8_e4m3fn)


def test_grouped_plain_scales_stay_on_the_cpu_as_the_competitions_do():
    data = PROBLEMS["nvfp4_group_gemm"].generate(SMALL["nvfp4_group_gemm"], SEED, "cpu")
    assert data[3] == [(96, 128, 256, 1), (128, 256, 512, 1)]
    source = (PROBLEMS["nvfp4_group_gemm"].folder / "reference.py").read_text()
    assert 'dtype=torch.int8, device="cpu")' in source


# ---- exact references ------------------------------------------------------------------------

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def independent_values(packed: torch.Tensor, scales: torch.Tensor) -> numpy.ndarray:
    """float64 (rows, k) from the bits alone: e2m1 and e4m3 decoded by their definitions."""
    codes = packed.view(torch.uint8).numpy().astype(numpy.int64)
    nibbles = numpy.stack((codes & 0xF, codes >> 4), axis=-1).reshape(codes.shape[0], -1)
    values = numpy.array(E2M1)[nibbles & 7] * numpy.where(nibbles & 8, -1.0, 1.0)
    scale_bits = scales.view(torch.uint8).numpy().astype(numpy.int64)
    exponent, mantissa = (scale_bits >> 3) & 0xF, scale_bits & 7
    scale = numpy.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    return values * numpy.repeat(scale, 16, axis=1)


def independent_gemm(a, sfa, b, sfb) -> numpy.ndarray:
    return independent_values(a, sfa) @ independent_values(b, sfb).T


@pytest.mark.parametrize("name", NEW_PROBLEMS)
def test_exact_products_are_exact_for_any_codes_and_scales(name):
    """All 16 e2m1 codes and e4m3 scales from 2^-9 to 448: the float64 sum is the rational one."""
    exact_block_scaled_mm = PROBLEMS[name].reference.exact_block_scaled_mm
    generator = torch.Generator().manual_seed(5)
    a = torch.randint(0, 256, (8, 64), dtype=torch.uint8, generator=generator)
    b = torch.randint(0, 256, (8, 64), dtype=torch.uint8, generator=generator)
    scale_bits = [torch.randint(1, 0x7F, (8, 8), dtype=torch.uint8, generator=generator) for _ in range(2)]
    sfa, sfb = (bits.view(torch.float8_e4m3fn) for bits in scale_bits)
    a, b = a.view(torch.float4_e2m1fn_x2), b.view(torch.float4_e2m1fn_x2)
    ours = exact_block_scaled_mm(a, sfa, b, sfb)
    a_values, b_values = independent_values(a, sfa), independent_values(b, sfb)
    for i, j in [(0, 0), (3, 5), (7, 7)]:
        exact = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a_values[i], b_values[j]))
        assert Fraction(ours[i, j].item()) == exact
    assert numpy.count_nonzero(ours.numpy()) > 0


@pytest.mark.parametrize("name", ["nvfp4_gemv", "nvfp4_group_gemm"])
def test_float16_rounding_is_single(name):
    """Values just past a float16 tie that float32 rounds onto the tie: numpy converts float64 to
    float16 in one step, torch through float32."""
    round_to_float16 = PROBLEMS[name].reference.round_to_float16
    ulp = 2.0**-10
    values = torch.tensor([1 + ulp / 2 + 2.0**-30, -(1 + ulp / 2 + 2.0**-30), 1 + ulp / 2, 3 + 3 * ulp / 2 - 2.0**-28,
                           2.0**-20 + 2.0**-40, 1234.5678], dtype=torch.float64)
    ours = round_to_float16(values).numpy()
    assert numpy.array_equal(ours.view(numpy.int16), values.numpy().astype(numpy.float16).view(numpy.int16))
    assert not numpy.array_equal(values.to(torch.float16).numpy().view(numpy.int16), ours.view(numpy.int16))


def independent_expected(name: str, data) -> list[numpy.ndarray]:
    if name == "nvfp4_gemv":
        a, b, sfa, sfb, _, _, c = data
        batches = [independent_gemm(a[:, :, l], sfa[:, :, l], b[:1, :, l], sfb[:1, :, l]) for l in range(c.shape[2])]
        return [numpy.stack(batches, axis=-1).astype(numpy.float16)]
    if name == "nvfp4_dual_gemm":
        a, b1, b2, sfa, sfb1, sfb2, _, _, _, c = data
        batches = []
        for l in range(c.shape[2]):
            gate = independent_gemm(a[:, :, l], sfa[:, :, l], b1[:, :, l], sfb1[:, :, l]).astype(numpy.float32)
            up = independent_gemm(a[:, :, l], sfa[:, :, l], b2[:, :, l], sfb2[:, :, l]).astype(numpy.float32)
            gate64 = gate.astype(numpy.float64)
            batches.append(gate64 / (1 + numpy.exp(-gate64)) * up)
        return [numpy.stack(batches, axis=-1).astype(numpy.float16)]
    if name == "nvfp4_group_gemm":
        return [independent_gemm(a[:, :, 0], sfa[:, :, 0], b[:, :, 0], sfb[:, :, 0])[:, :, None].astype(numpy.float16)
                for (a, b, _), (sfa, sfb) in zip(data[0], data[1])]
    a, b, sfa, sfb, _, _, c = data
    batches = [independent_gemm(a[:, :, l], sfa[:, :, l], b[:, :, l], sfb[:, :, l]) for l in range(c.shape[2])]
    return [numpy.stack(batches, axis=-1).astype(numpy.float16)]


def test_reference_against_an_independent_float64_computation(problem, data):
    ours = [tensor.numpy() for tensor in as_list(problem.expected(clone(data)))]
    theirs = independent_expected(problem.name, data)
    assert len(ours) == len(theirs)
    for mine, independent in zip(ours, theirs):
        assert numpy.count_nonzero(independent) > independent.size // 2
        if problem.name == "nvfp4_dual_gemm":
            # SiLU and the product in float32 against float64: at most one float16 step apart.
            assert numpy.allclose(mine.astype(numpy.float64), independent.astype(numpy.float64), rtol=2**-10, atol=0)
            assert numpy.mean(mine.view(numpy.int16) == independent.view(numpy.int16)) > 0.99
        else:
            assert numpy.array_equal(mine.view(numpy.int16), independent.view(numpy.int16))


# ---- checks ----------------------------------------------------------------------------------

def test_check_passes_the_reference_and_fails_a_perturbed_output(problem, data):
    expected = problem.expected(clone(data))
    assert problem.check(expected, clone(expected)) == (True, "")
    perturbed = clone(expected)
    wrong = as_list(perturbed)[-1]
    wrong[1, 0, 0] += 1.0 + 0.01 * abs(float(wrong[1, 0, 0]))
    good, message = problem.check(expected, perturbed)
    assert not good
    if problem.name == "nvfp4_group_gemm":
        assert message.startswith(MISMATCH + "1 ['Number of mismatched elements: 1', 'ERROR AT ")
    else:
        assert message.startswith(MISMATCH + "Number of mismatched elements: 1 ERROR AT ")


def test_grouped_check_names_a_list_of_the_wrong_length():
    problem = PROBLEMS["nvfp4_group_gemm"]
    expected = problem.expected(problem.generate(SMALL[problem.name], SEED, "cpu"))
    assert problem.check(expected, expected[:1]) == (False, "output length mismatch: got 1, expected 2")


def import_submission(problem, path: Path):
    """The file as the runner imports it: its `task`, `utils` and `reference` are the problem's."""
    spec = importlib.util.spec_from_file_location(f"submission_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    with plain_names_bound_to(problem.modules()):
        spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("verdict", ["torch", "wrong"])
def test_fixture_submissions_through_the_problems_own_check(problem, data, verdict):
    submission = import_submission(problem, FIXTURES / f"{problem.name}_{verdict}.py")
    output = submission.custom_kernel(clone(data))
    good, message = problem.check(problem.expected(clone(data)), output)
    competition_good, competition_message = problem.reference.check_implementation(clone(data), output)
    assert (good, message) == (competition_good, competition_message)
    if verdict == "torch":
        assert (good, message) == (True, "")
    else:
        assert not good and message.startswith(MISMATCH)


def test_outputs_are_the_tensors_custom_kernel_writes(problem, data):
    outputs = problem.outputs(data)
    if problem.name == "nvfp4_group_gemm":
        assert [tuple(c.shape) for c in outputs] == [(96, 128, 1), (128, 256, 1)]
        assert all(c is group[2] for c, group in zip(outputs, data[0]))
    else:
        assert len(outputs) == 1 and outputs[0] is data[-1] and outputs[0].dtype == torch.float16


# ---- nvfp4_gemm as the kit had it ------------------------------------------------------------

def test_gemm_problem_is_the_root_reference_bit_for_bit():
    problem = PROBLEMS["nvfp4_gemm"]
    root = Path(reference.__file__).resolve().parent
    assert problem.runner_files() == {name: root / f"{name}.py" for name in ("task", "utils", "reference")}
    ours = problem.generate(SMALL["nvfp4_gemm"], SEED, "cpu")
    today = reference.generate_input(*SMALL["nvfp4_gemm"].values(), SEED, device="cpu")
    assert [describe(t) for t in ours] == [describe(t) for t in today]
    assert describe(problem.expected(clone(ours))) == describe(reference.ref_kernel(clone(today)))
    assert problem.rtol == reference.RTOL and problem.atol == reference.ATOL


def test_gemm_problem_keeps_todays_eval_parameters():
    """The figures the judge used for nvfp4_gemm before it read them from the problem."""
    eval_parameters = PROBLEMS["nvfp4_gemm"].eval
    assert eval_parameters == BETTER_BENCH
    assert (eval_parameters.benchmark_warmup, eval_parameters.benchmark_run) == ((200, 1e8), (200, 10e9))
    assert (eval_parameters.leaderboard_warmup, eval_parameters.leaderboard_run) == ((1000, 5e8), (1000, 30e9))
    assert eval_parameters.flush_bytes == 16000 * 1024 * 1024 * 4
    assert (eval_parameters.calls_per_batch, eval_parameters.seed_step) == (50, 42)
    assert eval_parameters.leaderboard_warms_every_case and eval_parameters.leaderboard_rechecks
    assert eval_parameters.recheck_judges_last_output_only and eval_parameters.recheck_fresh_seed_step == 0
    assert Job("test", None).problem is PROBLEMS["nvfp4_gemm"]


@pytest.mark.parametrize("mnkl", [(128, 7168, 16384, 1), (256, 4096, 7168, 2), (2304, 4608, 7168, 1)])
@pytest.mark.parametrize("gpu", ["B200", "H100", "H200"])
def test_gemm_sol_is_harness_sol(mnkl, gpu):
    spec = dict(zip("mnkl", mnkl))
    assert PROBLEMS["nvfp4_gemm"].sol_ns(spec, gpu) == sol.DEVICES[gpu].sol_seconds(*mnkl) * 1e9


# ---- data: SOL tables, cases, task.yml, leaderboards -----------------------------------------

def test_sol_formula_reproduces_the_published_table(problem):
    rows = problem.speed_of_light.rows()
    assert len(rows) == len(problem.cases("benchmarks"))
    for spec, microseconds in rows:
        assert round(problem.sol_ns(spec) / 1e3, 3) == microseconds, spec


def test_sol_table_lists_the_benchmarks(problem):
    benchmarks = [{key: case.args[key] for key in problem.spec_keys} for case in problem.cases("benchmarks")]
    assert [spec for spec, _ in problem.speed_of_light.rows()] == benchmarks


@pytest.mark.parametrize("name", NEW_PROBLEMS)
def test_case_files_are_task_yml_s(name):
    problem = PROBLEMS[name]
    task = yaml.safe_load((problem.folder / "task.yml").read_text())
    for which in ("tests", "benchmarks"):
        listed = [{key: tuple(value) if isinstance(value, list) else value for key, value in case.items()}
                  for case in task[which]]
        assert [case.args for case in problem.cases(which)] == listed
        assert all(set(case) == {*problem.spec_keys, "seed"} for case in listed)


def test_leaderboards_and_deadlines():
    assert {name: (p.leaderboard, p.leaderboard_id, p.deadline[:10]) for name, p in PROBLEMS.items()} == {
        "nvfp4_gemm": ("nvfp4_gemm", 597, "2025-12-21"), "nvfp4_gemv": ("nvfp4_gemv", 595, "2025-11-29"),
        "nvfp4_dual_gemm": ("nvfp4_dual_gemm", 598, "2026-01-20"),
        "nvfp4_group_gemm": ("nvfp4_group_gemm", 730, "2026-02-21")}
    assert PROBLEMS["nvfp4_gemv"].eval == PLAIN_EVAL
    assert PROBLEMS["nvfp4_group_gemm"].eval.calls_per_batch == 15


# ---- a folder a user brings ------------------------------------------------------------------

def test_a_folder_laid_out_as_reference_kernels_loads_with_its_own_reference(tmp_path):
    folder = tmp_path / "my_gemv"
    shutil.copytree(PROBLEMS["nvfp4_gemv"].folder, folder)
    shutil.copyfile(PROBLEMS["nvfp4_gemv"].runner_files()["utils"], folder / "utils.py")
    problem = load_problem(folder)
    assert (problem.name, problem.spec_keys, problem.rtol, problem.atol) == ("my_gemv", ("m", "k", "l"), 1e-3, 1e-3)
    assert problem.eval == PLAIN_EVAL
    assert [case.args for case in problem.cases("tests")] == [case.args for case in PROBLEMS["nvfp4_gemv"].cases("tests")]
    assert problem.reference.__file__ == str(folder / "reference.py")
    data = problem.generate(SMALL["nvfp4_gemv"], SEED, "cpu")
    assert [describe(t) for t in tensors(data)] == COMPETITION_ON_CPU["nvfp4_gemv"]


def test_an_unknown_name_is_refused():
    with pytest.raises(ValueError, match="nvfp4_gemv"):
        load_problem("nvfp4_gemm_typo")


def test_problems_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        PROBLEMS["nvfp4_gemv"].rtol = 1.0
