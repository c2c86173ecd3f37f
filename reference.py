"""Reference for the GPU MODE ``nvfp4_gemm`` problem: input generator, reference GEMM, checker.

C[i, j, l] = sum_k A[i, k, l] * SFA[i, k // 16, l] * B[j, k, l] * SFB[j, k // 16, l], fp16 out.

It offers the names of the competition's reference.py (``generate_input``, ``ref_kernel``,
``check_implementation``, ``to_blocked``, ``sf_vec_size``), so a submission that imports them runs
unchanged; the harness puts this file beside the submission with task.py and utils.py.
``generate_input`` draws the same random numbers in the same order as the competition's
generator, so one seed gives the competition's data on the same device. ``ref_kernel`` uses
cuBLAS's block-scaled FP4 GEMM on sm_100 and newer, as the competition does, and an exact
decode-and-matmul everywhere else (Hopper, CPU).
"""

import torch

from task import input_t, output_t
from utils import make_match_reference, match_reference

sf_vec_size = 16  # one fp8 scale per 16 elements along K (the competition's name)
RTOL = 1e-3
ATOL = 1e-3

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


def _scale_factor_pair(l: int, mn: int, sf_k: int, device):
    """Draw one operand's scales: plain (mn, sf_k, l) first, then the permuted copy."""
    plain = torch.randint(0, 4, (l, mn, sf_k), dtype=torch.int8, device=device)
    plain = plain.to(torch.float8_e4m3fn).permute(1, 2, 0)

    rest_mn, rest_k = ceil_div(mn, ATOM_ROWS), ceil_div(sf_k, ATOM_SF_COLS)
    drawn_shape = (l, rest_mn, rest_k, ATOM_ROWS_INNER, ATOM_ROWS_OUTER, ATOM_SF_COLS)
    # The competition draws this tensor too and then overwrites every in-range entry; the draw
    # must stay so that b's scales come from the same generator state.
    drawn = torch.randint(0, 4, drawn_shape, dtype=torch.int8, device=device)
    permuted = drawn.to(torch.float8_e4m3fn).permute(*DRAWN_TO_PERMUTED)
    place_in_atoms(plain, permuted)
    return plain, permuted


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


def generate_input(m: int, n: int, k: int, l: int, seed: int, device="cuda") -> input_t:
    """Return (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c) exactly as the competition does.

    a: (m, k//2, l) float4_e2m1fn_x2, b: (n, k//2, l), both K-major with two codes per byte;
    sfa: (m, k//16, l) float8_e4m3fn, sfb: (n, k//16, l); *_permuted: (32, 4, rest, 4, rest_k, l);
    c: (m, n, l) fp16 filled with randn (the output buffer).
    """
    torch.manual_seed(seed)
    a = torch.randint(-128, 128, (l, m, k // 2), dtype=torch.int8, device=device).permute(1, 2, 0)
    b = torch.randint(-128, 128, (l, n, k // 2), dtype=torch.int8, device=device).permute(1, 2, 0)
    a = a.view(torch.float4_e2m1fn_x2)
    b = b.view(torch.float4_e2m1fn_x2)
    c = torch.randn((l, m, n), dtype=torch.float16, device=device).permute(1, 2, 0)

    sf_k = ceil_div(k, sf_vec_size)
    sfa, sfa_permuted = _scale_factor_pair(l, m, sf_k, device)
    sfb, sfb_permuted = _scale_factor_pair(l, n, sf_k, device)
    return a, b, sfa, sfb, sfa_permuted, sfb_permuted, c


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


def to_blocked(scales_2d: torch.Tensor) -> torch.Tensor:
    """(mn, sf_k) scales -> flat cuBLAS block-scaling layout: 128x4 atoms, rows interleaved 32x4."""
    rows, cols = scales_2d.shape
    atoms = scales_2d.view(rows // ATOM_ROWS, ATOM_ROWS_OUTER, ATOM_ROWS_INNER, cols // ATOM_SF_COLS, ATOM_SF_COLS)
    # (rest_mn, 4, 32, rest_k, 4) -> (rest_mn, rest_k, 32, 4, 4)
    return atoms.permute(0, 3, 2, 1, 4).flatten()


def _has_fp4_tensor_cores(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 10


def _ref_scaled_mm(a, b, sfa, sfb, out):
    for batch in range(out.shape[2]):
        out[:, :, batch] = torch._scaled_mm(
            a[:, :, batch],
            b[:, :, batch].transpose(0, 1),
            to_blocked(sfa[:, :, batch]),
            to_blocked(sfb[:, :, batch]),
            bias=None,
            out_dtype=torch.float16,
        )


def _ref_exact(a, b, sfa, sfb, out):
    # e2m1 x e4m3 products are exact in fp32 and the sums of the competition's data stay far
    # inside fp32's 24-bit significand, so only the final fp16 rounding differs from exact.
    previous_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for batch in range(out.shape[2]):
            a_values = dequantize(a[:, :, batch : batch + 1], sfa[:, :, batch : batch + 1])[:, :, 0]
            b_values = dequantize(b[:, :, batch : batch + 1], sfb[:, :, batch : batch + 1])[:, :, 0]
            out[:, :, batch] = (a_values @ b_values.T).to(torch.float16)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous_tf32


@torch.no_grad()
def ref_kernel(data: input_t) -> output_t:
    """The reference C (m, n, l) fp16, written into the data's c and returned, as the
    competition's ref_kernel does; the other inputs are left untouched."""
    a, b, sfa, sfb, _, _, c = data
    if _has_fp4_tensor_cores(c.device):
        _ref_scaled_mm(a, b, sfa, sfb, c)
    else:
        _ref_exact(a, b, sfa, sfb, c)
    return c


# The competition's check: the runner's comparison (in the output's dtype) against ref_kernel.
check_implementation = make_match_reference(ref_kernel, rtol=RTOL, atol=ATOL)


def check_against(expected: torch.Tensor, output) -> tuple[bool, str]:
    """check_implementation against a reference computed beforehand."""
    return match_reference(None, output, lambda _: expected, rtol=RTOL, atol=ATOL)
