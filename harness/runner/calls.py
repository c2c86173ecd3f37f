"""What the worker does on the judge's request: hold the inputs the judge shares, call the
submission on them in batches the judge times, record a batch's GPU activity, time the baselines.

Each method is one request (harness/judge/isolation.py sends them by name); each returns plain
values and tensors only, which is all the judge will read (harness/shared/wire.py). The inputs are any
problem's: tensors nested in tuples and lists beside plain values, which the worker passes to
custom_kernel as they came.
"""

import contextlib
import os
import time
from pathlib import Path

import torch

from harness.runner import baselines, ceilings, gpu_activity
from harness.runner.timing import time_rounds
from harness.shared import wire
from harness.shared.l2_flush import L2Flush, synchronize
from harness.shared.stats import StoppingRule

# A marker kernel on the timed queue in a recorded batch: one right behind the wait for the judge's
# go, before the batch's start event, which starts once the judge's window is open, and one after
# the batch (harness/judge/activity.py). torch.cuda._sleep spins this many cycles (about a
# microsecond).
MARKER_CYCLES = 2000


# Set by `make sanitize` around compute-sanitizer (see `_write_back_shared_memory`).
SANITIZER_ENV = "NVFP4_HARNESS_UNDER_SANITIZER"
UNDER_COMPUTE_SANITIZER = os.environ.get(SANITIZER_ENV) == "1"


def _write_back_shared_memory(data_list: list) -> None:
    """Copy each shared CUDA storage to the host and back, the same bytes. initcheck tracks what
    each process writes, so the memory the judge wrote and shares reads as uninitialized in this
    process until this process writes it; a copy from the host writes it without a kernel
    reading it first."""
    seen = set()
    for _, tensor in wire.leaves(data_list):
        storage = tensor.untyped_storage()
        if tensor.is_cuda and storage.data_ptr() not in seen:
            seen.add(storage.data_ptr())
            storage.copy_(storage.cpu())
    torch.cuda.synchronize()


class Calls:
    def __init__(self, runner_folder: str, device: str, rng_seed: int, progress, kernel=None):
        from utils import set_seed  # the runner folder's (harness/runner/worker.py puts it first on the path)

        self._runner_folder = Path(runner_folder)
        self._device = torch.device(device)
        self._progress = progress
        self._kernel = kernel  # imported from the runner folder on first use when not given
        self._held: dict[str, list] = {}  # what the calls take
        self._shared: dict[str, list] = {}  # the judge's shared inputs they came from
        self._storages: dict[str, dict] = {}
        self._own_flush = None  # --official: what each batch overwrites after go (`open_events`)
        if self._device.type == "cuda" and self._device.index is not None:
            # A launch or an event that names no device goes where the inputs are, as on the
            # competition's machine (`--device cuda:1` would otherwise time device 0's queue).
            torch.cuda.set_device(self._device.index)
        # The eval's set_seed before the submission runs, on the eval's seed or, under a secret seed,
        # one unrelated to the secret (harness/problems/shapes.py worker_rng_seed): the inputs are the judge's.
        set_seed(rng_seed)

    @property
    def kernel(self):
        if self._kernel is None:
            from harness.runner.files import import_submission

            self._progress("importing submission")
            self._kernel = import_submission(self._runner_folder).custom_kernel
        return self._kernel

    def load(self) -> None:
        """Import the submission now, before the case's first call (its progress line first)."""
        self.kernel  # noqa: B018

    def _returned(self, name: str, output) -> tuple:
        return wire.returned(output, self._storages[name])

    def hold(self, name: str, data_list: list, private: bool = False) -> int:
        """Keep the judge's shared inputs as `name` for the calls. `private` (--official): the calls
        take copies in this process's own memory, as the competition's eval's calls take inputs its
        own process allocated; what they return then goes back as tensors of their own, and what
        the judge writes into its shared inputs later reaches them through `refresh`."""
        if UNDER_COMPUTE_SANITIZER:
            _write_back_shared_memory(data_list)
        self._storages[name] = wire.storage_index(data_list)
        self._shared[name] = data_list
        if private:
            data_list = [wire.map_tensors(data, torch.Tensor.clone) for data in data_list]
            synchronize(self._device)
        self._held[name] = data_list
        return len(data_list)

    def refresh(self, name: str) -> None:
        """The private copies of `name` rewritten in place from the judge's shared inputs: new values
        at the same addresses, as the judge's own writes reach shared inputs."""
        for (_, own), (_, shared) in zip(wire.leaves(self._held[name]), wire.leaves(self._shared[name]), strict=True):
            if own.data_ptr() != shared.data_ptr():
                own.copy_(shared)
        synchronize(self._device)

    def release(self, name: str) -> None:
        self._held.pop(name, None)
        self._shared.pop(name, None)
        self._storages.pop(name, None)

    def open_events(self, handles: tuple, own_flush_bytes: int = 0) -> None:
        """The judge's interprocess events: the batch waits on the first and records the second,
        so that the judge's own events bracket it (harness/judge/rounds.py). With
        `own_flush_bytes` (--official), the buffer each batch overwrites after go, made here,
        before any round."""
        # An explicit index: an event opened on the bare "cuda" device cannot be recorded.
        device = torch.device("cuda", torch.cuda.current_device() if self._device.index is None else self._device.index)
        self._judge_events = tuple(torch.cuda.Event.from_ipc_handle(device, handle) for handle in handles)
        self._own_flush = L2Flush(device, int(own_flush_bytes)) if own_flush_bytes else None

    def run_batch(self, name: str, record_activity: bool = False) -> tuple:
        """Every held input once, back to back: (what each call returned, host ns of the loop).

        The one way the judge reaches custom_kernel. On a GPU the batch waits for the judge's go
        event; under --official it then overwrites L2 on this process's queue, so
        that the calls start after a flush of their own process's, as in the competition's eval
        (not in a recorded batch, whose activity is judged against the judge's window and this
        process's events alike); it is timed by this process's events the competition's way, and records
        the judge's done event. The reply goes out at once, while the GPU still works, so that the
        judge can queue its copies of the outputs right behind the batch. `batch_time` gives this
        process's figure afterwards.
        """
        kernel, data_list = self.kernel, self._held[name]
        self._recording_block = self._recording(record_activity)
        records = self._recording_block.__enter__()
        if self._device.type == "cuda":
            go, done = self._judge_events
            torch.cuda.current_stream().wait_event(go)
            if self._own_flush is not None and not record_activity:
                self._own_flush()
            if record_activity:
                torch.cuda._sleep(MARKER_CYCLES)
            start_event, end_event = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start_event.record()
        host_start = time.perf_counter_ns()
        try:
            outputs = [kernel(data) for data in data_list]
        except BaseException:
            self._recording_block.__exit__(None, None, None)
            raise
        host_ns = time.perf_counter_ns() - host_start
        if self._device.type == "cuda":
            end_event.record()
            done.record()
            self._batch = (start_event, end_event, records)
        else:
            self._batch = (host_ns, None, records)
        # Kept until the next batch: the judge reads the outputs this process owns through their
        # handles after the reply, and their memory must not be handed out again meanwhile.
        self._last_outputs = outputs
        return [self._returned(name, output) for output in outputs], host_ns

    def batch_time(self) -> tuple:
        """(ns of the last batch by this process's own clock, its GPU activity or None)."""
        start, end_event, records = self._batch
        self._recording_block.__exit__(None, None, None)
        if end_event is None:
            return float(start), records
        end_event.synchronize()
        return start.elapsed_time(end_event) * 1e6, records

    @contextlib.contextmanager
    def _recording(self, wanted: bool):
        """Every GPU activity of this process while the block runs, recorded by CUPTI
        (harness/runner/gpu_activity.py), a marker kernel on the current queue last (the batch
        launches the first), into the yielded list as [(name, queue, start ns, end ns)]; the
        block's work is synchronized at the end. Yields None where nothing is recorded (not wanted, or no GPU),
        and an empty list where CUPTI is unavailable (the judge says the round went unverified)."""
        if not (wanted and self._device.type == "cuda"):
            yield None
            synchronize(self._device)
            return
        try:
            cupti = gpu_activity.client()
        except gpu_activity.CuptiUnavailable as error:
            self._progress(f"GPU activity not recorded: {error}")
            yield []
            synchronize(self._device)
            return
        synchronize(self._device)
        with cupti.recording() as records:
            yield records
            torch.cuda._sleep(MARKER_CYCLES)
            synchronize(self._device)

    def time_baselines(self, name: str, rule: tuple, flush_bytes: int) -> dict:
        """Per-call GPU ns of cuBLAS and torch on the same inputs (a GEMM's: harness/runner/baselines.py),
        and the host ns of an empty CuTeDSL kernel's call: name -> one value per round, each after
        the eval's flush of `flush_bytes`."""
        data_list, flush, timed = self._held[name], L2Flush(self._device, flush_bytes), {}
        self._progress("baseline: cuBLAS bf16 on dequantized operands")
        operands = [baselines.dequantized_operands(data) for data in data_list]
        timed["cublas_bf16"] = time_rounds(baselines.cublas_matmul, operands, StoppingRule(*rule), flush, self._device)[0]
        del operands
        self._progress("baseline: torch dequantize + matmul")
        timed["torch_dequant_matmul"] = time_rounds(baselines.torch_dequantize_matmul, data_list, StoppingRule(*rule), flush, self._device)[0]
        if self._device.type == "cuda":
            try:
                empty_call = baselines.EmptyCuteDslCall()
            except ImportError:  # no CuTeDSL here: the table shows no host floor
                return timed
            self._progress(f"baseline: host time of an empty CuTeDSL kernel's call ({empty_call.call_path})")
            arguments = [empty_call.arguments(data) for data in data_list]
            for each in arguments:  # untimed: the first call loads the kernel's module
                empty_call(each)
            synchronize(self._device)
            timed["empty_cutedsl_call_host"] = time_rounds(empty_call, arguments, StoppingRule(*rule), flush, self._device)[1]
        return timed

    def measure_ceilings(self) -> dict:
        self._progress("measuring copy bandwidth and bf16 matmul peak")
        return ceilings.measure(self._device)

    def profile(self, name: str, ncu: bool) -> str:
        """The held input's call under a profiler: torch's table, or (ncu) one bare call in an NVTX
        range for a profiler wrapped around the whole run."""
        (data,) = self._held[name]
        kernel, nvtx_range = self.kernel, nvtx_range_for(self._device)
        if ncu:
            # One call before the range, so that first-call work (compiling, a submission timing its
            # candidate configs: hundreds of launches, each replayed by ncu) stays out of the profile.
            self._progress("first call, outside the profiled range")
            kernel(wire.map_tensors(data, torch.Tensor.clone))
            synchronize(self._device)
            with nvtx_range("custom_kernel"):
                kernel(data)
                synchronize(self._device)
            return ""
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self._device.type == "cuda" else [])
        with profile(activities=activities) as profiler:
            with nvtx_range("custom_kernel"):
                kernel(data)
                synchronize(self._device)
        sort_by = "self_cuda_time_total" if self._device.type == "cuda" else "self_cpu_time_total"
        return profiler.key_averages().table(sort_by=sort_by, row_limit=20)


def nvtx_range_for(device: torch.device):
    """NVTX ranges let ncu/nsys find the call (`--nvtx-include custom_kernel/`); CPU builds lack them."""
    return torch.cuda.nvtx.range if device.type == "cuda" else lambda name: contextlib.nullcontext()
