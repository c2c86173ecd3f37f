"""Six lanes on GPU 0 under a mixed test-mode load (the fast torch file, a wrong one and one that
raises, 90 candidates), four lane judges killed (SIGKILL) mid-set, some mid-run, some while their
lanes replenish: every candidate must end once, with the one-shot command's verdict. Prints the
set's wall time, its states, reply classes and attempts, the verdicts not the one-shot command's,
and each lane's starts.

    python experiments/throughput/lanes_soak.py
"""
import collections
import os
import signal
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments" / "throughput"))
from harness.judge.sandbox import UNSAFE_ENV  # noqa: E402

os.environ[UNSAFE_ENV] = "1"  # as `make throughput ARGS=--unsafe-sandbox`: the judges' environment, never a worker's
from run import GPU_SET, one_shot, verdict  # noqa: E402
from harness.service.front import Service  # noqa: E402
from harness.service.judges import LocalJudge  # noqa: E402

KILLS = ((6, 3), (5, 5), (4, 1), (3, 4))  # (seconds after the previous kill, lane)


def expected_verdicts(entries) -> dict:
    """Each file's one-shot verdict (exit status, cases' statuses and messages)."""
    found = {}
    for entry in entries:
        shot = one_shot(entry, "cuda", "0", None)
        found[entry[0]] = (shot["exit_status"], verdict(shot["document"], "test"))
        print("one-shot", entry[0], shot["exit_status"], f"{shot['wall_s']:.1f} s", flush=True)
    return found


def kill_lanes(service: Service, lanes: list) -> None:
    for delay, lane in KILLS:
        time.sleep(delay)
        process = lanes[lane]._process
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            print("killed lane", lane, "busy with", lanes[lane].busy_with, "gate", service.status()["devices_held"], flush=True)


def main() -> None:
    entries = [entry for entry in GPU_SET if entry[0] in ("fast torch", "wrong", "raises")]
    expected = expected_verdicts(entries)
    lanes = [LocalJudge("cuda", visible_devices="0", lane=lane, lanes=6) for lane in range(6)]
    service = Service(lanes, candidate_dirs=[ROOT])
    service.start()
    try:
        time.sleep(10)  # the lanes' waiting workers started
        plan = [entries[0]] * 3 + [entries[1], entries[0], entries[2]]
        labels = [plan[index % len(plan)] for index in range(90)]
        started = time.monotonic()
        ids = service.submit_batch([{"path": str(ROOT / path), "mode": mode, "rerun": True, **options}
                                    for _, path, mode, options in labels])
        threading.Thread(target=kill_lanes, args=(service, lanes), daemon=True).start()
        views = [service.get(identifier, wait_s=900) for identifier in ids]
        wall = time.monotonic() - started
        differ = [(label[0], view["state"], view["error_class"], view["exit_status"]) for label, view in zip(labels, views)
                  if (view["exit_status"], verdict(view["document"] or {}, "test")) != expected[label[0]]]
        print(f"{len(ids)} candidates in {wall:.1f} s; states {collections.Counter(v['state'] for v in views)}; classes "
              f"{collections.Counter(v['error_class'] for v in views)}; attempts {collections.Counter(v['attempts'] for v in views)}")
        print("not the one-shot verdict:", len(differ), differ[:5])
        print("judged again alone:", service.judged_again_alone, "retried:", service.retried)
        print("lane starts:", [judge.starts for judge in lanes], "healthy:", service.healthy())
    finally:
        service.close()


if __name__ == "__main__":
    main()
