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


def test_the_submissions_header_quotes_the_models_times():
    import submission as sub

    header = sub.__doc__
    quoted = [float(row.split()[-1]) for row in header.splitlines() if re.match(r"\s+128 x \d+ x \d+ ", row)]
    configs = [sub.sm100_config(sub.Problem(*shape), conservative=False) for shape in model.BENCHMARK_SHAPES]
    computed = [model.call_seconds(model.kernel_for(config), shape) * 1e6 for config, shape in zip(configs, model.BENCHMARK_SHAPES)]
    assert quoted == [round(value, 2) for value in computed]
    geomean = math.prod(computed) ** (1 / 3)
    assert f"{geomean:.2f} us geomean" in header


def test_multicast_pays_only_where_l2_reads_bind(monkeypatch):
    """A cluster of two 64-row CTAs halves the L2 reads of their shared B tile: nothing on
    128 x 4096 x 7168 at the model's L2 rate (DRAM binds), the L2 term's share at a third of it."""
    shape = (128, 4096, 7168, 1)
    single = dataclasses.replace(model.winner(shape), pdl=True)
    clustered = dataclasses.replace(single, cluster_m=2)
    assert model.call_seconds(clustered, shape) == pytest.approx(model.call_seconds(single, shape))
    monkeypatch.setattr(model, "L2_TO_SM_BYTES_PER_S", 6e12)
    assert model.call_seconds(clustered, shape) < 0.8 * model.call_seconds(single, shape)


def test_share_k_evens_the_busiest_sm_and_counts_the_kernels_partials():
    """128 x 7168 x 16384 in 64-row tiles: whole tiles give one SM 64 K tiles; share-K's even
    shares give at most 49, over two tiles, and up to 3 partials a tile, as the kernel counts."""
    import submission as sub

    tiles, k_tiles = 112, 64
    static = model.Kernel("static", 128, 64, 1, 8)
    shared = dataclasses.replace(static, split_k=model.k_share_parts(tiles, k_tiles), share_k=True)
    assert model._units_and_k_tiles_per_sm(static, tiles, k_tiles) == (1, 64)
    assert model._units_and_k_tiles_per_sm(shared, tiles, k_tiles) == (2, 49)
    for shape in model.BENCHMARK_SHAPES + ((384, 7168, 2304, 1), (2304, 4608, 7168, 1)):
        m, n, k, l = shape
        for tile_m in (64, 128):
            config = sub.Sm100Config(tile_m, 1, 2, share_k=True)
            tiles = (n // 128) * (m // tile_m) * l
            assert model.k_share_parts(tiles, k // model.TILE_K) == config.k_share_parts(sub.Problem(*shape), 148)


def test_every_official_shape_takes_the_schedule_the_model_puts_faster_at_its_tile():
    """Where `sm100_config` chooses share-K, the model puts it ahead of whole units of the same
    tile; everywhere else, behind."""
    import submission as sub
    from harness import shapes

    for case in shapes.official_cases("tests") + shapes.official_cases("benchmarks"):
        problem = sub.Problem(*case.mnkl)
        chosen = sub.sm100_config(problem, conservative=False)
        if chosen.share_k:
            other = sub.Sm100Config(chosen.tile_m, 1, chosen.stages)
        else:
            other = chosen.with_k_shares(problem)
        chosen_s, other_s = (model.call_seconds(model.kernel_for(c), case.mnkl) for c in (chosen, other))
        assert chosen_s <= other_s, (case.mnkl, chosen.describe(), chosen_s, other_s)
