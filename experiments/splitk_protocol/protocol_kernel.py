"""The split-K protocol of the B200 kernel (`submission.SplitKReduction`) and its PDL-waiting
epilogue, alone, in a CuTeDSL kernel any Hopper or newer GPU runs.

Each CTA is one split of one output tile of 128 rows x `32 * subtiles` columns, run by four
warps as the B200 epilogue runs it: thread i of warp w owns row 32w + i, a subtile at a time of
32 columns. Its accumulator is read from `x` (global fp32) instead of tensor memory; the rest
is the submission's own code: the partial stores, the per-warp arrival count, the last arrival's
adds and fp16 stores, the counter's reset. With PDL the grid lets the next one launch at once
and waits for the previous one before its first store, as the B200 epilogue does.

Layouts (rows contiguous, as c's columns are on the B200): x and the partials are
(rows, columns, tiles * splits), c is (rows, columns, tiles), the counters (warps, tiles).
"""

from __future__ import annotations

import sys
from pathlib import Path

import cutlass
import cutlass.cute as cute

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from submission import SM100_EPILOGUE_COLUMNS, SM100_PARTIAL_REGISTERS, SplitKReduction, fake_pointer  # noqa: E402

ROWS = 128  # rows of a tile: one a thread of the four warps
WARPS = 4


def partials_ahead(splits: int, subtiles: int) -> int:
    """As the B200 configuration counts them (`Sm100Config.partials_ahead`)."""
    return min(subtiles, SM100_PARTIAL_REGISTERS // ((splits - 1) * SM100_EPILOGUE_COLUMNS))


class SplitKProtocolKernel:
    POINTER_TYPES = (cutlass.Float32, cutlass.Float16, cutlass.Float32, cutlass.Int32)

    def __init__(self, splits: int, subtiles: int, pdl: bool = True):
        self.splits, self.subtiles, self.pdl = splits, subtiles, pdl
        self.columns = SM100_EPILOGUE_COLUMNS * subtiles
        self.ahead = partials_ahead(splits, subtiles)

    @cute.jit
    def __call__(self, x_ptr: cute.Pointer, c_ptr: cute.Pointer, partial_ptr: cute.Pointer,
                 counter_ptr: cute.Pointer, tiles: cutlass.Int32):
        slots = tiles * self.splits
        x = cute.make_tensor(x_ptr, cute.make_layout((ROWS, self.columns, slots)))
        c = cute.make_tensor(c_ptr, cute.make_layout((ROWS, self.columns, tiles)))
        partials = cute.make_tensor(partial_ptr, cute.make_layout((ROWS, self.columns, slots)))
        counters = cute.make_tensor(counter_ptr, cute.make_layout((WARPS, tiles)))
        self.kernel(x, c, partials, counters).launch(grid=(slots, 1, 1), block=(32 * WARPS, 1, 1),
                                                      use_pdl=self.pdl)

    def _thread_view(self, tensor: cute.Tensor, row, with_slots: bool):
        """(32 columns, 1, 1, subtile[, slot]) of one row: the shape of an epilogue thread's
        registers for one subtile, as the B200 epilogue's views have it."""
        columns = SM100_EPILOGUE_COLUMNS
        if cutlass.const_expr(with_slots):
            layout = cute.make_layout((columns, 1, 1, self.subtiles, cute.size(tensor, mode=[2])),
                                      stride=(ROWS, 1, 1, columns * ROWS, ROWS * self.columns))
        else:
            layout = cute.make_layout((columns, 1, 1, self.subtiles), stride=(ROWS, 1, 1, columns * ROWS))
        return cute.make_tensor(tensor.iterator + row, layout)

    @cute.kernel
    def kernel(self, x: cute.Tensor, c: cute.Tensor, partials: cute.Tensor, counters: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        lane = cute.arch.lane_idx()
        if cutlass.const_expr(self.pdl):
            cute.arch.griddepcontrol_launch_dependents()
        tile = cta // self.splits
        split = cta % self.splits
        accumulator = self._thread_view(cute.domain_offset((0, 0, cta), x), tidx, False)
        c_tiles = self._thread_view(cute.domain_offset((0, 0, tile), c), tidx, False)
        tile_partials = self._thread_view(partials, tidx, True)
        registers = cute.make_rmem_tensor((SM100_EPILOGUE_COLUMNS, 1, 1), cutlass.Float32)
        load = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float32)
        split_k = SplitKReduction.create(self.splits, self.ahead, load, registers, lane)
        if cutlass.const_expr(self.pdl):
            # The previous grid may still be reading the partials and counting: wait for all of it.
            cute.arch.griddepcontrol_wait()
        counter = counters.iterator + cute.crd2idx((warp, tile), counters.layout)
        split_k.finish(accumulator, c_tiles, tile_partials, tile * self.splits, split, counter)


def compile_kernel(splits: int, subtiles: int, pdl: bool = True, arch: str | None = None):
    """The compiled kernel (for `arch`, or the device's where None); compiles without a GPU."""
    kernel = SplitKProtocolKernel(splits, subtiles, pdl)
    pointers = [fake_pointer(t) for t in SplitKProtocolKernel.POINTER_TYPES]
    options = f"--gpu-arch {arch}" if arch else ""
    return cute.compile(kernel, *pointers, cutlass.Int32(1), options=options)
