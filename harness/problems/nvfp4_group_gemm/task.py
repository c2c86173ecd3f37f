"""The type names the competition's runner offers a ``nvfp4_group_gemm`` submission (`from task import input_t, output_t`)."""

from typing import TypedDict, TypeVar

import torch

# (abc_tensors, sfasfb_tensors, sfasfb_reordered_tensors, problem_sizes): lists with one entry per
# group, of (a, b, c), of (sfa, sfb), of their permuted copies and of (m, n, k, l); see
# reference.generate_input.
input_t = TypeVar("input_t", bound=tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
                                         list[tuple[torch.Tensor, torch.Tensor]],
                                         list[tuple[torch.Tensor, torch.Tensor]],
                                         list[tuple[int, int, int, int]]])
output_t = TypeVar("output_t", bound=list[torch.Tensor])


class TestSpec(TypedDict):
    """A case of the tests file: per-group m, n and k, the group count and the seed. (The
    competition's task.py names `problem_sizes` here, which its tests files do not carry.)"""

    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    g: int
    seed: int
