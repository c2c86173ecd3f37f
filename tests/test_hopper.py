"""The Hopper (sm_90a) stand-in (hopper_stand_in.py, called through submission.py): its decode
arithmetic and work split on the CPU, its results against the reference on an H100/H200."""

import contextlib
import importlib
import importlib.util
import sys
from unittest import mock

import numpy as np
import pytest
import torch

import hopper_stand_in
import reference
import submission
from harness.problems.shapes import official_cases
from hopper_stand_in import (SM90_CLUSTER_CAPACITY, SM90_DECODED_A_BUFFERS, HopperNvfp4Gemm, Sm90Config, Sm90Tiling,
                             TunedPlan)
from submission import Problem, split_k_range

E2M1 = np.array(reference.E2M1_MAGNITUDES, dtype=np.float64)


def _e2m1_value(code: int) -> float:
    value = E2M1[code & 7]
    return -value if code & 8 else value


def _e4m3_values(bits: np.ndarray) -> np.ndarray:
    """uint32 words of four e4m3 bytes -> their values, (words, 4), byte 0 first."""
    as_bytes = torch.from_numpy(bits.astype(np.uint32).view(np.uint8).copy())
    return as_bytes.view(torch.float8_e4m3fn).double().numpy().reshape(-1, 4)


def _finite_e4m3_codes() -> np.ndarray:
    codes = np.arange(256, dtype=np.uint8)
    values = torch.from_numpy(codes).view(torch.float8_e4m3fn).float().numpy()
    return codes[np.isfinite(values)], values[np.isfinite(values)]


def test_e2m1_codes_become_e4m3_bytes_of_the_same_value_times_2_pow_minus_6():
    # Words holding every code at every nibble position.
    words = np.array([0x76543210, 0xFEDCBA98, 0x89ABCDEF, 0x01234567, 0x3C5A96F0], dtype=np.uint32)
    for high in (0, 1):
        decoded = _e4m3_values(hopper_stand_in.sm90_e2m1_as_e4m3(words, high))
        for word, values in zip(words.tolist(), decoded):
            for byte, value in enumerate(values):
                assert value == _e2m1_value((word >> (4 * (2 * byte + high))) & 15) * 2.0**-6


def test_pairs_cover_each_word_once():
    """Pair i as the kernels decode it (half i % 2 of the e4m3 word of the low, i < 2, or high
    nibbles) holds the codes `SM90_PAIR_CODES[i]`, and the four pairs hold each code once: the
    K order of both operands rests on it."""
    codes = [code for pair in hopper_stand_in.SM90_PAIR_CODES for code in pair]
    assert sorted(codes) == list(range(8))
    words = np.array([0x76543210, 0xFEDCBA98, 0x3C5A96F0], dtype=np.uint32)
    for i, pair_codes in enumerate(hopper_stand_in.SM90_PAIR_CODES):
        halves = _e4m3_values(hopper_stand_in.sm90_e2m1_as_e4m3(words, i // 2))[:, 2 * (i % 2):2 * (i % 2) + 2]
        for word, values in zip(words.tolist(), halves):
            assert list(values) == [_e2m1_value((word >> (4 * c)) & 15) * 2.0**-6 for c in pair_codes]


def test_decoded_operands_are_exact_for_every_code_and_scale():
    """The kernel's operand is fp16(e4m3 byte) * fp16(scale), one fp16 multiply (numpy rounds
    to nearest even like mul.rn.f16x2; e4m3 -> fp16 is exact, as the hardware conversion is): it
    must equal code * scale * 2**-6 exactly, subnormal results included."""
    codes, scales = _finite_e4m3_codes()
    scale_f16 = torch.from_numpy(codes).view(torch.float8_e4m3fn).to(torch.float16).numpy()
    np.testing.assert_array_equal(scale_f16.astype(np.float64), scales)
    all_codes = np.arange(16, dtype=np.uint32)  # one code per word, in the low nibble
    elements = _e4m3_values(hopper_stand_in.sm90_e2m1_as_e4m3(all_codes, 0))[:, 0].astype(np.float16)
    products = elements[:, None] * scale_f16[None, :]  # fp16 x fp16 -> fp16, rounded
    expected = np.array([_e2m1_value(c) for c in range(16)])[:, None] * scales[None, :] * 2.0**-6
    np.testing.assert_array_equal(products.astype(np.float64), expected)
    assert np.abs(expected[expected != 0]).min() == 2.0**-16  # an fp16 subnormal
    assert hopper_stand_in.SM90_ACC_RESCALE == 2.0 ** (2 * hopper_stand_in.SM90_OPERAND_EXPONENT)


OFFICIAL = [Problem(*(case.args[key] for key in "mnkl")) for name in ("tests", "benchmarks")
            for case in official_cases(name)]


def test_consecutive_calls_take_the_decoded_a_buffers_in_turn():
    passed = []
    plan = hopper_stand_in.CyclingLaunchPlan(lambda *args: passed.append(args[-1]), HopperNvfp4Gemm.POINTER_TYPES[:5],
                                             (("buffer 0", 0), ("buffer 1", 1), ("buffer 2", 2)), ())
    addresses = tuple(4096 * (i + 1) for i in range(5))
    for _ in range(7):
        plan.launch(addresses)
    assert passed == [0, 1, 2, 0, 1, 2, 0]


@pytest.mark.parametrize("problem", OFFICIAL + [Problem(256, 384, 512, 3), Problem(128, 640, 2048, 1)],
                         ids=lambda p: "x".join(map(str, p)))
@pytest.mark.parametrize("num_sms", [132, 114, 78])
def test_split_k_keeps_one_wave_and_covers_k_once(problem, num_sms):
    config = HopperNvfp4Gemm.config_for(problem, num_sms)
    assert config.tile_n in (64, 128, 256) and problem.n % config.tile_n == 0
    tiles = (problem.m // HopperNvfp4Gemm.TILE_M) * (problem.n // config.tile_n) * problem.l
    assert 1 <= config.splits <= HopperNvfp4Gemm.MAX_SPLITS
    if config.splits > 1:
        assert tiles * config.splits <= num_sms
    steps = problem.k // HopperNvfp4Gemm.TILE_K // Sm90Tiling(config.tile_n).k_tiles_per_step
    ranges = [split_k_range(s, steps, config.splits) for s in range(config.splits)]
    assert ranges[0][0] == 0 and ranges[-1][1] == steps
    assert all(stop - start >= 2 or steps < 4 for start, stop in ranges)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("problem", OFFICIAL, ids=lambda p: "x".join(map(str, p)))
def test_split_tiles_fit_the_devices_clusters_in_one_wave(problem):
    """A device that runs only 30 clusters of 4 (a GPC with 14 SMs holds three): a split config
    reduces in clusters only if they all fit at once, and otherwise through the reduction
    kernel with every CTA on its own SM; with no room for clusters at all, no split config may
    claim one."""
    capacity = {1: 132, 2: 66, 3: 42, 4: 30}
    for capacity_of in (capacity.__getitem__, lambda size: 0 if size > 1 else 132):
        config = HopperNvfp4Gemm.config_for(problem, 132, capacity_of)
        tiles = (problem.m // HopperNvfp4Gemm.TILE_M) * (problem.n // config.tile_n) * problem.l
        if config.splits > 1 and config.in_cluster:
            assert tiles <= capacity_of(config.splits)
        if config.splits > 1 and not config.in_cluster:
            assert tiles > capacity_of(config.splits) and tiles * config.splits <= 132



def test_tiling_derives_a_runnable_pipeline_or_refuses():
    """`Sm90Tiling` is the whole compile-time shape of a GEMM kernel, from its tile width: every
    width the ranking offers gets MMA blocks that cover the tile and as many stages as shared
    memory holds (the counts docs/hopper.md gives), at least what the pipeline needs to make
    progress; another width, or shared memory too small for those stages, is refused on the host
    before anything is traced."""
    for width in Sm90Tiling.TILE_WIDTHS:
        tiling = Sm90Tiling(width)
        assert tiling.mma_blocks * 64 * Sm90Tiling.MMA_WARPGROUPS == width * tiling.b_row_warpgroups
        assert tiling.stages >= max(tiling.k_tiles_per_step, Sm90Tiling.B_TILES_AHEAD)
        used = tiling.stages * tiling.stage_bytes + Sm90Tiling.BARRIER_BYTES + hopper_stand_in.SM90_STATIC_SMEM_BYTES
        assert used <= hopper_stand_in.SM90_SMEM_BYTES < used + tiling.stage_bytes
    assert [Sm90Tiling(width).stages for width in (64, 128, 256)] == [12, 10, 9]
    for width in (32, 96, 512):
        with pytest.raises(ValueError, match="tile width"):
            Sm90Tiling(width)
    with mock.patch.object(hopper_stand_in, "SM90_SMEM_BYTES", 48 * 1024):
        for width in (64, 256):  # 2 stages against 4 (two warpgroups a B row, two stages each), 1 against 2
            with pytest.raises(ValueError, match="stages fit in shared memory"):
                Sm90Tiling(width)

# Every feasible config on the benchmark shapes, 50 calls queued back to back, us per call
# (tile width, splits, in a cluster, A decoded in the GEMM's grid): NVIDIA H200, the kernel at
# 3f8e878, results/logs/2026-11-23-h200-hopper-decode-in-grid-configs.log; the unsplit configs
# with A decoded in the grid re-measured with 2 units per decode thread, as the kernel now has
# (results/logs/2026-11-23-h200-hopper-decode-units.log), the split ones as with 8.
MEASURED_US = {
    Problem(128, 7168, 16384, 1): {
        (256, 1, True, True): 37.79,
        (256, 1, True, False): 41.93,
        (256, 2, True, False): 39.34,
        (256, 3, True, False): 44.27,
        (256, 4, True, False): 44.54,
        (128, 1, True, False): 41.81,
        (128, 2, True, False): 43.39,
        (64, 1, True, False): 47.65,
    },
    Problem(128, 4096, 7168, 1): {
        (256, 1, True, True): 11.16,
        (256, 1, True, False): 18.78,
        (256, 2, True, True): 12.57,
        (256, 2, True, False): 13.26,
        (256, 3, True, False): 13.48,
        (256, 3, True, True): 14.09,
        (256, 4, True, True): 16.95,
        (256, 4, True, False): 15.59,
        (128, 1, True, True): 11.55,
        (128, 1, True, False): 12.8,
        (128, 2, True, True): 15.69,
        (128, 2, True, False): 17.11,
        (128, 3, True, False): 15.23,
        (128, 3, True, True): 16.15,
        (128, 4, False, False): 18.73,
        (64, 1, True, True): 15.98,
        (64, 1, True, False): 17.21,
        (64, 2, True, False): 17.37,
    },
    Problem(128, 7168, 2048, 1): {
        (256, 1, True, True): 6.0,
        (256, 1, True, False): 6.92,
        (256, 2, True, False): 8.03,
        (256, 2, True, True): 8.79,
        (256, 3, True, False): 11.8,
        (256, 3, True, True): 12.54,
        (256, 4, True, False): 12.0,
        (256, 4, True, True): 12.18,
        (128, 1, True, False): 6.64,
        (128, 1, True, True): 6.64,
        (128, 2, True, False): 9.32,
        (128, 2, True, True): 10.16,
        (64, 1, True, False): 8.66,
        (64, 1, True, True): 9.41,
    },
}


@pytest.mark.parametrize("problem", OFFICIAL + [Problem(256, 384, 2048, 2)], ids=lambda p: "x".join(map(str, p)))
def test_a_decoded_in_the_gemm_grid_is_covered_and_the_grid_fits(problem):
    """The decode CTAs in the GEMM's grid cover every (row, K tile) unit of A with less than
    one CTA to spare, and a config with them is ranked only where the device holds the whole
    grid at once (its GEMM CTAs wait for them)."""
    decode = HopperNvfp4Gemm.in_grid_decode()
    assert decode.threads == Sm90Tiling.THREADS  # the GEMM's block size
    assert decode.units_per_thread == HopperNvfp4Gemm.DECODE_UNITS_PER_THREAD
    units = problem.m * (problem.k // HopperNvfp4Gemm.TILE_K) * decode.THREADS_PER_UNIT
    per_cta = decode.threads * decode.units_per_thread
    assert units <= decode.ctas_per_batch(problem.m, problem.k) * per_cta < units + per_cta
    for config in HopperNvfp4Gemm.ranked_configs(problem, 132, SM90_CLUSTER_CAPACITY.__getitem__):
        if not config.decode_in_grid:
            continue
        columns = HopperNvfp4Gemm.decode_columns(problem, config)
        assert columns * config.splits >= decode.ctas_per_batch(problem.m, problem.k)
        tiles = (problem.m // HopperNvfp4Gemm.TILE_M) * (problem.n // config.tile_n)
        if config.splits > 1 and config.in_cluster:
            assert (tiles + columns) * problem.l <= SM90_CLUSTER_CAPACITY[config.splits]
        else:
            assert (tiles + columns) * problem.l * config.splits <= 132


@pytest.mark.parametrize("problem", MEASURED_US, ids=lambda p: "x".join(map(str, p)))
def test_the_fastest_measured_config_is_among_the_configs_timed_on_the_first_call(problem):
    """`TunedPlan` times the model's best `TUNING_CANDIDATES` configs: the fastest config
    measured must be among them, and the model's first within 10 % of it."""
    measured = {Sm90Config(*key): us for key, us in MEASURED_US[problem].items()}
    ranked = HopperNvfp4Gemm.ranked_configs(problem, 132, SM90_CLUSTER_CAPACITY.__getitem__)
    assert set(ranked) <= set(measured)  # every config the model can pick was timed
    fastest = min(measured, key=measured.get)
    assert fastest in ranked[:HopperNvfp4Gemm.TUNING_CANDIDATES], (fastest, ranked)
    assert measured[ranked[0]] <= 1.1 * measured[fastest], (ranked[0], measured[ranked[0]], measured[fastest])


def _hopper_device():
    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_capability()[0] == 9


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
@pytest.mark.parametrize("problem", OFFICIAL + [Problem(256, 384, 512, 3), Problem(128, 640, 2048, 1)],
                         ids=lambda p: "x".join(map(str, p)))
def test_hopper_kernel_matches_reference(problem):
    for seed in (4321, 8765):
        data = reference.generate_input(*problem, seed=seed)
        expected = reference.ref_kernel(data)
        for _ in range(2):  # the second call reuses the plan's workspace (decoded A, partials)
            data[6].fill_(float("nan"))
            out = submission.custom_kernel(data)
            torch.cuda.synchronize()
            ok, message = reference.check_against(expected, out)
            assert ok, message


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
@pytest.mark.parametrize("problem, config", [
    (Problem(2304, 4608, 7168, 1), None),  # several waves of tiles
    (Problem(128, 4096, 7168, 1), None),  # clusters on half the SMs: consecutive GEMMs side by side
    (Problem(128, 7168, 2048, 1), None),
    (Problem(256, 384, 512, 3), None),  # batches
    (Problem(128, 4096, 7168, 1), Sm90Config(128, 4, in_cluster=False)),  # the reduction kernel
    (Problem(128, 7168, 2048, 1), Sm90Config(256, 1)),  # 28 CTAs: several calls' GEMMs could meet
    # A decoded in the GEMM's grid: eight calls in flight, in clusters, with the reduction kernel
    (Problem(128, 4096, 7168, 1), Sm90Config(256, 1, decode_in_grid=True)),
    (Problem(128, 7168, 8192, 1), Sm90Config(256, 2, decode_in_grid=True)),
    (Problem(128, 4096, 7168, 1), Sm90Config(256, 3, in_cluster=False, decode_in_grid=True)),
], ids=lambda p: "x".join(map(str, p)) if isinstance(p, Problem) else (p.describe().replace(" ", "_") if p else "picked"))
def test_calls_queued_back_to_back_match_reference(problem, config):
    """Calls queued without a synchronization between them, as the benchmark does: each call's
    decode kernel runs while the GEMMs of the calls before it (or a reduction kernel) still do,
    into the next of the plan's decoded-A buffers once the GEMM that read it last is done with
    it, and its GEMM runs its main loop beside the earlier ones but must not touch the split-K
    partials or c before they are done, nor load A before its own decode is. Every buffer taken
    at least twice."""
    plan = HopperNvfp4Gemm.launch_plan(problem, torch.device("cuda"), config) if config else None
    _check_calls_queued_back_to_back([(problem, plan)] * (2 * SM90_DECODED_A_BUFFERS + 1))


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
def test_calls_of_two_problems_interleaved_back_to_back_match_reference():
    """Two plans, each with its own decoded-A buffers, in one queue, one decoding A in its GEMM's
    grid and one with the decode kernel: a call's decode follows the other plan's GEMM as often
    as its own plan's, and must still wait for the GEMM that read its buffer last, however many
    calls back that one was queued."""
    device = torch.device("cuda")
    plans = {"a": (Problem(128, 4096, 7168, 1), Sm90Config(256, 1, decode_in_grid=True)),
             "b": (Problem(128, 7168, 2048, 1), Sm90Config(128, 1))}
    plans = {name: (problem, HopperNvfp4Gemm.launch_plan(problem, device, config))
             for name, (problem, config) in plans.items()}
    order = "aababbbababaabbbaabababbaaabbabbaababa"  # each plan's buffers taken at least twice
    assert min(order.count(name) for name in plans) >= 2 * SM90_DECODED_A_BUFFERS
    _check_calls_queued_back_to_back([plans[name] for name in order])


@pytest.mark.skipif(_hopper_device() is not True or torch.cuda.device_count() < 2,
                    reason="needs two Hopper GPUs: with one, the inputs are always on the current device")
def test_calls_on_a_device_that_is_not_current_match_reference():
    """Inputs on the last GPU while device 0 is current, as torch ops take them: the call runs on
    the inputs' device (its plan, its tuning, its launches), queued back to back with calls on
    device 0, and leaves device 0 current."""
    last = torch.device("cuda", torch.cuda.device_count() - 1)
    problem = Problem(128, 7168, 2048, 1)
    torch.cuda.set_device(0)
    datas = [reference.generate_input(*problem, seed=300 + i, device=last if i % 2 else "cuda:0") for i in range(6)]
    expected = [reference.ref_kernel(data) for data in datas]
    for data in datas:
        data[6].fill_(float("nan"))
    for data in datas:
        submission.custom_kernel(data)
    assert torch.cuda.current_device() == 0
    for i, (want, data) in enumerate(zip(expected, datas)):
        torch.cuda.synchronize(data[6].device)
        ok, message = reference.check_against(want, data[6])
        assert ok, f"call {i} on {data[6].device}: {message}"


@contextlib.contextmanager
def _submission_without_tvm_ffi():
    """Fresh copies of submission.py and the stand-in it imports, loaded as where apache-tvm-ffi
    is not installed, for as long as the block runs (the stand-in takes its host side from the
    module named `submission`, as on the runner)."""
    find_spec = importlib.util.find_spec
    with (mock.patch.object(importlib.util, "find_spec",
                            lambda name, package=None: None if name == "tvm_ffi" else find_spec(name, package)),
          mock.patch.dict(sys.modules)):
        for name in ("submission", "hopper_stand_in"):
            sys.modules.pop(name, None)
        yield importlib.import_module("submission")


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
def test_without_tvm_ffi_calls_take_cute_pointers_and_match_reference():
    """The competition's image may lack apache-tvm-ffi: then the kernels compile without it and
    every call passes CuTe pointers (from the pointer cache) instead of bare addresses. Calls
    queued back to back, every decoded-A buffer taken twice, and a batched problem."""
    with _submission_without_tvm_ffi() as without:
        assert not without.HAVE_TVM_FFI and without is not submission
        calls = ([(Problem(128, 7168, 2048, 1), None)] * (2 * SM90_DECODED_A_BUFFERS + 1)
                 + [(Problem(256, 384, 512, 3), None)] * 2)
        _check_calls_queued_back_to_back(calls, without.custom_kernel)
        assert without._COMPILED and not any(tvm_ffi for *_, tvm_ffi in without._COMPILED)
        assert without.pointer_arg.cache_info().currsize  # the pointer cache served the calls


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
def test_the_first_call_times_the_best_ranked_configs_and_keeps_one():
    problem = Problem(128, 4096, 7168, 1)
    device = torch.device("cuda")
    plan = HopperNvfp4Gemm.launch_plan(problem, device)
    assert isinstance(plan, TunedPlan) and plan.config is None
    ranked = HopperNvfp4Gemm.ranked_configs(problem, torch.cuda.get_device_properties(device).multi_processor_count,
                                            lambda size: hopper_stand_in._sm90_cluster_capacity(device.index or 0, size))
    for seed in (11, 12):  # the first call times the candidates, the second runs the one kept
        _check_one_call(plan, problem, seed)
        assert plan.config in ranked[:HopperNvfp4Gemm.TUNING_CANDIDATES]


def _check_one_call(plan, problem: Problem, seed: int):
    """One call of `plan` on fresh inputs, its NaN-poisoned c checked against the reference."""
    data = reference.generate_input(*problem, seed=seed)
    expected = reference.ref_kernel(data)
    data[6].fill_(float("nan"))
    plan.launch(submission.operand_addresses(data))
    torch.cuda.synchronize()
    ok, message = reference.check_against(expected, data[6])
    assert ok, message


def _check_calls_queued_back_to_back(calls, custom_kernel=submission.custom_kernel):
    """`calls`: (problem, plan or None for `custom_kernel`), queued in order, checked after."""
    datas = [reference.generate_input(*problem, seed=100 + i) for i, (problem, _) in enumerate(calls)]
    expected = [reference.ref_kernel(data) for data in datas]
    for data in datas:
        data[6].fill_(float("nan"))
    torch.cuda.synchronize()
    for (_, plan), data in zip(calls, datas):
        if plan:
            plan.launch(submission.operand_addresses(data))
        else:
            custom_kernel(data)
    torch.cuda.synchronize()
    for i, (want, data) in enumerate(zip(expected, datas)):
        ok, message = reference.check_against(want, data[6])
        assert ok, f"call {i}: {message}"


@pytest.mark.skipif(_hopper_device() is not True,
                    reason="needs a Hopper GPU (compute capability 9.x) to run the sm_90a kernel")
@pytest.mark.parametrize("config", [Sm90Config(tile_n, splits, in_cluster, decode_in_grid)
                                    for tile_n in (64, 128, 256)
                                    for splits in range(1, HopperNvfp4Gemm.MAX_SPLITS + 1)
                                    for in_cluster in ((True, False) if splits > 1 else (True,))
                                    for decode_in_grid in (False, True)],
                         ids=lambda config: config.describe().replace(" ", "_"))
def test_every_tile_width_and_split_count_matches_reference(config):
    """Every tile width and split count, whichever `config_for` would pick, reduced in clusters
    (each split adds up a slab of the tile's rows over the splits' tiles, uneven for 3 splits)
    and by the reduction kernel, A decoded by the decode kernel and in the GEMM's grid (decode
    CTAs of every batch beside the split CTAs, some with no rows left to decode); several tiles
    and batches, so partials of different tiles must not mix; 64-wide tiles in both halves of a
    scale atom. Where A is decoded in the grid, half the rows, so that the whole grid fits on
    the device for every split count."""
    problem = Problem(128 if config.decode_in_grid else 256, {64: 384, 128: 768, 256: 512}[config.tile_n], 2048, 2)
    _check_one_call(HopperNvfp4Gemm.launch_plan(problem, torch.device("cuda"), config), problem, 1234 + config.splits)
