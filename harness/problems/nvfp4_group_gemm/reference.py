"""Reference for the GPU MODE ``nvfp4_group_gemm`` problem: input generator, exact reference, checker.

For each group g: c_g[i, j, 0] = sum_k a_g[i, k, 0] * sfa_g[i, k // 16, 0] * b_g[j, k, 0] * sfb_g[j, k // 16, 0],
fp16 out; every group has its own m, n and k, and l is 1.

It offers the names of the competition's reference.py (``generate_input``, ``ref_kernel``,
``check_implementation``, ``to_blocked``, ``ceil_div``, ``sf_vec_size``,
``create_reordered_scale_factor_tensor``). ``generate_input`` makes the competition's draws in its
order with its dtypes, so one seed gives the competition's data on the same device. Like the
competition's, it draws the plain scales (sfa, sfb) from the CPU's generator and hands them over
on the CPU, whatever the device of the rest. ``ref_kernel`` is exact on every device (the
competition's calls cuBLAS's FP4 GEMM, which needs a B200).

It stands alone, as the competition's does: it imports torch and its runner folder's task.py and
utils.py only, so the scale layout, the e2m1 decoding and the exact product below are its own
(tests/test_problem_folders.py holds them to the same code as the other problems' files).
"""

import torch

from task import input_t, output_t
from utils import make_match_reference

RTOL = 1e-3
ATOL = 1e-3
BATCH = 1  # l: every group is one matrix
SIGN_AND_LOW_BITS = 0b1011_1011  # every element is one of 0, +-0.5, +-1, +-1.5

__all__ = ["ceil_div", "check_implementation", "create_reordered_scale_factor_tensor", "generate_input", "ref_kernel",
           "sf_vec_size", "to_blocked"]


sf_vec_size = 16  # one fp8 scale per 16 elements along K (the competition's name)

# The permuted scale layout (32, 4, rest_mn, 4, rest_k, l) groups 128 rows x 4 scale columns
# into one 512-byte atom, the unit the tensor cores' scale-factor loads consume.
ATOM_ROWS_INNER = 32
ATOM_ROWS_OUTER = 4
ATOM_ROWS = ATOM_ROWS_INNER * ATOM_ROWS_OUTER
ATOM_SF_COLS = 4
# Drawn in the order (l, rest_mn, rest_k, 32, 4, 4), stored as (32, 4, rest_mn, 4, rest_k, l).
DRAWN_TO_PERMUTED = (3, 4, 1, 5, 2, 0)

# e2m1 code -> value for the three magnitude bits; bit 3 is the sign.
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def atoms_shape(l: int, mn: int, sf_k: int) -> tuple[int, ...]:
    """The shape in which the competition draws the permuted scales, (l, rest_mn, rest_k, 32, 4, 4);
    DRAWN_TO_PERMUTED turns it into (32, 4, rest_mn, 4, rest_k, l)."""
    return (l, ceil_div(mn, ATOM_ROWS), ceil_div(sf_k, ATOM_SF_COLS), ATOM_ROWS_INNER, ATOM_ROWS_OUTER, ATOM_SF_COLS)


def permuted_index(row, col, batch) -> tuple:
    """Where the plain scale (row, col, batch) sits in the (32, 4, rest_mn, 4, rest_k, l) layout
    (integers or index tensors alike)."""
    return (row % ATOM_ROWS_INNER, (row % ATOM_ROWS) // ATOM_ROWS_INNER, row // ATOM_ROWS,
            col % ATOM_SF_COLS, col // ATOM_SF_COLS, batch)


def place_in_atoms(plain: torch.Tensor, permuted: torch.Tensor) -> None:
    """Write the (mn, sf_k, l) scales into their places in the (32, 4, rest_mn, 4, rest_k, l)
    layout; entries past mn or sf_k (padding) keep what they held."""
    mn, sf_k, l = plain.shape
    row = torch.arange(mn, device=permuted.device).view(mn, 1, 1)
    col = torch.arange(sf_k, device=permuted.device).view(1, sf_k, 1)
    batch = torch.arange(l, device=permuted.device).view(1, 1, l)
    permuted[permuted_index(row, col, batch)] = plain.to(permuted.device)


def to_blocked(scales_2d: torch.Tensor) -> torch.Tensor:
    """(mn, sf_k) scales -> flat cuBLAS block-scaling layout: 128x4 atoms, rows interleaved 32x4."""
    rows, cols = scales_2d.shape
    atoms = scales_2d.view(rows // ATOM_ROWS, ATOM_ROWS_OUTER, ATOM_ROWS_INNER, cols // ATOM_SF_COLS, ATOM_SF_COLS)
    # (rest_mn, 4, 32, rest_k, 4) -> (rest_mn, rest_k, 32, 4, 4)
    return atoms.permute(0, 3, 2, 1, 4).flatten()


def decode_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """(rows, k//2, ...) packed e2m1 -> (rows, k, ...) float32; the low nibble is the even element."""
    codes = packed.view(torch.uint8)
    nibbles = torch.stack((codes & 0x0F, codes >> 4), dim=2)  # (rows, k//2, 2, ...)
    nibbles = nibbles.flatten(1, 2).to(torch.int64)
    magnitudes = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=packed.device)
    values = magnitudes[nibbles & 0x7]
    return torch.where((nibbles & 0x8) != 0, -values, values)


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """(rows, k//2, l) e2m1 with (rows, k//16, l) fp8 scales -> (rows, k, l) float32, exactly."""
    values = decode_e2m1(packed)
    return values * scales.to(torch.float32).repeat_interleave(sf_vec_size, dim=1)


def exact_block_scaled_mm(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """(m, n) float64: the sum over K of a * sfa * b * sfb for one batch, without rounding.

    a: (m, k//2) e2m1 pairs with (m, k//16) e4m3 scales; b: (n, k//2) with (n, k//16). Each
    decoded value a * sfa is exact in fp32 (2 significant bits times 4), each product of two is
    exact in fp64, and every partial sum is a multiple of 2^-20 (the smallest e4m3 step is 2^-9,
    the smallest e2m1 step 0.5) below 2^53 of those steps for any K under 2^30, so fp64 holds
    every sum exactly in any order."""
    a_values = dequantize(a.unsqueeze(-1), sfa.unsqueeze(-1))[:, :, 0].double()
    b_values = dequantize(b.unsqueeze(-1), sfb.unsqueeze(-1))[:, :, 0].double()
    return a_values @ b_values.T

def round_to_float16(exact: torch.Tensor) -> torch.Tensor:
    """float64 -> float16, rounded once to nearest even.

    torch converts float64 to float16 through float32, which rounds twice where the float64
    value has more than float32's 24 significant bits. Rounding to float32 toward odd first (the
    nearer neighbour toward zero, its last bit set where it is inexact) keeps the information the
    second rounding needs: float32 has more than two bits beyond float16's 11."""
    single = exact.to(torch.float32)
    bits = single.view(torch.int32)
    inexact = single.double() != exact
    rounded_away = single.double().abs() > exact.abs()
    # float32's bit pattern read as int32 orders magnitudes for either sign: minus one steps the
    # magnitude down by one unit in the last place.
    toward_zero = torch.where(inexact & rounded_away, bits - 1, bits)
    odd = torch.where(inexact, toward_zero | 1, toward_zero)
    return odd.view(torch.float32).to(torch.float16)


def _fp4_operand(l: int, mn: int, k: int, device) -> torch.Tensor:
    # The competition draws below 255, not 256: byte 0xFF never comes up.
    drawn = torch.randint(0, 255, (l, mn, k // 2), dtype=torch.uint8, device=device)
    return (drawn & SIGN_AND_LOW_BITS).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def _plain_scales(l: int, mn: int, sf_k: int) -> torch.Tensor:
    """(mn, sf_k, l) scales in {1, 2}, drawn on the CPU (the competition's draw names no device)."""
    drawn = torch.randint(1, 3, (l, mn, sf_k), dtype=torch.int8, device="cpu")
    return drawn.to(torch.float8_e4m3fn).permute(1, 2, 0)


def create_reordered_scale_factor_tensor(l: int, mn: int, k: int, plain: torch.Tensor, device="cuda") -> torch.Tensor:
    """The (32, 4, rest_mn, 4, rest_k, l) copy of `plain` on `device`: drawn in {1, 2} first,
    then overwritten wherever a plain scale lands (the rest, past mn or sf_k, stays drawn)."""
    sf_k = ceil_div(k, sf_vec_size)
    drawn = torch.randint(1, 3, atoms_shape(l, mn, sf_k), dtype=torch.int8, device=device)
    reordered = drawn.to(torch.float8_e4m3fn).permute(*DRAWN_TO_PERMUTED)
    place_in_atoms(plain, reordered)
    return reordered


def generate_input(m: tuple, n: tuple, k: tuple, g: int, seed: int, device="cuda") -> input_t:
    """(abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes) as the competition
    makes them: per group, a (m, k//2, 1) and b (n, k//2, 1) float4_e2m1fn_x2, K-major, and
    c (m, n, 1) fp16 filled with randn (the output buffer) on `device`; sfa (m, k//16, 1) and
    sfb (n, k//16, 1) float8_e4m3fn on the CPU; their (32, 4, rest, 4, rest_k, 1) copies on
    `device`; and (m, n, k, 1).
    """
    torch.manual_seed(seed)
    abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes = [], [], [], []
    for group in range(g):
        mi, ni, ki = m[group], n[group], k[group]
        a = _fp4_operand(BATCH, mi, ki, device)
        b = _fp4_operand(BATCH, ni, ki, device)
        c = torch.randn((BATCH, mi, ni), dtype=torch.float16, device=device).permute(1, 2, 0)
        sf_k = ceil_div(ki, sf_vec_size)
        sfa = _plain_scales(BATCH, mi, sf_k)
        sfb = _plain_scales(BATCH, ni, sf_k)
        sfa_reordered = create_reordered_scale_factor_tensor(BATCH, mi, ki, sfa, device)
        sfb_reordered = create_reordered_scale_factor_tensor(BATCH, ni, ki, sfb, device)
        abc_tensors.append((a, b, c))
        sfasfb_tensors.append((sfa, sfb))
        sfasfb_reordered_tensors.append((sfa_reordered, sfb_reordered))
        problem_sizes.append((mi, ni, ki, BATCH))
    return abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes


@torch.no_grad()
def ref_kernel(data: input_t) -> output_t:
    """Every group's reference c (m, n, 1) fp16, written into the data's c and returned as a
    list, as the competition's ref_kernel does: each exact sum, rounded once."""
    abc_tensors, sfasfb_tensors, _, problem_sizes = data
    outputs = []
    for (a, b, c), (sfa, sfb), (_, _, _, l) in zip(abc_tensors, sfasfb_tensors, problem_sizes):
        for batch in range(l):
            sfa_here, sfb_here = sfa[:, :, batch].to(c.device), sfb[:, :, batch].to(c.device)
            c[:, :, batch] = round_to_float16(exact_block_scaled_mm(a[:, :, batch], sfa_here, b[:, :, batch], sfb_here))
        outputs.append(c)
    return outputs


check_implementation = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)
