"""`benchmark --official` against the competition's own eval, the same file on the same GPU, run in
turn: how far the kit's reading of the competition's figure is from the competition's.

The eval is the competition's `eval_better_bench.py` (gpu-mode/reference-kernels, problems/nvidia)
with its `utils.py`, from a folder the user brings (`--eval-dir`: this kit copies none of it).
Beside it go the problem's `task.py` and `reference.py` from this kit, which generate the same
inputs and check the same answers (the competition's reference for nvfp4_gemm calls cuBLAS's fp4
path, which Hopper lacks), the submission and the files it imports (`--with`). CuTeDSL releases
after the competition's pin have no `OpError` where its eval imports it: that import is made
optional in the copy. Both sides take the problem's benchmark shapes, each run as its own
process, alternating:

    POPCORN_FD=3 python eval.py benchmark benchmarks.txt
    python -m harness benchmark --official --no-record --json

    python experiments/official_vs_eval/run.py --eval-dir ../reference-kernels/problems/nvidia/nvfp4_gemm
"""

import argparse
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
from harness.results import git_commit  # noqa: E402

OP_ERROR_IMPORT = re.compile(r"^from cutlass\.cute\.nvgpu\.common import OpError$", re.MULTILINE)
OP_ERROR_OPTIONAL = ("try:\n    from cutlass.cute.nvgpu.common import OpError\n"
                     "except ImportError:  # CuTeDSL releases after the competition's pin have none\n"
                     "    class OpError(Exception):\n        pass\n")
LIMIT_S = 600


def eval_folder(eval_dir: Path, problem, submission: Path, extra: list[Path], cases_text: str) -> Path:
    """A folder laid out as the competition's runner's: its eval and utils, the problem's task
    and reference, the submission beside them."""
    source = next((eval_dir / name for name in ("eval_better_bench.py", "eval.py") if (eval_dir / name).exists()), None)
    if source is None or not (eval_dir / "utils.py").exists():
        sys.exit(f"{eval_dir} holds no eval_better_bench.py (or eval.py) with its utils.py")
    folder = Path(tempfile.mkdtemp(prefix="nvfp4-eval-"))
    (folder / "eval.py").write_text(OP_ERROR_IMPORT.sub(OP_ERROR_OPTIONAL.rstrip("\n"), source.read_text()))
    shutil.copy(eval_dir / "utils.py", folder / "utils.py")
    for module, path in problem.runner_files().items():
        if module != "utils":
            shutil.copy(path, folder / f"{module}.py")
    shutil.copy(submission, folder / "submission.py")
    for path in extra:
        shutil.copy(path, folder / path.name)
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
    """The eval run in `folder`, its POPCORN lines read from a pipe of their own."""
    read_end, write_end = os.pipe()
    environment = {**os.environ, "POPCORN_FD": str(write_end)}
    with tempfile.TemporaryFile(mode="w+") as log:
        process = subprocess.Popen([sys.executable, "eval.py", "benchmark", "benchmarks.txt"], cwd=folder, env=environment,
                                   pass_fds=(write_end,), stdout=log, stderr=subprocess.STDOUT, text=True)
        os.close(write_end)
        with os.fdopen(read_end) as lines:
            popcorn = lines.read()
        process.wait(timeout=LIMIT_S)
        log.seek(0)
        output = log.read()
    means = popcorn_means(popcorn)
    if process.returncode or not means:
        sys.exit(f"the competition's eval failed (exit {process.returncode}):\n{popcorn[-2000:]}\n{output[-2000:]}")
    return means


def run_official(problem, submission: Path, cases_file: Path) -> list[float]:
    """`benchmark --official`'s mean per benchmark shape (ns), from its --json document."""
    command = [sys.executable, "-m", "harness", "benchmark", "--official", "--no-record", "--json",
               "--problem", problem.selector, "--submission", str(submission), str(cases_file)]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S)
    document = json.loads(completed.stdout)
    means = [(case.get("stats") or {}).get("mean_ns") for case in document.get("cases") or []]
    if completed.returncode or None in means:
        sys.exit(f"benchmark --official did not pass (exit {completed.returncode}): {completed.stderr[-2000:]}")
    return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-dir", type=Path, required=True,
                        help="a folder holding the competition's eval_better_bench.py and utils.py")
    parser.add_argument("--problem", default="nvfp4_gemm")
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py")
    parser.add_argument("--with", dest="extra", type=Path, action="append", default=None,
                        help="a file the submission imports, copied beside it [hopper_stand_in.py for the kit's]")
    parser.add_argument("--turns", type=int, default=2, help="runs of each side, alternating [2]")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the figures")
    arguments = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: both sides time on a GPU")
    problem = load_problem(arguments.problem)
    submission = arguments.submission.resolve()
    extra = arguments.extra
    if extra is None:
        extra = [ROOT / "hopper_stand_in.py"] if submission == (ROOT / "submission.py").resolve() else []
    cases_text = problem.benchmarks_file.read_text()
    folder = eval_folder(arguments.eval_dir, problem, submission, extra, cases_text)
    device, commit = torch.cuda.get_device_name(0), git_commit()
    print(f"--official against the competition's eval on {device} at {commit}, {problem.name}, {submission.name}", flush=True)
    sides: dict[str, list[list[float]]] = {"eval": [], "official": []}
    try:
        for turn in range(arguments.turns):
            sides["eval"].append(run_eval(folder))
            sides["official"].append(run_official(problem, submission, folder / "benchmarks.txt"))
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
                                             "problem": problem.name, "submission": submission.name,
                                             "turns": sides, "shapes": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
