#!POPCORN leaderboard nvfp4_gemm
#!POPCORN gpu NVIDIA
"""NVFP4 block-scaled GEMM for the GPU MODE `nvfp4_gemm` leaderboard.

C[i, j, l] = sum_k A[i, k, l] * SFA[i, k // 16, l] * B[j, k, l] * SFB[j, k // 16, l], written as fp16 into `c`.
On compute capability 10.x (B200, sm_100a) runs `Sm100BlockScaledGemm`, a persistent, warp-specialized CuTeDSL kernel
on the block-scaled tcgen05 MMA; on 9.x (H100/H200) local runs import hopper_stand_in.py, never submitted. The first
call of each problem checks itself (`first_call`); configurations and their reasons: `sm100_config`, docs/b200.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple

import torch

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
import cutlass.utils.blockscaled_layout as blockscaled_layout
from cutlass.cute.nvgpu import OperandMajorMode, cpasync, tcgen05
from cutlass.cute.runtime import make_ptr

# ===== shared constants =====

SF_VEC_SIZE = 16  # one e4m3 scale per 16 consecutive K elements
MN_ALIGN = 128  # the scale-factor atom covers 128 rows; tiles are 128 rows
K_ALIGN = 256  # one K tile of fp4 operands: 128 bytes = one 128B swizzle row
SF_ATOM_BYTES = 32 * 4 * 4  # (32, 4) rows x 4 scale columns per atom
GMEM_ALIGN = 16  # bytes; TMA needs 16-byte aligned bases (torch allocations are 256-byte aligned)

Problem = NamedTuple("Problem", [("m", int), ("n", int), ("k", int), ("l", int)])
HAVE_TVM_FFI = importlib.util.find_spec("tvm_ffi") is not None


# ===== Blackwell path (sm_100a) =====

SM100_SMEM_BYTES = 232_448  # shared memory one block may use on sm_100
SM100_SMEM_PER_SM = 233_472  # what the blocks on one SM share, each less SM100_SMEM_RESERVED
SM100_SMEM_RESERVED = 1024  # the system's part of every block's shared memory
SM100_TMEM_COLUMNS = 512  # tensor memory of one SM, shared by its CTAs
SM100_STATIC_SMEM_BYTES = 1024  # the compiled kernel's static shared memory (cuobjdump -res-usage)
SM100_NUM_SMS = 148  # B200; the live count is read from the device at call time
SM100_MMA_M = 128  # the MMA's M: rows of its A operand (b) per work unit, columns of c
SM100_TILE_K = 256  # K per pipeline stage: 4 MMAs of K=64
SM100_BARRIER_BYTES = 1024  # mbarriers and the TMEM address, rounded to the buffers' alignment
SM100_ACC_STAGES = 2
SM100_EPILOGUE_COLUMNS = 32  # accumulator columns (rows of c) per epilogue step: 32 registers
SM100_PARTIAL_REGISTERS = 64  # per epilogue thread, for other splits' partials loaded ahead of their adds


def _round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


class Sm100BlockScaledGemm:
    """Persistent, warp-specialized NVFP4 GEMM on the block-scaled tcgen05 MMA (sm_100a), named by the MMA's operands
    (A is the problem's b, B its a). The TMA warp loads A, B, SFA and SFB into `stages` shared-memory buffers; the MMA
    warp copies the scales to tensor memory and issues 4 MMAs of K = 64 a stage into one of two TMEM accumulators; the
    epilogue warps turn an accumulator into fp16 c, with split-K through fp32 partials (`SplitKReduction`). All walk
    the same work units (`Sm100Schedule`): 128 columns x mma_n rows of c x a K range x a batch."""

    EPILOGUE_WARPS = (0, 1, 2, 3)
    MMA_WARP = 4
    TMA_WARP = 5
    THREADS = 32 * 6
    # The compiled kernel's pointers: a, b, sfa_permuted, sfb_permuted, c, split-K partials and counters.
    POINTER_TYPES = (cutlass.Float4E2M1FN, cutlass.Float4E2M1FN, cutlass.Float8E4M3FN,
                     cutlass.Float8E4M3FN, cutlass.Float16, cutlass.Float32, cutlass.Int32)

    def __init__(self, config: Sm100Config, launch_bound: int = 1):
        self.config = config
        # CTAs an SM the launch declares (`min_blocks_per_mp`), for which CuTeDSL sets the shared-memory carveout as it
        # compiles, reading the device: the compile check (no GPU) uses 1. Registers fit two either way (tests/test_compile.py).
        self.launch_bound = launch_bound
        self.mma_tiler = (SM100_MMA_M, config.mma_n, SM100_TILE_K)
        # SFB is loaded and copied to TMEM in 128-row atoms; an N tile of 64 uses half of one.
        self.mma_tiler_sfb = (SM100_MMA_M, _round_up(config.mma_n, 128), SM100_TILE_K)
        self.epilogue_barrier = pipeline.NamedBarrier(barrier_id=1, num_threads=32 * len(self.EPILOGUE_WARPS))
        self.tmem_alloc_barrier = pipeline.NamedBarrier(barrier_id=2, num_threads=32 * (len(self.EPILOGUE_WARPS) + 1))

    def _tiled_mma(self, tiler):
        return sm100_utils.make_blockscaled_trivial_tiled_mma(
            cutlass.Float4E2M1FN, cutlass.Float4E2M1FN, OperandMajorMode.K, OperandMajorMode.K,
            cutlass.Float8E4M3FN, SF_VEC_SIZE, tcgen05.CtaGroup.ONE, tiler[:2])

    @cute.jit
    def __call__(self, a_ptr: cute.Pointer, b_ptr: cute.Pointer, sfa_ptr: cute.Pointer, sfb_ptr: cute.Pointer,
                 c_ptr: cute.Pointer, partial_ptr: cute.Pointer, counter_ptr: cute.Pointer, m: cutlass.Int32,
                 n: cutlass.Int32, k: cutlass.Int32, l: cutlass.Int32, num_ctas: cutlass.Int32):
        """The compiled function, in the caller's order: here, and nowhere else, the operands swap roles."""
        mma_b_ptr, mma_a_ptr, mma_sfb_ptr, mma_sfa_ptr = a_ptr, b_ptr, sfa_ptr, sfb_ptr
        mma_n, mma_m = cute.assume(m, divby=128), cute.assume(n, divby=128)
        cfg, splits = self.config, self.config.split_k
        k = cute.assume(k, divby=SM100_TILE_K)
        mA = cute.make_tensor(mma_a_ptr, cute.make_ordered_layout((mma_m, k, l), order=(1, 0, 2)))  # (M, K, L), K-major
        mB = cute.make_tensor(mma_b_ptr, cute.make_ordered_layout((mma_n, k, l), order=(1, 0, 2)))  # (N, K, L), K-major
        # ((Atom_M, Rest_M), (Atom_K, Rest_K), L) and ((Atom_N, Rest_N), (Atom_K, Rest_K), L): the scale atoms
        mSFA = cute.make_tensor(mma_sfa_ptr, blockscaled_layout.tile_atom_to_shape_SF(mA.shape, SF_VEC_SIZE))
        mSFB = cute.make_tensor(mma_sfb_ptr, blockscaled_layout.tile_atom_to_shape_SF(mB.shape, SF_VEC_SIZE))
        c = cute.make_tensor(c_ptr, cute.make_ordered_layout((mma_m, mma_n, l), order=(0, 1, 2)))  # (M, N, L), M-major
        # (M, N, L * splits): one fp32 partial a (batch, split).
        partials = cute.make_tensor(partial_ptr, cute.make_ordered_layout((mma_m, mma_n, l * splits), order=(0, 1, 2)))
        mma_n_tiles, mma_m_tiles = mma_n // cfg.mma_n, mma_m // SM100_MMA_M
        # (epilogue warp, tile): split-K arrivals.
        counters = cute.make_tensor(counter_ptr, cute.make_layout((len(self.EPILOGUE_WARPS), mma_n_tiles * mma_m_tiles * l)))

        tiled_mma = self._tiled_mma(self.mma_tiler)
        tiled_mma_sfb = self._tiled_mma(self.mma_tiler_sfb)
        cluster = cute.tiled_divide(cute.make_layout((1, 1, 1)), (tiled_mma.thr_id.shape,))  # one CTA a cluster

        stages = cfg.stages
        fp4, fp8 = cutlass.Float4E2M1FN, cutlass.Float8E4M3FN
        # (MMA, MMA_MN, MMA_K, STAGE) each
        self.a_smem_layout = sm100_utils.make_smem_layout_a(tiled_mma, self.mma_tiler, fp4, stages)
        self.b_smem_layout = sm100_utils.make_smem_layout_b(tiled_mma, self.mma_tiler, fp4, stages)
        self.sfa_smem_layout = blockscaled_layout.make_smem_layout_sfa(tiled_mma, self.mma_tiler, SF_VEC_SIZE, stages)
        self.sfb_smem_layout = blockscaled_layout.make_smem_layout_sfb(tiled_mma, self.mma_tiler, SF_VEC_SIZE, stages)

        load_op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        tma_a, gmem_a = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, mA, _one_stage(self.a_smem_layout), self.mma_tiler, tiled_mma, cluster.shape)
        tma_b, gmem_b = cute.nvgpu.make_tiled_tma_atom_B(
            load_op, mB, _one_stage(self.b_smem_layout), self.mma_tiler, tiled_mma, cluster.shape)
        tma_sfa, gmem_sfa = cute.nvgpu.make_tiled_tma_atom_A(
            load_op, mSFA, _one_stage(self.sfa_smem_layout), self.mma_tiler, tiled_mma, cluster.shape, internal_type=cutlass.Int16)
        tma_sfb, gmem_sfb = cute.nvgpu.make_tiled_tma_atom_B(load_op, mSFB, _one_stage(self.sfb_smem_layout), self.mma_tiler_sfb,
                                                             tiled_mma_sfb, cluster.shape, internal_type=cutlass.Int16)
        self.stage_tx_bytes = sum(cute.size_in_bytes(dtype, _one_stage(layout)) for dtype, layout in (
            (fp4, self.a_smem_layout), (fp4, self.b_smem_layout), (fp8, self.sfa_smem_layout), (fp8, self.sfb_smem_layout)))
        self.epi_tile = (SM100_MMA_M, SM100_EPILOGUE_COLUMNS)

        # A pipeline takes its first barrier and uses the full and empty ones as one array.
        @cute.struct
        class SharedStorage:
            smem_full: cute.struct.MemRange[cutlass.Int64, stages]
            smem_empty: cute.struct.MemRange[cutlass.Int64, stages]
            acc_full: cute.struct.MemRange[cutlass.Int64, SM100_ACC_STAGES]
            acc_empty: cute.struct.MemRange[cutlass.Int64, SM100_ACC_STAGES]
            tmem_address: cutlass.Int32
            sA: cute.struct.Align[cute.struct.MemRange[fp4, cute.cosize(self.a_smem_layout.outer)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[fp4, cute.cosize(self.b_smem_layout.outer)], 1024]
            sSFA: cute.struct.Align[cute.struct.MemRange[fp8, cute.cosize(self.sfa_smem_layout)], 1024]
            sSFB: cute.struct.Align[cute.struct.MemRange[fp8, cute.cosize(self.sfb_smem_layout)], 1024]

        self.shared_storage = SharedStorage
        self.launch_smem_bytes = SharedStorage.size_in_bytes()
        self.kernel(tiled_mma, tiled_mma_sfb, cluster, tma_a, gmem_a, tma_b, gmem_b, tma_sfa, gmem_sfa, tma_sfb, gmem_sfb,
                    c, partials, counters, self.a_smem_layout, self.b_smem_layout, self.sfa_smem_layout,
                    self.sfb_smem_layout, self.epi_tile, num_ctas).launch(
            grid=(num_ctas, 1, 1), block=(self.THREADS, 1, 1), cluster=(1, 1, 1), min_blocks_per_mp=self.launch_bound,
            smem=self.launch_smem_bytes, use_pdl=cfg.pdl)

    @cute.kernel
    def kernel(self, tiled_mma: cute.TiledMma, tiled_mma_sfb: cute.TiledMma, cluster: cute.Layout, tma_a: cute.CopyAtom,
               gmem_a: cute.Tensor, tma_b: cute.CopyAtom, gmem_b: cute.Tensor, tma_sfa: cute.CopyAtom, gmem_sfa: cute.Tensor,
               tma_sfb: cute.CopyAtom, gmem_sfb: cute.Tensor, c: cute.Tensor, partials: cute.Tensor, counters: cute.Tensor,
               a_smem_layout: cute.ComposedLayout, b_smem_layout: cute.ComposedLayout, sfa_smem_layout: cute.Layout,
               sfb_smem_layout: cute.Layout, epi_tile: cute.Tile, num_ctas: cutlass.Int32):
        cfg, splits = self.config, self.config.split_k
        warp_idx = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        cta, _, _ = cute.arch.block_idx()

        if warp_idx == self.TMA_WARP:
            for atom in (tma_a, tma_b, tma_sfa, tma_sfb):
                cpasync.prefetch_descriptor(atom)

        storage = utils.SmemAllocator().allocate(self.shared_storage)
        smem_pipeline = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.smem_full.data_ptr(), num_stages=cfg.stages, tx_count=self.stage_tx_bytes,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread), cta_layout_vmnk=cluster, defer_sync=True)
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_full.data_ptr(), num_stages=SM100_ACC_STAGES, cta_layout_vmnk=cluster, defer_sync=True,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, 32 * len(self.EPILOGUE_WARPS)))
        tmem = utils.TmemAllocator(storage.tmem_address.ptr, barrier_for_retrieve=self.tmem_alloc_barrier,
                                   allocator_warp_id=self.EPILOGUE_WARPS[0])
        pipeline.pipeline_init_arrive(cluster_shape_mn=(1, 1), is_relaxed=True)

        sA = storage.sA.get_tensor(a_smem_layout.outer, swizzle=a_smem_layout.inner)  # (MMA, MMA_M, MMA_K, STAGE)
        sB = storage.sB.get_tensor(b_smem_layout.outer, swizzle=b_smem_layout.inner)  # (MMA, MMA_N, MMA_K, STAGE)
        sSFA = storage.sSFA.get_tensor(sfa_smem_layout)  # (MMA, MMA_M, MMA_K, STAGE)
        sSFB = storage.sSFB.get_tensor(sfb_smem_layout)  # (MMA, MMA_N, MMA_K, STAGE)

        # (bM, bK, RestM, RestK, RestL) for A and SFA, (bN, bK, RestN, RestK, RestL) for B and SFB,
        # (bM, bN, RestM, RestN, RestL) for c and the partials (RestL * splits)
        gA = cute.local_tile(gmem_a, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None))
        gB = cute.local_tile(gmem_b, cute.slice_(self.mma_tiler, (0, None, None)), (None, None, None))
        gSFA = cute.local_tile(gmem_sfa, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None))
        gSFB = cute.local_tile(gmem_sfb, cute.slice_(self.mma_tiler_sfb, (0, None, None)), (None, None, None))
        gC = cute.local_tile(c, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None, None))
        gPartial = cute.local_tile(partials, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None, None))
        k_tiles, mma_m_tiles, mma_n_tiles = cute.size(gA, mode=[3]), cute.size(gA, mode=[2]), cute.size(gB, mode=[2])
        schedule = Sm100Schedule(cfg, cta, num_ctas, mma_n_tiles, mma_m_tiles, k_tiles, cute.size(gA, mode=[4]))
        first_unit, end_unit, unit_step = schedule.units

        thr_mma, thr_mma_sfb = tiled_mma.get_slice(0), tiled_mma_sfb.get_slice(0)
        tCgA = thr_mma.partition_A(gA)  # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
        tCgB = thr_mma.partition_B(gB)  # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
        tCgSFA = thr_mma.partition_A(gSFA)  # (MMA, MMA_M, MMA_K, RestM, RestK, RestL)
        tCgSFB = thr_mma_sfb.partition_B(gSFB)  # (MMA, MMA_N, MMA_K, RestN, RestK, RestL)
        tCgC = thr_mma.partition_C(gC)  # (MMA, MMA_M, MMA_N, RestM, RestN, RestL)
        tCgPartial = thr_mma.partition_C(gPartial)  # (MMA, MMA_M, MMA_N, RestM, RestN, RestL * splits)

        # ((atom_v, rest_v), STAGE) in shared memory, ((atom_v, rest_v), RestMN, RestK, RestL) in global
        one_cta = cute.make_layout(1)  # no other CTA shares a load
        (tAsA, tAgA), (tBsB, tBgB), (tAsSFA, tAgSFA), (tBsSFB, tBgSFB) = (
            cpasync.tma_partition(atom, 0, one_cta, cute.group_modes(smem, 0, 3), cute.group_modes(gmem, 0, 3))
            for atom, smem, gmem in ((tma_a, sA, tCgA), (tma_b, sB, tCgB), (tma_sfa, sSFA, tCgSFA), (tma_sfb, sSFB, tCgSFB)))
        tAsSFA, tAgSFA = cute.filter_zeros(tAsSFA), cute.filter_zeros(tAgSFA)
        tBsSFB, tBgSFB = cute.filter_zeros(tBsSFB), cute.filter_zeros(tBgSFB)

        tCrA = tiled_mma.make_fragment_A(sA)  # (MMA, MMA_M, MMA_K, STAGE)
        tCrB = tiled_mma.make_fragment_B(sB)  # (MMA, MMA_N, MMA_K, STAGE)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])  # (MMA, MMA_M, MMA_N)
        tCtAcc_layout = tiled_mma.make_fragment_C(cute.append(acc_shape, SM100_ACC_STAGES)).layout  # (MMA, MMA_M, MMA_N, ACC_STAGE)

        pipeline.pipeline_init_wait(cluster_shape_mn=(1, 1))

        # ---- TMA warp: operand and scale tiles into shared memory ----
        if warp_idx == self.TMA_WARP:
            if cutlass.const_expr(cfg.pdl):
                # The next call may launch now: until its epilogue (which waits for this whole grid) it reads its inputs.
                cute.arch.griddepcontrol_launch_dependents()
            load_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, cfg.stages)
            for linear in cutlass.range(first_unit, end_unit, unit_step, unroll=1):
                unit = schedule.unit(linear)
                # ((atom_v, rest_v), RestK) each
                a_tiles = tAgA[(None, unit.mma_m_tile, None, unit.batch)]
                b_tiles = tBgB[(None, unit.mma_n_tile, None, unit.batch)]
                sfa_tiles = tAgSFA[(None, unit.mma_m_tile, None, unit.batch)]
                sfb_tiles = tBgSFB[(None, unit.mma_n_tile * cfg.mma_n // self.mma_tiler_sfb[1], None, unit.batch)]
                for k_tile in cutlass.range(unit.k_begin, unit.k_end, 1, unroll=1):
                    smem_pipeline.producer_acquire(load_state)
                    full = smem_pipeline.producer_get_barrier(load_state)
                    stage = load_state.index
                    cute.copy(tma_a, a_tiles[(None, k_tile)], tAsA[(None, stage)], tma_bar_ptr=full)
                    cute.copy(tma_b, b_tiles[(None, k_tile)], tBsB[(None, stage)], tma_bar_ptr=full)
                    cute.copy(tma_sfa, sfa_tiles[(None, k_tile)], tAsSFA[(None, stage)], tma_bar_ptr=full)
                    cute.copy(tma_sfb, sfb_tiles[(None, k_tile)], tBsSFB[(None, stage)], tma_bar_ptr=full)
                    load_state.advance()
            smem_pipeline.producer_tail(load_state)

        # ---- MMA warp: scales to tensor memory, block-scaled MMAs into the accumulator ----
        if warp_idx == self.MMA_WARP:
            tmem.wait_for_alloc()
            acc_base = tmem.retrieve_ptr(cutlass.Float32)
            tCtAcc = cute.make_tensor(acc_base, tCtAcc_layout)  # (MMA, MMA_M, MMA_N, ACC_STAGE)
            # Tensor memory by column: the accumulator stages, then SFA, then SFB.
            tCtSFA_layout, tCtSFB_layout = self.scale_tmem_layouts(tiled_mma, sfa_smem_layout, sfb_smem_layout)
            sfa_base = acc_base + tcgen05.find_tmem_tensor_col_offset(tCtAcc)
            tCtSFA = cute.make_tensor(cute.recast_ptr(sfa_base, dtype=cutlass.Float8E4M3FN), tCtSFA_layout)  # (MMA, MMA_M, MMA_K)
            sfb_base = sfa_base + tcgen05.find_tmem_tensor_col_offset(tCtSFA)
            tCtSFB = cute.make_tensor(cute.recast_ptr(sfb_base, dtype=cutlass.Float8E4M3FN), tCtSFB_layout)  # (MMA, MMA_N, MMA_K)
            cfg.check_tmem_map(tcgen05.find_tmem_tensor_col_offset(tCtAcc), tcgen05.find_tmem_tensor_col_offset(tCtSFA),
                               tcgen05.find_tmem_tensor_col_offset(tCtSFB))
            # ((ATOM_V, REST_V), Rest_Tiler, MMA_MN, MMA_K, STAGE) in shared memory, without STAGE in TMEM
            copy_sfa, tCsSFA_s2t, tCtSFA_s2t = self._scale_copy_to_tmem(sSFA, tCtSFA)
            copy_sfb, tCsSFB_s2t, tCtSFB_s2t = self._scale_copy_to_tmem(sSFB, tCtSFB)

            mma_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, cfg.stages)
            acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, SM100_ACC_STAGES)
            num_kblocks = cute.size(tCrA, mode=[2])
            for linear in cutlass.range(first_unit, end_unit, unit_step, unroll=1):
                unit = schedule.unit(linear)
                acc = tCtAcc[(None, None, None, acc_state.index)]  # (MMA, MMA_M, MMA_N)
                tCtSFB_unit = tCtSFB  # (MMA, MMA_N, MMA_K)
                if cutlass.const_expr(cfg.mma_n == 64):
                    # An N tile of 64 uses the lower or upper half of SFB's 128-row atom.
                    half = cutlass.Int32(self.sfb_half_columns(unit.mma_n_tile))
                    tCtSFB_unit = cute.make_tensor(cute.recast_ptr(sfb_base + half, dtype=cutlass.Float8E4M3FN), tCtSFB_layout)
                acc_pipeline.producer_acquire(acc_state)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                for k_tile in cutlass.range(unit.k_begin, unit.k_end, 1, unroll=1):
                    smem_pipeline.consumer_wait(mma_state)
                    stage = mma_state.index
                    cute.copy(copy_sfa, tCsSFA_s2t[(None, None, None, None, stage)], tCtSFA_s2t)
                    cute.copy(copy_sfb, tCsSFB_s2t[(None, None, None, None, stage)], tCtSFB_s2t)
                    for kblock in cutlass.range(num_kblocks, unroll_full=True):
                        tiled_mma.set(tcgen05.Field.SFA, tCtSFA[(None, None, kblock)].iterator)
                        tiled_mma.set(tcgen05.Field.SFB, tCtSFB_unit[(None, None, kblock)].iterator)
                        cute.gemm(tiled_mma, acc, tCrA[(None, None, kblock, stage)], tCrB[(None, None, kblock, stage)], acc)
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                    smem_pipeline.consumer_release(mma_state)
                    mma_state.advance()
                acc_pipeline.producer_commit(acc_state)
                acc_state.advance()
            acc_pipeline.producer_tail(acc_state)

        # ---- epilogue warps: accumulator -> registers -> fp16 c (through split-K partials) ----
        if warp_idx <= self.EPILOGUE_WARPS[-1]:
            tmem.allocate(cfg.tmem_columns)
            tmem.wait_for_alloc()
            if cutlass.const_expr(cfg.pdl):
                # The previous call may still read the partials and write c (maybe this c): the first store waits for it.
                cute.arch.griddepcontrol_wait()
            acc_base = tmem.retrieve_ptr(cutlass.Float32)
            tCtAcc = cute.make_tensor(acc_base, tCtAcc_layout)  # (MMA, MMA_M, MMA_N, ACC_STAGE)
            # (T2R, T2R_M, T2R_N, EPI_M, EPI_N, ACC_STAGE) and (T2R, T2R_M, T2R_N, EPI_M, EPI_N, RestM, RestN, RestL)
            copy_t2r, tTR_tAcc, tTR_gC = self._accumulator_copy(tidx, tCtAcc, tCgC, epi_tile)
            _, _, tTR_gPartial = self._accumulator_copy(tidx, tCtAcc, tCgPartial, epi_tile)
            tTR_rAcc = cute.make_rmem_tensor(tTR_gC[(None, None, None, 0, 0, 0, 0, 0)].shape, cutlass.Float32)  # (T2R, T2R_M, T2R_N)
            tTR_rC = cute.make_rmem_tensor(tTR_rAcc.shape, cutlass.Float16)  # (T2R, T2R_M, T2R_N)
            store_c = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), cutlass.Float16)
            subtiles = cute.size(tTR_tAcc, mode=[3]) * cute.size(tTR_tAcc, mode=[4])
            split_k = SplitKReduction.create(splits, min(cfg.partials_ahead, subtiles), copy_t2r, tTR_rAcc, lane)

            epi_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, SM100_ACC_STAGES)
            for linear in cutlass.range(first_unit, end_unit, unit_step, unroll=1):
                unit = schedule.unit(linear)
                mma_m_tile, mma_n_tile, batch = unit.mma_m_tile, unit.mma_n_tile, unit.batch
                # (T2R, T2R_M, T2R_N, EPI_M * EPI_N) each
                acc_tiles = cute.group_modes(tTR_tAcc[(None, None, None, None, None, epi_state.index)], 3, 5)
                c_tiles = cute.group_modes(tTR_gC[(None, None, None, None, None, mma_m_tile, mma_n_tile, batch)], 3, 5)
                acc_pipeline.consumer_wait(epi_state)
                if cutlass.const_expr(splits == 1):
                    self._store_c(copy_t2r, store_c, acc_tiles, c_tiles, tTR_rAcc, tTR_rC, subtiles)
                else:
                    # A warp owns the same 32 accumulator rows in every split and counts its own
                    # arrival, so the decision is warp-uniform, as the collective TMEM loads need.
                    tile_index = (batch * mma_m_tiles + mma_m_tile) * mma_n_tiles + mma_n_tile
                    split_k.finish(acc_tiles, c_tiles,
                                   cute.group_modes(tTR_gPartial[(None, None, None, None, None, mma_m_tile, mma_n_tile, None)], 3, 5),
                                   batch * splits, unit.split,
                                   counters.iterator + cute.crd2idx((warp_idx, tile_index), counters.layout))
                cute.arch.fence_view_async_tmem_load()
                acc_pipeline.consumer_release(epi_state)
                epi_state.advance()

            tmem.relinquish_alloc_permit()
            self.epilogue_barrier.arrive_and_wait()
            tmem.free(acc_base)

    # ----- the MMA warp's steps -----

    def scale_tmem_layouts(self, tiled_mma: cute.TiledMma, sfa_smem_layout: cute.Layout, sfb_smem_layout: cute.Layout):
        """SFA's and SFB's TMEM layouts for one stage (tests/test_scale_tmem_layout.py holds them to the PTX ISA's tcgen05.cp)."""
        return (blockscaled_layout.make_tmem_layout_sfa(tiled_mma, self.mma_tiler, SF_VEC_SIZE, _one_stage(sfa_smem_layout)),
                blockscaled_layout.make_tmem_layout_sfb(tiled_mma, self.mma_tiler, SF_VEC_SIZE, _one_stage(sfb_smem_layout)))

    @staticmethod
    def sfb_half_columns(mma_n_tile):
        """An odd N tile of 64 finds its scales (rows 64-127 of SFB's atom) two columns further."""
        return (mma_n_tile % 2) * 2

    def _scale_copy_to_tmem(self, smem_scales: cute.Tensor, tmem_scales: cute.Tensor):
        """tcgen05.cp of one stage's scale tile (the atoms' broadcast K mode removed)."""
        smem_compact = cute.filter_zeros(smem_scales)  # (MMA, MMA_MN, MMA_K, STAGE), the broadcast modes of size 1
        tmem_compact = cute.filter_zeros(tmem_scales)  # (MMA, MMA_MN, MMA_K)
        atom = cute.make_copy_atom(tcgen05.Cp4x32x128bOp(tcgen05.CtaGroup.ONE), cutlass.Float8E4M3FN)
        tiled_copy = tcgen05.make_s2t_copy(atom, tmem_compact)
        thr_copy = tiled_copy.get_slice(0)
        smem_src = tcgen05.get_s2t_smem_desc_tensor(tiled_copy, thr_copy.partition_S(smem_compact))
        return tiled_copy, smem_src, thr_copy.partition_D(tmem_compact)

    # ----- the epilogue's steps -----

    @cute.jit
    def _store_c(self, copy_t2r: cute.TiledCopy, store_c: cute.CopyAtom, acc_tiles: cute.Tensor,
                 c_tiles: cute.Tensor, tTR_rAcc: cute.Tensor, tTR_rC: cute.Tensor, subtiles: cutlass.Constexpr):
        for sub in cutlass.range(subtiles, unroll=1):
            cute.copy(copy_t2r, acc_tiles[(None, None, None, sub)], tTR_rAcc)
            tTR_rC.store(tTR_rAcc.load().to(cutlass.Float16))
            cute.copy(store_c, tTR_rC, c_tiles[(None, None, None, sub)])

    def _accumulator_copy(self, tidx, tCtAcc: cute.Tensor, tCgOut: cute.Tensor, epi_tile: cute.Tile):
        """TMEM -> register copy of the accumulator in epilogue subtiles, and the matching per-thread view of c or the
        partials. Thread i of warp w holds accumulator row 32w + i, column 32w + i of c: a warp stores 64 bytes a row of c."""
        load_op = cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition(SM100_EPILOGUE_COLUMNS)), cutlass.Float32)
        acc_epi = cute.flat_divide(tCtAcc[((None, None), 0, 0, None)], epi_tile)  # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N, ACC_STAGE)
        tiled_copy = tcgen05.make_tmem_copy(load_op, acc_epi[(None, None, 0, 0, 0)])
        thr_copy = tiled_copy.get_slice(tidx)
        # (EPI_TILE_M, EPI_TILE_N, EPI_M, EPI_N, RestM, RestN, RestL)
        out_epi = cute.flat_divide(tCgOut[((None, None), 0, 0, None, None, None)], epi_tile)
        return tiled_copy, thr_copy.partition_S(acc_epi), thr_copy.partition_D(out_epi)


def _one_stage(layout):
    """Stage 0 of a staged shared-memory layout."""
    return cute.slice_(layout, (None, None, None, 0))


@dataclass(frozen=True)  # frozen: the kernel's loops may then use it without carrying it
class SplitKReduction:
    """Split-K across CTAs in one kernel: every split of a tile stores its fp32 partial and counts
    its arrival; the last adds the others' (loaded `ahead` subtiles early), writes c and zeroes the
    counter: no second kernel, no memset. experiments/splitk_protocol runs it on sm_90a."""

    splits: int
    ahead: int
    load_accumulator: object  # the copy from the accumulator's subtiles into `registers`
    registers: cute.Tensor  # fp32 (T2R, T2R_M, T2R_N): one subtile of the accumulator
    lane: object
    halves: cute.Tensor  # fp16 (T2R, T2R_M, T2R_N): one subtile of c
    slots: list  # [slot][other split] of fp32 (T2R, T2R_M, T2R_N): the other partials loaded ahead

    @classmethod
    def create(cls, splits: int, ahead: int, load_accumulator, registers: cute.Tensor, lane) -> SplitKReduction:
        halves = cute.make_rmem_tensor(registers.shape, cutlass.Float16)
        slots = [[cute.make_rmem_tensor(registers.shape, cutlass.Float32) for _ in range(splits - 1)]
                 for _ in range(max(ahead, 1))]
        return cls(splits, ahead, load_accumulator, registers, lane, halves, slots)

    @staticmethod
    def _move(dtype):
        return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype)

    @staticmethod
    def other_split(j, split):
        """The j-th of a tile's splits but `split`, for j = 0, 1, ..."""
        return j + 1 - cutlass.min(cutlass.max(split - j, 0), 1)

    @cute.jit
    def finish(self, accumulator: cute.Tensor, c_tiles: cute.Tensor, partials: cute.Tensor,
               first_slot: cutlass.Int32, split: cutlass.Int32, counter: cute.Pointer):
        """This split's part of a tile. `accumulator`, `c_tiles`: (T2R, T2R_M, T2R_N, SUBTILE);
        `partials`: (T2R, T2R_M, T2R_N, SUBTILE, slot), the tile's in slots first_slot + split."""
        own = partials[(None, None, None, None, first_slot + split)]
        for sub in cutlass.range(cute.size(accumulator, mode=[3]), unroll=1):
            cute.copy(self.load_accumulator, accumulator[(None, None, None, sub)], self.registers)
            cute.copy(self._move(cutlass.Float32), self.registers, own[(None, None, None, sub)])
        if self._arrive(counter) == self.splits - 1:
            self._add_others_and_store_c(accumulator, c_tiles, partials, first_slot, split)
            if self.lane == 0:
                cute.arch.atomic_exch(counter, cutlass.Int32(0), sem="relaxed", scope="gpu")

    @cute.jit
    def _arrive(self, counter: cute.Pointer) -> cutlass.Int32:
        """Counts this warp's arrival; every lane gets the arrivals before it. Release: the warp
        barrier puts every lane's partial stores before the fence, which every lane runs (no
        lane-0-only order, should ptxas drop a converged warp's barrier), then the relaxed count."""
        cute.arch.sync_warp()
        cute.arch.fence_acq_rel_gpu()
        arrived = cutlass.Int32(0)
        if self.lane == 0:
            arrived = cute.arch.atomic_add(counter, cutlass.Int32(1), sem="relaxed", scope="gpu")
        return cute.arch.shuffle_sync(arrived, 0)

    @cute.jit
    def _add_others_and_store_c(self, accumulator: cute.Tensor, c_tiles: cute.Tensor, partials: cute.Tensor,
                                first_slot: cutlass.Int32, split: cutlass.Int32):
        """The last arrival: the other partials added to the accumulator subtile by subtile, the
        sums written to fp16 c. Acquire: the count followed by the fence; the warp barrier puts
        every lane's loads after it (a shuffle orders nothing in memory)."""
        cute.arch.fence_acq_rel_gpu()
        cute.arch.sync_warp()
        subtiles = cute.size(accumulator, mode=[3])
        ahead = self.ahead
        others = [partials[(None, None, None, None, first_slot + self.other_split(j, split))]
                  for j in range(self.splits - 1)]
        for sub in cutlass.range_constexpr(ahead):
            self._load_partials(others, sub, self.slots[sub])
        for sub in cutlass.range_constexpr(subtiles):
            slot = self.slots[sub % len(self.slots)]
            if cutlass.const_expr(ahead == 0):
                self._load_partials(others, sub, slot)
            cute.copy(self.load_accumulator, accumulator[(None, None, None, sub)], self.registers)
            for j in cutlass.range_constexpr(len(others)):
                self.registers.store(self.registers.load() + slot[j].load())
            if cutlass.const_expr(0 < ahead and sub + ahead < subtiles):
                self._load_partials(others, sub + ahead, slot)  # the slot just added
            self.halves.store(self.registers.load().to(cutlass.Float16))
            cute.copy(self._move(cutlass.Float16), self.halves, c_tiles[(None, None, None, sub)])

    def _load_partials(self, others: list, sub: int, slot: list) -> None:
        for other, registers in zip(others, slot):
            cute.copy(self._move(cutlass.Float32), other[(None, None, None, sub)], registers)


# One CTA's work on one MMA (M, N) output tile: K tiles [k_begin, k_end), the `split`-th K range (and partial slot).
WorkUnit = NamedTuple("WorkUnit", [(name, object) for name in ("mma_m_tile", "mma_n_tile", "batch", "k_begin", "k_end", "split")])


@dataclass(frozen=True)  # frozen: a CuTeDSL `if` may then read it without carrying it
class Sm100Schedule:
    """The work units of one CTA, alike in all its warps (plain arithmetic, which host tests run on ints), dealt round-robin:
    a warp takes `schedule.unit(linear)` over `range(*schedule.units)`."""

    config: Sm100Config
    cta: object
    ctas: object
    mma_n_tiles: object
    mma_m_tiles: object
    k_tiles: object
    batches: object

    @property
    def units(self) -> tuple:
        return self.cta, self.mma_n_tiles * self.mma_m_tiles * self.batches * self.config.split_k, self.ctas

    def unit(self, linear) -> WorkUnit:
        mma_n_tile, split, mma_m_tile, batch = tile_coords(linear, self.mma_n_tiles, self.config.split_k, self.mma_m_tiles)
        return WorkUnit(mma_m_tile, mma_n_tile, batch, *split_k_range(split, self.k_tiles, self.config.split_k), split)


def split_k_range(split, k_tiles, splits):
    """K tiles [start, stop) of one split: contiguous, as even as integer division allows."""
    return (split * k_tiles) // splits, ((split + 1) * k_tiles) // splits


def tile_coords(linear, inner_tiles, splits, outer_tiles):
    """Work unit `linear` -> (inner tile, split, outer tile, batch). Inner tiles, then splits, vary fastest, so units that
    read the same rows of the large operand (b, the MMA's A, along the outer tiles) run side by side, sharing them in L2."""
    inner, rest = linear % inner_tiles, linear // inner_tiles
    split, rest = rest % splits, rest // splits
    return inner, split, rest % outer_tiles, rest // outer_tiles


# ===== configurations and the fallback ladder =====

@dataclass(frozen=True)
class Sm100Config:
    """One compiled variant of the kernel, in the MMA's roles: its M runs over the problem's N, its N over M in `mma_n` tiles."""

    mma_n: int  # 64 or 128 (rows of c per tile)
    split_k: int  # K ranges added into one output tile by the last to finish
    stages: int  # shared-memory pipeline depth
    pdl: bool = True  # programmatic dependent launch: the next call loads and multiplies while this one ends
    # CTAs an SM the resources leave room for, so that with PDL the next call's CTA starts beside
    # this call's on every SM: shared and tensor memory are checked here, the registers by a compile test.
    ctas_per_sm: int = 1

    def __post_init__(self):
        shared, ctas = self.smem_bytes + SM100_STATIC_SMEM_BYTES, self.ctas_per_sm
        if shared > self.smem_limit(ctas) or ctas * self.tmem_columns > SM100_TMEM_COLUMNS:
            raise ValueError(f"{self.describe()}: {shared} bytes of shared memory (at most {self.smem_limit(ctas)}) and "
                             f"{self.tmem_columns} tensor-memory columns (at most {SM100_TMEM_COLUMNS // ctas}) "
                             f"for each of {ctas} CTAs an SM")

    @staticmethod
    def stage_bytes(mma_n: int) -> int:
        """A, B and both scale tiles of one stage (SFB's always 128 rows: its atoms' height)."""
        return (SM100_MMA_M + mma_n) * SM100_TILE_K // 2 + (SM100_MMA_M + _round_up(mma_n, 128)) * (SM100_TILE_K // SF_VEC_SIZE)

    @staticmethod
    def smem_limit(ctas_per_sm: int) -> int:
        """Shared memory one CTA may use, static and dynamic, where an SM holds `ctas_per_sm`."""
        return min(SM100_SMEM_BYTES, SM100_SMEM_PER_SM // ctas_per_sm - SM100_SMEM_RESERVED)

    @classmethod
    def max_stages(cls, mma_n: int, ctas_per_sm: int = 1) -> int:
        return (cls.smem_limit(ctas_per_sm) - SM100_STATIC_SMEM_BYTES - SM100_BARRIER_BYTES) // cls.stage_bytes(mma_n)

    @classmethod
    def one_cta(cls, mma_n: int, split_k: int = 1) -> Sm100Config:
        """The deepest pipeline one CTA an SM holds, without PDL: what the ladder falls back to."""
        return cls(mma_n, split_k, cls.max_stages(mma_n), pdl=False)

    @property
    def smem_bytes(self) -> int:
        return SM100_BARRIER_BYTES + self.stages * self.stage_bytes(self.mma_n)

    @property
    def tmem_columns(self) -> int:
        """Accumulator stages (mma_n columns each), SFA and SFB (4 columns a 32 atom rows), to a power of two for tcgen05.alloc."""
        used = SM100_ACC_STAGES * self.mma_n + (SM100_MMA_M // 32) * 4 + (_round_up(self.mma_n, 128) // 32) * 4
        return max(32, 1 << (used - 1).bit_length())

    def check_tmem_map(self, accumulator: int, sfa: int, sfb: int) -> None:
        """At trace time: the tensor-memory columns the kernel's tensors span fit the allocation."""
        if accumulator + sfa + sfb > self.tmem_columns:
            raise ValueError(f"{self.describe()}: tensor memory takes {accumulator + sfa + sfb} columns "
                             f"({accumulator} accumulator, {sfa} SFA, {sfb} SFB), {self.tmem_columns} allocated")

    @property
    def partials_ahead(self) -> int:
        """Subtiles the split-K reduction loads other partials ahead: what SM100_PARTIAL_REGISTERS hold (0 past 2 others)."""
        return SM100_PARTIAL_REGISTERS // ((self.split_k - 1) * SM100_EPILOGUE_COLUMNS) if self.split_k > 1 else 0

    def tiles(self, problem: Problem) -> int:
        """Output tiles of `problem`, all batches."""
        return problem.l * (problem.n // SM100_MMA_M) * (problem.m // self.mma_n)

    def grid_ctas(self, problem: Problem, num_sms: int) -> int:
        """One CTA an SM, no more than the work units."""
        return min(num_sms, self.tiles(problem) * self.split_k)

    def check_problem(self, problem: Problem, num_sms: int = SM100_NUM_SMS) -> None:
        """Every split needs a K tile, or its MMA warp would commit an accumulator it never wrote."""
        if problem.k // SM100_TILE_K < self.split_k:
            raise ValueError(f"split-K {self.split_k} needs at least {self.split_k} K tiles of {SM100_TILE_K}; "
                             f"K = {problem.k} has {problem.k // SM100_TILE_K}")

    def describe(self) -> str:
        return (f"tile {SM100_MMA_M}x{self.mma_n}x{SM100_TILE_K} (N x M x K), split-K {self.split_k}, {self.stages} stages, "
                f"PDL {'on' if self.pdl else 'off'}" + (f", {self.ctas_per_sm} CTAs an SM" if self.ctas_per_sm > 1 else ""))


# The benchmark shapes' configurations (docs/b200.md says why): 128 x 7168 x 16384 the first-placed entry's tiles, split-K
# and depth; the others whole K in 64-row tiles, 128 x 7168 x 2048 (112 CTAs: too few SMs left for the next call) two CTAs an SM.
SM100_BENCHMARK_CONFIGS = {
    Problem(128, 7168, 16384, 1): Sm100Config(mma_n=128, split_k=2, stages=6),
    Problem(128, 4096, 7168, 1): Sm100Config(mma_n=64, split_k=1, stages=8),
    Problem(128, 7168, 2048, 1): Sm100Config(mma_n=64, split_k=1, stages=Sm100Config.max_stages(64, 2), ctas_per_sm=2),
}
SM100_MIN_K_TILES_PER_SPLIT = 4  # K = 1024 per split at least: the partials stay small beside the operands
SM100_CONSERVATIVE_ENV = "NVFP4_SM100_CONSERVATIVE"  # 1: no split-K, no PDL, one CTA an SM (for a first B200 run that fails)

# What the ladder drops, one at a time in this order; a rung's traits are those it keeps.
PDL, TWO_CTAS, SPLIT_K, HALF_TILES, TVM_FFI = "PDL", "two CTAs an SM", "split-K", "64-row tiles", "TVM-FFI"


def sm100_traits(config: Sm100Config) -> frozenset:
    return frozenset(trait for trait, kept in ((PDL, config.pdl), (TWO_CTAS, config.ctas_per_sm > 1),
                                               (SPLIT_K, config.split_k > 1), (HALF_TILES, config.mma_n == 64)) if kept)


def sm100_ladder(problem: Problem, num_sms: int = SM100_NUM_SMS) -> list[tuple[str, Sm100Config]]:
    """The configurations the self-check tries in turn, each without one more feature, named for the fallback lines; no repeats."""
    chosen = sm100_config(problem, num_sms)
    rungs = []
    for name, config in (("the chosen configuration", chosen),
                         ("the chosen configuration without PDL", dataclasses.replace(chosen, pdl=False)),
                         ("one CTA an SM without PDL", Sm100Config.one_cta(chosen.mma_n, chosen.split_k)),
                         ("whole K without PDL", sm100_config(problem, num_sms, conservative=True)),
                         ("128-row tiles over whole K", Sm100Config.one_cta(128))):
        if all(config != earlier for _, earlier in rungs):
            rungs.append((name, config))
    return rungs


def sm100_config(problem: Problem, num_sms: int = SM100_NUM_SMS, conservative: bool | None = None) -> Sm100Config:
    """The benchmark shapes' configurations, else (docs/b200.md#configuration) 64-row tiles while the tiles fill at most
    half the SMs, two splits where every unit still has an SM of its own, two CTAs an SM for whole-K 64-row tiles that
    fill more than half. `conservative` (default: as NVFP4_SM100_CONSERVATIVE says) takes split-K, PDL and two CTAs away."""
    if conservative is None:
        conservative = os.environ.get(SM100_CONSERVATIVE_ENV) == "1"
    config = SM100_BENCHMARK_CONFIGS.get(problem)
    if config is None:
        mma_m_tiles = problem.n // SM100_MMA_M
        mma_n = 64 if mma_m_tiles * (problem.m // 128) * problem.l * 2 <= num_sms else 128
        units = mma_m_tiles * (problem.m // mma_n) * problem.l
        # Two splits at most, as on the benchmarks, whose reduction the official tests then run.
        split_k = 2 if units * 2 <= num_sms and problem.k // SM100_TILE_K // 2 >= SM100_MIN_K_TILES_PER_SPLIT else 1
        ctas_per_sm = 2 if mma_n == 64 and split_k == 1 and units * 2 > num_sms else 1
        config = Sm100Config(mma_n, split_k, Sm100Config.max_stages(mma_n, ctas_per_sm), ctas_per_sm=ctas_per_sm)
    return Sm100Config.one_cta(config.mma_n) if conservative else config


class Sm100Gemm:
    """Host side of `Sm100BlockScaledGemm`: configurations, compiled variants, launch plans, rungs, compile check entry."""

    ARCH = "sm_100a"
    TRIAL_IN_CHILD = True  # never run on its chip: each rung is tried in the trial process first
    config_for = staticmethod(sm100_config)

    @classmethod
    def compile(cls, config: Sm100Config, arch: str | None = None, extra_options: str = "",
                tvm_ffi: bool = HAVE_TVM_FFI, launch_bound: int = 1):
        """`config` compiled for any problem size (sizes are runtime arguments), and the kernel object that traced it."""
        kernel = Sm100BlockScaledGemm(config, launch_bound)
        pointers, sizes = [fake_pointer(t) for t in Sm100BlockScaledGemm.POINTER_TYPES], [cutlass.Int32(1)] * 5
        return cute.compile(kernel, *pointers, *sizes, options=compile_options(arch, tvm_ffi=tvm_ffi, extra=extra_options)), kernel

    @classmethod
    def compile_for_check(cls, problem: Problem, arch: str, extra_options: str) -> CompileFacts:
        config = cls.config_for(problem)
        _, kernel = cls.compile(config, arch, extra_options, tvm_ffi=False)
        if kernel.launch_smem_bytes != config.smem_bytes:  # what the stage counts are sized by
            raise AssertionError(f"{config.describe()}: the kernel's shared storage takes {kernel.launch_smem_bytes} "
                                 f"bytes, Sm100Config.smem_bytes counts {config.smem_bytes}")
        return CompileFacts(config.describe(), kernel.launch_smem_bytes, config.tmem_columns)

    @classmethod
    def launch_plan(cls, problem: Problem, device: torch.device, config: Sm100Config | None = None,
                    conservative: bool = False, tvm_ffi: bool = HAVE_TVM_FFI) -> LaunchPlan:
        """The plan for `problem` on `device`, for `config` or else `sm100_config`'s."""
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        config = config or sm100_config(problem, num_sms, conservative=True if conservative else None)
        config.check_problem(problem, num_sms)
        compiled = compiled_kernel((cls.__name__, config, tvm_ffi),
                                   lambda: cls.compile(config, tvm_ffi=tvm_ffi, launch_bound=config.ctas_per_sm)[0], tvm_ffi)
        counters = len(Sm100BlockScaledGemm.EPILOGUE_WARPS) * config.tiles(problem)
        workspace_args, workspace = split_k_workspace(problem, config.split_k, counters, device, tvm_ffi)
        scalars = int32_args(*problem, config.grid_ctas(problem, num_sms), tvm_ffi=tvm_ffi)
        return LaunchPlan(compiled, Sm100BlockScaledGemm.POINTER_TYPES[:5], workspace_args + scalars, workspace, config, tvm_ffi)

    @classmethod
    def rungs(cls, problem: Problem, device: torch.device) -> list[Rung]:
        """`sm100_ladder`'s configurations, each as the plans call it and, where TVM-FFI is
        installed, then through CuTe pointers (taken only where the TVM-FFI one raised)."""
        num_sms = torch.cuda.get_device_properties(device).multi_processor_count
        return [Rung(name + ("" if tvm_ffi == HAVE_TVM_FFI else " without TVM-FFI"),
                     functools.partial(cls.launch_plan, problem, device, config, tvm_ffi=tvm_ffi),
                     sm100_traits(config) | ({TVM_FFI} if tvm_ffi else set()))
                for name, config in sm100_ladder(problem, num_sms) for tvm_ffi in ((True, False) if HAVE_TVM_FFI else (False,))]


# ===== host call path: validation, compiled kernels, launch plans =====

def permuted_scale_layout(mn: int, k: int, l: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Shape and strides of `sfa_permuted` / `sfb_permuted`, (32, 4, rest_mn, 4, rest_k, L): the tensor cores' scale
    atoms as `blockscaled_layout.tile_atom_to_shape_SF` describes them (the kernel reads them in place), each 512-byte
    atom 128 rows x 4 scale columns as [row % 32][row // 32 % 4][column], the atoms along K, then MN, then L."""
    rest_mn, rest_k = mn // 128, k // (SF_VEC_SIZE * 4)
    return (32, 4, rest_mn, 4, rest_k, l), (16, 4, rest_k * SF_ATOM_BYTES, 1, SF_ATOM_BYTES, rest_mn * rest_k * SF_ATOM_BYTES)


_NAMES = ("a", "b", "sfa", "sfb", "sfa_permuted", "sfb_permuted", "c")
_FP4, _FP8 = torch.float4_e2m1fn_x2, torch.float8_e4m3fn
_DTYPES = (_FP4, _FP4, _FP8, _FP8, _FP8, _FP8, torch.float16)
_RANKS = (3, 3, 3, 3, 6, 6, 3)
# The tensors the kernel addresses (compact, batch outermost), in `_expected_layouts`' stride order, and their layouts.
_LAYOUT_NAMES = {"a": "K-major (strides (K/2, 1, M*K/2))", "b": "K-major (strides (K/2, 1, N*K/2))",
                 "c": "N-contiguous (strides (N, 1, M*N))", "sfa_permuted": "the (32, 4, rest_m, 4, rest_k, L) atom layout",
                 "sfb_permuted": "the (32, 4, rest_n, 4, rest_k, L) atom layout"}

# What a launch needs of a valid input: its problem, CUDA device index and `operand_addresses`.
Call = NamedTuple("Call", [("problem", Problem), ("device", int), ("addresses", tuple)])


def operand_addresses(data) -> tuple[int, ...]:
    """a, b, sfa_permuted, sfb_permuted and c: what the kernel reads and writes."""
    a, b, _, _, sfa_permuted, sfb_permuted, c = data
    return a.data_ptr(), b.data_ptr(), sfa_permuted.data_ptr(), sfb_permuted.data_ptr(), c.data_ptr()


def validate_inputs(data) -> Call:
    """Everything the kernel assumes, before anything touches a GPU, on every call: a valid input takes
    `_accept_layout_fast` and one device check; the rest `_check_inputs`, which names the first broken constraint."""
    try:
        accepted = _accept_layout_fast(data)
        # get_device() is -1 off CUDA: c on CUDA and all seven on one index are seven on it.
        if accepted is not None and data[6].is_cuda and len({t.get_device() for t in data}) == 1:
            return Call(accepted[0], data[6].get_device(), accepted[1])
    except (AttributeError, IndexError, TypeError, ValueError):  # not seven tensors: the full check says why
        pass
    return Call(_check_inputs(data), data[6].get_device(), operand_addresses(data))


@functools.lru_cache(maxsize=64)
def _expected_layouts(m: int, n: int, k: int, l: int) -> tuple[Problem, tuple, tuple]:
    """The problem, the seven tensors' shapes, and the strides of `_LAYOUT_NAMES`' tensors."""
    half_k, sf_k = k // 2, k // SF_VEC_SIZE
    (sfa_shape, sfa_strides), (sfb_shape, sfb_strides) = permuted_scale_layout(m, k, l), permuted_scale_layout(n, k, l)
    shapes = ((m, half_k, l), (n, half_k, l), (m, sf_k, l), (n, sf_k, l), sfa_shape, sfb_shape, (m, n, l))
    strides = ((half_k, 1, m * half_k), (half_k, 1, n * half_k), (n, 1, m * n), sfa_strides, sfb_strides)
    return Problem(m, n, k, l), shapes, strides


def _accept_layout_fast(data) -> tuple[Problem, tuple[int, ...]] | None:
    """The problem and operand addresses of an input valid with exactly the compact strides, its device aside; else None."""
    if not isinstance(data, (tuple, list)):
        return None
    a, b, sfa, sfb, sfa_permuted, sfb_permuted, c = data
    if (a.dtype, b.dtype, sfa.dtype, sfb.dtype, sfa_permuted.dtype, sfb_permuted.dtype, c.dtype) != _DTYPES:
        return None
    m, half_k, l = a.shape
    n, k = b.shape[0], 2 * half_k
    if m <= 0 or n <= 0 or k <= 0 or l <= 0 or m % MN_ALIGN or n % MN_ALIGN or k % K_ALIGN:
        return None
    problem, shapes, strides = _expected_layouts(m, n, k, l)
    addresses = operand_addresses(data)
    if ((a.shape, b.shape, sfa.shape, sfb.shape, sfa_permuted.shape, sfb_permuted.shape, c.shape) != shapes
            or (a.stride(), b.stride(), c.stride(), sfa_permuted.stride(), sfb_permuted.stride()) != strides
            or (addresses[0] | addresses[1] | addresses[2] | addresses[3] | addresses[4]) % GMEM_ALIGN):
        return None
    return problem, addresses


def _check_inputs(data) -> Problem:
    """Every constraint in turn, ValueError at the first broken; the device last, so a bad CPU input reports its real fault."""
    if not isinstance(data, (tuple, list)) or len(data) != 7:
        raise ValueError("data must be the 7-tuple (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c)")
    for name, t, dtype, rank in zip(_NAMES, data, _DTYPES, _RANKS):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dtype:
            raise ValueError(f"{name} must have dtype {dtype}, got {t.dtype}")
        if t.dim() != rank:
            raise ValueError(f"{name} must have {rank} dimensions, got shape {tuple(t.shape)}")

    a, b, sfa, sfb, sfa_permuted, sfb_permuted, c = data
    (m, _, l), n, k = a.shape, b.shape[0], 2 * a.shape[1]
    if l < 1:
        raise ValueError(f"L (a.shape[2]) must be >= 1, got {l}")
    for name, size, multiple in (("M", m, MN_ALIGN), ("N", n, MN_ALIGN), ("K", k, K_ALIGN)):
        if size <= 0 or size % multiple:
            raise ValueError(f"{name} must be a positive multiple of {multiple}, got {name}={size}")
    problem, expected_shapes, expected_strides = _expected_layouts(m, n, k, l)
    for name, t, shape in zip(_NAMES, data, expected_shapes):
        if t.shape != shape:
            raise ValueError(f"{name} must have shape {shape} for M={m}, N={n}, K={k}, L={l}; got "
                             f"{tuple(t.shape)} (M, N, K, L must agree across all tensors)")
    for name, t, strides in zip(_LAYOUT_NAMES, (a, b, c, sfa_permuted, sfb_permuted), expected_strides):
        # A dimension of extent 1 never moves the address, so its stride is free.
        if any(size != 1 and got != want for size, got, want in zip(t.shape, t.stride(), strides)):
            raise ValueError(f"{name} must be laid out as {_LAYOUT_NAMES[name]}; expected strides "
                             f"{strides}, got {t.stride()}")
        if t.data_ptr() % GMEM_ALIGN:
            raise ValueError(f"{name} must start at a {GMEM_ALIGN}-byte aligned address (TMA needs it), "
                             f"got {t.data_ptr():#x}")
    device = a.get_device()
    for name, t in zip(_NAMES, data):
        if t.get_device() < 0 or not t.is_cuda:
            raise ValueError(f"{name} must be on a CUDA device, got {t.device}")
        if t.get_device() != device:
            raise ValueError(f"all tensors must be on one CUDA device: {name} is on {t.device}, a on {a.device}")
    return problem


def compile_options(arch: str | None = None, *, tvm_ffi: bool = HAVE_TVM_FFI, extra: str = "") -> str:
    return " ".join(part for part in (arch and f"--gpu-arch {arch}", tvm_ffi and "--enable-tvm-ffi", extra) if part)


def fake_pointer(dtype) -> cute.Pointer:
    """A global-memory pointer that only carries a type, for compiling without a device."""
    return make_ptr(dtype, 0, cute.AddressSpace.gmem, assumed_align=GMEM_ALIGN)


@functools.lru_cache(maxsize=4096)
def pointer_arg(dtype, address: int, tvm_ffi: bool = HAVE_TVM_FFI):
    """A pointer argument: the bare address through TVM-FFI, else a CuTe pointer, cached for calls on the same buffers."""
    return address if tvm_ffi else make_ptr(dtype, address, cute.AddressSpace.gmem, assumed_align=GMEM_ALIGN)


def int32_args(*values: int, tvm_ffi: bool = HAVE_TVM_FFI) -> tuple:
    """Int32 arguments: ints through TVM-FFI, else CuTe Int32s made once a plan (converting each call doubles marshalling)."""
    return values if tvm_ffi else tuple(map(cutlass.Int32, values))


_COMPILED: dict[tuple, Callable] = {}


def compiled_kernel(key: tuple, build: Callable[[], Callable], tvm_ffi: bool = HAVE_TVM_FFI) -> Callable:
    """The compiled kernel for `key`, built by `build()` once in this process, as plans call it."""
    if key not in _COMPILED:
        _COMPILED[key] = bare_tvm_ffi_function(build()) if tvm_ffi else build()
    return _COMPILED[key]


def bare_tvm_ffi_function(compiled: Callable) -> Callable:
    """The TVM-FFI function of a kernel compiled with --enable-tvm-ffi (else `compiled`): the compiled
    object's __call__ inspects every argument, under CuTeDSL 4.5 longer than the launch takes."""
    try:
        import tvm_ffi
    except ImportError:  # then nothing was compiled for TVM-FFI
        return compiled
    # CuTeDSL 4.8 holds the function; in 4.5 the compiled object is one (a subclass).
    function = getattr(compiled, "__tvm_ffi_object__", lambda: compiled)()
    return tvm_ffi.Function.__call__.__get__(function) if isinstance(function, tvm_ffi.Function) else compiled


# For the compile checker: a configuration's description, its launch's dynamic shared memory, its TMEM columns (or None).
CompileFacts = NamedTuple("CompileFacts", [("config", str), ("smem_bytes", int), ("tmem_columns", object)])


@dataclass
class LaunchPlan:
    """What a call needs besides the operand addresses, built once per problem and device."""

    kernel: Callable  # the compiled kernel
    operand_types: tuple  # CuTe element types of a, b, sfa_permuted, sfb_permuted, c
    trailing_args: tuple  # the workspace pointers, then the scalar arguments
    workspace: tuple  # the tensors behind the workspace pointers: alive as long as the plan
    config: object = None  # what the kernel was compiled for (its `describe()` names it)
    tvm_ffi: bool = HAVE_TVM_FFI  # called through TVM-FFI (bare addresses), else CuTe pointers

    def launch(self, addresses: tuple[int, ...]) -> None:
        operands = addresses if self.tvm_ffi else map(functools.partial(pointer_arg, tvm_ffi=False), self.operand_types, addresses)
        self.kernel(*operands, *self.trailing_args)


def split_k_partials(problem: Problem, splits: int, device: torch.device) -> torch.Tensor:
    """fp32 partial sums of every split of every output tile (one element where unsplit)."""
    return torch.empty(splits * problem.l * problem.m * problem.n if splits > 1 else 1, dtype=torch.float32, device=device)


def split_k_workspace(problem: Problem, splits: int, counter_count: int, device: torch.device, tvm_ffi: bool = HAVE_TVM_FFI) -> tuple:
    """`SplitKReduction`'s partials and arrival counters, and pointers to them; the counters zeroed once: no call memsets."""
    partials = split_k_partials(problem, splits, device)
    counters = torch.zeros(counter_count if splits > 1 else 1, dtype=torch.int32, device=device)
    args = (pointer_arg(cutlass.Float32, partials.data_ptr(), tvm_ffi), pointer_arg(cutlass.Int32, counters.data_ptr(), tvm_ffi))
    return args, (partials, counters)


# ===== the self-check: the first call of a problem checks its own result =====

# Read once: NVFP4_SELF_CHECK=0 skips the first call's check (timing studies), NVFP4_TRIAL_IN_CHILD=0 the trial process.
SELF_CHECK_ENV, TRIAL_IN_CHILD_ENV = "NVFP4_SELF_CHECK", "NVFP4_TRIAL_IN_CHILD"
SELF_CHECK = os.environ.get(SELF_CHECK_ENV, "1") != "0"
TRIAL_IN_CHILD = os.environ.get(TRIAL_IN_CHILD_ENV, "1") != "0"
FALLBACK_PREFIX, HANG_PREFIX = "nvfp4 self-check FALLBACK:", "nvfp4 self-check HANG:"
NO_TRIAL_PROCESS = "nvfp4 self-check: no trial process"
# The competition's check (its reference.py): |c - reference| <= atol + rtol * |reference|.
SELF_CHECK_RTOL = SELF_CHECK_ATOL = 1e-3
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)
_EXACT_K_CHUNK = 2048  # K elements decoded at a time: bounds the float64 operands' memory


def exact_product(data) -> torch.Tensor:
    """C of `data` in float64, (M, N, L), on its device. Exact: a product of two e2m1 values and two e4m3 scales has at
    most 12 significant bits and is a multiple of 2^-20, so sums are exact below 2^33; the competition's stay below 2^22."""
    a, b, sfa, sfb, _, _, _ = data
    m, half_k, l = a.shape
    out = torch.zeros((l, m, b.shape[0]), dtype=torch.float64, device=a.device)
    table = torch.tensor(_E2M1_VALUES, dtype=torch.float64, device=a.device)

    def decoded(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        # (rows, k // 2) e2m1 codes (even element in the low nibble) times (rows, k // 16) e4m3 scales: (rows, k) float64, exact.
        codes = packed.view(torch.uint8).to(torch.int64)
        values = torch.stack((table[codes & 15], table[codes >> 4]), dim=2).flatten(1)
        return values * scales.to(torch.float64).repeat_interleave(SF_VEC_SIZE, dim=1)

    for batch in range(l):
        for begin in range(0, 2 * half_k, _EXACT_K_CHUNK):
            end = begin + _EXACT_K_CHUNK  # slices stop at K
            fp4, sf = slice(begin // 2, end // 2), slice(begin // SF_VEC_SIZE, end // SF_VEC_SIZE)
            out[batch] += decoded(a[:, fp4, batch], sfa[:, sf, batch]) @ decoded(b[:, fp4, batch], sfb[:, sf, batch]).T
    return out.permute(1, 2, 0)


def wrong_elements(c: torch.Tensor, exact: torch.Tensor) -> tuple[int, tuple[int, ...]] | None:
    """None where every element of the fp16 `c` passes the competition's check against `exact`
    rounded to fp16 (in fp16 as its runner compares, in float32 as the judge does), else the
    count of the others and the first's index. NaN never passes, an infinity only where equal."""
    reference = exact.to(torch.float16)
    close = torch.isfinite(c) & torch.isfinite(reference)
    for got, want in ((c, reference), (c.float(), reference.float())):
        close &= (got - want).abs() <= SELF_CHECK_ATOL + SELF_CHECK_RTOL * want.abs()
    bad = torch.nonzero(~(close | (c == reference)))
    return None if bad.shape[0] == 0 else (bad.shape[0], tuple(bad[0].tolist()))


class ExactGemm:
    """What runs where no rung passed: `exact_product` rounded to fp16 into c, on every call."""

    @staticmethod
    def run(data) -> None:
        data[6].copy_(exact_product(data).to(torch.float16))


def one_line(error: BaseException) -> str:
    """An exception's type and its message's first line (CUDA errors go on with advice)."""
    message = str(error).strip().splitlines()
    return f"{type(error).__name__}: {message[0] if message else ''}"


def describe_plan(plan) -> str:
    config, tvm_ffi = getattr(plan, "config", None), getattr(plan, "tvm_ffi", HAVE_TVM_FFI)
    return type(plan).__name__ if config is None else config.describe() + ("" if tvm_ffi == HAVE_TVM_FFI else ", without TVM-FFI")


# One step of the self-check's ladder: its name (for the fallback lines), how to build its plan, what a later rung may drop.
Rung = NamedTuple("Rung", [("name", str), ("build", Callable), ("traits", frozenset)])
# How a rung fails: its answer WRONG, its build or calls RAISED, its calls HUNG or FAULTED the device, the trial's time SPENT.
WRONG, RAISED, HUNG, FAULTED, SPENT = "wrong", "raised", "hung", "faulted", "spent"


class ThreeCalls:
    """Three calls of a plan queued back to back, each into its own output filled with NaN (the
    third the caller's c); the second by b negated (bit 3 of each e2m1 nibble), so that its
    split-K partials differ from its neighbours' (docs/b200-first-run.md says what it catches)."""

    SIGNS = (1, -1, 1)

    def __init__(self, data, exact: torch.Tensor):
        a, b, sfa, sfb, sfa_permuted, sfb_permuted, c = data
        negated_b = torch.empty_like(b)
        torch.bitwise_xor(b.view(torch.uint8), 0x88, out=negated_b.view(torch.uint8))
        self.exact = exact
        self.inputs = tuple((a, operand, sfa, sfb, sfa_permuted, sfb_permuted, torch.empty_like(c))
                            for operand in (b, negated_b)) + (tuple(data),)

    def fault(self, plan, watch: Callable[[], str | None] | None = None) -> str | None:
        """None where every call of `plan` was right; else its first wrong element, or what `watch` says of their time."""
        for inputs in self.inputs:
            inputs[6].fill_(float("nan"))
        for inputs in self.inputs:
            plan.launch(operand_addresses(inputs))
        late = watch() if watch is not None else None
        if late is not None:
            return late
        for number, (inputs, sign) in enumerate(zip(self.inputs, self.SIGNS), 1):
            c = sign * inputs[6]
            wrong = wrong_elements(c, self.exact)
            if wrong is not None:
                (count, index), negated = wrong, ", b negated" if sign < 0 else ""
                return (f"call {number} of {len(self.inputs)}{negated}: c{list(index)} = {sign * c[index].item()!r}, "
                        f"exact {sign * self.exact[index].item()!r} ({count} of {c.numel()} elements wrong)")
        return None

    def check(self, rung: Rung, watch_for: Callable[[str], Callable | None]) -> tuple:
        """`rung` built and its three calls checked under `watch_for(description)`: (plan, description,
        fault or None, its kind: RAISED, HUNG where the watch found the calls late, else WRONG)."""
        what, watch = f"{rung.name} (not built)", None
        try:
            plan = rung.build()
            what = describe_plan(plan)
            watch = watch_for(what)
            fault = self.fault(plan, watch)
        except Exception as error:  # a plan that cannot be built or run falls back too
            return None, what, one_line(error), RAISED
        return plan, what, fault, HUNG if getattr(watch, "late", False) else WRONG


def plan_rungs(kernel: type, problem: Problem, device: torch.device) -> list[Rung]:
    """The kernel's own rungs (`Rung`s, or (name, build) pairs, traits their names), else its chosen and conservative plans."""
    rungs = getattr(kernel, "rungs", None)
    listed = rungs(problem, device) if rungs is not None else [
        ("the chosen configuration", lambda: kernel.launch_plan(problem, device)),
        ("the conservative configuration", lambda: kernel.launch_plan(problem, device, conservative=True))]
    return [rung if isinstance(rung, Rung) else Rung(*rung, frozenset({rung[0]})) for rung in listed]


class Failure(NamedTuple):
    """How a rung failed the self-check."""

    what: str  # the plan's description, or the rung's name and "(not built)"
    fault: str  # one line
    kind: str  # WRONG, RAISED, HUNG, FAULTED or SPENT

    def blamed(self, traits: frozenset) -> frozenset:
        """What this failure of a rung with `traits` puts in doubt: TVM-FFI alone where a rung called
        through it raised; nothing where the trial's time is spent; else the configuration's traits."""
        if self.kind == SPENT:
            return frozenset()
        return frozenset({TVM_FFI}) if self.kind == RAISED and TVM_FFI in traits else traits - {TVM_FFI}

    def lasting(self, blamed: frozenset) -> bool:
        """Whether later problems pass over it too: a hang or fault costs a deadline and a new
        trial process each time, and a TVM-FFI that raised does so for every configuration."""
        return self.kind in (HUNG, FAULTED) or blamed == {TVM_FFI}


def next_rung(rungs: list[Rung], start: int, doubts) -> int:
    """The first rung from `start` on that keeps none of `doubts` whole (len(rungs) if none)."""
    return next((number for number in range(start, len(rungs))
                 if not any(rungs[number].traits >= blamed for blamed in doubts)), len(rungs))


class TrialProcess:
    """A second process on the same device that tries each rung, on inputs of its own, before this
    one builds it: a rung that hangs or faults the device takes the trial process down (killed or
    found dead, then started again), never this one (docs/b200-first-run.md#the-trial-process)."""

    START_DEADLINE_S = 45.0  # Python, torch and CuTeDSL imported, a CUDA context made
    BUILD_DEADLINE_S = 60.0  # a cold compile of one configuration, or the trial's input and exact product
    RUN_DEADLINE_S = 5.0  # three calls and their check: milliseconds of GPU work
    LOST_BUDGET_S = 60.0  # of the competition's 180 s for a whole run
    SILENT, CLOSED = "silent", "closed"  # what `_receive` returns where no reply came
    # Replies go to the stdout it was given, which nothing else writes (imports print to stderr); the module loads by file.
    PROGRAM = ("import importlib.util, json, os, sys; replies = os.dup(1); os.dup2(2, 1); settings = json.loads(sys.argv[1]); "
               "sys.path[:] = settings['path']; spec = importlib.util.spec_from_file_location(settings['module'], settings['file']); "
               "module = sys.modules[spec.name] = importlib.util.module_from_spec(spec); "
               "spec.loader.exec_module(module); module.TrialProcess.serve(settings, replies)")

    def __init__(self):
        self.process: subprocess.Popen | None = None
        self.kernel: type | None = None  # the kernel class the running process serves
        self.unavailable: str | None = None  # why no trial process runs here, once known
        # The traits hangs, faults and a failing TVM-FFI put in doubt for every later problem, and what failed where.
        self.condemned: dict[frozenset, str] = {}
        self.lost_s, self.started = 0.0, False  # time hangs, faults and restarts took; whether a process was ever started
        self._buffer = b""

    # ----- this process's side -----

    def screen(self, kernel: type, problem: Problem, device: torch.device, number: int, name: str) -> Failure | None:
        """The trial process's verdict on rung `number` (`name`) of `problem`: None where it passed or none runs here."""
        if not (TRIAL_IN_CHILD and getattr(kernel, "TRIAL_IN_CHILD", True)):
            return None
        if self.lost_s > self.LOST_BUDGET_S:
            return Failure(f"{name} (not built)", f"not tried: hangs, faults and new trial processes have taken "
                           f"{self.lost_s:.0f} s", SPENT)
        try:
            if self.unavailable is None and (self.process is None or self.kernel is not kernel):
                self.close()
                began = time.monotonic()
                why = self._start(kernel, device)
                if self.started:  # a new process, after one that hung or died
                    self.lost_s += time.monotonic() - began
                self.started = True
                if why is not None:
                    self._give_up(why)
            return None if self.unavailable is not None else self._screen(problem, number, name)
        except Exception as error:  # the trial's own failure never fails a call: the rung is tried here
            self.close()
            self._give_up(f"it failed: {one_line(error)}")
            return None

    def close(self) -> None:
        if self.process is not None:
            self._end(kill=True)

    def _give_up(self, why: str) -> None:
        self.unavailable = why
        print(f"{NO_TRIAL_PROCESS} ({why}): each rung is tried in this process alone", file=sys.stderr, flush=True)

    def _start(self, kernel: type, device: torch.device) -> str | None:
        """Start the trial process for `kernel`; None once it is ready, else why not."""
        if "<locals>" in kernel.__qualname__:
            return f"the kernel class {kernel.__qualname__} cannot be imported by name"
        settings = {"path": sys.path, "module": __name__, "file": __file__,
                    "kernel": [kernel.__module__, kernel.__qualname__], "device": str(device)}
        try:
            self.process = subprocess.Popen([sys.executable, "-c", self.PROGRAM, json.dumps(settings)],
                                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except (OSError, ValueError, subprocess.SubprocessError) as error:
            return f"it could not be started: {one_line(error)}"
        self.kernel, self._buffer = kernel, b""
        reply = self._receive(self.START_DEADLINE_S)
        if isinstance(reply, dict) and reply.get("ready"):
            return None
        ended = self._end(kill=reply == self.SILENT)
        if isinstance(reply, dict) and "unavailable" in reply:
            return f"it could not run here: {reply['unavailable']}"
        return f"it {ended or f'was not ready within {self.START_DEADLINE_S:g} s'}"

    def _screen(self, problem: Problem, number: int, name: str) -> Failure | None:
        """One request. Where the process hangs or dies it is ended and the time counted; where
        it dies before it begins the rung, the trial itself cannot run here."""
        began = time.monotonic()
        try:
            self.process.stdin.write(json.dumps({"problem": list(problem), "rung": number}).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:  # it ended
            self.close()
            self._give_up("it ended between problems")
            return None
        begun, what = False, None  # the rung begun; its plan's description once built
        while isinstance(reply := self._receive(self.BUILD_DEADLINE_S if what is None else self.RUN_DEADLINE_S), dict):
            if "fault" not in reply:  # the rung begun, or built and about to be launched
                begun, what = True, reply.get("what")
            elif reply["fault"] is None:
                return None
            elif reply["context_lost"]:  # the process ends itself
                self._end(kill=False)
                self.lost_s += time.monotonic() - began
                return Failure(reply["what"], f"{reply['fault']} (the trial process's CUDA context was lost)", FAULTED)
            else:
                return Failure(reply["what"], reply["fault"], RAISED if reply["raised"] else WRONG)
        ended = self._end(kill=reply == self.SILENT)
        self.lost_s += time.monotonic() - began
        if not begun:
            self._give_up(f"it failed before it began a rung: it {ended or 'was killed'}")
            return None
        if what is None:
            return Failure(f"{name} (not built)", f"the trial process {ended} while building it" if ended else
                           f"not built within {self.BUILD_DEADLINE_S:g} s in the trial process, which was killed", RAISED)
        if ended:
            return Failure(what, f"the trial process {ended} in its three calls", FAULTED)
        return Failure(what, f"no answer within {self.RUN_DEADLINE_S:g} s in the trial process, which was killed", HUNG)

    def _receive(self, timeout: float) -> dict | str:
        """The next reply; SILENT where none came in time, CLOSED where the process is ending."""
        end = time.monotonic() + timeout
        descriptor = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = end - time.monotonic()
            if left <= 0 or not select.select([descriptor], [], [], left)[0]:
                return self.SILENT
            chunk = os.read(descriptor, 1 << 16)
            if not chunk:
                return self.CLOSED
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _end(self, kill: bool) -> str | None:
        """End the process: with `kill` at once (then None); else wait for it to exit (its CUDA
        context's teardown may take seconds) and say how it ended ("died of SIGSEGV")."""
        process, self.process, self.kernel = self.process, None, None
        with contextlib.suppress(OSError):
            process.stdin.close()
        returncode = None
        if not kill:
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = process.wait(timeout=self.BUILD_DEADLINE_S)
        if returncode is None:
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # held in the driver: left to it
                process.wait(timeout=self.RUN_DEADLINE_S)
        process.stdout.close()
        if returncode is None or returncode >= 0:
            return None if returncode is None else f"exited with status {returncode}"
        return f"died of {({s.value: s.name for s in signal.Signals}).get(-returncode, f'signal {-returncode}')}"

    # ----- the trial process's side -----

    @staticmethod
    def trial_input(problem: Problem, device: torch.device, seed: int) -> tuple:
        """Random operands of `problem`, laid out as `validate_inputs` takes them and drawn as the
        competition draws them (every e2m1 code, scales 0 to 3), c unwritten."""
        m, n, k, l = problem
        generator = torch.Generator(device=device).manual_seed(seed)

        def operand(rows: int) -> torch.Tensor:
            codes = torch.randint(0, 256, (l, rows, k // 2), dtype=torch.uint8, device=device, generator=generator)
            return codes.permute(1, 2, 0).view(_FP4)

        def scales(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
            drawn = torch.randint(0, 4, (l, rows, k // SF_VEC_SIZE), dtype=torch.int8, device=device, generator=generator)
            plain = drawn.to(_FP8).permute(1, 2, 0)
            permuted = torch.empty_strided(*permuted_scale_layout(rows, k, l), dtype=_FP8, device=device)
            # (row // 128, row // 32 % 4, row % 32, column // 4, column % 4, L), in the atoms' order
            atoms = plain.unflatten(1, (-1, 4)).unflatten(0, (-1, 4, 32))
            permuted.copy_(atoms.permute(2, 1, 0, 4, 3, 5))
            return plain, permuted

        a, b = operand(m), operand(n)
        (sfa, sfa_permuted), (sfb, sfb_permuted) = scales(m), scales(n)
        c = torch.empty((l, m, n), dtype=torch.float16, device=device).permute(1, 2, 0)
        return a, b, sfa, sfb, sfa_permuted, sfb_permuted, c

    @staticmethod
    def context_lost(device: torch.device) -> bool:
        """Whether this process's CUDA context on `device` can run nothing more."""
        if device.type != "cuda":
            return False
        try:
            torch.cuda.synchronize(device)
            torch.ones(1, device=device).add_(1).item()
            return False
        except Exception:
            return True

    @staticmethod
    def serve(settings: dict, replies: int) -> None:
        """A request a line on stdin, a reply a line on the descriptor `replies`, for the kernel
        class found by its module and qualified name. The last problem's input and rungs are kept."""

        def reply(**message) -> None:
            os.write(replies, json.dumps(message).encode() + b"\n")

        try:
            kernel_module, qualname = settings["kernel"]
            kernel = functools.reduce(getattr, qualname.split("."), importlib.import_module(kernel_module))
            device = torch.device(settings["device"])
            if device.type == "cuda":
                torch.cuda.set_device(device)
                torch.ones(1, device=device).add_(1).item()  # the context, made now
        except Exception as error:
            reply(unavailable=one_line(error))
            return
        reply(ready=True)
        problem = None
        for line in sys.stdin.buffer:
            request = json.loads(line)
            if request["problem"] != problem:
                problem, trial, rungs = request["problem"], None, None
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                data = TrialProcess.trial_input(Problem(*problem), device, seed=sum(problem))
                trial, rungs = ThreeCalls(data, exact_product(data)), plan_rungs(kernel, Problem(*problem), device)
            number = request["rung"]
            reply(rung=number)
            what, fault, kind = trial.check(rungs[number], lambda what: reply(rung=number, what=what))[1:]
            lost = fault is not None and TrialProcess.context_lost(device)
            reply(rung=number, what=what, fault=fault, raised=kind == RAISED, context_lost=lost)
            if lost:
                os._exit(1)  # nothing more can run in this context


_TRIAL = TrialProcess()


class CallerWatch:
    """Guards a rung's three calls here after the trial process passed them: past `RUN_DEADLINE_S` they fall back as a
    hang; unanswered by `GIVE_UP_S`, the process says so and exits before the competition's 180 s end the run silently."""

    RUN_DEADLINE_S = TrialProcess.RUN_DEADLINE_S
    GIVE_UP_S = 60.0
    POLL_S = 1e-3

    def __init__(self, shape: str, what: str, mark: Callable[[], Callable[[], bool]]):
        # `mark()`, called once the calls are queued: whether what was queued until then is done.
        self.shape, self.what, self.mark, self.late = shape, what, mark, False

    @classmethod
    def on(cls, device: torch.device, shape: str, what: str) -> CallerWatch | None:
        """The watch of the calls queued on `device` from this thread (None off a GPU)."""
        return cls(shape, what, cls._queued_work_done) if device.type == "cuda" else None

    @staticmethod
    def _queued_work_done() -> Callable[[], bool]:
        event = torch.cuda.Event()
        event.record()
        return event.query

    def __call__(self) -> str | None:
        done, began = self.mark(), time.monotonic()
        while not done():
            waited = time.monotonic() - began
            if waited > self.GIVE_UP_S:
                self._say(f"still no answer after {self.GIVE_UP_S:g} s: a kernel holds the GPU and this process "
                          f"cannot run again; it exits now")
                os._exit(1)
            if waited > self.RUN_DEADLINE_S and not self.late:
                self._say(f"no answer within {self.RUN_DEADLINE_S:g} s in this process after its trial passed; "
                          f"waiting up to {self.GIVE_UP_S:g} s")
                self.late = True
            time.sleep(self.POLL_S)
        return f"answered only after {time.monotonic() - began:.1f} s in this process" if self.late else None

    def _say(self, message: str) -> None:
        print(f"{HANG_PREFIX} M x N x K x L = {self.shape}, {self.what}: {message}", file=sys.stderr, flush=True)


def first_call(kernel: type, call: Call, data):
    """The kernel's rungs in turn, each tried in the trial process, then here on the caller's input;
    the first that passes serves the later calls. A failure prints a FALLBACK_PREFIX line and
    skips to the next rung that keeps none of what was put in doubt; after the last, the exact product."""
    problem, device = call.problem, data[6].device
    if not SELF_CHECK:
        plan = kernel.launch_plan(problem, device)
        plan.launch(call.addresses)
        return plan
    exact = exact_product(data)
    trial = ThreeCalls(data, exact)
    rungs = plan_rungs(kernel, problem, device)
    shape = "x".join(map(str, problem))

    def fall_back(what: str, fault: str, number: int) -> None:
        instead = rungs[number].name if number < len(rungs) else "the exact torch product"
        print(f"{FALLBACK_PREFIX} M x N x K x L = {shape}, {what}: {fault}; now {instead}", file=sys.stderr, flush=True)

    doubts = set(_TRIAL.condemned)
    number = next_rung(rungs, 0, doubts)
    if number > 0:
        why = "; ".join(where for blamed, where in _TRIAL.condemned.items() if rungs[0].traits >= blamed)
        fall_back(rungs[0].name, f"not tried: it keeps what failed before ({why})", number)
    while number < len(rungs):
        rung = rungs[number]
        failure = _TRIAL.screen(kernel, problem, device, number, rung.name)
        if failure is None:  # then built here and tried on the caller's input, under a CallerWatch
            plan, what, fault, kind = trial.check(rung, lambda what: CallerWatch.on(device, shape, what))
            if fault is None:
                return plan
            failure = Failure(what, fault, kind)
        blamed = failure.blamed(rung.traits)
        doubts.add(blamed)
        if failure.lasting(blamed):
            _TRIAL.condemned.setdefault(blamed, f"{failure.what} {failure.kind} for {shape}")
        number = next_rung(rungs, number + 1, doubts)
        fall_back(failure.what, failure.fault, number)
    data[6].copy_(exact.to(torch.float16))
    return ExactGemm


# ===== dispatch: the kernel for the device, its plan per problem =====

def kernel_for_arch(arch: str | None) -> type | None:
    """The kernel class for a target, or None: its `launch_plan(problem, device)` and, for
    harness/submitting/compile.py, `config_for(problem)` and `compile_for_check(problem, arch, extra_options)`."""
    if arch == "sm_90a":
        from hopper_stand_in import HopperNvfp4Gemm  # local runs only: the leaderboard has no Hopper
        return HopperNvfp4Gemm
    return Sm100Gemm if arch == Sm100Gemm.ARCH else None


def kernel_for_device(device: torch.device) -> type:
    major, minor = torch.cuda.get_device_capability(device)
    kernel = kernel_for_arch({10: "sm_100a", 9: "sm_90a"}.get(major))
    if kernel is None:
        raise RuntimeError(f"no kernel for compute capability {major}.{minor}: this submission runs on "
                           "10.x (B200, sm_100a) and 9.x (H100/H200, sm_90a)")
    return kernel


_PLANS: dict[tuple, LaunchPlan] = {}
# Where only one device is visible the inputs are on the current one: no need to ask, a host call
# each time (docs/figures.md, row "the current device's query").
_SEVERAL_DEVICES = torch.cuda.device_count() > 1


def custom_kernel(data):
    call = validate_inputs(data)
    if _SEVERAL_DEVICES and call.device != torch.cuda.current_device():
        # The plans and their timing run on the current device; torch's ops where their tensors are.
        with torch.cuda.device(call.device):
            return custom_kernel(data)
    key = call[:2]  # (problem, device)
    plan = _PLANS.get(key)
    if plan is None:
        _PLANS[key] = first_call(kernel_for_device(data[6].device), call, data)
    elif plan is ExactGemm:
        ExactGemm.run(data)
    else:
        plan.launch(call.addresses)
    return data[6]
