"""The B200 cost model: its constants are its fit's, its calibration holds, and the figures
quoted in submission.py's header are its own."""

import dataclasses
import math
import re
from pathlib import Path

import pytest

from harness import b200_model as model

ROOT = Path(__file__).resolve().parent.parent


def test_the_constants_in_use_are_the_fits():
    fitted = model.fit()
    for field in dataclasses.fields(model.Constants):
        assert math.isclose(getattr(model.FITTED, field.name), getattr(fitted, field.name), rel_tol=1e-6), field.name


def test_the_model_stays_within_20_percent_of_every_published_time_it_models():
    for name, published, modelled in model.calibration():
        if modelled is None:
            continue
        for expected, got in zip(published, modelled):
            assert abs(got / expected - 1) < 0.20, (name, expected, got)


@pytest.mark.parametrize("shape", model.BENCHMARK_SHAPES)
def test_pdl_and_a_faster_ingest_never_slow_a_call(shape):
    kernel = model.winner(shape)
    assert model.call_seconds(dataclasses.replace(kernel, pdl=True), shape) <= model.call_seconds(kernel, shape)
    faster = dataclasses.replace(model.FITTED, ingest_bytes_per_s=2 * model.FITTED.ingest_bytes_per_s)
    assert model.call_seconds(kernel, shape, faster) <= model.call_seconds(kernel, shape)


def test_no_call_beats_speed_of_light():
    for shape in model.BENCHMARK_SHAPES:
        best = dataclasses.replace(model.winner(shape), pdl=True)
        assert model.call_seconds(best, shape) >= model.DEVICES["B200"].sol_seconds(*shape)
        for kernel in model.candidates(shape, pdl=True):
            two = dataclasses.replace(kernel, tile_m=64, stages=4, ctas_per_sm=2)
            for fast in (kernel, two, dataclasses.replace(kernel, cluster_reduction=True)):
                assert model.call_seconds(fast, shape) >= model.DEVICES["B200"].sol_seconds(*shape)


def test_pdl_hides_the_launch_only_on_the_sms_a_grid_leaves_free():
    """A grid on every SM (share-K) saves the grid's launch less a CTA's start, and nothing of
    its DRAM time; one that leaves SMs free also has the next call's CTAs there load under its
    tail; one that leaves as many SMs free as it uses hides its whole launch under the tail."""
    shape = (128, 7168, 16384, 1)
    full = model.Kernel("share-K", 128, 64, model.k_share_parts(112, 64), 8, share_k=True)
    assert model.grid_ctas(full, 112, 64) == model.B200_SMS
    saved = model.call_seconds(full, shape) - model.call_seconds(dataclasses.replace(full, pdl=True), shape)
    assert saved == pytest.approx(model.FITTED.launch_s - model.CTA_START_S)

    chosen = model.Kernel("split-K", 128, 128, 2, 6, pdl=True)  # 112 CTAs, 36 SMs free
    with_loads = model.call_seconds(chosen, shape)
    without_loads = model.call_seconds(chosen, shape, loads_under_tail=False)
    assert with_loads < without_loads
    assert without_loads - model.call_seconds(dataclasses.replace(chosen, pdl=False), shape) == pytest.approx(
        model.CTA_START_S - model.FITTED.launch_s)

    # 64 CTAs on 128 x 4096: the next call's whole grid runs on SMs of its own, two calls in
    # flight, as two CTAs an SM would give.
    small = model.Kernel("unsplit", 128, 64, 1, 8, pdl=True)
    shape = (128, 4096, 7168, 1)
    assert model.grid_ctas(small, 64, 28) == 64
    assert model.call_seconds(small, shape) == pytest.approx(
        model.call_seconds(dataclasses.replace(small, ctas_per_sm=2), shape))
    assert model.call_seconds(small, shape) < 0.6 * model.call_seconds(dataclasses.replace(small, pdl=False), shape)


def test_two_ctas_an_sm_pay_where_a_calls_chain_binds_and_not_past_dram():
    """Two calls in flight on every SM halve a call's chain: on 128 x 7168 x 2048 the chosen
    configuration's time halves; on 128 x 7168 x 16384 DRAM binds either way."""
    import submission as sub

    short = (128, 7168, 2048, 1)
    one_cta = sub.Sm100Config(64, 1, 8)
    times = model.levers(one_cta, short)
    assert times["two CTAs an SM"] < 0.6 * times["chosen"]
    configs = {shape: sub.sm100_config(sub.Problem(*shape), conservative=False) for shape in model.BENCHMARK_SHAPES}
    long = (128, 7168, 16384, 1)
    dram = model.gemm_bytes(*long) / (model.B200_TABLE_BANDWIDTH * model.FITTED.dram_efficiency)
    assert model.levers(configs[long], long)["two CTAs an SM"] == pytest.approx(dram)
    assert model.levers(one_cta, short)["cluster reduction"] == times["chosen"]  # unsplit: nothing to exchange


def test_the_chosen_configurations_are_the_models_fastest_but_where_dram_binds_both():
    """The model's fastest on 128 x 4096 x 7168 and 128 x 7168 x 2048; on 128 x 7168 x 16384 the
    model puts whole-K tiles 6 % ahead of the first-placed entry's measured tiles (inside its
    calibration error there), both bound by DRAM in the model, and the measured tiles stay."""
    import submission as sub

    for shape in model.BENCHMARK_SHAPES:
        config = sub.sm100_config(sub.Problem(*shape), conservative=False)
        chosen = model.call_seconds(model.kernel_for(config), shape)
        fastest, kernel = model.preferred(shape, pdl=True)
        if shape == (128, 7168, 16384, 1):
            dram = model.gemm_bytes(*shape) / (model.B200_TABLE_BANDWIDTH * model.FITTED.dram_efficiency)
            assert fastest == pytest.approx(dram)
            assert (config.tile_m, config.split_k, config.ctas_per_sm) == (128, 2, 1) and chosen < 1.07 * fastest
        else:
            assert chosen == pytest.approx(fastest), shape
    # Two CTAs an SM where the next call's grid would not find SMs of its own.
    assert sub.sm100_config(sub.Problem(128, 7168, 2048, 1)).ctas_per_sm == 2
    one_cta = dataclasses.replace(sub.sm100_config(sub.Problem(128, 7168, 2048, 1)), ctas_per_sm=1, stages=8)
    assert model.call_seconds(model.kernel_for(one_cta), (128, 7168, 2048, 1)) > 1.5 * model.preferred(
        (128, 7168, 2048, 1), pdl=True)[0]


def test_multicast_pays_only_where_l2_reads_bind(monkeypatch):
    """A cluster of two 64-row CTAs halves the L2 reads of their shared B tile: nothing on
    128 x 4096 x 7168 at the model's L2 rate (DRAM binds), the L2 term's share at a third of it."""
    shape = (128, 4096, 7168, 1)
    single = dataclasses.replace(model.winner(shape), pdl=True)
    clustered = dataclasses.replace(single, cluster_m=2)
    assert model.call_seconds(clustered, shape) == pytest.approx(model.call_seconds(single, shape))
    monkeypatch.setattr(model, "L2_TO_SM_BYTES_PER_S", 6e12)
    assert model.call_seconds(clustered, shape) < 0.8 * model.call_seconds(single, shape)


def test_share_k_evens_the_busiest_sm():
    """128 x 7168 x 16384 in 64-row tiles: whole tiles give one SM 64 K tiles; share-K's even
    shares give at most 49, over two tiles, and up to 3 partials a tile."""
    tiles, k_tiles = 112, 64
    static = model.Kernel("static", 128, 64, 1, 8)
    shared = dataclasses.replace(static, split_k=model.k_share_parts(tiles, k_tiles), share_k=True)
    assert shared.split_k == 3
    assert model._units_and_k_tiles_per_sm(static, tiles, k_tiles) == (1, 64)
    assert model._units_and_k_tiles_per_sm(shared, tiles, k_tiles) == (2, 49)


def test_no_official_shape_takes_share_k_which_the_model_puts_behind_whole_units_on_each():
    """Share-K's grid fills every SM, so the next call's CTAs find none free under PDL."""
    import submission as sub
    from harness import shapes

    for case in shapes.official_cases("tests") + shapes.official_cases("benchmarks"):
        m, n, k, l = case.mnkl
        chosen = model.kernel_for(sub.sm100_config(sub.Problem(*case.mnkl), conservative=False))
        assert not chosen.share_k
        tiles = (n // 128) * (m // chosen.tile_m) * l
        shared = dataclasses.replace(chosen, split_k=model.k_share_parts(tiles, k // model.TILE_K), share_k=True)
        assert model.call_seconds(chosen, case.mnkl) <= model.call_seconds(shared, case.mnkl), case.mnkl
