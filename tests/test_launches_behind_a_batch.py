"""The judge's launches behind a batch, timed on a GPU: where a host-bound worker's GPU has finished
its batch when it replies, they lie in the judge's window, and no worker may move them by when it
answers the judge's next request (harness/judge/isolation.py `request_behind`).

Each check runs in a fresh interpreter that enters its own /dev/shm first, as `python -m harness`
does, and prints its figures.
"""

import ast
import json
import random
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="times the judge's window on a GPU: needs a CUDA device")]

REPO = Path(__file__).resolve().parents[1]
ANSWERS_LATE = REPO / "tests" / "fixtures" / "cheat_answers_its_figure_late.py"
ROUNDS = 400
# A late answer's gain is judged against the same rounds with their late and prompt labels shuffled
# SHUFFLES times: a gain above all but a SIGNIFICANCE share of the shuffles' is the late answers'.
# The window beyond a host-bound worker's events is milliseconds of host hand-over, whose median
# over half the rounds moves by tens of microseconds from run to run; a reply read beside the
# launches would shorten every late round's window alike. A late answer may lengthen it (a GPU idle
# through the lateness starts the next round slower): that gains a worker nothing.
SHUFFLES = 2000
SIGNIFICANCE = 0.001

JUDGE = textwrap.dedent("""
    import json, random, sys, tempfile, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])  # the kit, by an absolute path: the worker's imports take the judge's
    from harness.judge.dev_shm import own_dev_shm
    own_dev_shm()
    import torch
    from harness.judge.isolation import WorkerProcess, protect_the_judge
    from harness.judge.memory import SharedPool
    from harness.judge.rounds import BATCH, JudgeClock
    from harness.judge.sandbox import Sandbox
    from harness.problems import PROBLEMS
    from harness.runner.files import runner_files

    submission, rounds, (late_seed, late_share) = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[4])
    problem = PROBLEMS["nvfp4_gemm"]
    device = torch.device("cuda", torch.cuda.current_device())
    protect_the_judge()
    sandbox, pool, logs = Sandbox("cuda"), SharedPool(device), tempfile.mkdtemp()
    clock = JudgeClock(device, 256 << 20)
    worker = WorkerProcess(sandbox, logs, {**runner_files(problem), "submission.py": submission}, "cuda", 42, pool.describe)
    worker.begin_case(600, lambda text: None)
    clock.connect(worker)
    spec = {"m": 128, "n": 256, "k": 256, "l": 1}
    shared = pool.copies([problem.generate(spec, 1111 + 42 * call, "cuda") for call in range(problem.eval.calls_per_batch)])
    torch.cuda.synchronize()
    worker.request("hold", BATCH, shared, False)
    worker.request("load")
    timed = []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        round_ = clock.round(worker, shared)
        timed.append((round_, time.perf_counter_ns() - started))
    worker.close()
    sandbox.close()
    # The fixture's draws replayed, one a round: which rounds it answered late.
    chance = random.Random(late_seed)
    answered_late = [chance.random() < late_share for _ in timed]
    # Each round after the first few (they warm up): the window beyond the batch as the worker's
    # events time it (the hand-over and the copies) where the reply was exposed, the judge's wall
    # time of the round, and whether it was answered late.
    print(json.dumps({"device": torch.cuda.get_device_name(device),
                      "rounds": [(round_.window_ns - round_.worker_ns if round_.exposed else None, wall, late)
                                 for (round_, wall), late in list(zip(timed, answered_late))[4:]]}))
""")


def _constants(path: Path, *names: str) -> dict:
    """The named module-level constants of a fixture, read from its source (it runs only in a worker)."""
    tree = ast.parse(path.read_text())
    found = {target.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name) and target.id in names}
    assert set(found) == set(names), f"{path.name} lacks {set(names) - set(found)}"
    return found


def _median_gain(beyond: list[tuple[float, bool]]) -> float:
    """How much shorter the median window of the late rounds is than the prompt rounds'."""
    return (statistics.median(ns for ns, late in beyond if not late)
            - statistics.median(ns for ns, late in beyond if late))


def _shuffled_gains(beyond: list[tuple[float, bool]]) -> list[float]:
    """The gain with the rounds' late and prompt labels shuffled, SHUFFLES times: what noise alone gives."""
    chance, windows, labels = random.Random(0), [ns for ns, _ in beyond], [late for _, late in beyond]
    return [_median_gain(list(zip(windows, chance.sample(labels, len(labels))))) for _ in range(SHUFFLES)]


def test_a_worker_answering_late_moves_nothing_of_the_judges_window():
    """cheat_answers_its_figure_late answers the judge's request for its figure 20 ms late in a
    random half of its rounds: its host-bound rounds' windows beyond its own events are no shorter
    where it answered late than where it answered at once, beyond what its rounds' noise gives."""
    constants = _constants(ANSWERS_LATE, "LATE_S", "LATE_SEED", "LATE_SHARE")
    ended = subprocess.run([sys.executable, "-c", JUDGE, str(ANSWERS_LATE), str(ROUNDS), str(REPO),
                            json.dumps([constants["LATE_SEED"], constants["LATE_SHARE"]])],
                           cwd=REPO, capture_output=True, text=True, timeout=600)
    assert ended.returncode == 0, ended.stdout + ended.stderr
    figures = json.loads(ended.stdout.splitlines()[-1])
    rounds = figures["rounds"]
    beyond = [(ns, late) for ns, _, late in rounds if ns is not None]
    late_count = sum(late for _, late in beyond)
    gain_ns = _median_gain(beyond)
    noise_ns = statistics.quantiles(_shuffled_gains(beyond), n=round(1 / SIGNIFICANCE))[-1]
    print(f"{figures['device']}: the window beyond the worker's events, median over exposed rounds "
          f"({len(beyond)} of {len(rounds)}, {late_count} answered late): answering late gains "
          f"{gain_ns / 1e3:.1f} us a round; shuffled labels gain up to {noise_ns / 1e3:.1f} us in "
          f"{1 - SIGNIFICANCE:.1%} of {SHUFFLES} draws")
    assert len(beyond) >= len(rounds) // 2, figures  # host-bound: the reply comes once the GPU is idle
    assert len(beyond) // 4 <= late_count <= len(beyond) * 3 // 4, figures
    # The replayed draws are the fixture's: its late rounds took the judge the lateness longer.
    late_wall_ns = statistics.median(wall for _, wall, late in rounds if late)
    prompt_wall_ns = statistics.median(wall for _, wall, late in rounds if not late)
    assert late_wall_ns - prompt_wall_ns > constants["LATE_S"] * 1e9 / 2, figures
    assert gain_ns <= noise_ns, f"answering late gains {gain_ns / 1e3:.1f} us, noise {noise_ns / 1e3:.1f} us"
