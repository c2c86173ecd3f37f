import pytest
import torch

from reference import check_against, check_implementation, generate_input, ref_kernel, to_blocked

M, N, K, L, SEED = 256, 384, 512, 2, 1111


@pytest.fixture(scope="module")
def data():
    return generate_input(M, N, K, L, SEED, device="cpu")


def bits(tensor):
    return tensor.view(torch.uint8) if tensor.element_size() == 1 else tensor.view(torch.int16)


def test_shapes_dtypes_and_layouts(data):
    a, b, sfa, sfb, sfa_p, sfb_p, c = data
    assert (a.shape, b.shape, c.shape) == ((M, K // 2, L), (N, K // 2, L), (M, N, L))
    assert (sfa.shape, sfb.shape) == ((M, K // 16, L), (N, K // 16, L))
    assert sfa_p.shape == (32, 4, M // 128, 4, K // 64, L) and sfb_p.shape == (32, 4, N // 128, 4, K // 64, L)
    assert (a.dtype, sfa.dtype, c.dtype) == (torch.float4_e2m1fn_x2, torch.float8_e4m3fn, torch.float16)
    assert a.stride() == (K // 2, 1, M * K // 2)  # K-major, batch outermost


def test_draws_follow_the_competitions_order(data):
    """Re-derive every tensor from the raw sequence of draws the competition makes."""
    torch.manual_seed(SEED)
    raw_a = torch.randint(-128, 128, (L, M, K // 2), dtype=torch.int8)
    raw_b = torch.randint(-128, 128, (L, N, K // 2), dtype=torch.int8)
    raw_c = torch.randn((L, M, N), dtype=torch.float16)
    raw_sfa = torch.randint(0, 4, (L, M, K // 16), dtype=torch.int8)
    torch.randint(0, 4, (L, M // 128, K // 64, 32, 4, 4), dtype=torch.int8)  # the permuted copy's draw
    raw_sfb = torch.randint(0, 4, (L, N, K // 16), dtype=torch.int8)
    a, b, sfa, sfb, _, _, c = data
    assert torch.equal(bits(a), raw_a.permute(1, 2, 0).view(torch.uint8))
    assert torch.equal(bits(b), raw_b.permute(1, 2, 0).view(torch.uint8))
    assert torch.equal(bits(c), raw_c.permute(1, 2, 0).view(torch.int16))
    assert torch.equal(sfa.float(), raw_sfa.permute(1, 2, 0).float())
    assert torch.equal(sfb.float(), raw_sfb.permute(1, 2, 0).float())


def test_same_seed_same_data_other_seed_other_data(data):
    again = generate_input(M, N, K, L, SEED, device="cpu")
    other = generate_input(M, N, K, L, SEED + 42, device="cpu")
    assert all(torch.equal(bits(x), bits(y)) for x, y in zip(data, again))
    assert not torch.equal(bits(data[0]), bits(other[0]))


@pytest.mark.parametrize("which", ["a", "b"])
def test_permuted_scales_agree_with_plain_scales(data, which):
    plain, permuted = (data[2], data[4]) if which == "a" else (data[3], data[5])
    plain, permuted = plain.float(), permuted.float()
    rows, sf_k, batches = plain.shape
    for batch in range(batches):
        for row in range(rows):
            for col in range(sf_k):
                assert permuted[row % 32, (row % 128) // 32, row // 128, col % 4, col // 4, batch] == plain[row, col, batch]


def test_cublas_blocked_layout_is_the_permuted_layout_per_batch(data):
    _, _, sfa, _, sfa_p, _, _ = data
    for batch in range(L):
        blocked = to_blocked(sfa[:, :, batch])
        assert torch.equal(bits(blocked), bits(sfa_p[..., batch].permute(2, 4, 0, 1, 3).flatten()))


def oracle(data):
    """float64 C from the bits: sign, exponent and mantissa of each e2m1 code, times its scale."""

    def values(packed, scales):
        codes = packed.view(torch.uint8).to(torch.int64)
        nibbles = torch.stack((codes & 15, codes >> 4), dim=2).flatten(1, 2)
        exponent, mantissa = (nibbles >> 1) & 3, (nibbles & 1).double()
        magnitude = torch.where(exponent == 0, mantissa / 2, (1 + mantissa / 2) * 2.0 ** (exponent - 1).double())
        signed = torch.where(nibbles >= 8, -magnitude, magnitude)
        return signed * scales.double().repeat_interleave(16, dim=1)

    a, b, sfa, sfb, _, _, _ = data
    return torch.einsum("mkl,nkl->mnl", values(a, sfa), values(b, sfb))


def test_exact_reference_matches_float64_oracle(data):
    expected = oracle(data)
    assert expected.abs().max() > 100  # real data, not zeros
    assert torch.equal(ref_kernel(data), expected.to(torch.float16))


def test_reference_writes_c_and_leaves_the_other_inputs_alone():
    """As the competition's ref_kernel: the result goes into the data's c, which it returns."""
    data = generate_input(M, N, K, L, SEED, device="cpu")
    before = [bits(t).clone() for t in data]
    returned = ref_kernel(data)
    assert returned is data[6]
    assert all(torch.equal(old, bits(new)) for old, new in zip(before[:6], data[:6]))
    assert not torch.equal(before[6], bits(data[6]))


def test_correct_output_passes(data):
    assert check_implementation(data, ref_kernel(data).clone()) == (True, "")


def test_wrong_output_is_caught_with_the_official_message(data):
    wrong = ref_kernel(data).clone()
    wrong[3, 5, 1] += 64
    wrong[7, 0, 0] = float("nan")
    good, message = check_implementation(data, wrong)
    assert not good
    assert message.startswith("mismatch found! custom implementation doesn't match reference: Number of mismatched elements: 2 ")
    assert "ERROR AT (3, 5, 1): " in message and "ERROR AT (7, 0, 0): nan " in message


def test_infinity_and_size_mismatch_are_caught(data):
    wrong = ref_kernel(data).clone()
    wrong[0, 0, 0] = float("inf")
    assert "Number of mismatched elements: 1" in check_implementation(data, wrong)[1]
    assert check_implementation(data, wrong[:, :, :1])[1].endswith("SIZE MISMATCH")


def test_many_mismatches_report_five_and_the_rest(data):
    wrong = ref_kernel(data) + 10
    message = check_implementation(data, wrong)[1]
    assert message.count("ERROR AT") == 5
    assert f"... and {M * N * L - 5} more mismatched elements." in message


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the GPU reference path needs one")
def test_gpu_reference_matches_float64_oracle():
    gpu = generate_input(256, 512, 1024, 2, 7, device="cuda")
    on_cpu = tuple(tensor.cpu() for tensor in gpu)
    good, message = check_against(oracle(on_cpu).to(torch.float16), ref_kernel(gpu).cpu())
    assert good, message
