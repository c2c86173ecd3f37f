"""The Hopper (sm_90a) stand-in for submission.py's B200 kernel: the same contract and the same
results on H100 and H200, so that the kit's checks, timings and sanitizer runs have a GPU to run on.

Never submitted. submission.py imports it only on compute capability 9.x (`kernel_for_arch`), which
the leaderboard's B200 never reaches; on Hopper the harness therefore judges this stand-in, not the
B200 kernel. The harness's runner folder holds a copy beside submission.py
(harness/runner/files.py), and the host side (input checks, the call path, split-K arithmetic,
the compiled-kernel cache) is submission.py's own.

Hopper has no FP4 tensor cores, but every e2m1 x e4m3 product is exact in fp16, so this path
decodes both operands and their scales on chip and multiplies in fp16 with fp32 accumulation:
as in the reference, the only roundings are the fp32 sums and the final fp16 store.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blockscaled_layout as blockscaled_layout
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, warpgroup

from submission import (HAVE_TVM_FFI, K_ALIGN, MN_ALIGN, SF_ATOM_BYTES, SF_VEC_SIZE, CompileFacts, LaunchPlan,
                        Problem, compile_options, compiled_kernel, fake_pointer, int32_args, pointer_arg,
                        split_k_partials, split_k_range)


SM90_NUM_SMS = 132  # H100 SXM and H200; the live count is read from the device at call time
# The most shared memory one CTA may have on sm_90, counting the 1 KB of static shared memory
# that every kernel's resource usage shows (as the compile checker does).
SM90_SMEM_BYTES = 227 * 1024
SM90_STATIC_SMEM_BYTES = 1024
# Clusters of 1-4 CTAs, each filling an SM, that an H100 SXM and an H200 run at once (what
# get_max_active_clusters reports on both): the configuration where there is no device to ask.
SM90_CLUSTER_CAPACITY = {1: 132, 2: 66, 3: 39, 4: 30}
# Decoded operands are exact fp16 values scaled by 2**-6 (`sm90_e2m1_as_e4m3` gives the code
# * 2**-6 as an e4m3 byte, converted to fp16 and times the scale), so the accumulators hold the
# product scaled by 2**-12 and the epilogue undoes that exactly.
SM90_OPERAND_EXPONENT = 6
SM90_TILE_K = 64  # K elements per K tile: the GEMM's pipeline stage and the unit of the K order
SM90_ACC_RESCALE = float(2 ** (2 * SM90_OPERAND_EXPONENT))
# The epilogues move c's rows in runs of 4 columns per thread: 16-byte fp32 loads and 8-byte fp16
# stores, each contiguous across a warp's threads, so that every access fills whole sectors.
SM90_RUN = 4
SM90_RUNS_IN_FLIGHT = 4  # runs per thread whose split values are loaded at once
# Programmatic dependent grids of one queue that the GPU runs at once (probed on an H200:
# docs/hopper.md): the most calls that can overlap.
SM90_GRIDS_IN_FLIGHT = 8
# Decoded-A buffers per plan, which the calls take in turn: a call's decode writes its buffer
# while the GEMMs of the calls before it may still read theirs. As many as calls the GPU runs at
# once, so that a call with A decoded in its GEMM's grid never waits for a buffer, and calls of
# few CTAs with the decode kernel overlap as deep as the GPU lets them.
SM90_DECODED_A_BUFFERS = SM90_GRIDS_IN_FLIGHT
# The words (int32) that hand a decoded-A buffer from its decode CTAs to its GEMM and back:
# decode CTAs done writing it (ready), GEMM CTAs done reading it (done); and, counting on from
# zero for good, decode CTAs that have taken a turn on it (claimed) and decode CTAs whose calls'
# GEMMs are done reading it (released).
SM90_COUNTER_WORDS = 4
SM90_READY, SM90_DONE, SM90_CLAIMED, SM90_RELEASED = range(SM90_COUNTER_WORDS)
# The codes of a packed word (index = nibble, low first) in decoded pair i, halves e = 0, 1.
SM90_PAIR_CODES = tuple((4 * (i % 2) + i // 2, 4 * (i % 2) + i // 2 + 2) for i in range(4))


def sm90_e2m1_as_e4m3(word, high):
    """Four of the eight e2m1 codes of `word` (low nibble first) as e4m3 bytes of value
    code value * 2**-6: byte b holds code 2b (high = 0, the low nibbles) or 2b + 1 (high = 1).
    Runs on cutlass integers in the kernel and on numpy uint32 in tests.

    A code's sign goes to bit 7 and its three magnitude bits (exponent e1 e0, mantissa m) to
    bits 4..2, e4m3's low exponent bits and top mantissa bit: the e2m1 exponent is read with
    e4m3's bias of 7 instead of 1, and the e2m1 subnormal 0.5 lands on the e4m3 subnormal 2**-7.
    Seven integer operations for four codes, then one hardware conversion per two.
    """
    if high:
        return ((word >> 2) & 0x1C1C1C1C) | (word & 0x80808080)
    return ((word << 2) & 0x1C1C1C1C) | ((word << 4) & 0x80808080)


def _sm90_asm_u32(asm: str, constraints: str, *args, loc=None, ip=None) -> cutlass.Uint32:
    return cutlass.Uint32(llvm.inline_asm(
        cutlass.Uint32.mlir_type, [cutlass.Uint32(a).ir_value(loc=loc, ip=ip) for a in args], asm, constraints,
        has_side_effects=False, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@cutlass.dsl_user_op
def _sm90_mul_f16x2(a, b, *, loc=None, ip=None) -> cutlass.Uint32:
    """Packed fp16x2 multiply on bit patterns: round to nearest, subnormals kept."""
    return _sm90_asm_u32("mul.rn.f16x2 $0, $1, $2;", "=r,r,r", a, b, loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_e4m3x2_to_f16x2(codes, half: int = 0, *, loc=None, ip=None) -> cutlass.Uint32:
    """The two e4m3 codes in the low (half = 0) or high (half = 1) 16 bits of `codes` -> fp16x2,
    one hardware conversion, exact (every e4m3 value is an fp16 value, subnormals included)."""
    return _sm90_asm_u32("{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; cvt.rn.f16x2.e4m3x2 $0, %s; }"
                         % ("hi" if half else "lo"), "=r,r", codes, loc=loc, ip=ip)


def _sm90_memory_asm(asm: str, constraints: str, *args, result=None, loc=None, ip=None):
    """Inline PTX that touches memory (never moved or dropped); its result as type `result`."""
    value = llvm.inline_asm(result.mlir_type if result else None, [a.ir_value(loc=loc, ip=ip) for a in args],
                            asm, constraints, has_side_effects=True, is_align_stack=False,
                            asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)
    return result(value) if result else None


# The decoded A's counters: 32-bit words in global memory, addressed as integers.

@cutlass.dsl_user_op
def _sm90_count_up(address, amount=1, *, loc=None, ip=None) -> None:
    """Add `amount`, releasing this thread's earlier writes (and those it has synchronized
    with) at GPU scope."""
    _sm90_memory_asm("red.release.gpu.global.add.u32 [$0], $1;", "l,r,~{memory}", cutlass.Int64(address),
                     cutlass.Int32(amount), loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_load_acquire(address, *, loc=None, ip=None) -> cutlass.Int32:
    """The word, acquiring what its writers released."""
    return _sm90_memory_asm("ld.acquire.gpu.global.u32 $0, [$1];", "=r,l,~{memory}", cutlass.Int64(address),
                            result=cutlass.Int32, loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_fetch_add(address, order: str = "relaxed", *, loc=None, ip=None) -> cutlass.Int32:
    """Add 1 with the memory order `order` (relaxed, acq_rel); the count before."""
    return _sm90_memory_asm(f"atom.{order}.gpu.global.add.u32 $0, [$1], 1;", "=r,l,~{memory}",
                            cutlass.Int64(address), result=cutlass.Int32, loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_store_zero(address, *, loc=None, ip=None) -> None:
    _sm90_memory_asm("st.relaxed.gpu.global.u32 [$0], 0;", "l,~{memory}", cutlass.Int64(address), loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_fence_proxy_async(*, loc=None, ip=None) -> None:
    """Order this thread's view of global memory before its TMA (async proxy) reads."""
    _sm90_memory_asm("fence.proxy.async.global;", "~{memory}", loc=loc, ip=ip)


@cutlass.dsl_user_op
def _sm90_pin_f32(value, *, loc=None, ip=None) -> cutlass.Float32:
    """Pass a value through an empty volatile asm. The accumulators come from asynchronous MMAs
    whose completion the compiler does not see: pinned after the wgmma wait, reads of them
    cannot be scheduled above it."""
    return cutlass.Float32(llvm.inline_asm(
        cutlass.Float32.mlir_type, [cutlass.Float32(value).ir_value(loc=loc, ip=ip)], "", "=f,0",
        has_side_effects=True, is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip))


@cute.jit
def _sm90_scale_f16x2(code: cutlass.Uint32) -> cutlass.Uint32:
    """The e4m3 scale in the low byte of `code` -> fp16x2 (scale, scale)."""
    return _sm90_e4m3x2_to_f16x2((code & 0xFF) * 0x101)


@cute.jit
def _sm90_decode_pair(word: cutlass.Uint32, i, scale2: cutlass.Uint32) -> cutlass.Uint32:
    """Pair i (0-3) of `word`'s codes times the scale: the exact fp16x2 operand * 2**-6. Pair i
    holds codes 4 (i % 2) + i // 2 and that + 2 (`SM90_PAIR_CODES`), bytes of one e4m3 word."""
    return _sm90_mul_f16x2(_sm90_e4m3x2_to_f16x2(sm90_e2m1_as_e4m3(word, i // 2), i % 2), scale2)


class HopperOperandDecode:
    """A * SFA -> fp16 operands (times 2**-6) in the GEMM's K order, once per call.

    Every output tile of the GEMM multiplies the same 128 rows of A, so decoding A once here and
    loading it with TMA takes a third of the decode work, and every CTA-wide barrier, out of the
    GEMM's main loop. K order inside each 64-wide K tile (`HopperNvfp4Gemm` explains why): MMA
    position 16i + 8h + 2t + e holds logical element 16t + 8h + SM90_PAIR_CODES[i][e], i.e.
    8-element chunk (i, h) of a row holds pair i of the row's packed words h, 2 + h, 4 + h, 6 + h.

    The decode CTAs (`decode`) are CTAs of the GEMM's own grid where the whole grid fits on the
    device at once (one grid a call, so twice the calls in flight of two grids a call: the GPU
    runs `SM90_GRIDS_IN_FLIGHT` grids of one queue at once), else this class's own kernel,
    launched before the GEMM. The buffer's counters (`counters_ptr`, words
    `SM90_READY`...) hand it over: each decode CTA takes a turn on the buffer, loads its inputs,
    waits for its turn (the GEMMs of the calls that took the buffer before have read it all),
    decodes, and counts itself done on the ready counter, which the GEMM's TMA warp polls before
    it loads A.
    """

    TILE_K = SM90_TILE_K
    THREADS_PER_UNIT = 2  # per (row, K tile): thread h decodes the chunks (i, h)
    # Units per thread, all loads issued before the first decode: the decode kernel runs on the
    # SMs the previous GEMMs leave idle (a few of them on some shapes), where a wave of CTAs
    # costs a DRAM round trip; more units a thread, fewer waves.
    UNITS_PER_THREAD = 4
    KERNEL_THREADS = 128  # this class's own kernel

    def __init__(self, threads: int = KERNEL_THREADS, units_per_thread: int = UNITS_PER_THREAD):
        self.threads = threads
        self.units_per_thread = units_per_thread

    def ctas_per_batch(self, m, k):
        """CTAs that decode one batch of A (host ints or DSL values): the last may have threads
        with no unit."""
        per_cta = self.threads * self.units_per_thread
        return (m * (k // self.TILE_K) * self.THREADS_PER_UNIT + per_cta - 1) // per_cta

    @cute.jit
    def launch(self, mWords: cute.Tensor, mScaleWords: cute.Tensor, mDecoded: cute.Tensor, counters_ptr: cute.Pointer,
               m: cutlass.Int32, k: cutlass.Int32, l: cutlass.Int32):
        self.kernel(mWords, mScaleWords, mDecoded, counters_ptr, m, k // self.TILE_K).launch(
            grid=(self.ctas_per_batch(m, k), l, 1), block=(self.threads, 1, 1), use_pdl=True)

    @cute.kernel
    def kernel(self, mWords: cute.Tensor, mScaleWords: cute.Tensor, mDecoded: cute.Tensor,
               counters_ptr: cute.Pointer, m: cutlass.Int32, k_tiles: cutlass.Int32):
        # Launched as the programmatic dependent of the grid queued before it. Where that is the
        # previous call's GEMM, this runs as soon as every CTA of that GEMM has started, on the
        # SMs it leaves idle; where it is the reduction kernel, once that has passed its wait for
        # its GEMM. Any other grid lets this start only when it has completed, and so has
        # everything queued before it: the inputs are complete either way.
        block, batch, _ = cute.arch.block_idx()
        grid_x, grid_y, _ = cute.arch.grid_dim()
        self.decode(mWords, mScaleWords, mDecoded, counters_ptr, block, batch, grid_x * grid_y, m, k_tiles)
        # This grid completes only after the grid before it: the GEMM that waits for this grid
        # then also knows the previous call's GEMM done with the split-K partials and c. One CTA
        # waits, so that the others give their SM back as soon as they are done.
        if block == 0 and batch == 0:
            cute.arch.griddepcontrol_wait()

    @cute.jit
    def _unit(self, decoder, u, tidx, k_tiles):
        """(h, row, K tile) of this thread's unit u. Two threads per (row, K tile of 64), K tiles
        fastest, consecutive threads on consecutive units: thread h of the pair decodes the
        packed words h, 2 + h, 4 + h, 6 + h into the chunks (i, h), i = 0..3, so that the pair's
        stores of chunk i fill one whole 32-byte sector together and a warp reads 512 and writes
        2 KB of contiguous memory."""
        index = (decoder * self.units_per_thread + u) * self.threads + tidx
        unit = index // self.THREADS_PER_UNIT
        return index % self.THREADS_PER_UNIT, unit // k_tiles, unit % k_tiles

    @cute.jit
    def decode(self, mWords: cute.Tensor, mScaleWords: cute.Tensor, mDecoded: cute.Tensor, counters_ptr: cute.Pointer,
               decoder, batch, decode_ctas, m, k_tiles):
        """One decode CTA's share of batch `batch` (its `decoder`-th CTA), one of the call's
        `decode_ctas`; lets the grid's dependents launch once it has its turn."""
        tidx, _, _ = cute.arch.thread_idx()
        counters = counters_ptr.toint()
        if tidx == 0:
            # This CTA's turn on the buffer, taken before the next grid may launch, so that the
            # calls that take the buffer take their turns in the order they were queued. The turn
            # comes when the calls before it that took the buffer have released it: the call
            # SM90_DECODED_A_BUFFERS before this one (decode_ctas turns each) is the last that may
            # still read it.
            turn = _sm90_fetch_add(counters + 4 * SM90_CLAIMED)
            released = _sm90_load_acquire(counters + 4 * SM90_RELEASED)
            while released - turn + decode_ctas <= 0:  # wraps: a difference of counts
                released = _sm90_load_acquire(counters + 4 * SM90_RELEASED)
            # The GEMM may start now (where it is this kernel's programmatic dependent), or the
            # next call's grid (where this CTA is one of the GEMM's): its CTAs set up while this
            # runs and wait for the ready count before their first load.
            cute.arch.griddepcontrol_launch_dependents()
        # Per unit: four of the row's 8 packed words of the K tile, and its 4 scales (one 32-bit
        # word of the permuted layout).
        words = cute.make_rmem_tensor((4, self.units_per_thread), cutlass.Uint32)
        scale_words = cute.make_rmem_tensor((self.units_per_thread,), cutlass.Uint32)
        for u in cutlass.range_constexpr(self.units_per_thread):
            h, row, k_tile = self._unit(decoder, u, tidx, k_tiles)
            if row < m:
                tile_words = cute.local_tile(mWords[(row, None, batch)], (8,), (k_tile,))
                cute.autovec_copy(cute.make_tensor(tile_words.iterator + h, cute.make_layout(4, stride=2)),
                                  words[(None, u)])
                scale_words[u] = cutlass.Uint32(mScaleWords[(row, k_tile, batch)])
        cute.arch.barrier()  # this CTA's turn
        for u in cutlass.range_constexpr(self.units_per_thread):
            h, row, k_tile = self._unit(decoder, u, tidx, k_tiles)
            if row < m:
                scales = cute.make_rmem_tensor((4,), cutlass.Uint32)
                for t in cutlass.range_constexpr(4):
                    scales[t] = _sm90_scale_f16x2(scale_words[u] >> (8 * t))
                # (pair t, chunk i), column-major: each chunk's four pairs are 16 contiguous bytes.
                chunks = cute.make_rmem_tensor((4, 4), cutlass.Uint32)
                for i in cutlass.range_constexpr(4):
                    for t in cutlass.range_constexpr(4):
                        chunks[(t, i)] = _sm90_decode_pair(words[(t, u)], i, scales[t])
                out = cute.local_tile(mDecoded[(row, None, batch)], (self.TILE_K,), (k_tile,))
                out_chunks = cute.make_tensor(out.iterator, cute.make_layout((8, 2, 4), stride=(1, 8, 16)))  # (e, h, i)
                cute.autovec_copy(cute.recast_tensor(chunks, cutlass.Float16), out_chunks[(None, h, None)])
        # Every thread's stores, then the CTA's count: the barrier orders the CTA's stores before
        # thread 0's release, which is cumulative: the one fence it compiles to makes them all
        # visible at GPU scope to whoever acquires the count. No fence per thread (each would
        # wait for its own stores' acknowledgement), and no fence of its own before the release
        # (a second wait).
        cute.arch.barrier()
        if tidx == 0:
            _sm90_count_up(counters + 4 * SM90_READY)


@dataclass
class CyclingLaunchPlan(LaunchPlan):
    """A `LaunchPlan` whose calls take the tuples of `trailing_args` in turn: consecutive calls
    never share a decoded-A buffer (`SM90_DECODED_A_BUFFERS`)."""

    def __post_init__(self):
        self._next_args = itertools.cycle(self.trailing_args).__next__

    def launch(self, addresses: tuple[int, ...]) -> None:
        if HAVE_TVM_FFI:
            self.kernel(*addresses, *self._next_args())
        else:
            self.kernel(*map(pointer_arg, self.operand_types, addresses), *self._next_args())


class TunedPlan:
    """The fastest of a few launch plans for one problem, timed on the first call's own operands
    (each candidate writes the same c), then that plan for every call. Timed as the benchmark
    queues calls: back to back behind GPU work, so that the GPU, not the host, sets the pace."""

    ROUNDS = 3  # the best round counts: a round is slowed, never sped up, by anything else
    # As many calls as the benchmark queues: configs that overlap calls deeply reach their pace
    # only after several calls.
    CALLS_PER_ROUND = 50
    HEAD_START_CYCLES = 4_000_000  # about 2 ms of GPU time for the host to queue a round in

    def __init__(self, candidates: list[tuple[object, LaunchPlan]], device: torch.device):
        self.candidates = candidates  # (config, plan), in the order a model ranks them
        self.device = device
        self.config = None

    def launch(self, addresses: tuple[int, ...]) -> None:
        self.config, plan = self._fastest(addresses)
        self.candidates = None  # the others' workspaces go
        self.launch = plan.launch
        plan.launch(addresses)

    def _fastest(self, addresses: tuple[int, ...]) -> tuple[object, LaunchPlan]:
        with torch.cuda.device(self.device):
            for _, plan in self.candidates:
                plan.launch(addresses)  # loads each kernel before any timing
            rounds = []
            for _ in range(self.ROUNDS):
                events = []
                for _, plan in self.candidates:
                    torch.cuda._sleep(self.HEAD_START_CYCLES)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    for _ in range(self.CALLS_PER_ROUND):
                        plan.launch(addresses)
                    end.record()
                    events.append((start, end))
                torch.cuda.synchronize()
                rounds.append([start.elapsed_time(end) for start, end in events])
        best = [min(times) for times in zip(*rounds)]
        return self.candidates[best.index(min(best))]


@functools.lru_cache(maxsize=None)
def _sm90_cluster_capacity(device_index: int, cluster_size: int) -> int:
    """Clusters of `cluster_size` CTAs, each filling an SM, that the device runs at once. Each
    query compiles and loads a probe kernel, so it is asked once per device and size."""
    return utils.HardwareInfo(device_index).get_max_active_clusters(cluster_size)


@dataclass(frozen=True)
class Sm90Config:
    tile_n: int  # rows of B (columns of c) per CTA: half per MMA warpgroup
    splits: int  # CTAs per output tile along K (a runtime argument: one compile serves all)
    # Where the splits add up: in the tile's cluster, or, where the device cannot hold every
    # tile's cluster at once, in `HopperSplitKReduction` (a runtime argument too).
    in_cluster: bool = True
    # Where A is decoded: by CTAs at the front of the GEMM's own grid (one grid a call, so twice
    # the calls in flight), or by the decode kernel's grid queued before it (a runtime argument).
    decode_in_grid: bool = False

    def describe(self) -> str:
        tile = f"tile {self.tile_n}x{Sm90Tiling.TILE_M}x{Sm90Tiling.TILE_K}, split-K {self.splits}"
        if self.splits > 1:
            tile += " in a cluster" if self.in_cluster else " + reduction kernel"
        if self.decode_in_grid:
            tile += ", A decoded in its grid"
        return tile


@dataclass(frozen=True)
class Sm90Tiling:
    """What one compiled GEMM is, all of it fixed by its tile width: the CTA's tile, how the MMA
    warpgroups share it, its registers, and the stages that shared memory holds. Computed on the
    host before any tracing; the layout methods build the matching static layouts inside a
    traced function (the host's for its TMA atoms and shared storage, the kernel's to address
    shared memory), since CuTe layouts exist only there."""

    tile_n: int  # rows of B (columns of c) per CTA
    # Derived, in __post_init__:
    b_row_warpgroups: int = field(init=False)  # MMA warpgroups that multiply the same B rows
    k_tiles_per_step: int = field(init=False)  # K tiles per step of the main loop, the unit splits cover
    mma_blocks: int = field(init=False)  # 64-row MMA blocks per MMA warpgroup
    scale_rows: int = field(init=False)  # B rows whose scales a stage holds: whole 128-row atoms
    mma_registers: int = field(init=False)  # per thread of an MMA warpgroup after setmaxnreg
    packed_b_stage_bytes: int = field(init=False)
    stage_bytes: int = field(init=False)  # what TMA brings a stage: B's packed rows and scales, the decoded A tile
    stages: int = field(init=False)

    TILE_WIDTHS = (256, 128, 64)  # the widest first: the order configurations are ranked in
    TILE_M = 128  # rows of A (rows of c) per CTA: the MMA's N
    TILE_K = SM90_TILE_K  # 32 packed bytes per row of B per stage
    PACKED_BYTES_PER_ROW = TILE_K // 2
    MMA_WARPGROUPS = 2
    MMA_THREADS = 128 * MMA_WARPGROUPS
    MMA_WARPS = MMA_THREADS // 32  # the TMA warpgroup's warps come after them
    THREADS = MMA_THREADS + 128  # the MMA warpgroups, then the TMA warpgroup
    TMA_REGISTERS = 40  # per thread of the TMA warpgroup after setmaxnreg
    # K tiles of B (read from DRAM) that the TMA warp loads before it waits for the decoded A
    # (from L2), so that the first stages fill sooner.
    B_TILES_AHEAD = 2
    # Dynamic shared memory before the stages: their barriers (two Int64 a stage), padded to 1 KB
    # by the 1024-byte alignment of the decoded A's swizzled tiles.
    BARRIER_BYTES = 1024

    def __post_init__(self):
        if self.tile_n not in self.TILE_WIDTHS:
            raise ValueError(f"tile width {self.tile_n}: the kernel has tiles {self.TILE_WIDTHS} wide")
        # A tile narrower than the warpgroups' 64-row MMA blocks gives each warpgroup the whole
        # tile and alternate K tiles: two accumulators of the same tile, added in the epilogue,
        # and twice the output tiles (CTAs) of a 128-wide tile on the same problem, without the
        # split-K adding across CTAs. Each warpgroup of a B row keeps two register fragments.
        b_row_warpgroups = self.MMA_WARPGROUPS if self.tile_n < 64 * self.MMA_WARPGROUPS else 1
        # ptxas gives a kernel that uses setmaxnreg the most registers its block size allows;
        # setmaxnreg only moves registers within that allocation (asking for more never returns).
        launch_registers = 65536 // self.THREADS // 8 * 8
        packed_b_stage_bytes = self.tile_n * self.PACKED_BYTES_PER_ROW
        scale_rows = max(self.tile_n, 128)
        stage_bytes = (packed_b_stage_bytes + scale_rows // 128 * SF_ATOM_BYTES
                       + self.TILE_M * self.TILE_K * cutlass.Float16.width // 8)
        derived = dict(
            b_row_warpgroups=b_row_warpgroups,
            k_tiles_per_step=2 * b_row_warpgroups,
            mma_blocks=self.tile_n * b_row_warpgroups // (64 * self.MMA_WARPGROUPS),
            scale_rows=scale_rows,
            mma_registers=min(256, ((self.MMA_WARPGROUPS + 1) * launch_registers - self.TMA_REGISTERS)
                              // self.MMA_WARPGROUPS // 8 * 8),
            packed_b_stage_bytes=packed_b_stage_bytes,
            stage_bytes=stage_bytes,
            # As many stages as shared memory holds beside the static 1 KB and the barriers.
            stages=(SM90_SMEM_BYTES - SM90_STATIC_SMEM_BYTES - self.BARRIER_BYTES) // stage_bytes,
        )
        for name, value in derived.items():
            object.__setattr__(self, name, value)
        # The TMA warp fills B_TILES_AHEAD stages before it loads any A, and each MMA warpgroup
        # holds two of its stages (the K tile it decodes and the one whose MMAs are in flight)
        # before it releases one: fewer stages than either needs would deadlock.
        needed = max(self.B_TILES_AHEAD, self.k_tiles_per_step)
        if self.stages < needed:
            raise ValueError(f"tile width {self.tile_n}: {self.stages} stages fit in shared memory, "
                             f"the pipeline needs {needed}")

    @property
    def mma_tiler(self) -> tuple[int, int, int]:
        return self.tile_n, self.TILE_M, self.TILE_K

    # ----- the MMA and the static layouts (inside traced functions only) -----

    def tiled_mma(self) -> cute.TiledMma:
        """fp16 wgmma, A (B's rows) from registers, B (A's rows) from shared memory, fp32
        accumulators; the MMA warpgroups side by side over B rows, or on the same rows."""
        return sm90_utils.make_trivial_tiled_mma(
            cutlass.Float16, cutlass.Float16, OperandMajorMode.K, OperandMajorMode.K, cutlass.Float32,
            (self.MMA_WARPGROUPS // self.b_row_warpgroups, 1, 1), tiler_mn=(64, self.TILE_M),
            a_source=warpgroup.OperandSource.RMEM)

    def a_smem_layout(self) -> cute.ComposedLayout:
        """The decoded A tiles of every stage: 128B-swizzled fp16, as wgmma reads its B."""
        return sm90_utils.make_smem_layout_b(utils.LayoutEnum.ROW_MAJOR, self.mma_tiler, cutlass.Float16, self.stages)

    def packed_b_smem_layout(self) -> cute.Layout:
        """B's packed bytes of every stage: (B row, byte, stage), rows contiguous."""
        return cute.make_layout((self.tile_n, self.PACKED_BYTES_PER_ROW, self.stages),
                                stride=(self.PACKED_BYTES_PER_ROW, 1, self.packed_b_stage_bytes))

    def sfb_smem_layout(self) -> cute.Layout:
        """B's scale atoms of every stage, indexed (B row, K, stage) as the permuted layout holds them."""
        return blockscaled_layout.make_smem_layout_sf((self.scale_rows, self.TILE_K), SF_VEC_SIZE, self.stages)

    def epilogue_layout(self) -> cute.Layout:
        """The epilogue's fp32 tile (B row, A row), over the stages once every MMA is done. B rows
        are contiguous (runs of columns of c); each A row is padded by 4 words so that a warp's
        accumulator stores, 8 B rows x 4 A rows apart by 2, hit 32 banks."""
        return cute.make_layout((self.tile_n, self.TILE_M), stride=(1, self.tile_n + 4))


class Sm90TmaLoads(NamedTuple):
    """The GEMM's TMA atoms, built on the host, and the global tensors they read."""
    tma_a: cute.CopyAtom
    mA: cute.Tensor
    tma_b: cute.CopyAtom
    mB: cute.Tensor
    tma_sfb: cute.CopyAtom
    mSFB: cute.Tensor


class Sm90TmaCopies(NamedTuple):
    """The TMA warp's copies, partitioned for this CTA's tile: decoded A, packed B, and per
    128-row atom of B's scales an (shared, global) pair."""
    tma_a: cute.CopyAtom
    tAgA: cute.Tensor
    tAsA: cute.Tensor
    tma_b: cute.CopyAtom
    tBgB: cute.Tensor
    tBsB: cute.Tensor
    tma_sfb: cute.CopyAtom
    scale_copies: list


class Sm90DecodedA(NamedTuple):
    """The handover of the call's decoded-A buffer: its counters (`SM90_READY`...) and how many
    decode CTAs count themselves done on them."""
    counters_ptr: cute.Pointer
    decode_ctas: cutlass.Int32


class Sm90GemmCta(NamedTuple):
    """Where a GEMM CTA of the grid works: output tile `tile_idx` of `tiles` (a batch's,
    `tiles_m` along M), split `split` of `splits` of its `k_tiles` K tiles, batch `batch`; the
    splits form clusters of `cluster_size` (`splits`, or 1 where the reduction kernel adds them)."""
    tile_idx: cutlass.Int32
    tiles: cutlass.Int32
    tiles_m: cutlass.Int32
    k_tiles: cutlass.Int32
    split: cutlass.Int32
    splits: cutlass.Int32
    cluster_size: cutlass.Int32
    batch: cutlass.Int32


class Sm90Stages(NamedTuple):
    """The stages in shared memory: their pipeline (`PipelineTmaAsync`), the decoded A tiles, B's
    packed rows and scale atoms, and the epilogue's fp32 tile, which overlays them."""
    pipe: pipeline.PipelineTmaAsync
    sA: cute.Tensor
    sPackedB: cute.Tensor
    sSFB: cute.Tensor
    sTile: cute.Tensor


class Sm90BDecode(NamedTuple):
    """What an MMA thread reads to decode its B fragments: the stages' packed rows and scales,
    its first B row in each MMA block, its scales' row offset in their atom, its place in the quad."""
    sPackedB: cute.Tensor
    sSFB: cute.Tensor
    b_rows: list
    scale_row_offset: cutlass.Int32
    quad: cutlass.Int32


class HopperNvfp4Gemm:
    """C = (A * SFA) (B * SFB)^T on sm_90a with exact fp16 operands decoded on chip.

    Its rungs are tried in the caller's process alone (`TRIAL_IN_CHILD`): this kernel runs on the
    chips it is judged on, and a trial process would compile every configuration twice.

    `HopperOperandDecode` turns A and its scales into fp16 operands (small: M is 128 in every
    benchmark), either in decode CTAs at the front of this GEMM's grid (`decode_in_grid`: one
    grid a call) or in its own kernel launched before the GEMM (two; for some split configs a
    third kernel adds the splits: see below). All are programmatic dependent launches: the
    GEMM's CTAs start while the decode runs and wait for the decode CTAs' ready counter before
    their first load; the next call's grid launches as soon as every CTA of this one has started,
    runs on the SMs this call leaves idle, decodes into the next of the plan's
    `SM90_DECODED_A_BUFFERS` decoded-A buffers once the GEMM that read it last has released it,
    and its GEMM waits for the grid before it to complete (griddepcontrol.wait) only before it
    writes c or the split-K partials. So as many calls' GEMMs overlap as the SMs hold, and as the
    GPU runs grids of one queue at once (`SM90_GRIDS_IN_FLIGHT`: half as many calls with the
    decode kernel as with the decode in the GEMM's grid), which `per_call_us` models. The large
    operand B (N x K) is the MMA's M side and A its N side, so that N, not the small M, fills
    wgmma's 64-row instruction.

    Warp-specialized (`Sm90Tiling`): the TMA warpgroup's first warp brings, per K tile of 64,
    B's packed e2m1 rows, B's 512-byte scale atoms (read in place from `sfb_permuted`) and the
    decoded A tile (128B-swizzled fp16) into a multi-stage buffer, and the warpgroup hands most
    of its registers to the two MMA warpgroups (setmaxnreg). Each MMA warpgroup decodes its half
    of the tile's B rows (64 rows per MMA block) straight into wgmma's register operand and
    issues wgmma with fp32 accumulators, decoding the next K tile while the last one's MMAs run;
    the MMA warpgroups share nothing but the stages. A 64-wide tile gives both warpgroups its 64
    rows and alternate K tiles instead (`b_row_warpgroups`): twice the CTAs of 128-wide tiles,
    for shapes whose 128-wide tiles leave SMs idle. K is split over CTAs where the tile grid
    alone would still leave SMs idle. Where the device runs every tile's cluster at once, the
    splits of a tile form one cluster and add up their fp32 tiles through distributed shared
    memory (`_reduce_in_cluster`); elsewhere every split stores its partial and a third kernel,
    `HopperSplitKReduction`, adds them up. Both add in split order (deterministic) and need no
    counters to reset; an unsplit tile goes from the CTA's shared memory to c.

    K order inside a 64-wide K tile. Thread t of a quad (t = lane % 4) holds, per row and k16
    step i, the MMA positions 16i + 8h + 2t + e (h, e in {0, 1}). Position p holds logical K
    element 16t + 8h + SM90_PAIR_CODES[i][e]: the thread's 16 elements are then one scale block
    (8 contiguous packed bytes, one 64-bit load), and each fp16 pair is pair i of the packed
    word h as `_sm90_decode_pair` decodes it. A is decoded in the same order, so the sum over K
    is unchanged.
    """

    TRIAL_IN_CHILD = False

    ARCH = "sm_90a"
    TILE_M = Sm90Tiling.TILE_M
    TILE_K = Sm90Tiling.TILE_K
    # Units (`HopperOperandDecode`) per thread of a decode CTA in the GEMM's grid, whose GEMM CTAs
    # wait for it: few, so that many decode CTAs each finish soon.
    DECODE_UNITS_PER_THREAD = 2
    # A cluster of four CTAs, each filling an SM, fits in every GPC of an H100 or H200.
    MAX_SPLITS = 4
    # Pointer arguments: a, b, sfa_permuted, sfb_permuted (all as bytes), c, decoded A, split-K
    # partials, the decoded A's counters (`SM90_READY`...). Then M, N, K, L, the split count, the
    # cluster size (the split count, or 1 where a reduction kernel adds the splits) and the
    # columns of decode CTAs in the grid (`decode_columns`).
    POINTER_TYPES = (cutlass.Uint8, cutlass.Uint8, cutlass.Uint8, cutlass.Uint8, cutlass.Float16,
                     cutlass.Float16, cutlass.Float32, cutlass.Int32)

    def __init__(self, tile_n: int):
        self.tile_n = tile_n
        self.tiling = Sm90Tiling(tile_n)

    # ----- host side: choosing a configuration -----

    @classmethod
    def config_for(cls, problem: Problem, num_sms: int = SM90_NUM_SMS,
                   cluster_capacity: Callable[[int], int] | None = None) -> Sm90Config:
        """The config of least modelled time per call (`ranked_configs`)."""
        return cls.ranked_configs(problem, num_sms, cluster_capacity)[0]

    @classmethod
    def ranked_configs(cls, problem: Problem, num_sms: int = SM90_NUM_SMS,
                       cluster_capacity: Callable[[int], int] | None = None) -> list[Sm90Config]:
        """Every feasible tile width and split count, least modelled time per call (`per_call_us`)
        first, each split keeping >= 2 steps of the main loop. A split config runs in one wave,
        each CTA filling an SM: its tiles' clusters of `splits` CTAs where the device holds them
        all at once (`cluster_capacity(size)`, queried at call time; without a device, an H100's
        or H200's `SM90_CLUSTER_CAPACITY`, or SMs // size for another SM count), else plain CTAs
        and the reduction kernel, where tiles x splits fit on the SMs."""
        capacity = cluster_capacity or (SM90_CLUSTER_CAPACITY.__getitem__ if num_sms == SM90_NUM_SMS
                                        else lambda size: num_sms // size)
        k_tiles = problem.k // cls.TILE_K
        candidates = []
        for tile_n in Sm90Tiling.TILE_WIDTHS:
            if problem.n % tile_n:
                continue
            tiles = cls.output_tiles(problem, tile_n)
            steps = k_tiles // Sm90Tiling(tile_n).k_tiles_per_step
            for splits in range(1, max(1, min(cls.MAX_SPLITS, steps // 2)) + 1):
                if splits == 1 or tiles <= capacity(splits):
                    config = Sm90Config(tile_n, splits)
                elif tiles * splits <= num_sms:
                    config = Sm90Config(tile_n, splits, in_cluster=False)
                else:
                    continue
                slots = cls.slots(config, num_sms, capacity)
                in_grid = Sm90Config(tile_n, splits, config.in_cluster, decode_in_grid=True)
                for placement in (config, in_grid) if cls.decode_fits(problem, in_grid, slots) else (config,):
                    candidates.append((cls.per_call_us(placement, k_tiles, tiles, slots, num_sms), -tile_n, splits,
                                       placement.decode_in_grid, placement))
        return [candidate[-1] for candidate in sorted(candidates)]

    # Configs timed on a problem's first call (`TunedPlan`), the model's best first: the model
    # ranks the fastest config measured among its best three on every benchmark shape, but not
    # always first (docs/hopper.md, "Choosing a configuration").
    TUNING_CANDIDATES = 3

    # Calls queued back to back overlap: the next calls' GEMMs run their main loops on the SMs
    # (the cluster slots) this one leaves idle, and wait for it only to write c. Three calls'
    # GEMMs overlap where two calls' CTAs leave the next call's decode kernel at least
    # OVERLAP_DECODE_SMS SMs; else two, and that decode kernel, crowded onto the few SMs left,
    # holds the third back. Fitted on an H200 to every config timed on the benchmark shapes.
    OVERLAP_DECODE_SMS = 8
    # With A decoded in the GEMM's grid, one grid a call, as many calls overlap as the GPU runs
    # programmatic dependent grids of one queue at once, but each GEMM CTA waits for its own
    # call's decode CTAs, which start beside it: DECODE_IN_GRID_US more latency.
    GRIDS_IN_FLIGHT = SM90_GRIDS_IN_FLIGHT
    DECODE_IN_GRID_US = 3.0
    # What overlapping calls cannot share (launches, the decode, waits), by how many overlap.
    OVERLAP_CHAIN_US = {GRIDS_IN_FLIGHT: 1.4, 3: 1.4, 2: 4.2}
    OVERLAP_PACKING = 0.03  # the next GEMM's CTAs do not fill the idle SMs the moment they free up

    @classmethod
    def per_call_us(cls, config: Sm90Config, k_tiles: int, tiles: int, slots: int, num_sms: int) -> float:
        """Modelled time per call of calls queued back to back, as the benchmark queues them:
        the call's latency (`estimated_us` per wave of `tiles` over `slots`, the SMs or the
        clusters that the device runs at once) times the share of the slots it keeps busy, but no
        less than its latency shared by the calls that overlap, plus what they cannot share.
        Where the reduction kernel adds the splits, the next call's decode starts only after
        this GEMM is complete: no overlap."""
        waves = -(-tiles // slots)
        latency = waves * cls.estimated_us(config, k_tiles) + (cls.DECODE_IN_GRID_US if config.decode_in_grid else 0.0)
        if not config.in_cluster:
            return latency
        busy = tiles / (waves * slots)
        if config.decode_in_grid:
            overlapping = cls.GRIDS_IN_FLIGHT
        else:
            overlapping = 3 if num_sms - 2 * tiles * config.splits >= cls.OVERLAP_DECODE_SMS else 2
        return max(latency / overlapping + cls.OVERLAP_CHAIN_US[overlapping],
                   latency * (busy + cls.OVERLAP_PACKING))

    # One call's latency, fitted on an H100 to every tile x split config timed on the benchmark
    # shapes one call at a time: a line over the unsplit configs (fixed cost and cost per K tile
    # of 64 a CTA runs), and what splitting adds beyond its shorter main loop, as one
    # least-squares fit over the split configs: base + per split x splits, plus the reduction
    # kernel's extra where it adds the splits. 64-wide tiles split only on one benchmark shape:
    # their per-split cost is the 128-wide one's. A 64-wide tile's K tile costs more than half a
    # 128-wide one's: its warpgroup reads the whole A tile of a stage from shared memory for half
    # the MMAs.
    FIXED_US = {256: 4.5, 128: 3.4, 64: 2.7}
    K_TILE_US = {256: 0.58, 128: 0.33, 64: 0.21}
    SPLIT_K_BASE_US = {256: -0.4, 128: 1.8, 64: 2.2}
    SPLIT_K_PER_SPLIT_US = {256: 1.35, 128: 0.4, 64: 0.4}
    REDUCTION_KERNEL_EXTRA_US = {256: 4.3, 128: 2.9, 64: 3.3}

    @classmethod
    def estimated_us(cls, config: Sm90Config, k_tiles: int) -> float:
        per_step = Sm90Tiling(config.tile_n).k_tiles_per_step
        k_tiles = per_step * -(-(k_tiles // per_step) // config.splits)  # per CTA
        split_cost = 0.0
        if config.splits > 1:
            split_cost = cls.SPLIT_K_BASE_US[config.tile_n] + config.splits * cls.SPLIT_K_PER_SPLIT_US[config.tile_n]
            if not config.in_cluster:
                split_cost += cls.REDUCTION_KERNEL_EXTRA_US[config.tile_n]
        return cls.FIXED_US[config.tile_n] + k_tiles * cls.K_TILE_US[config.tile_n] + split_cost

    @staticmethod
    def slots(config: Sm90Config, num_sms: int, cluster_capacity: Callable[[int], int]) -> int:
        """What the device runs of a config's units at once: its clusters where its splits form
        one, else its CTAs (one an SM)."""
        return cluster_capacity(config.splits) if config.in_cluster and config.splits > 1 else num_sms

    @classmethod
    def output_tiles(cls, problem: Problem, tile_n: int) -> int:
        """Output tiles of every batch: (tile_n B rows, TILE_M A rows) each."""
        return (problem.m // cls.TILE_M) * (problem.n // tile_n) * problem.l

    @classmethod
    def decode_fits(cls, problem: Problem, config: Sm90Config, slots: int) -> bool:
        """Whether the device, which runs `slots` of the config's clusters (or CTAs) at once,
        holds its whole grid with A decoded in it: its GEMM CTAs wait for its decode CTAs, which
        only a grid that fits is sure to run beside them."""
        clusters = cls.output_tiles(problem, config.tile_n) + cls.decode_columns(problem, config) * problem.l
        return clusters * (1 if config.in_cluster else config.splits) <= slots

    @classmethod
    def in_grid_decode(cls) -> HopperOperandDecode:
        """The decode CTAs at the front of the GEMM's grid: the GEMM's block size."""
        return HopperOperandDecode(Sm90Tiling.THREADS, cls.DECODE_UNITS_PER_THREAD)

    @classmethod
    def decode_columns(cls, problem: Problem, config: Sm90Config) -> int:
        """Columns of decode CTAs (`splits` CTAs each, as the GEMM's) at the front of the GEMM's
        grid per batch, enough to decode A; 0 where the decode kernel's own grid does it."""
        if not config.decode_in_grid:
            return 0
        decoders = cls.in_grid_decode().ctas_per_batch(problem.m, problem.k)
        return -(-decoders // config.splits)

    # ----- host side: compilation and the per-call path -----

    @classmethod
    def compile(cls, tile_n: int, arch: str | None = None, extra_options: str = "", tvm_ffi: bool = HAVE_TVM_FFI):
        """Compile for any problem size (sizes and split count are runtime arguments); returns
        the compiled function and the kernel object that traced it."""
        kernel = cls(tile_n)
        pointers = [fake_pointer(t) for t in cls.POINTER_TYPES]
        compiled = cute.compile(kernel, *pointers, *[cutlass.Int32(1)] * 7,
                                options=compile_options(arch, tvm_ffi=tvm_ffi, extra=extra_options))
        return compiled, kernel

    @classmethod
    def compile_for_check(cls, problem: Problem, arch: str, extra_options: str) -> CompileFacts:
        config = cls.config_for(problem)
        _, kernel = cls.compile(config.tile_n, arch, extra_options, tvm_ffi=False)
        return CompileFacts(config.describe(), kernel.launch_smem_bytes, None)

    @classmethod
    def launch_plan(cls, problem: Problem, device: torch.device,
                    config: Sm90Config | None = None, conservative: bool = False) -> LaunchPlan | TunedPlan:
        """The plan for `problem` on `device`: for `config` where one is given (tests and
        measurements pin one); `conservative`, for the best-ranked config with neither split-K
        nor A decoded in the GEMM's grid (the self-check's fallback where the chosen plan's
        result is wrong: no split reduction, no decoding CTAs beside the GEMM's); else for the
        fastest of the `TUNING_CANDIDATES` configs that `ranked_configs` puts first, timed on the
        first call (`TunedPlan`)."""
        # The cluster occupancy query (driver API) needs the device's context current in this
        # thread; a synchronization makes it so.
        torch.cuda.synchronize(device)
        index = torch.cuda.current_device() if device.index is None else device.index
        num_sms = torch.cuda.get_device_properties(index).multi_processor_count
        capacity = functools.partial(_sm90_cluster_capacity, index)
        if config is not None:
            if config.decode_in_grid and not cls.decode_fits(problem, config, cls.slots(config, num_sms, capacity)):
                raise ValueError(f"{config.describe()}: the device cannot hold the whole grid for {problem}")
            return cls._plan_for(problem, device, config)
        ranked = cls.ranked_configs(problem, num_sms, capacity)
        if conservative:
            plain = next(config for config in ranked if config.splits == 1 and not config.decode_in_grid)
            return cls._plan_for(problem, device, plain)
        candidates = [(candidate, cls._plan_for(problem, device, candidate))
                      for candidate in ranked[:cls.TUNING_CANDIDATES]]
        return TunedPlan(candidates, device) if len(candidates) > 1 else candidates[0][1]

    @classmethod
    def _plan_for(cls, problem: Problem, device: torch.device, config: Sm90Config) -> LaunchPlan:
        decoded_a = torch.empty(SM90_DECODED_A_BUFFERS, problem.m * problem.k * problem.l, dtype=torch.float16,
                                device=device)
        # Per buffer, the words SM90_READY... : all zero; the GEMM puts the first two back to zero
        # after every call.
        counters = torch.zeros(SM90_DECODED_A_BUFFERS, SM90_COUNTER_WORDS, dtype=torch.int32, device=device)
        compiled = compiled_kernel((cls.__name__, config.tile_n, HAVE_TVM_FFI), lambda: cls.compile(config.tile_n)[0])
        partials = split_k_partials(problem, config.splits, device)
        scalars = int32_args(problem.m, problem.n, problem.k, problem.l, config.splits,
                             config.splits if config.in_cluster else 1, cls.decode_columns(problem, config))
        trailing_args = tuple((pointer_arg(cutlass.Float16, buffer.data_ptr()),
                               pointer_arg(cutlass.Float32, partials.data_ptr()),
                               pointer_arg(cutlass.Int32, buffer_counters.data_ptr())) + scalars
                              for buffer, buffer_counters in zip(decoded_a, counters))
        return CyclingLaunchPlan(compiled, cls.POINTER_TYPES[:5], trailing_args, (decoded_a, partials, counters), config)

    # ----- host side of the launch: tensors, TMA atoms, shared storage -----

    def _setup_shared_storage(self):
        """The CTA's dynamic shared memory: the stage barriers, then the stages' bytes, A first
        (1024-byte aligned for its swizzle), then packed B, then B's scales; the epilogue's tile
        overlays them."""
        tiling = self.tiling
        self.packed_b_offset = cute.cosize(tiling.a_smem_layout()) * cutlass.Float16.width // 8
        self.sfb_offset = self.packed_b_offset + cute.cosize(tiling.packed_b_smem_layout())
        stages_bytes = max(self.sfb_offset + cute.cosize(tiling.sfb_smem_layout()),
                           cute.cosize(tiling.epilogue_layout()) * 4)
        # Field types built as values: this file postpones annotations, and cute.struct would
        # receive them as strings.
        fields = {
            "stage_barriers": cute.struct.MemRange[cutlass.Int64, tiling.stages * 2],
            "stages": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, stages_bytes], 1024],
        }
        self.shared_storage = cute.struct(type("Sm90SharedStorage", (), {"__annotations__": fields}))
        self.launch_smem_bytes = self.shared_storage.size_in_bytes()
        assert self.launch_smem_bytes + SM90_STATIC_SMEM_BYTES <= SM90_SMEM_BYTES, (self.tile_n, self.launch_smem_bytes)

    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, sfa_ptr: cute.Pointer,
                 sfb_ptr: cute.Pointer, c_ptr: cute.Pointer, decoded_a_ptr: cute.Pointer,
                 partial_ptr: cute.Pointer, counters_ptr: cute.Pointer, m: cutlass.Int32, n: cutlass.Int32,
                 k: cutlass.Int32, l: cutlass.Int32, splits: cutlass.Int32, cluster_size: cutlass.Int32,
                 decode_columns: cutlass.Int32):
        tiling = self.tiling
        self._setup_shared_storage()
        k = cute.assume(k, divby=K_ALIGN)
        n = cute.assume(n, divby=MN_ALIGN)  # c's rows start 16-byte aligned: 128-bit stores
        half_k = k // 2

        # A's packed bytes as 32-bit words and its scales as one word per (row, K tile): the 4
        # scales of a row's K tile of 64 are contiguous in the permuted layout.
        words_per_row = k // 8
        mAWords = cute.make_tensor(cute.recast_ptr(a_ptr, dtype=cutlass.Uint32), cute.make_layout(
            (m, words_per_row, l), stride=(words_per_row, 1, m * words_per_row)))
        atom_words = SF_ATOM_BYTES // 4
        rest_k = k // self.TILE_K
        rest_m = m // 128
        mSFAWords = cute.make_tensor(cute.recast_ptr(sfa_ptr, dtype=cutlass.Uint32), cute.make_layout(
            ((32, 4, rest_m), rest_k, l),
            stride=((4, 1, rest_k * atom_words), atom_words, rest_m * rest_k * atom_words)))
        mDecodedA = cute.make_tensor(decoded_a_ptr, cute.make_layout((m, k, l), stride=(k, 1, m * k)))
        # The decode CTAs: `decode_columns` columns of clusters at the front of this grid, or,
        # where there are none, the decode kernel's grid queued before it.
        decode_ctas = decode_columns * splits * l
        if decode_columns == 0:
            decode = HopperOperandDecode()
            decode_ctas = decode.ctas_per_batch(m, k) * l
            decode.launch(mAWords, mSFAWords, mDecodedA, counters_ptr, m, k, l)

        # Packed B as bytes: (rows, K/2, L), K-major, batch outermost.
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, half_k, l), stride=(half_k, 1, n * half_k)))
        # c seen as (N, M, L): the MMA's M runs along N, c's contiguous dimension.
        mC = cute.make_tensor(c_ptr, cute.make_layout((n, m, l), stride=(1, n, m * n)))

        tiles = (m // self.TILE_M) * (n // self.tile_n)
        # fp32 partials: per (output tile, split) slot (`split_k_slot`) a tile with B rows contiguous.
        mPartials = cute.make_tensor(partial_ptr, cute.make_layout(
            (self.tile_n, self.TILE_M, tiles * l * splits), stride=(1, self.tile_n, self.tile_n * self.TILE_M)))

        tma_a, tma_mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mDecodedA, cute.slice_(tiling.a_smem_layout(), (None, None, 0)),
            (self.TILE_M, self.TILE_K))
        tma_b, tma_mB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mB, cute.slice_(tiling.packed_b_smem_layout(), (None, None, 0)),
            (self.tile_n, tiling.PACKED_BYTES_PER_ROW))
        tma_sfb, tma_mSFB = self._scale_atom_tma(sfb_ptr, n, k, l)

        self.kernel(
            mAWords, mSFAWords, mDecodedA, decode_columns,
            tma_a, tma_mA, tma_b, tma_mB, tma_sfb, tma_mSFB, mC, mPartials, counters_ptr, decode_ctas,
            tiling.tiled_mma(), m // self.TILE_M, k // self.TILE_K, splits, cluster_size,
        ).launch(grid=(decode_columns + tiles, splits, l), block=(tiling.THREADS, 1, 1), cluster=(1, cluster_size, 1),
                 use_pdl=True)
        if splits > cluster_size:
            HopperSplitKReduction(self.tile_n).launch(mC, mPartials, m // self.TILE_M, splits, tiles, l)

    @cute.jit
    def _scale_atom_tma(self, sf_ptr: cute.Pointer, rows: cutlass.Int32, k: cutlass.Int32, l: cutlass.Int32):
        """TMA over whole scale atoms. The scales of 128 rows x 64 K are one 512-byte atom of
        the permuted layout, contiguous in memory: TMA copies atoms as bytes (one box), and the
        kernel indexes them in shared memory through the blockscaled layout (`sfb_smem_layout`)."""
        rest_k = k // (SF_VEC_SIZE * 4)
        rest_rows = rows // 128
        atoms = cute.make_tensor(sf_ptr, cute.make_layout(
            (SF_ATOM_BYTES, rest_k, rest_rows, l),
            stride=(1, SF_ATOM_BYTES, rest_k * SF_ATOM_BYTES, rest_rows * rest_k * SF_ATOM_BYTES)))
        return cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), atoms,
                                           cute.make_layout(SF_ATOM_BYTES), (SF_ATOM_BYTES,),
                                           internal_type=cutlass.Int32)

    # ----- device side: the kernel, in data-flow order -----

    @cute.kernel
    def kernel(self,
               # the decode CTAs' operands: A's words and scales, the decoded A they write
               mAWords: cute.Tensor, mSFAWords: cute.Tensor, mDecodedA: cute.Tensor, decode_columns: cutlass.Int32,
               # the GEMM's loads (`Sm90TmaLoads`) and outputs
               tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom, mB: cute.Tensor,
               tma_sfb: cute.CopyAtom, mSFB: cute.Tensor, mC: cute.Tensor, mPartials: cute.Tensor,
               # the decoded A's handover (`Sm90DecodedA`)
               counters_ptr: cute.Pointer, decode_ctas: cutlass.Int32,
               # the MMA, and the grid's extents (`Sm90GemmCta`)
               tiled_mma: cute.TiledMma, tiles_m: cutlass.Int32, k_tiles: cutlass.Int32, splits: cutlass.Int32,
               cluster_size: cutlass.Int32):
        """The grid: per batch, `decode_columns` columns of decode CTAs (A's words and scales ->
        the decoded A), then one column of `splits` GEMM CTAs per output tile (the decoded A and
        B's TMA atoms -> c, or the split-K partials)."""
        column, split, batch = cute.arch.block_idx()
        grid_x, _, _ = cute.arch.grid_dim()
        tiles = grid_x - decode_columns  # output tiles of a batch
        if column < decode_columns:
            self.in_grid_decode().decode(
                mAWords, mSFAWords, mDecodedA, counters_ptr, column * splits + split, batch, decode_ctas,
                tiles_m * self.TILE_M, k_tiles)
        else:
            cta = Sm90GemmCta(column - decode_columns, tiles, tiles_m, k_tiles, split, splits, cluster_size, batch)
            loads = Sm90TmaLoads(tma_a, mA, tma_b, mB, tma_sfb, mSFB)
            self._gemm(cta, loads, mC, mPartials, Sm90DecodedA(counters_ptr, decode_ctas), tiled_mma)

    @cute.jit
    def _gemm(self, cta: Sm90GemmCta, loads: Sm90TmaLoads, mC: cute.Tensor, mPartials: cute.Tensor,
              decoded_a: Sm90DecodedA, tiled_mma: cute.TiledMma):
        """One GEMM CTA. Warp roles: warpgroups 0 and 1 are the MMA warpgroups (the consumers of
        the stages, then the epilogue); in warpgroup 2, warp 0 is the TMA warp (the producer) and
        the other warps only join the cluster barriers."""
        tiling = self.tiling
        tidx, _, _ = cute.arch.thread_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tile = cta.tile_idx % cta.tiles_m
        n_tile = cta.tile_idx // cta.tiles_m
        # Splits cover whole steps of the main loop (`k_tiles_per_step`).
        step_start, step_stop = split_k_range(cta.split, cta.k_tiles // tiling.k_tiles_per_step, cta.splits)
        k_start = tiling.k_tiles_per_step * step_start
        k_count = tiling.k_tiles_per_step * (step_stop - step_start)

        is_tma_warp = warp_idx == tiling.MMA_WARPS
        if is_tma_warp:
            # The next grid may launch at once: the next call's (its decode writes its buffer only
            # on its turn), or this call's reduction kernel, which waits for all of this grid.
            cute.arch.griddepcontrol_launch_dependents()
            for atom in (loads.tma_a, loads.tma_b, loads.tma_sfb):
                cpasync.prefetch_descriptor(atom)

        stages = self._make_stages()
        copies = self._partition_loads(loads, stages, m_tile, n_tile, cta.batch)

        if warp_idx >= tiling.MMA_WARPS:
            self._tma_warpgroup(is_tma_warp, stages.pipe, copies, k_start, k_count, decoded_a, cta)
        else:
            cute.arch.setmaxregister_increase(tiling.mma_registers)
            self._mma_warpgroups(tiled_mma, stages, mC, mPartials, tidx, m_tile, n_tile, k_count, cta)

    @cute.jit
    def _make_stages(self) -> Sm90Stages:
        """The stages in this CTA's shared memory and their pipeline: a stage is full when TMA
        has brought `stage_bytes`, empty when every MMA warp that multiplies it has arrived."""
        tiling = self.tiling
        storage = utils.SmemAllocator().allocate(self.shared_storage)
        stage_pipe = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.stage_barriers.data_ptr(),
            num_stages=tiling.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # One arrival per warp of the warpgroup(s) that multiply a stage.
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread,
                                                     tiling.MMA_WARPS // tiling.b_row_warpgroups),
            tx_count=tiling.stage_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )
        stage_bytes = storage.stages.data_ptr()
        a_layout = tiling.a_smem_layout()
        sA = cute.make_tensor(cute.recast_ptr(stage_bytes, a_layout.inner, dtype=cutlass.Float16), a_layout.outer)
        sPackedB = cute.make_tensor(stage_bytes + self.packed_b_offset, tiling.packed_b_smem_layout())
        sSFB = cute.make_tensor(stage_bytes + self.sfb_offset, tiling.sfb_smem_layout())
        sTile = cute.make_tensor(cute.recast_ptr(stage_bytes, dtype=cutlass.Float32), tiling.epilogue_layout())
        return Sm90Stages(stage_pipe, sA, sPackedB, sSFB, sTile)

    @cute.jit
    def _partition_loads(self, loads: Sm90TmaLoads, stages: Sm90Stages, m_tile, n_tile, batch) -> Sm90TmaCopies:
        """This CTA's TMA copies: its K tiles of the decoded A and of B, one K tile per stage."""
        tma_a, mA, tma_b, mB, tma_sfb, mSFB = loads
        _, sA, sPackedB, sSFB, _ = stages
        gA = cute.local_tile(mA, (self.TILE_M, self.TILE_K), (m_tile, None, batch))
        gB = cute.local_tile(mB, (self.tile_n, Sm90Tiling.PACKED_BYTES_PER_ROW), (n_tile, None, batch))
        one_cta = cute.make_layout(1)
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, one_cta, cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, one_cta, cute.group_modes(sPackedB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        scale_copies = []
        tiling = self.tiling
        sf_stage_bytes = cute.cosize(cute.filter_zeros(cute.slice_(tiling.sfb_smem_layout(), (None, None, 0))))
        for atom in cutlass.range_constexpr(tiling.scale_rows // 128):
            s_atoms = cute.make_tensor(sSFB.iterator + atom * SF_ATOM_BYTES,
                                       cute.make_layout((SF_ATOM_BYTES, tiling.stages), stride=(1, sf_stage_bytes)))
            g_atoms = mSFB[(None, None, n_tile * self.tile_n // 128 + atom, batch)]
            scale_copies.append(cpasync.tma_partition(tma_sfb, 0, one_cta, s_atoms, g_atoms))
        return Sm90TmaCopies(tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, tma_sfb, scale_copies)

    # ----- the TMA warpgroup: loads -----

    @cute.jit
    def _tma_warpgroup(self, is_tma_warp, stage_pipe, copies: Sm90TmaCopies, k_start, k_count,
                       decoded_a: Sm90DecodedA, cta: Sm90GemmCta):
        """The TMA warp loads every K tile of this split; the warpgroup's other warps only join
        the cluster barriers of `_reduce_in_cluster`, which count every thread."""
        cute.arch.setmaxregister_decrease(Sm90Tiling.TMA_REGISTERS)
        if is_tma_warp:
            producer = self._load_k_tiles(stage_pipe, copies, k_start, k_count, decoded_a)
            self._join_split_cluster_barrier(cta.splits, cta.cluster_size, relaxed=False)
            # While the MMA warps add up the splits or store c.
            self._release_decoded_a(stage_pipe, producer, decoded_a, cta.tiles * cta.splits * cute.arch.grid_dim()[2])
        else:
            self._join_split_cluster_barrier(cta.splits, cta.cluster_size, relaxed=False)
        self._join_split_cluster_barrier(cta.splits, cta.cluster_size, relaxed=True)

    @cute.jit
    def _load_k_tiles(self, stage_pipe, copies: Sm90TmaCopies, k_start, k_count, decoded_a: Sm90DecodedA):
        """B's first `B_TILES_AHEAD` K tiles, then the wait for every decode CTA's count, then
        their A tiles, then whole K tiles; the producer state after the last. One loop: B ahead
        in a loop of its own changed how ptxas scheduled the MMA warps' main loop."""
        b_ahead = cutlass.min(Sm90Tiling.B_TILES_AHEAD, k_count)
        producer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.tiling.stages)
        for _ in cutlass.range(k_count, unroll=1):
            stage_pipe.producer_acquire(producer)
            self._load_b(stage_pipe, producer, k_start, copies)
            if producer.count >= b_ahead:
                self._load_a(stage_pipe, producer, k_start, copies)
            elif producer.count == b_ahead - 1:
                self._load_a_ahead(stage_pipe, b_ahead, k_start, copies, decoded_a)
            producer.advance()
        return producer

    @cute.jit
    def _load_a_ahead(self, stage_pipe, b_ahead, k_start, copies: Sm90TmaCopies, decoded_a: Sm90DecodedA):
        """Once the decoded A is ready, its tiles of the first `b_ahead` stages, whose B is loaded."""
        self._wait_for_decoded_a(decoded_a)
        ahead = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.tiling.stages)
        for _ in cutlass.range(b_ahead, unroll=1):
            self._load_a(stage_pipe, ahead, k_start, copies)
            ahead.advance()

    @cute.jit
    def _load_b(self, stage_pipe, producer, k_start, copies: Sm90TmaCopies):
        """B's packed rows and scale atoms of K tile `producer.count` into its (acquired) stage, on
        the stage's barrier, which expects them and the decoded A tile (`stage_bytes`)."""
        barrier = stage_pipe.producer_get_barrier(producer)
        k_tile = k_start + producer.count
        cute.copy(copies.tma_b, copies.tBgB[(None, k_tile)], copies.tBsB[(None, producer.index)], tma_bar_ptr=barrier)
        for s_atoms, g_atoms in copies.scale_copies:
            cute.copy(copies.tma_sfb, g_atoms[(None, k_tile)], s_atoms[(None, producer.index)], tma_bar_ptr=barrier)

    @cute.jit
    def _load_a(self, stage_pipe, producer, k_start, copies: Sm90TmaCopies):
        """The decoded A tile of K tile `producer.count` into its stage, on the stage's barrier."""
        cute.copy(copies.tma_a, copies.tAgA[(None, k_start + producer.count)], copies.tAsA[(None, producer.index)],
                  tma_bar_ptr=stage_pipe.producer_get_barrier(producer))

    @cute.jit
    def _wait_for_decoded_a(self, decoded_a: Sm90DecodedA):
        """The TMA warp: until every decode CTA has counted itself done (acquire), then the TMA
        reads may see the decoded A. Every decode CTA is running or done before this grid
        launches (each lets its dependents launch once it has its turn), so the count always
        arrives. All lanes poll, so that no warp synchronization follows a single lane's loop."""
        ready_address = decoded_a.counters_ptr.toint() + 4 * SM90_READY
        ready = _sm90_load_acquire(ready_address)
        while ready != decoded_a.decode_ctas:
            ready = _sm90_load_acquire(ready_address)
        cute.arch.sync_warp()
        _sm90_fence_proxy_async()

    @cute.jit
    def _release_decoded_a(self, stage_pipe, producer, decoded_a: Sm90DecodedA, gemm_ctas):
        """The TMA warp, after its last load: once the MMA warps have released every stage (so
        every TMA read of the decoded A is done), count this CTA done reading. The last of the
        `gemm_ctas` zeroes the counts and releases the decode CTAs' turns, which lets the next
        call that takes the buffer decode into it. Every CTA with K tiles has waited for the ready
        count before its first load of A (a split of a pinned config may have none, and no wait,
        but the last split of each tile always has some), so the last to count comes after every
        decode CTA's count. Not counted before the loads: the count's round trip would delay the
        first one."""
        stage_pipe.producer_tail(producer)
        _sm90_fence_proxy_async()
        if cute.arch.lane_idx() == 0:
            counters = decoded_a.counters_ptr.toint()
            if _sm90_fetch_add(counters + 4 * SM90_DONE, "acq_rel") == gemm_ctas - 1:
                for word in (SM90_READY, SM90_DONE):
                    _sm90_store_zero(counters + 4 * word)
                _sm90_count_up(counters + 4 * SM90_RELEASED, decoded_a.decode_ctas)

    @cute.jit
    def _join_split_cluster_barrier(self, splits, cluster_size, relaxed: cutlass.Constexpr):
        """The TMA warpgroup's share of a cluster barrier of `_reduce_in_cluster`, which counts
        every thread of the cluster."""
        if splits > 1:
            if cluster_size == splits:
                if cutlass.const_expr(relaxed):
                    cute.arch.cluster_arrive_relaxed()
                else:
                    cute.arch.cluster_arrive()
                cute.arch.cluster_wait()

    # ----- the MMA warpgroups: B decoded into registers, MMA, epilogue -----

    @cute.jit
    def _mma_warpgroups(self, tiled_mma, stages: Sm90Stages, mC, mPartials, tidx, m_tile, n_tile, k_count,
                        cta: Sm90GemmCta):
        """B decoded into registers (per thread), A from shared memory, fp32 accumulators; then
        c, or this split's share of the split-K reduction."""
        tiling = self.tiling
        stage_pipe, sA, sPackedB, sSFB, sTile = stages
        warpgroup_threads = tiling.MMA_THREADS // tiling.b_row_warpgroups  # threads per B row
        thr_mma = tiled_mma.get_slice(tidx % warpgroup_threads)
        # Where the warpgroups share B rows, warpgroup w multiplies K tiles w, w + 2, ... and
        # skips the other's stages.
        k_phase = tidx // warpgroup_threads
        tCrA = tiled_mma.make_fragment_B(thr_mma.partition_B(sA))
        # This thread's first B row of each MMA block in the (tile_n, TILE_K) tile, and its
        # place in the quad.
        tCcB = thr_mma.partition_A(cute.make_identity_tensor((self.tile_n, self.TILE_K)))
        b_rows = [tCcB[(0, block, 0)][0] for block in range(tiling.mma_blocks)]
        quad = tCcB[0][1] // 2
        # A 64-wide tile's scales are rows 0-63 or 64-127 of a 128-row atom.
        scale_row_offset = n_tile * self.tile_n % 128 if self.tile_n < 128 else 0
        b_decode = Sm90BDecode(sPackedB, sSFB, b_rows, scale_row_offset, quad)
        fragments = [cute.make_rmem_tensor(tiled_mma.partition_shape_A((self.tile_n, self.TILE_K)), cutlass.Float16)
                     for _ in range(2)]
        gC = cute.local_tile(mC, (self.tile_n, self.TILE_M), (n_tile, m_tile, cta.batch))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gC).shape, cutlass.Float32)
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)

        # Two register fragments, decoded in turn, and one MMA group in flight: the group that
        # wait_group(1) retires read the other fragment (decoded next) and the previous stage
        # (released to TMA).
        consumer = pipeline.PipelineState(tiling.stages, k_phase, k_phase, cutlass.Int32(0))
        retired = consumer.clone()
        for step in cutlass.range(k_count // tiling.k_tiles_per_step, unroll=1):
            for f in cutlass.range_constexpr(2):
                self._mma_k_tile(stage_pipe, consumer, tiled_mma, acc, tCrA, b_decode, fragments[f])
                consumer = self._next_own_stage(consumer)
                warpgroup.wait_group(1)
                if f == 1 or step > 0:
                    stage_pipe.consumer_release(retired)
                    retired = self._next_own_stage(retired)
        warpgroup.wait_group(0)
        stage_pipe.consumer_release(retired)  # the last stage: the TMA warp waits for every stage
        for i in cutlass.range_constexpr(cute.size(acc)):
            acc[i] = _sm90_pin_f32(acc[i])

        self._epilogue(acc, thr_mma, sTile, k_phase, gC, mPartials, tidx, cta)

    @cute.jit
    def _mma_k_tile(self, stage_pipe, consumer, tiled_mma, acc, tCrA, b_decode: Sm90BDecode, fragment):
        """One K tile: once its stage has landed, B's rows decoded into `fragment`, then its
        wgmmas issued as one group."""
        # A peek first: the blocking wait's retry loop then sits on a cold path, and ptxas keeps
        # it out of the loop body.
        stage_pipe.consumer_wait(consumer, stage_pipe.consumer_try_wait(consumer))
        self._decode_b_fragment(b_decode, consumer.index, fragment)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, acc, fragment[(None, None, kb)], tCrA[(None, None, kb, consumer.index)], acc)
        warpgroup.commit_group()

    @cute.jit
    def _next_own_stage(self, state):
        """`state` advanced to the warpgroup's next stage: where the warpgroups share B rows, past
        the other's. Rebind the result: the tracer carries a loop's state only through names the
        loop body assigns."""
        for _ in cutlass.range_constexpr(self.tiling.b_row_warpgroups):
            state.advance()
        return state

    @cute.jit
    def _decode_b_fragment(self, b_decode: Sm90BDecode, stage, fragment):
        """Rows b_row and b_row + 8 of each MMA block: 8 packed bytes and one scale each ->
        wgmma's A fragment."""
        packed_words = cute.recast_tensor(b_decode.sPackedB[(None, None, stage)], cutlass.Uint32)
        frag = cute.recast_tensor(fragment, cutlass.Uint32)  # ((1, row + 8, h), MMA block, k16 step i)
        for block, b_row in enumerate(b_decode.b_rows):
            words = [cute.make_rmem_tensor((1, 2), cutlass.Uint32) for _ in range(2)]
            for r8 in cutlass.range_constexpr(2):
                cute.autovec_copy(cute.local_tile(packed_words, (1, 2), (b_row + 8 * r8, b_decode.quad)), words[r8])
            for r8 in cutlass.range_constexpr(2):
                scale_code = b_decode.sSFB[(b_decode.scale_row_offset + b_row + 8 * r8, 16 * b_decode.quad, stage)]
                scale2 = _sm90_scale_f16x2(cutlass.Uint32(scale_code))
                for h in cutlass.range_constexpr(2):
                    for i in cutlass.range_constexpr(4):
                        frag[((0, r8, h), block, i)] = _sm90_decode_pair(words[r8][(0, h)], i, scale2)

    @cute.jit
    def _epilogue(self, acc, thr_mma, sTile, k_phase, gC, mPartials, tidx, cta: Sm90GemmCta):
        """The accumulators -> c: straight from shared memory where K is not split, else added
        up over the splits in their cluster, or stored as this split's partial."""
        # The previous call's GEMM (and reduction kernel) are done with the partials, and c
        # (which may be the same tensor), once the grid before this one has completed: that
        # GEMM or reduction kernel, or this call's decode kernel, which completes after them.
        cute.arch.griddepcontrol_wait()
        self._tile_to_shared(acc, thr_mma, sTile, k_phase)
        if cta.splits == 1:
            self._sync_mma_warps()
            sm90_add_splits([sTile], 1, gC, 0, self.TILE_M, tidx, Sm90Tiling.MMA_THREADS)
        elif cta.cluster_size == cta.splits:
            self._reduce_in_cluster(sTile, gC, tidx, cta.split, cta.splits)
        else:  # HopperSplitKReduction adds the splits up
            self._store_partial(sTile, mPartials, tidx, cta)

    @cute.jit
    def _sync_mma_warps(self):
        """A barrier over the MMA warpgroups only (the TMA warpgroup may have left)."""
        cute.arch.barrier(barrier_id=1, number_of_threads=Sm90Tiling.MMA_THREADS)

    @cute.jit
    def _tile_to_shared(self, acc, thr_mma, sTile, k_phase):
        """The accumulators, as this CTA's fp32 tile, into shared memory over the stages."""
        # Every TMA load has landed (each MMA warp waited for its stages), but the other MMA
        # warpgroup may still be reading its last stage, which the tile overlays.
        self._sync_mma_warps()
        tCsTile = thr_mma.partition_C(sTile)
        if cutlass.const_expr(self.tiling.b_row_warpgroups == 1):
            for i in cutlass.range_constexpr(cute.size(acc)):
                tCsTile[i] = acc[i]
        else:
            # Both warpgroups hold the whole tile, over alternate K tiles: the second puts its
            # sums in place, the first adds its own to them.
            if k_phase == 1:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    tCsTile[i] = acc[i]
            self._sync_mma_warps()
            if k_phase == 0:
                for i in cutlass.range_constexpr(cute.size(acc)):
                    tCsTile[i] = acc[i] + tCsTile[i]

    @cute.jit
    def _store_partial(self, sTile, mPartials, tidx, cta: Sm90GemmCta):
        """This split's fp32 tile from shared memory to its partials slot, for
        `HopperSplitKReduction`, in runs of `SM90_RUN` columns."""
        self._sync_mma_warps()
        sRuns = cute.flat_divide(sTile, (SM90_RUN,))
        slot = split_k_slot(cta.tile_idx, cta.batch, cta.tiles, cta.splits, cta.split)
        gRuns = cute.flat_divide(mPartials[(None, None, slot)], (SM90_RUN,))
        runs_per_row = self.tile_n // SM90_RUN
        for run in cutlass.range(tidx, self.TILE_M * runs_per_row, Sm90Tiling.MMA_THREADS, unroll=4):
            coord = (None, run % runs_per_row, run // runs_per_row)
            gRuns[coord].store(sRuns[coord].load())

    @cute.jit
    def _reduce_in_cluster(self, sTile, gC, tidx, split, splits):
        """c from the fp32 tiles of the tile's splits, which run as one cluster (CTA rank =
        split), each in its CTA's shared memory: after a cluster barrier each CTA adds up a slab
        of c's rows over the splits' tiles, read through distributed shared memory
        (`sm90_add_splits`)."""
        # Release this CTA's tile to the cluster, acquire the others'.
        cute.arch.cluster_arrive()
        cute.arch.cluster_wait()
        row_start, row_stop = split_k_range(split, self.TILE_M, splits)
        # Ranks past the last split repeat it (`sm90_add_splits` skips them).
        split_tiles = [cute.make_tensor(cute.arch.map_dsmem_ptr(sTile.iterator, cutlass.min(s, splits - 1)), sTile.layout)
                       for s in range(self.MAX_SPLITS)]
        sm90_add_splits(split_tiles, splits, gC, row_start, row_stop, tidx, Sm90Tiling.MMA_THREADS)
        # A CTA's shared memory lives as long as the CTA: stay until every split has read this one.
        # Relaxed: every load from the other tiles has returned (its sum is stored), and a release
        # would also wait for this CTA's stores to c to complete.
        cute.arch.cluster_arrive_relaxed()
        cute.arch.cluster_wait()


@cute.jit
def sm90_add_splits(split_tiles: list, splits, gC: cute.Tensor, row_start, row_stop, tidx, threads: cutlass.Constexpr):
    """Rows [row_start, row_stop) of an output tile of c (B rows contiguous) from the fp32 tiles
    of its splits (`split_tiles[s]`, the same layout; those from `splits` on are skipped): per run
    of `SM90_RUN` columns, the splits' values added in split order (deterministic), then one fp16
    store."""
    runs_per_row = cute.size(gC, mode=[0]) // SM90_RUN
    split_runs = [cute.flat_divide(tile, (SM90_RUN,)) for tile in split_tiles]
    gRuns = cute.flat_divide(gC, (SM90_RUN,))
    stop = row_stop * runs_per_row
    # SM90_RUNS_IN_FLIGHT runs per thread are loaded before any is stored: the compiler cannot
    # move a load above a store to c (they might alias), so one run at a time would wait for
    # every load's round trip in turn.
    parts = [[cute.make_rmem_tensor((SM90_RUN,), cutlass.Float32) for _ in split_tiles] for _ in range(SM90_RUNS_IN_FLIGHT)]
    for first in cutlass.range(row_start * runs_per_row + tidx, stop, threads * SM90_RUNS_IN_FLIGHT, unroll=1):
        runs = [first + r * threads for r in range(SM90_RUNS_IN_FLIGHT)]
        coords = [(None, run % runs_per_row, run // runs_per_row) for run in runs]
        for r in cutlass.range_constexpr(SM90_RUNS_IN_FLIGHT):
            if runs[r] < stop:
                for s in cutlass.range_constexpr(len(split_tiles)):
                    if s < splits:
                        cute.autovec_copy(split_runs[s][coords[r]], parts[r][s])
        for r in cutlass.range_constexpr(SM90_RUNS_IN_FLIGHT):
            if runs[r] < stop:
                total = parts[r][0].load()
                for s in cutlass.range_constexpr(1, len(split_tiles)):
                    if s < splits:
                        total = total + parts[r][s].load()
                gRuns[coords[r]].store((total * SM90_ACC_RESCALE).to(cutlass.Float16))


@cute.jit
def split_k_slot(tile_idx, batch, tiles, splits, split):
    """The partials slot of one split of one output tile (`tiles` a batch): a tile's splits
    side by side."""
    return (batch * tiles + tile_idx) * splits + split


class HopperSplitKReduction:
    """Adds up the fp32 partials of `HopperNvfp4Gemm`'s splits where they could not run as
    clusters, and writes fp16 c; launched after the GEMM as its programmatic dependent. One CTA
    per (output tile, slab of its rows): the same adding as in the cluster (`sm90_add_splits`),
    over the partials in global memory."""

    PARTS = 4  # CTAs per output tile
    THREADS = 256

    def __init__(self, tile_n: int):
        self.tile_n = tile_n

    @cute.jit
    def launch(self, mC: cute.Tensor, mPartials: cute.Tensor, tiles_m: cutlass.Int32, splits: cutlass.Int32,
               tiles: cutlass.Int32, l: cutlass.Int32):
        self.kernel(mC, mPartials, tiles_m, splits).launch(
            grid=(tiles, self.PARTS, l), block=(self.THREADS, 1, 1), use_pdl=True)

    @cute.kernel
    def kernel(self, mC: cute.Tensor, mPartials: cute.Tensor, tiles_m: cutlass.Int32, splits: cutlass.Int32):
        # The GEMM (this kernel's primary) wrote the partials. Once it is complete, the next
        # call's grid may launch (see `HopperOperandDecode`).
        cute.arch.griddepcontrol_wait()
        cute.arch.griddepcontrol_launch_dependents()
        tidx, _, _ = cute.arch.thread_idx()
        tile_idx, part, batch = cute.arch.block_idx()
        gC = cute.local_tile(mC, (self.tile_n, HopperNvfp4Gemm.TILE_M),
                             (tile_idx // tiles_m, tile_idx % tiles_m, batch))
        row_start, row_stop = split_k_range(part, HopperNvfp4Gemm.TILE_M, self.PARTS)
        # Slots past the last split repeat it (`sm90_add_splits` skips them).
        split_tiles = [mPartials[(None, None, split_k_slot(tile_idx, batch, cute.arch.grid_dim()[0], splits, cutlass.min(s, splits - 1)))]
                       for s in range(HopperNvfp4Gemm.MAX_SPLITS)]
        sm90_add_splits(split_tiles, splits, gC, row_start, row_stop, tidx, self.THREADS)
