"""experiments/pdl_overlap: its predictions are harness/b200/model.py's arithmetic, its stamp
analysis reads overlap where there is some and none where there is none, and its CUDA source
compiles for sm_90a. No GPU needed: the timings themselves are for a GPU machine to take."""

import dataclasses
import importlib.util
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.b200 import model

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "experiments" / "pdl_overlap"


def _load_run():
    spec = importlib.util.spec_from_file_location("pdl_overlap_run", EXPERIMENT / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


run = _load_run()

SHAPE = (128, 7168, 2048, 1)


def test_the_predictions_are_the_models_arithmetic_on_its_headline_shape():
    """The experiment's formula for d on parts the model computes is the model's own call for two
    CTAs an SM, at an overlap factor of 1; c is the chain."""
    two = model.Kernel("two CTAs an SM", 128, 64, 1, 3, pdl=True, ctas_per_sm=2)
    exact = dataclasses.replace(model.OVERLAP, ratio=1.0)
    parts = model.call(two, SHAPE, overlap=exact)
    chain = run.chain_us(span_alone_us=(parts.mainloop_s + parts.tail_s) * 1e6, slot_gap_us=model.CTA_START_S * 1e6)
    d = run.predicted_us("d", alone_us=0.0, chain=chain, mainloop_bound_us=parts.busiest_sm_s * 1e6,
                         dram_us=parts.dram_s * 1e6, serial_tail_us=parts.serial_tail_s * 1e6)
    assert math.isclose(d, parts.seconds * 1e6, rel_tol=1e-9)
    assert math.isclose(chain, parts.chain_s * 1e6, rel_tol=1e-9)
    c = run.predicted_us("c", alone_us=0.0, chain=chain, mainloop_bound_us=0.0, dram_us=0.0)
    assert c == chain and d < c


def test_the_bounds_take_over_from_half_the_chain():
    assert run.predicted_us("d", alone_us=9.0, chain=4.0, mainloop_bound_us=1.0, dram_us=3.0) == 3.0
    assert run.predicted_us("f", alone_us=9.0, chain=4.0, mainloop_bound_us=2.5, dram_us=1.0) == 2.5
    assert run.predicted_us("d", alone_us=9.0, chain=4.0, mainloop_bound_us=1.0, dram_us=1.0) == 2.0
    assert run.predicted_us("b", alone_us=9.0, chain=4.0, mainloop_bound_us=1.0, dram_us=1.0) == 9.0
    assert run.predicted_us("d", alone_us=9.0, chain=4.0, mainloop_bound_us=1.0, dram_us=1.0, serial_tail_us=2.5) == 2.5
    assert run.serial_tail_bound_us(1.5, 0.75) == 2.25
    assert math.isclose(run.dram_bound_us(3e6, 3e12), 1.0)
    with pytest.raises(ValueError):
        run.predicted_us("a1", alone_us=1.0, chain=1.0, mainloop_bound_us=0.0, dram_us=0.0)


def _stamp(result, ctas_by_case):
    return {"per_call_us": result, "stamps": ctas_by_case, "in_bytes": 0, "out_bytes": 0}


def test_predictions_assemble_the_cases_measured_parts():
    device = {"dram_bytes_per_s": 3e12}
    stamps = {"span_us": 4.0, "main_us": 2.0, "slot_gap_us": 0.5}
    k_results = {
        "a1": _stamp(6.0, stamps), "a2": _stamp(6.5, stamps), "g": _stamp(7.0, {**stamps, "main_us": 3.0}),
        "b": _stamp(6.0, stamps), "c": _stamp(4.6, stamps), "d": _stamp(2.4, stamps), "e": _stamp(6.4, stamps),
        "f": _stamp(2.3, stamps),
    }
    k_results["d"]["in_bytes"] = 6e6  # 2 us at 3 TB/s: below half the chain (2.25 us)
    out = run.predictions(k_results, device)
    assert out["b"][0] == 6.0 and out["e"][0] == 6.5
    assert out["c"][0] == 4.5  # slot gap + span alone
    assert out["d"][0] == 2.25  # max(4.5 / 2, 3.0 / 2, 2.0)
    assert out["f"][0] == 2.25
    assert "chain 4.50 / 2" in out["d"][1]


def test_the_serial_tails_enter_the_formula_where_a_case_measured_its_hand_off():
    device = {"dram_bytes_per_s": 3e12}
    stamps = {"span_us": 4.0, "main_us": 2.0, "slot_gap_us": 0.5, "tail_us": 1.5, "handoff_us": None}
    k_results = {case: _stamp(t, stamps) for case, t in (("a1", 6.0), ("a2", 6.5), ("c", 4.6))}
    k_results["g"] = _stamp(7.0, {**stamps, "main_us": 3.0})
    k_results["d"] = _stamp(2.9, {**stamps, "handoff_us": 1.2})
    out = run.predictions(k_results, device)
    assert out["d"][0] == 2.7  # tail 1.5 + hand-off 1.2 above half the chain (2.25)
    assert "tail+hand 2.70" in out["d"][1]


def test_the_bandwidth_mode_is_the_b200_two_cta_configuration():
    """28 KB K tiles (the model's 64-row stage), eight of them (128 x 7168 x 2048's K), three
    stages within room for two CTAs an SM, slabs shared so that L2 feeds most loads."""
    k_tiles, knobs = run.MODES["bandwidth"]
    two = model.Kernel("two CTAs an SM", 128, 64, 1, 3, ctas_per_sm=2)
    assert knobs.tile_bytes == model.stage_bytes(two) and k_tiles == (2048 // model.TILE_K,)
    assert 3 * knobs.tile_bytes <= run.SMEM_TWO_CTAS and knobs.share > 1
    lines = run.case_lines(list(k_tiles), knobs, sms=132, workdir=Path("/nonexistent"))
    assert all(fields["share"] == knobs.share and fields["tile_bytes"] == knobs.tile_bytes for _, _, fields in lines)


def test_the_record_is_what_the_model_reads(tmp_path):
    device = {"dram_bytes_per_s": 3e12, "device": "NVIDIA H100 80GB HBM3"}
    stamps = {"span_us": 4.0, "main_us": 2.0, "slot_gap_us": 0.5, "tail_us": 1.0, "handoff_us": None,
              "beside_previous_call": 1.0}
    results = {(8, case): _stamp(t, stamps) for case, t in (("a1", 6.0), ("a2", 6.5), ("c", 4.6), ("g", 7.0))}
    results[(8, "d")] = _stamp(2.7, {**stamps, "handoff_us": 0.7})
    results[(2, "d")] = _stamp(9.0, stamps)  # another main-loop length: not the one recorded
    knobs = run.MODES["bandwidth"][1]
    record = run.overlap_record("bandwidth", device, results, 8, knobs, "abc1234", "2026-11-27")
    assert record["formula_us"] == 2.25 and math.isclose(record["overlap_ratio"], 2.7 / 2.25)
    assert record["handoff_us"] == 0.7 and record["knobs"]["tile_bytes"] == 28 * 1024
    path = tmp_path / "pdl-overlap-bandwidth.json"
    path.write_text(run.json.dumps(record))
    overlap = model.load_overlap(path)
    assert overlap.measured and math.isclose(overlap.ratio, 1.2) and math.isclose(overlap.handoff_s, 0.7e-6)


def _simulate(sms, room, grid, calls, pdl, start, main, tail, gap, handoff, launch=3.0):
    """Stamps (ns) of a round as the model's mechanism would make them: CTA i of a call on SM
    i % sms, in the first of the SM's `room` slots to free up, `gap` after it frees; with PDL a
    call may start once the previous call's CTAs have passed their start phase, and its tails
    wait for the previous grid's last exit plus `handoff`; without, it starts `launch` after it."""
    slots = {sm: [0.0] * room for sm in range(sms)}
    words, previous_exit, previous_trigger = [], -1e9, 0.0
    for call in range(calls):
        ready = previous_trigger if pdl else previous_exit + launch
        exits, triggers = [], []
        for i in range(grid):
            free = slots[i % sms]
            slot = min(range(room), key=lambda s: free[s])
            entry = max(ready, free[slot] + gap)
            start_end = entry + start
            main_end = start_end + main
            wait_end = max(main_end, previous_exit + handoff) if pdl else main_end
            exit_ = wait_end + tail
            free[slot] = exit_
            exits.append(exit_)
            triggers.append(start_end)
            stamp = [int(1000 * t) for t in (entry, start_end, main_end, wait_end, exit_)]
            words += [*stamp, i % sms, *(2 * (t - stamp[0]) for t in stamp), 0, 0, 0, 0, 0]
        previous_exit, previous_trigger = max(exits), max(triggers)
    return run.parse_stamps(words, calls, grid)


def test_the_analysis_sees_two_calls_beside_each_other_where_there_is_room():
    start, main, tail, gap, handoff = 1.0, 2.0, 1.5, 0.5, 0.25
    calls = _simulate(sms=8, room=2, grid=8, calls=30, pdl=True, start=start, main=main, tail=tail, gap=gap,
                      handoff=handoff)
    got = run.analyze(calls)
    assert got["beside_previous_call"] == 1.0 and got["most_ctas_on_one_sm"] == 2
    assert got["most_calls_in_flight"] == 2 and got["most_ctas_of_a_call_on_one_sm"] == 1
    assert math.isclose(got["slot_gap_us"], gap)
    # Half the chain binds here: every tail's main loop ends after the previous call's last exit.
    assert got["waited_fraction"] == 0.0 and got["handoff_us"] is None
    assert math.isclose(got["clock_ghz"], 2.0)
    assert math.isclose(got["main_us"], main) and math.isclose(got["tail_us"], tail)
    # The mechanism's period: the larger of half the chain and the tails run one after another.
    chain = gap + start + main + tail
    assert math.isclose(got["stamp_period_us"], max(chain / 2, tail + handoff), rel_tol=1e-3)


def test_the_serial_tails_bind_where_the_tail_is_long():
    start, main, tail, gap, handoff = 0.5, 1.0, 2.5, 0.5, 0.5
    got = run.analyze(_simulate(sms=4, room=2, grid=4, calls=30, pdl=True, start=start, main=main, tail=tail,
                                gap=gap, handoff=handoff))
    chain = gap + start + main + tail
    assert tail + handoff > chain / 2
    assert got["waited_fraction"] == 1.0 and math.isclose(got["handoff_us"], handoff)
    assert math.isclose(got["stamp_period_us"], run.serial_tail_bound_us(tail, handoff), rel_tol=1e-3)


def test_the_analysis_sees_no_overlap_with_one_slot_and_none_without_pdl():
    one_slot = run.analyze(_simulate(sms=8, room=1, grid=8, calls=20, pdl=True, start=1.0, main=2.0, tail=1.0,
                                     gap=0.5, handoff=0.25))
    assert one_slot["beside_previous_call"] == 0.0 and one_slot["most_ctas_on_one_sm"] == 1
    assert math.isclose(one_slot["slot_gap_us"], 0.5)
    assert math.isclose(one_slot["stamp_period_us"], 0.5 + 1.0 + 2.0 + 1.0, rel_tol=1e-3)
    serial = run.analyze(_simulate(sms=8, room=2, grid=8, calls=20, pdl=False, start=1.0, main=2.0, tail=1.0,
                                   gap=0.5, handoff=0.25))
    assert serial["beside_previous_call"] == 0.0 and serial["most_calls_in_flight"] == 1
    assert serial["next_call_early"] == 0.0


def test_the_verdicts():
    assert run.verdict(2.4, 2.3, 1.0).startswith("consistent")
    assert run.verdict(3.5, 2.3, 0.95).startswith("partly")
    assert run.verdict(4.6, 2.3, 0.0).startswith("refutes")


def test_the_cases_cover_the_brief_and_fit_the_footprints():
    lines = run.case_lines([6], run.Knobs(), sms=132, workdir=Path("/nonexistent"))
    cases = {case: fields for _, case, fields in lines}
    assert {"a1", "a2", "b", "c", "d", "e", "f", "g", run.CARVEOUT_CASE} == set(cases)
    assert cases["d"]["grid"] == 132 and cases["d"]["smem_bytes"] == run.SMEM_TWO_CTAS and cases["d"]["pdl"] == 1
    assert cases["c"]["smem_bytes"] == run.SMEM_ONE_CTA and cases["b"]["pdl"] == 0 and cases["b"]["calls"] == 50
    # 228 KB an SM, 1 KB reserved a CTA, 128 bytes of static stamps: two fit, not one more.
    per_sm, reserved, static = 228 * 1024, 1024, 128
    assert 2 * (run.SMEM_TWO_CTAS + static + reserved) <= per_sm < 3 * (run.SMEM_TWO_CTAS + static + reserved)
    assert per_sm < 2 * (run.SMEM_ONE_CTA + reserved) and run.SMEM_ONE_CTA + static <= 227 * 1024
    assert run.arch_for(9, 0) == "sm_90a" and run.arch_for(10, 0) == "sm_100a"


def test_without_a_device_it_says_so(monkeypatch, capsys):
    monkeypatch.setattr(run, "cuda_device", lambda: "no CUDA device")
    assert run.main(["--out", "/nonexistent/x.csv"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert run.main(["--mode", "bandwidth", "--share", "4", "--record", "/nonexistent/x.json"]) == 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: the CUDA source's sm_90a compile is not checked")
def test_the_cuda_source_compiles_for_sm_90a(tmp_path):
    done = subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90a", "-c", str(EXPERIMENT / "pdl_overlap.cu"),
                           "-o", str(tmp_path / "pdl_overlap.o")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
