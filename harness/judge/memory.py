"""The memory the judge shares with a worker, apart from everything else the judge holds.

A worker maps what it is handed: on the CPU one shared-memory file per storage, on a GPU the
whole allocator segment around a tensor (CUDA IPC maps segments, not tensors). So the tensors a
worker is handed are allocated on a GPU from a pool of their own, and the judge's references,
pristine inputs and copies of outputs never sit in a segment a worker maps. A case's inputs may
hold CPU tensors beside the GPU's (the grouped GEMM's plain scales): those go in shared-memory
files of their own, as on a CPU run.
"""

import contextlib

import torch

from harness.wire import leaves, map_tensors


class SharedPool:
    """One per run and device: every tensor handed to a worker is a copy made here."""

    def __init__(self, device: torch.device):
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None

    def _allocating(self):
        return torch.cuda.use_mem_pool(self._pool) if self._pool is not None else contextlib.nullcontext()

    def copies(self, data_list: list) -> list:
        """Copies of each input, its structure and its plain values as they are, every tensor
        cloned; nothing else is allocated meanwhile."""
        with self._allocating():
            shared = [map_tensors(data, torch.Tensor.clone) for data in data_list]
        for _, tensor in leaves(shared):
            if not tensor.is_cuda:
                tensor.share_memory_()
        return shared
