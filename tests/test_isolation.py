"""The judge's process kept out of its workers' reach: what a worker leaves running is ended, and
a worker holds no capability that would open the judge's descriptors."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path
import time

import pytest

from harness.judge.isolation import end_strays, is_running, protect_the_judge

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


@pytest.mark.skipif(not LINUX, reason="capabilities are Linux's")
def test_a_worker_gives_up_every_capability_and_the_judges_session():
    probe = textwrap.dedent("""
        import os
        from harness.runner.worker import give_up_privileges
        session = os.getsid(0)
        give_up_privileges()
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print(status["CapEff"].strip(), status["CapPrm"].strip(), status["CapBnd"].strip(), status["NoNewPrivs"].strip(),
              os.getsid(0) != session)
    """)
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    effective, permitted, bounding, no_new_privs, new_session = result.stdout.split()
    assert int(effective, 16) == int(permitted, 16) == 0
    assert no_new_privs == "1" and new_session == "True"
    if os.geteuid() == 0:  # root could drop its bounding set; another user keeps it, harmlessly
        assert int(bounding, 16) == 0


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
def test_calibration_stops_the_worker_and_the_spare_and_leaves_the_partner_running(tmp_path):
    from harness.judge.isolation import WorkerProcess
    from harness.runner.files import make_runner_folder

    folder = make_runner_folder(Path(__file__).parent / "fixtures" / "torch_submission.py", str(tmp_path))
    worker = WorkerProcess(str(tmp_path), folder, "cpu", 42, spares=True)
    partner = WorkerProcess(str(tmp_path), folder, "cpu", 42, echo=True)
    try:
        for process in (worker, partner):
            process.begin_case(120, lambda text: None)
        worker.start_spare()
        spare = (worker.pids - {worker._process.pid}).pop()
        with worker.paused(keep=partner.pids):
            assert _state(worker._process.pid, "T") == _state(spare, "T") == "T"
            assert _state(partner._process.pid) != "T"
        assert _state(worker._process.pid) != "T" and _state(spare) != "T"
    finally:
        for process in (worker, partner):
            process.close()
            process.close_spare()


def test_a_partner_that_was_ended_is_not_started_again(tmp_path):
    from harness.judge.isolation import CaseStopped, WorkerProcess
    from harness.runner.files import make_runner_folder

    folder = make_runner_folder(Path(__file__).parent / "fixtures" / "torch_submission.py", str(tmp_path))
    partner = WorkerProcess(str(tmp_path), folder, "cpu", 42, echo=True)
    try:
        assert partner.begin_case(120, lambda text: None)
        partner.kill()
        with pytest.raises(CaseStopped, match="calibration partner was ended while a worker ran"):
            partner.begin_case(120, lambda text: None)
    finally:
        partner.close()


@pytest.mark.skipif(not LINUX, reason="/proc is Linux's")
def test_a_worker_can_open_a_workers_memory_but_not_the_partners(tmp_path):
    """A process of the same user that gave up its capabilities, as every worker does, cannot open
    the memory of a process that is not dumpable: the partner's rounds stay out of its reach."""
    from harness.judge.isolation import WorkerProcess
    from harness.runner.files import make_runner_folder

    folder = make_runner_folder(Path(__file__).parent / "fixtures" / "torch_submission.py", str(tmp_path))
    worker = WorkerProcess(str(tmp_path), folder, "cpu", 42)
    partner = WorkerProcess(str(tmp_path), folder, "cpu", 42, echo=True)
    probe = textwrap.dedent("""
        import sys
        from harness.runner.worker import give_up_privileges
        give_up_privileges()
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
        result = subprocess.run([sys.executable, "-c", probe, str(worker._process.pid), str(partner._process.pid)],
                                capture_output=True, text=True, timeout=60,
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        assert result.stdout.split() == ["open", "refused"], result.stderr
    finally:
        for process in (worker, partner):
            process.close()
