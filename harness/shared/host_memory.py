"""CPU memory the judge shares with a worker: one anonymous file (memfd) per hand-over, sealed
so that no process can shrink or grow it, handed to the worker as a descriptor.

A shared-memory file a worker could truncate would turn the judge's next read of it into SIGBUS,
the judge's death rather than a verdict; a sealed memfd has no name to find and no size to
change. Each tensor keeps a storage of its own inside it, as a clone would.

Both processes run this module: the judge makes arenas, a worker maps the ones it is handed.
"""

import fcntl
import mmap
import os

import torch

ALIGNMENT = 256


def _view(buffer, offset: int, nbytes: int, dtype: torch.dtype, shape, stride, storage_offset: int) -> torch.Tensor:
    """A tensor whose storage is exactly bytes [offset, offset + nbytes) of `buffer`."""
    flat = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes else torch.empty(0, dtype=torch.uint8)
    return flat.view(dtype).as_strided(tuple(shape), tuple(stride), storage_offset)


def storage_span(tensor: torch.Tensor) -> int:
    """Bytes from the tensor's first element to just past its last, as its strides lay them out."""
    if tensor.numel() == 0:
        return 0
    last = sum((size - 1) * step for size, step in zip(tensor.shape, tensor.stride()))
    return (last + 1) * tensor.element_size()


class HostArena:
    """Sealed memory holding copies of `tensors` (their shapes and strides kept), for the judge."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.places, total = [], 0
        for tensor in tensors:
            self.places.append(total)
            total += -(-storage_span(tensor) // ALIGNMENT) * ALIGNMENT
        self.nbytes = max(total, ALIGNMENT)
        self.fd = os.memfd_create("nvfp4-shared-inputs", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.nbytes)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self._map = mmap.mmap(self.fd, self.nbytes)
        self.copies = []
        for tensor, place in zip(tensors, self.places):
            copy = _view(self._map, place, storage_span(tensor), tensor.dtype, tensor.shape, tensor.stride(), 0)
            _as_bytes(copy).copy_(_as_bytes(tensor))
            self.copies.append(copy)

    def close(self) -> None:
        os.close(self.fd)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """Elements as same-sized integers: copied bit for bit, whatever the dtype (fp4 and fp8 included)."""
    return tensor.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


class MappedArenas:
    """A worker's side: the arenas it was handed, mapped once each, kept while their tensors live."""

    def __init__(self, fds: list[int]):
        """Maps each descriptor of one request and closes it (the mapping keeps the memory)."""
        self._maps = []
        for fd in fds:
            try:
                self._maps.append(mmap.mmap(fd, os.fstat(fd).st_size))
            finally:
                os.close(fd)

    def tensor(self, slot: int, offset: int, nbytes: int, dtype: torch.dtype, shape, stride, storage_offset: int) -> torch.Tensor:
        mapped = self._maps[slot]
        if not (0 <= offset and 0 <= nbytes and offset + nbytes <= len(mapped)):
            raise ValueError(f"{nbytes} bytes at {offset} lie outside a shared file of {len(mapped)}")
        return _view(mapped, offset, nbytes, dtype, shape, stride, storage_offset)
