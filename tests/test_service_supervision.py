"""The service's supervision and error classes, with the front's own code over judge processes
of tests/fake_judge.py (fast): a judge process or a Ray actor killed mid-candidate is replaced and
its candidate judged again; a fault of the machinery is retried, returned as such and never
answered from the store; a cancelled candidate's run ends."""

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.results.store import Store
from harness.service.candidates import Candidates
from harness.service.front import Service
from harness.service import lanes as lanes_module
from harness.service.judges import LocalJudge
from harness.service.lanes import waiting_workers

ROOT = Path(__file__).resolve().parent.parent
FAKE_JUDGE = (sys.executable, str(ROOT / "tests" / "fake_judge.py"))
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT)}


def fake_judges(count: int) -> list[LocalJudge]:
    return [LocalJudge("cpu", slot=slot, program=FAKE_JUDGE, environment=ENVIRONMENT) for slot in range(count)]


@pytest.fixture
def service(tmp_path):
    running = Service(fake_judges(2), Store(tmp_path / "verdicts.sqlite"), commit="fake",
                      candidates=Candidates(tmp_path / "verdicts.sqlite"))
    running.start()
    yield running
    running.close()


def running_on(service: Service, candidate_id: str, timeout_s: float = 30.0):
    """The judge running `candidate_id`, once its process has it: the front marks a candidate
    running when it takes it, before its judge (started again first where it had ended) is busy
    with it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = service.get(candidate_id)
        if found["state"] == "running":
            judge = next(judge for judge in service.judges if judge.name == found["judge"])
            if judge.status()["busy_with"] == candidate_id:
                return judge
        time.sleep(0.02)
    raise AssertionError(f"{candidate_id} never ran")


def twenty_true_verdicts(service: Service) -> None:
    sources = [f"# {index}\n" + ("wrong\n" if index % 3 == 0 else "") for index in range(20)]
    ids = service.submit_batch([{"source": source, "name": f"n{index}.py"} for index, source in enumerate(sources)])
    for source, identifier in zip(sources, ids):
        found = service.get(identifier, wait_s=60)
        assert found["state"] == "done" and found["error_class"] == "verdict", found
        assert found["passed"] is ("wrong" not in source), found


def test_a_judge_process_killed_mid_candidate_is_replaced_and_its_candidate_judged_again(service):
    victim = service.submit("# sleep 4\n", name="victim.py")
    judge = running_on(service, victim)
    pid = judge.status()["pid"]
    os.kill(pid, signal.SIGKILL)
    found = service.get(victim, wait_s=30)
    assert found["state"] == "done" and found["error_class"] == "verdict" and found["passed"] is True
    assert found["attempts"] == 2 and "attempt 1" in found["notes"][0], found
    twenty_true_verdicts(service)
    assert service.healthy() and judge.status()["pid"] != pid


def test_a_judge_that_will_not_start_is_named_in_one_line_each_try_not_a_traceback(capfd, monkeypatch):
    from harness.service import front

    monkeypatch.setattr(front, "RESTART_AFTER_S", 0.2)
    broken = LocalJudge("cpu", slot=9, program=(sys.executable, "-c", "raise SystemExit(3)"))
    service = Service([*fake_judges(1), broken], None, commit="fake")
    service.start()
    try:
        deadline = time.monotonic() + 30
        said = ""
        while said.count("starting it again") < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
            said += capfd.readouterr().err
    finally:
        service.close()
    said += capfd.readouterr().err
    assert said.count(f"front: the judge on {broken.name} ended before it was ready (exit status 3); starting it again") >= 2, said
    assert "Traceback" not in said, said


def test_health_is_503_while_a_judge_is_down_and_status_says_which(tmp_path):
    fastapi = pytest.importorskip("fastapi", reason="the service's API needs the `service` extra")
    from fastapi.testclient import TestClient

    from harness.service.app import create_app

    broken = LocalJudge("cpu", slot=9, program=(sys.executable, "-c", "raise SystemExit(3)"))
    service = Service([*fake_judges(1), broken], None, commit="fake")
    service.start()
    try:
        client = TestClient(create_app(service))
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["alive"] == 1, health.text
        judges = {judge["judge"]: judge for judge in client.get("/status").json()["judges"]}
        assert judges[broken.name]["alive"] is False and judges[broken.name]["last_exit"] == 3
        identifier = client.post("/candidates", json={"source": "# fine\n"}).json()["id"]
        assert client.get(f"/candidates/{identifier}", params={"wait": 30}).json()["passed"] is True
        assert f'judge_alive{{judge="{broken.name}"}} 0' in client.get("/metrics").text
    finally:
        service.close()


def test_an_environment_fault_is_retried_returned_as_such_and_never_served_from_the_store(service):
    first = service.get(service.submit("# no worker\n"), wait_s=30)
    assert first["error_class"] == "infrastructure" and first["attempts"] == service.attempts, first
    assert "before the file was imported" in first["error"]
    assert service.store.rows() == []
    again = service.get(service.submit("# no worker\n"), wait_s=30)
    assert again["cached"] is False and again["attempts"] == service.attempts
    assert service.metrics()["classes"]["infrastructure"] == 2


def test_a_cancelled_candidate_ends_once_and_the_same_judge_process_judges_the_next(tmp_path):
    log = tmp_path / "judged.log"
    judge = LocalJudge("cpu", program=FAKE_JUDGE, environment={**ENVIRONMENT, "FAKE_JUDGE_LOG": str(log)})
    service = Service([judge], Store(tmp_path / "verdicts.sqlite"), commit="fake", candidates=Candidates(tmp_path / "verdicts.sqlite"))
    service.start()
    try:
        long = service.submit("# sleep 30\n")
        queued = service.submit_batch([{"source": "# sleep 30\n# b\n"}, {"source": "# sleep 30\n# c\n"}])
        running_on(service, long)
        pid = judge.status()["pid"]
        started = time.monotonic()
        assert service.cancel(queued[1])["state"] == "cancelled"
        cancelled = service.cancel(long)
        assert cancelled["state"] == "cancelled" and cancelled["error"] == "cancelled while it ran", cancelled
        assert time.monotonic() - started < 10
        service.cancel(queued[0])
        after = service.submit("# after\n")
        assert service.get(after, wait_s=30)["passed"] is True
        assert judge.status()["pid"] == pid and judge.starts == 1
        # Each candidate ended once; only the one judged to its end has a verdict stored.
        assert [service.get(identifier)["state"] for identifier in (long, *queued, after)] == ["cancelled"] * 3 + ["done"]
        assert service.metrics()["classes"] == {"verdict": 1}
        assert [row["submission"] for row in service.store.rows()] == ["submission.py"]
    finally:
        service.close()
    # One judge process judged every run (queued[0] may have begun before its cancel, and ended at once).
    judged = {identifier: int(by) for identifier, by, *_ in (line.split() for line in log.read_text().splitlines())}
    assert {long, after} <= set(judged) and queued[1] not in judged and set(judged.values()) == {pid}, judged


def test_a_judge_that_does_not_answer_its_cancel_is_started_again(tmp_path, monkeypatch):
    from harness.service import judges

    monkeypatch.setattr(judges, "CANCEL_REPLY_S", 1.0)
    judge = LocalJudge("cpu", program=FAKE_JUDGE, environment=ENVIRONMENT)
    service = Service([judge], None, commit="fake")
    service.start()
    try:
        stuck = service.submit("# sleep 60\n# ignores cancel\n")
        running_on(service, stuck)
        pid = judge.status()["pid"]
        started = time.monotonic()
        cancelled = service.cancel(stuck)
        assert cancelled["state"] == "cancelled" and time.monotonic() - started < 10, cancelled
        assert service.get(service.submit("# after\n"), wait_s=30)["passed"] is True
        assert judge.starts == 2 and judge.status()["pid"] != pid
        assert service.candidates.counts() == {"queued": 0, "running": 0, "done": 1, "cancelled": 1}
    finally:
        service.close()


@pytest.mark.e2e  # seconds of real processes: the e2e suite's, keeping the fast one short
def test_a_ray_actor_killed_mid_candidate_is_made_again_and_its_candidate_judged_again(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray mode needs the `cluster` extra (pip install '.[cluster]')")
    from harness.service.ray_judges import cluster_judges

    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        judges = cluster_judges("cpu", per_node=2, program=FAKE_JUDGE)
        service = Service(judges, Store(tmp_path / "verdicts.sqlite"), commit="fake")
        service.start()
        try:
            victim = service.submit("# sleep 3\n", name="victim.py")
            judge = running_on(service, victim)
            ray.kill(judge._actor)
            found = service.get(victim, wait_s=60)
            assert found["state"] == "done" and found["error_class"] == "verdict" and found["passed"] is True, found
            twenty_true_verdicts(service)
            deadline = time.monotonic() + 60
            while not service.healthy():
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert judge.recreated == 1
            # The judge process inside an actor killed: the note names its fault as a local judge's does.
            second = service.submit("# sleep 3\n# second\n", name="second.py")
            judge = running_on(service, second)
            os.kill(judge.status()["pid"], signal.SIGKILL)
            found = service.get(second, wait_s=60)
            assert found["state"] == "done" and found["error_class"] == "verdict" and found["attempts"] == 2, found
            assert found["notes"][0].split(": ", 2)[1] == "JudgeEnded" and "\x1b" not in found["notes"][0], found["notes"]
            assert "Traceback" not in found["notes"][0] and "\n" not in found["notes"][0], found["notes"]
        finally:
            service.close()
    finally:
        ray.shutdown()


def test_test_mode_candidates_share_a_device_and_a_timed_one_has_it_alone(tmp_path):
    log = tmp_path / "judged.log"
    lanes = [LocalJudge("cpu", slot=0, lane=lane, program=FAKE_JUDGE, environment={**ENVIRONMENT, "FAKE_JUDGE_LOG": str(log)})
             for lane in range(3)]
    service = Service(lanes, None, commit="fake")
    service.start()
    try:
        three_tests_a_timed_run_and_three_tests_share_lanes_as_they_should(service, log)
    finally:
        service.close()
    assert [judge.name for judge in lanes][1:] == [f"{lanes[0].name} lane 1", f"{lanes[0].name} lane 2"]


@given(st.integers(min_value=1, max_value=64))
def test_a_gpus_lanes_share_out_its_waiting_workers_each_keeping_enough_for_its_next_runs(lanes):
    each = waiting_workers("cuda", lanes)
    assert lanes_module.WAITING_A_LANE_LEAST <= each <= lanes_module.WAITING_A_JUDGE
    assert each * lanes <= max(lanes_module.WAITING_A_GPU, lanes * lanes_module.WAITING_A_LANE_LEAST)
    assert waiting_workers("cuda", 1) == lanes_module.WAITING_A_JUDGE and waiting_workers("cpu", lanes) == 1


def test_each_lane_of_a_gpu_starts_its_judge_with_its_share_of_the_waiting_workers():
    lanes = [LocalJudge("cuda", visible_devices="0", lane=lane, lanes=4, program=FAKE_JUDGE, environment=ENVIRONMENT)
             for lane in range(4)]
    alone = LocalJudge("cuda", visible_devices="1", program=FAKE_JUDGE, environment=ENVIRONMENT)
    try:
        told = [judge.start()["waiting_workers"] for judge in [*lanes, alone]]
    finally:
        for judge in [*lanes, alone]:
            judge.close()
    assert told == [waiting_workers("cuda", 4)] * 4 + [waiting_workers("cuda", 1)]
    assert told[0] < told[-1]


def test_a_gpus_lanes_start_their_workers_together_between_runs_and_every_candidate_passes(tmp_path):
    """Three lanes of one GPU, each judge keeping its share of waiting workers, a run taking one:
    the lanes replenish only between runs (no replenish beside any run), together (a lane's
    replenish beside another's), and every candidate gets its verdict."""
    log = tmp_path / "judged.log"
    lanes = [LocalJudge("cuda", visible_devices="0", lane=lane, lanes=3, program=FAKE_JUDGE,
                        environment={**ENVIRONMENT, "FAKE_JUDGE_LOG": str(log)}) for lane in range(3)]
    lanes_replenish_together_between_runs(lanes, log)


@pytest.mark.e2e  # a local Ray cluster started: the e2e suite's
def test_a_ray_actors_gpu_lanes_start_their_workers_together_between_runs(tmp_path):
    """The same through a Ray actor's lanes: its judge processes on "cuda" (the fake judge needs
    no GPU), each lane's replenish the actor's call."""
    ray = pytest.importorskip("ray", reason="the Ray mode needs the `cluster` extra (pip install '.[cluster]')")
    from harness.service.ray_judges import JudgeActor, RayJudge, SharedActor

    log = tmp_path / "judged.log"
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        actor = SharedActor(lambda: JudgeActor.options(num_cpus=0, max_concurrency=7).remote(
            "cuda", None, {"FAKE_JUDGE_LOG": str(log)}, 0, FAKE_JUDGE, 3), lanes=3)
        node = ray.get_runtime_context().get_node_id()
        lanes_replenish_together_between_runs([RayJudge(actor, node, 0, "cuda", lane, 3) for lane in range(3)], log)
    finally:
        ray.shutdown()


class BrokenPipeOnReplenish(LocalJudge):
    """A lane whose judge went away as its replenish was written: the pipe's own error."""

    def replenish(self):
        raise BrokenPipeError("the judge's stdin")


def test_a_replenish_that_fails_or_hangs_leaves_every_lane_judging(tmp_path, monkeypatch):
    """A replenish that raises what no judge's end is (a broken pipe, Ray's own error) leaves the
    lane's dispatching thread judging; a judge that hangs in one is ended soon after the
    replenish's own limit and started again, while the GPU's other lanes wait for it; every
    candidate gets its verdict."""
    from harness.service import judges as judges_module

    monkeypatch.setattr(judges_module, "REPLENISH_LIMIT_S", 0.5)
    monkeypatch.setattr(judges_module, "REPLENISH_REPLY_GRACE_S", 0.5)
    environment = {**ENVIRONMENT, "FAKE_REPLENISH_S": "60"}
    lanes = [BrokenPipeOnReplenish("cuda", visible_devices="0", lane=0, lanes=2, program=FAKE_JUDGE, environment=environment),
             LocalJudge("cuda", visible_devices="0", lane=1, lanes=2, program=FAKE_JUDGE, environment=environment)]
    service = Service(lanes, None, commit="fake")
    service.start()
    try:
        began = time.monotonic()
        ids = service.submit_batch([{"source": f"# {index}\n"} for index in range(4 * waiting_workers("cuda", 2))]
                                   + [{"source": "# timed\n", "mode": "benchmark"}])
        assert all(service.get(identifier, wait_s=60)["passed"] for identifier in ids)
        assert time.monotonic() - began < 45
        assert all(thread.is_alive() for thread in service._threads)
        assert lanes[1].starts >= 2  # ended in its hung replenish, and started again
    finally:
        service.close()


def lanes_replenish_together_between_runs(lanes: list, log: Path) -> None:
    assert all(judge.replenished for judge in lanes)
    service = Service(lanes, None, commit="fake")
    service.start()
    try:
        ids = service.submit_batch([{"source": f"# {index}\n# sleep 0.05\n"} for index in range(8 * waiting_workers("cuda", 3))])
        assert all(service.get(identifier, wait_s=120)["passed"] for identifier in ids)
    finally:
        service.close()
    spans = [(identifier, pid, float(start), float(end))
             for identifier, pid, _, start, end in (line.split() for line in log.read_text().splitlines())]
    replenishes = [span for span in spans if span[0] == "replenish"]
    runs = [span for span in spans if span[0] != "replenish"]
    assert len(runs) == len(ids) and len({pid for _, pid, _, _ in replenishes}) == 3

    def overlap(first, second):
        return first[2] < second[3] and second[2] < first[3]

    assert not any(overlap(replenish, run) for replenish in replenishes for run in runs)
    assert any(overlap(first, second) for first in replenishes for second in replenishes if first[1] != second[1])


def three_tests_a_timed_run_and_three_tests_share_lanes_as_they_should(service, log: Path) -> None:
    """Three test-mode candidates, a benchmark, three more, all passed: the first three ran side
    by side (the fake judge logs each run's mode, start and end), none overlapping the timed run."""
    requests = ([{"source": f"# {index}\n# sleep 1\n"} for index in range(3)]
                + [{"source": "# timed\n# sleep 1\n", "mode": "benchmark"}]
                + [{"source": f"# after {index}\n# sleep 1\n"} for index in range(3)])
    ids = service.submit_batch(requests)
    assert all(service.get(identifier, wait_s=60)["passed"] for identifier in ids)
    runs = {identifier: (mode, float(start), float(end))
            for identifier, _, mode, start, end in (line.split() for line in log.read_text().splitlines())}
    timed = [run for run in runs.values() if run[0] == "benchmark"]
    tests = [run for run in runs.values() if run[0] == "test"]
    assert len(timed) == 1 and len(tests) == 6
    first = [runs[identifier] for identifier in ids[:3]]
    assert max(start for _, start, _ in first) < min(end for _, _, end in first)
    assert not any(start < timed[0][2] and timed[0][1] < end for _, start, end in tests)


@pytest.mark.e2e  # a local Ray cluster started: the e2e suite's
def test_a_ray_actors_lanes_share_its_device_a_timed_candidate_has_it_alone_and_all_come_back_with_it(tmp_path):
    ray = pytest.importorskip("ray", reason="the Ray mode needs the `cluster` extra (pip install '.[cluster]')")
    from harness.service.ray_judges import cluster_judges

    log = tmp_path / "judged.log"
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        lanes = cluster_judges("cpu", per_node=1, program=FAKE_JUDGE, environment={"FAKE_JUDGE_LOG": str(log)}, lanes=3)
        assert [judge.modes for judge in lanes] == [None, ("test",), ("test",)] and len({judge.shares for judge in lanes}) == 1
        service = Service(lanes, None, commit="fake")
        service.start()
        try:
            three_tests_a_timed_run_and_three_tests_share_lanes_as_they_should(service, log)
            assert len({judge.name for judge in lanes}) == 3
            # The actor killed: made again once, every lane's judge started in it, and the lanes judge again.
            ray.kill(lanes[0]._actor)
            twenty_true_verdicts(service)
            deadline = time.monotonic() + 60
            while not service.healthy():
                assert time.monotonic() < deadline, service.status()["judges"]
                time.sleep(0.2)
            assert [judge.recreated for judge in lanes] == [1, 1, 1]
        finally:
            service.close()
    finally:
        ray.shutdown()


def test_judges_are_named_by_host_and_gpu():
    import socket

    host = socket.gethostname()
    assert LocalJudge("cuda", visible_devices="3").name == f"{host} GPU 3"
    assert LocalJudge("cuda", visible_devices="3", lane=2).name == f"{host} GPU 3 lane 2"
    assert len({LocalJudge("cpu", slot=slot).name for slot in range(3)}) == 3


def test_a_test_mode_run_that_failed_beside_another_is_judged_again_alone_and_that_verdict_stands(tmp_path):
    """Lanes share a device, and what they share (its memory, its time) can fail a run that would
    pass alone: a test-mode candidate that did not pass while another ran beside it is judged
    again with the device to itself, and its verdict is that run's. A failure with the device
    alone is judged once; a file that fails alone too keeps its failure."""
    log, running = tmp_path / "judged.log", tmp_path / "running"
    running.mkdir()
    environment = {**ENVIRONMENT, "FAKE_JUDGE_LOG": str(log), "FAKE_JUDGE_RUNNING": str(running)}
    lanes = [LocalJudge("cpu", slot=0, lane=lane, program=FAKE_JUDGE, environment=environment) for lane in range(3)]
    service = Service(lanes, None, commit="fake")
    service.start()
    try:
        short_of_room, wrong, beside = service.submit_batch([{"source": "# wrong beside others\n# sleep 0.5\n"},
                                                             {"source": "# wrong\n# sleep 0.5\n"},
                                                             {"source": "# sleep 1.5\n"}])
        verdicts = {identifier: service.get(identifier, wait_s=60) for identifier in (short_of_room, wrong, beside)}
        alone = service.submit_batch([{"source": "# wrong alone\n"}])[0]
        verdicts[alone] = service.get(alone, wait_s=60)
    finally:
        service.close()
    assert [verdicts[identifier]["passed"] for identifier in (short_of_room, wrong, beside, alone)] == [True, False, True, False]
    assert all(verdict["state"] == "done" and verdict["error_class"] == "verdict" for verdict in verdicts.values())
    runs = {}
    for identifier, _, _, start, end in (line.split() for line in log.read_text().splitlines()):
        runs.setdefault(identifier, []).append((float(start), float(end)))
    assert {identifier: len(runs[identifier]) for identifier in verdicts} == {short_of_room: 2, wrong: 2, beside: 1, alone: 1}
    for identifier in (short_of_room, wrong):  # the second run had the device alone
        start, end = runs[identifier][1]
        assert not any(other_start < end and start < other_end for other, spans in runs.items() if other != identifier
                       for other_start, other_end in spans)


def test_a_gpu_lane_that_ran_out_of_workers_replenishes_before_its_rerun_alone(tmp_path):
    """Two lanes of a GPU, one waiting worker each: a file that fails beside another run uses its
    lane's worker up; the lane starts its workers again before the rerun alone (never one at a
    time while it holds the GPU alone), and the rerun's verdict stands."""
    log, running = tmp_path / "judged.log", tmp_path / "running"
    running.mkdir()
    environment = {**ENVIRONMENT, "FAKE_JUDGE_LOG": str(log), "FAKE_JUDGE_RUNNING": str(running)}
    lanes = [LocalJudge("cuda", visible_devices="0", lane=lane, lanes=2, program=FAKE_JUDGE, environment=environment)
             for lane in range(2)]
    for judge in lanes:
        judge.waiting = 1  # the fake judge's `--waiting-workers`: each run uses the lane's workers up
    service = Service(lanes, None, commit="fake")
    service.start()
    try:
        ids = service.submit_batch([{"source": f"# {index} wrong beside others\n# sleep 0.3\n"} for index in range(6)])
        assert all(service.get(identifier, wait_s=60)["passed"] for identifier in ids)
    finally:
        service.close()
    by_pid: dict[str, list[str]] = {}
    for identifier, pid, _, _, _ in (line.split() for line in log.read_text().splitlines()):
        by_pid.setdefault(pid, []).append(identifier)
    reruns = [(sequence, sequence.index(identifier), len(sequence) - 1 - sequence[::-1].index(identifier))
              for sequence in by_pid.values() for identifier in set(sequence) - {"replenish"} if sequence.count(identifier) == 2]
    assert reruns and service.judged_again_alone == len(reruns)
    assert all("replenish" in sequence[first + 1:second] for sequence, first, second in reruns)


@pytest.mark.parametrize("every_s", [0.05, 0.4])
def test_cancels_in_a_row_do_not_put_off_the_restart_of_a_judge_that_ignores_them(monkeypatch, every_s):
    """A client cancels a candidate again and again, each within CANCEL_REPLY_S of the last: the
    judge that does not answer is still ended CANCEL_REPLY_S after the first, not after the last."""
    from harness.service import judges

    monkeypatch.setattr(judges, "CANCEL_REPLY_S", 1.0)
    judge = LocalJudge("cpu", program=FAKE_JUDGE, environment=ENVIRONMENT)
    service = Service([judge], None, commit="fake")
    service.start()
    stop = threading.Event()
    try:
        stuck = service.submit("# sleep 60\n# ignores cancel\n")
        running_on(service, stuck)
        started = time.monotonic()

        def cancel_again():
            while not stop.is_set() and time.monotonic() - started < 15:
                judge.cancel(stuck)
                stop.wait(every_s)

        canceller = threading.Thread(target=cancel_again, daemon=True)
        canceller.start()
        cancelled = service.cancel(stuck)
        assert cancelled["state"] == "cancelled" and time.monotonic() - started < 8, (cancelled, time.monotonic() - started)
    finally:
        stop.set()
        service.close()


def test_a_lane_judge_is_told_it_takes_test_mode_alone():
    """Lane 0 takes every mode; another lane's judge process is started with --test-only, which
    keeps no calibration partner waiting (harness/service/judge.py)."""
    echo = (sys.executable, "-c", "import json, sys; print(json.dumps({'ready': True, 'argv': sys.argv[1:]}), flush=True); "
                                  "sys.stdin.read()")
    lanes = [LocalJudge("cpu", lane=lane, program=echo) for lane in range(3)]
    try:
        told = [judge.start()["argv"] for judge in lanes]
    finally:
        for judge in lanes:
            judge.close()
    assert ["--test-only" in argv for argv in told] == [False, True, True]
    assert [judge.modes for judge in lanes] == [None, ("test",), ("test",)]
