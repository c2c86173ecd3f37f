import math

import pytest
import torch

from harness.judge.verdicts import (Refills, all_pass_quickly, changed_inputs, check_call, check_calls, clone_data,
                                    figures_problem, output_type_problem, repeated_outputs, shared_outputs)
from harness.problems import PROBLEMS
from reference import generate_input, ref_kernel

GEMM = PROBLEMS["nvfp4_gemm"]


def small_data(seed=5):
    return generate_input(128, 256, 256, 1, seed, device="cpu")


def test_refills_differ_in_fp16_from_every_earlier_round_and_touch_only_c():
    data = small_data()
    copy = clone_data(data)
    refills = Refills()
    seen = set()
    for _ in range(4096):  # more rounds than any case runs
        refills.fill([copy[6]])
        value = copy[6].view(-1)[0].item()
        assert bool((copy[6] == value).all()) and math.isfinite(value)  # one value in every element
        assert value not in seen and abs(value) >= 16384
        seen.add(value)
    assert changed_inputs(data, copy, GEMM) == []  # c is the output buffer, not an input


def test_the_quick_check_agrees_with_the_full_one():
    datas = [small_data(seed) for seed in (1, 2, 3)]
    expected = [ref_kernel(clone_data(data)) for data in datas]
    buffers = [[data[6]] for data in datas]
    right = [e.clone() for e in expected]
    assert all_pass_quickly(expected, right, GEMM) and check_calls(expected, right, buffers, True, GEMM)[0]
    one_off = [e.clone() for e in expected]
    one_off[1][3, 5, 0] += 1  # beyond rtol = atol = 1e-3
    assert not all_pass_quickly(expected, one_off, GEMM) and not check_calls(expected, one_off, buffers, True, GEMM)[0]
    nan = [e.clone() for e in expected]
    nan[2][0, 0, 0] = float("nan")
    assert not all_pass_quickly(expected, nan, GEMM)
    assert not all_pass_quickly(expected, [e.float() for e in expected], GEMM)  # the wrong dtype takes the full check
    assert not all_pass_quickly(expected, right[:2], GEMM)


@pytest.mark.parametrize("worker_ns, judged_ns, words", [
    ([1000.0, 1000.0], [0.0, -1.0], "saw no time"),
    ([25.0, 25.0], [1000.0, 1000.0], "the worker timed the calls at 0.025 us each, but the judge's own clock"),
    # A judge's figure below the worker's own: a fixed cost subtracted in excess (calibration steered).
    ([1200.0, 1300.0], [1000.0, 1000.0], "saw 1.000 us per call, below the 1.250 us the worker's own events timed"),
])
def test_figures_that_cannot_stand_fail(worker_ns, judged_ns, words):
    assert words in figures_problem(worker_ns, judged_ns, tolerance_ns=50.0)


def test_figures_within_the_tolerance_stand():
    assert figures_problem([960.0, 970.0], [1000.0, 1000.0], tolerance_ns=50.0) is None
    assert figures_problem([1020.0, 1060.0], [1000.0, 1000.0], tolerance_ns=50.0) is None


def test_changed_inputs_names_what_changed():
    data = small_data()
    copy = clone_data(data)
    copy[1].view(torch.uint8)[0, 0, 0] ^= 1
    copy[4].view(torch.uint8)[0, 0, 0, 0, 0, 0] ^= 1
    assert changed_inputs(data, copy, GEMM) == ["b", "sfa_permuted"]


def test_output_type_problems_say_what_was_returned():
    c = small_data()[6]
    assert output_type_problem(c.clone(), c) is None
    assert output_type_problem(c.float(), c) == "custom_kernel returned a torch.float32 tensor of shape (128, 256, 1) on cpu, expected a torch.float16 tensor of shape (128, 256, 1) on cpu"
    assert "shape (256, 128, 1)" in output_type_problem(c.permute(1, 0, 2), c)
    assert output_type_problem(None, c).startswith("custom_kernel returned a NoneType")


def test_check_call_strict_and_official():
    data = small_data()
    expected = ref_kernel(data)
    assert check_call(expected, expected.clone(), [data[6]], True, GEMM) == (True, "")
    # The competition accepts the right values in fp32; the strict check does not.
    assert check_call(expected, expected.float(), [data[6]], False, GEMM)[0]
    assert not check_call(expected, expected.float(), [data[6]], True, GEMM)[0]


def test_shared_and_repeated_outputs_are_named():
    first, second = small_data(1), small_data(2)
    expected = [ref_kernel(first), ref_kernel(second)]
    buffer = expected[0].clone()
    assert "share memory" in shared_outputs([buffer, buffer])
    assert shared_outputs([expected[0].clone(), expected[1].clone()]) is None
    stale = [expected[0].clone(), expected[0].clone()]
    assert repeated_outputs(stale, expected) == "call 1 returned the same values as call 0 although the inputs differ (cached result)"
    good, message = check_calls(expected, stale, [[first[6]], [second[6]]], True, GEMM)
    assert not good and "cached result" in message


def test_check_calls_reports_the_failing_input():
    datas = [small_data(seed) for seed in (1, 2, 3)]
    expected = [ref_kernel(data) for data in datas]
    outputs = [e.clone() for e in expected]
    outputs[2][0, 0, 0] += 100
    good, message = check_calls(expected, outputs, [[data[6]] for data in datas], True, GEMM)
    assert not good and message.startswith("input 2: mismatch found!")
