"""Reference for the GPU MODE ``nvfp4_gemv`` problem: input generator, exact reference, checker.

c[i, 0, l] = sum_k a[i, k, l] * sfa[i, k // 16, l] * b[0, k, l] * sfb[0, k // 16, l], fp16 out.

It offers the names of the competition's reference.py (``generate_input``, ``ref_kernel``,
``check_implementation``, ``to_blocked``, ``ceil_div``, ``sf_vec_size``). ``generate_input`` makes
the competition's draws in its order with its dtypes, so one seed gives the competition's data on
the same device. As there, b and sfb have 128 rows (cuBLAS's FP4 GEMM wants N padded to 128) and
row 0 is the vector; the other rows are drawn too and take no part in c. ``ref_kernel`` is exact
on every device (the competition's calls cuBLAS's FP4 GEMM, which needs a B200).

It stands alone, as the competition's does: it imports torch and its runner folder's task.py and
utils.py only, so the scale layout, the e2m1 decoding and the exact product below are its own
(tests/test_problem_folders.py holds them to the same code as the other problems' files).
"""

import torch

from task import input_t, output_t
from utils import make_match_reference

N_PADDED = 128
RTOL = 1e-3
ATOL = 1e-3

__all__ = ["ceil_div", "check_implementation", "generate_input", "ref_kernel", "sf_vec_size", "to_blocked"]


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


def _scale_factor_pair(l: int, mn: int, sf_k: int, device):
    """One operand's scales, drawn in {0, 1, 2}: plain (mn, sf_k, l), then the permuted copy,
    whose draw is overwritten wherever a plain scale lands."""
    plain = torch.randint(0, 3, (l, mn, sf_k), dtype=torch.int8, device=device)
    plain = plain.to(torch.float8_e4m3fn).permute(1, 2, 0)
    drawn = torch.randint(0, 3, atoms_shape(l, mn, sf_k), dtype=torch.int8, device=device)
    permuted = drawn.to(torch.float8_e4m3fn).permute(*DRAWN_TO_PERMUTED)
    place_in_atoms(plain, permuted)
    return plain, permuted


def generate_input(m: int, k: int, l: int, seed: int, device="cuda") -> input_t:
    """(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c) as the competition makes them.

    a: (m, k//2, l) float4_e2m1fn_x2, b: (128, k//2, l), both K-major, bytes drawn in 0..3 (so
    each even element is one of 0, 0.5, 1, 1.5 and each odd element is 0); sfa: (m, k//16, l)
    float8_e4m3fn, sfb: (128, k//16, l); *_permuted: (32, 4, rest, 4, rest_k, l); c: (m, 1, l)
    fp16 filled with randn (the output buffer).
    """
    torch.manual_seed(seed)
    a = torch.randint(0, 4, (l, m, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    b = torch.randint(0, 4, (l, N_PADDED, k // 2), dtype=torch.uint8, device=device).permute(1, 2, 0)
    a = a.view(torch.float4_e2m1fn_x2)
    b = b.view(torch.float4_e2m1fn_x2)
    c = torch.randn((l, m, 1), dtype=torch.float16, device=device).permute(1, 2, 0)

    sf_k = ceil_div(k, sf_vec_size)
    sfa, sfa_permuted = _scale_factor_pair(l, m, sf_k, device)
    sfb, sfb_permuted = _scale_factor_pair(l, N_PADDED, sf_k, device)
    return a, b, sfa, sfb, sfa_permuted, sfb_permuted, c


@torch.no_grad()
def ref_kernel(data: input_t) -> output_t:
    """The reference c (m, 1, l) fp16, written into the data's c and returned, as the
    competition's ref_kernel does: the exact sum, rounded once."""
    a, b, sfa, sfb, _, _, c = data
    for batch in range(c.shape[2]):
        exact = exact_block_scaled_mm(a[:, :, batch], sfa[:, :, batch], b[:1, :, batch], sfb[:1, :, batch])
        c[:, :, batch] = round_to_float16(exact)
    return c


check_implementation = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)
