"""Reference for the GPU MODE ``nvfp4_gemv`` problem: input generator, exact reference, checker.

c[i, 0, l] = sum_k a[i, k, l] * sfa[i, k // 16, l] * b[0, k, l] * sfb[0, k // 16, l], fp16 out.

It offers the names of the competition's reference.py (``generate_input``, ``ref_kernel``,
``check_implementation``, ``to_blocked``, ``ceil_div``, ``sf_vec_size``). ``generate_input`` makes
the competition's draws in its order with its dtypes, so one seed gives the competition's data on
the same device. As there, b and sfb have 128 rows (cuBLAS's FP4 GEMM wants N padded to 128) and
row 0 is the vector; the other rows are drawn too and take no part in c. ``ref_kernel`` is exact
on every device (the competition's calls cuBLAS's FP4 GEMM, which needs a B200).
"""

import torch

from harness.problems.nvfp4 import (DRAWN_TO_PERMUTED, atoms_shape, ceil_div, exact_block_scaled_mm, place_in_atoms,
                                    round_to_float16, sf_vec_size, to_blocked)
from task import input_t, output_t
from utils import make_match_reference

N_PADDED = 128
RTOL = 1e-3
ATOL = 1e-3

__all__ = ["ceil_div", "check_implementation", "generate_input", "ref_kernel", "sf_vec_size", "to_blocked"]


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
