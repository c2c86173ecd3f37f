"""CUDA memory shared between the judge and a worker through the driver's IPC handles, and
nothing else: no file, no descriptor, no counter either side can truncate.

torch's own sharing (torch.multiprocessing) keeps a reference count for every shared block in a
shared-memory file that both processes map; a sandboxed worker has a /dev/shm of its own, and
a file a worker can map is one it can truncate under the other process (SIGBUS). Here a block
goes as its allocation's handle (64 bytes) and the tensor's place in it; the side that opens it
keeps the mapping until it lets go of it, and the side that made it keeps the memory alive as
long as the other may read it (the judge for the run, a worker until its next batch).

Both processes run this module: the judge opens what a worker returns, a worker what the judge
hands it.
"""

import ctypes
import threading

import torch

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
_HANDLE_BYTES = 64


class CudaIpcError(RuntimeError):
    """The driver refused to export or open a block (a forged handle, memory the driver cannot
    share such as a virtual-memory mapping, a freed block)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * _HANDLE_BYTES)]


_driver = None
_lock = threading.Lock()


def _cuda():
    global _driver
    with _lock:
        if _driver is None:
            library = ctypes.CDLL("libcuda.so.1")
            for name, arguments in (
                ("cuIpcGetMemHandle", (ctypes.POINTER(_Handle), ctypes.c_uint64)),
                ("cuIpcOpenMemHandle_v2", (ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint)),
                ("cuIpcCloseMemHandle", (ctypes.c_uint64,)),
                ("cuMemGetAddressRange_v2", (ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64)),
            ):
                function = getattr(library, name)
                function.argtypes, function.restype = arguments, ctypes.c_int
            _driver = library
    return _driver


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CudaIpcError(f"{what} failed (CUDA driver error {status})")


def _bound(device: torch.device) -> None:
    """The driver calls act on the calling thread's current context: torch's, for `device`."""
    torch.cuda.set_device(device)
    torch.cuda.current_stream(device)  # makes the primary context current on this thread


def export(tensor: torch.Tensor) -> tuple:
    """(device index, handle bytes, byte offset of the tensor's storage in its allocation,
    storage bytes) for a CUDA tensor whose memory comes from cudaMalloc (torch's allocator)."""
    _bound(tensor.device)
    storage = tensor.untyped_storage()
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(storage.data_ptr())),
           "cuMemGetAddressRange")
    handle = _Handle()
    _check(_cuda().cuIpcGetMemHandle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
    return tensor.device.index, bytes(handle.reserved), storage.data_ptr() - base.value, storage.nbytes()


class _Block:
    """An opened allocation, shaped as torch reads CUDA memory it does not own."""

    def __init__(self, pointer: int, nbytes: int, device: torch.device):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False), "version": 3,
                                         "strides": None}
        self.device = device


class OpenedBlocks:
    """The allocations this process opened from another's handles, each once (the driver maps a
    handle once per context), closed together by `close`."""

    def __init__(self):
        self._opened: dict[bytes, int] = {}

    def storage(self, device_index: int, handle: bytes, offset: int, nbytes: int) -> torch.Tensor:
        """The other process's storage as a flat uint8 tensor on `device_index`."""
        if not isinstance(handle, bytes) or len(handle) != _HANDLE_BYTES:
            raise CudaIpcError("a CUDA IPC handle is 64 bytes")
        device = torch.device("cuda", int(device_index))
        _bound(device)
        pointer = self._opened.get(handle)
        if pointer is None:
            pointer = self._opened[handle] = self._open_handle(_Handle.from_buffer_copy(handle))
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        _check(_cuda().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)),
               "cuMemGetAddressRange")
        if not (0 <= offset and 0 <= nbytes and offset + nbytes <= size.value):
            raise CudaIpcError(f"a block of {nbytes} bytes at {offset} lies outside its allocation of {size.value}")
        return torch.as_tensor(_Block(pointer + offset, nbytes, device), device=device)

    def _open_handle(self, raw: _Handle) -> int:
        """The driver's mapping of `raw` in this process."""
        opened = ctypes.c_uint64()
        _check(_cuda().cuIpcOpenMemHandle_v2(ctypes.byref(opened), raw, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
               "cuIpcOpenMemHandle")
        return opened.value

    def close(self) -> None:
        """Unmap every opened allocation; tensors made from them must be gone by then."""
        for pointer in self._opened.values():
            _cuda().cuIpcCloseMemHandle(ctypes.c_uint64(pointer))
        self._opened.clear()
