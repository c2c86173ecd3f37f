"""A cost model of block-scaled FP4 GEMM kernels on a B200, for a kernel nobody here can run.

It is a model, not a measurement: every figure it gives is labelled as one, and is to be
replaced by a measurement the day a B200 run exists. It times one call of a kernel described by
its tiles, split-K, pipeline depth, reduction and launch, on the competition's shapes, in the
competition's timing (50 calls back to back after an L2 flush, each on its own inputs):

    call = launch + max(main loop, DRAM bytes / DRAM rate, L2 bytes / L2 rate) + epilogue tail

- Each CTA streams its K tiles through `stages` shared-memory slots. A slot's cycle is one
  memory latency, the K tile's transfer at the SM's ingest rate and its MMAs; with S slots a K
  tile costs the largest of its transfer, its MMAs and a cycle / S (Little's law: the bytes the
  stages keep in flight over the latency). The SM's ingest rate is the smaller of a per-SM cap
  and the L2's aggregate rate shared by the SMs in use, so no configuration ever reads L2 faster
  than the L2 delivers.
- The epilogue tail: the last stores' round trip and the output tile at the ingest rate; with
  split-K, either every split's fp32 atomic adds into a zeroed buffer (`Reduction.ATOMIC`, the
  first-placed entry's) or an fp32 partial, an arrival counter and the last split's reads of
  the other partials (`Reduction.PARTIALS`, this kit's). This kit's epilogue (`kit_epilogue`)
  takes each part times a factor from `experiments/pdl_overlap --mode epilogue` (`Epilogue`,
  read from results/epilogue-terms.json; the formula itself until a run is recorded there).
- The launch: without programmatic dependent launch (PDL), the previous grid's drain, the
  launch and the prologue, fitted. With PDL the grid launches early: its CTAs start at once on
  the SMs the previous grid leaves free and load their share under its tail; the others start
  as its CTAs exit and pay a CTA's start (`CTA_START_S`, set). Where the next grid fits on the
  free SMs, or two CTAs an SM give it room on every SM, two calls are in flight: a call then
  takes the overlap factor times the largest of half a call's chain (start, main loop, tail),
  the busiest SM's own ingest and MMAs, and a tail after the previous grid's hand-off (each
  epilogue waits for the whole previous grid); and no less than DRAM and L2 allow. The overlap
  factor and the hand-off come from `experiments/pdl_overlap` (`Overlap`, read from
  results/pdl-overlap-bandwidth.json; assumed until a run is recorded there).
- More work units than SMs run one after another, each paying its first load's latency.

The free constants (launch, latency, per-SM ingest cap, DRAM efficiency) have physical meaning
and bounds; `harness/b200/calibration.py` fits them to some published B200 times and checks
them on others, of configurations the fit never sees. `harness/b200/terms.py` names what backs
each term and varies it over its range.
"""

import dataclasses
import enum
import functools
import json
import math
from pathlib import Path

import numpy as np

from harness.problems.sol import B200_CLOCK_HZ, B200_FP4_FLOP_PER_SM_CLK, B200_SMS, B200_TABLE_BANDWIDTH, SF_VEC_SIZE
from harness.shared.paths import RESULTS_DIR

BENCHMARK_SHAPES = ((128, 7168, 16384, 1), (128, 4096, 7168, 1), (128, 7168, 2048, 1))
TILE_K = 256  # K per load: one 128-byte swizzle row of fp4
SCALE_ATOM_ROWS = 128  # scale tiles are loaded in atoms of 128 rows, whatever the tile's rows
MMA_FLOPS_PER_SM_S = B200_FP4_FLOP_PER_SM_CLK * B200_CLOCK_HZ
# The L2's aggregate read rate to the SMs: set, not fitted (no published time isolates it). It
# bounds the per-SM ingest cap's fit (cap x SMs <= this), so no fitted configuration reads L2
# faster than it.
L2_TO_SM_BYTES_PER_S = 20e12
# A CTA's start on an SM the previous call's grid held, to its first load: the block
# scheduler's dispatch and the prologue (barriers, TMEM allocation, descriptor prefetch). No
# published kernel used PDL, so it is set, not fitted; `b200_report.sensitivity_table` varies it.
CTA_START_S = 1.0e-6
# A cluster barrier's round trip, for the split-K exchange through distributed shared memory:
# set, not fitted (no published kernel did it).
CLUSTER_BARRIER_S = 0.5e-6
OVERLAP_RECORD = RESULTS_DIR / "pdl-overlap-bandwidth.json"
EPILOGUE_RECORD = RESULTS_DIR / "epilogue-terms.json"


class Reduction(enum.Enum):
    """How split-K's partial sums meet."""

    PARTIALS = "fp32 partials, an arrival counter, the last split adds"
    ATOMIC = "fp32 atomic adds into a zeroed buffer"


@dataclasses.dataclass(frozen=True)
class Kernel:
    """What the model needs to know of a kernel."""

    name: str
    tile_n: int  # rows of B (columns of c) per CTA tile
    tile_m: int  # rows of A (rows of c) per CTA tile
    split_k: int = 1
    stages: int = 2
    pdl: bool = False
    tile_k: int = TILE_K
    reduction: Reduction = Reduction.PARTIALS
    out_bytes: int = 2  # bytes of each element of c written (fp16; fp32 where c is returned in fp32)
    # CTAs of neighbouring row tiles that share one B tile and its scales through TMA multicast:
    # L2 reads of them are divided among the cluster (each SM still receives all of it).
    cluster_m: int = 1
    # Every SM takes an even share of the (tile, K tile) iterations; split_k is then the most
    # K ranges (partials) added into one tile.
    share_k: bool = False
    # CTAs an SM holds at once: with 2, the next call's CTAs start beside this call's on every SM.
    ctas_per_sm: int = 1
    # Split-K's partials exchanged through distributed shared memory in one cluster.
    cluster_reduction: bool = False
    # This kit's epilogue (a row of c a thread, element stores, the partials protocol), which
    # experiments/pdl_overlap's epilogue mode mirrors: its tail takes the measured factors
    # (`Epilogue`). Published kernels keep the formula the fit was made with.
    kit_epilogue: bool = False


@dataclasses.dataclass(frozen=True)
class Constants:
    """The free constants. Each may be an array (numpy broadcasting): the fit times every point
    of its grid in one pass."""

    launch_s: float  # without PDL: the previous grid's drain, the launch and the prologue
    latency_s: float  # one memory round trip under load (a load's, a store's drain, an atomic's)
    ingest_bytes_per_s: float  # an SM's own cap on L2-to-shared-memory bytes
    dram_efficiency: float  # the fraction of the SOL table's DRAM rate these kernels' loads reach


# The fit's (harness/b200/calibration.py; `python -m harness model` says so where they differ, and
# results/b200-model-calibration.txt holds its output).
FITTED = Constants(launch_s=3.25e-6, latency_s=1.1e-6, ingest_bytes_per_s=135e9, dram_efficiency=0.70)


@dataclasses.dataclass(frozen=True)
class Overlap:
    """Two calls in flight, as experiments/pdl_overlap measures them: `ratio` is a call's time
    over the model's formula (half the chain, the busiest SM, the serial tails), `handoff_s` the
    previous grid's last exit to the waiting epilogue's release."""

    ratio: float
    handoff_s: float
    source: str  # device, date and commit of the run, or why it is an assumption
    measured: bool
    # What the run saw of two CTAs an SM: the share of CTAs that started beside one of the
    # previous call's on its SM, and a call's time with room for one CTA an SM only.
    beside_previous_call: float | None = None
    one_cta_an_sm_s: float | None = None
    two_ctas_an_sm_s: float | None = None


# Until a bandwidth-bound run is recorded: the hand-off as the latency-bound H100 run measured it
# (docs/figures.md, row "PDL's hand-off, latency-bound"), and a ratio above that run's worst by an
# allowance for the contention of two streaming CTAs on one SM, which a 2 KB-tile kernel could not
# show.
ASSUMED_OVERLAP = Overlap(ratio=1.25, handoff_s=0.8e-6, measured=False,
                          source="ASSUMED: no bandwidth-bound pdl_overlap run recorded in results/")


def load_overlap(path: Path = OVERLAP_RECORD) -> Overlap:
    """The recorded bandwidth-bound pdl_overlap measurement (`run.py --record`), or the assumption."""
    if not path.exists():
        return ASSUMED_OVERLAP
    record = json.loads(path.read_text())
    if record.get("mode") != "bandwidth":
        raise ValueError(f"{path}: a {record.get('mode')!r} run; the model takes a bandwidth-bound one")
    missing = [key for key in ("device", "date", "commit", "overlap_ratio") if record.get(key) is None]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    source = f"measured: {record['device']}, {record['date']}, at {record['commit']} ({path.name})"
    seconds = {name: None if record.get(key) is None else record[key] * 1e-6
               for name, key in (("one_cta_an_sm_s", "one_cta_an_sm_us"), ("two_ctas_an_sm_s", "measured_us"))}
    seen = dict(ratio=record["overlap_ratio"], measured=True, beside_previous_call=record.get("beside_previous_call"),
                **seconds)
    if record.get("handoff_us") is None:
        # No epilogue of the run reached its wait before the previous grid completed.
        return Overlap(handoff_s=ASSUMED_OVERLAP.handoff_s, source=f"{source}; hand-off assumed (no CTA waited)",
                       **seen)
    return Overlap(handoff_s=record["handoff_us"] * 1e-6, source=source, **seen)


OVERLAP = load_overlap()


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """This kit's epilogue as experiments/pdl_overlap's epilogue mode measures it: a call's time
    with c's stores less without them, and with split-K's partials exchange less without it, each
    over `tail_seconds`' formula taken with the fit's round trip under load (`FITTED.latency_s`,
    a B200's, taken as the H200's too: no run tests that) and the run's own SM rate: the factors
    the model applies (`tail_factor`, `exchange_factor`). Over the formula taken with the run's
    own unloaded round trip instead (its chase), the same times give the record's factors, the
    high end of each range (`*_unloaded_factor`): the fit's round trip already holds what load
    adds to a store's, which the unloaded one leaves to the factor."""

    tail_factor: float
    exchange_factor: float
    source: str  # device, date and commit of the run, or that there is none
    measured: bool
    tail_unloaded_factor: float = 1.0
    exchange_unloaded_factor: float = 1.0


FORMULA_EPILOGUE = Epilogue(tail_factor=1.0, exchange_factor=1.0, measured=False,
                            source="no epilogue run recorded in results/: the formula as it stands")
EPILOGUE_FACTORS = ("tail_factor", "exchange_factor")
# The run's parts the factors over the fit's round trip are taken from (run.py `record_epilogue`).
EPILOGUE_PARTS = ("tail_us", "exchange_us", "rate_bytes_per_s", "tile_rows", "tile_cols", "split_k")


def load_epilogue(path: Path = EPILOGUE_RECORD) -> Epilogue:
    """The recorded epilogue measurement (`run.py --mode epilogue --record`), or the formula."""
    if not path.exists():
        return FORMULA_EPILOGUE
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(record, dict) or record.get("mode") != "epilogue":
        mode = record.get("mode") if isinstance(record, dict) else None
        raise ValueError(f"{path}: a {mode!r} run; the model takes an epilogue one (run.py --mode epilogue)")
    missing = [key for key in ("device", "date", "commit", *EPILOGUE_FACTORS, *EPILOGUE_PARTS) if record.get(key) is None]
    if missing:
        raise ValueError(f"{path}: no {', '.join(missing)}")
    for key in (*EPILOGUE_FACTORS, *EPILOGUE_PARTS):
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{path}: {key} is {value!r}, not a positive number: the run did not resolve the term")
    if record.get("counters_left"):
        raise ValueError(f"{path}: {record['counters_left']} split-K counters left non-zero: the run's protocol "
                         "failed, so its times back nothing")
    run = Kernel("the epilogue run", tile_n=int(record["tile_cols"]), tile_m=int(record["tile_rows"]))
    rate = float(record["rate_bytes_per_s"])
    stores_s = tail_seconds(run, FITTED, rate)
    exchange_s = tail_seconds(dataclasses.replace(run, split_k=int(record["split_k"])), FITTED, rate) - stores_s
    return Epilogue(tail_factor=record["tail_us"] * 1e-6 / stores_s, exchange_factor=record["exchange_us"] * 1e-6 / exchange_s,
                    tail_unloaded_factor=float(record["tail_factor"]),
                    exchange_unloaded_factor=float(record["exchange_factor"]),
                    measured=True, source=f"measured: {record['device']}, {record['date']}, at {record['commit']} "
                                          f"({path.name})")


def epilogue_scales(kernel: Kernel) -> tuple[float, float]:
    """(tail, exchange) factors of `kernel`'s epilogue: the measured ones for this kit's, 1 else
    (and 1 for an exchange through distributed shared memory, which the run does not do)."""
    if not kernel.kit_epilogue:
        return 1.0, 1.0
    return EPILOGUE.tail_factor, 1.0 if kernel.cluster_reduction else EPILOGUE.exchange_factor


def stage_bytes(kernel: Kernel) -> int:
    """Bytes one CTA loads per K tile: both fp4 tiles and their e4m3 scales (128-row atoms)."""
    scale_rows = max(kernel.tile_n, SCALE_ATOM_ROWS) + max(kernel.tile_m, SCALE_ATOM_ROWS)
    return (kernel.tile_n + kernel.tile_m) * kernel.tile_k // 2 + scale_rows * kernel.tile_k // SF_VEC_SIZE


def mma_seconds(kernel: Kernel) -> float:
    """One K tile's MMAs (fp4 MMAs are 128 rows at least: a 64-row B tile costs a 128-row one)."""
    return 2 * max(kernel.tile_n, 128) * kernel.tile_m * kernel.tile_k / MMA_FLOPS_PER_SM_S


def _largest(*values):
    """The elementwise largest (scalars or arrays of constants)."""
    return functools.reduce(np.maximum, values)


def sm_ingest_rate(constants: Constants, active_sms: int) -> float:
    """An SM's L2-to-shared-memory rate: its own cap, or its share of the L2's where that is less."""
    return np.minimum(constants.ingest_bytes_per_s, L2_TO_SM_BYTES_PER_S / max(active_sms, 1))


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """One CTA's K loop: a slot's cycle and the steady cost of a K tile."""

    transfer_s: float
    mma_s: float
    cycle_s: float
    stages: int

    @property
    def k_tile_s(self) -> float:
        """A K tile once the loads stream: the largest of a cycle over the stages (Little's law:
        what the stages keep in flight), its transfer at the SM's ingest rate and its MMAs."""
        return _largest(self.cycle_s / self.stages, self.transfer_s, self.mma_s)

    @property
    def bound(self) -> str:
        """What sets the K tile's cost (scalar constants): "in flight", "ingest" or "MMA"."""
        costs = {"in flight": self.cycle_s / self.stages, "ingest": self.transfer_s, "MMA": self.mma_s}
        return max(costs, key=costs.get)

    def seconds(self, units: int, k_tiles: int) -> float:
        """`units` work units one after another over `k_tiles` K tiles in all: each unit's first
        K tile waits a whole cycle, the others stream."""
        return units * self.cycle_s + (k_tiles - units) * self.k_tile_s


def pipeline(kernel: Kernel, constants: Constants, active_sms: int) -> Pipeline:
    rate = sm_ingest_rate(constants, active_sms)
    transfer = stage_bytes(kernel) / rate
    mma = mma_seconds(kernel)
    return Pipeline(transfer, mma, constants.latency_s + transfer + mma, kernel.stages)


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
    """(units, K tiles) of the busiest SM: a unit after the first pays its first load's latency
    again, and so does a share-K share's next tile."""
    if kernel.share_k:
        shares = _k_shares(tiles, k_tiles)
        return max(share[-1] // k_tiles - share[0] // k_tiles + 1 for share in shares), max(map(len, shares))
    units_per_sm = math.ceil(tiles * kernel.split_k / (B200_SMS * kernel.ctas_per_sm))
    return units_per_sm, units_per_sm * (k_tiles // kernel.split_k)


def grid_ctas(kernel: Kernel, tiles: int, k_tiles: int) -> int:
    """CTAs of one call's grid on the SMs at once: one per unit (share-K: per iteration)."""
    return min(B200_SMS * kernel.ctas_per_sm, tiles * (k_tiles if kernel.share_k else kernel.split_k))


def dram_bytes(kernel: Kernel, shape: tuple) -> int:
    """Bytes that cross DRAM once: fp4 A and B, their scales, c as the kernel writes it."""
    m, n, k, l = shape
    return l * ((m + n) * k // 2 + (m + n) * k // SF_VEC_SIZE + kernel.out_bytes * m * n)


def tail_seconds(kernel: Kernel, constants: Constants, rate: float, tail_scale: float = 1.0,
                 exchange_scale: float = 1.0) -> float:
    """The epilogue after the last K tile: c's stores and their round trip (times `tail_scale`),
    and split-K's exchange of partials (times `exchange_scale`)."""
    out_tile = kernel.tile_n * kernel.tile_m
    if kernel.split_k > 1 and kernel.reduction is Reduction.ATOMIC:
        # Every split adds its fp32 tile into the zeroed buffer: its stores; nothing waits on another split.
        return tail_scale * (constants.latency_s + 4 * out_tile / rate)
    stores = tail_scale * (constants.latency_s + kernel.out_bytes * out_tile / rate)
    if kernel.split_k == 1:
        return stores
    if kernel.cluster_reduction:
        # The other splits' fp32 partials from their shared memory, after a cluster barrier.
        return stores + exchange_scale * (4 * out_tile * (kernel.split_k - 1) / rate + CLUSTER_BARRIER_S)
    # The fp32 partial out, the arrival's round trip, the other partials back in.
    return stores + exchange_scale * (4 * out_tile * kernel.split_k / rate + constants.latency_s)


EPILOGUE = load_epilogue()


@dataclasses.dataclass(frozen=True)
class Call:
    """One call's time and its parts, in seconds."""

    seconds: float
    branch: str  # "one call at a time", "PDL, one CTA an SM" or "two calls in flight"
    pipeline: Pipeline
    mainloop_s: float
    tail_s: float
    dram_s: float  # with PDL, what is left once the next call's CTAs on free SMs loaded under this tail
    l2_s: float
    chain_s: float | None = None  # two calls in flight: start + main loop + tail
    busiest_sm_s: float | None = None  # two calls in flight: an SM's own ingest and MMAs per call
    serial_tail_s: float | None = None  # two calls in flight: tail + hand-off


def call(kernel: Kernel, shape: tuple, constants: Constants = FITTED, overlap: Overlap = OVERLAP,
         cta_start_s: float = CTA_START_S, loads_under_tail: bool = True, tail_scale: float | None = None,
         exchange_scale: float | None = None) -> Call:
    """One call in the competition's timing. `cta_start_s`, `loads_under_tail` (the next call's
    CTAs on free SMs load while this call's tail runs) and `overlap` are the PDL assumptions no
    published time tests; `tail_scale` and `exchange_scale` scale the epilogue's stores and
    split-K's partials exchange (left out: `epilogue_scales`, measured on an H200 for this kit's
    epilogue, never on a B200; `harness/b200/terms.py` varies each over its bounds)."""
    kit_tail, kit_exchange = epilogue_scales(kernel)
    tail_scale = kit_tail if tail_scale is None else tail_scale
    exchange_scale = kit_exchange if exchange_scale is None else exchange_scale
    m, n, k, l = shape
    tiles = (n // kernel.tile_n) * (m // kernel.tile_m) * l
    k_tiles = k // kernel.tile_k
    units_per_sm, k_tiles_per_sm = _units_and_k_tiles_per_sm(kernel, tiles, k_tiles)
    grid = grid_ctas(kernel, tiles, k_tiles)
    active_sms = min(grid, B200_SMS)
    flow = pipeline(kernel, constants, active_sms)
    mainloop = flow.seconds(units_per_sm, k_tiles_per_sm)
    dram_rate = B200_TABLE_BANDWIDTH * constants.dram_efficiency
    dram = dram_bytes(kernel, shape) / dram_rate
    shared_b = kernel.tile_n * kernel.tile_k // 2 + max(kernel.tile_n, SCALE_ATOM_ROWS) * kernel.tile_k // SF_VEC_SIZE
    l2_per_k_tile = stage_bytes(kernel) - shared_b * (1 - 1 / kernel.cluster_m)
    l2 = tiles * k_tiles * l2_per_k_tile / L2_TO_SM_BYTES_PER_S
    tail = tail_seconds(kernel, constants, sm_ingest_rate(constants, active_sms), tail_scale, exchange_scale)
    parts = dict(pipeline=flow, mainloop_s=mainloop, tail_s=tail, dram_s=dram, l2_s=l2)
    free = B200_SMS - active_sms
    if not kernel.pdl:
        return Call(constants.launch_s + _largest(mainloop, dram, l2) + tail, "one call at a time", **parts)
    if kernel.ctas_per_sm > 1 or free >= grid:
        # Two calls in flight: every SM runs one call's tail beside the next call's start and
        # main loop (two CTAs an SM), or the next call's whole grid runs on the SMs this one
        # leaves free. The busiest SM still takes in its own CTAs' bytes and runs their MMAs (a
        # grid on half the SMs or fewer comes to it every other call), and each epilogue waits
        # for the previous grid to complete.
        chain = cta_start_s + mainloop + tail
        streaming = k_tiles_per_sm * _largest(flow.transfer_s, flow.mma_s)
        busiest_sm = streaming * max(grid / B200_SMS, 0.5)
        serial_tail = tail + overlap.handoff_s
        seconds = _largest(overlap.ratio * _largest(chain / 2, busiest_sm, serial_tail), dram, l2)
        return Call(seconds, "two calls in flight", chain_s=chain, busiest_sm_s=busiest_sm, serial_tail_s=serial_tail,
                    **parts)
    bytes_left = dram_bytes(kernel, shape)
    if loads_under_tail:
        # The next call's CTAs on free SMs load their share during this tail (and the other
        # CTAs' start); the rest start on this call's SMs after its CTAs exit.
        bytes_left = bytes_left - np.minimum(bytes_left * free / grid, (tail + cta_start_s) * dram_rate)
    parts["dram_s"] = bytes_left / dram_rate
    return Call(cta_start_s + _largest(mainloop, parts["dram_s"], l2) + tail, "PDL, one CTA an SM", **parts)


def call_seconds(kernel: Kernel, shape: tuple, constants: Constants = FITTED, **assumptions) -> float:
    return call(kernel, shape, constants, **assumptions).seconds


# The bounds of what no published time tests, for `low_high`: the overlap factor from the formula
# exact (1.0) to no overlap at all (2.0: two calls in flight take as long as two calls in turn),
# a CTA's start under PDL from half to one and a half times `CTA_START_S`, the next call's loads
# under this call's tail or not, the hand-off from the latency-bound run's least (docs/figures.md,
# row "PDL's hand-off, latency-bound") to twice the one in use, and the epilogue's stores and
# split-K's partials exchange (`scale_bounds`) from half to twice the formula's, or, measured on
# an H200, within 1.5 times the measured factor either way (a B200's memory system is not an H200's)
# and up to the factor over the run's unloaded round trip.
OVERLAP_BOUNDS = (1.0, 2.0)
CTA_START_BOUNDS_S = (0.5 * CTA_START_S, 1.5 * CTA_START_S)
HANDOFF_BOUNDS_S = (0.77e-6, 2 * OVERLAP.handoff_s)
UNMEASURED_SPREAD = 2.0
MEASURED_SPREAD = 1.5


def scale_bounds(factor: float, measured: bool, unloaded_factor: float = 0.0) -> tuple[float, float]:
    """The range of an epilogue factor: `factor` divided and multiplied by its spread, and, measured,
    up to the factor over the run's unloaded round trip where that is higher."""
    spread = MEASURED_SPREAD if measured else UNMEASURED_SPREAD
    return factor / spread, max(factor * spread, unloaded_factor if measured else 0.0)


def epilogue_bounds() -> tuple[tuple[float, float], tuple[float, float]]:
    """(tail, exchange) ranges of the epilogue in use (`EPILOGUE`)."""
    return (scale_bounds(EPILOGUE.tail_factor, EPILOGUE.measured, EPILOGUE.tail_unloaded_factor),
            scale_bounds(EPILOGUE.exchange_factor, EPILOGUE.measured, EPILOGUE.exchange_unloaded_factor))


def _with_point(bounds, point) -> list:
    return sorted({*bounds, point})


def low_high(kernel: Kernel, shape: tuple, constant_sets: list[Constants]) -> tuple[float, float]:
    """(least, most) seconds of a call of `kernel` on `shape` over the constant sets (the
    calibration's near-optimal ones) and the bounds above, the point's own values among them:
    the model's own range beside its point."""
    overlaps = [dataclasses.replace(OVERLAP, ratio=ratio, handoff_s=handoff)
                for ratio in _with_point(OVERLAP_BOUNDS, OVERLAP.ratio)
                for handoff in _with_point(HANDOFF_BOUNDS_S, OVERLAP.handoff_s)]
    tail_point, exchange_point = epilogue_scales(kernel)
    tail_bounds, exchange_bounds = epilogue_bounds()
    times = [call_seconds(kernel, shape, constants, overlap=overlap, cta_start_s=start, loads_under_tail=loads,
                          tail_scale=tail, exchange_scale=exchange)
             for constants in constant_sets for overlap in overlaps
             for start in _with_point(CTA_START_BOUNDS_S, CTA_START_S) for loads in (True, False)
             for tail in _with_point(tail_bounds, tail_point)
             for exchange in _with_point(exchange_bounds, exchange_point)]
    return min(times), max(times)


def kernel_for(config, name: str = "this kit's sm_100a kernel") -> Kernel:
    """The model's description of a configuration with mma_n (the model's tile_m: rows of c),
    split_k, stages, pdl and ctas_per_sm fields (submission.Sm100Config): 128-row N tiles, one
    CTA a cluster."""
    return Kernel(name, 128, config.mma_n, config.split_k, config.stages, pdl=config.pdl,
                  ctas_per_sm=config.ctas_per_sm, kit_epilogue=True)


def k_share_alternative(config, shape: tuple) -> tuple[float, Kernel]:
    """(seconds, kernel): the model's faster share-K kernel on every SM for `shape`, 64- or
    128-row tiles, with `config`'s pipeline and launch: what filling the SMs would give."""
    m, n, k, l = shape
    candidates = []
    for tile_m in (64, 128):
        tiles = (n // 128) * (m // tile_m) * l
        kernel = Kernel("share-K", 128, tile_m, k_share_parts(tiles, k // TILE_K), config.stages, pdl=config.pdl,
                        share_k=True, kit_epilogue=True)
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
                                  ctas_per_sm=2, kit_epilogue=True))
    for tile_m, stages in ((64, 8), (128, 6)):
        for split_k in (1, 2, 4):
            kernels.append(Kernel(f"{tile_m} rows, split-K {split_k}", 128, tile_m, split_k, stages, pdl=pdl,
                                  kit_epilogue=True))
        tiles = (n // 128) * (m // tile_m) * l
        kernels.append(Kernel(f"{tile_m} rows, share-K", 128, tile_m, k_share_parts(tiles, k // TILE_K), stages,
                              pdl=pdl, share_k=True, kit_epilogue=True))
    return kernels


def preferred(shape: tuple, pdl: bool) -> tuple[float, Kernel]:
    """(seconds, kernel): the fastest of `candidates` by the model."""
    return min(((call_seconds(kernel, shape), kernel) for kernel in candidates(shape, pdl)), key=lambda pair: pair[0])


def levers(config, shape: tuple) -> dict[str, float]:
    """The model's seconds for `config` (submission.Sm100Config) and for the levers beside it:
    one CTA an SM with 8 stages, two CTAs an SM (64-row tiles, 3 stages each: what half of the
    shared memory holds) with `config`'s split-K and unsplit, and the split-K exchange through
    distributed shared memory."""
    kernel = kernel_for(config)
    two = dataclasses.replace(kernel, tile_m=64, stages=3, ctas_per_sm=2)
    return {
        "chosen": call_seconds(kernel, shape),
        "one CTA an SM, 64 rows, 8 stages": call_seconds(dataclasses.replace(kernel, tile_m=64, stages=8,
                                                                             ctas_per_sm=1), shape),
        "two CTAs an SM": call_seconds(two, shape),
        "two CTAs an SM, unsplit": call_seconds(dataclasses.replace(two, split_k=1), shape),
        "cluster reduction": call_seconds(dataclasses.replace(kernel, cluster_reduction=True), shape),
    }
