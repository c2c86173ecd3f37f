"""Where the time of a batch of calls goes, the competition's way and the kit's.

The same file's batch of calls on one benchmark shape, timed by CUDA events around it and recorded
by CUPTI, two ways in turn on one GPU, so that a difference between `benchmark --official` and the competition's eval
can be placed: at the batch's edges (its events against its first kernel's start and its last
kernel's end), or in the kernels themselves.

- the eval's way: one process draws the batch's inputs as the eval does (the seed 42 on before each
  draw), calls each once on a copy, then per round flushes L2 on its own queue, records its start
  event, makes the calls and records its end event (eval_better_bench.py's loop);
- the kit's way: a judge process and a sandboxed worker (harness/judge/rounds.py), the worker's
  calls on private copies of the inputs as under --official, each round a recorded one (the
  worker's CUPTI around its batch, the marker kernels left out of the figures), so that its
  batch follows the judge's flush alone: a recorded round leaves out --official's overwrite of
  L2 by the batch's own process;
- with --eval-on-copies, the eval's way once more, its calls on copies of its inputs made as the
  worker makes its private ones: whether the inputs' memory moves the kernels.

Both record with the same CUPTI client (harness/runner/gpu_activity.py), which costs each kernel
a little on both sides alike. Per way, the medians over the rounds: the batch by its events (E),
the span from its first kernel's start to its last kernel's end (K), E - K, and the kernels'
mean duration and count.

    python experiments/official_vs_eval/timeline.py --shape 2 --rounds 40
"""

import argparse
import json
import statistics
import subprocess
import sys
import shutil
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.problems import load_problem  # noqa: E402
from harness.results.rows import git_commit  # noqa: E402
from harness.runner.files import make_runner_folder  # noqa: E402

LIMIT_S = 600

# The figures of one round from its event time and its CUPTI records, the same on both sides (the
# worker's marker kernels around a recorded batch left out).
FIGURES = textwrap.dedent("""
    def figures(event_ns, records, calls):
        from harness.judge.activity import MARKER_KERNEL
        kernels = sorted((start, end) for name, _, start, end in records if MARKER_KERNEL not in name)
        span = kernels[-1][1] - kernels[0][0]
        return {"event_ns": event_ns, "span_ns": span, "edges_ns": event_ns - span,
                "kernel_ns": sum(end - start for start, end in kernels) / len(kernels), "kernels": len(kernels) / calls}
""")

EVAL_WAY = FIGURES + textwrap.dedent("""
    import json, sys, torch
    sys.path.append(sys.argv[4])
    from harness.runner import gpu_activity
    from harness.shared.l2_flush import L2Flush
    from reference import generate_input
    from submission import custom_kernel

    def copied(each):
        return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in each)

    args, rounds, flush_bytes, on_copies = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[5] == "copies"
    data = []
    for _ in range(50):
        args["seed"] += 42
        data.append(generate_input(**args))
    if on_copies:  # the calls take copies made as the kit's worker makes its private ones
        data = [copied(each) for each in data]
    for each in data:
        custom_kernel(copied(each))
    torch.cuda.synchronize()
    flush, cupti, out = L2Flush(torch.device("cuda"), flush_bytes), gpu_activity.client(), []
    # The flush's own kernels, known by name: a randn this large runs as many launches, not one.
    with cupti.recording() as flush_records:
        flush()
        torch.cuda.synchronize()
    flush_kernels = {name for name, *_ in flush_records}
    for _ in range(rounds):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with cupti.recording() as records:
            flush()
            start.record()
            for each in data:
                custom_kernel(each)
            end.record()
            torch.cuda.synchronize()
        batch = [record for record in records if record[0] not in flush_kernels]
        out.append(figures(start.elapsed_time(end) * 1e6, batch, len(data)))
    print(json.dumps(out))
""")

KIT_WAY = FIGURES + textwrap.dedent("""
    import json, sys, tempfile
    from pathlib import Path
    sys.path.insert(0, sys.argv[4])
    from harness.judge.dev_shm import own_dev_shm
    own_dev_shm()
    import torch
    from harness.judge.isolation import WorkerProcess, protect_the_judge
    from harness.judge.memory import SharedPool
    from harness.judge.rounds import BATCH, JudgeClock
    from harness.judge.sandbox import Sandbox
    from harness.problems import load_problem
    from harness.runner.files import runner_files

    args, rounds, flush_bytes, submission = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[5])
    problem = load_problem("nvfp4_gemm")
    device = torch.device("cuda", torch.cuda.current_device())
    protect_the_judge()
    sandbox, pool = Sandbox("cuda"), SharedPool(device)
    clock = JudgeClock(device, flush_bytes)
    worker = WorkerProcess(sandbox, tempfile.mkdtemp(), {**runner_files(problem), "submission.py": submission}, "cuda", 42,
                           pool.describe)
    worker.begin_case(LIMIT_S, lambda text: None)
    clock.connect(worker)
    shared = pool.copies([problem.generate(args, seed, "cuda") for seed in problem.eval.batch_seeds(args["seed"])])
    torch.cuda.synchronize()
    worker.request("hold", BATCH, shared, True)  # private copies, as under --official
    worker.request("load")
    clock.round(worker, shared)  # the first calls, outside the figures
    out = []
    for _ in range(rounds):
        round_ = clock.round(worker, shared, record=True)
        out.append(figures(round_.worker_ns, round_.records, len(shared)))
    worker.close()
    sandbox.close()
    print(json.dumps(out))
""").replace("LIMIT_S", str(LIMIT_S))


def run(program: str, cwd: Path, *arguments: str) -> list[dict]:
    completed = subprocess.run([sys.executable, "-c", program, *arguments], cwd=cwd, capture_output=True, text=True,
                               timeout=LIMIT_S)
    if completed.returncode:
        sys.exit(f"a way failed (exit {completed.returncode}):\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submission", type=Path, default=ROOT / "submission.py")
    parser.add_argument("--shape", type=int, default=2, help="index of the benchmark shape [2: the smallest]")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--turns", type=int, default=2, help="runs of each way, alternating [2]")
    parser.add_argument("--eval-on-copies", action="store_true",
                        help="a third way: the eval's, its calls on copies of its inputs as the kit's worker takes them")
    arguments = parser.parse_args()

    import torch

    if not torch.cuda.is_available():
        sys.exit("no CUDA device: both ways time on a GPU")
    problem = load_problem("nvfp4_gemm")
    case = problem.cases("benchmarks")[arguments.shape]
    submission = arguments.submission.resolve()
    folder = make_runner_folder(submission, problem=problem)
    spec, flush_bytes = json.dumps(case.args), str(problem.eval.flush_bytes)
    print(f"where a batch's time goes on {torch.cuda.get_device_name(0)} at {git_commit()}: {case.spec}, "
          f"{submission.name}, {arguments.rounds} rounds a run", flush=True)
    ways = {"eval's way": lambda: run(EVAL_WAY, folder, spec, str(arguments.rounds), flush_bytes, str(ROOT), "own"),
            "kit's way": lambda: run(KIT_WAY, ROOT, spec, str(arguments.rounds), flush_bytes, str(ROOT), str(submission))}
    if arguments.eval_on_copies:
        ways["eval on copies"] = lambda: run(EVAL_WAY, folder, spec, str(arguments.rounds), flush_bytes, str(ROOT), "copies")
    figures = {way: [] for way in ways}
    try:
        for turn in range(arguments.turns):
            for way in (list(ways) if turn % 2 == 0 else list(reversed(ways))):
                figures[way] += ways[way]()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    for way, rounds in figures.items():
        median = {key: statistics.median(round_[key] for round_ in rounds) for key in rounds[0]}
        print(f"{way:>11}: E {median['event_ns'] / 1e3:8.2f} us  K {median['span_ns'] / 1e3:8.2f} us  "
              f"E - K {median['edges_ns'] / 1e3:6.2f} us  kernel {median['kernel_ns'] / 1e3:6.3f} us  "
              f"x {median['kernels']:.2f} a call  ({len(rounds)} rounds)")


if __name__ == "__main__":
    main()
