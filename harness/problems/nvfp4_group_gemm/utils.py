"""The helpers the competition's runner offers a ``nvfp4_group_gemm`` submission (`from utils import ...`).

The grouped problem's runner folder brings its own utils.py, which differs from the shared one
(the repository's root utils.py) in two places: the check compares lists of outputs, one group
at a time, with its own messages; and ``clear_l2_cache`` fills a 256 MiB int64 tensor with 42
instead of drawing 4 GiB of randn (the grouped eval flushes with ``clear_l2_cache_large``, as
the others' better-bench eval does). Everything else is the shared file's, line for line
(tests/test_problem_folders.py holds them to it).
"""

import os
import random

import torch

L2_FILL_SHAPE = (32, 1024, 1024)  # int64: 256 MiB
L2_FILL_VALUE = 42


def set_seed(seed=42):
    random.seed(seed)
    try:
        import numpy

        numpy.random.seed(seed)
    except ImportError:  # the runner has numpy; this kit does not need it
        pass
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def get_device(use_cuda: bool = True) -> torch.device:
    if use_cuda:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        print("No compatible GPU found. Falling back to CPU.")
    return torch.device("cpu")


def _mismatch_details(mismatched: torch.Tensor, received: torch.Tensor, expected: torch.Tensor, max_print: int) -> list[str]:
    count = mismatched.count_nonzero().item()
    if count == 0:
        return []
    details = [f"Number of mismatched elements: {count}"]
    for index in torch.nonzero(mismatched)[:max_print]:
        where = tuple(index.tolist())
        # 0-d tensors in an f-string print as their value (Tensor.__format__), as on the runner.
        details.append(f"ERROR AT {where}: {received[where]} {expected[where]}")
    if count > max_print:
        details.append(f"... and {count - max_print} more mismatched elements.")
    return details


@torch.no_grad()
def verbose_allclose(received: torch.Tensor, expected: torch.Tensor, rtol=1e-05, atol=1e-08, max_print=5) -> list[str]:
    """Why `received` is not within atol + rtol * |expected| of `expected`, element by element:
    [] when it is. NaN and infinities must sit where the expected tensor has them."""
    if received.shape != expected.shape:
        return ["SIZE MISMATCH"]
    outside = torch.abs(received - expected) > atol + rtol * torch.abs(expected)
    mismatched = (
        outside
        | torch.logical_xor(torch.isnan(received), torch.isnan(expected))
        | torch.logical_xor(torch.isposinf(received), torch.isposinf(expected))
        | torch.logical_xor(torch.isneginf(received), torch.isneginf(expected))
    )
    return _mismatch_details(mismatched, received, expected, max_print)


@torch.no_grad()
def verbose_allequal(received: torch.Tensor, expected: torch.Tensor, max_print: int = 5) -> list[str]:
    return _mismatch_details(torch.not_equal(received, expected), received, expected, max_print)


def match_reference(data, output, reference: callable, rtol=1e-05, atol=1e-08) -> tuple[bool, str]:
    """(True, '') when every output matches its group's reference, else (False, the runner's
    message for the first group that does not, or for a list of the wrong length)."""
    expected = reference(data)
    if len(output) != len(expected):
        return False, f"output length mismatch: got {len(output)}, expected {len(expected)}"
    for group, (received, wanted) in enumerate(zip(output, expected)):
        reasons = verbose_allclose(received, wanted, rtol=rtol, atol=atol)
        if reasons:
            # The runner prints the reasons as a Python list, brackets and quotes included.
            return False, f"mismatch found! custom implementation doesn't match reference: {group} {reasons}"
    return True, ""


def make_match_reference(reference: callable, **kwargs):
    def check(data, output):
        return match_reference(data, output, reference=reference, **kwargs)

    return check


class DeterministicContext:
    """Deterministic cuDNN and torch algorithms inside the block; the previous settings after it."""

    def __enter__(self):
        self._saved = (
            os.environ.get("CUBLAS_WORKSPACE_CONFIG", ""),
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic,
        )
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.use_deterministic_algorithms(True)
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        cublas, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.deterministic = self._saved
        torch.use_deterministic_algorithms(False)
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = cublas


def _fill_and_free(shape) -> None:
    torch.randn(shape, device="cuda")


def clear_l2_cache():
    fill = torch.empty(L2_FILL_SHAPE, dtype=torch.int64, device="cuda")
    fill.fill_(L2_FILL_VALUE)
    del fill


def clear_l2_cache_large():
    """The eval's flush: a 64 GB fp32 randn tensor (harness/runner/timing.py sizes it to the device)."""
    _fill_and_free((16000, 1024, 1024))
