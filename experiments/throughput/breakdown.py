"""Where a test-mode candidate's time goes in the service, and what lanes of one device share.

The fast torch file's test is judged `--candidates` times through the service's front (in this
process, as experiments/throughput/run.py does), by one judge and then by `--lanes` judges of one
GPU (or CPU slot). Each judge is the service's own (`python -m harness.service.judge`'s `main`),
started through this file so that the judge's steps are timed from outside its code: the
functions below are wrapped before the judge starts, and each judge writes, per candidate, the
seconds of each step and its own CPU seconds.

What it prints, per lane count: the set's wall time and rate; per candidate, the mean seconds of
each step (the front's queue, and its hand-over, reply and store (`front_to_judge_and_back_s`:
the candidate's time in the front less the judge's), the static check, the run's set-up, each case's
phases as the run's document names them: `references` the judge's inputs and references,
`start` until the worker holds them, `import`, `first call`, `checks`; the run's end, the sweeps),
the judge's CPU seconds, and the whole machine's busy CPU seconds over the set. A step whose
mean grows with the lanes is one the lanes wait on each other for (the cores, the device, a
lock); the machine's CPU seconds per candidate against its cores bound the rate any number of
lanes can reach. Each set is timed once the judges' waiting workers have started
(experiments/throughput/machine.py `settle`).
`--hold-replacements` keeps the judges from starting workers during the sets (the waiting ones
serve them), which tells the replacements' starts' share from the runs'. `--worker-starts N` also times N bare starts of a worker's parts outside the judge (the
interpreter, torch's import, the device's context, each alone and under the sandbox's
bubblewrap).

    python experiments/throughput/breakdown.py --device cpu --tests FILE --lanes 2 --candidates 8
    python experiments/throughput/breakdown.py --gpus 0 --lanes 4 --candidates 24 --unsafe-sandbox
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import machine  # noqa: E402  (experiments/throughput/machine.py, beside this file)

SPANS_ENV = "BREAKDOWN_SPANS_DIR"  # where each instrumented judge writes its candidates' steps
HOLD_ENV = "BREAKDOWN_HOLD_REPLACEMENTS"  # set: the judges start no waiting worker once the set begins
FAST_TORCH = "tests/fixtures/torch_submission.py"

# The judge's steps timed, by (module, attribute path, label); nested steps are timed inside
# their callers' (a worker's replacement starting inside `take worker`).
STEPS = (
    ("harness.api", "prepare", "prepare (static check, cases)"),
    ("harness.api", "precheck", "kernelguard"),
    ("harness.judge.modes", "protect_the_judge", "run set-up: protection"),
    ("harness.judge.modes", "Sandbox", "run set-up: sandbox"),
    ("harness.judge.modes", "JudgeClock", "run set-up: clock"),
    ("harness.judge.modes", "SharedPool", "run set-up: shared memory"),
    ("harness.judge.modes", "_watch_the_judges_code", "run set-up: code watch"),
    ("harness.service.pool", "WorkerPool.take", "take worker"),
    ("harness.service.pool", "WorkerPool._start", "take worker: replacement's launch"),
    ("harness.judge.isolation", "WorkerProcess.begin_case", "begin case"),
    ("harness.judge.modes", "Executor._release_inputs", "release inputs"),
    ("harness.judge.integrity", "CodeWatch.changed", "code watch: after each case"),
    ("harness.judge.modes", "end_strays", "end strays"),
    ("harness.judge.modes", "_end_processes", "run end: workers closed"),
    ("harness.judge.dev_shm", "sweep_own_dev_shm", "/dev/shm sweep"),
    ("harness.judge.dev_shm", "full_after_sweep", "/dev/shm sweep"),
    ("harness.results.document", "run_document", "document"),
)


class Recorder:
    """Seconds per step of the candidate the judge runs now (one at a time per judge)."""

    def __init__(self):
        self.steps: dict[str, float] = {}

    def wrap(self, function, label):
        @functools.wraps(function)
        def timed(*arguments, **keywords):
            started = time.monotonic()
            try:
                return function(*arguments, **keywords)
            finally:
                self.steps[label] = self.steps.get(label, 0.0) + time.monotonic() - started
        return timed


def instrument(recorder: Recorder) -> None:
    import importlib

    for module_name, path, label in STEPS:
        owner = importlib.import_module(module_name)
        *parents, attribute = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        original = owner.__dict__[attribute] if isinstance(owner, type) else getattr(owner, attribute)
        if isinstance(original, (staticmethod, classmethod)):
            continue
        setattr(owner, attribute, recorder.wrap(original, label))
    from harness.judge.cases import RUNNERS

    for kind in list(RUNNERS):
        RUNNERS[kind] = recorder.wrap(RUNNERS[kind], "cases: the judge's side and the worker's calls")


def instrumented_judge() -> None:
    """`python -m harness.service.judge`, its steps timed, each candidate's written to SPANS_ENV."""
    from harness.service import judge as service_judge

    recorder = Recorder()
    instrument(recorder)
    out = Path(os.environ[SPANS_ENV]) / f"judge-{os.getpid()}.jsonl"
    original_run = service_judge.Judge.run

    def run(self, request):
        recorder.steps = {}
        cpu = time.process_time()
        began = time.time()
        reply = original_run(self, request)
        cases = reply["document"].get("cases") or []
        phases: dict[str, float] = {}
        for case in cases:
            for phase, seconds in (case.get("phases_s") or {}).items():
                phases[phase] = phases.get(phase, 0.0) + seconds
        with out.open("a") as spans:
            spans.write(json.dumps({"id": request.get("id"), "began": began, "ended": time.time(),
                                    "judge_run_s": reply["judge"]["wall_s"], "steps": recorder.steps,
                                    "case_phases": phases, "judge_cpu_s": time.process_time() - cpu,
                                    "passed": reply["document"].get("passed")}) + "\n")
        return reply

    service_judge.Judge.run = run
    if os.environ.get(HOLD_ENV):
        hold_replacements(service_judge.Judge)
    service_judge.main()


def hold_replacements(judge_class) -> None:
    """No worker starts in the judge once its first run begins: each run takes one of the workers
    started before (a run that finds none starts its own), so that a set shows what the lanes'
    runs cost one another without the replacements' starts (torch's import, the device's context)
    beside them."""
    from harness.service.pool import WorkerPool

    began = []
    prime, run = WorkerPool.prime, judge_class.run

    def held_prime(self, echo=False):
        if not began:
            prime(self, echo)

    def first_run(self, request):
        began.append(True)
        return run(self, request)

    WorkerPool.prime = held_prime
    judge_class.run = first_run


def judged_set(device: str, visible: str | None, lanes: int, count: int, tests_text: str | None, settle_s: tuple,
               spans_dir: Path, hold: bool) -> dict:
    from harness.results.store import Store
    from harness.service.candidates import Candidates
    from harness.service.front import Service
    from harness.service.judges import LocalJudge

    program = (sys.executable, str(Path(__file__).resolve()), "--instrumented-judge")
    environment = {**os.environ, SPANS_ENV: str(spans_dir), **({HOLD_ENV: "1"} if hold else {})}
    store = spans_dir / "verdicts.sqlite"  # the queue and the verdicts in SQLite, as `serve` keeps them
    service = Service([LocalJudge(device, visible_devices=visible, lane=lane, lanes=lanes, program=program, environment=environment)
                       for lane in range(lanes)], Store(store), candidates=Candidates(store), candidate_dirs=[ROOT])
    service.start()
    try:
        settled_s, quiet = machine.settle(*settle_s)
        print(f"{lanes} lane(s): settled {settled_s:.0f} s{'' if quiet else ', the machine still busy'}", flush=True)
        started, busy = time.monotonic(), machine.busy_s()
        ids = [service.submit(path=str(ROOT / FAST_TORCH), mode="test", tests=tests_text, rerun=True) for _ in range(count)]
        views = [service.get(candidate, wait_s=3600) for candidate in ids]
        wall_s, busy_s = time.monotonic() - started, machine.busy_s() - busy
    finally:
        service.close()
    spans = {}
    for path in spans_dir.glob("judge-*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            spans[record["id"]] = record
    rows = []
    for view in views:
        record = spans.get(view["id"], {})
        front_s = view["finished_at"] - view["started_at"]
        rows.append({"id": view["id"], "passed": view["passed"], "queued_s": view["started_at"] - view["submitted_at"],
                     "front_to_judge_and_back_s": front_s - record.get("judge_run_s", front_s), **record})
    return {"lanes": lanes, "wall_s": wall_s, "per_hour": count / wall_s * 3600, "machine_cpu_s_per_candidate": busy_s / count,
            "candidates": rows}


def summary(figures: dict) -> dict:
    """Mean seconds per candidate of each step."""
    rows = figures["candidates"]
    means: dict[str, float] = {}
    means["machine_cpu_s (all processes)"] = figures["machine_cpu_s_per_candidate"]
    for key in ("queued_s", "front_to_judge_and_back_s", "judge_run_s", "judge_cpu_s"):
        means[key] = statistics.fmean(row.get(key, 0.0) for row in rows)
    for field in ("steps", "case_phases"):
        labels = {label for row in rows for label in row.get(field, {})}
        for label in sorted(labels):
            means[f"{field}: {label}"] = statistics.fmean(row.get(field, {}).get(label, 0.0) for row in rows)
    return means


WORKER_PARTS = {
    "interpreter": "pass",
    "interpreter, torch imported": "import torch",
    "interpreter, torch imported, the device's context made": "import torch; torch.cuda.synchronize()",
}


def worker_starts(device: str, count: int) -> dict:
    """Mean wall seconds of a worker's start parts, bare and under bubblewrap (a root of the
    system's folders read-only, the sandbox's namespaces): what each fresh worker costs."""
    import shutil

    parts = {name: code for name, code in WORKER_PARTS.items() if device.startswith("cuda") or "device" not in name}
    wrappers = {"bare": []}
    bwrap = shutil.which("bwrap")
    if bwrap:
        wrappers["bubblewrap"] = [bwrap, "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--proc", "/proc",
                                  "--tmpfs", "/tmp", "--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
                                  "--die-with-parent", "--new-session"]
    seconds = {}
    for wrapper_name, wrapper in wrappers.items():
        for name, code in parts.items():
            taken = []
            for _ in range(count):
                started = time.monotonic()
                subprocess.run([*wrapper, sys.executable, "-I", "-B", "-c", code], check=True, capture_output=True)
                taken.append(time.monotonic() - started)
            seconds[f"{wrapper_name}: {name}"] = statistics.fmean(taken)
    return seconds


def main() -> None:
    if "--instrumented-judge" in sys.argv:
        sys.argv.remove("--instrumented-judge")
        instrumented_judge()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--gpus", default="0", help="the GPU the lanes share [0]")
    parser.add_argument("--lanes", type=int, default=4)
    parser.add_argument("--candidates", type=int, default=24)
    parser.add_argument("--tests", type=Path, default=None, help="a tests file [the official tests]")
    parser.add_argument("--settle-s", type=float, default=15.0,
                        help="seconds at least for the judges' waiting workers to start, not counted [15]")
    parser.add_argument("--settle-max-s", type=float, default=120.0,
                        help="seconds at most, waiting past --settle-s for the machine to be quiet [120]")
    parser.add_argument("--worker-starts", type=int, default=3, help="bare starts of each worker part to time (0: none)")
    parser.add_argument("--hold-replacements", action="store_true",
                        help="the judges start no waiting worker during the sets: with --candidates at most ten "
                             "(a judge's waiting workers), the runs' cost to one another without the replacements' starts")
    parser.add_argument("--unsafe-sandbox", action="store_true", help="as `serve --unsafe-sandbox`")
    parser.add_argument("--out", type=Path, default=None, help="the figures' JSON")
    arguments = parser.parse_args()
    if arguments.unsafe_sandbox:
        from harness.judge.sandbox import UNSAFE_ENV

        os.environ[UNSAFE_ENV] = "1"
    visible = arguments.gpus if arguments.device == "cuda" else None
    tests_text = arguments.tests.read_text() if arguments.tests else None
    figures = {"device": arguments.device, "cores": os.cpu_count(), "sets": {}}
    for lanes in sorted({1, arguments.lanes}):
        with tempfile.TemporaryDirectory(prefix="breakdown-") as spans_dir:
            figures["sets"][lanes] = judged = judged_set(arguments.device, visible, lanes, arguments.candidates, tests_text,
                                                         (arguments.settle_s, arguments.settle_max_s), Path(spans_dir),
                                                         arguments.hold_replacements)
        judged["means_s"] = summary(judged)
        failed = sum(not row["passed"] for row in judged["candidates"])
        print(f"{lanes} lane(s): {arguments.candidates} candidates in {judged['wall_s']:.1f} s, {judged['per_hour']:.0f} an hour"
              f"{f', {failed} NOT PASSED' if failed else ''}", flush=True)
    sets = figures["sets"]
    labels = list(sets[1]["means_s"])
    labels += [label for lanes in sets for label in sets[lanes]["means_s"] if label not in labels]
    print(f"{'mean seconds per candidate':<62}" + "".join(f"{f'{lanes} lane(s)':>12}" for lanes in sets))
    for label in labels:
        print(f"{label:<62}" + "".join(f"{sets[lanes]['means_s'].get(label, 0.0):>12.3f}" for lanes in sets))
    if arguments.lanes != 1:
        print(f"{arguments.lanes} lanes: {sets[arguments.lanes]['per_hour'] / sets[1]['per_hour']:.2f}x one")
    if arguments.worker_starts:
        figures["worker_start_s"] = worker_starts(arguments.device, arguments.worker_starts)
        for name, seconds in figures["worker_start_s"].items():
            print(f"worker start, {name}: {seconds:.3f} s")
    if arguments.out:
        arguments.out.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
