"""Two calls in flight with PDL: do they overlap on every SM, and how near the model's formula?

A Hopper test of the PDL assumptions behind harness/b200/model.py's figures for 128 x 4096 x
7168 and 128 x 7168 x 2048 (two calls in flight), and (`--mode epilogue`) of its epilogue
terms: c's stores and split-K's partials reduction, each a call's time with it against without.

    python experiments/pdl_overlap/run.py --out pdl_overlap.csv
    python experiments/pdl_overlap/run.py --mode bandwidth --record results/pdl-overlap-bandwidth.json
    python experiments/pdl_overlap/run.py --mode epilogue --record results/epilogue-terms.json

Builds pdl_overlap.cu with nvcc for the device found, runs the cases below in one process and
prints, per main-loop length, each case's measured time per call beside the model's, with the
per-CTA %globaltimer/%smid evidence of what overlapped. README.md beside this file explains the
output. Everything but `main` runs without a GPU (tests/test_pdl_overlap.py).
"""

from __future__ import annotations

import argparse
import array
import bisect
import csv
import ctypes
import dataclasses
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from harness.shared.paths import git_commit  # noqa: E402  (the standard library alone; HARNESS_COMMIT on a shipped tree)
SOURCE = HERE / "pdl_overlap.cu"

# pdl_overlap.cu's stamp layout: kStampWords words per CTA.
STAMP_WORDS = 16
ENTRY, START_END, MAIN_END, WAIT_END, EXIT, SMID = range(6)
CLOCK_OFFSET = 6  # clock64 at ENTRY..EXIT follows
# The c-tile epilogue's (thread 0's): clock64 once its stores were issued, once its warp's
# arrival returned, the arrivals its warp counted before its own, clock64 once the last
# arrival's reduction was issued.
STORED, ARRIVED, ARRIVALS, REDUCED = 11, 12, 13, 14
ROWS = 128  # pdl_overlap.cu's kThreads: a c tile's rows, one a thread
SUBTILE = 32  # kSubtile: columns of c a thread holds at once (submission.py's SM100_EPILOGUE_COLUMNS)

# Dynamic shared memory per CTA, which alone sets how many CTAs an SM holds (the carveout is
# pinned to its maximum and the registers allow more). With 228 KB an SM and 1 KB reserved a
# CTA (H100, H200 and B200 alike): 150 KB leaves room for one, 100 KB for two, never three.
SMEM_ONE_CTA = 150 * 1024
SMEM_TWO_CTAS = 100 * 1024

# The default sweep: K tiles per CTA. With the default work per K tile (about 0.3 us) the start
# and tail are about half of the chain at 2 and 6 K tiles, as on 128 x 7168 x 2048 (the model's
# chain there: 1.0 us start, 2.2 us main loop, 1.5 us tail), and a small share at 24 and 96.
DEFAULT_K_TILES = (2, 6, 24, 96)
CALLS = 50  # the competition's inputs per timed round

# The cases, as README.md names them: (label, CTAs an SM has room for, grid, PDL, calls).
# grid: "sms" (one CTA an SM), "half" (the SMs' half: the model's other two-in-flight branch,
# as 128 x 4096 x 7168's 64 CTAs of 148 SMs) or "double" (two CTAs on every SM at once).
CASES = {
    "a1": ("one call alone, room for 1 CTA/SM", 1, "sms", False, 1),
    "a2": ("one call alone, room for 2 CTAs/SM", 2, "sms", False, 1),
    "b": ("50 calls, 1 CTA/SM, PDL off", 1, "sms", False, CALLS),
    "c": ("50 calls, 1 CTA/SM, PDL on", 1, "sms", True, CALLS),
    "d": ("50 calls, room for 2 CTAs/SM, grid = SMs, PDL on", 2, "sms", True, CALLS),
    "e": ("50 calls, room for 2 CTAs/SM, grid = SMs, PDL off", 2, "sms", False, CALLS),
    "f": ("50 calls, 1 CTA/SM, grid = SMs/2, PDL on", 1, "half", True, CALLS),
    "g": ("one call of 2 CTAs on every SM (main loops side by side)", 2, "double", False, 1),
}
# The same as g with the carveout left to the driver, once a run: does the driver size an SM's
# shared memory for two CTAs when nothing asks it to? (submission.py's B200 path relies on it.)
CARVEOUT_CASE = "g-default-carveout"


@dataclasses.dataclass(frozen=True)
class Knobs:
    start_ns: float = 800.0  # the start phase: a B200 CTA's prologue (barriers, TMEM, descriptors)
    tail_ns: float = 800.0  # the epilogue's latency before its stores (TMEM to registers)
    fma_per_tile: int = 128  # dependent FMAs per thread per K tile (about 0.3 us at 1.8 GHz)
    tile_bytes: int = 2048  # bytes per K tile per CTA, streamed through 3 stages
    out_bytes: int = 8192  # bytes each CTA stores in its tail
    rounds: int = 30
    share: int = 1  # CTAs that read the same slab: the rest of their reads hit L2


# The modes: (K tiles a CTA, knobs). "latency": 2 KB K tiles behind FMA chains, the start and
# tail about half the chain at short main loops. "bandwidth": the B200 two-CTA configuration's
# K tiles (28 KB: a 128-row fp4 tile, a 64-row one and both 128-row scale atoms, 3 stages in
# 100 KB), eight of them as on 128 x 7168 x 2048, an FMA chain about as long as their MMAs
# (40 dependent FMAs), and slabs shared by 8 CTAs, so that L2, not DRAM, feeds most of the
# loads (as a's tile, shared by every CTA, is on the B200): each CTA's stream is held by what
# its stages keep in flight, and two CTAs on an SM contend for its memory path.
# "epilogue": the bandwidth mode's main loop, one CTA an SM, and no stand-in latency in the tail:
# what follows the main loop is the c tile's stores, or split-K's exchange (EPILOGUE_CASES).
MODES = {
    "latency": (DEFAULT_K_TILES, Knobs()),
    "bandwidth": ((8,), Knobs(fma_per_tile=40, tile_bytes=28 * 1024, share=8)),
    "epilogue": ((8,), Knobs(fma_per_tile=40, tile_bytes=28 * 1024, share=8, tail_ns=0.0, out_bytes=0)),
}


# ----- stamps -----


@dataclasses.dataclass(frozen=True)
class Cta:
    call: int
    index: int
    sm: int
    entry: int  # ns, %globaltimer
    start_end: int
    main_end: int
    wait_end: int
    exit: int
    clocks: tuple  # clock64 at entry, start end, main end, wait end, exit
    stored: int = 0  # the c-tile epilogue's: clock64 once its stores were issued
    arrived: int = 0  # split-K: clock64 once its warp's arrival returned
    arrivals: int = 0  # split-K: the arrivals its warp counted before its own
    reduced: int = 0  # split-K: clock64 once the reduction was issued (== arrived but for the last)


def parse_stamps(words, calls: int, grid: int) -> list[list[Cta]]:
    """Per call, its CTAs' stamps from pdl_overlap.cu's layout."""
    out = []
    for call in range(calls):
        ctas = []
        for index in range(grid):
            w = words[(call * grid + index) * STAMP_WORDS:(call * grid + index + 1) * STAMP_WORDS]
            ctas.append(Cta(call, index, w[SMID], w[ENTRY], w[START_END], w[MAIN_END], w[WAIT_END], w[EXIT],
                            tuple(w[CLOCK_OFFSET:CLOCK_OFFSET + 5]), w[STORED], w[ARRIVED], w[ARRIVALS], w[REDUCED]))
        out.append(ctas)
    return out


def read_stamps(path: Path, calls: int, grid: int) -> list[list[Cta]]:
    words = array.array("Q")
    words.frombytes(path.read_bytes())
    return parse_stamps(words, calls, grid)


def steady_calls(calls: list[list[Cta]]) -> list[list[Cta]]:
    """The calls away from the round's ends, where the ones before and after are in flight."""
    skip = min(5, len(calls) // 4)
    return calls[skip:len(calls) - skip] if len(calls) > 2 * skip else calls


def timer_step_ns(ctas: list[Cta]) -> int | None:
    """The smallest nonzero difference between any two stamps: %globaltimer's step, as seen."""
    values = sorted({v for c in ctas for v in (c.entry, c.start_end, c.main_end, c.wait_end, c.exit)})
    steps = [b - a for a, b in zip(values, values[1:]) if b > a]
    return min(steps) if steps else None


def clock_ghz(ctas: list[Cta]) -> float | None:
    """SM clock cycles per ns over every CTA's life: the globaltimer's steps average out."""
    ns = sum(c.exit - c.entry for c in ctas)
    cycles = sum(c.clocks[4] - c.clocks[0] for c in ctas)
    return cycles / ns if ns > 0 and cycles > 0 else None


def _median(values) -> float | None:
    values = list(values)
    return statistics.median(values) if values else None


def _trimmed_mean(values) -> float | None:
    """Mean of the middle 80 %: %globaltimer moves in steps (256 ns on an H100), which a median
    keeps and a mean of many stamps averages out."""
    values = sorted(values)
    if not values:
        return None
    cut = len(values) // 10
    kept = values[cut:len(values) - cut]
    return sum(kept) / len(kept)


def _resident_peak(intervals) -> int:
    """Most intervals open at once; one that ends when another begins does not overlap it."""
    events = sorted([(b, 1) for b, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1]))
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def analyze(calls: list[list[Cta]]) -> dict:
    """What the stamps of one round show: phase lengths (clock64, in us), spans, and whether
    calls overlapped on the same SM (%globaltimer, %smid)."""
    every = [c for call in calls for c in call]
    steady = steady_calls(calls)
    steady_ctas = [c for call in steady for c in call]
    ghz = clock_ghz(every)
    result = {"timer_step_ns": timer_step_ns(every), "clock_ghz": ghz}

    def phase(i, j):
        return _median((c.clocks[j] - c.clocks[i]) / ghz / 1e3 for c in steady_ctas) if ghz else None

    result.update(start_us=phase(0, 1), main_us=phase(1, 2), wait_us=phase(2, 3), tail_us=phase(3, 4),
                  life_us=phase(0, 4))
    result["span_us"] = _trimmed_mean((max(c.exit for c in call) - min(c.entry for c in call)) / 1e3 for call in steady)
    firsts = [min(c.entry for c in call) for call in steady]
    if len(firsts) % 2 == 0:
        # An even number of intervals: two calls in flight may alternate short and long ones.
        firsts = firsts[:-1]
    result["stamp_period_us"] = (firsts[-1] - firsts[0]) / (len(firsts) - 1) / 1e3 if len(firsts) > 1 else None
    result["sms_per_call"] = _median(len({c.sm for c in call}) for call in steady)
    result["most_ctas_of_a_call_on_one_sm"] = max(
        max(sum(1 for c in call if c.sm == sm) for sm in {c.sm for c in call}) for call in calls)

    by_sm: dict[int, list[Cta]] = {}
    for c in every:
        by_sm.setdefault(c.sm, []).append(c)
    result["most_ctas_on_one_sm"] = max(_resident_peak([(c.entry, c.exit) for c in ctas]) for ctas in by_sm.values())
    spans = [(min(c.entry for c in call), max(c.exit for c in call)) for call in calls]
    result["most_calls_in_flight"] = _resident_peak(spans)
    # Calls whose first CTA entered before the previous call's last exit.
    early = [spans[n][0] < spans[n - 1][1] for n in (call[0].call for call in steady) if n > 0]
    result["next_call_early"] = sum(early) / len(early) if early else None

    # Slot gap: from the latest exit on an SM to the next entry there (a CTA's dispatch once an
    # SM has room), and whether a CTA entered while another call's CTA ran on its SM.
    exits_by_sm = {sm: sorted(c.exit for c in ctas) for sm, ctas in by_sm.items()}
    by_sm_call: dict[tuple[int, int], list[Cta]] = {}
    for c in every:
        by_sm_call.setdefault((c.sm, c.call), []).append(c)
    gaps, beside_previous, beside_any, with_previous = [], 0, 0, 0
    for call in steady:
        for c in call:
            exits = exits_by_sm[c.sm]
            i = bisect.bisect_right(exits, c.entry)
            if i:
                gaps.append((c.entry - exits[i - 1]) / 1e3)
            # Calls further apart than the GPU's programmatic dependent grids in flight (8 on
            # an H200) cannot share an SM at once.
            beside_any += any(o.entry <= c.entry < o.exit for n in range(c.call - 8, c.call + 9) if n != c.call
                              for o in by_sm_call.get((c.sm, n), ()))
            previous = by_sm_call.get((c.sm, c.call - 1), ())
            if previous:
                with_previous += 1
                beside_previous += any(o.entry <= c.entry < o.exit for o in previous)
    result["slot_gap_us"] = _trimmed_mean(gaps)
    result["beside_previous_call"] = beside_previous / with_previous if with_previous else None
    result["beside_another_call"] = beside_any / len(steady_ctas) if steady_ctas and len(calls) > 1 else None

    # Handoff: from the previous call's last exit to a CTA's return from griddepcontrol.wait,
    # for the CTAs that reached the wait before that exit (store drain, grid completion, release).
    handoffs, waited = [], 0
    for call in steady:
        n = call[0].call
        if n == 0:
            continue
        last_exit = max(c.exit for c in calls[n - 1])
        for c in call:
            if c.main_end < last_exit:
                waited += 1
                handoffs.append((c.wait_end - last_exit) / 1e3)
    result["handoff_us"] = _trimmed_mean(handoffs)
    result["waited_fraction"] = waited / len(steady_ctas) if steady_ctas and len(calls) > 1 else None
    return result


def timeline(calls: list[list[Cta]], around: int, width: int = 2) -> list[str]:
    """Every CTA, of the calls around `around`, on the SM that holds CTA 0 of call `around`:
    its stamps in us from the first entry shown."""
    sm = calls[around][0].sm
    shown = [c for call in calls[max(0, around - width):around + width + 1] for c in call if c.sm == sm]
    if not shown:
        return []
    t0 = min(c.entry for c in shown)
    lines = [f"  SM {sm}: us from the first entry shown (enter | main loop done | wait done | exit)"]
    for c in sorted(shown, key=lambda c: c.entry):
        lines.append(f"    call {c.call:2d} CTA {c.index:3d}: {(c.entry - t0) / 1e3:7.2f} | {(c.main_end - t0) / 1e3:7.2f}"
                     f" | {(c.wait_end - t0) / 1e3:7.2f} | {(c.exit - t0) / 1e3:7.2f}")
    return lines


# ----- the model's predictions -----


def chain_us(span_alone_us: float, slot_gap_us: float) -> float:
    """One call's chain as the model has it (CTA start + main loop + tail): a CTA's dispatch
    once its SM has room, then the call's span on the SMs (start phase to last exit)."""
    return slot_gap_us + span_alone_us


def dram_bound_us(bytes_per_call: float, dram_bytes_per_s: float) -> float:
    return bytes_per_call / dram_bytes_per_s * 1e6


def predicted_us(case: str, *, alone_us: float, chain: float, mainloop_bound_us: float, dram_us: float,
                 serial_tail_us: float = 0.0) -> float:
    """harness/b200/model.py's `call`, per case, on measured parts, before its overlap factor
    (which is what this run measures: measured / this):
    - b, e (no PDL): launch + chain, each call after the last: one call alone's time;
    - c (PDL, one CTA an SM, no SM free): CTA start + main loop + tail, i.e. the chain;
    - d (PDL, room for two CTAs an SM) and f (PDL, half the SMs: the next grid fits on the free
      ones): two calls in flight, max(chain / 2, the busiest SM's main loops, tail + hand-off,
      DRAM bytes / rate)."""
    if case in ("b", "e"):
        return alone_us
    if case == "c":
        return chain
    if case in ("d", "f"):
        return max(chain / 2, mainloop_bound_us, serial_tail_us, dram_us)
    raise ValueError(f"no prediction for case {case}")


def serial_tail_bound_us(tail_us: float, handoff_us: float) -> float:
    """What the model leaves out: a call's tail waits (griddepcontrol.wait) for the previous
    call's grid to complete, so tails run one after another, each behind a handoff."""
    return tail_us + handoff_us


def predictions(k_results: dict, device: dict) -> dict:
    """{case: (predicted us, formula)} for one main-loop length's results {case: result}, where
    a result is {"per_call_us": median, "stamps": analyze(...), "in_bytes", "out_bytes"}."""
    a1, a2, c = k_results["a1"], k_results["a2"], k_results.get("c")
    gap = c["stamps"]["slot_gap_us"] if c and c["stamps"]["slot_gap_us"] is not None else 0.0
    chain_1 = chain_us(a1["stamps"]["span_us"], gap)
    chain_2 = chain_us(a2["stamps"]["span_us"], gap)
    # Two main loops side by side on every SM (g): each call holds its SMs' main-loop resources
    # for half of that; with half the grid (f) each SM runs a main loop every other call.
    g_main = k_results["g"]["stamps"]["main_us"] if "g" in k_results else a2["stamps"]["main_us"]
    rate = device["dram_bytes_per_s"]
    out = {}
    for case, result in k_results.items():
        dram = dram_bound_us(result["in_bytes"] + result["out_bytes"], rate)
        stamps = result["stamps"]
        serial = (serial_tail_bound_us(stamps["tail_us"], stamps["handoff_us"])
                  if stamps.get("handoff_us") is not None and stamps.get("tail_us") is not None else 0.0)
        if case == "b":
            out[case] = (a1["per_call_us"], "one call alone (launch + chain)")
        elif case == "e":
            out[case] = (a2["per_call_us"], "one call alone (launch + chain)")
        elif case == "c":
            out[case] = (chain_1, f"chain = slot gap {gap:.2f} + span alone {a1['stamps']['span_us']:.2f}")
        elif case == "d":
            value = predicted_us("d", alone_us=a2["per_call_us"], chain=chain_2, mainloop_bound_us=g_main / 2,
                                 dram_us=dram, serial_tail_us=serial)
            out[case] = (value, f"max(chain {chain_2:.2f} / 2, main loop {g_main / 2:.2f}, tail+hand {serial:.2f}, "
                                f"DRAM {dram:.2f})")
        elif case == "f":
            main = a1["stamps"]["main_us"] / 2
            value = predicted_us("f", alone_us=a1["per_call_us"], chain=chain_1, mainloop_bound_us=main, dram_us=dram,
                                 serial_tail_us=serial)
            out[case] = (value, f"max(chain {chain_1:.2f} / 2, main loop {main:.2f}, tail+hand {serial:.2f}, "
                                f"DRAM {dram:.2f})")
    return out


def verdict(measured_us: float, predicted: float, overlapped: float | None, where: str = "beside this call's") -> str:
    """How case d (or f) reads: did the next call's CTAs start while this call's ran (`overlapped`:
    the fraction that did), and did the time per call come down to the model's?"""
    if overlapped is None:
        return "no stamps of consecutive calls"
    if overlapped < 0.5:
        return f"refutes: the next call's CTAs did not start {where}"
    if measured_us / predicted <= 1.15:
        return "consistent: two calls in flight at the model's time"
    return "partly: calls overlap, but a call takes more than the model's time"


# ----- the epilogue terms (--mode epilogue) -----

# The configuration whose epilogue has both terms: 128 x 7168 x 16384's (submission.py's
# SM100_BENCHMARK_CONFIGS): 128-column c tiles (its mma_n), two splits a tile.
EPILOGUE_TILE_COLS = 128
EPILOGUE_SPLIT_K = 2
# The cases, as README.md names them: (label, c tile stored, split-K exchange, PDL). Each term
# is a difference of two of them: the tail t1 - t0, the exchange x - t1 (with PDL, as the B200
# kernel runs; the -serial ones without).
EPILOGUE_CASES = {
    "t0": ("no stores after the main loop", False, False, True),
    "t1": ("the c tile's fp16 stores", True, False, True),
    "x": ("split-K: partial out, arrival, the last's partials in and c", True, True, True),
    "t0-serial": ("t0, PDL off", False, False, False),
    "t1-serial": ("t1, PDL off", True, False, False),
    "x-serial": ("x, PDL off", True, True, False),
}
# The formula's parts, taken in the same process: an SM's rate (RATE_CASE: every SM streaming
# the bandwidth mode's slabs in 48 KB K tiles, three stages, no FMA: what one CTA an SM takes in
# while every SM does) and an L2 round trip (CHASE_CASE: dependent loads through L2).
RATE_CASE, CHASE_CASE = "rate", "chase"
RATE_K_TILES = 16
RATE_TILE_BYTES = 48 * 1024
CHASE_HOPS = 2000
FP16_BYTES, FP32_BYTES = 2, 4


def epilogue_grid(sms: int, split_k: int) -> int:
    """One CTA an SM, as many as are a whole number of tiles' splits."""
    return sms - sms % split_k


def epilogue_case_lines(k_tiles: int, knobs: Knobs, sms: int, tile_cols: int, split_k: int,
                        workdir: Path) -> list[tuple[int, str, dict]]:
    """(K tiles, case, fields) for the binary: the two probes, then EPILOGUE_CASES."""
    if tile_cols <= 0 or tile_cols % SUBTILE or split_k < 2:
        raise ValueError(f"a c tile of {tile_cols} columns (a multiple of {SUBTILE}) and two splits or more are needed")
    grid = epilogue_grid(sms, split_k)
    common = dict(smem_bytes=SMEM_ONE_CTA, grid=grid, rounds=knobs.rounds, share=knobs.share, max_carveout=1)
    lines = [
        (k_tiles, CHASE_CASE, dict(name=CHASE_CASE, kind="chase", grid=grid, hops=CHASE_HOPS)),
        (k_tiles, RATE_CASE, dict(
            name=RATE_CASE, kind="call", k_tiles=RATE_K_TILES, pdl=0, calls=1, tile_bytes=RATE_TILE_BYTES,
            fma_per_tile=0, start_ns=0.0, tail_ns=0.0, out_bytes=0, tile_cols=0, split_k=1,
            stamps=str(workdir / f"{RATE_CASE}.bin"), **common)),
    ]
    for case, (_, stores, exchange, pdl) in EPILOGUE_CASES.items():
        lines.append((k_tiles, case, dict(
            name=case, kind="call", k_tiles=k_tiles, pdl=int(pdl), calls=CALLS, tile_bytes=knobs.tile_bytes,
            fma_per_tile=knobs.fma_per_tile, start_ns=knobs.start_ns, tail_ns=knobs.tail_ns, out_bytes=0,
            tile_cols=tile_cols if stores else 0, split_k=split_k if exchange else 1,
            stamps=str(workdir / f"{case}.bin"), **common)))
    return lines


def chase_latency_us(ns_per_hop) -> float:
    """The L2 round trip: the median CTA's time a hop of its walk."""
    return statistics.median(ns_per_hop) / 1e3


def streaming_rate(k_tiles: int, tile_bytes: int, main_us: float) -> float:
    """Bytes a second an SM took in over a main loop of `k_tiles` K tiles of `tile_bytes`."""
    return k_tiles * tile_bytes / (main_us * 1e-6)


def tail_formula_us(latency_us: float, rate: float, tile_cols: int) -> float:
    """harness/b200/model.py's `tail_seconds` unsplit: a round trip and the fp16 c tile at the rate."""
    return latency_us + FP16_BYTES * ROWS * tile_cols / rate * 1e6


def exchange_formula_us(latency_us: float, rate: float, tile_cols: int, split_k: int) -> float:
    """The same's partials exchange: every split's fp32 tile (this one's out, the others' in) at
    the rate, and the arrival's round trip."""
    return FP32_BYTES * ROWS * tile_cols * split_k / rate * 1e6 + latency_us


def term_factors(per_call_us: dict, suffix: str, latency_us: float, rate: float, tile_cols: int,
                 split_k: int) -> dict:
    """Each term measured (a call's time with it less without it) and over the formula on the
    run's own latency and rate: the factor the model applies to its B200 formula."""
    t0, t1, x = (per_call_us[case + suffix] for case in ("t0", "t1", "x"))
    tail, exchange = t1 - t0, x - t1
    tail_formula = tail_formula_us(latency_us, rate, tile_cols)
    exchange_formula = exchange_formula_us(latency_us, rate, tile_cols, split_k)
    return dict(tail_us=tail, tail_formula_us=tail_formula, tail_factor=tail / tail_formula,
                exchange_us=exchange, exchange_formula_us=exchange_formula, exchange_factor=exchange / exchange_formula)


def epilogue_stamps(calls: list[list[Cta]], split_k: int, stored: bool) -> dict:
    """The epilogue's phases in the steady calls (medians, us, clock64): from the wait's end to
    thread 0's stores issued (where it `stored` a tile), to its warp's arrival, to the last
    arrival's reduction issued, and the whole epilogue to exit; and whether, in every call, each
    tile's warp 0 of each split saw a distinct count of arrivals before its own (one last a tile)."""
    every = [c for call in calls for c in call]
    steady = [c for call in steady_calls(calls) for c in call]
    ghz = clock_ghz(every)

    def us(pairs):
        return _median((end - begin) / ghz / 1e3 for begin, end in pairs) if ghz else None

    out = {"stores_us": us((c.clocks[3], c.stored) for c in steady) if stored else None,
           "epilogue_us": us((c.clocks[3], c.clocks[4]) for c in steady)}
    if split_k == 1:
        return out
    tiles = len(calls[0]) // split_k
    one_last = all(sorted(c.arrivals for c in call if c.index % tiles == tile) == list(range(split_k))
                   for call in calls for tile in range(tiles))
    last = [c for c in steady if c.arrivals == split_k - 1]
    out.update(arrival_us=us((c.stored, c.arrived) for c in steady), reduce_us=us((c.arrived, c.reduced) for c in last),
               last_fraction=len(last) / len(steady) if steady else None, one_last_per_tile=one_last)
    return out


def epilogue_problems(results: dict, factors: dict) -> list[str]:
    """Why a run cannot back the model's epilogue terms: a split-K counter left non-zero, a
    tile without exactly one last arrival, a term that came out not above zero."""
    problems = [f"{case}: {r['counters_left']} split-K counters left non-zero"
                for case, r in results.items() if r.get("counters_left")]
    problems += [f"{case}: a tile without exactly one last arrival" for case, r in results.items()
                 if r.get("epilogue", {}).get("one_last_per_tile") is False]
    problems += [f"{name} {value:.3f}: the run did not resolve the term" for name, value in factors.items()
                 if name.endswith("_factor") and not value > 0]
    return problems


def epilogue_record(device: dict, results: dict, knobs: Knobs, k_tiles: int, tile_cols: int, split_k: int,
                    commit: str, date: str) -> dict:
    """What harness/b200/model.py reads of an epilogue run (results/epilogue-terms.json): the
    factors of the PDL cases (as the B200 kernel runs), the formula's parts, the raw times and
    stamps, and the PDL-off factors beside them."""
    latency = chase_latency_us(results[CHASE_CASE]["ns_per_hop"])
    rate = streaming_rate(RATE_K_TILES, RATE_TILE_BYTES, results[RATE_CASE]["stamps"]["main_us"])
    per_call = {case: results[case]["per_call_us"] for case in EPILOGUE_CASES}
    return {
        "mode": "epilogue", "device": device["device"], "date": date, "commit": commit, "k_tiles": k_tiles,
        "knobs": dataclasses.asdict(knobs), "tile_rows": ROWS, "tile_cols": tile_cols, "split_k": split_k,
        "grid": results["t0"]["grid"], "latency_us": latency, "rate_bytes_per_s": rate,
        **term_factors(per_call, "", latency, rate, tile_cols, split_k),
        "serial": term_factors(per_call, "-serial", latency, rate, tile_cols, split_k),
        "per_call_us": per_call, "rounds_us": {case: results[case]["rounds_us"] for case in EPILOGUE_CASES},
        "stamps": {case: results[case]["epilogue"] for case in EPILOGUE_CASES},
        "counters_left": sum(results[case]["counters_left"] for case in EPILOGUE_CASES),
    }


def epilogue_report(device: dict, results: dict, record: dict) -> list[dict]:
    """Prints the cases, the formula's parts and each term's factor; returns the CSV rows."""
    print(f"device: {device['device']} (cc {device['cc']}), {device['sms']} SMs; grid {record['grid']} (one CTA an "
          f"SM), c tile {ROWS} x {record['tile_cols']} fp16, split-K {record['split_k']}, {record['k_tiles']} K tiles "
          "a CTA")
    chase = results[CHASE_CASE]
    print(f"formula's parts: L2 round trip {record['latency_us']:.3f} us (chase: median of {len(chase['ns_per_hop'])} "
          f"CTAs' {CHASE_HOPS} dependent loads); an SM's rate {record['rate_bytes_per_s'] / 1e9:.1f} GB/s (rate: "
          f"{RATE_K_TILES} K tiles of {RATE_TILE_BYTES // 1024} KB a CTA, every SM streaming, clock64 main loop "
          f"{_f(results[RATE_CASE]['stamps']['main_us'])} us)")
    header = (f"{'case':<10} {'measured':>9} {'stores':>7} {'arrival':>7} {'reduce':>7} {'epilogue':>8} "
              f"{'last':>5}  description")
    print("\n" + header + "\n" + "-" * len(header))
    rows = []
    for case, (label, *_) in EPILOGUE_CASES.items():
        r, e = results[case], results[case]["epilogue"]
        notes = []
        if r["occupancy"] < 1:
            notes.append(f"OCCUPANCY {r['occupancy']}")
        if r["worst_enqueue_us"] > r["hold_us"]:
            notes.append("HOST-BOUND: launches outlasted the hold")
        if r["counters_left"]:
            notes.append(f"COUNTERS LEFT {r['counters_left']}")
        if e.get("one_last_per_tile") is False:
            notes.append("NOT ONE LAST A TILE")
        print(f"{case:<10} {r['per_call_us']:9.2f} {_f(e.get('stores_us')):>7} {_f(e.get('arrival_us')):>7} "
              f"{_f(e.get('reduce_us')):>7} {_f(e.get('epilogue_us')):>8} {_f(e.get('last_fraction')):>5}  {label}"
              f"{'  ' + '; '.join(notes) if notes else ''}")
        rows.append(dict(case=case, description=label, grid=r["grid"], pdl=r["pdl"], measured_us=r["per_call_us"],
                         measured_min_us=min(r["rounds_us"]), counters_left=r["counters_left"],
                         **{f"epilogue_{key}": value for key, value in e.items()}))
    header = f"\n{'term':<34} {'launch':<8} {'measured':>9} {'formula':>8} {'factor':>7}"
    print(header + "\n" + "-" * (len(header) - 1))
    for launch, parts in (("PDL", record), ("PDL off", record["serial"])):
        print(f"{'tail: t1 - t0':<34} {launch:<8} {parts['tail_us']:9.3f} {parts['tail_formula_us']:8.3f} "
              f"{parts['tail_factor']:7.2f}")
        print(f"{'partials exchange: x - t1':<34} {launch:<8} {parts['exchange_us']:9.3f} "
              f"{parts['exchange_formula_us']:8.3f} {parts['exchange_factor']:7.2f}")
    print(EPILOGUE_LEGEND.format(rows=ROWS, cols=record["tile_cols"], split_k=record["split_k"]))
    return rows


EPILOGUE_LEGEND = """
measured: us per call (events around 50 calls / 50, median of the rounds). stores, arrival, reduce, epilogue:
thread 0's phases after griddepcontrol.wait (clock64 medians over the steady calls, us): its stores issued,
its warp's release fence and arrival count, the last arrival's partials read, added and stored as c, the
whole epilogue to the CTA's exit; last: the share of CTAs whose warp 0 arrived last. formula: the model's
tail_seconds on this run's L2 round trip and SM rate: tail = round trip + {rows} x {cols} x 2 bytes / rate,
exchange = {rows} x {cols} x 4 bytes x {split_k} / rate + round trip. factor = measured / formula: what the
model multiplies its B200 formula by (the PDL row's, as the B200 kernel runs)."""


# ----- running -----


def cuda_device() -> tuple[int, int, int] | str:
    """(major, minor, SMs) of device 0 through the driver API, or why there is none: no torch needed."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver (libcuda.so.1 not found)"
    if lib.cuInit(0) != 0:
        return "cuInit failed: no usable CUDA device"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device"
    device, major, minor, sms = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    lib.cuDeviceGet(ctypes.byref(device), 0)
    lib.cuDeviceGetAttribute(ctypes.byref(major), 75, device)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    lib.cuDeviceGetAttribute(ctypes.byref(minor), 76, device)  # ..._MINOR
    lib.cuDeviceGetAttribute(ctypes.byref(sms), 16, device)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
    return major.value, minor.value, sms.value


def find_nvcc(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").exists():
            return str(Path(home) / "bin" / "nvcc")
    return None


def arch_for(major: int, minor: int) -> str:
    # The 'a' targets (sm_90a, sm_100a) as the kit compiles for; griddepcontrol needs sm_90.
    return f"sm_{major}{minor}a" if major in (9, 10) else f"sm_{major}{minor}"


def build(nvcc: str, arch: str, out: Path) -> None:
    command = [nvcc, "-O3", "-std=c++17", f"-arch={arch}", "-o", str(out), str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"pdl_overlap: nvcc failed ({' '.join(command)}):\n{done.stderr}")


def grid_for(kind: str, sms: int) -> int:
    return {"sms": sms, "half": sms // 2, "double": 2 * sms}[kind]


def case_lines(k_tiles_list, knobs: Knobs, sms: int, workdir: Path) -> list[tuple[int, str, dict]]:
    """(K tiles, case, fields) for the binary, every case of every main-loop length."""
    lines = []
    for k_tiles in k_tiles_list:
        for case, (_, room, grid, pdl, calls) in CASES.items():
            lines.append((k_tiles, case, dict(
                name=f"{case}-k{k_tiles}", k_tiles=k_tiles, smem_bytes=SMEM_TWO_CTAS if room == 2 else SMEM_ONE_CTA,
                grid=grid_for(grid, sms), pdl=int(pdl), calls=calls, rounds=knobs.rounds,
                tile_bytes=knobs.tile_bytes, fma_per_tile=knobs.fma_per_tile, start_ns=knobs.start_ns,
                tail_ns=knobs.tail_ns, out_bytes=knobs.out_bytes, share=knobs.share, max_carveout=1,
                stamps=str(workdir / f"{case}-k{k_tiles}.bin"))))
    k_tiles = k_tiles_list[0]
    lines.append((k_tiles, CARVEOUT_CASE, dict(
        name=f"{CARVEOUT_CASE}-k{k_tiles}", k_tiles=k_tiles, smem_bytes=SMEM_TWO_CTAS, grid=2 * sms, pdl=0, calls=1,
        rounds=knobs.rounds, tile_bytes=knobs.tile_bytes, fma_per_tile=knobs.fma_per_tile, start_ns=knobs.start_ns,
        tail_ns=knobs.tail_ns, out_bytes=knobs.out_bytes, share=knobs.share, max_carveout=0,
        stamps=str(workdir / f"{CARVEOUT_CASE}-k{k_tiles}.bin"))))
    return lines


def binary_arguments(lines) -> list[str]:
    """The binary's buffer sizes for the largest case of `lines`, allocated before the first runs
    (one process, one context): per-call input (a slab per `share` CTAs) and output, split-K's
    partials, calls and grid."""
    calls = [f for _, _, f in lines if f.get("kind", "call") == "call"]
    in_call = max(-(-f["grid"] // f["share"]) * f["k_tiles"] * f["tile_bytes"] for f in calls)
    out_call = max(f["grid"] * max(f["out_bytes"], FP16_BYTES * ROWS * f.get("tile_cols", 0)) for f in calls)
    partials = max(FP32_BYTES * ROWS * f.get("tile_cols", 0) * f["grid"] for f in calls)
    return ["--in-call-bytes", str(in_call), "--out-call-bytes", str(out_call), "--partial-bytes", str(partials),
            "--max-calls", str(CALLS), "--max-grid", str(max(f["grid"] for _, _, f in lines))]


def _f(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report(device: dict, results: dict, k_tiles_list) -> list[dict]:
    """Prints the tables; returns the CSV rows."""
    print(f"device: {device['device']} (cc {device['cc']}), {device['sms']} SMs, "
          f"{device['smem_per_sm'] // 1024} KB shared memory an SM, DRAM copy rate "
          f"{device['dram_bytes_per_s'] / 1e12:.2f} TB/s, L2 flush {device['flush_bytes'] >> 20} MB")
    rows = []
    for k_tiles in k_tiles_list:
        k_results = {case: r for (k, case), r in results.items() if k == k_tiles}
        predicted = predictions({c: r for c, r in k_results.items() if c in CASES}, device)
        a1 = k_results["a1"]["stamps"]
        print(f"\n== {k_tiles} K tiles a CTA: start {_f(a1['start_us'])} us, main loop {_f(a1['main_us'])} us, "
              f"tail {_f(a1['tail_us'])} us (one call alone, medians of its CTAs; clock64)")
        header = (f"{'case':<20} {'measured':>9} {'model':>8} {'ratio':>6} {'beside prev':>11} {'CTAs/SM':>7} "
                  f"{'in flight':>9} {'slot gap':>8} {'wait':>6} {'handoff':>7} {'tail+hand':>9}  model's formula")
        print(header)
        print("-" * len(header))
        for case in [*CASES, CARVEOUT_CASE]:
            if case not in k_results:
                continue
            r = k_results[case]
            s = r["stamps"]
            pred, formula = predicted.get(case, (None, ""))
            ratio = r["per_call_us"] / pred if pred else None
            serial = (serial_tail_bound_us(s["tail_us"], s["handoff_us"])
                      if case in ("d", "f") and s["handoff_us"] is not None and s["tail_us"] is not None else None)
            label = CASES[case][0] if case in CASES else "one call of 2 CTAs/SM, driver's carveout"
            notes = []
            room = 2 if r["smem_bytes"] == SMEM_TWO_CTAS else 1
            if r["occupancy"] != room:
                notes.append(f"OCCUPANCY {r['occupancy']} (expected {room})")
            if r["worst_enqueue_us"] > r["hold_us"]:
                notes.append("HOST-BOUND: launches outlasted the hold")
            print(f"{case + ' ' + ('PDL' if r['pdl'] else ''):<20} {r['per_call_us']:9.2f} {_f(pred):>8} "
                  f"{_f(ratio):>6} {_f(s['beside_previous_call']):>11} {s['most_ctas_on_one_sm']:>7} "
                  f"{s['most_calls_in_flight']:>9} {_f(s['slot_gap_us']):>8} {_f(s['wait_us']):>6} "
                  f"{_f(s['handoff_us']):>7} {_f(serial):>9}  {formula}{'  ' + '; '.join(notes) if notes else ''}")
            rows.append(dict(
                k_tiles=k_tiles, case=case, description=label, grid=r["grid"], ctas_per_sm_room=room,
                occupancy=r["occupancy"], pdl=r["pdl"], calls=r["calls"], measured_us=r["per_call_us"],
                measured_min_us=min(r["rounds_us"]), model_us=pred, ratio=ratio, model_formula=formula,
                serial_tail_bound_us=serial, in_bytes_per_call=r["in_bytes"], out_bytes_per_call=r["out_bytes"],
                worst_enqueue_us=r["worst_enqueue_us"], hold_us=r["hold_us"],
                **{f"stamps_{key}": value for key, value in s.items()}))
        c, d = k_results.get("c"), k_results.get("d")
        if c and d and "c" in predicted and "d" in predicted:
            print(f"d / c: measured {d['per_call_us'] / c['per_call_us']:.2f}, model "
                  f"{predicted['d'][0] / predicted['c'][0]:.2f} (the second CTA slot's gain with PDL)")
            print(f"verdict (d): {verdict(d['per_call_us'], predicted['d'][0], d['stamps']['beside_previous_call'])}")
            ds = d["stamps"]
            print(f"  d: a call's CTAs on {_f(ds['sms_per_call'], 0)} SMs (median), at most "
                  f"{ds['most_ctas_of_a_call_on_one_sm']} of one call on one SM; {_f(ds['waited_fraction'])} of its "
                  f"CTAs reached griddepcontrol.wait before the previous call's last exit")
        if "f" in k_results and "f" in predicted:
            f = k_results["f"]
            reading = verdict(f["per_call_us"], predicted["f"][0], f["stamps"]["next_call_early"],
                              "before this call's last exit")
            print(f"verdict (f): {reading}")
    step = max((r["stamps"]["timer_step_ns"] or 0) for r in results.values())
    print(LEGEND.format(step=step))
    return rows


LEGEND = """
measured: us per call (events around the calls / calls, median of the rounds). model: harness/b200/model.py's
formula on this run's measured parts; ratio = measured / model. beside prev: the fraction of a call's CTAs
that entered while the previous call's CTA on the same SM still ran. CTAs/SM: the most CTAs on one SM at
once; in flight: the most calls with a CTA running at once. slot gap: an SM's last exit to its next entry
(trimmed mean). wait: griddepcontrol.wait's median time; handoff: the previous call's last exit to a
waiting CTA's return from the wait; tail+hand: tail + handoff, the bound of tails run one after another,
which the model leaves out. Phase lengths come from clock64; overlaps, gaps and spans from %globaltimer,
whose smallest step seen was {step} ns."""


def overlap_record(mode: str, device: dict, results: dict, k_tiles: int, knobs: Knobs, commit: str,
                   date: str) -> dict:
    """What harness/b200/model.py reads of this run (results/pdl-overlap-bandwidth.json): two
    calls in flight with room for two CTAs an SM (case d), measured over the model's formula on
    this run's parts (`overlap_ratio`), and the hand-off of each epilogue behind the previous
    grid (case d's, else f's; None where no CTA waited)."""
    k_results = {case: r for (k, case), r in results.items() if k == k_tiles and case in CASES}
    predicted = predictions(k_results, device)
    d = k_results["d"]
    handoffs = [k_results[case]["stamps"]["handoff_us"] for case in ("d", "f") if case in k_results]
    return {
        "mode": mode, "device": device["device"], "date": date, "commit": commit, "k_tiles": k_tiles,
        "knobs": dataclasses.asdict(knobs),
        "overlap_ratio": d["per_call_us"] / predicted["d"][0], "measured_us": d["per_call_us"],
        "formula_us": predicted["d"][0], "formula": predicted["d"][1],
        "one_cta_an_sm_us": k_results["c"]["per_call_us"],
        "handoff_us": next((h for h in handoffs if h is not None), None),
        "tail_us": d["stamps"]["tail_us"], "beside_previous_call": d["stamps"]["beside_previous_call"],
    }


def finish_epilogue(args, device_info: dict, results: dict, knobs: Knobs, k_tiles: int, workdir: Path,
                    began: float) -> int:
    """The epilogue mode's report, CSV and record; 1 where the run cannot back the model's terms."""
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    record = epilogue_record(device_info, results, knobs, k_tiles, args.tile_cols, args.split_k,
                             args.commit or git_commit(), date)
    rows = epilogue_report(device_info, results, record)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=sorted({key for row in rows for key in row}) + ["device"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "device": device_info["device"]})
        print(f"\nwrote {args.out}")
    problems = epilogue_problems(results, record)
    for problem in problems:
        print(f"EPILOGUE PROBLEM: {problem}", file=sys.stderr)
    if args.record and not problems:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=2) + "\n")
        print(f"epilogue: tail factor {record['tail_factor']:.2f}, partials exchange factor "
              f"{record['exchange_factor']:.2f} (measured / formula, PDL); wrote {args.record}")
    elif args.record:
        print(f"pdl_overlap: {args.record} not written: the run cannot back the model's epilogue terms",
              file=sys.stderr)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"took {time.monotonic() - began:.0f} s")
    return 1 if problems else 0


def print_timelines(results: dict, k_tiles: int, stamps: dict) -> None:
    for case in ("c", "d"):
        calls = stamps.get((k_tiles, case))
        if calls and len(calls) > 4:
            print(f"\ntimeline, case {case}, {k_tiles} K tiles ({CASES[case][0]}):")
            print("\n".join(timeline(calls, len(calls) // 2)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="CSV of every case (one row each)")
    parser.add_argument("--mode", choices=sorted(MODES), default="latency",
                        help="the defaults of the knobs below: 2 KB K tiles (latency) or the B200's 28 KB (bandwidth)")
    parser.add_argument("--k-tiles", help="main-loop lengths: K tiles a CTA, comma-separated (default: the mode's)")
    for field in dataclasses.fields(Knobs):
        parser.add_argument(f"--{field.name.replace('_', '-')}", type=float if field.type == "float" else int,
                            help="default: the mode's")
    parser.add_argument("--record", type=Path,
                        help="write what the B200 model reads of the run (JSON, at the first main-loop length)")
    parser.add_argument("--tile-cols", type=int, default=EPILOGUE_TILE_COLS,
                        help="epilogue mode: the c tile's columns (its rows: 128)")
    parser.add_argument("--split-k", type=int, default=EPILOGUE_SPLIT_K, help="epilogue mode: CTAs a c tile")
    parser.add_argument("--commit", help="the commit recorded (default: HARNESS_COMMIT, else git's HEAD)")
    parser.add_argument("--nvcc", help="nvcc to build with (default: on PATH, CUDA_HOME, /usr/local/cuda)")
    parser.add_argument("--keep", type=Path, help="keep the binary and the stamp files in this folder")
    args = parser.parse_args(argv)
    mode_k_tiles, mode_knobs = MODES[args.mode]
    k_tiles_list = [int(k) for k in args.k_tiles.split(",")] if args.k_tiles else list(mode_k_tiles)
    knobs = dataclasses.replace(mode_knobs, **{field.name: getattr(args, field.name) for field in
                                               dataclasses.fields(Knobs) if getattr(args, field.name) is not None})

    device = cuda_device()
    if isinstance(device, str):
        print(f"pdl_overlap: {device}; this experiment needs an NVIDIA GPU of compute capability 9.0 or newer.",
              file=sys.stderr)
        return 2
    if device[0] < 9:
        print(f"pdl_overlap: compute capability {device[0]}.{device[1]} has no programmatic dependent launch "
              "(9.0 or newer needed).", file=sys.stderr)
        return 2
    nvcc = find_nvcc(args.nvcc)
    if nvcc is None:
        print("pdl_overlap: nvcc not found (PATH, CUDA_HOME, /usr/local/cuda); pass --nvcc.", file=sys.stderr)
        return 2

    began = time.monotonic()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="pdl_overlap_"))
    if any(ch.isspace() for ch in str(workdir.resolve())):
        print(f"pdl_overlap: {workdir} has white space, which the binary's case lines cannot carry.", file=sys.stderr)
        return 2
    workdir.mkdir(parents=True, exist_ok=True)
    binary = workdir / "pdl_overlap"
    major, minor, sms = device
    build(nvcc, arch_for(major, minor), binary)

    epilogue = args.mode == "epilogue"
    if epilogue:
        lines = epilogue_case_lines(k_tiles_list[0], knobs, sms, args.tile_cols, args.split_k, workdir)
    else:
        lines = case_lines(k_tiles_list, knobs, sms, workdir)
    stdin = "".join(" ".join(f"{key}={value}" for key, value in f.items()) + "\n" for _, _, f in lines)
    done = subprocess.run([str(binary), *binary_arguments(lines)], input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout, file=sys.stderr)
        print(f"pdl_overlap: the run failed (exit {done.returncode}):\n{done.stderr}", file=sys.stderr)
        return done.returncode or 1
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    device_info, by_name = records[0], {r["case"]: r for r in records[1:]}

    results, stamps = {}, {}
    for k_tiles, case, fields in lines:
        record = by_name[fields["name"]]
        if fields.get("kind") == "chase":
            results[(k_tiles, case)] = dict(ns_per_hop=record["ns_per_hop"])
            continue
        calls = read_stamps(Path(fields["stamps"]), fields["calls"], record["grid"])
        stamps[(k_tiles, case)] = calls
        results[(k_tiles, case)] = dict(
            per_call_us=statistics.median(record["per_call_us"]), rounds_us=record["per_call_us"],
            stamps=analyze(calls), in_bytes=record["in_bytes_per_call"], out_bytes=record["out_bytes_per_call"],
            occupancy=record["occupancy"], smem_bytes=record["smem_bytes"], grid=record["grid"], pdl=fields["pdl"],
            calls=fields["calls"], worst_enqueue_us=record["worst_enqueue_us"], hold_us=record["hold_us"],
            counters_left=record["counters_left"],
            epilogue=(epilogue_stamps(calls, fields["split_k"], fields["tile_cols"] > 0) if case in EPILOGUE_CASES
                      else {}))
    print(f"mode: {args.mode}, {knobs}")
    if epilogue:
        return finish_epilogue(args, device_info, {case: r for (_, case), r in results.items()}, knobs,
                               k_tiles_list[0], workdir, began)
    rows = report(device_info, results, k_tiles_list)
    print_timelines(results, k_tiles_list[min(1, len(k_tiles_list) - 1)], stamps)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]) + ["device"])
            writer.writeheader()
            for row in rows:
                writer.writerow({**row, "device": device_info["device"]})
        print(f"\nwrote {args.out}")
    if args.record:
        date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
        record = overlap_record(args.mode, device_info, results, k_tiles_list[0], knobs,
                                args.commit or git_commit(), date)
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(json.dumps(record, indent=2) + "\n")
        print(f"overlap: measured / formula {record['overlap_ratio']:.2f}, hand-off "
              f"{'-' if record['handoff_us'] is None else format(record['handoff_us'], '.2f')} us; wrote {args.record}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"took {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
