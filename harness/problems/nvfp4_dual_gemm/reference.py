"""Reference for the GPU MODE ``nvfp4_dual_gemm`` problem: input generator, exact reference, checker.

c = silu(a @ b1^T) * (a @ b2^T) per batch, each product block-scaled as in nvfp4_gemm, fp16 out.

It offers the names of the competition's reference.py (``generate_input``, ``ref_kernel``,
``check_implementation``, ``to_blocked``, ``ceil_div``, ``sf_vec_size``). ``generate_input`` makes
the competition's draws in its order with its dtypes, so one seed gives the competition's data on
the same device. ``ref_kernel`` keeps the competition's order of operations and dtypes (both
products in fp32, SiLU and the product in fp32, then fp16) with each product's exact sum rounded
once to fp32 where the competition takes cuBLAS's; it runs on every device.
"""

import torch

from harness.problems.nvfp4 import (DRAWN_TO_PERMUTED, atoms_shape, ceil_div, exact_block_scaled_mm, place_in_atoms,
                                    sf_vec_size, to_blocked)
from task import input_t, output_t
from utils import make_match_reference

RTOL = 1e-3
ATOL = 1e-3
# Of each drawn byte only the sign and the two low bits of each nibble are kept, so every
# element is one of 0, +-0.5, +-1, +-1.5.
SIGN_AND_LOW_BITS = 0b1011_1011

__all__ = ["ceil_div", "check_implementation", "generate_input", "ref_kernel", "sf_vec_size", "to_blocked"]


def _fp4_operand(l: int, mn: int, k: int, device) -> torch.Tensor:
    # The competition draws below 255, not 256: byte 0xFF never comes up.
    drawn = torch.randint(0, 255, (l, mn, k // 2), dtype=torch.uint8, device=device)
    return (drawn & SIGN_AND_LOW_BITS).permute(1, 2, 0).view(torch.float4_e2m1fn_x2)


def _scale_factor_pair(l: int, mn: int, sf_k: int, device):
    """One operand's scales: uniform [0, 1) in fp32 rounded to e4m3 (subnormals included) as the
    plain (mn, sf_k, l), then the permuted copy. The competition leaves the permuted tensor
    uninitialised before placing the plain scales in it, which fills it whenever mn is a
    multiple of 128 and sf_k of 4 (every official shape); zeros stand in for the rest here."""
    plain = torch.rand((l, mn, sf_k), dtype=torch.float32, device=device)
    plain = plain.to(torch.float8_e4m3fn).permute(1, 2, 0)
    unset = torch.zeros(atoms_shape(l, mn, sf_k), dtype=torch.int8, device=device)
    permuted = unset.to(torch.float8_e4m3fn).permute(*DRAWN_TO_PERMUTED)
    place_in_atoms(plain, permuted)
    return plain, permuted


def generate_input(m: int, n: int, k: int, l: int, seed: int, device="cuda") -> input_t:
    """(a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c) as the
    competition makes them.

    a: (m, k//2, l) float4_e2m1fn_x2, b1 and b2: (n, k//2, l), all K-major; sfa: (m, k//16, l)
    float8_e4m3fn, sfb1 and sfb2: (n, k//16, l); *_permuted: (32, 4, rest, 4, rest_k, l);
    c: (m, n, l) fp16 filled with randn (the output buffer).
    """
    torch.manual_seed(seed)
    a = _fp4_operand(l, m, k, device)
    b1 = _fp4_operand(l, n, k, device)
    b2 = _fp4_operand(l, n, k, device)
    c = torch.randn((l, m, n), dtype=torch.float16, device=device).permute(1, 2, 0)

    sf_k = ceil_div(k, sf_vec_size)
    sfa, sfa_permuted = _scale_factor_pair(l, m, sf_k, device)
    sfb1, sfb1_permuted = _scale_factor_pair(l, n, sf_k, device)
    sfb2, sfb2_permuted = _scale_factor_pair(l, n, sf_k, device)
    return a, b1, b2, sfa, sfb1, sfb2, sfa_permuted, sfb1_permuted, sfb2_permuted, c


@torch.no_grad()
def ref_kernel(data: input_t) -> output_t:
    """The reference c (m, n, l) fp16 in a new tensor (the data's c is left as it is, as in the
    competition's ref_kernel)."""
    a, b1, b2, sfa, sfb1, sfb2, _, _, _, c = data
    m, n, l = c.shape
    gate = torch.empty((l, m, n), dtype=torch.float32, device=c.device).permute(1, 2, 0)
    up = torch.empty_like(gate)
    for batch in range(l):
        operand = a[:, :, batch], sfa[:, :, batch]
        gate[:, :, batch] = exact_block_scaled_mm(*operand, b1[:, :, batch], sfb1[:, :, batch]).to(torch.float32)
        up[:, :, batch] = exact_block_scaled_mm(*operand, b2[:, :, batch], sfb2[:, :, batch]).to(torch.float32)
    return (torch.nn.functional.silu(gate) * up).to(torch.float16)


check_implementation = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)
