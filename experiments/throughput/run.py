"""`make throughput`: a fixed set of candidates judged by the one-shot commands and through the
service's judges, on one GPU and on every GPU asked for; prints each candidate's wall time, the
candidates judged per GPU-hour, and whether every verdict is the one-shot command's.

Three phases, on the same machine in one run:
1. today: each candidate's one-shot command (`python -m harness test|benchmark --json`), as many
   at once as there are GPUs, each on a GPU of its own (CUDA_VISIBLE_DEVICES); a candidate's
   GPU-seconds are its command's wall time;
2. the service on one GPU: its judge started first and its waiting workers given --settle-s to
   start (not counted), then the set judged;
3. the service on every GPU: the set once per GPU, judged by a judge per GPU;
4. test mode on one GPU: `--test-copies` of the fast torch file's test, judged by one judge, then
   by `--test-lanes` judges on that GPU side by side (harness/service/lanes.py): candidates per
   GPU-hour on the phases' wall times, the lanes' rate against one judge's (the service's
   one-at-a-time rate), each verdict checked against the one-shot command's. Each set is timed
   once its judges' waiting workers have started (machine.py); experiments/throughput/breakdown.py
   says where a test-mode candidate's time goes.
   `--test-mode-only` runs this phase alone (after the fast torch file's one-shot command).
Today's rate is set against phase 3's, per GPU: both keep every GPU busy at once. Each side is
charged the GPU-seconds it was busy (`Phase`): a command its wall time, a judge the time from the
set's start to its last candidate's end; the ratio of the phases' wall times, which also counts
the judges idle while the last candidates of a finite set end, is printed beside it.
The front is used in this process (harness/service/front.py), without HTTP, so that the figures
need neither the `service` extra nor Ray: the judges are the service's own processes.

    python experiments/throughput/run.py --gpus 0,1,2,3
    python experiments/throughput/run.py --device cpu --judges 2 --tests shapes/small.txt
    python experiments/throughput/run.py --test-mode-only --test-lanes 6
"""

import argparse
import concurrent.futures
import dataclasses
import itertools
import json
import os
import queue
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import machine  # noqa: E402  (experiments/throughput/machine.py, beside this file)
from harness.judge.sandbox import UNSAFE_ENV  # noqa: E402
from harness.shared.paths import git_commit  # noqa: E402
from harness.service.front import Service  # noqa: E402
from harness.service.judges import LocalJudge  # noqa: E402

FIXTURES = "tests/fixtures"
HANG = {"timeout_s": 10.0, "stop_on_first_failure": True}
# (label, file, mode, options): the same on both sides. The kit's CuTeDSL file needs a GPU. The
# cheat patches the judge's functions in its own process, which a test catches on any device.
GPU_SET = [
    ("kit CuTeDSL", "submission.py", "test", {}),
    ("kit CuTeDSL", "submission.py", "benchmark", {}),
    ("fast torch", f"{FIXTURES}/torch_submission.py", "test", {}),
    ("slow torch", f"{FIXTURES}/template_torch_submission.py", "test", {}),
    ("wrong", f"{FIXTURES}/broken_wrong_values.py", "test", {}),
    ("raises", f"{FIXTURES}/broken_raises.py", "test", {}),
    ("hangs", f"{FIXTURES}/broken_hangs.py", "test", HANG),
    ("cheat", f"{FIXTURES}/cheat_patches_the_judge.py", "test", {}),
]
CPU_SET = [entry for entry in GPU_SET if entry[1] != "submission.py"]
COMPETITION_EVAL_S = 50.0  # the competition's eval on the kit's file, test and benchmark, on an H200
GOALS = {"per_gpu_hour_vs_today": 3.0, "all_gpus_vs_one": 3.6, "test_lanes_vs_one": 2.0}
FAST_TORCH = next(entry for entry in GPU_SET if entry[0] == "fast torch")


def one_shot(entry, device: str, visible: str | None, tests: Path | None) -> dict:
    label, path, mode, options = entry
    command = [sys.executable, "-m", "harness", mode, "--json", "--device", device, "--submission", path]
    if tests is not None and mode == "test":
        command.insert(4, str(tests))
    if mode == "benchmark":
        command.append("--no-record")
    if options.get("timeout_s"):
        command += ["--timeout", str(options["timeout_s"])]
    if options.get("stop_on_first_failure"):
        command.append("--stop-on-first-failure")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}
    if visible is not None:
        environment["CUDA_VISIBLE_DEVICES"] = visible
    started = time.monotonic()
    completed = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
    wall_s = time.monotonic() - started
    try:
        document = json.loads(completed.stdout)
    except json.JSONDecodeError:
        document = {"error": completed.stderr[-2000:], "cases": []}
    return {"wall_s": wall_s, "document": document, "exit_status": completed.returncode}


def verdict(document: dict, mode: str) -> list:
    """What must match: each case's status, and outside timed modes its message (times and the
    folders a path names left out: the one-shot command names the file as given, the service
    by its name)."""
    cases = document.get("cases") or []
    if mode != "test":
        return [case.get("status") for case in cases]
    return [(case.get("status"), re.sub(r"\d+\.\d+ s|\S*/", "", case.get("message") or "")) for case in cases]


def why_not_passed(document: dict) -> list:
    """Each case's status and, where it did not pass, the judge's message: a differing verdict's
    reason, kept whole (a timed mode's verdict compares statuses alone)."""
    return [[case.get("status"), case.get("message") if case.get("status") != "pass" else None]
            for case in document.get("cases") or []]


def means_ns(document: dict) -> list:
    """A timed run's judged mean per case (None for a case without one)."""
    return [(case.get("stats") or {}).get("mean_ns") for case in document.get("cases") or []]


@dataclasses.dataclass
class Phase:
    """A service phase: its wall time, each candidate's view, and the GPU-seconds its judges were
    busy, each judge from the phase's start to the end of its last candidate. A finite set leaves
    the judges that finish first idle while the others end their last candidates; a loop that
    keeps the service fed never sees that tail, and today's GPU-seconds (each command's own wall
    time) count no idle either, so the rates per GPU-hour are taken on the busy GPU-seconds."""

    wall_s: float
    views: list
    busy_gpu_s: float

    def schedule(self, entries, started_at: float) -> list[dict]:
        return [{"candidate": f"{label} {mode}", "judge": view["judge"], "start_s": view["started_at"] - started_at,
                 "end_s": view["finished_at"] - started_at}
                for (label, _, mode, _), view in zip(itertools.cycle(entries), self.views)]


def judged(service: Service, entries, copies: int, judges: int, tests: Path | None) -> tuple[Phase, float]:
    """`copies` times the set judged by `judges` judges (its Phase), and when it started (epoch s)."""
    tests_text = tests.read_text() if tests is not None else None
    started, started_at = time.monotonic(), time.time()
    ids = [service.submit(path=str(ROOT / path), mode=mode, tests=tests_text if mode == "test" else None, rerun=True, **options)
           for _ in range(copies) for _, path, mode, options in entries]
    views = [service.get(candidate, wait_s=3600) for candidate in ids]
    wall_s = time.monotonic() - started
    return Phase(wall_s, views, sum(end - started_at for end in _last_ends(views, judges, started_at))), started_at


def _last_ends(views: list, judges: int, started_at: float) -> list[float]:
    """When each judge ended its last candidate. A judge takes the next candidate as it ends one,
    so each start is matched to the judge that had just become free (judges on one kind of
    device may share a name)."""
    free_at = [started_at] * judges
    for view in sorted(views, key=lambda view: view["started_at"]):
        free = [index for index in range(judges) if free_at[index] <= view["started_at"]]
        judge = max(free, key=free_at.__getitem__) if free else min(range(judges), key=free_at.__getitem__)
        free_at[judge] = view["finished_at"]
    return free_at


def start_service(visible: list[str | None], device: str, settle_s: float) -> tuple[Service, float]:
    """The service's judges started, then `settle_s` for their waiting workers to start: a
    service that runs for hours has its pools full when a candidate comes, which the set measures
    and not the judges' cold start."""
    started = time.monotonic()
    service = Service([LocalJudge(device, visible_devices=one) for one in visible], candidate_dirs=[ROOT])
    service.start()
    start_s = time.monotonic() - started
    time.sleep(settle_s)
    return service, start_s


def test_mode_rates(device: str, visible: str | None, lanes: int, copies: int, settle_s: tuple, tests: Path | None,
                    expected: dict) -> dict:
    """The fast torch file's test, `copies` times, by one judge (the service's one-at-a-time
    rate) and by `lanes` judges of one GPU: each's wall time, candidates per GPU-hour, and the
    candidates whose verdict is not `expected`'s (the one-shot command's run). Each set is timed
    once its judges' waiting workers have started (machine.py `settle`)."""
    _, path, mode, options = FAST_TORCH
    tests_text = tests.read_text() if tests is not None else None
    wanted = (expected["exit_status"], verdict(expected["document"], mode))
    figures = {}
    for count in (1, lanes):
        judges = [LocalJudge(device, visible_devices=visible, lane=lane, lanes=count) for lane in range(count)]
        service = Service(judges, candidate_dirs=[ROOT])
        service.start()
        # Whether the judges' workers come from a template (harness/judge/templates.py), as their ready lines say.
        templates = sorted({str((judge.sandbox or {}).get("template", "not reported")) for judge in judges})
        try:
            settled_s, quiet = machine.settle(*settle_s)
            started = time.monotonic()
            ids = [service.submit(path=str(ROOT / path), mode=mode, tests=tests_text, rerun=True, **options) for _ in range(copies)]
            views = [service.get(candidate, wait_s=3600) for candidate in ids]
            wall_s = time.monotonic() - started
        finally:
            service.close()
        differing = [why_not_passed(view["document"] or {}) for view in views
                     if (view["exit_status"], verdict(view["document"] or {}, mode)) != wanted]
        figures[f"lanes_{count}"] = {"lanes": count, "wall_s": wall_s, "per_gpu_hour": copies / wall_s * 3600,
                                     "settled_s": settled_s, "settled_quiet": quiet, "differing": differing,
                                     "template": templates}
        print(f"test mode, {copies} x fast torch, {count} lane(s) on one GPU (template: {'; '.join(templates)}): {wall_s:.1f} s, "
              f"{copies / wall_s * 3600:.0f} per GPU-hour, {len(differing)} verdict(s) not the one-shot command's "
              f"(timed after {settled_s:.0f} s{'' if quiet else ' with the machine still busy'})", flush=True)
    one, many = figures["lanes_1"], figures[f"lanes_{lanes}"]
    figures["lanes_vs_one"] = many["per_gpu_hour"] / one["per_gpu_hour"]
    figures["copies"] = copies
    figures["differing"] = len(one["differing"]) + len(many["differing"])
    goal = GOALS["test_lanes_vs_one"]
    print(f"test mode: {lanes} lanes {many['per_gpu_hour']:.0f} per GPU-hour against the one-at-a-time rate (one lane) "
          f"{one['per_gpu_hour']:.0f}: {figures['lanes_vs_one']:.2f}x, goal {goal}x "
          f"{'met' if figures['lanes_vs_one'] >= goal and not figures['differing'] else 'NOT met'}"
          f"{'' if not figures['differing'] else ' (verdicts differ)'}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="all", help="GPU indices, e.g. 0,1,2,3 [all]")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--judges", type=int, default=2, help="--device cpu: judges at once")
    parser.add_argument("--tests", type=Path, default=None, help="a tests file for the test-mode candidates [the official tests]")
    parser.add_argument("--out", type=Path, default=None, help="JSON of the figures [results/throughput/DATE-DEVICE.json]")
    parser.add_argument("--sets", type=int, default=1,
                        help="sets each judge gets in each service phase: more make the finite set's idle tail a smaller share [1]")
    parser.add_argument("--settle-s", type=float, default=15.0,
                        help="seconds for the judges' waiting workers to start before each service phase, not counted [15]")
    parser.add_argument("--settle-max-s", type=float, default=120.0,
                        help="test-mode phase: seconds at most, waiting past --settle-s for the machine to be quiet [120]")
    parser.add_argument("--test-lanes", type=int, default=6, help="judges on one GPU for the test-mode phase [6]")
    parser.add_argument("--test-copies", type=int, default=60,
                        help="the fast torch file's tests in the test-mode phase, enough that the lanes replenish their workers [60]")
    parser.add_argument("--test-mode-only", action="store_true", help="the test-mode phase alone")
    parser.add_argument("--unsafe-sandbox", action="store_true",
                        help="the service's judges serve where the workers' sandbox lacks a layer, as `serve --unsafe-sandbox` "
                             "(a root judge's GPU workers are uid 0 in their own user namespace)")
    arguments = parser.parse_args()
    if arguments.unsafe_sandbox:  # the judges' environment, which never reaches a worker
        os.environ[UNSAFE_ENV] = "1"

    if arguments.device == "cuda":
        import torch

        count = torch.cuda.device_count()
        if not count:
            sys.exit("no CUDA device: `--device cpu` measures the CPU judges")
        gpus = list(range(count)) if arguments.gpus == "all" else [int(index) for index in arguments.gpus.split(",")]
        visible = [str(index) for index in gpus]
        device_name, entries = torch.cuda.get_device_name(gpus[0]), GPU_SET
    else:
        visible, device_name, entries = [None] * arguments.judges, "cpu", CPU_SET
    slots = len(visible)
    commit, date = git_commit(), time.strftime("%Y-%m-%d")
    out = arguments.out or ROOT / "results" / "throughput" / f"{date}-{re.sub(r'[^A-Za-z0-9]+', '-', device_name).strip('-')}-x{slots}.json"
    if arguments.test_mode_only:
        expected = one_shot(FAST_TORCH, arguments.device, visible[0], arguments.tests)
        lanes = test_mode_rates(arguments.device, visible[0], arguments.test_lanes, arguments.test_copies,
                                (arguments.settle_s, arguments.settle_max_s), arguments.tests, expected)
        figures = {"device": device_name, "commit": commit, "date": date, "tests": str(arguments.tests or "official"),
                   "one_shot_fast_torch_s": expected["wall_s"], "test_mode": lanes}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=1, default=str) + "\n")
        print(f"figures written to {os.path.relpath(out, ROOT)}")
        sys.exit(1 if lanes["differing"] else 0)
    print(f"throughput on {slots} x {device_name} at {commit} ({date}); {len(entries)} candidates a set", flush=True)

    # 1. today: one-shot commands, each on a GPU no other command holds meanwhile.
    free = queue.Queue()
    for one in visible:
        free.put(one)

    def on_a_free_gpu(entry) -> dict:
        held = free.get()
        try:
            return one_shot(entry, arguments.device, held, arguments.tests)
        finally:
            free.put(held)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(slots) as pool:
        today = list(pool.map(on_a_free_gpu, entries))
    today_wall = time.monotonic() - started
    today_gpu_s = sum(run["wall_s"] for run in today)
    print(f"today's one-shot commands: {today_wall:.1f} s ({today_gpu_s:.1f} GPU-s)", flush=True)

    # 2. the service on one GPU.
    service, one_start_s = start_service(visible[:1], arguments.device, arguments.settle_s)
    try:
        one, _ = judged(service, entries, arguments.sets, 1, arguments.tests)
    finally:
        service.close()
    one_wall, one_views = one.wall_s, one.views
    print(f"the service on one GPU: {one_wall:.1f} s (its judge started in {one_start_s:.1f} s and settled {arguments.settle_s:g} s before, not counted)", flush=True)
    # 3. the service on every GPU, a set per GPU.
    service, all_start_s = start_service(visible, arguments.device, arguments.settle_s)
    try:
        every, every_started_at = judged(service, entries, arguments.sets * slots, slots, arguments.tests)
    finally:
        service.close()
    all_wall, all_views = every.wall_s, every.views
    print(f"the service on {slots}: {all_wall:.1f} s, its judges busy {every.busy_gpu_s / slots:.1f} s each on average (its judges started in {all_start_s:.1f} s and settled {arguments.settle_s:g} s before, not counted)", flush=True)

    # 4. test mode, side by side on one GPU.
    test_mode = test_mode_rates(arguments.device, visible[0], arguments.test_lanes, arguments.test_copies,
                                (arguments.settle_s, arguments.settle_max_s), arguments.tests, today[entries.index(FAST_TORCH)])

    rows, mismatches = [], []
    for index, ((label, path, mode, _), run) in enumerate(zip(entries, today)):
        served = ([one_views[copy * len(entries) + index] for copy in range(arguments.sets)]
                  + [all_views[copy * len(entries) + index] for copy in range(arguments.sets * slots)])
        expected = verdict(run["document"], mode)
        seen = [(view["exit_status"], verdict(view["document"] or {}, mode)) for view in served]
        differing = [view for view, (status, found) in zip(served, seen) if (status, found) != (run["exit_status"], expected)]
        same = not differing
        if differing:
            mismatches.append({"candidate": f"{label} {mode}", "one_shot": [run["exit_status"], expected],
                               "service": [list(each) for each in seen],
                               "messages": [why_not_passed(view["document"] or {}) for view in differing]})
        service_s = one_views[index]["finished_at"] - one_views[index]["started_at"]
        rows.append({"candidate": label, "file": path, "mode": mode, "one_shot_s": run["wall_s"], "service_s": service_s,
                     "exit_status": run["exit_status"], "statuses": [case.get("status") for case in run["document"].get("cases") or []],
                     "same_verdict": same, "service_phases_s": (one_views[index]["document"] or {}).get("phases_s"),
                     "means_ns": {"one_shot": means_ns(run["document"]), "service": means_ns(one_views[index]["document"] or {})}})
    width = max(len(row["candidate"]) for row in rows) + 10
    print(f"{'candidate':<{width}} {'one-shot s':>10} {'service s':>10}  exit  same verdict")
    for row in rows:
        print(f"{row['candidate'] + ' ' + row['mode']:<{width}} {row['one_shot_s']:>10.1f} {row['service_s']:>10.1f}  {row['exit_status']:>4}  "
              f"{'yes' if row['same_verdict'] else 'NO'}")
    for row in rows:
        if row["mode"] == "benchmark":
            shown = {side: " / ".join("-" if mean is None else f"{mean / 1e3:.2f}" for mean in means)
                     for side, means in row["means_ns"].items()}
            print(f"{row['candidate']} benchmark, judged means (us): one-shot {shown['one_shot']}; service {shown['service']}")
    per_hour_today = len(entries) / today_gpu_s * 3600
    per_hour_one = len(one_views) / one.busy_gpu_s * 3600
    per_hour_all = len(all_views) / every.busy_gpu_s * 3600 * slots  # every GPU's rate together
    scaling = per_hour_all / per_hour_one
    # The same on the phases' wall times, the idle tail of a finite set counted.
    per_hour_all_to_the_end = len(all_views) / all_wall * 3600
    scaling_to_the_end = per_hour_all_to_the_end / (len(one_views) / one_wall * 3600)
    kit = [row["service_s"] for row in rows if row["file"] == "submission.py"]
    figures = {
        "device": device_name, "devices": slots, "commit": commit, "date": date, "tests": str(arguments.tests or "official"),
        "candidates": rows, "today_gpu_s": today_gpu_s, "today_wall_s": today_wall,
        "service_start_s": {"one": one_start_s, "all": all_start_s}, "settle_s": arguments.settle_s, "sets_per_judge": arguments.sets, "one_gpu_wall_s": one_wall, "all_gpus_wall_s": all_wall,
        "busy_gpu_s": {"one": one.busy_gpu_s, "all": every.busy_gpu_s}, "all_gpus_schedule": every.schedule(entries, every_started_at),
        "per_gpu_hour": {"today": per_hour_today, "service_one_gpu": per_hour_one, "service_all_gpus_per_gpu": per_hour_all / slots},
        "per_gpu_hour_vs_today": per_hour_all / slots / per_hour_today, "all_gpus_vs_one": scaling,
        "per_gpu_hour_vs_today_to_the_sets_end": per_hour_all_to_the_end / slots / per_hour_today,
        "all_gpus_vs_one_to_the_sets_end": scaling_to_the_end,
        "kit_test_and_benchmark_s": sum(kit) if kit else None, "mismatches": mismatches, "test_mode": test_mode,
    }
    for count in (1, arguments.test_lanes):
        if test_mode[f"lanes_{count}"]["differing"]:
            mismatches.append({"candidate": f"fast torch test, {count} lane(s)", "messages": test_mode[f"lanes_{count}"]["differing"]})
    print(f"candidates per GPU-hour, every GPU busy (a judge from the set's start to its last candidate's end): today {per_hour_today:.0f}, the service {per_hour_all / slots:.0f} "
          f"({figures['per_gpu_hour_vs_today']:.2f}x, goal {GOALS['per_gpu_hour_vs_today']}x; to the set's end, the idle tail included, "
          f"{figures['per_gpu_hour_vs_today_to_the_sets_end']:.2f}x); the service on one alone {per_hour_one:.0f}")
    print(f"service on {slots}: {per_hour_all:.0f} candidates per hour, {scaling:.2f}x one's (goal {GOALS['all_gpus_vs_one']}x for 4); "
          f"to the set's end, the idle tail included, {scaling_to_the_end:.2f}x")
    if kit:
        print(f"kit's file, test and benchmark through the service: {sum(kit):.1f} s (the competition's eval: {COMPETITION_EVAL_S:.0f} s on an H200)")
    print("every verdict is the one-shot command's" if not mismatches
          else f"VERDICTS DIFFER: {', '.join(mismatch['candidate'] for mismatch in mismatches)} (the JSON has both)")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=1, default=str) + "\n")
    print(f"figures written to {os.path.relpath(out, ROOT)}")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
