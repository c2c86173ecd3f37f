"""The helpers the competition's runner offers a ``nvfp4_group_gemm`` submission (`from utils import ...`).

The grouped problem's runner folder brings its own utils.py, which differs from the shared one
(the repository's root utils.py) in two places: the check compares lists of outputs, one group
at a time, with its own messages; and ``clear_l2_cache`` fills a 256 MiB int64 tensor with 42
instead of drawing 4 GiB of randn (the grouped eval flushes with ``clear_l2_cache_large``, as
the others' better-bench eval does). Everything else is the shared file's.
"""

import torch

from harness.problems.nvfp4 import runner_utils

DeterministicContext = runner_utils.DeterministicContext
clear_l2_cache_large = runner_utils.clear_l2_cache_large
get_device = runner_utils.get_device
set_seed = runner_utils.set_seed
verbose_allclose = runner_utils.verbose_allclose
verbose_allequal = runner_utils.verbose_allequal

L2_FILL_SHAPE = (32, 1024, 1024)  # int64: 256 MiB
L2_FILL_VALUE = 42


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


def clear_l2_cache():
    fill = torch.empty(L2_FILL_SHAPE, dtype=torch.int64, device="cuda")
    fill.fill_(L2_FILL_VALUE)
    del fill
