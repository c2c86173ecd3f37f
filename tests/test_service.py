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
import urllib.parse
from pathlib import Path

import pytest

from harness.results.store import Store, sha256, verdict_key

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

    name = device = shares = "recording"
    modes = None
    replenished = False

    def __init__(self):
        self.requests = []
        self.report = ""
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
        return {"exit_status": 0 if passed else 112, "report": self.report, "document": {"passed": passed, "cases": cases, "submission": request["name"]},
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
    (tmp_path / "candidates").mkdir()
    service = Service([judge], Store(tmp_path / "verdicts.sqlite"), commit="abc123", candidate_dirs=[tmp_path / "candidates"])
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
    # An ended candidate's source is let go; its hash stays.
    assert service.candidates.get(first)["request"] is None and service.candidates.get(first)["sha256"] == sha256("right")


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
    service = Service([LocalJudge("cpu")], Store(tmp_path / "verdicts.sqlite"), candidate_dirs=[FIXTURES])
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
        service = Service(judges, Store(tmp_path / "verdicts.sqlite"), candidate_dirs=[FIXTURES])
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


# -- the API a loop leans on -------------------------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from harness.service.app import CandidateIn, checked_name  # noqa: E402
from harness.service.judge import copy_name  # noqa: E402

HOSTILE_NAMES = st.one_of(st.sampled_from([".", "..", "", "/", "a/b.py", "../x.py", "x\0.py", "\ud800.py", "a" * 256, "é" * 128]),
                          st.text(min_size=0, max_size=300))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=HOSTILE_NAMES)
def test_a_name_is_refused_or_judged_and_the_judge_answers_after_each(recorded, name):
    judge, service, client = recorded
    # A lone surrogate cannot be sent as UTF-8: sent as JSON's \ud800 escape, as a client may.
    body = json.dumps({"source": "right", "tests": ONE_CASE, "name": name})
    response = client.post("/candidates", content=body, headers={"content-type": "application/json"})
    try:
        plain = checked_name(name) == name
    except ValueError:
        plain = False
    if plain:
        found = client.get(f"/candidates/{response.json()['id']}", params={"wait": 30})
        assert found.status_code == 200 and found.json()["name"] == name
    else:
        assert response.status_code == 422 and response.json()["detail"]["error_class"] == "rejected", response.text
    after = client.post("/candidates", json={"source": "right", "tests": ONE_CASE, "rerun": True}).json()["id"]
    assert client.get(f"/candidates/{after}", params={"wait": 30}).json()["passed"] is True


@given(name=HOSTILE_NAMES)
def test_the_judge_copies_a_candidate_under_a_name_it_can_write(tmp_path_factory, name):
    folder = tmp_path_factory.mktemp("copy")
    target = folder / copy_name(name)
    target.write_text("x")
    assert target.parent == folder and target.read_text() == "x"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.text(min_size=1, max_size=12).filter(lambda field: field not in CandidateIn.model_fields))
def test_unknown_fields_are_refused(recorded, field):
    judge, service, client = recorded
    for body in ({"source": "right", field: True}, {"candidates": [{"source": "right", field: 1}]}):
        response = client.post("/candidates" if "source" in body else "/batches", json=body)
        assert response.status_code == 422 and response.json()["detail"]["error_class"] == "rejected", (field, response.text)
    assert service.candidates.counts()["queued"] == 0


def test_a_batch_is_queued_whole_or_refused_whole_with_each_items_error(recorded):
    judge, service, client = recorded
    refused = client.post("/batches", json={"candidates": [{"source": "a", "tests": ONE_CASE}, {"source": "b", "tests": ONE_CASE},
                                                           {"source": "c", "path": "/etc/hostname"}]})
    detail = refused.json()["detail"]
    assert refused.status_code == 422 and detail["errors"][:2] == [None, None] and "one of the two" in detail["errors"][2]
    assert service.candidates.counts()["queued"] == 0 and client.get("/candidates").json()["candidates"] == []


def test_an_idempotency_key_gives_the_first_requests_id(recorded):
    judge, service, client = recorded
    first = client.post("/candidates", json={"source": "right", "tests": ONE_CASE, "idempotency_key": "loop-7"}).json()["id"]
    again = client.post("/candidates", json={"source": "right", "tests": ONE_CASE, "idempotency_key": "loop-7"}).json()["id"]
    assert again == first
    other = client.post("/candidates", json={"source": "other", "tests": ONE_CASE, "idempotency_key": "loop-7"})
    assert other.status_code == 422 and first in other.json()["detail"]["detail"]


def test_candidates_are_listed_by_state_file_and_page(recorded):
    judge, service, client = recorded
    ids = client.post("/batches", json={"candidates": [{"source": f"wrong {index}", "tests": ONE_CASE} for index in range(5)]}).json()["ids"]
    for identifier in ids:
        client.get(f"/candidates/{identifier}", params={"wait": 30})
    first = client.get("/candidates", params={"limit": 2}).json()
    assert [found["id"] for found in first["candidates"]] == ids[:2] and first["next"] == ids[1]
    rest = client.get("/candidates", params={"since": first["next"], "limit": 10}).json()
    assert [found["id"] for found in rest["candidates"]] == ids[2:] and rest["next"] is None
    by_file = client.get("/candidates", params={"sha256": sha256("wrong 3")}).json()["candidates"]
    assert [found["id"] for found in by_file] == [ids[3]]
    assert len(client.get("/candidates", params={"state": "done"}).json()["candidates"]) == 5
    assert client.get("/candidates", params={"state": "queued"}).json()["candidates"] == []
    assert client.get("/candidates", params={"state": "sleeping"}).status_code == 422


def test_a_cached_reply_names_its_own_candidate_and_carries_the_judged_report(recorded):
    judge, service, client = recorded
    judge.report = "the judged report"
    first = client.post("/candidates", json={"source": "right", "tests": ONE_CASE, "name": "first.py"}).json()["id"]
    client.get(f"/candidates/{first}", params={"wait": 30})
    second = client.get(f"/candidates/{client.post('/candidates', json={'source': 'right', 'tests': ONE_CASE, 'name': 'second.py'}).json()['id']}",
                        params={"wait": 30}).json()
    assert second["cached"] is True and second["name"] == "second.py" and second["document"]["submission"] == "second.py"
    assert "the judged report" in second["report"] and "first.py" in second["report"]


def test_sizes_over_the_limits_are_refused(tmp_path):
    judge = RecordingJudge()
    service = Service([judge], None, commit="abc123", max_source_bytes=1000)
    service.start()
    try:
        client = TestClient(create_app(service, max_request_bytes=5000))
        assert client.post("/candidates", json={"source": "x" * 1001, "tests": ONE_CASE}).status_code == 422
        too_big = client.post("/candidates", json={"source": "x" * 6000, "tests": ONE_CASE})
        assert too_big.status_code == 413 and too_big.json()["detail"]["error_class"] == "rejected"
        assert client.post("/candidates", json={"source": "x" * 999, "tests": ONE_CASE}).status_code == 200
    finally:
        service.close()


def test_metrics_are_prometheus_text(recorded):
    judge, service, client = recorded
    identifier = client.post("/candidates", json={"source": "wrong", "tests": ONE_CASE}).json()["id"]
    client.get(f"/candidates/{identifier}", params={"wait": 30})
    text = client.get("/metrics").text
    samples = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if not line.startswith("#")}
    assert samples['judge_replies_total{class="verdict"}'] == 1 and samples["judge_queue_depth"] == 0
    assert samples['judge_candidates{state="done"}'] == 1
    assert 0 < samples['judge_busy_share{judge="recording"}'] <= 1
    assert all(line.startswith(("# HELP ", "# TYPE ")) or re.fullmatch(r'[a-z_]+(\{[a-z]+="[^"]*"\})? [0-9.e+-]+', line)
               for line in text.splitlines()), text


def test_the_asyncio_client_submits_and_reads(recorded):
    import asyncio

    import httpx

    from harness.service.client import AsyncJudgeClient, Refused

    judge, service, client = recorded

    async def loop():
        async with AsyncJudgeClient("http://service", transport=httpx.ASGITransport(app=client.app)) as judge_client:
            ids = await judge_client.submit_batch([{"source": "right", "tests": ONE_CASE}, {"source": "wrong", "tests": ONE_CASE}])
            results = await asyncio.gather(*(judge_client.result(identifier, timeout_s=30) for identifier in ids))
            with pytest.raises(Refused):
                await judge_client.submit("x", mode="sing")
            return [result["passed"] for result in results], await judge_client.list()

    passed, listed = asyncio.run(loop())
    assert passed == [True, False] and len(listed["candidates"]) == 2


ID_LIKE = st.one_of(st.sampled_from(["c1", "c01", "c\uff11", "c\u00b2", "c\u0661", "c" + "9" * 19, "c" + "9" * 40, "c-1", "c0", "c 1"]),
                    st.from_regex(r"c[0-9]{0,25}", fullmatch=True),
                    st.text(min_size=1, max_size=30).filter(lambda text: text not in (".", "..")))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(identifier=ID_LIKE)
def test_an_id_answers_as_that_candidate_or_404_never_another_candidate_or_500(recorded, identifier):
    judge, service, client = recorded
    if not service.candidates.get("c1"):
        client.get(f"/candidates/{client.post('/candidates', json={'source': 'right', 'tests': ONE_CASE}).json()['id']}",
                   params={"wait": 30})
    path = "/candidates/" + urllib.parse.quote(identifier, safe="")
    for response in (client.get(path), client.delete(path)):
        assert response.status_code in (200, 404), (identifier, response.status_code, response.text)
        if response.status_code == 200:
            assert response.json()["id"] == identifier
    listed = client.get("/candidates", params={"since": identifier})
    assert listed.status_code == 200, (identifier, listed.text)


@pytest.mark.parametrize("field", ["timeout_s", "wall_limit_s"])
@pytest.mark.parametrize("value", ["1e308", "Infinity", "NaN", "86401"])
def test_a_time_limit_the_judges_cannot_hold_is_refused_not_retried_as_infrastructure(recorded, field, value):
    judge, service, client = recorded
    body = '{"source": "right", "tests": %s, "%s": %s}' % (json.dumps(ONE_CASE), field, value)
    response = client.post("/candidates", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"]["error_class"] == "rejected", response.text
    assert service.candidates.counts()["queued"] == 0


def test_a_path_that_is_not_a_regular_file_is_refused_at_once(recorded, tmp_path):
    judge, service, client = recorded
    fifo = tmp_path / "candidates" / "candidate.py"
    os.mkfifo(fifo)
    answered = []
    # A FIFO without a writer blocks a plain read for ever: the request runs in a thread the test can leave behind.
    asking = threading.Thread(target=lambda: answered.append(client.post("/candidates", json={"path": str(fifo), "tests": ONE_CASE})),
                              daemon=True)
    asking.start()
    asking.join(10)
    assert answered, "the request still reads the FIFO"
    assert answered[0].status_code == 422 and "regular file" in answered[0].json()["detail"]["detail"], answered[0].text


def test_a_path_longer_than_the_limit_is_refused_whatever_its_size_said(tmp_path):
    service = Service([RecordingJudge()], None, commit="abc123", max_source_bytes=1000, candidate_dirs=[tmp_path])
    service.start()
    try:
        client = TestClient(create_app(service))
        for size, status in ((1000, 200), (1001, 422)):
            (tmp_path / "candidate.py").write_text("x" * size)
            assert client.post("/candidates", json={"path": str(tmp_path / "candidate.py"), "tests": ONE_CASE}).status_code == status
    finally:
        service.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.text(min_size=1, max_size=40), sources=st.lists(st.sampled_from(["right", "right 2", "wrong"]), min_size=2, max_size=4))
def test_one_idempotency_key_in_a_batch_names_one_file(recorded, key, sources):
    judge, service, client = recorded
    key = f"{len(service.candidates.page(limit=1000))} {key}"  # a key of this example alone
    response = client.post("/batches", json={"candidates": [{"source": source, "tests": ONE_CASE, "idempotency_key": key}
                                                            for source in sources]})
    if len(set(sources)) == 1:
        assert response.status_code == 200 and len(set(response.json()["ids"])) == 1, response.text
    else:
        assert response.status_code == 422, (sources, response.text)
        errors = response.json()["detail"]["errors"]
        first_other = next(index for index, source in enumerate(sources) if source != sources[0])
        assert [error is not None for error in errors] == [index == first_other for index in range(len(sources))], errors
        # It names no candidate that was never queued (the refused batch's own id goes to the next request).
        assert all(service.candidates.get(named) is not None for named in re.findall(r"\bc[0-9]+\b", errors[first_other])), errors
        assert all(found["idempotency_key"] != key for found in client.get("/candidates", params={"limit": 1000}).json()["candidates"])


def test_a_request_sent_again_under_its_key_to_a_front_on_another_commit_gets_its_id(tmp_path):
    from harness.service.candidates import Candidates

    ids = []
    for commit in ("abc123", "def456"):
        service = Service([RecordingJudge()], Store(tmp_path / "verdicts.sqlite"), commit=commit,
                          candidates=Candidates(tmp_path / "verdicts.sqlite"))
        service.start()
        try:
            client = TestClient(create_app(service))
            ids.append(client.post("/candidates", json={"source": "right", "tests": ONE_CASE, "idempotency_key": "loop-1"}).json()["id"])
            other = client.post("/candidates", json={"source": "other", "tests": ONE_CASE, "idempotency_key": "loop-1"})
            assert other.status_code == 422 and ids[0] in other.json()["detail"]["detail"], other.text
        finally:
            service.close()
    assert ids[1] == ids[0], ids


def test_a_path_outside_the_candidates_folders_is_refused_and_shown_nowhere(recorded, tmp_path):
    judge, service, client = recorded
    private = tmp_path / "private.py"
    private.write_text("secret-line: not python\n")
    private.chmod(0o600)
    response = client.post("/candidates", json={"path": str(private), "tests": ONE_CASE})
    assert response.status_code == 422 and "secret-line" not in response.text, response.text
    assert "--candidates-dir" not in response.text and str(tmp_path / "candidates") in response.text, response.text
    inside = tmp_path / "candidates" / "private.py"
    private.rename(inside)
    accepted = client.post("/candidates", json={"path": str(inside), "tests": ONE_CASE})
    assert accepted.status_code == 200, accepted.text


def test_a_wait_that_is_not_a_number_waits_no_longer_than_the_longest_wait(recorded):
    judge, service, client = recorded
    judge.release.clear()  # the candidate stays queued or running until the test ends
    identifier = client.post("/candidates", json={"source": "right", "tests": ONE_CASE}).json()["id"]
    answered = []
    asking = threading.Thread(target=lambda: answered.append(client.get(f"/candidates/{identifier}", params={"wait": "nan"})),
                              daemon=True)
    asking.start()
    asking.join(10)
    judge.release.set()
    assert answered and answered[0].status_code == 200 and answered[0].json()["state"] in ("queued", "running"), answered


def test_candidates_waited_for_leave_the_other_requests_answered(recorded):
    import asyncio
    import time

    import httpx

    judge, service, client = recorded
    judge.release.clear()  # every candidate stays queued or running while the loop waits on it
    ids = client.post("/batches", json={"candidates": [{"source": f"right {index}", "tests": ONE_CASE} for index in range(60)]}).json()["ids"]

    async def loop():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=client.app), base_url="http://service", timeout=60) as http:
            waits = [asyncio.create_task(http.get(f"/candidates/{identifier}", params={"wait": 20})) for identifier in ids]
            await asyncio.sleep(1)
            started = time.monotonic()
            health = await http.get("/health")
            took = time.monotonic() - started
            judge.release.set()
            ended = await asyncio.gather(*waits)
            return health.status_code, took, [response.json()["state"] for response in ended]

    status, took, states = asyncio.run(loop())
    assert status == 200 and took < 5, took
    assert states == ["done"] * len(ids), states
