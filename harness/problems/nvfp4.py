"""What the NVFP4 problems share, taken from the GEMM's files at the repository's root.

Another problem's reference.py is itself the module `reference` where it runs, so it cannot
import the GEMM's under that name; here the root's files are imported under names of their own
(harness/problems/folder.py) and their pieces handed on: the e2m1 decoding, the scale layouts,
the runner's helpers. What is new here is what the GEMM's fp32 reference does not need: an
accumulation exact for any scales, and one rounding from it to fp16.
"""

from pathlib import Path

import torch

from harness.problems.folder import import_runner_files

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT_FILES = {name: REPO_ROOT / f"{name}.py" for name in ("task", "utils", "reference")}

_root = import_runner_files(ROOT_FILES, prefix="nvfp4_problems_root")
gemm_reference = _root["reference"]
runner_utils = _root["utils"]

sf_vec_size = gemm_reference.sf_vec_size
ceil_div = gemm_reference.ceil_div
to_blocked = gemm_reference.to_blocked
place_in_atoms = gemm_reference.place_in_atoms
permuted_index = gemm_reference.permuted_index
DRAWN_TO_PERMUTED = gemm_reference.DRAWN_TO_PERMUTED


def atoms_shape(l: int, mn: int, sf_k: int) -> tuple[int, ...]:
    """The shape in which the competition draws the permuted scales, (l, rest_mn, rest_k, 32, 4, 4);
    DRAWN_TO_PERMUTED turns it into (32, 4, rest_mn, 4, rest_k, l)."""
    ref = gemm_reference
    return (l, ceil_div(mn, ref.ATOM_ROWS), ceil_div(sf_k, ref.ATOM_SF_COLS),
            ref.ATOM_ROWS_INNER, ref.ATOM_ROWS_OUTER, ref.ATOM_SF_COLS)


def exact_block_scaled_mm(a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """(m, n) float64: the sum over K of a * sfa * b * sfb for one batch, without rounding.

    a: (m, k//2) e2m1 pairs with (m, k//16) e4m3 scales; b: (n, k//2) with (n, k//16). Each
    decoded value a * sfa is exact in fp32 (2 significant bits times 4), each product of two is
    exact in fp64, and every partial sum is a multiple of 2^-20 (the smallest e4m3 step is 2^-9,
    the smallest e2m1 step 0.5) below 2^53 of those steps for any K under 2^30, so fp64 holds
    every sum exactly in any order."""
    a_values = gemm_reference.dequantize(a.unsqueeze(-1), sfa.unsqueeze(-1))[:, :, 0].double()
    b_values = gemm_reference.dequantize(b.unsqueeze(-1), sfb.unsqueeze(-1))[:, :, 0].double()
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
