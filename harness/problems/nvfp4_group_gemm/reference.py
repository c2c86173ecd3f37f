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
"""

import torch

from harness.problems.nvfp4 import (DRAWN_TO_PERMUTED, atoms_shape, ceil_div, exact_block_scaled_mm, place_in_atoms,
                                    round_to_float16, sf_vec_size, to_blocked)
from task import input_t, output_t
from utils import make_match_reference

RTOL = 1e-3
ATOL = 1e-3
BATCH = 1  # l: every group is one matrix
SIGN_AND_LOW_BITS = 0b1011_1011  # every element is one of 0, +-0.5, +-1, +-1.5

__all__ = ["ceil_div", "check_implementation", "create_reordered_scale_factor_tensor", "generate_input", "ref_kernel",
           "sf_vec_size", "to_blocked"]


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
