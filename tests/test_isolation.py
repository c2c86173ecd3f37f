"""The judge's process kept out of its workers' reach: what a worker leaves running is ended, and
a worker holds no capability that would open the judge's descriptors."""

import concurrent.futures
import os
import subprocess
import sys
import textwrap
from pathlib import Path
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.judge.isolation import end_strays, is_running, output_tail, protect_the_judge
from harness.judge.layers import LAYERS_OFF_ENV

LINUX = sys.platform.startswith("linux")

# A child that starts a grandchild in a session of its own (a double fork) and exits: the
# grandchild, orphaned, would outlive everything a process group or session kill reaches.
ESCAPES = textwrap.dedent("""
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            print(os.getpid(), flush=True)
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)  # lets the caller's read of the pipe end
            os.dup2(quiet, 2)
            time.sleep(120)
        os._exit(0)
    os.wait()
""")


@pytest.mark.skipif(not LINUX, reason="subreapers and /proc are Linux's")
def test_an_orphan_a_worker_left_behind_is_adopted_and_ended():
    assert protect_the_judge() == []
    child = subprocess.run([sys.executable, "-c", ESCAPES], capture_output=True, text=True, timeout=60)
    grandchild = int(child.stdout.split()[0])
    assert is_running(grandchild)
    assert os.getppid() != grandchild and open(f"/proc/{grandchild}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())
    ended = end_strays(keep=set())
    assert grandchild in ended
    deadline = time.monotonic() + 10
    while is_running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(grandchild)


def _state(pid: int, awaited: str | None = None) -> str:
    """The process's state letter; with `awaited`, once it is that or a second has passed (a
    signal takes effect as the process is next scheduled)."""
    deadline = time.monotonic() + 1
    while True:
        with open(f"/proc/{pid}/stat") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
        if awaited is None or state == awaited or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
def test_calibration_stops_the_worker_and_leaves_the_partner_running(tmp_path):
    worker = _worker(tmp_path, cgroups=False)
    partner = _worker(tmp_path, echo=True, cgroups=False)
    try:
        for process in (worker, partner):
            process.begin_case(120, lambda text: None)
        current = worker._current.process.pid
        with worker.paused(keep=partner.pids):
            assert _state(current, "T") == "T"
            assert _state(partner._current.process.pid) != "T"
        assert _state(current) != "T"
    finally:
        for process in (worker, partner):
            process.close()


class _SlowCgroup:
    """A cgroup stub whose stop completes after `polls` looks at it (never, with None)."""

    def __init__(self, polls, takes_requests=True):
        self.polls, self.takes_requests, self.asked = polls, takes_requests, []

    def freeze(self, frozen):
        self.asked.append(frozen)
        return self.takes_requests

    def members(self):
        return []  # nothing of it outside its process's tree

    @property
    def frozen(self):
        if self.polls is None or not self.asked or not self.asked[-1]:
            return False
        self.polls -= 1
        return self.polls < 0


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
def test_a_stop_that_does_not_complete_in_time_falls_back_to_signals_and_every_asked_cgroup_is_let_go(monkeypatch):
    """Stops are asked of every cgroup at once and awaited together; one that does not complete
    within FREEZE_WAIT_S (a process inside a long system call) is stopped by a signal instead, and
    after the block every cgroup asked to stop is asked to let go, so that none stays stopped once
    the kernel completes its stop late."""
    from types import SimpleNamespace

    from harness.judge import isolation

    monkeypatch.setattr(isolation, "FREEZE_WAIT_S", 0.2)
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    prompt, late, without = _SlowCgroup(polls=3), _SlowCgroup(polls=None), _SlowCgroup(polls=None, takes_requests=False)
    spawned = [SimpleNamespace(process=sleeper, cgroup=cgroup) for sleeper, cgroup in zip(sleepers, (prompt, late, without))]
    try:
        with isolation._frozen(spawned):
            assert _state(sleepers[0].pid) != "T"  # its cgroup stopped it (a stub here): no signal
            assert _state(sleepers[1].pid, "T") == "T" and _state(sleepers[2].pid, "T") == "T"
        assert prompt.asked == [True, False] and late.asked == [True, False] and without.asked == [True]
        assert all(_state(sleeper.pid) != "T" for sleeper in sleepers)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_a_partner_that_was_ended_is_not_started_again(tmp_path):
    from harness.judge.isolation import CaseStopped

    partner = _worker(tmp_path, echo=True)
    try:
        assert partner.begin_case(120, lambda text: None)
        partner.kill()
        with pytest.raises(CaseStopped, match="calibration partner was ended while a worker ran"):
            partner.begin_case(120, lambda text: None)
    finally:
        partner.close()


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
def test_a_worker_can_open_a_workers_memory_but_not_the_partners(tmp_path, monkeypatch):
    """Where workers share a pid namespace (no bubblewrap), a process of the same user that gave up
    its capabilities, as every worker does, cannot open the memory of the partner, which is not
    dumpable: its rounds stay out of a worker's reach."""
    monkeypatch.setenv(LAYERS_OFF_ENV, "bubblewrap")
    worker, partner = _worker(tmp_path), _worker(tmp_path, echo=True)
    probe = textwrap.dedent("""
        import ctypes, sys
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # no new privileges
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        ctypes.CDLL(None).capset(header, (ctypes.c_uint32 * 6)())  # no capability
        for pid in sys.argv[1:]:
            try:
                open(f"/proc/{pid}/mem", "rb").close()
                print("open")
            except OSError:
                print("refused")
    """)
    try:
        for process in (worker, partner):
            process.begin_case(120, lambda text: None)
            process.request("hold", "probe", [])  # a request answered: the process is serving
        pids = [str(process._current.process.pid) for process in (worker, partner)]
        result = subprocess.run([sys.executable, "-c", probe, *pids], capture_output=True, text=True, timeout=60)
        assert result.stdout.split() == ["open", "refused"], result.stderr
    finally:
        for process in (worker, partner):
            process.close()


@pytest.mark.parametrize("ask_to_exit", [False, True])
def test_a_worker_is_killed_when_done_unless_asked_to_exit_for_a_profiler(tmp_path, ask_to_exit):
    """A run done with its worker kills it (an interpreter's exit costs half a second); a profiler
    wrapped around the run (nsys around `profile --ncu`) collects a process's data at its exit, so
    there the worker is asked to exit and leaves with status 0."""
    worker = _worker(tmp_path)
    try:
        worker.begin_case(120, lambda text: None)
        worker.request("hold", "probe", [])  # a request answered: the process is serving
        worker.close(ask_to_exit=ask_to_exit)
        assert (worker._ended.process.returncode == 0) is ask_to_exit, worker._ended.process.returncode
    finally:
        worker.close()


_SANDBOXES = []  # the sandboxes `_worker` made in a test: closed after it, their cgroups removed


@pytest.fixture(autouse=True)
def _close_sandboxes():
    yield
    while _SANDBOXES:
        _SANDBOXES.pop().close()


def _worker(tmp_path, echo: bool = False, cgroups: bool = True, submission: Path | None = None):
    """A sandboxed worker of the torch fixture (or `submission`) on the CPU (without cgroups: paused by signals)."""
    import torch

    from harness.judge.isolation import WorkerProcess
    from harness.judge.memory import SharedPool
    from harness.judge.sandbox import Sandbox
    from harness.runner.files import runner_files

    if not cgroups:
        os.environ[LAYERS_OFF_ENV] = "cgroup"
    try:
        sandbox = Sandbox("cpu")
    finally:
        if not cgroups:
            del os.environ[LAYERS_OFF_ENV]
    _SANDBOXES.append(sandbox)
    submission = submission or Path(__file__).parent / "fixtures" / "torch_submission.py"
    files = runner_files() if echo else {**runner_files(), "submission.py": submission}
    return WorkerProcess(sandbox, str(tmp_path), files, "cpu", 42, SharedPool(torch.device("cpu")).describe, echo=echo)


NEEDS_ROOT = pytest.mark.skipif(not sys.platform.startswith("linux") or os.geteuid() != 0,
                                reason="a mount namespace of its own needs root")


def _in_own_dev_shm(program: str) -> str:
    """What `program` printed, run in a fresh interpreter that entered its own /dev/shm first."""
    prologue = "import os, sys, threading\nfrom harness.judge.dev_shm import own_dev_shm, sweep_own_dev_shm\n"
    result = subprocess.run([sys.executable, "-c", prologue + program], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1], timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


@NEEDS_ROOT
def test_the_judges_own_dev_shm_is_swept_of_what_no_process_holds():
    """A file held open survives the sweep, one left by an ended process goes, and the host's
    /dev/shm never sees either."""
    printed = _in_own_dev_shm("""
assert own_dev_shm() is None
held = open("/dev/shm/held-by-the-judge", "wb")
with open("/dev/shm/left-by-a-worker", "wb") as left:
    left.write(b"answers")
print(sorted(sweep_own_dev_shm()), sorted(os.listdir("/dev/shm")))
""")
    assert printed.split("] [") == ["['left-by-a-worker'", "'held-by-the-judge']\n"]
    assert not {"held-by-the-judge", "left-by-a-worker"} & set(os.listdir("/dev/shm"))


@NEEDS_ROOT
def test_the_sweep_keeps_no_folder_no_link_and_no_name_given_over_a_held_file():
    """What a candidate would keep for the next one: a folder (a file in it, at any depth), a
    symbolic link (removed, never followed), a file renamed over the name of one the judge maps
    (the judge's mapping is then of a deleted file, whose name the new one takes), and names that
    read like a held one's. The file the judge maps is kept, under whatever name it has."""
    printed = _in_own_dev_shm(r"""
import mmap
assert own_dev_shm() is None
with open("/dev/shm/drivers-file", "wb") as made:
    made.write(b"judge" * 1000)
kept = open("/dev/shm/drivers-file", "r+b")
mapped = mmap.mmap(kept.fileno(), 0)
with open("/dev/shm/planted", "wb") as planted:
    planted.write(b"next candidate's answers")
os.rename("/dev/shm/planted", "/dev/shm/drivers-file")
os.makedirs("/dev/shm/a/b")
with open("/dev/shm/a/b/answers", "wb") as answers:
    answers.write(b"answers")
os.symlink("/dev/shm/drivers-file", "/dev/shm/link")
for name in ("drivers-file (deleted)", "drivers-file\\012", "drivers-file\n"):
    open(os.path.join("/dev/shm", name), "wb").close()
other = open("/dev/shm/other-drivers-file", "wb")
os.rename("/dev/shm/other-drivers-file", "/dev/shm/renamed-by-a-worker")
sweep_own_dev_shm()
print(sorted(os.listdir("/dev/shm")), bytes(mapped[:5]))
""")
    assert printed == "['renamed-by-a-worker'] b'judge'\n"


@NEEDS_ROOT
def test_the_sweep_leaves_a_gpu_workers_own_folder_to_the_judge():
    """A waiting GPU worker's /dev/shm is a folder of the judge's holding the mount points of the
    judge's files bound into it, none held by a process: the sweep leaves it whole (the judge
    removes it when its worker ends), and removes what is beside it."""
    printed = _in_own_dev_shm("""
assert own_dev_shm() is None
from harness.judge import worker_dev_shm
folder = worker_dev_shm.make_folder(None)
open(os.path.join(folder, "cuda.shm.0.1.1"), "wb").close()
os.makedirs(os.path.join(folder, "inner"))
open("/dev/shm/left-by-a-worker", "wb").close()
removed = sweep_own_dev_shm()
print(sorted(removed), sorted(os.listdir(folder)))
""")
    assert printed == "['left-by-a-worker'] ['cuda.shm.0.1.1', 'inner']\n"


@NEEDS_ROOT
def test_the_sweep_removes_folders_nested_past_the_recursion_limit_and_path_max():
    """What tests/fixtures/sandbox/cheat_nests_folders_in_its_dev_shm.py nests (os.walk raises
    RecursionError there, and a path to its bottom is past PATH_MAX): swept whole, a file held
    open at the bottom of another nesting kept with the folders above it, a GPU worker's folder
    left whole however deep."""
    printed = _in_own_dev_shm("""
from harness.judge.dev_shm import WORKER_FOLDER_PREFIX
def nest(top, depth, name="left"):
    os.makedirs(top, exist_ok=True)
    folder = os.open(top, os.O_RDONLY)
    for _ in range(depth):
        with open(os.open(name, os.O_WRONLY | os.O_CREAT, dir_fd=folder), "wb") as left:
            left.write(b"answers")
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY, dir_fd=folder)
        os.close(folder)
        folder = inner
    return folder
assert own_dev_shm() is None
os.close(nest("/dev/shm/nested", 3000))
bottom = nest("/dev/shm/holds", 1500)
held = os.open("held", os.O_WRONLY | os.O_CREAT, dir_fd=bottom)
os.close(nest("/dev/shm/" + WORKER_FOLDER_PREFIX + "1", 1500))
removed = sweep_own_dev_shm()
print(len(removed), sorted(os.listdir("/dev/shm")), os.listdir(bottom))
""")
    assert printed == "7501 ['.worker-1', 'holds'] ['held']\n"


@NEEDS_ROOT
def test_a_held_file_grown_past_half_the_judges_dev_shm_ends_the_services_judge():
    """A worker may grow (never shrink) a file the judge's driver keeps mapped there; no sweep
    removes it, and the next candidate's workers would find no room for their own driver files.
    More than half the tmpfs in use after the sweep is the service judge's sign to end (a fresh
    one has a fresh /dev/shm); less is not."""
    printed = _in_own_dev_shm("""
from harness.judge import dev_shm
dev_shm.SIZE = "16m"
assert own_dev_shm() is None
held = open("/dev/shm/drivers-file", "w+b")
held.write(b"driver" * 1000)
held.flush()
sweep_own_dev_shm()
print(dev_shm.full_after_sweep())
grown = open("/dev/shm/drivers-file", "ab")
grown.write(os.urandom(9 << 20))
grown.close()
sweep_own_dev_shm()
print(dev_shm.full_after_sweep())
""")
    roomy, full = printed.splitlines()
    assert roomy == "None"
    assert full.startswith("the judge's own /dev/shm still holds 9 MiB of its 16 MiB after the sweep")


@NEEDS_ROOT
def test_a_thread_started_before_the_judge_took_its_own_dev_shm_is_reported():
    """A mount namespace is a thread's: unshare leaves a thread started before on the host's
    /dev/shm. The judge enters its own before any import starts one, and says so where it could not."""
    printed = _in_own_dev_shm("""
started = threading.Event()
threading.Thread(target=lambda: (started.set(), threading.Event().wait()), daemon=True).start()
started.wait()
print(own_dev_shm())
open("/dev/shm/left-by-a-worker", "wb").close()
print(sweep_own_dev_shm())
""")
    reported, swept = printed.splitlines()
    assert "1 thread(s) started before it" in reported
    assert swept == "['left-by-a-worker']"  # the judge's own still, for the thread that entered it
    assert _in_own_dev_shm("print(own_dev_shm())\n") == "None\n"


@NEEDS_ROOT
def test_the_judge_enters_its_own_dev_shm_before_torch_starts_a_thread(monkeypatch):
    """`python -m harness` (and the service's judge) enters it before importing the judge, whose
    torch starts a thread on import (with its default threads: not the one thread a test process
    of `make test` may give what it starts, tests/conftest.py)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    program = """
import runpy, sys
from harness.judge import dev_shm
sys.argv = ["harness", "--help"]
try:
    runpy.run_module("harness", run_name="__main__")
except SystemExit:
    pass
print("RESULT", dev_shm._OWN_DEV_SHM, dev_shm._ENTERED, len(os.listdir("/proc/self/task")) > 1)
"""
    printed = _in_own_dev_shm(program)
    assert printed.splitlines()[-1] == "RESULT [None] [True] True"


class _JudgesEnd:
    """The judge's own end event as `request_behind` reads it: `query` true once `happens` is set."""

    def __init__(self):
        self.happens = threading.Event()

    def query(self) -> bool:
        return self.happens.is_set()


def _ended_soon(worker, within_s: float = 5) -> bool:
    deadline = time.monotonic() + within_s
    while worker.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    return not worker.alive


def _launched(launch) -> concurrent.futures.Future:
    """`launch` submitted to a launcher thread of its own, as JudgeClock.connect keeps one."""
    return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-behind-a-batch").submit(launch)


def test_the_judge_goes_on_once_its_own_event_behind_a_batch_has_happened(tmp_path):
    worker, end, launched_by = _worker(tmp_path), _JudgesEnd(), []
    try:
        worker.begin_case(30, lambda text: None)
        threading.Timer(0.2, end.happens.set).start()
        assert worker.request_behind("load", _launched(lambda: launched_by.append(threading.current_thread().name)), end) is None
        assert end.happens.is_set() and worker.alive
        assert launched_by[0].startswith("judge-behind-a-batch")  # never the judge's main thread
    finally:
        worker.close()


def test_a_word_of_being_ready_once_the_worker_has_started_is_no_reply_and_stops_the_case(tmp_path):
    """A worker says it is ready once, as its start ends; the submission, which can reach the
    worker's pipe, saying it again after a message of the worker's is a message no reply is."""
    from harness.judge.isolation import CaseStopped

    submission = tmp_path / "ready_again.py"
    submission.write_text(textwrap.dedent("""
        import gc, multiprocessing.connection
        from harness.shared import wire

        pipe = next(o for o in gc.get_objects() if isinstance(o, multiprocessing.connection.Connection))
        wire.send(pipe, (wire.PROGRESS, "importing"))
        wire.send(pipe, (wire.READY,))

        def custom_kernel(data):
            return data
    """))
    worker = _worker(tmp_path, submission=submission)
    try:
        worker.begin_case(60, lambda text: None)
        with pytest.raises(CaseStopped) as stopped:
            worker.request("load")
        assert stopped.value.result.status == "error" and "no reply" in stopped.value.result.message
    finally:
        worker.close()


@pytest.mark.parametrize("held", ["in the launch", "on the GPU"])
def test_gpu_work_that_never_ends_times_the_case_out_and_kills_the_worker(tmp_path, held):
    """A worker's queue that never reaches its done event (a spin queued behind its last call) holds
    a launch behind it in the driver, or the judge's end event on the GPU, for good: the case times
    out at its limit and the worker is killed."""
    from harness.judge.isolation import CaseStopped

    worker, end, forever = _worker(tmp_path), _JudgesEnd(), threading.Event()
    launch = forever.wait if held == "in the launch" else (lambda: None)
    try:
        worker.begin_case(60, lambda text: None)
        worker.request("load")  # started, which the case's limit does not count
        worker.begin_case(1, lambda text: None)
        started = time.monotonic()
        with pytest.raises(CaseStopped) as stopped:
            worker.request_behind("load", _launched(launch), end)
        assert stopped.value.result.status == "timeout"
        assert "GPU work did not end within the 1 s time limit" in stopped.value.result.message
        assert 1 <= time.monotonic() - started < 10
        time.sleep(0.2)
        assert not worker.alive
    finally:
        forever.set()
        worker.close()


def test_an_error_of_the_judges_launches_ends_the_worker_and_is_raised_where_it_waits(tmp_path):
    """A launch of the judge's that raised may have queued the judge's wait for the worker's done
    event already, behind GPU work the worker may never end: the worker is ended with the case, as
    at a timeout, and the error is the judge's to raise."""
    worker = _worker(tmp_path)

    def broken():
        raise RuntimeError("the judge's own copy failed")

    try:
        worker.begin_case(30, lambda text: None)
        with pytest.raises(RuntimeError, match="the judge's own copy failed"):
            worker.request_behind("load", _launched(broken), _JudgesEnd())
        assert _ended_soon(worker)
    finally:
        worker.close()


@pytest.mark.parametrize("queue", ["never runs through", "runs through meanwhile"])
def test_a_workers_error_while_its_gpu_work_runs_stops_the_case_at_once(tmp_path, queue):
    """A worker whose queued work faulted raises when it waits on that work (its context never
    records done, so the judge's end never happens): the case stops with the worker's error long
    before its time limit, the worker killed, and the judge's queue is reported as not run through,
    for the caller to give up; where the queue does run through meanwhile, nothing is to give up."""
    from harness.judge.isolation import BEHIND_GRACE_S, CaseStopped, ran_through

    worker, end = _worker(tmp_path), _JudgesEnd()
    try:
        worker.begin_case(60, lambda text: None)
        worker.request("load")  # started, so that its error comes before the judge's end
        if queue == "runs through meanwhile":
            threading.Timer(0.5, end.happens.set).start()
        launched = _launched(lambda: None)
        started = time.monotonic()
        with pytest.raises(CaseStopped) as stopped:
            worker.request_behind("no_such_request", launched, end)  # the worker raises, as a faulted sync does
        assert stopped.value.result.status == "error"
        assert stopped.value.result.message.startswith("after the calls returned, waiting for the GPU work they queued: ")
        assert "no_such_request" in stopped.value.result.message
        assert time.monotonic() - started < BEHIND_GRACE_S + 5
        assert ran_through(launched, end) == (queue == "runs through meanwhile")
        assert _ended_soon(worker)
    finally:
        worker.close()


def test_a_worker_that_answers_then_ends_while_its_gpu_work_runs_is_a_crash_at_once(tmp_path):
    """A worker that answers the judge's request behind its batch and then ends (its queued work,
    which the death releases nothing of, may never end): a crash within the grace, not a timeout
    at the case's limit."""
    from harness.judge.isolation import BEHIND_GRACE_S, CaseStopped, ran_through

    worker, end = _worker(tmp_path), _JudgesEnd()
    try:
        worker.begin_case(60, lambda text: None)
        worker.request("load")
        launched = _launched(lambda: None)
        threading.Timer(0.5, worker.kill).start()  # after its answer to "load" below
        started = time.monotonic()
        with pytest.raises(CaseStopped) as stopped:
            worker.request_behind("load", launched, end)
        assert stopped.value.result.status == "crash", stopped.value.result
        assert time.monotonic() - started < BEHIND_GRACE_S + 5
        assert not ran_through(launched, end)
    finally:
        worker.close()


def test_a_queue_whose_launches_raised_never_ran_through():
    """An end event never recorded reads as happened: the launches' error, not the event, decides."""
    from harness.judge.isolation import ran_through

    end = _JudgesEnd()
    end.happens.set()
    failed = _launched(lambda: 1 / 0)
    concurrent.futures.wait([failed])
    assert not ran_through(failed, end)
    made = _launched(lambda: None)
    concurrent.futures.wait([made])
    assert ran_through(made, end)
    end.happens.clear()
    assert not ran_through(made, end)


def test_the_judge_neither_asks_nor_reads_its_worker_while_its_launches_behind_a_batch_are_made(tmp_path):
    """As one who read the judge would: a host-bound worker's GPU has finished its batch when it
    replies, so the judge's launches behind it (fifty copies, a few µs each) lie in the judge's
    window, and a message read beside them (a watchdog thread started, an unpickling) holds the
    interpreter's lock they take between calls. The calibration partner answers at once and pays
    that in its exposed rounds, which are subtracted from every worker's; a worker that rebinds its
    batch_time to answer late would not, and be judged faster than it is. The judge sends and reads
    nothing until its launches are made."""
    worker, end, made = _worker(tmp_path), _JudgesEnd(), threading.Event()
    handled = []  # (what, whether the launches were still being made)
    try:
        worker.begin_case(30, lambda text: None)
        worker.request("load")  # started and imported: its next answer comes at once
        for name in ("ask", "_receive"):
            def spied(*arguments, original=getattr(worker, name), name=name):
                handled.append((name, not made.is_set()))
                return original(*arguments)
            setattr(worker, name, spied)

        def launch():  # launches that take a while
            time.sleep(0.5)
            made.set()
            end.happens.set()

        assert worker.request_behind("load", _launched(launch), end) is None
        assert [name for name, _ in handled] == ["ask", "_receive"]
        assert not any(during for _, during in handled), handled
    finally:
        worker.close()


def test_a_worker_that_ends_right_after_its_reply_leaves_the_judges_queue_its_grace(tmp_path):
    """A worker that ends the moment its batch's reply is out (an os._exit behind it, or a crash)
    makes the judge's request for its figure fail while the launches behind the batch may still be
    being made. They get the grace any worker's end gives them, and run through: nothing is given
    up, so the run's later cases run, where a case stopped at the request would have left the queue
    to be given up and every later case not run."""
    from harness.judge.isolation import CaseStopped, ran_through

    worker, end = _worker(tmp_path), _JudgesEnd()
    try:
        worker.begin_case(30, lambda text: None)
        worker.request("load")
        worker.kill()
        assert worker._current.connection.poll(10)  # its end of the socket closed: the request cannot go out

        def launch():
            time.sleep(1)
            end.happens.set()

        launched = _launched(launch)
        with pytest.raises(CaseStopped) as stopped:
            worker.request_behind("batch_time", launched, end)
        assert stopped.value.result.status == "crash"
        assert ran_through(launched, end)
    finally:
        worker.close()


def test_a_progress_line_behind_a_batch_holds_up_nothing_of_the_judges(tmp_path):
    """A worker that sends a progress line and then nothing: the judge shows the line and goes on
    watching its own launches, whose error is raised as it comes, not after the case's time limit
    spent waiting for the worker's next message."""
    hangs = tmp_path / "hangs_once_imported.py"
    hangs.write_text("import time\n\ntime.sleep(1e9)\n")
    worker, lines, shown = _worker(tmp_path, submission=hangs), [], threading.Event()

    def broken():
        shown.wait(60)
        raise RuntimeError("the judge's own copy failed")

    def on_progress(text):
        if text:
            lines.append(text)
            shown.set()

    try:
        worker.begin_case(40, on_progress)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="the judge's own copy failed"):
            worker.request_behind("load", _launched(broken), _JudgesEnd())  # "importing submission", then nothing
        assert lines == ["importing submission"]
        assert time.monotonic() - started < 30
    finally:
        worker.close()


def test_without_a_time_limit_every_message_is_read_under_a_watchdog_that_runs(tmp_path):
    """`--timeout inf`: a watchdog's timer for an infinite wait raised in its thread (no platform's
    clock holds it), printing a traceback into the judge's output for every message it read."""
    raised, hook = [], threading.excepthook
    threading.excepthook = lambda failed: raised.append(failed.exc_type)
    worker = _worker(tmp_path)
    try:
        worker.begin_case(float("inf"), lambda text: None)
        worker.request("load")
        time.sleep(0.2)
        assert raised == []
    finally:
        threading.excepthook = hook
        worker.close()


def test_a_time_limit_without_end_waits_for_the_judges_event_behind_a_batch(tmp_path):
    """`--timeout inf` (click's FloatRange takes it, as the service's float field takes Infinity):
    the judge waits for its own event behind a batch as long as it takes, as it waits for a reply."""
    worker, end = _worker(tmp_path), _JudgesEnd()
    try:
        worker.begin_case(float("inf"), lambda text: None)
        threading.Timer(0.4, end.happens.set).start()
        worker.request_behind("load", _launched(lambda: time.sleep(0.2)), end)  # launches that take a while, as a thread's do
        assert end.happens.is_set() and worker.alive
    finally:
        worker.close()


def test_a_process_that_gave_up_a_queue_ends_though_a_thread_of_its_waits_for_good():
    """A thread of the judge's held in the driver behind a given-up queue would hold the
    interpreter's teardown: the process ends at once, its output flushed, with its status."""
    program = textwrap.dedent("""
        import threading
        from harness.judge import given_up
        threading.Thread(target=threading.Event().wait).start()  # never ends, and is no daemon
        given_up.give_up(object())
        print("verdict printed", end="")
        given_up.end_process(3)
    """)
    ended = subprocess.run([sys.executable, "-c", program], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                           text=True, timeout=60)
    assert ended.returncode == 3 and ended.stdout == "verdict printed", ended


def test_after_a_queue_is_given_up_what_would_be_freed_is_kept():
    """What a given-up queue may still read (a worker's mapped memory, the run's pool) is never
    released once a queue was given up, and released as usual before."""
    program = textwrap.dedent("""
        from harness.judge import given_up
        released = []
        given_up.keep_or("before", lambda: released.append("before"))
        given_up.give_up(object())
        given_up.keep_or("after", lambda: released.append("after"))
        print(released, given_up._kept, given_up.any_given_up())
    """)
    ran = subprocess.run([sys.executable, "-c", program], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=60)
    assert ran.stdout.strip() == "['before'] ['after'] True", ran


@pytest.mark.parametrize("ending", ["Ctrl-C", "the judge's own error"])
def test_a_run_ended_otherwise_after_a_give_up_still_ends(ending):
    """Ctrl-C while the judge waits behind a batch gives the queue up (JudgeClock.round) and reaches
    the command line as click's Abort; an error of the judge's own may follow a give-up too. The
    process must end there, not wait at the interpreter's exit for the launcher thread held in the
    driver; the error is shown."""
    program = textwrap.dedent(f"""
        import concurrent.futures, threading
        import click
        from harness import cli
        from harness.judge import given_up
        launcher = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-behind-a-batch")
        launcher.submit(threading.Event().wait)  # a launch held for good
        given_up.give_up(object(), launcher)

        def ended(*arguments, **keywords):
            raise click.Abort() if {ending == "Ctrl-C"!r} else RuntimeError("the judge's own error")

        cli.cli.main = ended
        cli.main()
    """)
    ran = subprocess.run([sys.executable, "-c", program], cwd=Path(__file__).resolve().parents[1], capture_output=True,
                         text=True, timeout=60)
    from harness.judge.exits import EXIT_ABORTED
    if ending == "Ctrl-C":
        assert ran.returncode == EXIT_ABORTED, ran
    else:
        assert ran.returncode == 1 and "RuntimeError: the judge's own error" in ran.stderr, ran


def test_a_case_time_limit_counts_from_the_end_of_its_workers_start(tmp_path):
    """A fresh worker's start (the sandbox, the interpreter, torch's import) takes longer than this
    case's limit on any machine; the file's own call, the import, fits in it."""
    worker = _worker(tmp_path)
    try:
        assert worker.begin_case(0.5, lambda text: None)
        started = time.monotonic()
        assert worker.request("load") is None
        assert time.monotonic() - started > 0.5  # the start alone ran past the case's limit
    finally:
        worker.close()


def test_a_start_past_its_own_limit_is_no_verdict(tmp_path, monkeypatch):
    from harness.judge import isolation
    from harness.judge.isolation import WorkerNotStarted

    monkeypatch.setattr(isolation, "START_LIMIT_S", 0.05)
    worker = _worker(tmp_path)
    try:
        assert worker.begin_case(60, lambda text: None)
        with pytest.raises(WorkerNotStarted, match="sent nothing within the 0.05 s its start may take"):
            worker.request("load")
        time.sleep(0.2)
        assert not worker.alive
    finally:
        worker.close()


def test_a_worker_that_ends_in_its_start_is_no_verdict_and_after_it_a_crash(tmp_path):
    from harness.judge.isolation import CaseStopped, WorkerNotStarted

    worker = _worker(tmp_path)
    try:
        assert worker.begin_case(60, lambda text: None)
        worker.kill()
        with pytest.raises(WorkerNotStarted, match=r"ended before its first message \(killed by signal SIGKILL"):
            worker.request("load")
        assert worker.begin_case(60, lambda text: None)  # a new process
        worker.request("load")
        worker.kill()
        with pytest.raises(CaseStopped) as stopped:
            worker.request("load")
        assert stopped.value.result.status == "crash"
    finally:
        worker.close()


@given(st.text(max_size=300), st.integers(1, 200), st.booleans())
def test_an_outputs_tail_says_what_it_left_out_and_starts_on_a_whole_line(text, characters, left_out):
    shown = output_tail(text, characters, left_out)
    cut = left_out or len(text) > characters
    assert shown.startswith("(its earlier output left out)\n") == cut
    body = shown.removeprefix("(its earlier output left out)\n") if cut else shown
    assert text.endswith(body) and len(body) <= max(characters, len(text) if not cut else characters)
    if cut and "\n" in text[-characters:]:
        assert text[-characters:].partition("\n")[2] == body  # from the first whole line on
