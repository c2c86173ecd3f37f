import pytest

from harness.problems.sol import DEVICES, ceilings_for, device_key, gemm_bytes, gemm_flops, gemm_work

BENCHMARKS_B200_US = [((128, 7168, 16384, 1), "8.994"), ((128, 4096, 7168, 1), "2.354"), ((128, 7168, 2048, 1), "1.333")]


@pytest.mark.parametrize("shape, printed", BENCHMARKS_B200_US)
def test_b200_table_to_the_printed_digits(shape, printed):
    assert f"{DEVICES['B200'].sol_seconds(*shape) * 1e6:.3f}" == printed
    assert DEVICES["B200"].bound_of(gemm_work(*shape)) == "memory"


def test_bytes_and_flops_formula():
    m, n, k, l = 128, 256, 512, 2
    assert gemm_bytes(m, n, k, l) == 2 * (128 * 256 + 256 * 256 + 128 * 32 + 256 * 32 + 2 * 128 * 256)
    assert gemm_flops(m, n, k, l) == 2 * 128 * 256 * 512 * 2


def test_b200_fp4_peak_is_148_sms_at_1_5_ghz():
    assert DEVICES["B200"].peak_flops == pytest.approx(148 * 32768 * 1.5e9)


def test_hopper_ceilings_are_bf16_dense_and_their_bandwidths():
    assert DEVICES["H100"].peak_flops == DEVICES["H200"].peak_flops == 989e12
    assert (DEVICES["H100"].bandwidth, DEVICES["H200"].bandwidth) == (3.35e12, 4.8e12)
    # A large square GEMM is compute-bound on Hopper at the bf16 peak.
    assert DEVICES["H100"].bound_of(gemm_work(4096, 4096, 4096, 1)) == "compute"


@pytest.mark.parametrize(
    "name, key",
    [("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("NVIDIA H100 PCIe", None), ("NVIDIA A100-SXM4-80GB", None)],
)
def test_device_names_map_to_table_entries(name, key):
    assert device_key(name) == key


def test_measured_ceilings_take_precedence_and_unknown_devices_say_so():
    measured = {"peak_flops": 7e14, "bandwidth": 4e12, "source": "measured now"}
    ceilings, note = ceilings_for("NVIDIA H200", measured)
    assert (ceilings.peak_flops, ceilings.bandwidth, note) == (7e14, 4e12, "measured")
    ceilings, note = ceilings_for("NVIDIA A100-SXM4-80GB", None)
    assert ceilings is None and "--ceilings measured" in note


def test_sol_command_prints_the_competition_table(harness_in_process):
    result = harness_in_process("sol", "--gpu", "B200")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = [line.split() for line in out.splitlines() if line.startswith("128x")]
    assert [row[1] for row in rows] == [digits for _, digits in BENCHMARKS_B200_US]
    assert [row[2] for row in rows] == [digits for _, digits in BENCHMARKS_B200_US]  # the published column


@pytest.mark.parametrize("name", ["nvfp4_gemv", "nvfp4_dual_gemm", "nvfp4_group_gemm"])
def test_sol_command_reproduces_each_problems_published_table(harness_in_process, name):
    from harness.problems import PROBLEMS

    result = harness_in_process("sol", "--problem", name)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    rows = [line.split() for line in out.splitlines()[2:] if not line.startswith("geomean")]
    published = [f"{microseconds:.3f}" for _, microseconds in PROBLEMS[name].speed_of_light.rows()]
    assert len(rows) == len(published)
    assert [row[-3] for row in rows] == published == [row[-2] for row in rows]


def test_a_ceiling_that_is_beaten_is_raised_to_the_rate_reached_and_says_so():
    from harness.problems.sol import Ceilings, gemm_flops, gemm_work

    measured = Ceilings("NVIDIA H200", 775e12, 4.2e12, "measured now")
    big = (128, 7168, 16384, 1)
    faster_than_peak = gemm_flops(*big) / 790e12
    held = measured.held_by([("128x7168x16384", gemm_work(*big), faster_than_peak),
                             ("128x4096x7168", gemm_work(128, 4096, 7168, 1), 11e-6)])
    assert held.peak_flops == pytest.approx(790e12) and held.bandwidth == 4.2e12
    assert held.sol_seconds(*big) == pytest.approx(faster_than_peak)  # 100 %, not 102 %
    assert "beaten, so raised: peak to 790 TFLOP/s, reached on 128x7168x16384" in held.source
    assert measured.held_by([("128x7168x16384", gemm_work(*big), 2 * faster_than_peak)]) is measured
