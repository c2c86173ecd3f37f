"""Host-side parts of submission.py that run without a GPU: per-shape configuration, split-K
ranges, the persistent tile schedule, the scale-factor layout (against reference.py and against
CuTe's own layout), and input validation."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import random
import sys
from pathlib import Path

import cutlass
import cutlass.cute as cute
import pytest
import torch

import submission as sub
from harness.problems import shapes
from harness.problems.scale_layout import permuted_index
from harness.submitting.compile import TMEM_COLUMNS
from reference import generate_input

OFFICIAL = sorted({sub.Problem(*case.mnkl) for name in ("tests", "benchmarks")
                   for case in shapes.official_cases(name)})
BENCHMARKS = [sub.Problem(*case.mnkl) for case in shapes.official_cases("benchmarks")]


# ----- configuration -----

def test_benchmark_shapes_get_their_configurations():
    expected = {
        (128, 7168, 16384, 1): (128, 2, 6, 1),
        (128, 4096, 7168, 1): (64, 1, 8, 1),
        (128, 7168, 2048, 1): (64, 1, 3, 2),
    }
    assert {tuple(p) for p in BENCHMARKS} == set(expected)
    for problem in BENCHMARKS:
        config = sub.sm100_config(problem)
        assert (config.mma_n, config.split_k, config.stages, config.ctas_per_sm) == expected[tuple(problem)]


@pytest.mark.parametrize("problem", OFFICIAL, ids=lambda p: "x".join(map(str, p)))
def test_every_official_shape_gets_a_configuration_that_fits(problem):
    config = sub.sm100_config(problem)
    assert config.mma_n in (64, 128) and problem.m % config.mma_n == 0
    assert 2 <= config.stages <= sub.Sm100Config.max_stages(config.mma_n, config.ctas_per_sm)
    # Every CTA an SM holds, with its static shared memory and the system's part.
    ctas = config.ctas_per_sm
    assert ctas * (config.smem_bytes + sub.SM100_STATIC_SMEM_BYTES + sub.SM100_SMEM_RESERVED) <= sub.SM100_SMEM_PER_SM
    assert config.smem_bytes + sub.SM100_STATIC_SMEM_BYTES <= sub.SM100_SMEM_BYTES
    assert ctas * config.tmem_columns <= TMEM_COLUMNS
    k_tiles = problem.k // sub.SM100_TILE_K
    assert 1 <= config.split_k <= k_tiles


def test_general_rule_fills_the_machine_without_oversubscribing_it():
    # 128 x 1536: 12 column tiles -> 64-row tiles (24 units) -> split K while units fit the SMs.
    config = sub.sm100_config(sub.Problem(128, 1536, 7168, 1))
    assert (config.mma_n, config.split_k) == (64, 2)  # 48 units of 14 K tiles each: two splits at most
    config = sub.sm100_config(sub.Problem(128, 3072, 1536, 1))
    assert (config.mma_n, config.split_k, config.ctas_per_sm) == (64, 1, 1)  # 6 K tiles: too few to split
    config = sub.sm100_config(sub.Problem(512, 1536, 7168, 1))
    assert (config.mma_n, config.split_k, config.ctas_per_sm) == (64, 1, 2)  # 96 units: too many to split or
    # to leave the next call a grid's worth of SMs
    config = sub.sm100_config(sub.Problem(2304, 4608, 7168, 1))
    assert (config.mma_n, config.split_k) == (128, 1)  # 648 tiles: already several per SM
    config = sub.sm100_config(sub.Problem(128, 256, 256, 1))
    assert config.split_k == 1  # one K tile cannot be split


def test_tensor_memory_budget_counts_accumulators_and_scales():
    assert sub.Sm100Config(128, 1, 6).tmem_columns == 512  # 2 x 128 + 16 + 16 = 288 -> 512
    assert sub.Sm100Config(64, 1, 8).tmem_columns == 256  # 2 x 64 + 16 + 16 = 160 -> 256


def test_two_ctas_an_sm_take_three_stages_of_64_rows():
    """Half of the SM's 228 KB, less each CTA's static shared memory, the system's part and the
    barriers: three stages of 28 KB; one CTA an SM keeps eight (64 rows) and six (128 rows)."""
    assert sub.Sm100Config.max_stages(64, 2) == 3
    assert (sub.Sm100Config.max_stages(64), sub.Sm100Config.max_stages(128)) == (8, 6)
    assert sub.Sm100Config.smem_limit(1) == sub.SM100_SMEM_BYTES


def test_a_configuration_for_two_ctas_an_sm_must_leave_room_for_the_second():
    """Two CTAs: 3 stages of 64 rows take 87,040 + 1,024 static + 1,024 reserved bytes, twice
    within the SM's 233,472, and 256 tensor-memory columns, twice within 512. A fourth stage,
    or 128-row tiles (512 columns each), cannot share the SM and are refused."""
    two = sub.Sm100Config(64, 1, 3, ctas_per_sm=2)
    assert 2 * (two.smem_bytes + sub.SM100_STATIC_SMEM_BYTES + sub.SM100_SMEM_RESERVED) == 178_176
    assert 2 * two.tmem_columns == sub.SM100_TMEM_COLUMNS
    with pytest.raises(ValueError, match="116736 bytes of shared memory"):
        sub.Sm100Config(64, 1, 4, ctas_per_sm=2)
    with pytest.raises(ValueError, match="512 tensor-memory columns"):
        sub.Sm100Config(128, 1, 2, ctas_per_sm=2)
    with pytest.raises(ValueError, match="shared memory"):
        sub.Sm100Config(128, 1, 7)  # one CTA an SM: six stages of 128 rows at most


def test_stage_bytes_match_the_tiles():
    # B tile 128 x 256 fp4, A tile 64 x 256 fp4, scales for 128 + 128 rows x 16 columns.
    assert sub.Sm100Config.stage_bytes(64) == 16384 + 8192 + 2048 + 2048
    assert sub.Sm100Config.stage_bytes(128) == 16384 + 16384 + 2048 + 2048


# ----- split-K and the tile schedule -----

@pytest.mark.parametrize("splits", [1, 2, 3, 4])
def test_split_k_ranges_cover_k_exactly_once(splits):
    for k_tiles in range(splits, 80):
        ranges = [sub.split_k_range(s, k_tiles, splits) for s in range(splits)]
        covered = [t for begin, end in ranges for t in range(begin, end)]
        assert covered == list(range(k_tiles))
        assert all(end > begin for begin, end in ranges)  # no split idles
        sizes = [end - begin for begin, end in ranges]
        assert max(sizes) - min(sizes) <= 1


def test_a_split_without_a_k_tile_is_refused_before_launch():
    """Fewer K tiles than splits would leave a split an empty range, whose MMA warp commits an
    accumulator it never wrote: the launch plan refuses such a config on the host."""
    pinned = sub.Sm100Config(mma_n=64, split_k=4, stages=8)
    with pytest.raises(ValueError, match="split-K 4 needs at least 4 K tiles of 256; K = 512 has 2"):
        pinned.check_problem(sub.Problem(128, 1024, 512, 1))
    pinned.check_problem(sub.Problem(128, 1024, 1024, 1))  # one tile each: accepted
    assert sub.split_k_range(0, 2, 4) == (0, 0)  # the empty range it prevents
    for m in (128, 256, 384):
        for n in (128, 256, 1024, 7168):
            for k in (256, 512, 768, 1024, 4096):
                problem = sub.Problem(m, n, k, 1)
                sub.sm100_config(problem).check_problem(problem)


def schedule_units(config: sub.Sm100Config, problem: sub.Problem, num_sms: int) -> dict:
    """Every CTA's work units, as the kernel's warps walk them ({cta: [WorkUnit, ...]}), from
    the kernel's own `Sm100Schedule` run on ints."""
    ctas = config.grid_ctas(problem, num_sms)
    # The problem in the MMA's roles: its N tiles run over M, its M tiles over N.
    mma_n_tiles, mma_m_tiles = problem.m // config.mma_n, problem.n // sub.SM100_MMA_M
    units = {}
    for cta in range(ctas):
        schedule = sub.Sm100Schedule(config, cta, ctas, mma_n_tiles, mma_m_tiles, problem.k // sub.SM100_TILE_K, problem.l)
        units[cta] = [schedule.unit(linear) for linear in range(*schedule.units)]
    return units


SCHEDULED = OFFICIAL + [sub.Problem(256, 384, 4096, 3), sub.Problem(384, 7168, 2304, 2)]


@pytest.mark.parametrize("num_sms", [148, 132, 7])
@pytest.mark.parametrize("split_k", [1, 2, 3])
@pytest.mark.parametrize("problem", SCHEDULED, ids=lambda p: "x".join(map(str, p)))
def test_the_schedule_covers_every_k_tile_of_every_output_tile_once(problem, split_k, num_sms):
    """Each K tile of each output tile is multiplied by exactly one CTA, and the CTAs that add
    into one tile hold the slots 0 .. split_k - 1."""
    config = dataclasses.replace(sub.sm100_config(problem, num_sms), split_k=split_k)
    if problem.k // sub.SM100_TILE_K < split_k:
        return  # refused by check_problem (test_a_split_without_a_k_tile_is_refused_before_launch)
    config.check_problem(problem, num_sms)
    covered, parts = [], {}
    for cta, walked in schedule_units(config, problem, num_sms).items():
        for unit in walked:
            tile = (unit.mma_n_tile, unit.mma_m_tile, unit.batch)  # (rows, columns) of c
            assert unit.k_begin < unit.k_end, (cta, unit)
            covered += [(*tile, k_tile) for k_tile in range(unit.k_begin, unit.k_end)]
            parts.setdefault(tile, []).append(unit.split)
    tiles = itertools.product(range(problem.m // config.mma_n), range(problem.n // sub.SM100_MMA_M), range(problem.l))
    expected = [(*tile, k_tile) for tile in tiles for k_tile in range(problem.k // sub.SM100_TILE_K)]
    assert sorted(covered) == sorted(expected)
    for tile, held in parts.items():
        assert sorted(held) == list(range(split_k)), tile


@pytest.mark.parametrize("splits", range(2, 7))
def test_the_last_arrival_adds_every_other_split_once(splits):
    for part in range(splits):
        assert sorted(sub.SplitKReduction.other_split(j, part) for j in range(splits - 1)) == [p for p in range(splits) if p != part]


def test_the_sanitizer_shapes_run_whole_tiles_and_split_k():
    configs = [sub.sm100_config(sub.Problem(*case.mnkl), conservative=False)
               for case in shapes.load_cases(shapes.SHAPES_DIR / "sanitize.txt")]
    assert {config.split_k > 1 for config in configs} == {False, True}


def code_paths(config: sub.Sm100Config) -> set[str]:
    """The kernel's compile-time branches that `config` takes."""
    paths = {f"{config.mma_n}-row tiles", "PDL" if config.pdl else "no PDL", f"{config.ctas_per_sm} CTAs an SM"}
    if config.split_k == 1:
        paths.add("whole K")
    else:
        paths.add("split-K")
        paths.add(f"{config.partials_ahead} subtiles of partials ahead")
    return paths


def test_the_official_tests_run_only_paths_the_benchmarks_run():
    """What the check passes is what the timed calls run: every branch a test shape's
    configuration takes, a benchmark's takes too."""
    benchmarks = set().union(*(code_paths(sub.sm100_config(problem, conservative=False)) for problem in BENCHMARKS))
    assert benchmarks == {"64-row tiles", "128-row tiles", "PDL", "whole K", "split-K", "2 subtiles of partials ahead",
                          "1 CTAs an SM", "2 CTAs an SM"}
    tests = [sub.Problem(*case.mnkl) for case in shapes.official_cases("tests")]
    only_tests = {problem: code_paths(sub.sm100_config(problem, conservative=False)) - benchmarks for problem in tests}
    assert {problem: paths for problem, paths in only_tests.items() if paths} == {}


def test_units_sharing_b_rows_are_scheduled_together():
    # Consecutive units walk the M tiles and splits of one N tile before moving on.
    coords = [sub.tile_coords(u, 2, 2, 3) for u in range(4)]
    assert {n for _, _, n, _ in coords} == {0}


# ----- scale-factor layout -----

def scale_offset(row: int, k_block: int, batch: int, mn: int, k: int, l: int) -> int:
    """Element offset of the scale of (row, K block of 16, batch) in a permuted scale buffer, by
    the submission's strides and the judge's index."""
    return sum(c * s for c, s in zip(permuted_index(row, k_block, batch), sub.permuted_scale_layout(mn, k, l)[1]))


def test_scale_offsets_match_reference_permuted_tensors():
    m, n, k, l = 256, 384, 1024, 2
    _, _, sfa, sfb, sfa_permuted, sfb_permuted, _ = generate_input(m, n, k, l, seed=7, device="cpu")
    for plain, permuted, mn in ((sfa, sfa_permuted, m), (sfb, sfb_permuted, n)):
        assert permuted.stride() == sub.permuted_scale_layout(mn, k, l)[1]
        flat = permuted.view(torch.uint8).as_strided((permuted.numel(),), (1,), permuted.storage_offset())
        plain_bytes = plain.view(torch.uint8)
        rows, k_blocks = torch.meshgrid(torch.arange(mn), torch.arange(k // 16), indexing="ij")
        for batch in range(l):
            offsets = torch.tensor([[scale_offset(r, kb, batch, mn, k, l) for kb in range(k // 16)]
                                    for r in range(mn)])
            assert torch.equal(flat[offsets], plain_bytes[rows, k_blocks, batch])
        # Not vacuous: the scales vary.
        assert plain_bytes.unique().numel() > 1


def test_scale_offsets_match_cute_blockscaled_layout():
    """The layout the kernels read the scales with (cutlass.utils.blockscaled_layout), evaluated
    by CuTe at trace time, against the host mapping used by validation and tests."""
    import cutlass.utils.blockscaled_layout as blockscaled_layout

    mn, k, l = 256, 1024, 2
    rng = random.Random(3)
    points = [(rng.randrange(mn), rng.randrange(k // 16), rng.randrange(l)) for _ in range(200)]
    found = {}

    @cute.jit
    def probe():
        layout = blockscaled_layout.tile_atom_to_shape_SF((mn, k, l), sub.SF_VEC_SIZE)
        for row, k_block, batch in points:
            found[(row, k_block, batch)] = cute.crd2idx((row, k_block * sub.SF_VEC_SIZE, batch), layout)

    cute.compile(probe)
    assert len(found) == len(set(points))
    for (row, k_block, batch), offset in found.items():
        assert offset == scale_offset(row, k_block, batch, mn, k, l), (row, k_block, batch)


# ----- validation -----

def _valid(m=128, n=256, k=512, l=2):
    return list(generate_input(m, n, k, l, seed=11, device="cpu"))


def test_valid_cpu_input_fails_only_on_the_device():
    with pytest.raises(ValueError, match=r"^a must be on a CUDA device, got cpu$"):
        sub.validate_inputs(_valid())


def _replace(index, value):
    data = _valid()
    data[index] = value(data)
    return data


@pytest.mark.parametrize("data, message", [
    (lambda: _valid()[:6], r"7-tuple"),
    (lambda: _replace(0, lambda d: d[0].view(torch.uint8)), r"^a must have dtype torch.float4_e2m1fn_x2"),
    (lambda: _replace(6, lambda d: d[6].float()), r"^c must have dtype torch.float16"),
    (lambda: _replace(4, lambda d: d[4].view(torch.uint8)), r"^sfa_permuted must have dtype"),
    (lambda: _valid(m=192), r"^M must be a positive multiple of 128, got M=192"),
    (lambda: _valid(n=320), r"^N must be a positive multiple of 128, got N=320"),
    (lambda: _valid(k=384), r"^K must be a positive multiple of 256, got K=384"),
    (lambda: _replace(1, lambda d: d[1][:, :, :1]), r"^b must have shape \(256, 256, 2\) .* L must agree"),
    (lambda: _replace(6, lambda d: d[6].transpose(0, 1).contiguous().transpose(0, 1)),
     r"^c must be laid out as N-contiguous"),
    (lambda: _replace(0, lambda d: d[0].contiguous()), r"^a must be laid out as K-major"),
    (lambda: _replace(5, lambda d: d[5].contiguous()), r"^sfb_permuted must be laid out as the \(32, 4, rest_n"),
    (lambda: _replace(2, lambda d: d[2][:, :16]), r"^sfa must have shape \(128, 32, 2\)"),
], ids=["arity", "a dtype", "c dtype", "scale dtype", "M", "N", "K", "L mismatch", "c strides",
        "a strides", "sfb_permuted strides", "sfa shape"])
def test_validation_names_the_broken_constraint(data, message):
    with pytest.raises(ValueError, match=message):
        sub.validate_inputs(data())


# ----- call path -----

@pytest.mark.skipif(not sub.HAVE_TVM_FFI, reason="apache-tvm-ffi is not installed: the plans call the compiled kernels as they are")
def test_plans_call_the_tvm_ffi_function_past_the_python_wrapper(monkeypatch):
    """The entry the launch plans keep does not go through the compiled object's __call__, and
    the TVM-FFI function still checks the count and types of its arguments."""
    @cute.jit
    def host_only(address: cute.Pointer, value: cutlass.Int32):
        pass  # nothing launched: callable without a GPU

    compiled = cute.compile(host_only, sub.fake_pointer(cutlass.Float16), cutlass.Int32(1),
                            options=sub.compile_options())
    entry = sub.bare_tvm_ffi_function(compiled)
    monkeypatch.setattr(type(compiled), "__call__", lambda self, *args: pytest.fail("called the Python wrapper"))
    entry(4096, 7)
    with pytest.raises(TypeError, match="Expects 2 parameters"):
        entry(4096)
    with pytest.raises(TypeError, match="Mismatched type on argument #1"):
        entry(4096, "seven")


def test_without_tvm_ffi_the_plans_call_the_compiled_kernel(monkeypatch):
    monkeypatch.setitem(sys.modules, "tvm_ffi", None)  # import tvm_ffi raises ImportError
    compiled = object()
    assert sub.bare_tvm_ffi_function(compiled) is compiled


@pytest.mark.parametrize("problem", OFFICIAL, ids=lambda p: "x".join(map(str, p)))
def test_the_conservative_configuration_has_no_split_k_nor_pdl_and_fills_one_ctas_shared_memory(problem, monkeypatch):
    chosen = sub.sm100_config(problem, conservative=False)
    assert chosen.pdl
    monkeypatch.setenv(sub.SM100_CONSERVATIVE_ENV, "1")
    conservative = sub.sm100_config(problem)
    assert conservative.split_k == 1 and not conservative.pdl and conservative.ctas_per_sm == 1
    assert conservative.mma_n == chosen.mma_n
    # One CTA an SM: as deep as its shared memory allows, deeper than a two-CTA configuration.
    assert conservative.stages == sub.Sm100Config.max_stages(chosen.mma_n) >= chosen.stages
    with pytest.raises(ValueError, match="shared memory"):
        dataclasses.replace(conservative, stages=conservative.stages + 1)
    monkeypatch.setenv(sub.SM100_CONSERVATIVE_ENV, "0")
    assert sub.sm100_config(problem) == chosen


@pytest.mark.parametrize("problem", OFFICIAL, ids=lambda p: "x".join(map(str, p)))
def test_each_rung_of_the_ladder_drops_one_feature_of_the_one_before(problem, monkeypatch):
    """The chosen configuration, then without PDL, one CTA an SM, whole K, 128-row tiles: each
    rung keeps all but one of the previous rung's features (`sm100_traits`), none twice, and
    the last is the plain configuration (what most official tests run)."""
    monkeypatch.delenv(sub.SM100_CONSERVATIVE_ENV, raising=False)
    rungs = sub.sm100_ladder(problem)
    configs = [config for _, config in rungs]
    plain = sub.Sm100Config(mma_n=128, split_k=1, stages=sub.Sm100Config.max_stages(128), pdl=False)
    assert sub.Sm100Config.one_cta(128) == plain
    assert configs[0] == sub.sm100_config(problem, conservative=False) and configs[-1] == plain
    assert len(set(configs)) == len(configs)
    for before, after in zip(configs, configs[1:]):
        assert len(sub.sm100_traits(before) - sub.sm100_traits(after)) == 1
        assert sub.sm100_traits(after) < sub.sm100_traits(before)
    assert sub.sm100_config(problem, conservative=True) in configs
    for config in configs:
        config.check_problem(problem)
        if config.ctas_per_sm == 1:  # as deep as one CTA's shared memory allows
            assert config.stages == sub.Sm100Config.max_stages(config.mma_n)

    monkeypatch.setenv(sub.SM100_CONSERVATIVE_ENV, "1")  # whole K chosen: the ladder starts there
    conservative = sub.sm100_config(problem, conservative=True)
    assert [config for _, config in sub.sm100_ladder(problem)] == configs[configs.index(conservative):]


def test_the_first_benchmarks_split_k_falls_to_split_k_without_pdl():
    """128 x 7168 x 16384: split-K without PDL comes before whole K."""
    configs = [config for _, config in sub.sm100_ladder(BENCHMARKS[0])]
    assert [(c.split_k, c.pdl, c.mma_n) for c in configs] == [(2, True, 128), (2, False, 128), (1, False, 128)]


class _RecordingKernel:
    """Stands in for a compiled kernel: records the arguments of each call."""

    def __init__(self):
        self.calls = []

    def __call__(self, *args):
        self.calls.append(args)


def _cpu_rungs(monkeypatch, have_tvm_ffi: bool, problem):
    """Sm100Gemm's rungs for a benchmark shape on the CPU: the device's SM count and the
    compiler stand in, the plans' workspaces are CPU tensors."""
    compiled = []

    def compile_stub(config, arch=None, extra_options="", tvm_ffi=sub.HAVE_TVM_FFI, launch_bound=1):
        # The plans declare as many CTAs an SM as the configuration plans (its carveout).
        assert launch_bound == config.ctas_per_sm
        compiled.append((config, tvm_ffi))
        return _RecordingKernel(), None

    monkeypatch.setattr(sub, "HAVE_TVM_FFI", have_tvm_ffi)
    monkeypatch.setattr(sub, "_COMPILED", {})
    monkeypatch.setattr(sub.Sm100Gemm, "compile", compile_stub)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: type("Properties", (), {"multi_processor_count": sub.SM100_NUM_SMS}))
    return problem, sub.Sm100Gemm.rungs(problem, torch.device("cpu")), compiled


@pytest.mark.parametrize("shape", BENCHMARKS, ids=lambda p: "x".join(map(str, p)))
def test_with_tvm_ffi_every_configuration_has_a_twin_called_through_cute_pointers(shape, monkeypatch):
    """Where apache-tvm-ffi is installed each configuration of the ladder is compiled for it
    and called with bare addresses, then compiled without it and called with CuTe pointers and
    Int32s: a TVM-FFI that fails leaves the same configuration, the chosen one first."""
    problem, rungs, compiled = _cpu_rungs(monkeypatch, True, shape)
    ladder = sub.sm100_ladder(problem)
    assert [rung.name for rung in rungs] == [name + suffix for name, _ in ladder for suffix in ("", " without TVM-FFI")]
    addresses = tuple(4096 * (i + 1) for i in range(5))
    for number, rung in enumerate(rungs):
        plan = rung.build()
        plan.launch(addresses)
        (args,) = plan.kernel.calls
        through_tvm_ffi = number % 2 == 0
        assert plan.config == ladder[number // 2][1]
        assert compiled[-1] == (plan.config, through_tvm_ffi) and plan.tvm_ffi == through_tvm_ffi
        assert rung.traits == sub.sm100_traits(plan.config) | ({sub.TVM_FFI} if through_tvm_ffi else set())
        if through_tvm_ffi:
            assert args[:5] == addresses and all(type(arg) is int for arg in args)
            assert "TVM-FFI" not in sub.describe_plan(plan)
        else:
            assert all(isinstance(arg, cute.Pointer) for arg in args[:7])  # operands, then workspace
            # The cached CuTe pointers for these addresses and the operands' element types.
            assert all(arg is sub.pointer_arg(dtype, address, tvm_ffi=False)
                       for arg, dtype, address in zip(args, sub.Sm100BlockScaledGemm.POINTER_TYPES, addresses))
            assert [int(arg) for arg in args[7:]] == [*problem, plan.config.grid_ctas(problem, sub.SM100_NUM_SMS)]
            assert "without TVM-FFI" in sub.describe_plan(plan)


@pytest.mark.parametrize("shape", BENCHMARKS, ids=lambda p: "x".join(map(str, p)))
def test_without_tvm_ffi_the_ladder_is_called_through_cute_pointers_from_the_chosen_configuration(shape, monkeypatch):
    problem, rungs, _ = _cpu_rungs(monkeypatch, False, shape)
    assert [rung.name for rung in rungs] == [name for name, _ in sub.sm100_ladder(problem)]
    assert [rung.build().config for rung in rungs] == [config for _, config in sub.sm100_ladder(problem)]
    assert all(sub.TVM_FFI not in rung.traits for rung in rungs)


def test_every_configuration_a_benchmark_can_choose_is_run_by_a_test_of_ours():
    """tests/test_b200_kernel.py runs each of these on a B200 with three calls back to back, on
    test-like shapes: every rung of every benchmark's ladder, the benchmarks' own
    configurations (128-row split-K, which no official test takes) included."""
    from tests.test_b200_kernel import CONFIG_CASES

    pinned = {config for config, _ in CONFIG_CASES}
    assert {config for problem in BENCHMARKS for _, config in sub.sm100_ladder(problem)} <= pinned
    for config, problem in CONFIG_CASES:
        config.check_problem(problem)
        assert config.grid_ctas(problem, sub.SM100_NUM_SMS) >= 1


# ----- the file itself -----

SUBMISSION_LINE_LIMIT = 1400


def test_submission_stays_under_its_line_budget():
    lines = len(Path(sub.__file__).read_text().splitlines())
    assert lines < SUBMISSION_LINE_LIMIT, f"submission.py has {lines} lines, fewer than {SUBMISSION_LINE_LIMIT} allowed"


def test_submission_reads_top_down_as_what_runs():
    """The kernel first, then its host side, the call path, the self-check and dispatch."""
    tree = ast.parse(Path(sub.__file__).read_text())
    order = [node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))]
    assert set(order[:order.index("Sm100BlockScaledGemm")]) <= {"Problem", "_round_up"}  # types and arithmetic only
    steps = ["Sm100BlockScaledGemm", "SplitKReduction", "Sm100Schedule", "Sm100Config", "Sm100Gemm",
             "validate_inputs", "LaunchPlan", "first_call", "custom_kernel"]
    assert [order.index(name) for name in steps] == sorted(order.index(name) for name in steps)
    assert order[-1] == "custom_kernel"
