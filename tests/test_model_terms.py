"""The B200 cost model's terms: each names what sets it and what backs it (a measurement with
its device, date and commit, or none said), and its low and high hold the point and move only
the calls the term enters."""

import dataclasses
import json

import pytest

import submission as sub
from harness.b200 import calibration, model, terms

S1, S2, S3 = model.BENCHMARK_SHAPES


@pytest.fixture(scope="module")
def near():
    return calibration.near_optimal()


@pytest.fixture(scope="module")
def kernels():
    return {shape: model.kernel_for(sub.sm100_config(sub.Problem(*shape), conservative=False))
            for shape in model.BENCHMARK_SHAPES}


def _by_name(near) -> dict:
    return {term.name.split(":")[0].split(" (")[0]: term for term in terms.terms(near)}


def test_every_terms_range_holds_the_point(near, kernels):
    for term in terms.terms(near):
        for shape, kernel in kernels.items():
            low, high = term.effect(kernel, shape)
            point = model.call_seconds(kernel, shape)
            assert low <= point * (1 + 1e-12) and high >= point * (1 - 1e-12), (term.name, shape)


def test_a_term_moves_only_the_calls_it_enters(near, kernels):
    """Two CTAs an SM moves the configuration that has them (the third shape's) alone; the partials
    reduction only the split-K one (the first shape's); the overlap factor only the calls with two in flight."""
    assert [kernels[s].ctas_per_sm for s in (S1, S2, S3)] == [1, 1, 2]
    assert [kernels[s].split_k for s in (S1, S2, S3)] == [2, 1, 1]
    named = _by_name(near)

    def moves(term, shape):
        low, high = term.effect(kernels[shape], shape)
        return high - low > 1e-9

    assert [moves(named["two CTAs an SM"], s) for s in (S1, S2, S3)] == [False, False, True]
    assert [moves(named["split-K's partials reduction"], s) for s in (S1, S2, S3)] == [True, False, False]
    in_flight = [model.call(kernels[s], s).branch == "two calls in flight" for s in (S1, S2, S3)]
    assert [moves(named["PDL overlap"], s) for s in (S1, S2, S3)] == in_flight and any(in_flight)
    # With one CTA an SM the third shape's call is no faster than with two.
    low, high = named["two CTAs an SM"].effect(kernels[S3], S3)
    assert low == pytest.approx(model.call_seconds(kernels[S3], S3))
    assert high == pytest.approx(model.call_seconds(dataclasses.replace(kernels[S3], ctas_per_sm=1), S3))


def test_the_measured_terms_name_their_run_and_the_others_say_none(near):
    for term in terms.terms(near):
        assert term.set_by in ("fitted", "set", "measured"), term.name
        if term.set_by == "measured":
            epilogue = terms.EPILOGUE_EXPERIMENT in term.backing
            assert (model.EPILOGUE if epilogue else model.OVERLAP).measured
            path = model.EPILOGUE_RECORD if epilogue else model.OVERLAP_RECORD
            record = json.loads(path.read_text())
            assert "experiments/pdl_overlap" in term.backing
            for part in (record["device"], record["date"], record["commit"], path.name):
                assert part in term.backing, (term.name, part)
        elif term.set_by == "set":
            assert "no measurement" in term.backing, term.name
        else:
            assert "calibration" in term.backing and "no H200 measurement" in term.backing


def test_without_a_recorded_run_the_pdl_terms_are_set_and_say_so(monkeypatch, near, tmp_path):
    monkeypatch.setattr(model, "OVERLAP", model.load_overlap(tmp_path / "absent.json"))
    named = _by_name(near)
    for name in ("PDL overlap", "PDL hand-off", "two CTAs an SM"):
        assert named[name].set_by == "set" and "no measurement" in named[name].backing
        assert "make pdl-overlap-bandwidth" in named[name].backing


def test_the_two_ctas_backing_is_the_records_own(monkeypatch, near, tmp_path):
    record = {"mode": "bandwidth", "device": "NVIDIA H100 80GB HBM3", "date": "2026-10-01", "commit": "abc1234",
              "overlap_ratio": 1.3, "handoff_us": 0.9, "measured_us": 4.25, "one_cta_an_sm_us": 7.5,
              "beside_previous_call": 0.5}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(record))
    monkeypatch.setattr(model, "OVERLAP", model.load_overlap(path))
    backing = _by_name(near)["two CTAs an SM"].backing
    for part in ("50%", "4.25 us", "7.50", "H100", "2026-10-01", "abc1234"):
        assert part in backing, part


def test_the_terms_table_prints_each_term_and_its_effect_per_shape(near):
    from rich.console import Console

    from harness.b200 import report as b200_report

    configs = {shape: sub.sm100_config(sub.Problem(*shape), conservative=False) for shape in model.BENCHMARK_SHAPES}
    console = Console(width=400, record=True)
    console.print(b200_report.terms_table(configs, near))
    text = console.export_text()
    for term in terms.terms(near):
        assert term.name.split(" ")[0] in text
    row = next(line for line in text.splitlines() if line.startswith("│ two CTAs an SM"))
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    low, high = terms.terms(near)[[t.name for t in terms.terms(near)].index("two CTAs an SM")].effect(
        model.kernel_for(configs[S3]), S3)
    assert cells[-1] == f"{low * 1e6:.2f}-{high * 1e6:.2f}" and cells[-3] == "no effect"


EPILOGUE_TERMS = ("the epilogue tail", "split-K's partials reduction")


# A run whose times are 1.3 and 0.8 times the formula taken with the fit's round trip (a 128 x 128
# tile, split-K 2, 100 GB/s an SM), and 3.0 and 2.0 times the one taken with its own unloaded round trip.
RUN_TAIL_US = 1.3 * (model.FITTED.latency_s + 2 * 128 * 128 / 100e9) * 1e6
RUN_EXCHANGE_US = 0.8 * (4 * 128 * 128 * 2 / 100e9 + model.FITTED.latency_s) * 1e6


def _epilogue_record(**changes) -> dict:
    return {"mode": "epilogue", "device": "NVIDIA H200", "date": "2026-12-02", "commit": "abc1234",
            "tail_factor": 3.0, "exchange_factor": 2.0, "counters_left": 0, "tail_us": RUN_TAIL_US,
            "exchange_us": RUN_EXCHANGE_US, "rate_bytes_per_s": 100e9, "tile_rows": 128, "tile_cols": 128, "split_k": 2,
            **changes}


def test_without_an_epilogue_record_the_epilogue_terms_are_set_and_say_so(monkeypatch, near, tmp_path):
    monkeypatch.setattr(model, "EPILOGUE", model.load_epilogue(tmp_path / "absent.json"))
    named = _by_name(near)
    for name in EPILOGUE_TERMS:
        assert named[name].set_by == "set" and "no measurement" in named[name].backing
        assert "make epilogue-terms" in named[name].backing and named[name].range_used.startswith("0.5 to 2.0")
        assert named[name].value == "the formula (fitted latency)"


def test_a_recorded_epilogue_run_backs_the_tail_and_the_partials_reduction(monkeypatch, near, kernels, tmp_path):
    path = tmp_path / "epilogue-terms.json"
    path.write_text(json.dumps(_epilogue_record()))
    fit_error = calibration.squared_log_error(model.FITTED)
    formula_s1 = model.call(kernels[S1], S1, tail_scale=1.0, exchange_scale=1.0)
    monkeypatch.setattr(model, "EPILOGUE", model.load_epilogue(path))
    named = _by_name(near)
    for name, factor, unloaded, range_used in (("the epilogue tail", "1.30", "3.00", "0.87 to 3.00"),
                                               ("split-K's partials reduction", "0.80", "2.00", "0.53 to 2.00")):
        term = named[name]
        assert term.set_by == "measured" and term.value == f"{factor} times the formula"
        for part in (terms.EPILOGUE_EXPERIMENT, f"factor {factor}", f"{unloaded} over the run's own unloaded round trip",
                     "NVIDIA H200", "2026-12-02", "abc1234", path.name):
            assert part in term.backing, (name, part)
        assert term.range_used.startswith(range_used)
    # The point takes the factors on this kit's kernel: its tail, split-K's exchange on the first shape.
    rate = model.sm_ingest_rate(model.FITTED, model.grid_ctas(kernels[S1], 56, 64))
    measured = model.call(kernels[S1], S1)
    assert measured.tail_s == pytest.approx(model.tail_seconds(kernels[S1], model.FITTED, rate, 1.3, 0.8))
    assert measured.tail_s != pytest.approx(formula_s1.tail_s)
    # The published kernels keep the formula the fit was made with: the fit is unchanged.
    assert calibration.squared_log_error(model.FITTED) == fit_error
    for term in terms.terms(near):
        for shape, kernel in kernels.items():
            low, high = term.effect(kernel, shape)
            point = model.call_seconds(kernel, shape)
            assert low <= point * (1 + 1e-12) and high >= point * (1 - 1e-12), (term.name, shape)


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not JSON"),
    (json.dumps([1, 2]), "the model takes an epilogue one"),
    (json.dumps(_epilogue_record(mode="bandwidth")), "a 'bandwidth' run"),
    (json.dumps(_epilogue_record(commit=None)), "no commit"),
    (json.dumps({k: v for k, v in _epilogue_record().items() if k != "exchange_factor"}), "no exchange_factor"),
    (json.dumps(_epilogue_record(tail_factor=0)), "tail_factor is 0, not a positive number"),
    (json.dumps(_epilogue_record(exchange_factor=-0.4)), "exchange_factor is -0.4"),
    (json.dumps(_epilogue_record(tail_factor=float("nan"))), "tail_factor is nan"),
    (json.dumps(_epilogue_record(tail_factor="1.2")), "tail_factor is '1.2'"),
    (json.dumps(_epilogue_record(exchange_factor=True)), "exchange_factor is True"),
    (json.dumps(_epilogue_record(counters_left=4)), "4 split-K counters left non-zero"),
    (json.dumps({k: v for k, v in _epilogue_record().items() if k != "rate_bytes_per_s"}), "no rate_bytes_per_s"),
    (json.dumps(_epilogue_record(exchange_us=0)), "exchange_us is 0, not a positive number"),
])
def test_a_malformed_epilogue_record_is_refused_with_its_reason(tmp_path, text, reason):
    path = tmp_path / "epilogue-terms.json"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        model.load_epilogue(path)
    assert str(path) in str(refused.value) and reason in str(refused.value)


def test_the_terms_table_names_a_recorded_epilogue_run(monkeypatch, tmp_path):
    from rich.console import Console

    from harness.b200 import report as b200_report

    path = tmp_path / "epilogue-terms.json"
    path.write_text(json.dumps(_epilogue_record()))
    monkeypatch.setattr(model, "EPILOGUE", model.load_epilogue(path))
    configs = {shape: sub.sm100_config(sub.Problem(*shape), conservative=False) for shape in model.BENCHMARK_SHAPES}
    console = Console(width=2000, record=True)
    console.print(b200_report.terms_table(configs, [model.FITTED]))
    text = console.export_text()
    for name, factor in (("the epilogue tail", "1.30"), ("split-K's partials reduction", "0.80")):
        row = next(line for line in text.splitlines() if line.startswith(f"│ {name}"))
        cells = [cell.strip() for cell in row.strip("│ ").split("│")]
        assert cells[1] == f"{factor} times the formula" and cells[2] == "measured"
        for part in (f"{terms.EPILOGUE_EXPERIMENT}: factor {factor}", "NVIDIA H200", "2026-12-02", "abc1234"):
            assert part in cells[3], (name, part)


def test_the_measured_factors_apply_to_this_kits_epilogue_alone(monkeypatch, kernels, tmp_path):
    path = tmp_path / "epilogue-terms.json"
    path.write_text(json.dumps(_epilogue_record()))
    monkeypatch.setattr(model, "EPILOGUE", model.load_epilogue(path))
    kit = kernels[S1]
    assert model.epilogue_scales(kit) == (1.3, 0.8)
    assert model.epilogue_scales(dataclasses.replace(kit, kit_epilogue=False)) == (1.0, 1.0)
    assert model.epilogue_scales(dataclasses.replace(kit, cluster_reduction=True)) == (1.3, 1.0)
    assert all(kernel.kit_epilogue for kernel in model.candidates(S1, pdl=True))
    assert not any(kernel.kit_epilogue for version in calibration.PUBLISHED for kernel in version.kernels.values())
