"""reference-kernels' evals: each one's parameters (`EvalParameters`), and which of them a problem
folder runs, told from its eval file.

Each family of problems ships its own eval, and they time and check differently: NVIDIA's
better-bench (a batch of inputs between two events, the 64 GB flush), the plain eval of NVIDIA's
first problem and of pmpp_v2 (one call per round on its own input, fresh inputs on the
leaderboard), linalg's (a batch as large as 256 MiB of inputs allows, every timed output checked
again, in benchmark mode too) and helion's (the calls captured in a CUDA graph and timed by a
do_bench-style loop). A flavour names one, says how it is recognised (its file name, or strings
its source holds) and gives its parameters: the schedule the judge's own modes follow (caps,
warm-ups, flush, batch), and for the kit's built-in problems what `--official` reproduces. On a
problem folder `--official` runs the folder's eval itself (harness/judge/folder_eval.py), whatever
its flavour; the default mode keeps the judge's own clock and checks whatever the flavour.
"""

import dataclasses
from pathlib import Path

from harness.shared import stats

MIB = 1024**2
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class EvalParameters:
    """The competition's eval around a problem (its eval.py); (max_repeats, max_time_ns) pairs."""

    script: str  # the eval file in reference-kernels' problems/nvidia/ these figures come from
    calls_per_batch: int  # custom_kernel calls between the timing events, each on its own input
    seed_step: int  # added to the seed before drawing each input of a batch (0: the case's seed itself)
    flush_bytes: int  # the L2 flush before each timed batch
    benchmark_warmup: tuple[int, float]  # on the first case only
    benchmark_run: tuple[int, float]
    leaderboard_warmup: tuple[int, float]
    leaderboard_warms_every_case: bool  # else the first case only
    leaderboard_run: tuple[int, float]
    leaderboard_rechecks: bool  # the timed outputs are checked again in leaderboard mode
    recheck_fresh_seed_step: int  # > 0: every timed round draws a new input, its seed this much on
    recheck_judges_last_output_only: bool  # the eval's recheck loop keeps only the last call's verdict
    min_total_ns: float = stats.MIN_TOTAL_NS  # the wall time its stopping rule waits for before it may stop

    def batch_seeds(self, seed: int) -> list[int]:
        """The seeds of a batch's inputs for a case of `seed`: seed_step added before each draw, as
        the competition's eval does (a step of 0: the case's own seed)."""
        return [seed + self.seed_step * (call + 1) for call in range(self.calls_per_batch)]


# eval_better_bench.py: 50 inputs per batch, each seed 42 past the one before; the 64 GB flush;
# its recheck loop checks every output but returns on the last one's verdict only.
BETTER_BENCH = EvalParameters(
    script="eval_better_bench.py", calls_per_batch=50, seed_step=42, flush_bytes=16000 * 1024 * 1024 * 4,
    benchmark_warmup=(200, 1e8), benchmark_run=(200, 10e9),
    leaderboard_warmup=(1000, 5e8), leaderboard_warms_every_case=True, leaderboard_run=(1000, 30e9),
    leaderboard_rechecks=True, recheck_fresh_seed_step=0, recheck_judges_last_output_only=True,
)
# eval.py: one call per timed round on the case's own input; the 4 GiB flush (utils.clear_l2_cache);
# on the leaderboard every round draws a fresh input (seed + 13) and checks its output.
PLAIN_EVAL = EvalParameters(
    script="eval.py", calls_per_batch=1, seed_step=0, flush_bytes=4 * GIB,
    benchmark_warmup=(200, 1e8), benchmark_run=(200, 10e9),
    leaderboard_warmup=(1000, 5e8), leaderboard_warms_every_case=False, leaderboard_run=(1000, 30e9),
    leaderboard_rechecks=True, recheck_fresh_seed_step=13, recheck_judges_last_output_only=False,
)
# eval_better_bench_grouped_gemm.py: 15 inputs per batch, lower caps, the same recheck loop.
GROUPED_BENCH = dataclasses.replace(
    BETTER_BENCH, script="eval_better_bench_grouped_gemm.py", calls_per_batch=15,
    benchmark_warmup=(100, 1e8), benchmark_run=(100, 10e9), leaderboard_warmup=(50, 5e8), leaderboard_run=(100, 30e9),
)


@dataclasses.dataclass(frozen=True)
class EvalFlavour:
    name: str
    parameters: EvalParameters  # the eval's schedule: the judge's caps, and what --official follows on a built-in problem
    file_names: tuple[str, ...] = ()  # the eval file's names in reference-kernels
    markers: tuple[str, ...] = ()  # strings its source holds, every one

    def matches(self, file_name: str, source: str | None) -> bool:
        if source is not None and self.markers:
            return all(marker in source for marker in self.markers)
        return file_name in self.file_names


# pmpp_v2/eval.py: NVIDIA's plain eval with caps of 100 rounds, no 100 ms floor before its
# stopping rule, and pmpp_v2/utils.py's flush of 32 Mi int64 (256 MiB).
PMPP_EVAL = dataclasses.replace(
    PLAIN_EVAL, script="pmpp_v2/eval.py", flush_bytes=256 * MIB, benchmark_warmup=(100, 1e8),
    benchmark_run=(100, 10e9), leaderboard_warmup=(100, 1e7), leaderboard_run=(100, 30e9), min_total_ns=0)
# linalg/*/eval.py: 200 rounds on warm-up and benchmark, 1000 on the leaderboard, every case warmed.
LINALG_EVAL = dataclasses.replace(
    PLAIN_EVAL, script="linalg/eval.py", flush_bytes=256 * MIB, benchmark_warmup=(200, 1e8),
    benchmark_run=(200, 10e9), leaderboard_warmup=(1000, 5e8), leaderboard_warms_every_case=True,
    leaderboard_run=(1000, 30e9), recheck_fresh_seed_step=0)
# helion/eval.py: the rounds are its do_bench loop's (100 ms of replays, 20 ms to warm up).
HELION_EVAL = dataclasses.replace(PLAIN_EVAL, script="helion/eval.py", flush_bytes=256 * MIB)

FLAVOURS = (
    EvalFlavour("better-bench grouped", GROUPED_BENCH, ("eval_better_bench_grouped_gemm.py",),
                ("NUM_ITERATIONS_PER_BENCHMARK = 15",)),
    EvalFlavour("better-bench", BETTER_BENCH, ("eval_better_bench.py",), ("NUM_ITERATIONS_PER_BENCHMARK = 50",)),
    EvalFlavour("in-process recheck", LINALG_EVAL, (), ("BENCHMARK_INPUT_BYTES_TARGET", "_benchmark_batch_count")),
    EvalFlavour("cuda graph do_bench", HELION_EVAL, (), ("_do_bench_cudagraph", "torch.cuda.graph(")),
    EvalFlavour("plain (pmpp_v2)", PMPP_EVAL, (), ("run_single_benchmark(pool, tests[0], False, 100, 10e7)",)),
    EvalFlavour("plain", PLAIN_EVAL, ("eval.py",), ("from cutlass.cute.nvgpu.common import OpError", "clear_l2_cache()")),
)
UNKNOWN = EvalFlavour("unrecognised", PLAIN_EVAL)


def flavour_of(eval_file: Path | None) -> EvalFlavour:
    """The flavour of `eval_file` (its source where the file is there, else its name alone);
    UNKNOWN where none matches."""
    if eval_file is None:
        return UNKNOWN
    source = eval_file.read_text(errors="replace") if eval_file.is_file() else None
    return next((flavour for flavour in FLAVOURS if flavour.matches(eval_file.name, source)), UNKNOWN)
