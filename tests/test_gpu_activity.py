"""The worker's CUPTI records: decoded from records laid out as CUPTI lays them (CPU), and recorded
for real, every queue and kind, on a GPU."""

import ctypes

import pytest
import torch

from harness.runner import gpu_activity
from harness.runner.gpu_activity import CONCURRENT_KERNEL, MEMCPY, MEMSET, decode

MANGLED_SPIN = b"_ZN2at4cuda40_GLOBAL__N__758183f4_8_Sleep_cu_088d913f11spin_kernelEl"


def _record(kind: int, fields: dict[int, tuple[type, int]], size: int = 160):
    """(the memory, its address): a zeroed record of `size` bytes, `kind` first, {offset: (ctype, value)}
    written; the memory lives as long as the caller holds it."""
    buffer = (ctypes.c_uint64 * (size // 8))()
    base = ctypes.addressof(buffer)
    ctypes.c_uint32.from_address(base).value = kind
    for offset, (ctype, value) in fields.items():
        ctype.from_address(base + offset).value = value
    return buffer, base


def test_a_kernel_record_gives_its_demangled_name_queue_and_times():
    name = ctypes.create_string_buffer(MANGLED_SPIN)
    _alive, base = _record(CONCURRENT_KERNEL, {16: (ctypes.c_uint64, 5_000), 24: (ctypes.c_uint64, 6_500),
                                               40: (ctypes.c_uint32, 1), 48: (ctypes.c_uint32, 13),
                                               104: (ctypes.c_void_p, ctypes.addressof(name))})
    recorded_name, queue, start, end = decode(base)
    assert "spin_kernel" in recorded_name and not recorded_name.startswith("_Z")
    assert (queue, start, end) == ("stream 13 of cuda:1", 5_000, 6_500)


@pytest.mark.parametrize("kind, what", [(MEMCPY, "memcpy"), (MEMSET, "memset")])
def test_copy_and_memset_records_give_their_size_queue_and_times(kind, what):
    _alive, base = _record(kind, {8: (ctypes.c_uint64, 4096), 16: (ctypes.c_uint64, 100), 24: (ctypes.c_uint64, 900),
                                  32: (ctypes.c_uint32, 0), 40: (ctypes.c_uint32, 7)})
    assert decode(base) == (f"{what} of 4096 bytes", "stream 7 of cuda:0", 100, 900)


def test_other_record_kinds_are_left_out():
    _alive, base = _record(5, {16: (ctypes.c_uint64, 100)})  # CUPTI_ACTIVITY_KIND_RUNTIME: host-side API calls
    assert decode(base) is None


def _cuda_runtime() -> ctypes.CDLL:
    """The CUDA runtime torch has loaded: torch itself never memsets, so the test calls it."""
    with open("/proc/self/maps") as maps:
        path = next(line.split()[-1] for line in maps if "libcudart.so" in line)
    return ctypes.CDLL(path)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: CUPTI records a GPU's activity")
def test_every_queue_and_kind_is_recorded_with_gpu_times():
    side = torch.cuda.Stream()
    source = torch.randn(1 << 20, device="cuda")
    target = torch.empty_like(source)
    memset_async = _cuda_runtime().cudaMemsetAsync
    torch.cuda.synchronize()
    with gpu_activity.client().recording() as records:
        torch.cuda._sleep(2000)
        with torch.cuda.stream(side):
            target.copy_(source, non_blocking=True)
            assert memset_async(ctypes.c_void_p(target.data_ptr()), 0, ctypes.c_size_t(4096), ctypes.c_void_p(side.cuda_stream)) == 0
            torch.cuda._sleep(2000)
        torch.cuda.synchronize()
    names = [name for name, _, _, _ in records]
    assert sum("spin_kernel" in name for name in names) == 2, records
    assert "memcpy of 4194304 bytes" in names and "memset of 4096 bytes" in names, records
    timed_queue = next(queue for name, queue, _, _ in records if "spin_kernel" in name)
    side_queues = {queue for name, queue, _, _ in records if name.startswith("mem")}
    assert len(side_queues) == 1 and timed_queue not in side_queues, records
    assert all(0 < start < end for _, _, start, end in records), records
