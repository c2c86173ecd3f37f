"""The scale factors in tensor memory, held to the PTX ISA's text (not to CuTeDSL's own rules).

What the text of the PTX ISA (9.0) says, and what the model below takes from it:

- Tensor Memory Addressing (9.7.16.1.1): an address is the lane in bits 31-16 and the column
  in bits 15-0; a column of a lane holds 32 bits. A layout over 8-bit scales counts bytes, so a
  byte offset is 4 * address + the byte within the column.
- Data Movement Shape (9.7.16.2.3) and tcgen05.cp (9.7.16.9.2): `.32x128b` moves 32 lanes of 128
  bits, requires `.warpx4`, which multicasts the data into all 4 warps (each warp's 32-lane
  partition of tensor memory). A row of the source matrix (128 bits, 16 bytes) goes to one lane,
  its bytes to 4 consecutive columns in order.
- Block Scaling (9.7.16.10.7): the scale factors must be duplicated to all 32-lane partitions;
  with `.scale_vec::4X` (`.block16`, the e4m3 scales of kind::mxf4nvf4) a row's four scale
  factors of one MMA (K = 64) lie in one 4-byte aligned sub-column, SFA_ID / SFB_ID 0.
- The source: the 512-byte scale atoms as the problem lays them out (the reference's
  `to_blocked`), loaded by TMA unchanged: row r's scale for K block k at byte
  16 * (r % 32) + 4 * (r // 32) + k % 4 of the atom, the next 4 K blocks in the next atom.

Which lane and column the MMA then reads for each row of A or B is drawn, not written, in the
PTX ISA (its figures of the scale factor A and B matrices for scale_vec::4X); no test here can
hold the kernel to that, and only a B200 run does (the self-check's exact product).
"""

import functools
import itertools

import pytest

cutlass = pytest.importorskip("cutlass")
import cutlass.cute as cute  # noqa: E402
import cutlass.utils.blockscaled_layout as blockscaled_layout  # noqa: E402

import submission as sub  # noqa: E402

ATOM_ROWS = 128
K_BLOCKS = sub.SM100_TILE_K // sub.SF_VEC_SIZE  # scales of one row in one pipeline stage: 16
SCALES_PER_MMA = 4  # scale_vec::4X: K = 64 per MMA, one scale per 16
LANES_PER_WARP = 32
WARPS = 4


def documented_smem_byte(row: int, k_block: int) -> int:
    """Byte of the scale of (`row` of a 128-row atom, `k_block` of the stage) in the stage's
    shared-memory scale tile: the problem's atoms, one per MMA along K."""
    atom, k = divmod(k_block, SCALES_PER_MMA)
    return 512 * atom + 16 * (row % 32) + 4 * (row // 32) + k


def documented_tmem_bytes(row: int, k_block: int) -> set[tuple[int, int, int]]:
    """Every (lane, column, byte) that tcgen05.cp .32x128b.warpx4 writes the scale of (`row`,
    `k_block`) to, relative to the scale tensor's first column: one copy per 512-byte atom,
    its 16-byte row i to lane i of each warp's partition, byte b to column b // 4."""
    atom, in_atom = divmod(documented_smem_byte(row, k_block), 512)
    source_row, byte = divmod(in_atom, 16)
    column = 4 * atom + byte // 4
    return {(warp * LANES_PER_WARP + source_row, column, byte % 4) for warp in range(WARPS)}


@functools.lru_cache(maxsize=2)
def _kernel_layouts(mma_n: int) -> dict:
    """The kernel's SFA and SFB layouts for one stage, in shared and tensor memory, evaluated
    at every (row, K block) and every warp's copy (their offsets are static: plain ints)."""
    found = {}

    @cute.jit
    def trace():
        gemm = sub.Sm100BlockScaledGemm(sub.Sm100Config(mma_n, 1, 2))
        tiled_mma = gemm._tiled_mma(gemm.mma_tiler)
        sfa_smem = blockscaled_layout.make_smem_layout_sfa(tiled_mma, gemm.mma_tiler, sub.SF_VEC_SIZE, 1)
        sfb_smem = blockscaled_layout.make_smem_layout_sfb(tiled_mma, gemm.mma_tiler, sub.SF_VEC_SIZE, 1)
        sfa_tmem, sfb_tmem = gemm.scale_tmem_layouts(tiled_mma, sfa_smem, sfb_smem)
        for name, smem, tmem in (("sfa", sfa_smem, sfa_tmem), ("sfb", sfb_smem, sfb_tmem)):
            one_stage = cute.slice_(smem, (None, None, None, 0))
            for row, k_block in itertools.product(range(ATOM_ROWS), range(K_BLOCKS)):
                mn = (row % 32, row // 32)
                k = ((0, k_block % SCALES_PER_MMA), 0, k_block // SCALES_PER_MMA)
                found[name, "smem", row, k_block] = cute.crd2idx((((mn, 0), k[0]), k[1], k[2]), one_stage)
                found[name, "tmem", row, k_block] = {
                    cute.crd2idx((((mn, warp), k[0]), k[1], k[2]), tmem) for warp in range(WARPS)}

    trace()
    return found


def _lane_column_byte(offset: int) -> tuple[int, int, int]:
    address, byte = divmod(offset, 4)
    return address >> 16, address & 0xFFFF, byte


@pytest.fixture(scope="module", params=[64, 128], ids=["N=64", "N=128"])
def layouts(request):
    return request.param, _kernel_layouts(request.param)


def test_the_scale_tiles_in_shared_memory_are_the_problems_atoms(layouts):
    _, found = layouts
    for name, row, k_block in itertools.product(("sfa", "sfb"), range(ATOM_ROWS), range(K_BLOCKS)):
        assert found[name, "smem", row, k_block] == documented_smem_byte(row, k_block), (name, row, k_block)


def test_every_scale_lands_where_tcgen05_cp_puts_it_in_every_warps_lanes(layouts):
    """SFA (M = 128) and SFB (N = 64 or 128, loaded as whole 128-row atoms): each scale byte at
    the lane, column and byte the copy writes it to, once in each warp's 32 lanes."""
    _, found = layouts
    for name, row, k_block in itertools.product(("sfa", "sfb"), range(ATOM_ROWS), range(K_BLOCKS)):
        placed = {_lane_column_byte(offset) for offset in found[name, "tmem", row, k_block]}
        assert placed == documented_tmem_bytes(row, k_block), (name, row, k_block)


def test_a_rows_four_scales_of_one_mma_fill_one_aligned_column(layouts):
    """scale_vec::4X: the scales of K blocks 4j .. 4j + 3 (MMA j) of a row are bytes 0-3, in K
    order, of one column of one lane, in each warp's partition; different rows, different cells."""
    _, found = layouts
    for name in ("sfa", "sfb"):
        cells = {}
        for row, mma in itertools.product(range(ATOM_ROWS), range(K_BLOCKS // SCALES_PER_MMA)):
            for k in range(SCALES_PER_MMA):
                for lane, column, byte in map(_lane_column_byte, found[name, "tmem", row, SCALES_PER_MMA * mma + k]):
                    assert byte == k, (name, row, mma, k)
                    cells.setdefault((lane, column), set()).add((row, mma))
        assert all(len(owners) == 1 for owners in cells.values())
        assert len(cells) == ATOM_ROWS * WARPS * K_BLOCKS // SCALES_PER_MMA


def test_an_n_tile_of_64_is_read_from_its_half_of_the_atom():
    """N = 64: the 128-row SFB atom holds two N tiles; the kernel moves the MMA's SFB address
    `sfb_half_columns` columns on for the odd one, where the copy put its rows, so both tiles'
    rows sit at the same lanes and columns from the address the MMA is given."""
    found = _kernel_layouts(64)
    seen_from_the_address = {}
    for tile in (0, 1):
        shift = sub.Sm100BlockScaledGemm.sfb_half_columns(tile)
        for row, k_block in itertools.product(range(64), range(K_BLOCKS)):
            placed = {_lane_column_byte(offset) for offset in found["sfb", "tmem", 64 * tile + row, k_block]}
            assert all(column >= shift for _, column, _ in placed)
            seen_from_the_address.setdefault(tile, {})[row, k_block] = {
                (lane, column - shift, byte) for lane, column, byte in placed}
    assert seen_from_the_address[0] == seen_from_the_address[1]
    # Each half takes two of the four columns the copy fills per MMA.
    columns = {column % SCALES_PER_MMA for cells in seen_from_the_address[0].values() for _, column, _ in cells}
    assert columns == {0, 1}
