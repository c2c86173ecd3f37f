"""Bad inputs to `submission.custom_kernel`: each is refused with a ValueError naming its fault.

Validation runs before any GPU work and checks the device last, so on a CPU-only machine every
case but the mixed-device one runs on CPU tensors and still has to report its own fault (not
"not on CUDA"). On a GPU machine the same cases are built on the GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from reference import generate_input
from referee_tally import referee_tally

HAS_CUDA = torch.cuda.is_available()
DEVICE = "cuda" if HAS_CUDA else "cpu"
KIND = "bad inputs"
# Small and valid: M, N multiples of 128, K of 256; L = 2 so that batch strides matter.
M, N, K, L = 128, 256, 512, 2
SEED = 4321


def valid(m=M, n=N, k=K, l=L, device=DEVICE) -> list[torch.Tensor]:
    return list(generate_input(m, n, k, l, SEED, device=device))


A, B, SFA, SFB, SFA_P, SFB_P, C = range(7)


def replaced(**by_index) -> Callable[[], list]:
    """A builder: the valid input with tensor i replaced by by_index[f"i{i}"](valid tensors)."""

    def build():
        data = valid()
        for key, make in by_index.items():
            data[int(key[1:])] = make(data)
        return data

    return build


def relaid(t: torch.Tensor, relayout: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """`relayout` applied to the bytes of a one-byte dtype (not every device copies fp4/fp8 as
    such), the result viewed back as the original dtype."""
    if t.element_size() != 1:
        return relayout(t)
    return relayout(t.view(torch.uint8)).view(t.dtype)


def misaligned(t: torch.Tensor) -> torch.Tensor:
    """Same shape, strides and values, but the first element one element past a 16-byte
    boundary, where TMA cannot start a copy."""

    def shifted(source: torch.Tensor) -> torch.Tensor:
        storage = torch.empty(source.numel() + 16, dtype=source.dtype, device=source.device)
        return storage[1 : 1 + source.numel()].as_strided(source.shape, source.stride()).copy_(source)

    return relaid(t, shifted)


def compact(t: torch.Tensor) -> torch.Tensor:
    """Same shape and values in a row-major compact layout, what `.contiguous()` gives."""
    return relaid(t, lambda source: source.contiguous())


def column_major(t: torch.Tensor) -> torch.Tensor:
    """Same shape and values, first two dimensions stored transposed."""
    return relaid(t, lambda source: source.transpose(0, 1).contiguous().transpose(0, 1))


@dataclass(frozen=True)
class BadInput:
    name: str
    build: Callable[[], list]
    message: str  # regex the ValueError's message must match
    needs_cuda: bool = False


def shape_message(name: str, expected: tuple, got: tuple) -> str:
    return re.escape(f"{name} must have shape {expected}") + r".*" + re.escape(f"got {got}")


CASES = [
    # dtypes, one tensor at a time
    BadInput("a as uint8", replaced(i0=lambda d: d[A].view(torch.uint8)),
             r"a must have dtype torch\.float4_e2m1fn_x2, got torch\.uint8"),
    BadInput("b as int8", replaced(i1=lambda d: d[B].view(torch.int8)),
             r"b must have dtype torch\.float4_e2m1fn_x2, got torch\.int8"),
    BadInput("sfa as float32", replaced(i2=lambda d: d[SFA].float()),
             r"sfa must have dtype torch\.float8_e4m3fn, got torch\.float32"),
    BadInput("sfb as uint8", replaced(i3=lambda d: d[SFB].view(torch.uint8)),
             r"sfb must have dtype torch\.float8_e4m3fn, got torch\.uint8"),
    BadInput("sfa_permuted as uint8", replaced(i4=lambda d: d[SFA_P].view(torch.uint8)),
             r"sfa_permuted must have dtype torch\.float8_e4m3fn, got torch\.uint8"),
    BadInput("sfb_permuted as bfloat16", replaced(i5=lambda d: d[SFB_P].to(torch.bfloat16)),
             r"sfb_permuted must have dtype torch\.float8_e4m3fn, got torch\.bfloat16"),
    BadInput("c as float32", replaced(i6=lambda d: d[C].float()),
             r"c must have dtype torch\.float16, got torch\.float32"),
    BadInput("c as bfloat16", replaced(i6=lambda d: d[C].to(torch.bfloat16)),
             r"c must have dtype torch\.float16, got torch\.bfloat16"),
    # ranks
    BadInput("a without its L dimension", replaced(i0=lambda d: d[A][:, :, 0]),
             r"a must have 3 dimensions, got shape \(128, 256\)"),
    BadInput("plain scales passed as sfa_permuted", replaced(i4=lambda d: d[SFA]),
             r"sfa_permuted must have 6 dimensions"),
    # alignment of M, N, K
    BadInput("K = 384, not a multiple of 256", lambda: valid(k=384),
             r"K must be a positive multiple of 256, got K=384"),
    BadInput("K = 128, below one K tile", lambda: valid(k=128),
             r"K must be a positive multiple of 256, got K=128"),
    BadInput("M = 192, not a multiple of 128", lambda: valid(m=192),
             r"M must be a positive multiple of 128, got M=192"),
    BadInput("N = 64, not a multiple of 128", lambda: valid(n=64),
             r"N must be a positive multiple of 128, got N=64"),
    BadInput("L = 0, an empty batch", lambda: valid(l=0),
             r"L \(a\.shape\[2\]\) must be >= 1, got 0"),
    # sizes that disagree between tensors
    BadInput("b, sfb with twice the K of a", replaced(
        i1=lambda d: valid(k=2 * K)[B], i3=lambda d: valid(k=2 * K)[SFB], i5=lambda d: valid(k=2 * K)[SFB_P]),
        shape_message("b", (N, K // 2, L), (N, K, L))),
    BadInput("b, sfb with L = 1 against L = 2", replaced(
        i1=lambda d: valid(l=1)[B], i3=lambda d: valid(l=1)[SFB], i5=lambda d: valid(l=1)[SFB_P]),
        shape_message("b", (N, K // 2, L), (N, K // 2, 1))),
    BadInput("c with L = 1 against L = 2", replaced(i6=lambda d: valid(l=1)[C]),
             shape_message("c", (M, N, L), (M, N, 1))),
    BadInput("sfa one K block short", replaced(i2=lambda d: d[SFA][:, :-1, :]),
             shape_message("sfa", (M, K // 16, L), (M, K // 16 - 1, L))),
    BadInput("sfb_permuted built for N = 128", replaced(i5=lambda d: valid(n=128)[SFB_P]),
             shape_message("sfb_permuted", (32, 4, N // 128, 4, K // 64, L), (32, 4, 1, 4, K // 64, L))),
    BadInput("c transposed to N x M", replaced(i6=lambda d: d[C].transpose(0, 1)),
             shape_message("c", (M, N, L), (N, M, L))),
    # layouts: right shape, wrong strides
    BadInput("a M-major", replaced(i0=lambda d: column_major(d[A])),
             r"a must be laid out as K-major"),
    BadInput("a as a view into a wider buffer", replaced(i0=lambda d: valid(k=2 * K)[A][:, : K // 2, :]),
             r"a must be laid out as K-major.*expected strides \(256, 1, 32768\), got \(512, 1, 65536\)"),
    BadInput("b made .contiguous() (batch innermost)", replaced(i1=lambda d: compact(d[B])),
             r"b must be laid out as K-major"),
    BadInput("c column-major", replaced(i6=lambda d: column_major(d[C])),
             r"c must be laid out as N-contiguous"),
    BadInput("sfa_permuted made .contiguous()", replaced(i4=lambda d: compact(d[SFA_P])),
             r"sfa_permuted must be laid out as the \(32, 4, rest_m, 4, rest_k, L\) atom layout"),
    BadInput("a one element past a 16-byte boundary", replaced(i0=lambda d: misaligned(d[A])),
             r"a must start at a 16-byte aligned address"),
    BadInput("c one element past a 16-byte boundary", replaced(i6=lambda d: misaligned(d[C])),
             r"c must start at a 16-byte aligned address"),
    # containers
    BadInput("six tensors instead of seven", lambda: valid()[:6],
             r"data must be the 7-tuple \(a, b, sfa, sfb, sfa_permuted, sfb_permuted, c\)"),
    BadInput("c as a numpy array", replaced(i6=lambda d: d[C].cpu().numpy()),
             r"c must be a torch\.Tensor, got ndarray"),
    # devices, checked last
    BadInput("every tensor on the CPU", lambda: valid(device="cpu"),
             r"a must be on a CUDA device, got cpu"),
    BadInput("c on the CPU, the rest on the GPU", replaced(i6=lambda d: d[C].cpu()),
             r"c must be on a CUDA device, got cpu", needs_cuda=True),
]


@pytest.fixture(scope="module")
def submission():
    import submission

    return submission


@pytest.fixture
def tally(request):
    return referee_tally(request.config)


def test_matrix_is_large_enough():
    assert len(CASES) >= 15
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_bad_input_is_refused_naming_the_constraint(case, submission, tally):
    if case.needs_cuda and not HAS_CUDA:
        tally.record_skip(KIND, case.name)
        pytest.skip("needs a CUDA device: on a CPU-only machine every tensor is already on the wrong device")
    data = case.build()
    with pytest.raises(ValueError, match=case.message):
        submission.custom_kernel(data)
    tally.record(KIND, case.name)


@pytest.mark.parametrize("case", [case for case in CASES if "device" not in case.message],
                         ids=lambda case: case.name)
def test_fast_path_accepts_no_bad_layout(case, submission):
    """Valid calls skip the full check through a fast path; on every device it must refuse
    what the full check refuses (the device itself is judged by the GPU run of the matrix)."""
    try:
        accepted = submission._accept_layout_fast(case.build())
    except (AttributeError, IndexError, TypeError, ValueError):
        accepted = None
    assert accepted is None


def test_fast_path_accepts_the_official_inputs(submission):
    """The competition's inputs must not fall through to the slow full check."""
    data = valid()
    problem, addresses = submission._accept_layout_fast(data)
    assert problem == (M, N, K, L)
    assert addresses == submission.operand_addresses(data)


def test_valid_input_is_refused_for_nothing_but_the_device(submission):
    """The control: the matrix's base input has no fault other than, on a CPU, its device."""
    data = valid()
    if HAS_CUDA:
        assert submission.validate_inputs(data).problem == (M, N, K, L)
    else:
        with pytest.raises(ValueError, match=r"^a must be on a CUDA device, got cpu$"):
            submission.validate_inputs(data)

