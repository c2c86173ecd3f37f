"""A loop leaning on the service while it is hurt: candidates sent in batches under idempotency
keys, some cancelled (queued and running), a judge process killed (SIGKILL) mid-candidate, the
front killed (SIGKILL, then later SIGTERM) mid-batch and started again on the same store each
time; then every accepted
candidate checked: it ended (done or cancelled) once, its verdict the expected one, its id
never another's, and each verdict judged stored once.

    python experiments/service_chaos/run.py                 # `serve --device cpu`, real judges
    python experiments/service_chaos/run.py --fake          # tests/fake_front.py: judges without torch, many candidates
    python experiments/service_chaos/run.py --fake --lanes 3   # the same, each judge a GPU's three lanes
"""

import argparse
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
ONE_CASE = "m: 128; n: 256; k: 256; l: 1; seed: 1111\n"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Front:
    def __init__(self, fake: bool, store: Path, judges: int, lanes: int = 1):
        self.port = free_port()
        if fake:
            command = [sys.executable, str(ROOT / "tests" / "fake_front.py"), str(store), str(self.port), str(judges), str(lanes)]
        else:
            command = [sys.executable, "-m", "harness", "serve", "--device", "cpu", "--judges", str(judges), "--store", str(store),
                       "--port", str(self.port), "--candidates-dir", str(FIXTURES)]
        self.process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)
        deadline = time.monotonic() + 600
        while True:
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the front did not start")
            time.sleep(0.2)

    def judges(self) -> list[dict]:
        return self.http.get("/status").json()["judges"]

    def kill(self, sent: signal.Signals = signal.SIGKILL) -> None:
        self.process.send_signal(sent)
        self.process.wait()
        self.http.close()


def candidate(fake: bool, index: int) -> tuple[dict, bool | None]:
    """The request of candidate `index` (every source its own) and whether it should pass (None:
    it hangs, and is cancelled)."""
    kind = ("pass", "pass", "wrong", "hang")[index % 4]
    if fake:
        source = f"# candidate {index}\n" + {"pass": "# sleep 0.4\n", "wrong": "# sleep 0.4\nwrong\n", "hang": "# sleep 60\n"}[kind]
        request = {"source": source, "name": f"c{index}.py", "tests": "a\nb\n"}
    else:
        fixture = {"pass": "torch_submission.py", "wrong": "broken_wrong_values.py", "hang": "broken_hangs.py"}[kind]
        request = {"source": (FIXTURES / fixture).read_text() + f"\n# candidate {index}\n", "name": f"c{index}.py",
                   "tests": ONE_CASE, "timeout_s": 120.0}
    return {**request, "idempotency_key": f"chaos {index}"}, {"pass": True, "wrong": False, "hang": None}[kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true")
    parser.add_argument("--candidates", type=int, default=None, help="[400 with --fake, 40 without]")
    parser.add_argument("--judges", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lanes", type=int, default=1, help="with --fake: each judge a GPU's lanes, replenished together [1]")
    arguments = parser.parse_args()
    if arguments.lanes > 1 and not arguments.fake:
        parser.error("--lanes needs --fake: a CPU's real judges do not replenish together")
    count = arguments.candidates or (400 if arguments.fake else 40)
    store = Path(tempfile.mkdtemp(prefix="service-chaos-")) / "verdicts.sqlite"
    requests = [candidate(arguments.fake, index) for index in range(count)]
    started = time.monotonic()
    front = Front(arguments.fake, store, arguments.judges, arguments.lanes)
    ids: dict[int, str] = {}
    events = {"front_killed": 0, "front_terminated": 0, "judges_killed": 0, "cancels_sent": 0, "cancels_of_running": 0, "batches_sent_again": 0}
    pending = list(range(count))
    while pending or any(front.http.get(f"/candidates/{ids[index]}").json()["state"] not in ("done", "cancelled")
                         for index in ids if requests[index][1] is None):
        chunk, pending = pending[:arguments.batch], pending[arguments.batch:]
        if chunk:
            try:
                sent = front.http.post("/batches", json={"candidates": [requests[index][0] for index in chunk]})
                ids.update(zip(chunk, sent.json()["ids"]))
            except httpx.TransportError:
                pending = chunk + pending
                events["batches_sent_again"] += 1
                continue
        # Cancel every hanging candidate once it runs (or while it is queued, every other one).
        for index, identifier in list(ids.items()):
            if requests[index][1] is None:
                state = front.http.get(f"/candidates/{identifier}").json()["state"]
                if state == "running" or (state == "queued" and index % 8 == 3):
                    front.http.delete(f"/candidates/{identifier}")
                    events["cancels_sent"] += 1
                    events["cancels_of_running"] += state == "running"
        progress = len(ids) / count
        busy = [judge for judge in front.judges() if judge.get("busy_with") and judge.get("pid")]
        if events["judges_killed"] < 2 and progress > (0.25 if not events["judges_killed"] else 0.75) and busy:
            os.kill(busy[0]["pid"], signal.SIGKILL)
            events["judges_killed"] += 1
        if not events["front_killed"] and progress > 0.5 and busy:
            front.kill()
            events["front_killed"] += 1
            front = Front(arguments.fake, store, arguments.judges, arguments.lanes)
        if not events["front_terminated"] and progress > 0.8 and busy:
            front.kill(signal.SIGTERM)
            events["front_terminated"] += 1
            front = Front(arguments.fake, store, arguments.judges, arguments.lanes)
        time.sleep(0.2 if arguments.fake else 1.0)
    while True:
        views = {index: front.http.get(f"/candidates/{identifier}").json() for index, identifier in ids.items()}
        if all(view["state"] in ("done", "cancelled") for view in views.values()):
            break
        time.sleep(1.0)
    judges = front.judges()
    front.kill()
    with sqlite3.connect(store) as database:
        stored = dict(database.execute("SELECT submission_sha256, count(*) FROM verdicts GROUP BY submission_sha256").fetchall())
        rows = dict(database.execute("SELECT state, count(*) FROM candidates GROUP BY state").fetchall())
    judged = [view for view in views.values() if view["state"] == "done" and view["error_class"] == "verdict" and not view["cached"]]
    wrong = [view["id"] for index, view in views.items()
             if view["state"] == "done" and view["error_class"] == "verdict" and view["passed"] is not requests[index][1]]
    summary = {
        "candidates_accepted": len(ids), "distinct_ids": len(set(ids.values())), "table_rows": rows,
        "ended": sum(view["state"] in ("done", "cancelled") for view in views.values()),
        "done_verdict": len(judged), "cancelled": sum(view["state"] == "cancelled" for view in views.values()),
        "infrastructure": sum(view["error_class"] == "infrastructure" for view in views.values()),
        "infrastructure_in_the_store": [view["id"] for view in views.values()
                                        if view["error_class"] == "infrastructure" and stored.get(view["sha256"])],
        "judged_again_after_a_fault": sum(view["attempts"] > 1 for view in views.values()),
        "verdicts_not_as_expected": wrong,
        "hanging_not_cancelled": [view["id"] for index, view in views.items() if requests[index][1] is None and view["state"] != "cancelled"],
        "verdicts_stored_once": sum(stored.get(view["sha256"], 0) == 1 for view in judged),
        "verdicts_stored_twice_or_more": [view["id"] for view in judged if stored.get(view["sha256"], 0) > 1],
        "verdicts_not_stored": [view["id"] for view in judged if not stored.get(view["sha256"])],
        "judge_starts_after_restart": {judge["judge"]: judge.get("starts") for judge in judges},
        **events, "wall_s": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary, indent=1))
    ok = (summary["ended"] == summary["candidates_accepted"] == summary["distinct_ids"] == count
          and not wrong and not summary["verdicts_stored_twice_or_more"] and not summary["hanging_not_cancelled"]
          and not summary["infrastructure_in_the_store"])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
