"""The judge as a service (harness/service/): its front and store with a judge of the test's own
(fast), then real judge processes on the CPU, whose verdicts must be the one-shot command's (e2e),
and judges as Ray actors on a simulated two-node cluster (e2e)."""

import ctypes
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.store import Store, verdict_key

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ONE_CASE = "m: 128; n: 256; k: 256; l: 1; seed: 1111\n"
TWO_CASES = ONE_CASE + "m: 256; n: 128; k: 512; l: 2; seed: 7\n"
PR_GET_DUMPABLE, PR_GET_CHILD_SUBREAPER = 3, 37

fastapi = pytest.importorskip("fastapi", reason="the service's API needs the `service` extra (pip install '.[service]')")
from fastapi.testclient import TestClient  # noqa: E402

from harness.service.app import create_app  # noqa: E402
from harness.service.front import Service  # noqa: E402


class RecordingJudge:
    """Answers every candidate as a judge would, a case per tests-file line passing unless the
    source says `wrong`; records what it was asked."""

    name = device = "recording"

    def __init__(self):
        self.requests = []
        self.release = threading.Event()
        self.release.set()

    def start(self):
        return {"ready": True, "device_name": "recording device"}

    def judge(self, request):
        self.release.wait(30)
        self.requests.append(request)
        passed = "wrong" not in request["source"]
        cases = [{"index": index, "status": "pass" if passed else "fail"} for index, _ in enumerate(request["tests"].splitlines())]
        # A timed run's reply carries its rows (results/runs.csv's columns), as the judge's does.
        rows = ([{"time": "2026-11-27T01:00:00+00:00", "device": "recording device", "shape": f"case {case['index']}",
                  "status": case["status"]} for case in cases] if request["mode"] == "benchmark" else [])
        return {"exit_status": 0 if passed else 112, "report": "", "document": {"passed": passed, "cases": cases, "submission": request["name"]},
                "rows": rows}

    alive = True

    def heartbeat(self):
        return self.alive

    def revive(self):
        self.alive = True

    def cancel(self, candidate_id):
        return False

    def status(self):
        return {"judge": self.name, "judged": len(self.requests)}

    def end(self):
        self.release.set()

    def close(self):
        pass


@pytest.fixture
def recorded(tmp_path):
    judge = RecordingJudge()
    service = Service([judge], Store(tmp_path / "verdicts.sqlite"), commit="abc123")
    service.start()
    yield judge, service, TestClient(create_app(service))
    service.close()


def test_the_key_changes_with_everything_that_decides_a_verdict():
    base = dict(source="def custom_kernel(d): ...", problem="nvfp4_gemm", mode="test", tests=None, options={},
                seed_policy="fixed", commit="abc", device="NVIDIA H200")
    key = verdict_key(**base)["key"]
    for field, other in [("source", "x"), ("problem", "nvfp4_gemv"), ("mode", "benchmark"), ("tests", ONE_CASE),
                         ("options", {"official": True}), ("seed_policy", "secret"), ("commit", "abd"), ("device", "cpu")]:
        assert verdict_key(**{**base, field: other})["key"] != key, field
    assert verdict_key(**base)["key"] == key


def test_a_candidate_judged_once_is_answered_from_the_store_unless_rerun(recorded):
    judge, service, client = recorded
    first = client.post("/candidates", json={"source": "right", "tests": TWO_CASES}).json()["id"]
    done = client.get(f"/candidates/{first}", params={"wait": 30}).json()
    assert done["state"] == "done" and done["passed"] is True and done["cached"] is False
    assert [case["status"] for case in done["document"]["cases"]] == ["pass", "pass"]
    again = client.get(f"/candidates/{client.post('/candidates', json={'source': 'right', 'tests': TWO_CASES}).json()['id']}",
                       params={"wait": 30}).json()
    assert again["cached"] is True and again["document"] == done["document"] and len(judge.requests) == 1
    rerun = client.post("/candidates", json={"source": "right", "tests": TWO_CASES, "rerun": True}).json()["id"]
    assert client.get(f"/candidates/{rerun}", params={"wait": 30}).json()["cached"] is False and len(judge.requests) == 2
    # Another option is another key: judged, not answered from the store.
    other = client.post("/candidates", json={"source": "right", "tests": TWO_CASES, "stop_on_first_failure": True}).json()["id"]
    assert client.get(f"/candidates/{other}", params={"wait": 30}).json()["cached"] is False
    assert judge.requests[-1]["options"] == {"stop_on_first_failure": True, "wall_limit_s": 300.0}
    assert [row["passed"] for row in service.store.rows()] == [1, 1, 1]


def test_a_timed_verdict_keeps_its_rows_for_compare(recorded):
    judge, service, client = recorded
    for mode in ("test", "benchmark"):
        candidate = client.post("/candidates", json={"source": "right", "tests": TWO_CASES, "mode": mode}).json()["id"]
        assert client.get(f"/candidates/{candidate}", params={"wait": 30}).json()["state"] == "done"
    (rows,) = service.store.runs()
    assert [(row["shape"], row["status"]) for row in rows] == [("case 0", "pass"), ("case 1", "pass")]


def test_a_batch_queues_in_order_and_status_counts_it(recorded):
    judge, service, client = recorded
    judge.release.clear()
    ids = client.post("/batches", json={"candidates": [{"source": f"wrong {index}", "tests": ONE_CASE, "name": f"c{index}.py"}
                                                       for index in range(3)]}).json()["ids"]
    status = client.get("/status").json()
    assert status["queued"] + status["running"] == 3 and status["devices"] == ["recording device"]
    assert client.get(f"/candidates/{ids[2]}").json()["state"] in ("queued", "running")
    judge.release.set()
    results = [client.get(f"/candidates/{candidate}", params={"wait": 30}).json() for candidate in ids]
    assert [result["passed"] for result in results] == [False] * 3 and [result["exit_status"] for result in results] == [112] * 3
    assert [request["name"] for request in judge.requests] == ["c0.py", "c1.py", "c2.py"]
    assert client.get("/health").json() == {"ok": True, "judges": 1, "alive": 1}


def test_requests_no_judge_could_run_are_refused(recorded):
    _, _, client = recorded
    assert client.post("/candidates", json={"source": "x", "mode": "sing"}).status_code == 422
    assert client.post("/candidates", json={"source": "x", "path": "y.py"}).status_code == 422
    assert client.post("/candidates", json={"path": "/no/such/file.py"}).status_code == 422
    assert client.get("/candidates/c999").status_code == 404


# -- real judges on the CPU -------------------------------------------------------------------
def one_shot(fixture: str, tests: Path, *extra: str) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}
    completed = subprocess.run([sys.executable, "-m", "harness", "test", str(tests), "--device", "cpu", "--json",
                                "--submission", str(FIXTURES / fixture), *extra], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=600)
    return json.loads(completed.stdout)


def verdicts(document: dict) -> list[tuple[str, str]]:
    """Each case's status and message, the paths of the run's own folders left out."""
    return [(case["status"], re.sub(r"/\S+/", "/", case["message"])) for case in document["cases"]]


CANDIDATES = [  # fixture, tests, one-shot options
    ("torch_submission.py", ONE_CASE, ()),
    ("broken_wrong_values.py", ONE_CASE, ()),
    ("broken_raises.py", ONE_CASE, ()),
    ("broken_hangs.py", TWO_CASES, ("--timeout", "5")),
    ("cheat_patches_the_judge.py", ONE_CASE, ()),
]


def _process_settings() -> tuple[int, int]:
    """(subreaper, dumpable) of this process."""
    libc = ctypes.CDLL(None, use_errno=True)
    subreaper = ctypes.c_int(-1)
    assert libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(subreaper), 0, 0, 0) == 0
    return subreaper.value, libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)


@pytest.mark.e2e  # judges and their workers started, candidates judged both ways
def test_verdicts_through_the_service_are_the_one_shot_commands(tmp_path):
    from harness.service.judges import LocalJudge

    before = _process_settings()  # another test in this process may have judged in it already

    expected = []
    for fixture, tests, extra in CANDIDATES:
        path = tmp_path / f"{fixture}.txt"
        path.write_text(tests)
        expected.append(one_shot(fixture, path, *extra))
    service = Service([LocalJudge("cpu")], Store(tmp_path / "verdicts.sqlite"))
    service.start()
    try:
        client = TestClient(create_app(service))
        batch = [{"path": str(FIXTURES / fixture), "tests": tests, "timeout_s": 5.0 if extra else None}
                 for fixture, tests, extra in CANDIDATES]
        ids = client.post("/batches", json={"candidates": batch}).json()["ids"]
        results = [client.get(f"/candidates/{candidate}", params={"wait": 300}).json() for candidate in ids]
        for (fixture, _, _), result, one in zip(CANDIDATES, results, expected):
            assert result["exit_status"] == one["exit_status"], fixture
            assert verdicts(result["document"]) == verdicts(one), fixture
            # The report names the candidate as the request did, never the judge's copy of it.
            assert f"test {fixture} for nvfp4_gemm" in result["report"], result["report"]
            assert "nvfp4-judge-" not in result["report"] and "nvfp4-pool-" not in result["report"], result["report"]
            assert result["document"]["submission"] == fixture
        assert [result["passed"] for result in results] == [True, False, False, False, False]
        stopped = client.post("/candidates", json={"path": str(FIXTURES / "broken_wrong_values.py"), "tests": TWO_CASES,
                                                   "stop_on_first_failure": True}).json()["id"]
        statuses = [case["status"] for case in client.get(f"/candidates/{stopped}", params={"wait": 300}).json()["document"]["cases"]]
        assert statuses == ["fail", "not run"]
        status = client.get("/status").json()
        assert status["judges"][0]["starts"] == 1 and status["done"] == len(CANDIDATES) + 1
    finally:
        service.close()
    # The caller's process stays what it was: the judge's own process took the subreaper and
    # non-dumpable settings.
    assert _process_settings() == before


@pytest.mark.e2e
def test_judges_as_ray_actors_one_per_node_of_a_simulated_cluster(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray mode needs the `cluster` extra (pip install '.[cluster]')")
    from ray.cluster_utils import Cluster

    from harness.service.ray_judges import cluster_judges

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    try:
        cluster.wait_for_nodes()
        judges = cluster_judges("cpu", per_node=1)
        assert len(judges) == 2
        service = Service(judges, Store(tmp_path / "verdicts.sqlite"))
        service.start()
        try:
            client = TestClient(create_app(service))
            fixtures = ["torch_submission.py", "broken_wrong_values.py"]
            ids = client.post("/batches", json={"candidates": [{"path": str(FIXTURES / name), "tests": ONE_CASE} for name in fixtures]}).json()["ids"]
            results = [client.get(f"/candidates/{candidate}", params={"wait": 300}).json() for candidate in ids]
            assert [result["document"]["cases"][0]["status"] for result in results] == ["pass", "fail"]
            assert len({judge.name for judge in judges}) == 2
        finally:
            service.close()
    finally:
        ray.shutdown()
        cluster.shutdown()
