"""The B200 cost model's terms, each with what sets it (a constant fitted to published B200
times, a constant set by hand, or a measurement on an H200, named), the range the model's low
and high take it over, and its effect on a call: the call with that term at each end of its
range and every other at the point."""

import dataclasses
from collections.abc import Callable

from harness.b200 import calibration, model

FITTED_BACKING = "published B200 times of the calibration's fit set (harness/b200/calibration.py); no H200 measurement"
OVERLAP_EXPERIMENT = "experiments/pdl_overlap, --mode bandwidth"
EPILOGUE_EXPERIMENT = "experiments/pdl_overlap, --mode epilogue"


@dataclasses.dataclass(frozen=True)
class Term:
    """One term. `ends` gives `model.call`'s arguments at each end of the range for a kernel:
    the kernel itself where the term is the configuration's own (two CTAs an SM)."""

    name: str
    value: str
    set_by: str  # "fitted", "set" or "measured"
    backing: str
    range_used: str
    ends: Callable[[model.Kernel], list[tuple[model.Kernel, dict]]]

    def effect(self, kernel: model.Kernel, shape: tuple) -> tuple[float, float]:
        """(least, most) seconds of a call with this term at the ends of its range."""
        times = [model.call_seconds(variant, shape, **arguments) for variant, arguments in self.ends(kernel)]
        return min(times), max(times)


def _constant_ends(field: str, constant_sets: list[model.Constants]) -> tuple[float, float]:
    values = [getattr(constants, field) for constants in constant_sets]
    return min(values), max(values)


def _fitted(name: str, field: str, constant_sets: list[model.Constants], unit: float, text: str) -> Term:
    low, high = _constant_ends(field, constant_sets)
    ends = (f"{text.format(low / unit)} in every near-optimal constant set" if low == high else
            f"{text.format(low / unit)} to {text.format(high / unit)} (the near-optimal constant sets)")
    return Term(name, text.format(getattr(model.FITTED, field) / unit), "fitted", FITTED_BACKING, ends,
                lambda kernel: [(kernel, dict(constants=dataclasses.replace(model.FITTED, **{field: end})))
                                for end in (low, high)])


def _overlap_backing(measurement: str) -> str:
    """The pdl_overlap run the model reads, what it measured of `measurement`; or that none is recorded."""
    if not model.OVERLAP.measured:
        return f"no measurement: {model.OVERLAP.source} (make pdl-overlap-bandwidth)"
    return f"{OVERLAP_EXPERIMENT}: {measurement}; {model.OVERLAP.source}"


def _two_ctas_backing() -> str:
    overlap = model.OVERLAP
    if not overlap.measured or overlap.one_cta_an_sm_s is None:
        return _overlap_backing("two CTAs an SM")
    return _overlap_backing(
        f"{overlap.beside_previous_call:.0%} of CTAs beside the previous call's, {overlap.two_ctas_an_sm_s * 1e6:.2f} us "
        f"a call against {overlap.one_cta_an_sm_s * 1e6:.2f} with one CTA an SM; a B200's occupancy is unmeasured")


def _epilogue_term(name: str, factor_field: str, bounds: tuple, argument: str, unmeasured_backing: str) -> Term:
    """An epilogue term: the factor recorded by the epilogue run (this kit's epilogue, with PDL,
    on an H200) and the range around it, or the formula and today's range while none is recorded."""
    epilogue = model.EPILOGUE
    factor = getattr(epilogue, factor_field)
    unloaded = getattr(epilogue, factor_field.replace("_factor", "_unloaded_factor"))
    if epilogue.measured:
        value, backing = (f"{factor:.2f} times the formula",
                          f"{EPILOGUE_EXPERIMENT}: factor {factor:.2f} (a call's time with the term less without it, "
                          f"over the formula with the fit's round trip under load and the run's SM rate; {unloaded:.2f} "
                          f"over the run's own unloaded round trip); {epilogue.source}")
        range_used = (f"{bounds[0]:.2f} to {bounds[1]:.2f} times the formula's (the factor within "
                      f"{model.MEASURED_SPREAD} times either way, up to {unloaded:.2f})")
    else:
        value, backing = "the formula (fitted latency)", unmeasured_backing
        range_used = f"{bounds[0]} to {bounds[1]} times the formula's"
    return Term(name, value, "measured" if epilogue.measured else "set", backing, range_used,
                _scaled(bounds, argument))


def _scaled(bounds: tuple, argument: str) -> Callable:
    return lambda kernel: [(kernel, {argument: end}) for end in bounds]


def terms(constant_sets: list[model.Constants]) -> list[Term]:
    """Every term of the model, fitted ones over `constant_sets` (the calibration's near-optimal)."""
    overlap = model.OVERLAP
    tail_bounds, exchange_bounds = model.epilogue_bounds()
    fit_points = len(calibration.points(held_out=False))
    return [
        _fitted(f"launch without PDL ({fit_points} fit points)", "launch_s", constant_sets, 1e-6, "{:.2f} us"),
        _fitted("memory latency under load (a stage's cycle, the tail's round trip)", "latency_s", constant_sets, 1e-6,
                "{:.2f} us"),
        _fitted("per-SM ingest cap", "ingest_bytes_per_s", constant_sets, 1e9, "{:.0f} GB/s"),
        _fitted("DRAM efficiency", "dram_efficiency", constant_sets, 1, "{:.2f}"),
        Term("PDL overlap: two calls in flight over the formula", f"{overlap.ratio:.2f}",
             "measured" if overlap.measured else "set", _overlap_backing(f"factor {overlap.ratio:.2f}"),
             f"{model.OVERLAP_BOUNDS[0]:.1f} (the formula exact) to {model.OVERLAP_BOUNDS[1]:.1f} (no overlap)",
             lambda kernel: [(kernel, dict(overlap=dataclasses.replace(overlap, ratio=end)))
                             for end in model.OVERLAP_BOUNDS]),
        Term("PDL hand-off: the previous grid's exit to the waiting epilogue", f"{overlap.handoff_s * 1e6:.2f} us",
             "measured" if overlap.measured else "set", _overlap_backing(f"{overlap.handoff_s * 1e6:.2f} us"),
             f"{model.HANDOFF_BOUNDS_S[0] * 1e6:.2f} us (H100, latency-bound: docs/figures.md) to twice the point",
             lambda kernel: [(kernel, dict(overlap=dataclasses.replace(overlap, handoff_s=end)))
                             for end in model.HANDOFF_BOUNDS_S]),
        Term("two CTAs an SM", "as the configuration says", "measured" if overlap.measured else "set",
             _two_ctas_backing(), "two CTAs an SM (the point) to one (no CTA placed beside another)",
             lambda kernel: [(kernel, {}), (dataclasses.replace(kernel, ctas_per_sm=1), {})]),
        Term("CTA start under PDL", f"{model.CTA_START_S * 1e6:.2f} us", "set",
             "no measurement (pdl_overlap's start is a knob it sets, not a B200's prologue)",
             f"{model.CTA_START_BOUNDS_S[0] * 1e6:.2f} to {model.CTA_START_BOUNDS_S[1] * 1e6:.2f} us",
             _scaled(model.CTA_START_BOUNDS_S, "cta_start_s")),
        Term("the next call's loads under this call's tail (PDL)", "yes", "set", "no measurement", "yes or no",
             _scaled((True, False), "loads_under_tail")),
        _epilogue_term("the epilogue tail: c's stores and their round trip", "tail_factor", tail_bounds, "tail_scale",
                       "no measurement of a B200 epilogue; its latency is the fitted one (make epilogue-terms)"),
        _epilogue_term("split-K's partials reduction: partial out, arrival, partials in", "exchange_factor",
                       exchange_bounds, "exchange_scale",
                       "no measurement of its time (experiments/splitk_protocol checks its correctness on an H200; "
                       "make epilogue-terms)"),
        Term("L2 to SMs, aggregate", f"{model.L2_TO_SM_BYTES_PER_S / 1e12:.0f} TB/s", "set",
             "no measurement; the ingest cap's fit is bounded by it (docs/b200.md)", "not varied: the fit rests on it",
             lambda kernel: [(kernel, {})]),
    ]
