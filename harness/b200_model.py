"""A cost model of block-scaled FP4 GEMM kernels on a B200, for a kernel nobody here can run.

It is a model, not a measurement: every figure it gives is labelled as one, and is to be
replaced by a measurement the day a B200 run exists. It times one call of a kernel described by
its tiles, split-K, pipeline depth and launch, on the competition's shapes, in the
competition's timing (50 calls back to back after an L2 flush):

    call = max(host time per call, launch + mainloop + epilogue tail)

- launch: a grid's launch and prologue (barriers, TMEM allocation, descriptor prefetch) up to
  its first load. With programmatic dependent launch the next call's grid is launched while
  this one runs, but a CTA needs an SM: one CTA fills an SM, so only the SMs this call's grid
  leaves free take the next call's CTAs at once. Those load their share of the operands while
  this call's tail runs; the others start on this call's SMs as its CTAs exit and pay a CTA's
  start (`CTA_START_S`, the part of the launch that is per SM). Where the whole next grid fits
  on the free SMs, or where two CTAs an SM (`Kernel.ctas_per_sm`) give every SM room for the
  next call's CTA, two calls are in flight, and a call's time is the larger of the busiest
  resource and half of one call's chain (start, main loop, tail).
- mainloop: each CTA's K loop. With a pipeline (2 stages or more) the loads stream: the first
  arrives after one memory latency, then each K tile costs the larger of its bytes at the per-SM
  ingest rate and its MMAs; with one stage every K tile pays the latency, its transfer and its
  MMAs in turn. Bounded below by the DRAM bytes at the DRAM rate and the L2-to-SM bytes at the
  L2 rate. More work units than SMs run one after another, persistent CTA or new wave alike.
- share-K: every SM takes an even share of all (tile, K tile) iterations; a share that meets
  several tiles pays the first load's latency on each, and a tile's K is added up from as many
  partials as shares meet it.
- TMA multicast in clusters along M divides the L2 reads of the shared B tile among the
  cluster's CTAs; it changes nothing else (every SM still takes in its whole tiles).
- epilogue tail: the output tile's stores, and with split-K the fp32 partial's store, the
  arrival atomic's round trip and the other splits' partials read back.

Its free constants (launch, latency, per-SM ingest, the starter's host time) are fitted to the
published B200 times of two kernels whose configuration is known (the first-placed entry, with
the tiles our kernel uses, and the competition's CuTeDSL starter): `python -m harness model --fit`
refits them and `python -m harness model` prints the calibration beside every published figure.
"""

import dataclasses
import itertools
import math

from rich.table import Table

from harness.sol import B200_CLOCK_HZ, B200_FP4_FLOP_PER_SM_CLK, B200_SMS, B200_TABLE_BANDWIDTH, DEVICES, gemm_bytes
from harness.stats import geomean

BENCHMARK_SHAPES = ((128, 7168, 16384, 1), (128, 4096, 7168, 1), (128, 7168, 2048, 1))
TILE_K = 256  # K per load: one 128-byte swizzle row of fp4
SF_VEC = 16
L2_TO_SM_BYTES_PER_S = 20e12  # aggregate L2 read rate; not binding on these shapes, so not fitted
MMA_FLOPS_PER_SM_S = B200_FP4_FLOP_PER_SM_CLK * B200_CLOCK_HZ
# A CTA's start on an SM the previous call's grid held, to its first load: the block
# scheduler's dispatch and the prologue. Part of the fitted launch; no published time tells the
# two apart (no published kernel used PDL), so it is set, not fitted, and `sensitivity_table`
# shows what half and one and a half times it give.
CTA_START_S = 1.0e-6
# A cluster barrier's round trip, for the split-K exchange through distributed shared memory:
# set, not fitted (no published kernel did it).
CLUSTER_BARRIER_S = 0.5e-6


@dataclasses.dataclass(frozen=True)
class Kernel:
    """What the model needs to know of a kernel."""

    name: str
    tile_n: int  # rows of B (columns of c) per CTA tile
    tile_m: int  # rows of A (rows of c) per CTA tile
    split_k: int = 1
    stages: int = 2
    pdl: bool = False
    host_s: float = 0.0  # host time per call, where it is known to bind
    # CTAs of neighbouring row tiles that share one B tile and its scales through TMA multicast:
    # L2 reads of them are divided among the cluster (each SM still receives all of it).
    cluster_m: int = 1
    # Every SM takes an even share of the (tile, K tile) iterations; split_k is then the most
    # K ranges (partials) added into one tile.
    share_k: bool = False
    # CTAs an SM holds at once (shared memory, tensor memory columns and registers allowing):
    # with 2, the next call's CTAs start beside this call's on every SM.
    ctas_per_sm: int = 1
    # Split-K's partials exchanged through distributed shared memory among the splits of a
    # tile, one cluster, in place of global memory and an arrival counter.
    cluster_reduction: bool = False


@dataclasses.dataclass(frozen=True)
class Constants:
    launch_s: float  # launch and prologue, to the first load
    latency_s: float  # one DRAM round trip (a load's, an atomic's)
    ingest_bytes_per_s: float  # L2 to shared memory, per SM
    dram_efficiency: float  # the fraction of the SOL table's DRAM rate a streaming kernel reaches
    starter_host_s: float  # the CuTeDSL starter's host time per call


# Fitted with `python -m harness model --fit` (results/b200-model-calibration.txt).
FITTED = Constants(launch_s=2.75e-6, latency_s=1.4e-6, ingest_bytes_per_s=300e9, dram_efficiency=0.8, starter_host_s=36.9e-6)


def _tile_bytes(kernel: Kernel) -> int:
    """Bytes one CTA loads per K tile: both fp4 tiles and their e4m3 scales (128-row atoms)."""
    rows_a = max(kernel.tile_m, 128)
    return (kernel.tile_n + kernel.tile_m) * TILE_K // 2 + (kernel.tile_n + rows_a) * TILE_K // SF_VEC


def _k_shares(tiles: int, k_tiles: int) -> list[range]:
    """Each SM's iterations when the SMs share tiles x K tiles evenly in order (share-K)."""
    iterations = tiles * k_tiles
    sms = min(B200_SMS, iterations)
    return [range(sm * iterations // sms, (sm + 1) * iterations // sms) for sm in range(sms)]


def k_share_parts(tiles: int, k_tiles: int) -> int:
    """The most share-K shares that meet one tile: the partials added into it."""
    meeting = [0] * tiles
    for share in _k_shares(tiles, k_tiles):
        for tile in range(share[0] // k_tiles, share[-1] // k_tiles + 1):
            meeting[tile] += 1
    return max(meeting)


def _units_and_k_tiles_per_sm(kernel: Kernel, tiles: int, k_tiles: int) -> tuple[int, int]:
    """(units, K tiles) of the busiest SM: a persistent CTA's next unit pays the first load's
    latency again, as a new wave does, and so does a share-K share's next tile."""
    if kernel.share_k:
        shares = _k_shares(tiles, k_tiles)
        return max(share[-1] // k_tiles - share[0] // k_tiles + 1 for share in shares), max(map(len, shares))
    units_per_sm = math.ceil(tiles * kernel.split_k / B200_SMS)
    return units_per_sm, units_per_sm * (k_tiles // kernel.split_k)


def grid_ctas(kernel: Kernel, tiles: int, k_tiles: int) -> int:
    """CTAs of one call's persistent grid: one per unit (share-K: per iteration), at most one an SM."""
    return min(B200_SMS, tiles * (k_tiles if kernel.share_k else kernel.split_k))


def call_seconds(kernel: Kernel, shape: tuple, constants: Constants = FITTED, cta_start_s: float = CTA_START_S,
                 loads_under_tail: bool = True) -> float:
    """One call's time in the competition's timing. `cta_start_s` and `loads_under_tail` (the
    next call's CTAs on free SMs load while this call's tail runs) are the PDL assumptions that
    no published time tests: `sensitivity_table` varies them."""
    m, n, k, l = shape
    tiles = (n // kernel.tile_n) * (m // kernel.tile_m) * l
    units_per_sm, k_tiles_per_sm = _units_and_k_tiles_per_sm(kernel, tiles, k // TILE_K)
    grid = grid_ctas(kernel, tiles, k // TILE_K)
    tile_bytes = _tile_bytes(kernel)
    load_s = tile_bytes / constants.ingest_bytes_per_s
    mma_s = 2 * kernel.tile_n * kernel.tile_m * TILE_K / MMA_FLOPS_PER_SM_S
    if kernel.stages >= 2:
        mainloop = units_per_sm * constants.latency_s + k_tiles_per_sm * max(load_s, mma_s)
    else:
        mainloop = k_tiles_per_sm * (constants.latency_s + load_s + mma_s)
    dram_rate = B200_TABLE_BANDWIDTH * constants.dram_efficiency
    dram_bytes = gemm_bytes(m, n, k, l)
    shared_b_bytes = kernel.tile_n * TILE_K // 2 + kernel.tile_n * TILE_K // SF_VEC
    l2_bytes = tile_bytes - shared_b_bytes * (1 - 1 / kernel.cluster_m)
    l2 = tiles * (k // TILE_K) * l2_bytes / L2_TO_SM_BYTES_PER_S
    out_tile = kernel.tile_n * kernel.tile_m
    tail = constants.latency_s + 2 * out_tile / constants.ingest_bytes_per_s
    if kernel.split_k > 1 and kernel.cluster_reduction:
        # The other splits' fp32 partials from their shared memory, after a cluster barrier.
        tail += 4 * out_tile * (kernel.split_k - 1) / constants.ingest_bytes_per_s + CLUSTER_BARRIER_S
    elif kernel.split_k > 1:
        # fp32 partial out, the arrival's round trip, the other partials back in.
        tail += 4 * out_tile * kernel.split_k / constants.ingest_bytes_per_s + constants.latency_s
    free = B200_SMS - grid
    if kernel.pdl and (kernel.ctas_per_sm > 1 or free >= grid):
        # Two calls in flight: every SM runs one call's tail beside the next call's start and
        # main loop (two CTAs an SM), or the next call's whole grid runs on the SMs this one
        # leaves free.
        in_flight = max(kernel.ctas_per_sm, 2)
        chain = cta_start_s + mainloop + tail
        gpu = max(chain / in_flight, mainloop - units_per_sm * constants.latency_s, dram_bytes / dram_rate, l2)
        return max(gpu, kernel.host_s)
    launch = constants.launch_s
    if kernel.pdl:
        # The next call's CTAs on free SMs load their share during this tail (and the other
        # CTAs' start); the rest start on this call's SMs after its CTAs exit.
        if loads_under_tail:
            dram_bytes -= min(dram_bytes * free / grid, (tail + cta_start_s) * dram_rate)
        launch = cta_start_s
    gpu = launch + max(mainloop, dram_bytes / dram_rate, l2) + tail
    return max(gpu, kernel.host_s)


def winner(shape: tuple) -> Kernel:
    """The first-placed entry: our tiles per shape (its published configuration), no PDL."""
    tile_m, split_k, stages = {
        (128, 7168, 16384, 1): (128, 2, 6), (128, 4096, 7168, 1): (64, 2, 8), (128, 7168, 2048, 1): (64, 1, 8)}[shape]
    return Kernel("first place", 128, tile_m, split_k, stages)


def starter(constants: Constants) -> Kernel:
    """The competition's CuTeDSL starter: 128 x 128 tiles, one stage, one CTA per tile."""
    return Kernel("CuTeDSL starter", 128, 128, stages=1, host_s=constants.starter_host_s)


# Published B200 times per benchmark shape, in us.
PUBLISHED = {
    "first place": (18.3, 8.29, 6.54),
    "cuBLAS": (22.4, 12.5, 8.49),
    "CuTeDSL starter": (96.6, 51.6, 36.9),
}


def calibration(constants: Constants = FITTED) -> list[tuple[str, tuple, tuple | None]]:
    """(kernel, published us per shape, model us per shape or None where its kernel is unknown)."""
    rows = []
    for name, published in PUBLISHED.items():
        if name == "first place":
            model = tuple(call_seconds(winner(shape), shape, constants) * 1e6 for shape in BENCHMARK_SHAPES)
        elif name == "CuTeDSL starter":
            model = tuple(call_seconds(starter(constants), shape, constants) * 1e6 for shape in BENCHMARK_SHAPES)
        else:
            model = None  # cuBLAS's kernel and its configuration are not published
        rows.append((name, published, model))
    sol = tuple(DEVICES["B200"].sol_seconds(*shape) * 1e6 for shape in BENCHMARK_SHAPES)
    rows.append(("speed-of-light", sol, None))
    return rows


def fit() -> Constants:
    """The constants that minimise the squared log error over the modelled published times."""
    grid = itertools.product(
        [x * 0.25e-6 for x in range(2, 25)],  # launch 0.5-6 us
        [x * 0.1e-6 for x in range(3, 21)],  # latency 0.3-2 us
        [x * 20e9 for x in range(4, 21)],  # ingest 80-400 GB/s per SM
        [x * 0.05 for x in range(14, 21)],  # DRAM efficiency 70-100 %
    )
    best, best_error = None, float("inf")
    for launch_s, latency_s, ingest, efficiency in grid:
        constants = Constants(launch_s, latency_s, ingest, efficiency, 0.0)
        error = 0.0
        for shape, published in zip(BENCHMARK_SHAPES, PUBLISHED["first place"]):
            error += math.log(call_seconds(winner(shape), shape, constants) * 1e6 / published) ** 2
        gpu_starter = [call_seconds(starter(constants), shape, constants) * 1e6 for shape in BENCHMARK_SHAPES]
        # The starter's host time binds only where its GPU time is below the published figure.
        host_us = max([p for g, p in zip(gpu_starter, PUBLISHED["CuTeDSL starter"]) if g < p], default=0.0)
        for g, published in zip(gpu_starter, PUBLISHED["CuTeDSL starter"]):
            error += math.log(max(g, host_us) / published) ** 2
        if error < best_error:
            best, best_error = Constants(launch_s, latency_s, ingest, efficiency, host_us * 1e-6), error
    return best


def kernel_for(config, name: str = "this kit's sm_100a kernel") -> Kernel:
    """The model's description of a configuration with tile_m, split_k, stages, pdl and
    ctas_per_sm fields (submission.Sm100Config): 128-row N tiles, one CTA a cluster."""
    return Kernel(name, 128, config.tile_m, config.split_k, config.stages, pdl=config.pdl,
                  ctas_per_sm=config.ctas_per_sm)


def k_share_alternative(config, shape: tuple) -> tuple[float, Kernel]:
    """(seconds, kernel): the model's faster share-K kernel on every SM for `shape`, 64- or
    128-row tiles, with `config`'s pipeline and launch: what filling the SMs would give."""
    m, n, k, l = shape
    candidates = []
    for tile_m in (64, 128):
        tiles = (n // 128) * (m // tile_m) * l
        kernel = Kernel("share-K", 128, tile_m, k_share_parts(tiles, k // TILE_K), config.stages, pdl=config.pdl,
                        share_k=True)
        candidates.append((call_seconds(kernel, shape), kernel))
    return min(candidates, key=lambda candidate: candidate[0])


def candidates(shape: tuple, pdl: bool) -> list[Kernel]:
    """The configurations the model compares for `shape`: 64- and 128-row tiles with as many
    stages as one CTA's shared memory holds (8 and 6), split-K 1, 2 and 4, and share-K; with
    PDL also 64-row tiles two CTAs an SM (3 stages each), split-K 1 and 2."""
    m, n, k, l = shape
    kernels = []
    if pdl:
        for split_k in (1, 2):
            kernels.append(Kernel(f"64 rows, split-K {split_k}, 2 CTAs an SM", 128, 64, split_k, 3, pdl=True,
                                  ctas_per_sm=2))
    for tile_m, stages in ((64, 8), (128, 6)):
        for split_k in (1, 2, 4):
            kernels.append(Kernel(f"{tile_m} rows, split-K {split_k}", 128, tile_m, split_k, stages, pdl=pdl))
        tiles = (n // 128) * (m // tile_m) * l
        kernels.append(Kernel(f"{tile_m} rows, share-K", 128, tile_m, k_share_parts(tiles, k // TILE_K), stages,
                              pdl=pdl, share_k=True))
    return kernels


def preferred(shape: tuple, pdl: bool) -> tuple[float, Kernel]:
    """(seconds, kernel): the fastest of `candidates` by the model."""
    return min(((call_seconds(kernel, shape), kernel) for kernel in candidates(shape, pdl)), key=lambda pair: pair[0])


def levers(config, shape: tuple) -> dict[str, float]:
    """The model's seconds for `config` (submission.Sm100Config) and for the two levers beside
    it: two CTAs an SM (64-row tiles, 3 stages: what half of the shared memory holds; 256 tensor
    memory columns each) with `config`'s split-K, and the split-K exchange through distributed
    shared memory."""
    kernel = kernel_for(config)
    two = dataclasses.replace(kernel, tile_m=64, stages=3, ctas_per_sm=2)
    if kernel.share_k:
        m, n, k, l = shape
        two = dataclasses.replace(two, split_k=k_share_parts((n // 128) * (m // 64) * l, k // TILE_K))
    return {
        "chosen": call_seconds(kernel, shape),
        "two CTAs an SM": call_seconds(two, shape),
        "two CTAs an SM, unsplit": call_seconds(dataclasses.replace(two, split_k=1, share_k=False), shape),
        "cluster reduction": call_seconds(dataclasses.replace(kernel, cluster_reduction=True), shape),
    }


def _us(values) -> list[str]:
    return ["-" if value is None else f"{value:.2f}" for value in values]


def calibration_table(constants: Constants = FITTED) -> Table:
    table = Table(title="B200 cost model, calibration (published times against the model's, us)", title_justify="left")
    for column in ("kernel", *("x".join(map(str, shape)) for shape in BENCHMARK_SHAPES), "geomean"):
        table.add_column(column)
    for name, published, model in calibration(constants):
        table.add_row(f"{name}, published", *_us(published), f"{geomean(published):.2f}")
        if model is not None:
            table.add_row(f"{name}, model", *_us(model), f"{geomean(model):.2f}")
            residuals = [f"{(got / expected - 1) * 100:+.1f} %" for got, expected in zip(model, published)]
            table.add_row(f"{name}, residual", *residuals, f"{(geomean(model) / geomean(published) - 1) * 100:+.1f} %")
    return table


def _geomean_us(kernels: dict, **assumptions) -> list[str]:
    times = [call_seconds(kernels[shape], shape, **assumptions) * 1e6 for shape in BENCHMARK_SHAPES]
    return [*_us(times), f"{geomean(times):.2f}"]


def sensitivity_table(configs: dict) -> Table:
    """The chosen configurations' times under the PDL assumptions no published time tests."""
    table = Table(title="B200 cost model: the chosen configurations under other PDL assumptions (a model's us)",
                  title_justify="left")
    for column in ("CTA start", "next call's loads under the tail",
                   *("x".join(map(str, shape)) for shape in BENCHMARK_SHAPES), "geomean"):
        table.add_column(column)
    kernels = {shape: kernel_for(configs[shape]) for shape in BENCHMARK_SHAPES}
    for cta_start_s in (0.5 * CTA_START_S, CTA_START_S, 1.5 * CTA_START_S):
        for loads_under_tail in (True, False):
            table.add_row(f"{cta_start_s * 1e6:.1f} us", "yes" if loads_under_tail else "no",
                          *_geomean_us(kernels, cta_start_s=cta_start_s, loads_under_tail=loads_under_tail))
    return table


def preferred_table(configs: dict) -> Table:
    """Per benchmark shape: the chosen configuration, the model's fastest with PDL and without
    (what the first-placed entry, which had no PDL, would prefer by the model), and its own."""
    table = Table(title="B200 cost model: chosen against the model's fastest tiles (a model's us)", title_justify="left")
    for column in ("shape", "chosen", "fastest with PDL", "fastest without PDL", "first place's own (no PDL)"):
        table.add_column(column)
    for shape in BENCHMARK_SHAPES:
        cells = [f"{call_seconds(kernel_for(configs[shape]), shape) * 1e6:.2f}"]
        for pdl in (True, False):
            seconds, kernel = preferred(shape, pdl)
            cells.append(f"{seconds * 1e6:.2f} ({kernel.name})")
        first = winner(shape)
        cells.append(f"{call_seconds(first, shape) * 1e6:.2f} ({first.tile_m} rows, split-K {first.split_k})")
        table.add_row("x".join(map(str, shape)), *cells)
    return table


def levers_table(configs: dict) -> Table:
    """`levers` per benchmark shape and their geomeans."""
    table = Table(title="B200 cost model: levers beside the chosen configurations (a model's us)", title_justify="left")
    names = list(levers(configs[BENCHMARK_SHAPES[0]], BENCHMARK_SHAPES[0]))
    for column in ("shape", *names):
        table.add_column(column)
    columns = {name: [] for name in names}
    for shape in BENCHMARK_SHAPES:
        times = levers(configs[shape], shape)
        for name in names:
            columns[name].append(times[name] * 1e6)
        table.add_row("x".join(map(str, shape)), *_us([times[name] * 1e6 for name in names]))
    table.add_row("geomean", *(f"{geomean(columns[name]):.2f}" for name in names))
    return table


def predictions_table(configs: dict) -> Table:
    """The model's time per benchmark shape for the configurations {shape: config}."""
    table = Table(title="B200 cost model: a model's times, not measurements (us)", title_justify="left")
    for column in ("shape", "configuration", "PDL", "model", "share-K, every SM", "first place", "SOL"):
        table.add_column(column)
    times, share_k_times = [], []
    for shape, published in zip(BENCHMARK_SHAPES, PUBLISHED["first place"]):
        config = configs[shape]
        seconds = call_seconds(kernel_for(config), shape)
        alternative_seconds, alternative = k_share_alternative(config, shape)
        times.append(seconds * 1e6)
        share_k_times.append(alternative_seconds * 1e6)
        table.add_row("x".join(map(str, shape)), config.describe(), "yes" if config.pdl else "no",
                      f"{seconds * 1e6:.2f}", f"{alternative_seconds * 1e6:.2f} ({alternative.tile_m} rows)",
                      f"{published:.2f}", f"{DEVICES['B200'].sol_seconds(*shape) * 1e6:.3f}")
    sol_geomean = geomean([DEVICES["B200"].sol_seconds(*shape) * 1e6 for shape in BENCHMARK_SHAPES])
    table.add_row("geomean", "", "", f"{geomean(times):.2f}", f"{geomean(share_k_times):.2f}",
                  f"{geomean(PUBLISHED['first place']):.2f}", f"{sol_geomean:.3f}")
    return table
