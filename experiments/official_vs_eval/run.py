"""`benchmark --official` against the competition's own eval, the same file on the same GPU, run in
turn: how far the kit's reading of the competition's figure is from the competition's.

The eval is the competition's `eval_better_bench.py` (gpu-mode/reference-kernels, problems/nvidia)
with its `utils.py`, from a folder the user brings (`--eval-dir`: this kit copies none of it).
It runs in the runner folder the harness itself lays out (harness/runner/files.py: the problem's
`task.py` and `reference.py`, which generate the same inputs and check the same answers, the
competition's reference for nvfp4_gemm calling cuBLAS's fp4 path that Hopper lacks; the kit's
local files; the submission), with the eval's own `utils.py`. CuTeDSL releases after the
competition's pin have no `OpError` where its eval imports it: that import is made optional in
the copy. Both sides take the problem's benchmark shapes, each run as its own process, the one
that goes first alternating from turn to turn:

    POPCORN_FD=N python eval.py benchmark benchmarks.txt
    python -m harness benchmark --official --no-record --json

    python experiments/official_vs_eval/run.py --eval-dir ../reference-kernels/problems/nvidia
"""

import argparse
import ast
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.problems import load_problem  # noqa: E402
from harness.results.rows import git_commit  # noqa: E402
from harness.runner.files import make_runner_folder  # noqa: E402

OP_ERROR_IMPORT = re.compile(r"^from cutlass\.cute\.nvgpu\.common import OpError$", re.MULTILINE)
OP_ERROR_OPTIONAL = ("try:\n    from cutlass.cute.nvgpu.common import OpError\n"
                     "except ImportError:  # CuTeDSL releases after the competition's pin have none\n"
                     "    class OpError(Exception):\n        pass\n")
LIMIT_S = 600


def eval_folder(eval_dir: Path, problem, submission: Path, cases_text: str) -> Path:
    """The harness's runner folder for `submission`, with the competition's eval and utils."""
    source = eval_dir / "eval_better_bench.py"
    if not (source.exists() and (eval_dir / "utils.py").exists()):
        sys.exit(f"{eval_dir} holds no eval_better_bench.py with its utils.py")
    eval_source = OP_ERROR_IMPORT.sub(OP_ERROR_OPTIONAL.rstrip("\n"), source.read_text())
    if any(isinstance(statement, ast.ImportFrom) and any(alias.name == "OpError" for alias in statement.names)
           for statement in ast.parse(eval_source).body):
        sys.exit(f"{source} imports OpError in a way this experiment does not make optional")
    folder = make_runner_folder(submission, problem=problem)
    (folder / "eval.py").write_text(eval_source)
    shutil.copy(eval_dir / "utils.py", folder / "utils.py")
    (folder / "benchmarks.txt").write_text(cases_text)
    return folder


def popcorn_means(popcorn: str) -> list[float]:
    """The eval's mean per benchmark shape (ns), in its order, from its `benchmark.N.mean` lines."""
    means = {}
    for line in popcorn.splitlines():
        key, _, value = line.partition(":")
        parts = key.strip().split(".")
        if len(parts) == 3 and parts[0] == "benchmark" and parts[1].isdigit() and parts[2] == "mean":
            means[int(parts[1])] = float(value)
    return [means[index] for index in sorted(means)]


def run_eval(folder: Path) -> list[float]:
    """The eval run in `folder`, its POPCORN lines written to a file of their own."""
    with tempfile.TemporaryFile(mode="w+") as popcorn, tempfile.TemporaryFile(mode="w+") as log:
        environment = {**os.environ, "POPCORN_FD": str(popcorn.fileno())}
        try:
            completed = subprocess.run([sys.executable, "eval.py", "benchmark", "benchmarks.txt"], cwd=folder, env=environment,
                                       pass_fds=(popcorn.fileno(),), stdout=log, stderr=subprocess.STDOUT, timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            sys.exit(f"the competition's eval ran past {LIMIT_S} s")
        popcorn.seek(0)
        log.seek(0)
        lines, output = popcorn.read(), log.read()
    means = popcorn_means(lines)
    if completed.returncode or not means:
        sys.exit(f"the competition's eval failed (exit {completed.returncode}):\n{lines[-2000:]}\n{output[-2000:]}")
    return means


# A process that holds a CUDA context on the device and does nothing, as the judge's calibration
# partner does while a worker's rounds are timed.
IDLE_CONTEXT = ("import sys, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); "
                "print('ready', flush=True); sys.stdin.read()")


@contextlib.contextmanager
def idle_contexts(count: int):
    """`count` processes holding an idle CUDA context each while the block runs."""
    processes = [subprocess.Popen([sys.executable, "-c", IDLE_CONTEXT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(count)]
    try:
        for process in processes:
            if process.stdout.readline().strip() != "ready":
                sys.exit("a process meant to hold an idle CUDA context did not start")
        yield
    finally:
        for process in processes:
            process.kill()
            process.wait()


def run_official(problem, submission: Path, cases_file: Path) -> list[float]:
    """`benchmark --official`'s mean per benchmark shape (ns), from its --json document."""
    command = [sys.executable, "-m", "harness", "benchmark", "--official", "--no-record", "--json",
               "--problem", problem.selector, "--submission", str(submission), str(cases_file)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S)
    if completed.returncode:
        sys.exit(f"benchmark --official did not pass (exit {completed.returncode}): {completed.stderr[-2000:]}")
    document = json.loads(completed.stdout)
    return [case["stats"]["mean_ns"] for case in document["cases"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, required=True,
                        help="a folder holding the competition's eval_better_bench.py and utils.py")
    parser.add_argument("--problem", default="nvfp4_gemm")
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py")
    parser.add_argument("--turns", type=int, default=2, help="runs of each side, alternating [2]")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the figures")
    parser.add_argument("--eval-beside-idle-contexts", type=int, default=0, metavar="N",
                        help="run the eval while N other processes hold an idle CUDA context on the device, "
                             "as the judge's processes do beside a worker [0]")
    arguments = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: both sides time on a GPU")
    problem = load_problem(arguments.problem)
    submission = arguments.submission.resolve()
    folder = eval_folder(arguments.eval_dir, problem, submission, problem.benchmarks_file.read_text())
    device, commit = torch.cuda.get_device_name(0), git_commit()
    beside = arguments.eval_beside_idle_contexts
    print(f"--official against the competition's eval on {device} at {commit}, {problem.name}, {submission.name}"
          + (f"; the eval beside {beside} idle CUDA contexts" if beside else ""), flush=True)
    sides: dict[str, list[list[float]]] = {"eval": [], "official": []}
    def eval_run() -> list[float]:
        with idle_contexts(arguments.eval_beside_idle_contexts):
            return run_eval(folder)

    runs = {"eval": eval_run, "official": lambda: run_official(problem, submission, folder / "benchmarks.txt")}
    try:
        for turn in range(arguments.turns):
            for side in (("eval", "official") if turn % 2 == 0 else ("official", "eval")):
                sides[side].append(runs[side]())
            print(f"turn {turn + 1}: eval {' / '.join(f'{mean / 1e3:.3f}' for mean in sides['eval'][-1])} us; "
                  f"--official {' / '.join(f'{mean / 1e3:.3f}' for mean in sides['official'][-1])} us", flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shapes = [case.label for case in problem.cases("benchmarks")]
    rows = []
    for index, shape in enumerate(shapes):
        eval_ns = statistics.mean(turn[index] for turn in sides["eval"])
        official_ns = statistics.mean(turn[index] for turn in sides["official"])
        rows.append({"shape": shape, "eval_ns": eval_ns, "official_ns": official_ns, "difference": official_ns / eval_ns - 1})
        print(f"{shape:>20}  eval {eval_ns / 1e3:9.3f} us  --official {official_ns / 1e3:9.3f} us  {rows[-1]['difference']:+.2%}")
    if arguments.out:
        arguments.out.parent.mkdir(parents=True, exist_ok=True)
        arguments.out.write_text(json.dumps({"device": device, "commit": commit, "date": time.strftime("%Y-%m-%d"),
                                             "problem": problem.name, "submission": submission.name, "eval_beside_idle_contexts": beside,
                                             "turns": sides, "shapes": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
