"""Hopper (sm_90a) NVFP4 GEMM, work in progress: moves into submission.py's Hopper section."""

from __future__ import annotations

import torch

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blockscaled_layout as blockscaled_utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync, warpgroup

from submission import (
    SF_VEC_SIZE,
    CompileFacts,
    Problem,
    compile_options,
    compiled_kernel,
    fake_pointer,
    pointer_arg,
    split_k_range,
)

# Decoded operands are exact fp16 values scaled by 2**-7 each (see `_decode_word`), so the
# accumulator holds the product scaled by 2**-14; the epilogue undoes it exactly.
_OPERAND_EXPONENT = 7
_ACC_RESCALE = float(2 ** (2 * _OPERAND_EXPONENT))


@cutlass.dsl_user_op
def _mul_f16x2(a: cutlass.Uint32, b: cutlass.Uint32, *, loc=None, ip=None) -> cutlass.Uint32:
    """Packed fp16x2 multiply on raw bit patterns, round-to-nearest, subnormals kept."""
    return cutlass.Uint32(
        llvm.inline_asm(
            cutlass.Uint32.mlir_type,
            [cutlass.Uint32(a).ir_value(loc=loc, ip=ip), cutlass.Uint32(b).ir_value(loc=loc, ip=ip)],
            "mul.rn.f16x2 $0, $1, $2;",
            "=r,r,r",
            has_side_effects=False,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


@cutlass.dsl_user_op
def _atomic_add_gpu(address: cutlass.Int64, value: cutlass.Int32, *, loc=None, ip=None) -> cutlass.Int32:
    """atom.add with acquire-release semantics at GPU scope; returns the previous value."""
    return cutlass.Int32(
        llvm.inline_asm(
            cutlass.Int32.mlir_type,
            [cutlass.Int64(address).ir_value(loc=loc, ip=ip), cutlass.Int32(value).ir_value(loc=loc, ip=ip)],
            "atom.add.acq_rel.gpu.s32 $0, [$1], $2;",
            "=r,l,r",
            has_side_effects=True,
            is_align_stack=False,
            asm_dialect=llvm.AsmDialect.AD_ATT,
            loc=loc,
            ip=ip,
        )
    )


@cute.jit
def _scale_f16x2(code: cutlass.Uint32) -> cutlass.Uint32:
    """e4m3 scale byte -> fp16x2 (scale * 2**7, twice). Shifting the e4m3 bits into an fp16
    gives scale * 2**-8 exactly, subnormals included; the multiply by 2**15 is exact too."""
    bits = ((code & 0x7F) << 7) | ((code & 0x80) << 8)
    return _mul_f16x2(bits | (bits << 16), cutlass.Uint32(0x78007800))


@cute.jit
def _decode_pair(word: cutlass.Uint32, i, scale2: cutlass.Uint32) -> cutlass.Uint32:
    """Nibbles i and i + 4 of `word` (eight e2m1 codes) -> fp16x2, times the scale.

    An e2m1 code's magnitude bits shifted to fp16 bits [11:9] read as the value * 2**-14
    (0.5 lands on the subnormal 2**-15) and its sign goes to bit 15; nibbles i and i + 4 sit
    16 bits apart, so one shift places both halves of the pair.
    """
    codes = word >> (4 * i)
    magnitude = (codes << 9) & 0x0E000E00
    sign = (codes << 12) & 0x80008000
    return _mul_f16x2(magnitude | sign, scale2)


class HopperNvfp4Gemm:
    """C = (A * SFA) (B * SFB)^T on sm_90a with exact fp16 operands decoded on chip.

    The large operand B (N x K) is the MMA's M side and A (M x K) its N side, so that N, not the
    small M, fills wgmma's 64-row instruction. Per K tile of 64, TMA brings the packed e2m1 rows
    and the 512-byte scale atoms (read in place from the permuted scale tensors) into a
    multi-stage buffer. Every warpgroup decodes its 64 rows of B straight into wgmma's register
    operand and a share of A into a 128B-swizzled fp16 tile (three buffers, so decoding the next
    tile overlaps the tensor cores on the current one), then issues wgmma with fp32 accumulators.
    K is split over CTAs where the tile grid alone would leave SMs idle; the partials meet in an
    fp32 workspace and the last CTA to arrive on a tile writes fp16 into C.

    K order inside a 64-wide K tile. Thread t of a quad (t = lane % 4) holds, per row and per
    k16 step i, the MMA positions 16i + 8h + 2t + e (h, e in {0, 1}). Position p holds logical
    K element 16t + 8h + i + 4e: the thread's 16 elements are then one scale block (8 contiguous
    packed bytes), and each fp16 pair (e = 0, 1) is nibbles i and i + 4 of packed word h, which
    is what `_decode_word` produces. A is written to shared memory in the same order, so the sum
    over K is unchanged.
    """

    ARCH = "sm_90a"

    tile_m = 128  # rows of A per CTA (the MMA's N)
    tile_k = 64  # K elements per pipeline stage (32 packed bytes per row)
    decoded_buffers = 3
    num_stages = 8

    def __init__(self, tile_n: int = 256):
        self.tile_n = tile_n  # rows of B per CTA: 64 per warpgroup
        self.warpgroups = tile_n // 64
        self.threads = 128 * self.warpgroups
        self.packed_bytes_per_row = self.tile_k // 2
        self.mma_tiler = (self.tile_n, self.tile_m, self.tile_k)

    # ----- host side -----

    @staticmethod
    def tile_n_for(problem: Problem) -> int:
        return 256 if problem.n % 256 == 0 else 128

    @classmethod
    def config_for(cls, problem: Problem):
        return (cls.tile_n_for(problem), cls.tile_m, cls.tile_k, cls.num_stages)

    @classmethod
    def splits_for(cls, problem: Problem, num_sms: int) -> int:
        """Split K so that the tile grid covers the SMs, keeping >= 2 K-tile pairs per split."""
        tiles = (problem.m // cls.tile_m) * (problem.n // cls.tile_n_for(problem)) * problem.l
        k_pairs = problem.k // (2 * cls.tile_k)
        return max(1, min(num_sms // tiles, k_pairs // 2))

    def _setup(self):
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            cutlass.Float16,
            cutlass.Float16,
            cute.nvgpu.OperandMajorMode.K,
            cute.nvgpu.OperandMajorMode.K,
            cutlass.Float32,
            (self.warpgroups, 1, 1),
            tiler_mn=(64, self.tile_m),
            a_source=cute.nvgpu.warpgroup.OperandSource.RMEM,
        )
        self.dec_a_layout = sm90_utils.make_smem_layout_b(
            utils.LayoutEnum.ROW_MAJOR, self.mma_tiler, cutlass.Float16, self.decoded_buffers
        )
        self.packed_a_layout = cute.make_layout(
            (self.tile_m, self.packed_bytes_per_row, self.num_stages),
            stride=(self.packed_bytes_per_row, 1, self.tile_m * self.packed_bytes_per_row),
        )
        self.packed_b_layout = cute.make_layout(
            (self.tile_n, self.packed_bytes_per_row, self.num_stages),
            stride=(self.packed_bytes_per_row, 1, self.tile_n * self.packed_bytes_per_row),
        )
        self.sfa_layout = blockscaled_utils.make_smem_layout_sf((self.tile_m, self.tile_k), SF_VEC_SIZE, self.num_stages)
        self.sfb_layout = blockscaled_utils.make_smem_layout_sf((self.tile_n, self.tile_k), SF_VEC_SIZE, self.num_stages)
        self.atom_bytes = cute.cosize(cute.filter_zeros(cute.slice_(self.sfa_layout, (None, None, 0))))
        self.stage_bytes = (self.tile_m + self.tile_n) * (self.packed_bytes_per_row + self.atom_bytes // 128)

        # Field types built as values: the file uses postponed annotations, which cute.struct
        # would otherwise receive as strings.
        fields = {
            "stage_barriers": cute.struct.MemRange[cutlass.Int64, self.num_stages * 2],
            "arrival": cute.struct.MemRange[cutlass.Int32, 1],
            "packed_a": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.packed_a_layout)], 128],
            "packed_b": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.packed_b_layout)], 128],
            "sf_a": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.sfa_layout)], 128],
            "sf_b": cute.struct.Align[cute.struct.MemRange[cutlass.Uint8, cute.cosize(self.sfb_layout)], 128],
            "dec_a": cute.struct.Align[cute.struct.MemRange[cutlass.Float16, cute.cosize(self.dec_a_layout)], 1024],
        }
        self.shared_storage = cute.struct(type("SharedStorage", (), {"__annotations__": fields}))

    @cute.jit
    def __call__(
        self,
        a_ptr: cute.Pointer,
        b_ptr: cute.Pointer,
        sfa_ptr: cute.Pointer,
        sfb_ptr: cute.Pointer,
        c_ptr: cute.Pointer,
        workspace_ptr: cute.Pointer,
        arrivals_ptr: cute.Pointer,
        m: cutlass.Int32,
        n: cutlass.Int32,
        k: cutlass.Int32,
        l: cutlass.Int32,
        splits: cutlass.Int32,
    ):
        self._setup()
        half_k = k // 2
        # Packed operands as bytes: (rows, K/2, L), K-major, batch outermost.
        mA = cute.make_tensor(a_ptr, cute.make_layout((m, half_k, l), stride=(half_k, 1, m * half_k)))
        mB = cute.make_tensor(b_ptr, cute.make_layout((n, half_k, l), stride=(half_k, 1, n * half_k)))
        # C seen as (N, M, L): the MMA's M runs along N, C's contiguous dimension.
        mC = cute.make_tensor(c_ptr, cute.make_layout((n, m, l), stride=(1, n, m * n)))

        tiles = (m // self.tile_m) * (n // self.tile_n)
        acc_per_thread = 64 * self.tile_m // 128
        mWorkspace = cute.make_tensor(
            workspace_ptr,
            cute.make_layout(
                (self.threads, acc_per_thread, tiles * l * splits),
                stride=(1, self.threads, self.threads * acc_per_thread),
            ),
        )
        mArrivals = cute.make_tensor(arrivals_ptr, cute.make_layout(tiles * l))

        rows_bytes = lambda rows: (rows, self.packed_bytes_per_row)  # noqa: E731
        tma_a, tma_mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mA, cute.slice_(self.packed_a_layout, (None, None, 0)), rows_bytes(self.tile_m)
        )
        tma_b, tma_mB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), mB, cute.slice_(self.packed_b_layout, (None, None, 0)), rows_bytes(self.tile_n)
        )
        # The scales of 128 rows x 64 K are one 512-byte atom of the permuted layout, contiguous
        # in memory: TMA copies whole atoms, and the kernel reads them in shared memory through
        # the blockscaled layout (`sfa_layout`, `sfb_layout`).
        tma_sfa, tma_mSFA = self._make_sf_atom_tma(sfa_ptr, m, k, l)
        tma_sfb, tma_mSFB = self._make_sf_atom_tma(sfb_ptr, n, k, l)

        self.kernel(
            tma_a, tma_mA, tma_b, tma_mB, tma_sfa, tma_mSFA, tma_sfb, tma_mSFB,
            mC, mWorkspace, mArrivals, self.tiled_mma,
            self.packed_a_layout, self.packed_b_layout, self.sfa_layout, self.sfb_layout, self.dec_a_layout,
            m // self.tile_m, k // self.tile_k, splits,
        ).launch(grid=(tiles, splits, l), block=(self.threads, 1, 1))

    @cute.jit
    def _make_sf_atom_tma(self, sf_ptr: cute.Pointer, rows: cutlass.Int32, k: cutlass.Int32, l: cutlass.Int32):
        rest_k = k // (SF_VEC_SIZE * 4)
        rest_rows = rows // 128
        atoms = cute.make_tensor(
            sf_ptr,
            cute.make_layout(
                (self.atom_bytes, rest_k, rest_rows, l),
                stride=(1, self.atom_bytes, rest_k * self.atom_bytes, rest_rows * rest_k * self.atom_bytes),
            ),
        )
        return cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), atoms, cute.make_layout(self.atom_bytes), (self.atom_bytes,),
            internal_type=cutlass.Int32,
        )

    # ----- device side -----

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_sfa: cute.CopyAtom,
        mSFA: cute.Tensor,
        tma_sfb: cute.CopyAtom,
        mSFB: cute.Tensor,
        mC: cute.Tensor,
        mWorkspace: cute.Tensor,
        mArrivals: cute.Tensor,
        tiled_mma: cute.TiledMma,
        packed_a_layout: cute.Layout,
        packed_b_layout: cute.Layout,
        sfa_layout: cute.Layout,
        sfb_layout: cute.Layout,
        dec_a_layout: cute.ComposedLayout,
        tiles_m: cutlass.Int32,
        k_tiles: cutlass.Int32,
        splits: cutlass.Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        tile_idx, split, batch = cute.arch.block_idx()
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        m_tile = tile_idx % tiles_m
        n_tile = tile_idx // tiles_m
        # Splits cover pairs of K tiles: the main loop alternates two register fragments.
        pair_start, pair_stop = split_k_range(split, k_tiles // 2, splits)
        k_start = 2 * pair_start
        k_count = 2 * (pair_stop - pair_start)

        if warp_idx == 0:
            for atom in (tma_a, tma_b, tma_sfa, tma_sfb):
                cpasync.prefetch_descriptor(atom)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        stages = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.stage_barriers.data_ptr(),
            num_stages=self.num_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.threads // 32),
            tx_count=self.stage_bytes,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
        )

        sPackedA = storage.packed_a.get_tensor(packed_a_layout)
        sPackedB = storage.packed_b.get_tensor(packed_b_layout)
        sSFA = storage.sf_a.get_tensor(sfa_layout)
        sSFB = storage.sf_b.get_tensor(sfb_layout)
        sDecA = storage.dec_a.get_tensor(dec_a_layout.outer, swizzle=dec_a_layout.inner)

        # ---- TMA: this CTA's packed rows and scale atoms, one K tile per stage ----
        gA = cute.local_tile(mA, (self.tile_m, self.packed_bytes_per_row), (m_tile, None, batch))
        gB = cute.local_tile(mB, (self.tile_n, self.packed_bytes_per_row), (n_tile, None, batch))
        one_cta = cute.make_layout(1)
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, one_cta, cute.group_modes(sPackedA, 0, 2), cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, one_cta, cute.group_modes(sPackedB, 0, 2), cute.group_modes(gB, 0, 2))
        atom_bytes = cute.size(mSFA, mode=[0])
        atom_stages = cute.make_layout((atom_bytes, self.num_stages), stride=(atom_bytes * (self.tile_m // 128), atom_bytes))
        sf_copies = []
        for atom in cutlass.range_constexpr(self.tile_m // 128):
            s_atoms = cute.make_tensor(sSFA.iterator + atom * atom_bytes, cute.make_layout((atom_bytes, self.num_stages), stride=(1, cute.cosize(cute.filter_zeros(cute.slice_(sfa_layout, (None, None, 0)))))))
            sf_copies.append((tma_sfa, cpasync.tma_partition(tma_sfa, 0, one_cta, s_atoms, mSFA[(None, None, m_tile * (self.tile_m // 128) + atom, batch)])))
        for atom in cutlass.range_constexpr(self.tile_n // 128):
            s_atoms = cute.make_tensor(sSFB.iterator + atom * atom_bytes, cute.make_layout((atom_bytes, self.num_stages), stride=(1, cute.cosize(cute.filter_zeros(cute.slice_(sfb_layout, (None, None, 0)))))))
            sf_copies.append((tma_sfb, cpasync.tma_partition(tma_sfb, 0, one_cta, s_atoms, mSFB[(None, None, n_tile * (self.tile_n // 128) + atom, batch)])))

        producer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.num_stages)
        consumer = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.num_stages)

        if warp_idx == 0:
            for _ in cutlass.range(cutlass.min(self.num_stages, k_count), unroll=1):
                self._load_stage(stages, producer, k_start, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, sf_copies)
                producer.advance()

        # ---- MMA: B from registers (per warpgroup), decoded A from shared memory ----
        warp_group = cute.arch.make_warp_uniform(tidx // 128)
        thr_mma = tiled_mma.get_slice(tidx)
        wg_mma = tiled_mma.get_slice(warp_group * 128)
        tCrA = tiled_mma.make_fragment_B(wg_mma.partition_B(sDecA))
        # Where this thread's B fragment lives in the (tile_n, tile_k) tile: its first row.
        tCcB = thr_mma.partition_A(cute.make_identity_tensor((self.tile_n, self.tile_k)))
        b_row = tCcB[0][0]
        quad = tCcB[0][1] // 2
        fragments = [
            cute.make_rmem_tensor(tiled_mma.partition_shape_A((self.tile_n, self.tile_k)), cutlass.Float16)
            for _ in range(2)
        ]
        gC = cute.local_tile(mC, (self.tile_n, self.tile_m), (n_tile, m_tile, batch))
        tCgC = thr_mma.partition_C(gC)
        acc = cute.make_rmem_tensor(tCgC.shape, cutlass.Float32)
        acc.fill(0.0)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        mma_k_blocks = cute.size(tCrA, mode=[2])

        for kt_pair in cutlass.range(k_count // 2, unroll=1):
            for f in cutlass.range_constexpr(2):
                kt = 2 * kt_pair + f
                stages.consumer_wait(consumer)
                buffer = kt % self.decoded_buffers
                self._decode_b_fragment(sPackedB, sSFB, consumer.index, b_row, quad, fragments[f])
                self._decode_a_rows(sPackedA, sSFA, sDecA, consumer.index, buffer, tidx)
                stages.consumer_release(consumer)
                consumer.advance()
                # wgmma reads shared memory through the async proxy
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier(barrier_id=1, number_of_threads=self.threads)

                if warp_idx == 0 and producer.count < k_count:
                    self._load_stage(stages, producer, k_start, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, sf_copies)
                    producer.advance()

                warpgroup.fence()
                for kb in cutlass.range_constexpr(mma_k_blocks):
                    cute.gemm(tiled_mma, acc, fragments[f][(None, None, kb)], tCrA[(None, None, kb, buffer)], acc)
                warpgroup.commit_group()
                # One MMA group stays in flight. The fragment decoded next was read by the group
                # retired here; with three A buffers, the buffer decoded next was last read by a
                # group that every warpgroup retired before the barrier above.
                warpgroup.wait_group(1)
        warpgroup.wait_group(0)

        # ---- epilogue ----
        if splits == 1:
            self._store_c(tCgC, acc, n_tile)
        else:
            tile_unit = batch * cute.arch.grid_dim()[0] + tile_idx
            for i in cutlass.range_constexpr(cute.size(acc)):
                mWorkspace[(tidx, i, tile_unit * splits + split)] = acc[i]
            cute.arch.fence_acq_rel_gpu()
            cute.arch.barrier(barrier_id=1, number_of_threads=self.threads)
            arrival = storage.arrival.get_tensor(cute.make_layout(1))
            if tidx == 0:
                slot = mArrivals.iterator + tile_unit
                arrival[0] = _atomic_add_gpu(slot.toint(), cutlass.Int32(1))
            cute.arch.barrier(barrier_id=1, number_of_threads=self.threads)
            if arrival[0] == splits - 1:
                # Last CTA on this tile: sum the partials in split order (deterministic).
                cute.arch.fence_acq_rel_gpu()
                acc.fill(0.0)
                for s in cutlass.range(splits, unroll=1):
                    for i in cutlass.range_constexpr(cute.size(acc)):
                        acc[i] = acc[i] + mWorkspace[(tidx, i, tile_unit * splits + s)]
                self._store_c(tCgC, acc, n_tile)
                if tidx == 0:
                    mArrivals[tile_unit] = cutlass.Int32(0)

    @cute.jit
    def _store_c(self, tCgC, acc, n_tile):
        tCgC.store((acc.load() * _ACC_RESCALE).to(cutlass.Float16))

    @cute.jit
    def _load_stage(self, stages, producer, k_start, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, sf_copies):
        stages.producer_acquire(producer)
        barrier = stages.producer_get_barrier(producer)
        k_tile = k_start + producer.count
        cute.copy(tma_a, tAgA[(None, k_tile)], tAsA[(None, producer.index)], tma_bar_ptr=barrier)
        cute.copy(tma_b, tBgB[(None, k_tile)], tBsB[(None, producer.index)], tma_bar_ptr=barrier)
        for tma_sf, (t_s, t_g) in sf_copies:
            cute.copy(tma_sf, t_g[(None, k_tile)], t_s[(None, producer.index)], tma_bar_ptr=barrier)
        stages.producer_commit(producer)

    @cute.jit
    def _decode_b_fragment(self, sPacked, sSF, stage, b_row, quad, fragment):
        """Rows b_row and b_row + 8: 8 packed bytes and one scale each -> wgmma's A fragment."""
        packed_words = cute.recast_tensor(sPacked[(None, None, stage)], cutlass.Uint32)
        frag = cute.recast_tensor(fragment, cutlass.Uint32)
        words = [cute.make_rmem_tensor((1, 2), cutlass.Uint32) for _ in range(2)]
        for r8 in cutlass.range_constexpr(2):
            cute.autovec_copy(cute.local_tile(packed_words, (1, 2), (b_row + 8 * r8, quad)), words[r8])
        for r8 in cutlass.range_constexpr(2):
            scale2 = _scale_f16x2(cutlass.Uint32(sSF[(b_row + 8 * r8, 16 * quad, stage)]))
            for h in cutlass.range_constexpr(2):
                for i in cutlass.range_constexpr(4):
                    frag[((0, r8, h), 0, i)] = _decode_pair(words[r8][(0, h)], i, scale2)

    @cute.jit
    def _decode_a_rows(self, sPacked, sSF, sDec, stage, buffer, tidx):
        """A share of A's 128 rows -> fp16 in the K order above, 16-byte chunks (i, h)."""
        threads_per_row = self.threads // self.tile_m
        pairs_per_thread = 8 // threads_per_row  # of the 4 k16 steps i, this thread's
        row = tidx // threads_per_row
        h = tidx % 2
        i_first = (tidx % threads_per_row) // 2 * pairs_per_thread
        packed_words = cute.recast_tensor(sPacked[(None, None, stage)], cutlass.Uint32)
        words = cute.make_rmem_tensor((4,), cutlass.Uint32)
        scales = cute.make_rmem_tensor((4,), cutlass.Uint32)
        for c in cutlass.range_constexpr(4):
            words[c] = packed_words[(row, 2 * c + h)]
            scales[c] = _scale_f16x2(cutlass.Uint32(sSF[(row, 16 * c, stage)]))
        dst = sDec[(None, None, buffer)]
        chunk = cute.make_rmem_tensor((4,), cutlass.Uint32)
        for j in cutlass.range_constexpr(pairs_per_thread):
            i = i_first + j
            for c in cutlass.range_constexpr(4):
                chunk[c] = _decode_pair(words[c], i, scales[c])
            cute.autovec_copy(
                cute.recast_tensor(chunk, cutlass.Float16),
                cute.local_tile(dst, (1, 8), (row, 2 * i + h)),
            )


# ----- host entry (the shared call path replaces this when the section moves) -----

_WORKSPACES: dict = {}
_SM_COUNTS: dict = {}


def _workspace(device, floats: int, arrivals: int):
    """fp32 split-K partials and the per-tile arrival counters (zeroed once; the last CTA of
    each tile resets its counter, so no call needs a memset)."""
    key = device.index
    held = _WORKSPACES.get(key)
    if held is None or held[0].numel() < floats or held[1].numel() < arrivals:
        held = (torch.empty(max(floats, 1), dtype=torch.float32, device=device),
                torch.zeros(max(arrivals, 1), dtype=torch.int32, device=device))
        _WORKSPACES[key] = held
    return held


def _compile(problem: Problem, arch: str = HopperNvfp4Gemm.ARCH, extra: str = "", tvm_ffi=None):
    kernel = HopperNvfp4Gemm(HopperNvfp4Gemm.tile_n_for(problem))
    ints = [cutlass.Int32(v) for v in (problem.m, problem.n, problem.k, problem.l, 1)]
    options = compile_options(arch, extra=extra) if tvm_ffi is None else compile_options(arch, tvm_ffi=tvm_ffi, extra=extra)
    return cute.compile(
        kernel,
        fake_pointer(cutlass.Uint8),
        fake_pointer(cutlass.Uint8),
        fake_pointer(cutlass.Uint8),
        fake_pointer(cutlass.Uint8),
        fake_pointer(cutlass.Float16),
        fake_pointer(cutlass.Float32),
        fake_pointer(cutlass.Int32),
        *ints,
        options=options,
    )


def hopper_gemm(data, problem: Problem):
    a, b, _, _, sfa_perm, sfb_perm, c = data
    device = c.device
    num_sms = _SM_COUNTS.get(device.index)
    if num_sms is None:
        num_sms = _SM_COUNTS[device.index] = torch.cuda.get_device_properties(device).multi_processor_count
    splits = HopperNvfp4Gemm.splits_for(problem, num_sms)
    tile_n = HopperNvfp4Gemm.tile_n_for(problem)
    tiles = (problem.m // HopperNvfp4Gemm.tile_m) * (problem.n // tile_n) * problem.l
    workspace, arrivals = _workspace(device, tiles * splits * tile_n * HopperNvfp4Gemm.tile_m, tiles)
    kernel = compiled_kernel(("HopperNvfp4Gemm", HopperNvfp4Gemm.config_for(problem)), lambda: _compile(problem))
    kernel(
        pointer_arg(cutlass.Uint8, a.data_ptr()),
        pointer_arg(cutlass.Uint8, b.data_ptr()),
        pointer_arg(cutlass.Uint8, sfa_perm.data_ptr()),
        pointer_arg(cutlass.Uint8, sfb_perm.data_ptr()),
        pointer_arg(cutlass.Float16, c.data_ptr()),
        pointer_arg(cutlass.Float32, workspace.data_ptr()),
        pointer_arg(cutlass.Int32, arrivals.data_ptr()),
        problem.m, problem.n, problem.k, problem.l, splits,
    )
    return c


# ----- device check and timing (development only) -----

def _main():
    import argparse
    import json
    import os
    import time

    import reference

    parser = argparse.ArgumentParser()
    parser.add_argument("--log-dir", default=".")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    os.makedirs(args.log_dir, exist_ok=True)
    log = open(os.path.join(args.log_dir, "hopper_check.log"), "w")

    def say(*parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        log.write(line + "\n")
        log.flush()

    def shapes(name):
        out = []
        for line in open(os.path.join("shapes", name)):
            line = line.strip()
            if not line:
                continue
            d = {kv.split(":")[0].strip(): kv.split(":")[1] for kv in line.split(";")}
            out.append(tuple(int(d[key]) for key in ("m", "n", "k", "l")))
        return out

    from submission import validate_inputs
    tests, benches = shapes("tests.txt"), shapes("benchmarks.txt")
    say("device", torch.cuda.get_device_name(), "sms", torch.cuda.get_device_properties(0).multi_processor_count)
    results = []
    all_ok = True
    for shape in tests + [(256, 384, 512, 3), (128, 640, 2048, 1)] + benches:
        for seed in (1234, 98765):
            data = reference.generate_input(*shape, seed=seed)
            data[6].fill_(float("nan"))
            t0 = time.perf_counter()
            problem = validate_inputs(data)
            out = hopper_gemm(data, problem)
            torch.cuda.synchronize()
            ok, msg = reference.check_implementation(data, out)
            # second call on the same buffers: the split-K arrival counters must have been reset
            data[6].fill_(float("nan"))
            out = hopper_gemm(data, problem)
            torch.cuda.synchronize()
            ok2, msg2 = reference.check_implementation(data, out)
            all_ok &= ok and ok2
            say("check", shape, seed, "OK" if ok and ok2 else "FAIL", msg[:300], msg2[:300], f"{time.perf_counter()-t0:.1f}s")

    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    rows = []
    for shape in benches:
        sets = [reference.generate_input(*shape, seed=100 + i) for i in range(args.iters)]
        problems = [validate_inputs(d) for d in sets]
        for d, p in zip(sets, problems):
            hopper_gemm(d, p)
        torch.cuda.synchronize()
        times = []
        for d, p in zip(sets, problems):
            flush.fill_(1)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            hopper_gemm(d, p)
            stop.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(stop) * 1000)
        times.sort()
        # back to back, as the competition times it
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for d, p in zip(sets, problems):
            hopper_gemm(d, p)
        torch.cuda.synchronize()
        b2b = (time.perf_counter() - t0) / len(sets) * 1e6
        # cuBLAS on operands dequantized beforehand
        a, b, sfa, sfb = sets[0][:4]
        a_deq = reference.dequantize(a, sfa)[:, :, 0].to(torch.bfloat16)
        b_deq = reference.dequantize(b, sfb)[:, :, 0].to(torch.bfloat16)
        for _ in range(3):
            a_deq @ b_deq.T
        cub = []
        for _ in range(20):
            flush.fill_(1)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a_deq @ b_deq.T
            stop.record()
            torch.cuda.synchronize()
            cub.append(start.elapsed_time(stop) * 1000)
        cub.sort()
        rows.append((shape, times[len(times) // 2], times[0], b2b, cub[len(cub) // 2]))
        del sets
    say("")
    say(f"{'shape':>24} {'median us':>10} {'min us':>8} {'b2b us':>8} {'cuBLAS deq us':>14}")
    for shape, med, lo, b2b, cub in rows:
        say(f"{str(shape):>24} {med:10.2f} {lo:8.2f} {b2b:8.2f} {cub:14.2f}")
    say("ALL CORRECT" if all_ok else "SOME FAILED")
    json.dump({"rows": [list(map(str, r)) for r in rows], "ok": all_ok}, open(os.path.join(args.log_dir, "hopper.json"), "w"))


if __name__ == "__main__":
    _main()
