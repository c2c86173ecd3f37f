"""The B200 cost model's calibration: published B200 times of kernels whose configuration is
public, the fit of the model's constants to some of them, and the others held out by
configuration.

The first-placed nvfp4_gemm entry published its versions, their times on the three benchmark
shapes and their code (github.com/gau-nernst/gpu-mode-kernels, nvidia/nvfp4_gemm/README.md and
submission_v*.py). Every version is non-persistent (one CTA a tile or a split), without PDL,
with 128-byte swizzled TMA loads of 256-wide K tiles; its split-K adds fp32 tiles with atomics
into a buffer zeroed once, and returns c in fp32 there. The competition's CuTeDSL starter
(github.com/gpu-mode/reference-kernels, problems/nvidia/nvfp4_gemm/submission.py) is 128 x 128
tiles with one stage.

A point is one version's time on one shape; its configuration is the model's description of
the kernel there (`Kernel` less its name: tiles, split-K, stages, K tile, reduction, output
bytes), whatever the shape. Later versions reuse earlier ones' configurations, so holding out
versions would hold out little: the held-out set is every point whose configuration the
first-placed entry placed (`HELD_OUT_CONFIGURATIONS`), and the fit never sees a point of those
configurations, on any shape. Leave-one-configuration-out (`cross_validation`) predicts each
configuration's points by a fit without them.
"""

import dataclasses
import itertools
import math

import numpy as np

from harness.b200.model import (B200_SMS, BENCHMARK_SHAPES, FITTED, L2_TO_SM_BYTES_PER_S, Constants, Kernel,
                                Reduction, call_seconds)
from harness.shared.stats import geomean

S1, S2, S3 = BENCHMARK_SHAPES


@dataclasses.dataclass(frozen=True)
class Published:
    """One published kernel version: its time per benchmark shape (us) and its configuration
    per shape; a shape in `not_modelled` has a time the model does not describe (said why)."""

    name: str
    times_us: tuple
    kernels: dict  # shape -> Kernel
    note: str = ""
    not_modelled: tuple = ()


def _first_place(name: str, tile_n: int, tile_m: int, split_k: int, stages: int, tile_k: int = 256) -> Kernel:
    """A version of the first-placed entry: operands swapped (tile_n rows of b, tile_m of a),
    split-K by fp32 atomic adds, c returned in fp32 where K is split."""
    return Kernel(name, tile_n, tile_m, split_k, stages, tile_k=tile_k, reduction=Reduction.ATOMIC,
                  out_bytes=4 if split_k > 1 else 2)


def _per_shape(name: str, *configs) -> dict:
    return {shape: _first_place(name, *config) for shape, config in zip(BENCHMARK_SHAPES, configs)}


_V0 = ((128, 128, 1, 6),) * 3  # submission_v0*.py: 128 x 128 tiles, 6 stages, whole K
_V1 = ((128, 128, 2, 6), (128, 128, 4, 6), (128, 128, 2, 4))  # submission_v1.py's LAUNCH lines
_V2 = ((128, 64, 1, 8), (64, 64, 1, 5, 512), (128, 64, 1, 6))  # submission_v2/v3/v3b.py's gemm()
_V4 = ((128, 128, 2, 6), (128, 64, 2, 8), (128, 64, 1, 8))  # submission_v4.py's LAUNCH lines
_MIX = (*_V4[:2], _V2[2])  # "mix (4+3b)": v4 on the first two shapes, v3b on the third

STARTER = Kernel("CuTeDSL starter", 128, 128, 1, 1)

# Times in us (README.md's leaderboard table). v1b (a second kernel for the reduction) and v2b
# (cp.async loads of 32-row tiles) are left out: the model describes neither.
PUBLISHED = (
    Published("CuTeDSL starter", (96.6, 51.6, 36.9), {shape: STARTER for shape in BENCHMARK_SHAPES},
              note="one stage", not_modelled=(S3,)),
    Published("v0", (23.8, 12.3, 8.3), _per_shape("v0", *_V0)),
    Published("v0b", (23.4, 12.4, 8.28), _per_shape("v0b", *_V0), note="v0, another epilogue"),
    Published("v0c", (22.6, 12.4, 8.25), _per_shape("v0c", *_V0), note="v0, operands swapped"),
    Published("v1", (18.7, 8.47, 8.25), _per_shape("v1", *_V1), note="split-K, fp32 atomics"),
    Published("v2", (20.0, 10.3, 7.74), _per_shape("v2", *_V2), note="64-row tiles"),
    Published("v3", (19.0, 10.3, 7.28), _per_shape("v3", *_V2), note="v2's tiles, epilogue warps"),
    Published("v3b", (18.8, 10.3, 6.78), _per_shape("v3b", *_V2), note="v3, first loads unrolled"),
    Published("v4", (18.2, 8.3, 6.63), _per_shape("v4", *_V4), note="split-K and 64-row tiles"),
    Published("first place (mix)", (18.3, 8.29, 6.54), _per_shape("first place", *_MIX),
              note="the entry as placed: v4, v4, v3b"),
)
FIRST_PLACE = PUBLISHED[-1]
# The starter's third shape: 36.9 us is its host time per call (CuTeDSL's Python launch path),
# which the model does not time: its GPU time there is a few us.
HOST_BOUND = "host-bound (CuTeDSL's Python launch), not modelled"
# Published, configuration unknown: shown, never modelled.
CUBLAS_US = (22.4, 12.5, 8.49)

# The fit's grid: each constant over its physical range. The per-SM ingest cap stops where 148
# SMs at the cap would read the L2's whole aggregate rate.
GRID = dict(
    launch_s=[x * 0.25e-6 for x in range(4, 21)],  # 1-5 us: a grid's drain, launch and prologue
    latency_s=[x * 0.1e-6 for x in range(5, 21)],  # 0.5-2 us: a loaded DRAM round trip
    ingest_bytes_per_s=[x * 5e9 for x in range(8, int(L2_TO_SM_BYTES_PER_S / B200_SMS / 5e9) + 1)],  # 40-135 GB/s
    dram_efficiency=[round(x * 0.05, 2) for x in range(10, 20)],  # 50-95 % of 7.68 TB/s
)
# A constant set whose squared log error is within this of the best is as good a fit: the
# spread of their predictions is the model's own uncertainty.
NEAR_OPTIMAL = 0.01


def configuration(kernel: Kernel) -> Kernel:
    """What the model knows of a kernel, its name left out: two points of one configuration
    differ only by their shape."""
    return dataclasses.replace(kernel, name="")


# The configurations of the first-placed entry as placed: every point of them is held out.
HELD_OUT_CONFIGURATIONS = frozenset(configuration(kernel) for kernel in FIRST_PLACE.kernels.values())


def all_points() -> list[tuple[Published, tuple, float]]:
    """(version, shape, published us) of every modelled point."""
    return [(version, shape, us) for version in PUBLISHED for shape, us in zip(BENCHMARK_SHAPES, version.times_us)
            if shape not in version.not_modelled]


def is_held_out(version: Published, shape: tuple) -> bool:
    return configuration(version.kernels[shape]) in HELD_OUT_CONFIGURATIONS


def points(held_out: bool) -> list[tuple[Published, tuple, float]]:
    """(version, shape, published us) of the fit set or the held-out set."""
    return [point for point in all_points() if is_held_out(*point[:2]) == held_out]


def model_us(version: Published, shape: tuple, constants: Constants = FITTED) -> float:
    return call_seconds(version.kernels[shape], shape, constants) * 1e6


def squared_log_error(constants: Constants, held_out: bool = False):
    """Over the set's points; an array where the constants are arrays."""
    return sum(np.log(model_us(version, shape, constants) / us) ** 2 for version, shape, us in points(held_out))


def residuals(held_out: bool, constants: Constants = FITTED) -> list[tuple[str, tuple, float, float]]:
    """(version, shape, published us, model us) for each point of the set."""
    return [(version.name, shape, us, model_us(version, shape, constants)) for version, shape, us in points(held_out)]


def rms_log_residual(rows) -> float:
    """The residuals' root mean square, in log terms (0.1 is about 10 %)."""
    return math.sqrt(sum(math.log(model / published) ** 2 for _, _, published, model in rows) / len(rows))


def worst(rows) -> tuple[str, tuple, float, float]:
    """The row of the largest relative residual."""
    return max(rows, key=lambda row: abs(row[3] / row[2] - 1))


def _grid_columns() -> list[np.ndarray]:
    return [np.array(column) for column in zip(*itertools.product(*GRID.values()))]


def _constants_at(columns: list[np.ndarray], index: int) -> Constants:
    return Constants(*(float(column[index]) for column in columns))


def grid_errors() -> list[tuple[float, Constants]]:
    """(fit-set error, constants) at every point of the grid, timed in one pass over arrays."""
    columns = _grid_columns()
    errors = squared_log_error(Constants(*columns))
    return [(float(error), _constants_at(columns, i)) for i, error in enumerate(errors)]


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """One configuration's points predicted by the grid's best fit to every other point."""

    configuration: Kernel
    constants: Constants
    rows: list  # (version, shape, published us, model us)


def cross_validation() -> list[LeftOut]:
    """Leave one configuration out, for each configuration of the published points (fit and
    held-out sets alike): the grid's least squared log error over the other configurations'
    points, and its predictions of the one left out. The grid is timed once, for every point."""
    every = all_points()
    columns = _grid_columns()
    grid = Constants(*columns)
    log_residuals = np.array([np.log(model_us(version, shape, grid) / us) for version, shape, us in every])
    kinds = [configuration(version.kernels[shape]) for version, shape, _ in every]
    results = []
    for left_out in dict.fromkeys(kinds):
        outside = np.array([kind != left_out for kind in kinds])
        best = int(np.argmin((log_residuals[outside] ** 2).sum(axis=0)))
        rows = [(version.name, shape, us, us * math.exp(log_residuals[i, best]))
                for i, ((version, shape, us), kind) in enumerate(zip(every, kinds)) if kind == left_out]
        results.append(LeftOut(left_out, _constants_at(columns, best), rows))
    return results


def fit(errors: list | None = None) -> Constants:
    """The grid's constants of least squared log error over the fit set."""
    return min(errors or grid_errors(), key=lambda pair: pair[0])[1]


def near_optimal(errors: list | None = None) -> list[Constants]:
    """Every constant set within NEAR_OPTIMAL of the best fit."""
    errors = errors or grid_errors()
    best = min(error for error, _ in errors)
    return [constants for error, constants in errors if error <= best + NEAR_OPTIMAL]


def spread(kernels: dict, constant_sets: list[Constants]) -> tuple[list[tuple[float, float]], tuple[float, float]]:
    """([(least, most) us per benchmark shape], (least, most) geomean) of `kernels` {shape:
    Kernel} over the constant sets."""
    times = [[call_seconds(kernels[shape], shape, constants) * 1e6 for shape in BENCHMARK_SHAPES]
             for constants in constant_sets]
    per_shape = [(min(column), max(column)) for column in zip(*times)]
    geomeans = [geomean(row) for row in times]
    return per_shape, (min(geomeans), max(geomeans))
