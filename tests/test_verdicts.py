import torch

from harness.judge.verdicts import changed_inputs, check_call, check_calls, clone_data, output_type_problem, poison_output, repeated_outputs, shared_outputs
from reference import generate_input, ref_kernel


def small_data(seed=5):
    return generate_input(128, 256, 256, 1, seed, device="cpu")


def test_poison_fills_c_with_nan_only():
    data = small_data()
    copy = clone_data(data)
    poison_output(copy)
    assert torch.isnan(copy[6]).all()
    assert changed_inputs(data, copy) == []  # c is the output buffer, not an input


def test_changed_inputs_names_what_changed():
    data = small_data()
    copy = clone_data(data)
    copy[1].view(torch.uint8)[0, 0, 0] ^= 1
    copy[4].view(torch.uint8)[0, 0, 0, 0, 0, 0] ^= 1
    assert changed_inputs(data, copy) == ["b", "sfa_permuted"]


def test_output_type_problems_say_what_was_returned():
    c = small_data()[6]
    assert output_type_problem(c.clone(), c) is None
    assert output_type_problem(c.float(), c) == "custom_kernel returned a torch.float32 tensor of shape (128, 256, 1) on cpu, expected a torch.float16 tensor of shape (128, 256, 1) on cpu"
    assert "shape (256, 128, 1)" in output_type_problem(c.permute(1, 0, 2), c)
    assert output_type_problem(None, c).startswith("custom_kernel returned a NoneType")


def test_check_call_strict_and_official():
    data = small_data()
    expected = ref_kernel(data)
    assert check_call(expected, expected.clone(), data[6], strict=True) == (True, "")
    # The competition accepts the right values in fp32; the strict check does not.
    assert check_call(expected, expected.float(), data[6], strict=False)[0]
    assert not check_call(expected, expected.float(), data[6], strict=True)[0]


def test_shared_and_repeated_outputs_are_named():
    first, second = small_data(1), small_data(2)
    expected = [ref_kernel(first), ref_kernel(second)]
    buffer = expected[0].clone()
    assert "share memory" in shared_outputs([buffer, buffer])
    assert shared_outputs([expected[0].clone(), expected[1].clone()]) is None
    stale = [expected[0].clone(), expected[0].clone()]
    assert repeated_outputs(stale, expected) == "call 1 returned the same values as call 0 although the inputs differ (cached result)"
    good, message = check_calls(expected, stale, [first[6], second[6]], strict=True)
    assert not good and "cached result" in message


def test_check_calls_reports_the_failing_input():
    datas = [small_data(seed) for seed in (1, 2, 3)]
    expected = [ref_kernel(data) for data in datas]
    outputs = [e.clone() for e in expected]
    outputs[2][0, 0, 0] += 100
    good, message = check_calls(expected, outputs, [data[6] for data in datas], strict=True)
    assert not good and message.startswith("input 2: mismatch found!")
