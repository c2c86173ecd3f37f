"""The harness's own test suite: every deliberately broken submission gets its verdict.

Each run goes through the command line in a subprocess, as a user would run it, and is judged
by its exit status, its per-case status and its message. Every verdict runs on the CPU (CI) and
on CUDA where there is a GPU; the CPU variants are left to CI on a GPU machine, whose time is
scarcer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from harness.judge.cases import FIGURE_TOLERANCE
from referee_tally import referee_tally

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
BROKEN = sorted(FIXTURES.glob("broken_*.py"))
CONTROL = FIXTURES / "torch_submission.py"
TEMPLATE = FIXTURES / "template_torch_submission.py"
HAS_CUDA = torch.cuda.is_available()

EXIT_PASS, EXIT_LINT_FAIL, EXIT_CASE_FAIL = 0, 1, 112
# Small shapes keep a CPU run quick; L = 2 exercises the batch dimension.
TEST_CASE = "m: 128; n: 256; k: 512; l: 2; seed: 1111"
SECOND_TEST_CASE = "m: 256; n: 128; k: 256; l: 1; seed: 7"
BENCHMARK_CASE = "m: 128; n: 256; k: 256; l: 1; seed: 1111"
# K = 7168 puts a few elements of this case (6 on the CPU, 8 on an H100) where the fp16 and the
# fp32 checks disagree.
BORDERLINE_CASE = "m: 128; n: 256; k: 7168; l: 1; seed: 1111"
# K >= 4M: b's bytes can hold C (cheat_answers_in_an_input).
WIDE_K_BENCHMARK_CASE = "m: 128; n: 256; k: 512; l: 1; seed: 1111"
# A second timed case of another shape: what a worker kept while its first case passed meets it.
SECOND_BENCHMARK_CASE = "m: 256; n: 128; k: 256; l: 1; seed: 7"
GPU_ONLY = ("cuda",)
CPU_ONLY = ("cpu",)
# A timed-mode cap that keeps a CPU run of the newer fixtures in seconds; the cheat that works
# only in the checked round reads it from the judge's command line.
QUICK_REPEATS = 5

# The threat classes of the referee (README "What the judge withstands"); other fixtures are
# plain mistakes.
THREATS = {
    "cheat_patches_the_judge": "1 rewriting the judge",
    "cheat_forges_a_reply": "1 rewriting the judge",
    "cheat_fakes_the_clock": "2 rewriting the clock",
    "cheat_finishes_in_a_thread": "3 work escaping the timed queue",
    "cheat_hides_a_second_queue": "3 work escaping the timed queue",
    "cheat_works_before_go_beside_a_joined_queue": "3 work escaping the timed queue",
    "cheat_works_before_go": "3 work escaping the timed queue",
    "broken_uses_side_stream": "3 work escaping the timed queue",
    "cheat_skips_unchecked_calls": "4 work only where checked",
    "broken_caches_by_address": "5 replaying results",
    "broken_caches_outputs": "5 replaying results",
    "cheat_replays_a_cuda_graph": "5 replaying results",
    "cheat_answers_in_an_input": "6 not the answer",
    "broken_mutates_input": "6 not the answer",
    "broken_wrong_dtype": "6 not the answer",
    "cheat_overwrites_the_judges_reference": "1 rewriting the judge",
    "cheat_rewrites_the_judges_files": "1 rewriting the judge",
    "cheat_plants_a_module": "1 rewriting the judge",
    "cheat_forges_history": "7 writing the judge's output",
    "cheat_sends_a_descriptor": "8 hanging or crashing the judge",
    "cheat_spins_past_its_reply": "8 hanging or crashing the judge",
    "cheat_truncates_its_inputs": "8 hanging or crashing the judge",
    "cheat_steers_the_calibration": "2 rewriting the clock",
    "cheat_wakes_during_calibration": "2 rewriting the clock",
    "cheat_unfolds_a_message": "8 hanging or crashing the judge",
    "cheat_stalls_a_message": "8 hanging or crashing the judge",
    "cheat_collides_hashes_in_a_message": "8 hanging or crashing the judge",
    "cheat_reports_a_time_beyond_a_float": "8 hanging or crashing the judge",
    "cheat_mixes_handover_kinds": "2 rewriting the clock",
    "honest_runs_a_subprocess": "no false positive",
    "honest_runs_a_program_through_etc_alternatives": "no false positive",
    "honest_prints_a_lot": "no false positive",
    "cheat_detects_probes_by_a_fingerprint": "4 work only where checked",
    "cheat_returns_an_empty_view": "1 rewriting the judge",
    "cheat_rebinds_the_timers_globals": "2 rewriting the clock",
    "cheat_rewrites_the_captured_clock": "2 rewriting the clock",
    "cheat_restores_the_clock_before_the_check": "2 rewriting the clock",
    "cheat_reports_nan_times": "2 rewriting the clock",
    "cheat_computes_when_serialised": "3 work escaping the timed queue",
    "cheat_works_elsewhere_while_unrecorded": "3 work escaping the timed queue",
    "cheat_switches_off_cupti": "3 work escaping the timed queue",
    "cheat_replays_when_timed": "4 work only where checked",
    "cheat_works_only_in_the_checked_round": "4 work only where checked",
    "cheat_works_only_where_the_refill_repeats": "4 work only where checked",
    "cheat_caches_on_sampled_bytes": "5 replaying results",
    "cheat_memoizes_on_a": "5 replaying results",
    "cheat_memoizes_on_b": "5 replaying results",
    "cheat_memoizes_on_the_scales": "5 replaying results",
    "cheat_forges_the_judges_output": "7 writing the judge's output",
    "cheat_forges_a_verdict_in_its_progress": "7 writing the judge's output",
    "cheat_forges_lines_in_its_message": "7 writing the judge's output",
    "cheat_leaves_a_file_in_dev_shm": "9 reaching a later candidate",
    "cheat_removes_the_judges_driver_files": "9 reaching a later candidate",
    "honest_waits_for_a_thread_pool": "no false positive",
    "honest_uses_a_process_pool": "no false positive",
    "honest_uses_spawned_process_pools": "no false positive",
    "honest_compiles_with_torch_compile": "no false positive",
    "honest_replays_a_cuda_graph": "no false positive",
    "honest_joins_a_side_stream": "no false positive",
    "cheat_reaches_the_waiting_workers": "9 reaching a later candidate",
    "cheat_spins_the_gpu_through_the_calibration": "2 rewriting the clock",
    "cheat_reads_the_judges_history": "9 reaching a later candidate",
    "cheat_is_named_after_a_module": "1 rewriting the judge",
}
HANG_TIMEOUT_S = 5
# The judge's verdicts on what the worker claims, as its report words them.
JUDGES_CLOCK = r"the worker timed the calls at [\d.]+ us each, but the judge's own clock around the same batches saw"
BELOW_ITS_OWN = (r"the judge's own clock, less the fixed cost of a round, saw [\d.]+ us per call, below the [\d.]+ us "
                 r"the worker's own events timed")
RECHECK = r"recheck on fresh and near-duplicate inputs: input \d+: mismatch found!"
PROBE = r"probe on edited inputs among the timed rounds: input \d+: mismatch found!"
# A replay is caught at whichever comes first: a probe among the timed rounds, or the recheck.
REPLAY_CAUGHT = rf"{PROBE}|{RECHECK}"
NOT_RECORDED = r"the round's GPU activity was not recorded \(CUPTI unavailable or switched off in the worker\)"
BEFORE_THE_WINDOW = r"the judge's L2 flush took \d+ us longer while the worker waited for its batch than while nothing ran"
DISTURBED_CALIBRATION = (r"the judge's L2 flush took \d+ us longer while the calibration partner ran than in the timed "
                         r"rounds: GPU work the worker left queued disturbed the calibration of the fixed cost")
# The sandbox refused the write (read-only file system, or Landlock), or the watch of the judge's
# files saw it.
SANDBOX_OR_WATCH = (r"Read-only file system|Permission denied|"
                    r"the judge's own files changed while the submission ran \(a worker wrote them\)")
# A benchmark line whose judged mean and worker's events both appear (the figures verdict passed).
AGREED = r"mean [\d.]+ us .*the worker's events [\d.]+ us"
# The recorded round's GPU activity outside the judge's window.
OUTSIDE_THE_WINDOW = (r"GPU activities started before the judge's timed window opened|"
                      r"GPU activities ran past the end of the judge's timed window")
# How long a process the submission left behind gets, after the judge exits, to write into the
# judge's output before it is read.
FORGER_GRACE_S = 3.0
SUBPROCESS_LIMIT_S = 600


@dataclass(frozen=True)
class Expected:
    fixture: str
    mode: str  # harness command
    exit_status: int
    status: str  # the case's status word in the report
    message: str | None = None  # regex the report must contain
    official: bool = False
    cases: tuple[str, ...] = (TEST_CASE,)
    timeout_s: float | None = None
    devices: tuple[str, ...] = ("cpu", "cuda")  # where the threat exists
    max_repeats: int | None = None  # --max-repeats for timed modes

    @property
    def id(self) -> str:
        return f"{self.fixture}-{self.mode}" + ("-official" if self.official else "")


VERDICTS = [
    Expected("torch_submission", "test", EXIT_PASS, "pass"),
    # Written from the competition's template: imports task, utils and reference; no headers.
    Expected("template_torch_submission", "test", EXIT_PASS, "pass"),
    Expected("template_torch_submission", "test", EXIT_PASS, "pass", official=True),
    Expected("template_torch_submission", "benchmark", EXIT_PASS, "pass", cases=(BENCHMARK_CASE,)),
    # The competition checks in fp16, which rounds these elements' tolerance up past their error;
    # the default mode also checks in fp32, so it is never the more lenient of the two.
    Expected("borderline_fp16_check", "test", EXIT_CASE_FAIL, "fail",
             r"mismatch found! custom implementation doesn't match reference: Number of mismatched elements: \d+ ERROR AT",
             cases=(BORDERLINE_CASE,)),
    Expected("borderline_fp16_check", "test", EXIT_PASS, "pass", official=True, cases=(BORDERLINE_CASE,)),
    Expected("broken_wrong_values", "test", EXIT_CASE_FAIL, "fail",
             r"mismatch found! custom implementation doesn't match reference: Number of mismatched elements: \d+ ERROR AT"),
    Expected("broken_wrong_dtype", "test", EXIT_CASE_FAIL, "fail",
             r"custom_kernel returned a torch\.float32 tensor of shape \(128, 256, 2\) on \S+, "
             r"expected a torch\.float16 tensor of shape \(128, 256, 2\)"),
    # The competition's own checks let it through; --official reproduces them, hole included.
    Expected("broken_wrong_dtype", "test", EXIT_PASS, "pass", official=True),
    Expected("broken_mutates_input", "test", EXIT_CASE_FAIL, "fail", r"custom_kernel modified its input\(s\): b"),
    # n = 256: columns 240..255 are never written and keep the judge's refill, a value no answer has.
    Expected("broken_unwritten", "test", EXIT_CASE_FAIL, "fail", r"ERROR AT \(0, 240, 0\): (got )?-32768"),
    Expected("broken_caches_outputs", "benchmark", EXIT_CASE_FAIL, "fail",
             r"call \d+ returned the same values as call \d+ although the inputs differ \(cached result\)",
             cases=(BENCHMARK_CASE,)),
    Expected("broken_caches_by_address", "benchmark", EXIT_CASE_FAIL, "fail", REPLAY_CAUGHT, cases=(BENCHMARK_CASE,)),
    Expected("broken_caches_by_address", "benchmark", EXIT_PASS, "pass", official=True, cases=(BENCHMARK_CASE,)),
    # Two cases: the first one's timeout must not stop the second from being run.
    # Threat class 2: a faked clock fakes only the worker's figure; the judge times the batch with
    # its own events. A test times nothing, and the file computes the right answer.
    Expected("cheat_fakes_the_clock", "test", EXIT_PASS, "pass"),
    Expected("cheat_fakes_the_clock", "benchmark", EXIT_CASE_FAIL, "fail",
             r"the worker timed the calls at 0\.0\d\d us each, but the judge's own clock", cases=(BENCHMARK_CASE,),
             devices=GPU_ONLY),
    Expected("cheat_fakes_the_clock", "benchmark", EXIT_PASS, "pass",
             r"warning: the competition would have missed this: the worker timed the calls at", official=True,
             cases=(BENCHMARK_CASE,), devices=GPU_ONLY),
    # Threat class 3: a thread that finishes the work after the call returns: the judge's copy of
    # c, taken inside its window, holds what c held before.
    Expected("cheat_finishes_in_a_thread", "test", EXIT_CASE_FAIL, "fail", r"mismatch found!"),
    # Threat class 4: the work done only where it is checked. No call tells it is checked: c holds
    # a new value no answer has before every round, and every round is checked.
    Expected("cheat_skips_unchecked_calls", "benchmark", EXIT_CASE_FAIL, "fail", r"mismatch found!",
             cases=(BENCHMARK_CASE,)),
    Expected("cheat_skips_unchecked_calls", "benchmark", EXIT_CASE_FAIL, "fail", r"mismatch found!",
             official=True, cases=(BENCHMARK_CASE,)),
    # Threat class 1: the judge runs in a process that never imports the submission.
    Expected("cheat_patches_the_judge", "test", EXIT_CASE_FAIL, "fail", r"mismatch found!"),
    Expected("cheat_patches_the_judge", "test", EXIT_CASE_FAIL, "fail", r"mismatch found!", official=True),
    Expected("cheat_patches_the_judge", "benchmark", EXIT_CASE_FAIL, "fail", r"mismatch found!", cases=(BENCHMARK_CASE,)),
    # ... and reads the worker's messages with an unpickler that admits values and tensors only.
    Expected("cheat_forges_a_reply", "test", EXIT_CASE_FAIL, "error",
             r"the judge refused the worker's message: the worker's message names posix\.system"),
    Expected("cheat_forges_a_reply", "test", EXIT_CASE_FAIL, "error",
             r"the judge refused the worker's message: the worker's message names posix\.system", official=True),
    # Threat class 3 on the GPU: CUPTI sees every queue the process launches on. A test times
    # nothing and the second queue's answer is right and inside the judge's copy: it passes
    # (H200, 2026-11-27), gaining nothing.
    Expected("cheat_hides_a_second_queue", "test", EXIT_PASS, "pass", devices=GPU_ONLY),
    # In the timed rounds the judge's flush may see it first, or its clock against the worker's
    # events (which bracket nothing), or a probe: the queue reads the inputs before the judge's
    # queue writes the probe's.
    Expected("cheat_hides_a_second_queue", "benchmark", EXIT_CASE_FAIL, "fail",
             rf"{OUTSIDE_THE_WINDOW}|{BEFORE_THE_WINDOW}|{JUDGES_CLOCK}|{REPLAY_CAUGHT}", cases=(BENCHMARK_CASE,),
             devices=GPU_ONLY),
    Expected("cheat_hides_a_second_queue", "test", EXIT_PASS, "pass", official=True, devices=GPU_ONLY),
    # Removing the judge's CUDA driver files under /dev/shm, which the next case's worker opens by
    # name: every case of the run still passes (its next candidate in the service: test_service_judge.py).
    Expected("cheat_removes_the_judges_driver_files", "test", EXIT_PASS, "pass", cases=(TEST_CASE, BENCHMARK_CASE)),
    Expected("broken_uses_side_stream", "benchmark", EXIT_CASE_FAIL, "fail",
             rf"{OUTSIDE_THE_WINDOW}|{BEFORE_THE_WINDOW}|{JUDGES_CLOCK}|{REPLAY_CAUGHT}", cases=(BENCHMARK_CASE,),
             devices=GPU_ONLY),
    # Work on a queue that waits for nothing, run through the flush, one queue shown when recorded:
    # the flush verdict's one-queue limit, and nothing else, catches it.
    Expected("cheat_works_before_go", "benchmark", EXIT_CASE_FAIL, "fail", BEFORE_THE_WINDOW, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS, devices=GPU_ONLY),
    # torch's documented patterns on side streams: waited for, joined back, inside the window.
    *(Expected(fixture, mode, EXIT_PASS, "pass", cases=(BENCHMARK_CASE,), devices=GPU_ONLY,
               max_repeats=QUICK_REPEATS if mode == "benchmark" else None)
      for fixture in ("honest_replays_a_cuda_graph", "honest_joins_a_side_stream") for mode in ("test", "benchmark")),
    # Threat class 5: a CUDA graph replaying a stale answer.
    Expected("cheat_replays_a_cuda_graph", "benchmark", EXIT_CASE_FAIL, "fail", REPLAY_CAUGHT, cases=(BENCHMARK_CASE,),
             devices=GPU_ONLY),
    Expected("cheat_replays_a_cuda_graph", "benchmark", EXIT_PASS, "pass", official=True, cases=(BENCHMARK_CASE,),
             devices=GPU_ONLY),
    # Threat class 6: the answer written over an input and returned as a view of it.
    Expected("cheat_answers_in_an_input", "test", EXIT_CASE_FAIL, "fail", r"custom_kernel modified its input\(s\): b"),
    Expected("cheat_answers_in_an_input", "test", EXIT_PASS, "pass", official=True),
    Expected("cheat_answers_in_an_input", "benchmark", EXIT_CASE_FAIL, "fail",
             r"input 0: custom_kernel modified its input\(s\): b", cases=(WIDE_K_BENCHMARK_CASE,)),
    Expected("broken_hangs", "test", EXIT_CASE_FAIL, "timeout",
             rf"no result within the {HANG_TIMEOUT_S} s time limit; worker killed",
             cases=(TEST_CASE, SECOND_TEST_CASE), timeout_s=HANG_TIMEOUT_S),
    Expected("broken_raises", "test", EXIT_CASE_FAIL, "error", r"RuntimeError: illegal tile configuration 96x80 for this shape"),
    Expected("broken_raises_op_error", "test", EXIT_CASE_FAIL, "error", r"OpError: expects the M mode to be 128-aligned"),
    Expected("broken_raises_op_error", "test", EXIT_CASE_FAIL, "error", r"OpError: expects the M mode to be 128-aligned",
             official=True, cases=(TEST_CASE, SECOND_TEST_CASE)),
    Expected("broken_aborts", "test", EXIT_CASE_FAIL, "crash", r"worker process died without a result: killed by signal SIGABRT"),
    Expected("broken_segfaults", "test", EXIT_CASE_FAIL, "crash", r"worker process died without a result: killed by signal SIGSEGV"),
    # What the worker reports is a claim: the judge times and checks every round itself.
    # Rewriting the worker's timing code: its own module globals, or the reference clock it keeps.
    Expected("cheat_rebinds_the_timers_globals", "benchmark", EXIT_CASE_FAIL, "fail", JUDGES_CLOCK, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    Expected("cheat_rewrites_the_captured_clock", "benchmark", EXIT_CASE_FAIL, "fail", JUDGES_CLOCK, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    Expected("cheat_restores_the_clock_before_the_check", "benchmark", EXIT_CASE_FAIL, "fail", JUDGES_CLOCK,
             cases=(BENCHMARK_CASE,), max_repeats=QUICK_REPEATS, devices=CPU_ONLY),
    # On a GPU the worker reads its events after it has described the reply, which puts the true
    # clock back: the cheat gains nothing, and the case passes at the time the judge saw.
    Expected("cheat_restores_the_clock_before_the_check", "benchmark", EXIT_PASS, "pass",
             r"mean [\d.]+ us .*the worker's events [\d.]+ us", cases=(BENCHMARK_CASE,), max_repeats=QUICK_REPEATS,
             devices=GPU_ONLY),
    # Output computed when the reply is described, after the round's end.
    Expected("cheat_computes_when_serialised", "benchmark", EXIT_CASE_FAIL, "fail", JUDGES_CLOCK, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    # Phases told apart: by the callers' frames, by counting refilled rounds against --max-repeats,
    # by whether CUPTI records.
    Expected("cheat_replays_when_timed", "benchmark", EXIT_CASE_FAIL, "fail", REPLAY_CAUGHT, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    # It counts the timed rounds against --max-repeats read from its parent's command line: in its
    # own pid namespace its parent is the sandbox's, so it never knows the count and computes
    # every round, gaining nothing (where a system has no pid namespace, every round's check fails it).
    Expected("cheat_works_only_in_the_checked_round", "benchmark", EXIT_PASS, "pass", cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    Expected("cheat_works_only_where_the_refill_repeats", "benchmark", EXIT_CASE_FAIL, "fail", r"mismatch found!",
             cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    Expected("cheat_works_elsewhere_while_unrecorded", "benchmark", EXIT_CASE_FAIL, "fail", cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS, devices=GPU_ONLY),
    # CUPTI switched off from inside the worker: unrecorded activity is a failure by default.
    Expected("cheat_switches_off_cupti", "test", EXIT_CASE_FAIL, "fail", NOT_RECORDED, devices=GPU_ONLY),
    Expected("cheat_switches_off_cupti", "benchmark", EXIT_CASE_FAIL, "fail", rf"{NOT_RECORDED}|{BEFORE_THE_WINDOW}|{REPLAY_CAUGHT}",
             cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS, devices=GPU_ONLY),
    # A cache keyed on sampled bytes: a probe's edits, or the recheck's near-duplicates of the
    # timed inputs, miss the sample.
    Expected("cheat_caches_on_sampled_bytes", "benchmark", EXIT_CASE_FAIL, "fail",
             rf"{PROBE}|recheck on fresh and near-duplicate inputs: input \d*[13579]: mismatch found!",
             cases=(BENCHMARK_CASE,), max_repeats=QUICK_REPEATS),
    # Answers kept and replayed while one part of the input holds the same bytes (a alone, b alone,
    # the permuted scales): probes, near-duplicates and fresh draws change parts it does not read;
    # on the CPU its replayed rounds may also set its own clock below the judge's.
    *(Expected(fixture, "benchmark", EXIT_CASE_FAIL, "fail", rf"{REPLAY_CAUGHT}|{JUDGES_CLOCK}", cases=(BENCHMARK_CASE,),
               max_repeats=QUICK_REPEATS)
      for fixture in ("cheat_memoizes_on_a", "cheat_memoizes_on_b", "cheat_memoizes_on_the_scales")),
    # The judge's reference, found next to a shared tensor in the mapped segment and zeroed.
    Expected("cheat_overwrites_the_judges_reference", "test", EXIT_CASE_FAIL, "fail", r"mismatch found!", devices=GPU_ONLY),
    Expected("cheat_reports_nan_times", "benchmark", EXIT_CASE_FAIL, "fail", r"the worker reported (the batch's|its host) time as nan ns",
             cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    # A reply the judge cannot rebuild fails its case; it does not end the judge.
    Expected("cheat_returns_an_empty_view", "test", EXIT_CASE_FAIL, "fail", r"the worker described a view the judge cannot make"),
    # Replays unless a fingerprint of the batch's first input changed: a probe's edits miss it.
    Expected("cheat_detects_probes_by_a_fingerprint", "benchmark", EXIT_CASE_FAIL, "fail",
             r"probe on edited inputs among the timed rounds: input \d+: mismatch found!", cases=(BENCHMARK_CASE,),
             max_repeats=20),
    # A worker cannot write a file the judge's code comes from: its file system is read-only but
    # for its own folder (the sandbox), and where a system has no such layer the judge's watch
    # of its files finds the change time moved and stops the run.
    Expected("cheat_rewrites_the_judges_files", "test", EXIT_CASE_FAIL, "error|fail", SANDBOX_OR_WATCH, cases=(BENCHMARK_CASE,)),
    Expected("cheat_rewrites_the_judges_files", "benchmark", EXIT_CASE_FAIL, "error|fail", SANDBOX_OR_WATCH,
             cases=(BENCHMARK_CASE,), max_repeats=QUICK_REPEATS),
    # Modules planted where the judge imports from, a row planted in results/: nothing lands.
    Expected("cheat_plants_a_module", "test", EXIT_PASS, "pass"),
    Expected("cheat_forges_history", "test", EXIT_PASS, "pass"),
    # A reply naming a descriptor is refused unread, at once (no connection back to the worker).
    Expected("cheat_sends_a_descriptor", "test", EXIT_CASE_FAIL, "error",
             r"the judge refused the worker's message: the worker's message names multiprocessing\.resource_sharer\.DupFd"),
    # Messages that would hold the judge forever: one that unfolds without end, one left half sent.
    Expected("cheat_unfolds_a_message", "test", EXIT_CASE_FAIL, "error",
             r"the judge refused the worker's message: the worker's message holds more than \d+ values"),
    Expected("cheat_stalls_a_message", "test", EXIT_CASE_FAIL, "timeout",
             rf"no result within the {HANG_TIMEOUT_S} s time limit; worker killed in the middle of a message",
             timeout_s=HANG_TIMEOUT_S),
    # A dict whose int keys share one hash, which the C unpickler fills in quadratic time holding
    # the interpreter's lock: refused at once, whatever the case's time limit.
    # Held, the judge would read for hours; refusing it, the judge reads the message in pure Python,
    # seconds on a loaded GPU host: a limit above that and far below hours.
    Expected("cheat_collides_hashes_in_a_message", "test", EXIT_CASE_FAIL, "error",
             r"the judge refused the worker's message: the worker's message keys a dict by int", timeout_s=4 * HANG_TIMEOUT_S),
    # A message that follows every line boundary with a forged pass: its lines are the judge's
    # (the POPCORN_FD lines read back: tests/test_popcorn.py).
    Expected("cheat_forges_lines_in_its_message", "test", EXIT_CASE_FAIL, "error", r"RuntimeError: wrong"),
    # What a worker sees where a seed could be handed: without POPCORN_SEED its generators start
    # from the eval's 42 (under one, from a seed unrelated to it: tests/test_popcorn.py).
    Expected("cheat_reads_the_secret_seed", "test", EXIT_CASE_FAIL, "error",
             r"seen by the worker: initial_seed=42 read=\d+ numbers="),
    # The store and its export (results/), where every judged file's source lies, are no part of
    # the worker's root, though the kit's folder around them is.
    Expected("cheat_reads_the_judges_history", "test", EXIT_CASE_FAIL, "error",
             r"the judge's results folder as the worker sees it: \((empty|absent)"),
    # A claim no float holds: refused as it arrives, before a verdict divides it.
    Expected("cheat_reports_a_time_beyond_a_float", "benchmark", EXIT_CASE_FAIL, "fail",
             r"the worker reported the batch's time beyond a float's range", cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    # Shared memory truncated under the judge: on the CPU the inputs are sealed; on a GPU no file
    # under /dev (the CUDA driver's in /dev/shm, the judge's among them) can be cut short by a
    # worker, and the /dev/shm it sees is its judge's alone. The judge lives on and judges.
    Expected("cheat_truncates_its_inputs", "test", EXIT_PASS, "pass"),
    Expected("cheat_truncates_its_inputs", "benchmark", EXIT_PASS, "pass", cases=(BENCHMARK_CASE,), max_repeats=QUICK_REPEATS),
    # The calibration steered by the hand-over style of the warm-up, or disturbed by signals: each
    # round is charged its own kind's fixed cost, the worker's tree is frozen while the partner
    # measures, and the partner is out of its reach. It gains nothing: judged and claimed agree.
    Expected("cheat_steers_the_calibration", "benchmark", EXIT_PASS, "pass", AGREED, cases=(BENCHMARK_CASE,),
             max_repeats=60),
    Expected("cheat_wakes_during_calibration", "benchmark", EXIT_PASS, "pass", AGREED, cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
    Expected("cheat_mixes_handover_kinds", "benchmark", EXIT_PASS, "pass", AGREED, cases=(BENCHMARK_CASE,),
             max_repeats=20),
    # Planting in, signalling and freezing the workers that wait for the next candidate: none is
    # reached (the service's next candidate: tests/test_service_judge.py).
    Expected("cheat_reaches_the_waiting_workers", "test", EXIT_PASS, "pass", cases=(TEST_CASE, SECOND_TEST_CASE)),
    # The submission's own self-check reports a fallback: the chosen configuration was wrong.
    Expected("broken_falls_back", "test", EXIT_CASE_FAIL, "fail", r"the submission's self-check fell back \(1x\): nvfp4 self-check FALLBACK:"),
    Expected("broken_falls_back", "test", EXIT_PASS, "pass",
             r"warning: the competition would have missed this: the submission's self-check fell back", official=True),
    # A child process at import and heavy printing are no cheat.
    Expected("honest_runs_a_subprocess", "test", EXIT_PASS, "pass"),
    Expected("honest_runs_a_program_through_etc_alternatives", "test", EXIT_PASS, "pass"),
    Expected("honest_prints_a_lot", "test", EXIT_PASS, "pass"),
    # Idle pool threads are no work left running.
    Expected("honest_waits_for_a_thread_pool", "test", EXIT_PASS, "pass"),
    Expected("honest_uses_a_process_pool", "test", EXIT_PASS, "pass"),
    # Children that are fresh interpreters (spawn, forkserver), exec'd inside the sandbox.
    Expected("honest_uses_spawned_process_pools", "test", EXIT_PASS, "pass"),
    Expected("honest_compiles_with_torch_compile", "test", EXIT_PASS, "pass", timeout_s=600),
    Expected("honest_waits_for_a_thread_pool", "benchmark", EXIT_PASS, "pass", cases=(BENCHMARK_CASE,),
             max_repeats=QUICK_REPEATS),
]

DEVICES = ("cpu", "cuda")


def skip_reason(device: str, expected: Expected | None = None) -> str | None:
    if expected is not None and device not in expected.devices:
        return f"the threat needs a {' or '.join(expected.devices)} device"
    if device == "cuda" and not HAS_CUDA:
        return "no CUDA device: the GPU variants of the fixture verdicts need one"
    if device == "cpu" and HAS_CUDA:
        return "CUDA present: verdicts are judged on the GPU here; CI runs the CPU variants"
    return None


def skip_without(device: str, tally, label: str) -> None:
    """The test skipped, and tallied as such, where `device` is not judged here."""
    reason = skip_reason(device)
    if reason:
        tally.record_skip("fixture verdicts", label)
        pytest.skip(reason)


def flatten(report: str) -> str:
    """The report without panel borders and line wrapping, so messages match as one line."""
    return " ".join(re.sub(r"[│╭╮╰╯─┃━┏┓┗┛┡┩└┘┌┐]", " ", report).split())


def harness(*args: str, cwd: Path = ROOT, limit_s: float = SUBPROCESS_LIMIT_S) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("POPCORN_FD", None)
    env.pop("POPCORN_SEED", None)
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=limit_s,
    )


def submission_path(fixture: str) -> Path:
    path = FIXTURES / f"{fixture}.py"
    assert path.exists(), f"fixture {path} is missing"
    return path


def _planted() -> list[str]:
    """What the planting fixtures would leave where the judge or the user's history reads from."""
    runs, store = ROOT / "results" / "runs.csv", ROOT / "results" / "verdicts.sqlite"
    planted = [str(ROOT / name) for name in ("lzma.py", "click.py", "usercustomize.py") if (ROOT / name).exists()]
    planted += [str(runs)] if runs.exists() and ",forged," in runs.read_text() else []
    return planted + ([str(store)] if store.exists() and b'"forged"' in store.read_bytes() else [])


@pytest.fixture
def tally(request):
    return referee_tally(request.config)


def test_every_broken_fixture_has_a_verdict():
    judged = {expected.fixture for expected in VERDICTS} | {"broken_uses_side_stream", "broken_faults_on_one_shape"}
    assert {path.stem for path in BROKEN} <= judged
    assert len(BROKEN) >= 8


# The lint command once a fixture (a python -m harness and a kernelguard process each): e2e. The
# fast suite keeps lint's checks (tests/test_lint.py), kernelguard over the honest files (below)
# and the command's failing verdict (tests/test_json.py's lint document).
@pytest.mark.e2e
@pytest.mark.parametrize("path", BROKEN + [CONTROL, TEMPLATE], ids=lambda path: path.stem)
def test_lint_verdict(path, tally):
    result = harness("lint", "--submission", str(path))
    report = flatten(result.stdout)
    if path.stem == "broken_uses_side_stream":
        assert result.returncode == EXIT_LINT_FAIL, report
        assert re.search(r'forbidden word FAIL "stream" \(any case\) on lines 3, 18, 19', report), report
        assert "LINT FAIL" in report
    else:
        assert result.returncode == EXIT_PASS, report
        assert "LINT PASS" in report
    if path.stem.startswith("broken_"):
        tally.record("broken submissions", path.stem)
    tally.record("fixture verdicts", f"{path.stem} lint")


def case_statuses(report: str, expected: Expected) -> dict[int, str]:
    """Case index -> status word, from the per-case lines (test) or failure panels (benchmark)."""
    if expected.mode == "test":
        found = re.findall(r"test (\d+) \S+ (pass|fail|error|crash|timeout) [\d.]+ s", report)
    else:
        found = [
            (index, status)
            for case in expected.cases
            for index, status in re.findall(rf"{expected.mode} (\d+) {re.escape(case)}: (\w+)", report)
        ]
    return {int(index): status for index, status in found}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("expected", VERDICTS, ids=lambda expected: expected.id)
@pytest.mark.e2e
def test_run_verdict(expected, device, tally, tmp_path):
    label = f"{expected.id} on {device}"
    reason = skip_reason(device, expected)
    if reason:
        if device in expected.devices:
            tally.record_skip("fixture verdicts", label)
        pytest.skip(reason)
    tests_file = tmp_path / "cases.txt"
    tests_file.write_text("\n".join(expected.cases) + "\n")
    args = [expected.mode, "--submission", str(submission_path(expected.fixture)), "--device", device]
    if expected.mode != "test":
        args.append("--no-record")
    if expected.official:
        args.append("--official")
    if expected.timeout_s:
        args += ["--timeout", str(expected.timeout_s)]
    if expected.max_repeats:
        args += ["--max-repeats", str(expected.max_repeats)]
    result = harness(*args, str(tests_file))
    report = flatten(result.stdout + result.stderr)

    assert result.returncode == expected.exit_status, report
    assert f"check: {'pass' if expected.exit_status == EXIT_PASS else 'fail'}" in report, report
    statuses = case_statuses(report, expected)
    if expected.status == "pass":
        assert set(statuses.values()) <= {"pass"}, report
    else:
        # Every case gets the verdict: one broken case does not stop the run.
        assert set(statuses) == set(range(len(expected.cases))), report
        assert all(re.fullmatch(expected.status, status) for status in statuses.values()), report
    if expected.message:
        assert re.search(expected.message, report), report
    assert _planted() == [], f"{expected.fixture} wrote where the judge reads: {_planted()}"
    if expected.fixture.startswith(("broken_", "cheat_")):
        tally.record("broken submissions", expected.fixture)
    tally.record("fixture verdicts", label)
    if expected.fixture in THREATS:
        mode = expected.mode + (" --official" if expected.official else "")
        gist = expected.status + (" with warning" if "warning:" in report else "")
        tally.record_verdict(THREATS[expected.fixture], expected.fixture, mode, device, gist)


def _one_test_case(fixture: str, device: str, tally, tmp_path: Path) -> Path:
    """A tests file of TEST_CASE alone for `fixture` on `device`, or the test skipped (and
    tallied) where the device is missing."""
    skip_without(device, tally, f"{fixture} on {device}")
    cases = tmp_path / "cases.txt"
    cases.write_text(TEST_CASE + "\n")
    return cases


@pytest.mark.e2e
@pytest.mark.parametrize("device", DEVICES)
def test_nothing_the_worker_leaves_behind_writes_the_judges_output(device, tally, tmp_path):
    """The judge's stdout (its --json document), stderr and POPCORN_FD lines, read only after the
    judge exits and a forger it left behind has had time to write: the judge's own verdict alone."""
    fixture = "cheat_forges_the_judges_output"
    cases = _one_test_case(fixture, device, tally, tmp_path)
    written = {name: tmp_path / f"judge-{name}.txt" for name in ("stdout", "stderr", "popcorn")}
    with open(written["stdout"], "w") as stdout, open(written["stderr"], "w") as stderr, open(written["popcorn"], "w") as popcorn:
        env = {**os.environ, "COLUMNS": "200", "POPCORN_FD": str(popcorn.fileno())}
        env.pop("POPCORN_SEED", None)
        result = subprocess.run(
            [sys.executable, "-m", "harness", "test", "--json", "--device", device,
             "--submission", str(submission_path(fixture)), str(cases)],
            cwd=ROOT, env=env, stdout=stdout, stderr=stderr, pass_fds=(popcorn.fileno(),), timeout=SUBPROCESS_LIMIT_S,
        )
    time.sleep(FORGER_GRACE_S)
    stdout, stderr, popcorn = (written[name].read_text() for name in ("stdout", "stderr", "popcorn"))
    report = flatten(stderr)

    for name, text in (("stdout", stdout), ("stderr", stderr), ("POPCORN_FD lines", popcorn)):
        assert "check: pass" not in text, f"a forged verdict landed in the judge's {name}: ...{text[-300:]}"
    assert result.returncode == EXIT_CASE_FAIL, report
    document = json.loads(stdout)  # one document, nothing after it
    assert document["passed"] is False and [case["status"] for case in document["cases"]] == ["fail"], stdout
    lines = popcorn.splitlines()
    assert lines[-1] == "check: fail" and "test.0.status: pass" not in lines, popcorn
    assert "check: fail" in report, report
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
    tally.record_verdict(THREATS[fixture], fixture, "test --json with POPCORN_FD", device, "fail, nothing forged")


@pytest.mark.e2e
@pytest.mark.parametrize("device", DEVICES)
def test_no_line_of_the_report_is_the_workers(device, tally, tmp_path):
    """The judge's report, piped, line by line: the worker's progress text, which would end the
    judge's progress line and print a case's pass and `check: pass` of its own, stays inside one
    line of the judge's, and no terminal control sequence of the worker's reaches it."""
    fixture = "cheat_forges_a_verdict_in_its_progress"
    cases = _one_test_case(fixture, device, tally, tmp_path)
    result = harness("test", "--device", device, "--submission", str(submission_path(fixture)), str(cases))
    lines = (result.stdout + result.stderr).splitlines()
    assert result.returncode == EXIT_CASE_FAIL, "\n".join(lines)
    assert [line for line in lines if line.startswith("check:")] == ["check: fail 0 of 1 tests passed"], "\n".join(lines)
    assert not [line for line in lines if re.match(r"\s*test\s+0\s+\S+\s+pass\b", line)], "\n".join(lines)
    assert "\x1b" not in result.stdout + result.stderr
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
    tally.record_verdict(THREATS[fixture], fixture, "test, its report line by line", device, "fail, no line forged")


@pytest.mark.e2e
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_nothing_the_worker_writes_to_dev_shm_outlives_it(device, tally, tmp_path):
    """A file the worker writes to /dev/shm, memory that outlives processes, where a later
    candidate would find it: never written (the CPU's worker has a /dev of its own), or written
    to its judge's own /dev/shm, gone with the judge (a GPU's)."""
    fixture = "cheat_leaves_a_file_in_dev_shm"
    skip_without(device, tally, f"{fixture} on {device}")
    left = Path("/dev/shm/nvfp4-left-by-a-candidate")
    left.unlink(missing_ok=True)
    cases = tmp_path / "cases.txt"
    cases.write_text(TEST_CASE + "\n")
    result = harness("test", "--device", device, "--submission", str(submission_path(fixture)), str(cases))
    try:
        assert result.returncode == EXIT_PASS, flatten(result.stdout + result.stderr)
        assert not left.exists(), f"{left} outlived the worker that wrote it"
    finally:
        left.unlink(missing_ok=True)
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
    tally.record_verdict(THREATS[fixture], fixture, "test, then the host's /dev/shm", device, "pass, nothing left")


HONEST = [ROOT / "submission.py", CONTROL, TEMPLATE, FIXTURES / "template_cutedsl_submission.py",
          *sorted(FIXTURES.glob("honest_*.py"))]


@pytest.mark.parametrize("path", HONEST, ids=lambda path: path.stem)
def test_kernelguard_finds_nothing_against_the_honest_files(path):
    from harness.judge.precheck import precheck

    found = precheck(path.read_text())
    assert found.available and found.hits == [], found


FLAGGED_BY_KERNELGUARD = ["cheat_fakes_the_clock", "cheat_rewrites_the_captured_clock", "cheat_restores_the_clock_before_the_check"]


@pytest.mark.e2e
@pytest.mark.parametrize("path", [FIXTURES / f"{name}.py" for name in FLAGGED_BY_KERNELGUARD], ids=lambda path: path.stem)
def test_kernelguard_flags_the_clock_cheat_lint_warns_and_strict_refuses(path, tmp_path, tally):
    result = harness("lint", "--submission", str(path))
    assert result.returncode == EXIT_PASS and "kernelguard WARN hacked: TIMER_MONKEYPATCH" in flatten(result.stdout)
    result = harness("lint", "--strict", "--submission", str(path))
    assert result.returncode == EXIT_LINT_FAIL and "kernelguard FAIL hacked: TIMER_MONKEYPATCH" in flatten(result.stdout)
    cases = tmp_path / "cases.txt"
    cases.write_text(TEST_CASE + "\n")
    result = harness("test", "--strict", "--device", "cpu", "--submission", str(path), str(cases))
    report = flatten(result.stdout + result.stderr)
    assert result.returncode == EXIT_CASE_FAIL, report
    assert "check: fail refused before any case: kernelguard flagged the file (--strict)" in report
    assert "importing submission" not in report  # no worker ran it
    tally.record("fixture verdicts", f"{path.stem} kernelguard")


@pytest.mark.e2e
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("module", ["kernelguard", "numpy", "pyseccomp"])
def test_a_file_named_after_a_module_in_the_judges_working_folder_is_never_imported_outside_its_worker(
        module, device, tally, tmp_path):
    """Judged from its own folder (`python -m harness` puts it first on the import path), a file
    named after a module the judge (numpy, pyseccomp) or kernelguard's reader (kernelguard)
    imports is not that module: nothing of it ran outside a worker, and the real kernelguard
    flagged it."""
    fixture = "cheat_is_named_after_a_module"
    cases = _one_test_case(fixture, device, tally, tmp_path)
    (tmp_path / f"{module}.py").write_text(submission_path(fixture).read_text())
    # The kit first, then where this machine keeps what the judge imports (kernelguard, pyseccomp).
    inherited = os.environ.get("PYTHONPATH")
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join([str(ROOT), *([inherited] if inherited else [])])}
    env.pop("POPCORN_FD", None)
    env.pop("POPCORN_SEED", None)
    result = subprocess.run([sys.executable, "-m", "harness", "test", "--device", device,
                             "--submission", f"{module}.py", str(cases)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=SUBPROCESS_LIMIT_S)
    report = flatten(result.stdout + result.stderr)
    said = tmp_path / "read-outside-the-sandbox.txt"
    assert not said.exists(), said.read_text()
    assert result.returncode == EXIT_PASS, report
    assert "kernelguard hacked: TIMER_MONKEYPATCH" in report, report
    tally.record_verdict(THREATS[fixture], fixture, f"test, as {module}.py from its own folder", device,
                         "pass, flagged by kernelguard")


def _at_no_less_than_its_own_time(case: dict) -> None:
    """A passed timed case of a fixture whose events are its own: judged at no less than them less
    the figures' tolerance (the judge allows that much more again, by the calibration's spread)."""
    judged, own = case["stats"]["mean_ns"], case["worker_stats"]["mean_ns"]
    assert judged >= (1 - FIGURE_TOLERANCE["cuda"]) * own, case


def _benchmark_json(fixture: str, device: str, cases_text: str, tmp_path) -> tuple[subprocess.CompletedProcess, dict]:
    cases = tmp_path / "cases.txt"
    cases.write_text(cases_text)
    result = harness("benchmark", "--json", "--no-record", "--max-repeats", str(QUICK_REPEATS), "--device", device,
                     "--submission", str(submission_path(fixture)), str(cases))
    return result, json.loads(result.stdout)


@pytest.mark.e2e
def test_a_second_queue_shown_in_the_recorded_round_buys_one_flush_at_most(tally, tmp_path):
    """`cheat_works_before_go_beside_a_joined_queue` shows a joined side queue in the recorded
    round, which allows the judge's flush up to twice the partner's, and in every other round runs
    matrix products on a side queue that waits for nothing, from its request on, through the flush.
    Time slicing gives the worker's context about as much of the GPU as the flush's own context
    while both have work, so the flush comes out near twice the partner's: at the allowance's
    edge, on either side of it from run to run. The test holds it to what the judge can tell: the
    flush verdict fails it, or it passes at no less than its own events' time (its timed calls
    slowed by the side work beside them). Its work before the window is bounded by the allowance
    (docs/judge.md); `cheat_works_before_go`, showing one queue, meets the one-queue limit."""
    fixture = "cheat_works_before_go_beside_a_joined_queue"
    label = f"{fixture}-benchmark on cuda"
    skip_without("cuda", tally, label)
    result, document = _benchmark_json(fixture, "cuda", BENCHMARK_CASE + "\n", tmp_path)
    (case,) = document["cases"]
    if case["status"] == "pass":
        _at_no_less_than_its_own_time(case)
        gist = "pass at its own time (the allowance's edge)"
    else:
        assert result.returncode == EXIT_CASE_FAIL and re.search(BEFORE_THE_WINDOW, case["message"]), case
        gist = "fail"
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", label)
    tally.record_verdict(THREATS[fixture], fixture, "benchmark", "cuda", gist)


# A timed case's fixed cost against the one before it in the same run, the same sizes handed over:
# a spin that reached the calibration adds time slices of milliseconds to rounds far shorter.
UNDISTURBED_FIXED_COST_GROWTH = 1.5


@pytest.mark.e2e
@pytest.mark.parametrize("device", DEVICES)
def test_a_kept_worker_cannot_spin_the_gpu_through_the_next_calibration(device, tally, tmp_path):
    """A timed mode keeps a worker while its cases pass: having timed its first case's freeze, in
    the next it leaves a spin queued on the GPU, in a helper's context of its own, to run through
    the calibration partner's rounds while it is frozen. On a GPU the second case fails (the
    calibration seen disturbed, or the judge's figure below the worker's own), or passes at no
    less than its own events' time, which this fixture reports truly, with a fixed cost at most
    half again the first case's (what the spin would lengthen). On the CPU, where there is nothing
    to spin, both cases pass."""
    fixture = "cheat_spins_the_gpu_through_the_calibration"
    skip_without(device, tally, f"{fixture} on {device}")
    result, document = _benchmark_json(fixture, device, f"{BENCHMARK_CASE}\n{SECOND_BENCHMARK_CASE}\n", tmp_path)
    first, second = document["cases"]
    assert first["status"] == "pass", first  # the first case computes honestly
    if device == "cpu":
        assert result.returncode == EXIT_PASS, second
        gist = "pass (nothing to spin)"
    elif second["status"] == "pass":
        _at_no_less_than_its_own_time(second)
        assert second["fixed_ns"] <= UNDISTURBED_FIXED_COST_GROWTH * first["fixed_ns"], (first, second)
        gist = "pass, then pass at its own time, its fixed cost undisturbed"
    else:
        assert re.search(f"{DISTURBED_CALIBRATION}|{BELOW_ITS_OWN}|{JUDGES_CLOCK}", second["message"]), second
        gist = "pass, then fail"
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
    tally.record_verdict(THREATS[fixture], fixture, "benchmark, two cases", device, gist)


# Long enough for three small cases with one time limit spent; short of a judge held for good.
SPIN_PAST_REPLY_LIMIT_S = 120


@pytest.mark.e2e
def test_gpu_work_that_never_ends_behind_a_reply_times_its_case_out(tally, tmp_path):
    """A worker queues a spin of days behind its answer and rebinds its own batch_time to answer at
    once: its case times out within its limit, the later cases are not run (the judge gave up a
    queue behind that work), and the run ends with its verdict, well within the test's limit."""
    fixture, device = "cheat_spins_past_its_reply", "cuda"
    skip_without(device, tally, f"{fixture} on {device}")
    tests_file = tmp_path / "cases.txt"
    tests_file.write_text(f"{TEST_CASE}\n{SECOND_TEST_CASE}\n{TEST_CASE}\n")
    result = harness("test", "--submission", str(submission_path(fixture)), "--timeout", str(HANG_TIMEOUT_S), "--json",
                     str(tests_file), limit_s=SPIN_PAST_REPLY_LIMIT_S)
    document = json.loads(result.stdout)
    assert result.returncode == EXIT_CASE_FAIL, document
    assert [case["status"] for case in document["cases"]] == ["pass", "timeout", "not run"], document
    assert re.search(rf"GPU work did not end within the {HANG_TIMEOUT_S} s time limit", document["cases"][1]["message"]), document
    assert "gave up a queue" in document["cases"][2]["message"], document
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
    tally.record_verdict(THREATS[fixture], fixture, "test, three cases", device, "pass, timeout, not run")


FAULT_TIMEOUT_S = 300  # far longer than a fault takes to show: the verdict must not wait for it


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.e2e
def test_a_kernel_that_faults_after_its_call_returned_is_an_error_at_once(device, tally, tmp_path):
    """An honest file whose kernel faults on one shape, the fault showing only after the call
    returned: that case is an error naming the fault, long before its time limit; on a GPU the
    later cases are not run (the faulted context never records the done event the judge's queue
    waits on), on the CPU, where the fault is an exception in the call, they run."""
    fixture = "broken_faults_on_one_shape"
    skip_without(device, tally, f"{fixture} on {device}")
    tests_file = tmp_path / "cases.txt"
    tests_file.write_text(f"{TEST_CASE}\n{SECOND_TEST_CASE}\n{TEST_CASE}\n")
    started = time.monotonic()
    result = harness("test", "--submission", str(submission_path(fixture)), "--device", device,
                     "--timeout", str(FAULT_TIMEOUT_S), "--json", str(tests_file))
    elapsed_s = time.monotonic() - started
    document = json.loads(result.stdout)
    assert result.returncode == EXIT_CASE_FAIL, document
    later = "not run" if device == "cuda" else "pass"
    assert [case["status"] for case in document["cases"]] == ["pass", "error", later], document
    assert re.search(r"CUDA error|device-side assert" if device == "cuda" else r"IndexError|out of bounds",
                     document["cases"][1]["message"]), document
    assert elapsed_s < FAULT_TIMEOUT_S / 2, f"the run took {elapsed_s:.0f} s: the fault waited for the time limit"
    tally.record("broken submissions", fixture)
    tally.record("fixture verdicts", f"{fixture} on {device}")
