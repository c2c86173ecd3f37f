"""The L2 flush both processes run: the judge's before each timed round's window
(harness/judge/rounds.py), a worker's before each round of the baselines (harness/runner/timing.py),
and under --official a batch's own overwrite of L2 after the judge's go (harness/runner/calls.py)."""

import torch

# The competition's evals flush L2 by allocating an fp32 randn tensor and freeing it: 16000 x 1024
# x 1024 (64 GB) in the better-bench evals, 1024 x 1024 x 1024 (4 GiB) in the plain one (each
# problem's EvalParameters.flush_bytes). That does two things: it evicts everything from L2, and
# it is GPU work queued just before the start event, during which the host enqueues the timed
# calls. So on the leaderboard the host time of a call is hidden up to about (flush time / calls
# per batch); a smaller flush would show host time the leaderboard never sees. The same bytes
# give the same effect here wherever the device holds them; a smaller device gets as much as it
# can spare.
FLUSH_MAX_FREE_FRACTION = 0.5


def flush_bytes(free_bytes: int, wanted_bytes: int) -> int:
    """The eval's flush size, or half the free memory where that is less (a whole fp32 count)."""
    return min(wanted_bytes, int(FLUSH_MAX_FREE_FRACTION * free_bytes)) // 4 * 4


class L2Flush:
    """Evict L2 by writing fresh randn values over a large buffer, like the competition's flush.

    The competition allocates and frees its tensor every round; its caching allocator hands the
    same block back each time. Here the buffer is allocated once per process, device and size
    (until `release`) and refilled in place (the same randn kernel): on a device too small for the full size, a
    freed block could be carved up by later allocations (a baseline's operands, the next case's
    inputs) and the next round's flush would no longer fit.
    """

    _buffers: dict[tuple, torch.Tensor] = {}

    def __init__(self, device: torch.device, wanted_bytes: int):
        self.device = device
        if device.type != "cuda" or not wanted_bytes:
            self.buffer = None
            self.bytes = 0
            self.description = "none (CPU)" if device.type != "cuda" else "none (an untimed run)"
            return
        key = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        if (key, wanted_bytes) not in self._buffers:
            free_bytes, _ = torch.cuda.mem_get_info(key)
            size = flush_bytes(free_bytes, wanted_bytes)
            self._buffers[key, wanted_bytes] = torch.empty(size // 4, dtype=torch.float32, device=key)
        self.buffer = self._buffers[key, wanted_bytes]
        self.bytes = self.buffer.numel() * 4
        l2_bytes = torch.cuda.get_device_properties(key).L2_cache_size
        size = "the competition's size" if self.bytes == wanted_bytes else f"the competition's is {wanted_bytes / 1e9:.1f} GB"
        self.description = (f"{self.bytes / 1e9:.1f} GB fp32 randn per round ({size}; "
                            f"{self.bytes / l2_bytes:.0f}x the {l2_bytes / 2**20:.0f} MiB L2)")

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.normal_()

    @classmethod
    def release(cls) -> None:
        """Give every buffer of this process back to the device: a process that lives across runs
        (the service's judge) holds one only while a timed run needs it, since the judges of the
        other lanes on its GPU start workers of their own meanwhile."""
        cls._buffers.clear()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
