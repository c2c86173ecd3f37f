"""One service judge process (harness/service/judge.py, fed through LocalJudge as the front and
a Ray actor feed it) judging candidates in turn: what one candidate does to its worker, its
memory, its files or its judge's driver files never reaches the next candidate's verdict. Needs
none of the extras (the API's tests, in test_service.py, need the `service` extra)."""

import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
ONE_CASE = "m: 128; n: 256; k: 256; l: 1; seed: 1111\n"
TWO_CASES = ONE_CASE + "m: 256; n: 128; k: 512; l: 2; seed: 7\n"


@pytest.mark.e2e
def test_a_worker_over_the_memory_limit_is_a_crash_and_the_next_candidate_passes(tmp_path):
    from harness.service.judges import LocalJudge

    hog = "import torch\n\ndef custom_kernel(data):\n    hoard = [torch.ones(2**27) for _ in range(16)]\n    return hoard\n"
    judge = LocalJudge("cpu", memory_limit_mib=1024)
    judge.start()
    try:
        crashed = judge.judge({"id": "hog", "source": hog, "mode": "test", "tests": ONE_CASE, "options": {}})
        case = crashed["document"]["cases"][0]
        assert case["status"] == "crash" and "over the 1024 MiB limit" in case["message"]
        passed = judge.judge({"id": "next", "source": (FIXTURES / "torch_submission.py").read_text(), "mode": "test",
                              "tests": ONE_CASE, "options": {}})
        assert passed["exit_status"] == 0 and passed["document"]["cases"][0]["status"] == "pass"
    finally:
        judge.close()


def test_a_retired_workers_pid_marks_no_later_worker_over_the_limit(tmp_path):
    """The pid of a worker killed over the memory limit comes back, in time, as another's: once
    the run has retired it, it no longer exempts that other from the watchdog."""
    from types import SimpleNamespace

    from harness.service.pool import WorkerPool

    pool = WorkerPool("cpu", 42, memory_limit_bytes=2**40)
    try:
        worker = pool.workers().worker(pool.sandbox, str(tmp_path), {}, SimpleNamespace(device="cpu", rng_seed=42), None)
        worker.begin_case(60.0, lambda text: None)
        pid = worker._current.process.pid
        pool.over_limit.add(pid)  # as the watchdog marks a worker it killed
        worker.close()
        assert pid not in pool.over_limit
    finally:
        pool.close()


def _held(spawned) -> bool:
    if spawned.cgroup.frozen:
        return True
    return Path(f"/proc/{spawned.process.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def _frozen(spawned, expected: bool = True) -> bool:
    """Whether a process is held (its cgroup frozen, or stopped by a signal), once it is as
    `expected` or a second has passed: a signal takes effect as the process is next scheduled."""
    deadline = time.monotonic() + 1
    while _held(spawned) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return _held(spawned)


def test_the_workers_waiting_for_the_next_candidate_are_frozen_while_a_case_is_measured(tmp_path):
    """A waiting worker still starting (torch's import, its device's context) would share the
    cores and the GPU with the rounds a timed case measures: it is held for that part of the
    case (harness/judge/cases.py run_benchmark), and let go after it."""
    from types import SimpleNamespace

    from harness.service.pool import WorkerPool

    pool = WorkerPool("cpu", 42, depth=2)
    try:
        pool.prime()
        worker = pool.workers().worker(pool.sandbox, str(tmp_path), {}, SimpleNamespace(device="cpu", rng_seed=42), None)
        worker.begin_case(60.0, lambda text: None)
        waiting = pool.waiting()
        assert len(waiting) == 2 and worker._current not in waiting
        with worker.neighbours_frozen():
            assert all(_frozen(spawned) for spawned in waiting)
            assert not _frozen(worker._current, expected=False)
        assert not any(_frozen(spawned, expected=False) for spawned in waiting)
        worker.close()
    finally:
        pool.close()


def test_a_lanes_pool_starts_no_worker_beside_a_run_and_replenishes_when_asked_each_worker_ready(tmp_path):
    """A pool of one of several lanes (`replaces_on_take` off): a run's take starts nothing;
    `replenish` starts the workers up to the pool's depth and returns once each has said it is
    ready (its first message, which a run's first request then reads past)."""
    from types import SimpleNamespace

    from harness.service.pool import WorkerPool

    pool = WorkerPool("cpu", 42, depth=2, replaces_on_take=False)
    try:
        pool.prime()
        pool.prime(echo=True)  # lane 0's calibration partner waits beside them, and is no submission worker
        taken = pool.take(echo=False)
        assert len(pool.waiting()) == 2 and pool.started == 3
        began = time.monotonic()
        assert pool.replenish(60.0) == 2 and pool.ready_waiting() == 2 and pool.started == 4
        assert time.monotonic() - began < 30  # done once its workers are ready, not at its limit
        pool.waiting()[0].kill()
        assert pool.replenish(60.0) == 2 and pool.started == 5  # one that ended is replaced
        worker = pool.workers().worker(pool.sandbox, str(tmp_path), {}, SimpleNamespace(device="cpu", rng_seed=42), None)
        worker.begin_case(60.0, lambda text: None)
        assert worker._current.connection.poll(0)  # its word that it is ready, unread
        worker._current.kill()  # gone before its first reply: still its start, the machine's fault
        from harness.judge.isolation import WorkerNotStarted

        with pytest.raises(WorkerNotStarted):
            worker.request("release", 1)
        worker.close()
        taken.close()
    finally:
        pool.close()


def test_a_benchmark_case_is_measured_inside_the_scope_that_freezes_them(monkeypatch):
    """run_benchmark checks the first batch (the candidate's import and compile, beside which
    the waiting workers may start), then measures the rest with the judge's other processes frozen."""
    import contextlib
    from types import SimpleNamespace

    from harness.judge import cases

    class Worker:
        frozen = False

        @contextlib.contextmanager
        def neighbours_frozen(self):
            self.frozen = True
            try:
                yield
            finally:
                self.frozen = False

    worker, seen = Worker(), []
    judging = SimpleNamespace(worker=worker, progress=lambda text: None)
    monkeypatch.setattr(cases, "BenchmarkCase", lambda job, judging: SimpleNamespace(
        round=lambda: seen.append(("first batch", worker.frozen)), pristine=None, shared=None, expected=None))
    monkeypatch.setattr(cases, "_load", lambda process: None)
    monkeypatch.setattr(cases, "_inputs_problem", lambda *arguments: None)
    monkeypatch.setattr(cases, "_value_problem", lambda *arguments: None)
    monkeypatch.setattr(cases, "_measured", lambda case, first: seen.append(("measured", worker.frozen)) or "measured")
    assert cases.run_benchmark(SimpleNamespace(), judging) == "measured"
    assert seen == [("first batch", False), ("measured", True)] and not worker.frozen


@pytest.mark.e2e
def test_nothing_a_candidate_wrote_outlives_it_and_its_tmp_is_held_to_the_memory_limit(tmp_path):
    """A candidate's log (64 MiB of it) is gone with its worker, so that candidates cannot fill the
    judge's disk one after another; a candidate's /tmp and its own folder (memory no resident size
    counts, never the judge's disk) hold no more than the memory limit."""
    from harness.service.judges import LocalJudge

    scratch = tmp_path / "judge"
    scratch.mkdir()
    judge = LocalJudge("cpu", memory_limit_mib=1024, environment={**os.environ, "TMPDIR": str(scratch)})
    judge.start()
    try:
        def judged(fixture):
            reply = judge.judge({"id": fixture, "source": (FIXTURES / f"{fixture}.py").read_text(), "mode": "test",
                                 "tests": ONE_CASE, "options": {}})
            return reply["document"]["cases"][0]

        assert judged("cheat_leaves_a_log_behind")["status"] == "pass"
        left = {str(path): path.stat().st_size for path in scratch.rglob("*") if path.is_file()}
        assert sum(left.values()) < 8 << 20, left
        for hoarding in ("cheat_hoards_memory_in_tmp", "cheat_hoards_memory_in_its_folder"):
            hoarded = judged(hoarding)
            # The worker's memory cgroup ends it first where the system has one (its tmpfs pages
            # count), else the tmpfs, held to the limit, refuses the write.
            assert (hoarded["status"] == "crash" and "over the 1024 MiB limit" in hoarded["message"]
                    or hoarded["status"] == "error" and "No space left on device" in hoarded["message"]), hoarded
        left = {str(path): path.stat().st_size for path in scratch.rglob("*") if path.is_file()}
        assert sum(left.values()) < 8 << 20, left
    finally:
        judge.close()


# A next candidate that fails where an earlier one's planted module is on its import path.
CHECKS_FOR_A_PLANTED_MODULE = """import importlib.util

from reference import ref_kernel


def custom_kernel(data):
    if importlib.util.find_spec("nvfp4_planted_by_a_candidate") is not None:
        raise RuntimeError("a module an earlier candidate planted is on this worker's import path")
    return ref_kernel(data)
"""


@pytest.mark.e2e
def test_a_candidate_reaches_none_of_the_workers_waiting_for_the_next(tmp_path):
    """The workers the service's judge keeps waiting for the next candidate are started while a
    candidate runs: that candidate's planting in their folders, its signals and its cgroup writes
    reach none of them. The next candidate is served by a worker that answers, in test and in
    benchmark, within a short time limit, and finds no planted module."""
    from harness.service.judges import LocalJudge

    scratch = tmp_path / "judge"
    scratch.mkdir()
    judge = LocalJudge("cpu", environment={**os.environ, "TMPDIR": str(scratch)})
    judge.start()
    try:
        cheat = judge.judge({"id": "cheat", "source": (FIXTURES / "cheat_reaches_the_waiting_workers.py").read_text(),
                             "mode": "test", "tests": TWO_CASES, "options": {}})
        assert [case["status"] for case in cheat["document"]["cases"]] == ["pass", "pass"], cheat["report"]
        assert not list(scratch.rglob("nvfp4_planted_by_a_candidate.py"))
        for mode in ("test", "benchmark"):
            honest = judge.judge({"id": f"next {mode}", "source": CHECKS_FOR_A_PLANTED_MODULE, "mode": mode,
                                  "tests": ONE_CASE, "options": {"max_repeats": 5, "timeout_s": 60}})
            statuses = [case["status"] for case in honest["document"]["cases"]]
            assert honest["exit_status"] == 0 and statuses == ["pass"], (cheat["report"], honest["report"])
    finally:
        judge.close()


@pytest.mark.e2e
@pytest.mark.gpu
def test_a_candidate_that_removes_the_judges_driver_files_leaves_the_next_candidate_whole(tmp_path):
    """A GPU worker may remove files under its judge's /dev/shm (Landlock refuses shrinking there,
    not removing): the CUDA driver's files of the judge and the partner. The next candidate of the
    same judge, whose workers open them by name, must still pass, in test and benchmark."""
    import torch

    from harness.judge.sandbox import UNSAFE_ENV
    from harness.service.judges import LocalJudge

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the judge's driver files under /dev/shm are a GPU's")
    # A root judge's GPU workers are uid 0 outside their user namespace (CUDA IPC), which its
    # check names as refused (docs/judge.md): this test is about /dev/shm, not the user.
    judge = LocalJudge("cuda", environment={**os.environ, UNSAFE_ENV: "1"} if os.geteuid() == 0 else None)
    judge.start()
    try:
        cheat = judge.judge({"id": "cheat", "source": (FIXTURES / "cheat_removes_the_judges_driver_files.py").read_text(),
                             "mode": "test", "tests": TWO_CASES, "options": {}})
        for mode in ("test", "benchmark"):
            honest = judge.judge({"id": f"next {mode}", "source": (FIXTURES / "torch_submission.py").read_text(),
                                  "mode": mode, "tests": ONE_CASE, "options": {"max_repeats": 5}})
            statuses = [case["status"] for case in honest["document"]["cases"]]
            assert honest["exit_status"] == 0 and statuses == ["pass"], (cheat["report"], honest["report"])
    finally:
        judge.close()


# A judge that replies to its first candidate and then ends, as one that gave up a queue behind a
# candidate's GPU work (or lost its device, or found its /dev/shm full) ends after that reply,
# taking a while to close its waiting workers first.
ENDS_AFTER_ITS_REPLY = """
import json, sys, time
from harness.judge.exits import EXIT_DEVICE_LOST
print(json.dumps({"ready": True}), flush=True)
request = json.loads(sys.stdin.readline())
print(json.dumps({"id": request["id"], "exit_status": 0, "document": {"cases": []}}), flush=True)
time.sleep(1)
sys.exit(EXIT_DEVICE_LOST)
"""


def test_the_candidate_after_one_that_ended_its_judge_is_judged_by_a_fresh_judge(monkeypatch):
    """The front hands the next candidate to its judge as soon as the last reply is in: a judge that
    ends after that reply must not take the next candidate down with it (docs/service.md)."""
    import subprocess
    import sys

    from harness.service import judges

    popen = subprocess.Popen
    monkeypatch.setattr(judges.subprocess, "Popen",
                        lambda command, **options: popen([sys.executable, "-c", ENDS_AFTER_ITS_REPLY], **options))
    judge = judges.LocalJudge("cpu")
    try:
        assert judge.judge({"id": "ends its judge", "options": {}})["id"] == "ends its judge"
        assert judge.judge({"id": "next", "options": {}})["id"] == "next"
        assert judge.starts == 2
    finally:
        judge.close()


@pytest.mark.e2e
def test_names_no_file_can_take_leave_the_judge_answering(tmp_path):
    """A caller other than the front (which refuses them) may hand the judge any name: the copy
    takes a name it can write, and the judge answers each, and the next."""
    from harness.service.judges import LocalJudge

    source = (FIXTURES / "torch_submission.py").read_text()
    judge = LocalJudge("cpu")
    judge.start()
    try:
        for name in (".", "..", "../../escape.py", "\ud800.py", "x" * 300, "a\0b.py", "", "ok.py"):
            reply = judge.judge({"id": "n", "source": source, "name": name, "mode": "test", "tests": ONE_CASE, "options": {}})
            assert reply["exit_status"] == 0 and reply["document"]["cases"][0]["status"] == "pass", (name, reply["document"])
        assert judge.starts == 1
    finally:
        judge.close()


@pytest.mark.e2e
@pytest.mark.gpu
def test_test_mode_lanes_share_a_gpu_and_a_benchmark_has_it_alone(tmp_path):
    """Three judges on one GPU (harness/service/lanes.py): the test-mode candidates pass side by
    side, and the benchmark candidate among them runs while no test-mode candidate does."""
    import torch

    from harness.service.front import Service
    from harness.service.judges import LocalJudge

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: lanes share a GPU")
    service = Service([LocalJudge("cuda", visible_devices="0", lane=lane) for lane in range(3)], None)
    service.start()
    try:
        source = (FIXTURES / "torch_submission.py").read_text()
        requests = ([{"source": f"# {index}\n{source}", "tests": TWO_CASES} for index in range(6)]
                    + [{"source": source, "mode": "benchmark", "max_repeats": 3}]
                    + [{"source": f"# after {index}\n{source}", "tests": TWO_CASES} for index in range(3)])
        views = [service.get(identifier, wait_s=600) for identifier in service.submit_batch(requests)]
    finally:
        service.close()
    assert all(view["passed"] and view["error_class"] == "verdict" for view in views), [view["document"] for view in views]
    timed = views[6]
    tests = views[:6] + views[7:]
    assert not [view for view in tests if view["started_at"] < timed["finished_at"] and timed["started_at"] < view["finished_at"]]
    first = views[:3]
    assert max(view["started_at"] for view in first) < min(view["finished_at"] for view in first), "no two ran side by side"


def cancel_mid_case_then_judge_the_next(device: str, mode: str, **options) -> None:
    """A candidate hanging in its first case, cancelled: its workers are killed, its other case is
    not run, and the judge process that ran it, never started again, judges the next candidate."""
    from harness.service.front import Service
    from harness.judge.sandbox import UNSAFE_ENV
    from harness.service.judges import CANCEL_REPLY_S, LocalJudge

    # A root GPU judge without a user of its own lacks the user layer (serve --unsafe-sandbox).
    unsafe = {**os.environ, UNSAFE_ENV: "1"} if device == "cuda" and os.geteuid() == 0 else None
    judge = LocalJudge(device, visible_devices="0" if device == "cuda" else None, environment=unsafe)
    service = Service([judge], None)
    service.start()
    try:
        pid = judge.status()["pid"]
        hanging = service.submit((FIXTURES / "broken_hangs.py").read_text(), name="broken_hangs.py", mode=mode, tests=TWO_CASES,
                                 timeout_s=300.0, **options)
        deadline = time.monotonic() + 60
        while service.get(hanging)["state"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(15)  # its worker started, most likely, and in the case
        started = time.monotonic()
        cancelled = service.cancel(hanging)
        assert cancelled["state"] == "cancelled" and time.monotonic() - started < CANCEL_REPLY_S, cancelled
        cases = cancelled["document"].get("cases")
        if cases is None:  # the cancel came while the worker still started (a loaded machine): no case judged
            assert "SIGKILL" in cancelled["document"]["error"], cancelled["document"]
        else:
            assert cases[-1]["status"] == "not run" and "cancelled" in cases[-1]["message"], cases
        after = service.get(service.submit((FIXTURES / "torch_submission.py").read_text(), tests=ONE_CASE), wait_s=300)
        assert after["passed"] is True, after["report"]
        assert judge.status()["pid"] == pid and judge.starts == 1
        assert service.candidates.counts() == {"queued": 0, "running": 0, "done": 1, "cancelled": 1}
    finally:
        service.close()


@pytest.mark.e2e
def test_a_cancel_ends_the_candidates_workers_and_the_same_judge_judges_the_next():
    cancel_mid_case_then_judge_the_next("cpu", "test")


@pytest.mark.e2e
@pytest.mark.gpu
def test_a_cancelled_benchmark_ends_its_worker_and_partner_and_the_same_gpu_judge_judges_the_next():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a timed run's worker and calibration partner on its GPU")
    cancel_mid_case_then_judge_the_next("cuda", "benchmark", max_repeats=3)


def _waiting_kinds(judge) -> list[bool]:
    """Whether each worker the judge process keeps waiting is a calibration partner (`echo`), once
    its pool is started: read from the workers' own command lines, or a template's child's name
    (its command line is its template's: harness/runner/template.py)."""
    from harness.judge.isolation import _descendants, _parents
    from harness.runner.template import NAMES

    kinds = []
    for pid in _descendants(judge._process.pid, _parents()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if name in NAMES.values():
            kinds += [name == NAMES["partner"]] if name != NAMES["template"] else []
            continue
        settings = [part for part in command if part.startswith(b"{") and b'"echo"' in part]
        if settings and b"bwrap" not in command[0]:  # the interpreter, not bubblewrap around it
            kinds.append(b'"echo": true' in settings[0])
    return kinds


def _waiting_kinds_once_started(judge, expected: int, limit_s: float = 120.0) -> list[bool]:
    """`_waiting_kinds` once the judge's pool has started `expected` workers (a ready judge's pool
    may still be starting them), or what it had at `limit_s`."""
    deadline = time.monotonic() + limit_s
    while len(kinds := _waiting_kinds(judge)) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return kinds


@pytest.mark.e2e
def test_a_test_mode_lane_starts_no_calibration_partner_and_judges_a_test(tmp_path):
    """Only a timed run uses a calibration partner: lane 0 keeps one waiting, a test-mode lane none,
    and a test-mode lane's candidate gets the verdict lane 0's gets."""
    from harness.service.judges import LocalJudge

    lanes = [LocalJudge("cpu", lane=lane) for lane in range(2)]
    try:
        for judge in lanes:
            judge.start()
        assert sorted(set(_waiting_kinds_once_started(lanes[0], expected=2))) == [False, True]
        kinds = _waiting_kinds_once_started(lanes[1], expected=1)
        assert kinds and not any(kinds)
        request = {"source": (FIXTURES / "torch_submission.py").read_text(), "mode": "test", "tests": TWO_CASES, "options": {}}
        replies = [judge.judge({**request, "id": f"lane {index}"}) for index, judge in enumerate(lanes)]
        assert [reply["exit_status"] for reply in replies] == [0, 0]
        assert [[case["status"] for case in reply["document"]["cases"]] for reply in replies] == [["pass", "pass"]] * 2
    finally:
        for judge in lanes:
            judge.close()


@pytest.mark.e2e
def test_a_worker_started_ahead_serves_one_run_and_one_that_died_is_replaced_or_named_the_machines_fault(tmp_path):
    """The pool hands each started worker to one run at most; a waiting worker that died is never
    handed out (a live one is); one that dies after it was handed out, before its first message,
    is the machine's fault (WorkerNotStarted: an `infrastructure` reply), never the file's case."""
    from types import SimpleNamespace

    from harness.judge.isolation import WorkerNotStarted
    from harness.service.pool import WorkerPool

    options = SimpleNamespace(device="cpu", rng_seed=42)
    pool = WorkerPool("cpu", 42, depth=2)
    try:
        pool.prime()
        taken = [pool.take(echo=False) for _ in range(3)]
        waiting = {spawned.process.pid for spawned in pool.waiting()}
        assert len({spawned.process.pid for spawned in taken}) == 3 and waiting.isdisjoint(s.process.pid for s in taken)
        dead = pool.waiting()[0]
        dead.kill()
        worker = pool.workers().worker(pool.sandbox, str(tmp_path), {}, options, None)
        worker.begin_case(60.0, lambda text: None)
        assert worker._current is not dead and worker.alive
        worker._current.kill()  # handed out, then gone before its first message
        with pytest.raises(WorkerNotStarted):
            worker.request("release", 1)
        worker.close()
    finally:
        for spawned in taken:
            spawned.close()
        pool.close()
