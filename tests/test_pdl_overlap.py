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

import submission as sub
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


# ----- the epilogue mode -----


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH: the epilogue's PTX is not checked")
def test_the_epilogue_arrives_and_reduces_in_the_b200_kernels_order(tmp_path):
    """As tests/test_splitk_protocol.py holds submission.SplitKReduction's PTX: the partial's
    stores, the warp barrier, the release fence, the relaxed count; then the acquire fence, the
    warp barrier and the other partials' loads; the counter's reset after them."""
    import re

    ptx_path = tmp_path / "pdl_overlap.ptx"
    done = subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90a", "-ptx", str(EXPERIMENT / "pdl_overlap.cu"),
                           "-o", str(ptx_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    entries = re.split(r"\.entry ", ptx_path.read_text())
    calls = [entry for entry in entries if entry.startswith(("_Z", "persistent")) and "persistent_call" in entry[:120]]
    assert len(calls) == 2  # the two carveout builds
    for ptx in calls:
        count = re.search(r"atom\.global(?:\.relaxed)?(?:\.gpu)?\.add\.u32\s+%r\d+, \[%rd\d+\], 1;", ptx)
        assert count, "no relaxed count of an arrival"
        ordering = r"\b(bar\.warp\.sync|fence\.acq_rel\.gpu|ld\.global|st\.global|atom\.global|griddepcontrol\.wait)\b"
        before, after = re.findall(ordering, ptx[:count.start()]), re.findall(ordering, ptx[count.end():])
        assert before[-3:] == ["st.global", "bar.warp.sync", "fence.acq_rel.gpu"]
        assert after[:3] == ["fence.acq_rel.gpu", "bar.warp.sync", "ld.global"]
        assert "griddepcontrol.wait" in before  # every store of the epilogue after the wait
        assert re.search(r"atom\.global[.\w]*\.exch\.b32", ptx[count.end():])


def test_the_c_sources_stamp_layout_and_sizes_are_run_pys():
    """run.py reads the binary's stamps by these offsets and sizes its c tiles by these rows and
    subtiles: a word moved in one and not the other would read the wrong phase."""
    import re

    source = (EXPERIMENT / "pdl_overlap.cu").read_text()
    enum = re.search(r"enum Stamp : int \{(.*?)\};", source, re.S).group(1)
    slots = {name: int(value) for name, value in re.findall(r"\bk(\w+) = (\d+),", enum)}
    assert slots == {"Entry": run.ENTRY, "StartEnd": run.START_END, "MainEnd": run.MAIN_END, "WaitEnd": run.WAIT_END,
                     "Exit": run.EXIT, "Smid": run.SMID, "ClockEntry": run.CLOCK_OFFSET,
                     "ClockStartEnd": run.CLOCK_OFFSET + 1, "ClockMainEnd": run.CLOCK_OFFSET + 2,
                     "ClockWaitEnd": run.CLOCK_OFFSET + 3, "ClockExit": run.CLOCK_OFFSET + 4,
                     "ClockStored": run.STORED, "ClockArrived": run.ARRIVED, "Arrivals": run.ARRIVALS,
                     "ClockReduced": run.REDUCED}
    constants = dict(re.findall(r"constexpr int (k\w+) = (\d+);", source))
    assert int(constants["kStampWords"]) == run.STAMP_WORDS > max(slots.values())
    assert int(constants["kThreads"]) == run.ROWS and int(constants["kSubtile"]) == run.SUBTILE
    assert run.SUBTILE == sub.SM100_EPILOGUE_COLUMNS


def test_the_epilogue_formulas_are_the_models_tail_seconds():
    """On any latency and rate, the experiment's formulas are model.tail_seconds: unsplit, the
    tail; split, what the partials exchange adds to it."""
    constants = dataclasses.replace(model.FITTED, latency_s=0.6e-6)
    rate = 55e9
    for tile_cols, split_k in ((128, 2), (64, 2), (128, 3)):
        whole = model.Kernel("kit", 128, tile_cols, 1, 6)
        split = dataclasses.replace(whole, split_k=split_k)
        tail = model.tail_seconds(whole, constants, rate)
        exchange = model.tail_seconds(split, constants, rate) - tail
        assert math.isclose(run.tail_formula_us(0.6, rate, tile_cols), tail * 1e6, rel_tol=1e-12)
        assert math.isclose(run.exchange_formula_us(0.6, rate, tile_cols, split_k), exchange * 1e6, rel_tol=1e-12)


def test_the_factors_are_each_terms_difference_over_its_formula():
    """Worked by hand: at 65.536 GB/s a 128 x 128 fp16 tile (32 KB) takes 0.5 us and two fp32
    partials (128 KB) 2 us; with a 0.5 us round trip the formulas are 1.0 and 2.5 us."""
    per_call = {"t0": 10.0, "t1": 11.25, "x": 13.75, "t0-serial": 12.0, "t1-serial": 12.5, "x-serial": 17.5}
    got = run.term_factors(per_call, "", 0.5, 65.536e9, 128, 2)
    assert got["tail_us"] == 1.25 and math.isclose(got["tail_formula_us"], 1.0)
    assert math.isclose(got["tail_factor"], 1.25)
    assert got["exchange_us"] == 2.5 and math.isclose(got["exchange_formula_us"], 2.5)
    assert math.isclose(got["exchange_factor"], 1.0)
    serial = run.term_factors(per_call, "-serial", 0.5, 65.536e9, 128, 2)
    assert math.isclose(serial["tail_factor"], 0.5) and math.isclose(serial["exchange_factor"], 2.0)
    assert math.isclose(run.streaming_rate(16, 48 * 1024, 12.288), 64e9)
    assert run.chase_latency_us([900.0, 500.0, 610.0, 620.0, 640.0]) == 0.62


def _epilogue_words(arrivals_by_call, split_k, stored_us=0.5, arrival_us=0.7, reduce_us=1.5, ghz=2):
    """Stamps of a split-K epilogue's calls, every CTA alike but its arrivals: the wait ends at
    3 us, the stores take `stored_us`, the arrival `arrival_us`, the last one's reduction
    `reduce_us`; clock64 runs at `ghz` cycles a ns."""
    words = []
    for call, arrivals in enumerate(arrivals_by_call):
        base = call * 20_000
        for index, seen in enumerate(arrivals):
            wait = base + 3000
            stored = wait + stored_us * 1000
            arrived = stored + arrival_us * 1000
            reduced = arrived + (reduce_us * 1000 if seen == split_k - 1 else 0)
            exit_ = reduced + 200
            ns = [base, base + 1000, wait, wait, exit_]
            words += [*ns, index, *(ghz * t for t in ns), ghz * stored, ghz * arrived, seen, ghz * reduced, 0]
    return [int(w) for w in words]


def test_the_epilogue_stamps_give_each_phase_and_one_last_arrival_a_tile():
    # Four CTAs, two tiles (CTA i is tile i % 2): split 0 of tile 0 arrived first, of tile 1 last.
    arrivals = [[0, 1, 1, 0]] * 3
    calls = run.parse_stamps(_epilogue_words(arrivals, 2), 3, 4)
    got = run.epilogue_stamps(calls, 2, stored=True)
    assert math.isclose(got["stores_us"], 0.5) and math.isclose(got["arrival_us"], 0.7)
    assert math.isclose(got["reduce_us"], 1.5) and got["last_fraction"] == 0.5 and got["one_last_per_tile"]
    assert math.isclose(got["epilogue_us"], 0.5 + 0.7 + 0.75 + 0.2)  # the median CTA: half of them reduce
    unsplit = run.epilogue_stamps(calls, 1, stored=False)
    assert unsplit["stores_us"] is None and "one_last_per_tile" not in unsplit
    # Tile 0's two splits both saw no arrival before their own in the second call: no last there.
    broken = [[0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 1, 0]]
    got = run.epilogue_stamps(run.parse_stamps(_epilogue_words(broken, 2), 3, 4), 2, stored=True)
    assert got["one_last_per_tile"] is False
    problems = run.epilogue_problems({"x": {"counters_left": 0, "epilogue": got}}, {"tail_factor": 1.0})
    assert problems == ["x: a tile without exactly one last arrival"]


def test_a_run_that_did_not_resolve_a_term_or_left_counters_is_not_recorded():
    fine = {"t1": {"counters_left": 0, "epilogue": {}},
            "x": {"counters_left": 0, "epilogue": {"one_last_per_tile": True}}}
    assert run.epilogue_problems(fine, {"tail_factor": 0.8, "exchange_factor": 1.4, "tail_us": -1.0}) == []
    assert run.epilogue_problems({**fine, "x": {"counters_left": 3, "epilogue": {}}}, {}) == [
        "x: 3 split-K counters left non-zero"]
    assert len(run.epilogue_problems(fine, {"tail_factor": -0.1, "exchange_factor": float("nan")})) == 2


def _epilogue_results(per_call, grid=132, split_k=2):
    results = {run.CHASE_CASE: {"ns_per_hop": [500.0, 620.0, 700.0]},
               run.RATE_CASE: {"stamps": {"main_us": 12.288}, "grid": grid}}
    for case, us in per_call.items():
        split = "x" in case
        results[case] = {"per_call_us": us, "rounds_us": [us, us + 0.1], "grid": grid, "counters_left": 0,
                         "epilogue": {"stores_us": 0.4, "one_last_per_tile": True} if split else {"stores_us": 0.4}}
    return results


def test_the_epilogue_record_is_what_the_model_reads(tmp_path):
    per_call = {"t0": 10.0, "t1": 11.0, "x": 13.0, "t0-serial": 12.0, "t1-serial": 13.5, "x-serial": 16.0}
    results = _epilogue_results(per_call)
    knobs = run.MODES["epilogue"][1]
    device = {"device": "NVIDIA H200", "cc": "9.0", "sms": 132}
    record = run.epilogue_record(device, results, knobs, 8, 128, 2, "abc1234", "2026-12-02")
    assert record["latency_us"] == 0.62 and math.isclose(record["rate_bytes_per_s"], 64e9)
    tail_formula = 0.62 + 32768 / 64e9 * 1e6
    exchange_formula = 131072 / 64e9 * 1e6 + 0.62
    assert math.isclose(record["tail_factor"], 1.0 / tail_formula)
    assert math.isclose(record["exchange_factor"], 2.0 / exchange_formula)
    assert math.isclose(record["serial"]["tail_factor"], 1.5 / tail_formula)
    assert record["grid"] == 132 and record["counters_left"] == 0 and record["rounds_us"]["x"] == [13.0, 13.1]
    assert run.epilogue_problems(results, record) == []
    path = tmp_path / "epilogue-terms.json"
    path.write_text(run.json.dumps(record))
    epilogue = model.load_epilogue(path)
    # The model applies the run's times over the formula with the fit's round trip under load; the
    # record's factors (over the run's unloaded one) are the ranges' high ends.
    fitted_us = model.FITTED.latency_s * 1e6
    assert epilogue.measured and math.isclose(epilogue.tail_factor, 1.0 / (fitted_us + 32768 / 64e9 * 1e6))
    assert math.isclose(epilogue.exchange_factor, 2.0 / (131072 / 64e9 * 1e6 + fitted_us))
    assert (epilogue.tail_unloaded_factor, epilogue.exchange_unloaded_factor) == (record["tail_factor"], record["exchange_factor"])
    for part in ("NVIDIA H200", "2026-12-02", "abc1234", "epilogue-terms.json"):
        assert part in epilogue.source


def test_the_epilogue_cases_are_the_benchmark_configurations_and_fit_the_binarys_buffers():
    """The default c tile and split-K are 128 x 7168 x 16384's configuration (the one split-K
    configuration); each term's two cases differ by the term alone; the buffers hold the largest."""
    config = sub.sm100_config(sub.Problem(128, 7168, 16384, 1), conservative=False)
    assert (run.EPILOGUE_TILE_COLS, run.EPILOGUE_SPLIT_K) == (config.mma_n, config.split_k)
    knobs = run.MODES["epilogue"][1]
    lines = run.epilogue_case_lines(8, knobs, sms=133, tile_cols=128, split_k=2, workdir=Path("/nonexistent"))
    cases = {case: fields for _, case, fields in lines}
    assert set(cases) == {run.CHASE_CASE, run.RATE_CASE, *run.EPILOGUE_CASES}
    grid = cases["t0"]["grid"]
    assert grid == 132 and grid % 2 == 0 and all(f["grid"] == grid for f in cases.values())
    for suffix, pdl in (("", 1), ("-serial", 0)):
        t0, t1, x = (cases[case + suffix] for case in ("t0", "t1", "x"))
        assert (t0["tile_cols"], t1["tile_cols"], x["tile_cols"]) == (0, 128, 128)
        assert (t0["split_k"], t1["split_k"], x["split_k"]) == (1, 1, 2)
        assert t0["pdl"] == t1["pdl"] == x["pdl"] == pdl
        differing = {key for key in t0 if t0[key] != x[key]} - {"name", "stamps"}
        assert differing == {"tile_cols", "split_k"}
    assert all(f["smem_bytes"] == run.SMEM_ONE_CTA for f in cases.values() if f["kind"] == "call")
    rate = cases[run.RATE_CASE]
    assert rate["fma_per_tile"] == 0 and 3 * rate["tile_bytes"] <= rate["smem_bytes"]
    arguments = dict(zip(*[iter(run.binary_arguments(lines))] * 2))
    assert int(arguments["--in-call-bytes"]) == -(-grid // knobs.share) * run.RATE_K_TILES * run.RATE_TILE_BYTES
    assert int(arguments["--out-call-bytes"]) == 2 * 128 * 128 * grid
    assert int(arguments["--partial-bytes"]) == 4 * 128 * 128 * grid
    with pytest.raises(ValueError):
        run.epilogue_case_lines(8, knobs, sms=132, tile_cols=48, split_k=2, workdir=Path("/nonexistent"))


def test_the_epilogue_mode_without_a_device_says_so(monkeypatch, capsys):
    monkeypatch.setattr(run, "cuda_device", lambda: "no CUDA device")
    assert run.main(["--mode", "epilogue", "--record", "/nonexistent/x.json"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_epilogue_mode_runs_end_to_end_on_a_stand_in_binary(monkeypatch, tmp_path, capsys):
    """Everything but the GPU: the case lines reach the binary, its JSON lines and stamp files come
    back through the analysis, and the record written is one the model reads."""
    per_call = {"t0": 10.0, "t1": 11.0, "x": 13.0, "t0-serial": 12.0, "t1-serial": 13.5, "x-serial": 16.0}
    seen = []

    def binary(command, input, **_):
        lines = [dict(word.split("=", 1) for word in line.split()) for line in input.splitlines()]
        seen.extend(lines)
        out = [run.json.dumps({"device": "Stand-in GPU", "cc": "9.0", "sms": 4})]
        for f in lines:
            grid = int(f["grid"])
            if f["kind"] == "chase":
                out.append(run.json.dumps({"case": f["name"], "kind": "chase", "grid": grid,
                                           "ns_per_hop": [600.0] * grid}))
                continue
            calls, split_k = int(f["calls"]), int(f["split_k"])
            arrivals = [[index // (grid // split_k) for index in range(grid)]] * calls
            Path(f["stamps"]).write_bytes(run.array.array("Q", _epilogue_words(arrivals, split_k)).tobytes())
            us = per_call.get(f["name"], 5.0)
            out.append(run.json.dumps({"case": f["name"], "grid": grid, "occupancy": 1,
                                       "smem_bytes": int(f["smem_bytes"]),
                                       "in_bytes_per_call": 0, "out_bytes_per_call": 0, "hold_us": 1400.0,
                                       "worst_enqueue_us": 100.0, "counters_left": 0, "per_call_us": [us] * 3}))
        return subprocess.CompletedProcess(command, 0, stdout="\n".join(out) + "\n", stderr="")

    monkeypatch.setattr(run, "cuda_device", lambda: (9, 0, 4))
    monkeypatch.setattr(run, "find_nvcc", lambda explicit: "nvcc")
    monkeypatch.setattr(run, "build", lambda nvcc, arch, out: None)
    monkeypatch.setattr(run.subprocess, "run", binary)
    record_path = tmp_path / "epilogue-terms.json"
    assert run.main(["--mode", "epilogue", "--record", str(record_path), "--commit", "abc1234",
                     "--keep", str(tmp_path / "work")]) == 0
    printed = capsys.readouterr().out
    assert "tail: t1 - t0" in printed and "partials exchange: x - t1" in printed
    assert {f["name"] for f in seen} == {run.CHASE_CASE, run.RATE_CASE, *run.EPILOGUE_CASES}
    record = run.json.loads(record_path.read_text())
    # The stand-in's rate case streams 16 K tiles of 48 KB in the 2 us its stamps give a main loop.
    assert math.isclose(record["rate_bytes_per_s"], 16 * 48 * 1024 / 2e-6) and record["latency_us"] == 0.6
    assert record["tail_us"] == 1.0 and record["exchange_us"] == 2.0 and record["stamps"]["x"]["one_last_per_tile"]
    epilogue = model.load_epilogue(record_path)
    assert epilogue.measured and "Stand-in GPU" in epilogue.source and "abc1234" in epilogue.source
    assert math.isclose(epilogue.tail_unloaded_factor, 1.0 / run.tail_formula_us(0.6, record["rate_bytes_per_s"], 128))
    assert math.isclose(epilogue.tail_factor,
                        1.0 / run.tail_formula_us(model.FITTED.latency_s * 1e6, record["rate_bytes_per_s"], 128))


def _hopper_and_nvcc() -> str | None:
    """Why the epilogue mode cannot run here, or None where it can."""
    device = run.cuda_device()
    if isinstance(device, str):
        return device
    if device[0] < 9:
        return f"compute capability {device[0]}.{device[1]}: no PDL"
    return None if run.find_nvcc(None) else "nvcc not found"


@pytest.mark.gpu
@pytest.mark.skipif(_hopper_and_nvcc() is not None,
                    reason=f"needs a Hopper or newer GPU and nvcc: {_hopper_and_nvcc()}")
def test_on_a_gpu_the_epilogue_protocol_holds_and_both_terms_resolve(tmp_path):
    path = tmp_path / "epilogue-terms.json"
    assert run.main(["--mode", "epilogue", "--rounds", "5", "--record", str(path)]) == 0
    record = run.json.loads(path.read_text())
    assert record["counters_left"] == 0 and record["stamps"]["x"]["one_last_per_tile"]
    assert record["stamps"]["x"]["last_fraction"] == pytest.approx(1 / record["split_k"])
    assert record["tail_factor"] > 0 and record["exchange_factor"] > 0 and record["latency_us"] > 0
    assert model.load_epilogue(path).measured
