"""The memory the judge shares with a worker, apart from everything else the judge holds.

A worker maps what it is handed: on a GPU the whole allocation around a tensor (CUDA IPC maps
allocations, not tensors), on the CPU a sealed memfd (harness/shared/host_memory.py). So the tensors a
worker is handed are allocated on a GPU from a pool of their own, and the judge's references,
pristine inputs and copies of outputs never sit in memory a worker maps. A case's inputs may
hold CPU tensors beside the GPU's (the grouped GEMM's plain scales): those go in a memfd of
their own, as on a CPU run.
"""

import contextlib

import torch

from harness.shared import cuda_ipc
from harness.shared.host_memory import HostArena
from harness.shared.wire import SharedTensor, dtype_name, leaves, map_tensors


class SharedPool:
    """One per run and device: every tensor handed to a worker is a copy made here."""

    def __init__(self, device: torch.device):
        self._pool = torch.cuda.MemPool() if device.type == "cuda" else None
        self._arenas: dict[int, tuple[HostArena, int]] = {}  # a CPU copy's storage address -> its arena

    def _allocating(self):
        return torch.cuda.use_mem_pool(self._pool) if self._pool is not None else contextlib.nullcontext()

    def copies(self, data_list: list) -> list:
        """Copies of each input, its structure and its plain values as they are, every tensor
        cloned (CPU tensors into one sealed arena); nothing else is allocated meanwhile."""
        host = [tensor for _, tensor in leaves(data_list) if not tensor.is_cuda]
        arena = HostArena(host) if host else None
        host_copies = iter(arena.copies if arena else ())
        for index, copy in enumerate(arena.copies if arena else ()):
            self._arenas[copy.untyped_storage().data_ptr()] = (arena, index)
        with self._allocating():
            return [map_tensors(data, lambda tensor: tensor.clone() if tensor.is_cuda else next(host_copies))
                    for data in data_list]

    def describe(self, tensor: torch.Tensor, fds: list[int]) -> SharedTensor:
        """How a request carries `tensor`, one of the copies made here (wire.send_request)."""
        layout = (dtype_name(tensor.dtype), tuple(tensor.shape), tuple(tensor.stride()), tensor.storage_offset())
        if tensor.is_cuda:
            device, handle, place, nbytes = cuda_ipc.export(tensor)
            return SharedTensor(("cuda", device, handle, place, nbytes), *layout)
        arena, index = self._arenas[tensor.untyped_storage().data_ptr()]
        if arena.fd not in fds:
            fds.append(arena.fd)
        return SharedTensor(("host", fds.index(arena.fd), arena.places[index], tensor.untyped_storage().nbytes()), *layout)

    def release(self) -> None:
        """The judge closes every hand-over's descriptor (the workers let go of the case's inputs
        first); the memory itself goes with the last tensor on it."""
        for arena in {id(arena): arena for arena, _ in self._arenas.values()}.values():
            arena.close()
        self._arenas.clear()
