"""The service's front killed or stopped mid-batch and started again on the same store
(tests/fake_front.py over tests/fake_judge.py: the front's own code, judges that answer at once):
every accepted candidate ends with one verdict, no id is reused, and no judge outlives its front."""

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx", reason="the service's client needs the `service` extra")
pytest.importorskip("fastapi", reason="the service's API needs the `service` extra")

ROOT = Path(__file__).resolve().parent.parent
FRONT = ROOT / "tests" / "fake_front.py"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Front:
    def __init__(self, store: Path, log: Path, judges: int = 2):
        self.port = free_port()
        environment = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_JUDGE_LOG": str(log)}
        self.process = subprocess.Popen([sys.executable, str(FRONT), str(store), str(self.port), str(judges)], cwd=ROOT,
                                        env=environment, stderr=subprocess.PIPE, text=True)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get("/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert self.process.poll() is None and time.monotonic() < deadline, self.process.stderr.read()
            time.sleep(0.1)

    def judge_pids(self) -> list[int]:
        return [judge["pid"] for judge in self.http.get("/status").json()["judges"]]

    def stop(self, signum: int) -> int:
        self.process.send_signal(signum)
        self.http.close()
        return self.process.wait(timeout=60)


def ended(pids: list[int], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
                   for pid in pids):
            return True
        time.sleep(0.05)
    return False


def states(front: Front, ids: list[str]) -> list[str]:
    return [front.http.get(f"/candidates/{identifier}").json()["state"] for identifier in ids]


def batch(count: int, first: int = 0) -> list[dict]:
    return [{"source": f"# candidate {first + index}\n# sleep 0.6\n", "name": f"c{first + index}.py", "tests": "a\nb\n"}
            for index in range(count)]


def stop_mid_batch(store: Path, log: Path, signum: int) -> list[str]:
    """A batch of six sent, the front stopped with `signum` once one has ended and one runs; the
    ids, once every judge of that front has ended (none outlives it)."""
    front = Front(store, log)
    ids = front.http.post("/batches", json={"candidates": batch(6)}).json()["ids"]
    deadline = time.monotonic() + 30
    while states(front, ids).count("done") < 1 or "running" not in states(front, ids):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    judges = front.judge_pids()
    front.stop(signum)
    assert ended(judges), "a judge outlived its front"
    return ids


@pytest.mark.e2e  # seconds of real processes: the e2e suite's, keeping the fast one short
def test_a_front_killed_mid_batch_and_started_again_ends_every_candidate_once(tmp_path):
    store, log = tmp_path / "verdicts.sqlite", tmp_path / "judged.log"
    ids = stop_mid_batch(store, log, signal.SIGKILL)
    again = Front(store, log)
    try:
        results = [again.http.get(f"/candidates/{identifier}", params={"wait": 30}).json() for identifier in ids]
        assert [result["state"] for result in results] == ["done"] * 6
        assert all(result["error_class"] == "verdict" and result["passed"] is True for result in results), results
        assert any("queued again" in " ".join(result["notes"]) for result in results)
        later = again.http.post("/candidates", json=batch(1, first=6)[0]).json()["id"]
        assert int(later[1:]) > max(int(identifier[1:]) for identifier in ids)
        assert again.http.get(f"/candidates/{later}", params={"wait": 30}).json()["passed"] is True
    finally:
        again.stop(signal.SIGTERM)
    with sqlite3.connect(store) as table:
        submissions = [row[0] for row in table.execute("SELECT submission FROM verdicts")]
    assert sorted(submissions) == sorted(f"c{index}.py" for index in range(7))  # one verdict each, none twice


def test_a_front_sent_sigterm_puts_its_running_candidates_back_in_the_queue(tmp_path):
    """uvicorn raises SIGTERM again once it has stopped serving: the front's cleanup runs all the
    same, and leaves nothing `running` in the store."""
    store = tmp_path / "verdicts.sqlite"
    ids = stop_mid_batch(store, tmp_path / "judged.log", signal.SIGTERM)
    with sqlite3.connect(store) as table:
        found = dict(table.execute("SELECT 'c' || number, state FROM candidates").fetchall())
        notes = [json.loads(row[0]) for row in table.execute("SELECT notes FROM candidates")]
    assert set(found) == set(ids) and "running" not in found.values() and "queued" in found.values()
    assert any("front was stopped" in " ".join(note) for note in notes)
