"""The B200 cost model's tables: its constants, its calibration with held-out residuals, and its
times for this kit's configurations (a model's figures, never measurements)."""

import dataclasses

from rich.table import Table

from harness.b200 import calibration, model, terms
from harness.problems.sol import DEVICES
from harness.results.tables import Fitted
from harness.shared.stats import geomean

SHAPE_COLUMNS = tuple("x".join(map(str, shape)) for shape in model.BENCHMARK_SHAPES)
# The same as headers of a column of figures: spaced, so that a narrow terminal wraps them.
SHAPE_HEADERS = tuple(" x ".join(map(str, shape)) for shape in model.BENCHMARK_SHAPES)
# The previous model's figures for this kit's kernel (at PREVIOUS_MODEL_COMMIT): one latency, then
# 300 GB/s an SM whatever the pipeline's depth, and two calls in flight as an exact halving. Shown
# beside the current model's so that a reader of older documents can place them.
PREVIOUS_MODEL_US = (11.98, 3.27, 2.31)
PREVIOUS_MODEL_COMMIT = "2198f47"


def _us(values) -> list[str]:
    return ["-" if value is None else f"{value:.2f}" for value in values]


def _table(title: str, *columns: str) -> Table:
    """Every column's text may wrap between words (a figure has none, so it is never cut)."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def constants_table(constants: model.Constants = model.FITTED, overlap: model.Overlap = model.OVERLAP) -> Fitted:
    table = _table("B200 cost model: its constants", "constant", "value", "range", "how")
    grid = calibration.GRID
    table.add_row("launch (no PDL)", f"{constants.launch_s * 1e6:.2f} us",
                  f"{grid['launch_s'][0] * 1e6:.2f}-{grid['launch_s'][-1] * 1e6:.2f} us", "fitted")
    table.add_row("memory latency under load", f"{constants.latency_s * 1e6:.2f} us",
                  f"{grid['latency_s'][0] * 1e6:.2f}-{grid['latency_s'][-1] * 1e6:.2f} us", "fitted")
    table.add_row("per-SM ingest cap", f"{constants.ingest_bytes_per_s / 1e9:.0f} GB/s",
                  f"{grid['ingest_bytes_per_s'][0] / 1e9:.0f}-{grid['ingest_bytes_per_s'][-1] / 1e9:.0f} GB/s "
                  "(148 SMs x cap <= L2)", "fitted")
    table.add_row("DRAM efficiency", f"{constants.dram_efficiency:.2f} x 7.68 TB/s",
                  f"{grid['dram_efficiency'][0]:.2f}-{grid['dram_efficiency'][-1]:.2f}", "fitted")
    table.add_row("L2 to SMs, aggregate", f"{model.L2_TO_SM_BYTES_PER_S / 1e12:.0f} TB/s", "-", "set")
    table.add_row("CTA start under PDL", f"{model.CTA_START_S * 1e6:.2f} us", "-", "set")
    table.add_row("two in flight: measured / formula", f"{overlap.ratio:.2f}", "-", overlap.source)
    table.add_row("two in flight: hand-off", f"{overlap.handoff_s * 1e6:.2f} us", "-", overlap.source)
    return Fitted(table, ("range",))


def _set_of(version: calibration.Published) -> str:
    """"fit", "held out", or both where the version's shapes fall on both sides."""
    sides = {calibration.is_held_out(version, shape) for shape in model.BENCHMARK_SHAPES
             if shape not in version.not_modelled}
    return " + ".join(label for held_out, label in ((False, "fit"), (True, "held out")) if held_out in sides)


def _residual(version: calibration.Published, shape: tuple, got: float | None, published: float) -> str:
    if got is None:
        return calibration.HOST_BOUND
    return f"{(got / published - 1) * 100:+.1f} %" + (" held out" if calibration.is_held_out(version, shape) else "")


def _summary_row(table: Table, label: str, rows: list) -> None:
    worst = calibration.worst(rows)
    table.add_row(label, f"RMS log residual over {len(rows)} points", f"{calibration.rms_log_residual(rows):.3f}",
                  f"worst: {worst[0]}, {'x'.join(map(str, worst[1]))}", f"{(worst[3] / worst[2] - 1) * 100:+.1f} %", "")


def calibration_table(constants: model.Constants = model.FITTED) -> Fitted:
    """Every published version: its times, the model's, the residuals; the fit set, the held-out
    set (every point of the first-placed entry's configurations) and leave-one-configuration-out."""
    table = _table("B200 cost model, calibration: published B200 times against the model's (us); residual = model / "
                   "published - 1; held out: a configuration the first-placed entry placed, which the fit never sees",
                   "set", "version", *SHAPE_HEADERS, "geomean")
    for version in calibration.PUBLISHED:
        name = f"{version.name} ({version.note})" if version.note else version.name
        label = _set_of(version)
        modelled = [None if shape in version.not_modelled else calibration.model_us(version, shape, constants)
                    for shape in model.BENCHMARK_SHAPES]
        table.add_row(label, f"{name}, published", *_us(version.times_us), f"{geomean(version.times_us):.2f}")
        table.add_row(label, f"{name}, model", *_us(modelled),
                      "-" if None in modelled else f"{geomean(modelled):.2f}")
        table.add_row(label, "  residual", *[_residual(version, shape, got, us) for shape, got, us
                                              in zip(model.BENCHMARK_SHAPES, modelled, version.times_us)], "")
    for held_out in (False, True):
        _summary_row(table, "held out" if held_out else "fit", calibration.residuals(held_out, constants))
    table.add_row("-", "cuBLAS, published (configuration unknown, not modelled)", *_us(calibration.CUBLAS_US),
                  f"{geomean(calibration.CUBLAS_US):.2f}")
    sol = [DEVICES["B200"].sol_seconds(*shape) * 1e6 for shape in model.BENCHMARK_SHAPES]
    table.add_row("-", "speed-of-light (competition's table)", *_us(sol), f"{geomean(sol):.2f}")
    return Fitted(table, ("geomean", "set"))


def describe(kernel: model.Kernel) -> str:
    """A configuration in words, as the calibration tells them apart."""
    split = "whole K" if kernel.split_k == 1 else f"split-K {kernel.split_k} ({kernel.reduction.name.lower()})"
    return (f"{kernel.tile_n} x {kernel.tile_m} tiles, K tile {kernel.tile_k}, {split}, {kernel.stages} "
            f"stage{'s' if kernel.stages > 1 else ''}, c in {'fp32' if kernel.out_bytes == 4 else 'fp16'}")


def cross_validation_table(left_out: list[calibration.LeftOut]) -> Fitted:
    """Each configuration's points predicted by the fit without them (`calibration.cross_validation`)."""
    table = _table("B200 cost model, leave one configuration out: each configuration's published points predicted "
                   "by the constants fitted to every other configuration's", "configuration", "points",
                   "constants fitted without it", "residuals", "RMS log")
    for result in left_out:
        c = result.constants
        points = ", ".join(f"{name} {'x'.join(map(str, shape[1:3]))}" for name, shape, _, _ in result.rows)
        residuals = " ".join(f"{(got / published - 1) * 100:+.1f}%" for _, _, published, got in result.rows)
        held = " (held out)" if result.configuration in calibration.HELD_OUT_CONFIGURATIONS else ""
        table.add_row(describe(result.configuration) + held, points,
                      f"{c.launch_s * 1e6:.2f} us, {c.latency_s * 1e6:.2f} us, {c.ingest_bytes_per_s / 1e9:.0f} GB/s, "
                      f"{c.dram_efficiency:.2f}", residuals, f"{calibration.rms_log_residual(result.rows):.3f}")
    every = [row for result in left_out for row in result.rows]
    worst = calibration.worst(every)
    table.add_row(f"all {len(left_out)} configurations", f"{len(every)} points", "-",
                  f"worst: {worst[0]}, {'x'.join(map(str, worst[1]))}, {(worst[3] / worst[2] - 1) * 100:+.1f} %",
                  f"{calibration.rms_log_residual(every):.3f}")
    return Fitted(table, ("constants fitted without it", "points"))


def terms_table(configs: dict, constant_sets: list) -> Fitted:
    """Each term of the model (`terms.terms`): what sets it, its backing, the range used, and the
    chosen configurations' calls with the term at the range's ends (a model's us)."""
    kernels = _kernels(configs)
    points = [model.call_seconds(kernels[shape], shape) * 1e6 for shape in model.BENCHMARK_SHAPES]
    table = _table("B200 cost model: its terms, what backs each, and each one's low-high on the chosen "
                   "configurations, the rest at the point (a model's us)", "term", "value", "set by", "backing",
                   "range used", *(f"{header} (point {point:.2f})" for header, point in zip(SHAPE_HEADERS, points)))
    for term in terms.terms(constant_sets):
        cells = []
        for shape, point in zip(model.BENCHMARK_SHAPES, points):
            low, high = (seconds * 1e6 for seconds in term.effect(kernels[shape], shape))
            cells.append("no effect" if f"{low:.2f}" == f"{high:.2f}" == f"{point:.2f}" else f"{low:.2f}-{high:.2f}")
        table.add_row(term.name, term.value, term.set_by, term.backing, term.range_used, *cells)
    return Fitted(table, ("backing", "range used"))


def _kernels(configs: dict) -> dict:
    return {shape: model.kernel_for(configs[shape]) for shape in model.BENCHMARK_SHAPES}


def predictions_table(configs: dict, constant_sets: list | None = None) -> Fitted:
    """The model's time per benchmark shape for the configurations {shape: config}, what binds
    it, the previous model's figure and, given near-optimal constant sets, their spread."""
    table = _table("B200 cost model: a model's times, not measurements (us)", "shape", "configuration", "PDL",
                   "model", "what binds", "near-optimal constants", "previous model", "first place, published",
                   "SOL")
    kernels = _kernels(configs)
    spread = calibration.spread(kernels, constant_sets) if constant_sets else None
    times = []
    for i, (shape, published) in enumerate(zip(model.BENCHMARK_SHAPES, calibration.FIRST_PLACE.times_us)):
        modelled = model.call(kernels[shape], shape)
        times.append(modelled.seconds * 1e6)
        low_high = f"{spread[0][i][0]:.2f}-{spread[0][i][1]:.2f}" if spread else "-"
        table.add_row(SHAPE_COLUMNS[i], configs[shape].describe(), "yes" if configs[shape].pdl else "no",
                      f"{modelled.seconds * 1e6:.2f}", binding(modelled), low_high, f"{PREVIOUS_MODEL_US[i]:.2f}",
                      f"{published:.2f}", f"{DEVICES['B200'].sol_seconds(*shape) * 1e6:.3f}")
    sol_geomean = geomean([DEVICES["B200"].sol_seconds(*shape) * 1e6 for shape in model.BENCHMARK_SHAPES])
    table.add_row("geomean", "", "", f"{geomean(times):.2f}", "",
                  f"{spread[1][0]:.2f}-{spread[1][1]:.2f}" if spread else "-",
                  f"{geomean(PREVIOUS_MODEL_US):.2f} (at {PREVIOUS_MODEL_COMMIT})",
                  f"{geomean(calibration.FIRST_PLACE.times_us):.2f}", f"{sol_geomean:.3f}")
    return Fitted(table, ("previous model", "near-optimal constants", "first place, published", "PDL", "what binds"))


def range_table(configs: dict, constant_sets: list) -> Fitted:
    """Each benchmark shape's point beside its low and high (`model.low_high`): the near-optimal
    constants and the bounds of the PDL assumptions, the hand-off, the tail and the partials
    reduction together."""
    table = _table("B200 cost model: the point and its range over the near-optimal constants and the bounds of "
                   "the PDL terms, the tail and the partials reduction (a model's us, not measurements)", "shape",
                   "low", "point", "high")
    kernels = _kernels(configs)
    points, lows, highs = [], [], []
    for column, shape in zip(SHAPE_COLUMNS, model.BENCHMARK_SHAPES):
        low, high = (seconds * 1e6 for seconds in model.low_high(kernels[shape], shape, constant_sets))
        point = model.call_seconds(kernels[shape], shape) * 1e6
        points.append(point), lows.append(low), highs.append(high)
        table.add_row(column, f"{low:.2f}", f"{point:.2f}", f"{high:.2f}")
    table.add_row("geomean", f"{geomean(lows):.2f}", f"{geomean(points):.2f}", f"{geomean(highs):.2f}")
    return Fitted(table)


def binding(modelled: model.Call) -> str:
    """What sets a call's time, in words."""
    if modelled.branch == "two calls in flight":
        terms = {"half the chain": modelled.chain_s / 2, "the busiest SM": modelled.busiest_sm_s,
                 "tail + hand-off": modelled.serial_tail_s}
        term = max(terms, key=terms.get)
        if modelled.dram_s >= modelled.seconds:
            term = "DRAM"
        return f"two in flight: {term}"
    main = {"main loop": modelled.mainloop_s, "DRAM": modelled.dram_s, "L2": modelled.l2_s}
    term = max(main, key=main.get)
    if term == "main loop":
        term = f"main loop ({modelled.pipeline.bound})"
    return f"{modelled.branch}: {term}"


def sensitivity_table(configs: dict) -> Fitted:
    """The chosen configurations' times under the PDL assumptions no published time tests."""
    table = _table("B200 cost model: the chosen configurations under other PDL assumptions (a model's us)",
                   "two in flight: measured / formula", "CTA start", "next call's loads under the tail",
                   *SHAPE_HEADERS, "geomean")
    kernels = _kernels(configs)
    in_use = model.OVERLAP
    rows = [(in_use, model.CTA_START_S, True), (in_use, 0.5 * model.CTA_START_S, True),
            (in_use, 1.5 * model.CTA_START_S, False)]
    rows += [(dataclasses.replace(in_use, ratio=ratio), model.CTA_START_S, True) for ratio in (1.0, 1.5, 2.0)]
    for overlap, cta_start_s, loads_under_tail in rows:
        times = [model.call_seconds(kernels[shape], shape, overlap=overlap, cta_start_s=cta_start_s,
                                    loads_under_tail=loads_under_tail) * 1e6 for shape in model.BENCHMARK_SHAPES]
        label = f"{overlap.ratio:.2f}" + (" (in use)" if overlap == in_use else "") + (" (as no overlap)" if
                                                                                       overlap.ratio == 2.0 else "")
        table.add_row(label, f"{cta_start_s * 1e6:.1f} us", "yes" if loads_under_tail else "no", *_us(times),
                      f"{geomean(times):.2f}")
    return Fitted(table, ("geomean",))


def preferred_table(configs: dict) -> Fitted:
    """Per benchmark shape: the chosen configuration, the model's fastest with PDL and without,
    and the first-placed entry as it published itself."""
    table = _table("B200 cost model: chosen against the model's fastest tiles (a model's us)", "shape", "chosen",
                   "fastest with PDL", "fastest without PDL", "first place as published (no PDL)")
    for shape, column in zip(model.BENCHMARK_SHAPES, SHAPE_COLUMNS):
        cells = [f"{model.call_seconds(model.kernel_for(configs[shape]), shape) * 1e6:.2f}"]
        for pdl in (True, False):
            seconds, kernel = model.preferred(shape, pdl)
            cells.append(f"{seconds * 1e6:.2f} ({kernel.name})")
        first = calibration.FIRST_PLACE.kernels[shape]
        cells.append(f"{calibration.model_us(calibration.FIRST_PLACE, shape):.2f} ({first.tile_n} x {first.tile_m} "
                     f"tiles, split-K {first.split_k}, {first.stages} stages)")
        table.add_row(column, *cells)
    return Fitted(table, ("first place as published (no PDL)",))


def levers_table(configs: dict) -> Fitted:
    """`model.levers` per benchmark shape and their geomeans."""
    names = list(model.levers(configs[model.BENCHMARK_SHAPES[0]], model.BENCHMARK_SHAPES[0]))
    table = _table("B200 cost model: levers beside the chosen configurations (a model's us)", "shape", *names)
    columns = {name: [] for name in names}
    for shape, column in zip(model.BENCHMARK_SHAPES, SHAPE_COLUMNS):
        times = model.levers(configs[shape], shape)
        for name in names:
            columns[name].append(times[name] * 1e6)
        table.add_row(column, *_us([times[name] * 1e6 for name in names]))
    table.add_row("geomean", *(f"{geomean(columns[name]):.2f}" for name in names))
    return Fitted(table)
