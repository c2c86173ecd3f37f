"""Every kernel, copy and memset this process runs on the GPU while a block runs, with its queue
and its start and end on the GPU's clock, from CUPTI's activity API.

torch.profiler records the same through Kineto, but Kineto's first session in a process takes
seconds to start, and every case's worker is a new process; CUPTI's own start is a small fraction
of that (docs/figures.md, row "CUPTI's start"). NVIDIA's Python bindings
(cupti-python) pin a CUPTI newer than the one torch ships. So this module calls the libcupti that
torch's CUDA build ships, through ctypes, for three record kinds, reading only the fields that
every record version since CUDA 9 places alike (CUPTI's headers, cupti_activity.h).
"""

import contextlib
import ctypes
import ctypes.util
import functools
import glob
import os
from pathlib import Path

import torch

# CUpti_ActivityKind values, and where each record keeps (start, end, device, queue).
MEMCPY, MEMSET, CONCURRENT_KERNEL = 1, 2, 10
FIELD_OFFSETS = {
    CONCURRENT_KERNEL: (16, 24, 40, 48),
    MEMCPY: (16, 24, 32, 40),
    MEMSET: (16, 24, 32, 40),
}
KERNEL_NAME_OFFSET = 104  # const char *name
COPY_BYTES_OFFSET = 8  # uint64_t bytes, in memcpy and memset records alike
BUFFER_BYTES = 8 << 20
CUPTI_SUCCESS = 0

_BUFFER_REQUESTED = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                     ctypes.POINTER(ctypes.c_size_t))
_BUFFER_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.c_size_t)


class CuptiUnavailable(RuntimeError):
    pass


def _u32(address: int) -> int:
    return ctypes.c_uint32.from_address(address).value


def _u64(address: int) -> int:
    return ctypes.c_uint64.from_address(address).value


def _demangled(name: bytes) -> str:
    text = name.decode(errors="replace")
    return torch._C._demangle(text) if hasattr(torch._C, "_demangle") else text


def decode(address: int) -> tuple | None:
    """(name, queue, start ns, end ns) of the activity record at `address`, or None for a kind
    not recorded here. The queue names the device too: stream ids repeat across devices."""
    kind = _u32(address)
    if kind not in FIELD_OFFSETS:
        return None
    start, end, device, stream = FIELD_OFFSETS[kind]
    if kind == CONCURRENT_KERNEL:
        name = _demangled(ctypes.c_char_p(ctypes.c_void_p.from_address(address + KERNEL_NAME_OFFSET).value).value or b"?")
    else:
        name = f"{'memcpy' if kind == MEMCPY else 'memset'} of {_u64(address + COPY_BYTES_OFFSET)} bytes"
    queue = f"stream {_u32(address + stream)} of cuda:{_u32(address + device)}"
    return name, queue, _u64(address + start), _u64(address + end)


def _library_candidates() -> list[str]:
    """libcupti as torch's process has it: already mapped, shipped beside torch (the nvidia-*
    wheels), then the system's."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        mapped = [line.split()[-1] for line in maps if "libcupti.so" in line]
        if mapped:
            return mapped[:1]
    site_packages = Path(torch.__file__).resolve().parents[1]
    shipped = sorted(glob.glob(str(site_packages / "nvidia" / "**" / "libcupti.so*"), recursive=True), reverse=True)
    system = [found] if (found := ctypes.util.find_library("cupti")) else []
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return shipped + system + sorted(glob.glob(f"{cuda_home}/extras/CUPTI/lib64/libcupti.so*"), reverse=True)


class CuptiActivity:
    """The process's CUPTI activity client (one per process: `client()`): buffers handed to
    CUPTI, records decoded as CUPTI hands them back."""

    def __init__(self):
        errors = []
        for path in _library_candidates():
            try:
                self.library = ctypes.CDLL(path)
                break
            except OSError as error:
                errors.append(str(error))
        else:
            raise CuptiUnavailable("no libcupti found" + (f" ({'; '.join(errors)})" if errors else ""))
        self.records: list[tuple] = []
        self._buffers: dict[int, ctypes.Array] = {}
        # Kept on the instance: CUPTI calls them for as long as the process lives.
        self._requested, self._completed = _BUFFER_REQUESTED(self._give_buffer), _BUFFER_COMPLETED(self._take_buffer)
        self._check(self.library.cuptiActivityRegisterCallbacks(self._requested, self._completed), "registering buffers")

    def _check(self, status: int, doing: str) -> None:
        if status != CUPTI_SUCCESS:
            raise CuptiUnavailable(f"CUPTI error {status} {doing}")

    def _give_buffer(self, buffer, size, max_records) -> None:
        array = (ctypes.c_uint64 * (BUFFER_BYTES // 8))()  # 8-byte aligned, as CUPTI needs
        self._buffers[ctypes.addressof(array)] = array
        buffer[0], size[0], max_records[0] = ctypes.addressof(array), BUFFER_BYTES, 0

    def _take_buffer(self, context, stream, buffer, size, valid_size) -> None:
        record = ctypes.c_void_p()
        while self.library.cuptiActivityGetNextRecord(ctypes.c_void_p(buffer), ctypes.c_size_t(valid_size),
                                                      ctypes.byref(record)) == CUPTI_SUCCESS:
            decoded = decode(record.value)
            if decoded is not None:
                self.records.append(decoded)
        self._buffers.pop(buffer, None)

    @contextlib.contextmanager
    def recording(self):
        """Yields the list that, once the block has run and its GPU work has finished, holds
        every record of it as (name, queue, start ns, end ns)."""
        self.records = []
        for kind in FIELD_OFFSETS:
            self._check(self.library.cuptiActivityEnable(kind), f"enabling record kind {kind}")
        try:
            yield self.records
        finally:
            for kind in FIELD_OFFSETS:
                self.library.cuptiActivityDisable(kind)
            self.library.cuptiActivityFlushAll(1)  # 1: flush records still in flight too


@functools.cache
def client() -> CuptiActivity:
    """The process's CUPTI client; raises CuptiUnavailable where CUPTI cannot be loaded or
    started (and tries again on the next call)."""
    return CuptiActivity()
