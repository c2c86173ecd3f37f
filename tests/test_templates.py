"""A service pool's template worker (harness/runner/template.py, harness/judge/templates.py), tried
as an attacker in one of its children would: the child's layers are a fresh worker's, and it
reaches neither its template, nor its siblings, nor the children after it; a child's crash reads
as a fresh worker's; where the system refuses a template, or the template dies, the pool starts
workers afresh or a template again, and no candidate's verdict ever depends on it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.judge import worker_root
from harness.judge.isolation import CaseStopped, WorkerLost, end_strays, is_running
from harness.judge.layers import LAYERS_OFF_ENV
from harness.judge.memory import SharedPool
from harness.judge.sandbox import Sandbox
from harness.judge.templates import COMPARED, ForkedProcess
from harness.runner.files import runner_files

LINUX = sys.platform.startswith("linux")
FIXTURES = Path(__file__).parent / "fixtures"
PROBE = FIXTURES / "sandbox" / "probe_template_child.py"
ONE_CASE = "m: 128; n: 256; k: 256; l: 1; seed: 1111\n"
OPTIONS = SimpleNamespace(device="cpu", rng_seed=42)
# What the probe's child must never get (it may mark its own /tmp, /dev/shm and folder).
TRIED = ("read a sibling's handed-over file", "see a sibling's folder", "see another folder of the pool's",
         "signal the template", "signal a sibling", "trace the template", "trace a sibling",
         "read the template's memory", "read the template's environment", "read a sibling's memory",
         "read a sibling's environment", "reach the template's control socket", "hold a descriptor of the template's",
         "lower its siblings' priority", "write a waiting worker's /proc files",
         *(f"{what} {whose}{rest}" for whose in ("the template's", "a waiting worker's") for what, rest in (
             ("set", " limits"), ("lower", " priority"), ("pin", " threads to one core"), ("make", " scheduling idle"))),
         "lower the priority of every process of its uid")


def _template_refused() -> str | None:
    sandbox = Sandbox("cpu")
    try:
        return sandbox.template_refused()
    finally:
        sandbox.close()


def _skip_without_a_template() -> None:
    if not LINUX:
        pytest.skip("templates are Linux's")
    refused = _template_refused()
    if refused:
        pytest.skip(f"this system gives a pool no template: {refused}")


def _pool(**settings):
    from harness.service.pool import WorkerPool

    return WorkerPool("cpu", 42, **settings)


def _inner_pid(host_pid: int) -> int:
    """The process's pid in its innermost pid namespace (the template's), from the host's /proc."""
    for line in open(f"/proc/{host_pid}/status"):
        if line.startswith("NSpid:"):
            return int(line.split()[-1])
    raise AssertionError(f"no NSpid for {host_pid}")


def _said(output: str) -> dict[str, bool]:
    said = {}
    for line in output.splitlines():
        verdict, _, what = line.partition(" ")
        if verdict in ("GOT", "REFUSED"):
            said[what.rsplit(" (", 1)[0] if verdict == "REFUSED" else what] = verdict == "GOT"
    return said


def _run(pool, tmp_path: Path, files: dict[str, Path]):
    """A worker of the pool's, its first request made; the worker, still running, and its output."""
    worker = pool.workers().worker(pool.sandbox, str(tmp_path), {**runner_files(), **files}, OPTIONS,
                                   SharedPool(torch.device("cpu")).describe)
    worker.begin_case(300, lambda text: None)
    try:
        worker.request("load")
    except CaseStopped as stopped:
        raise AssertionError(Path(worker.log_path).read_text(errors="replace") + stopped.result.message) from None
    return worker, Path(worker.log_path).read_text(errors="replace")


def _targets(tmp_path: Path, name: str, **targets) -> Path:
    import json

    path = tmp_path / name
    path.write_text(json.dumps(targets))
    return path


@pytest.mark.e2e  # sandboxed templates of their own
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_template_childs_layers_are_those_of_a_fresh_worker():
    """The sandbox's check run in a template's child reports every layer a fresh worker's check
    does, each in force (no capability, no_new_privs, the filter, Landlock, the same uids, no host
    socket reached)."""
    _skip_without_a_template()
    pool = _pool()
    try:
        assert pool.sandbox.layers["template"] == "in use", pool.sandbox.layers
        found = pool.template.check(sorted(worker_root.listening_sockets()))
        assert {key: found[key] for key in COMPARED} == {key: pool.sandbox.checked[key] for key in COMPARED}
        assert found["capabilities"] == 0 and found["no_new_privs"] and found["seccomp"] and found["landlock"], found
        assert found["host_uid"] != 0 and found["refused"] == [] and found["device_context"] == "made", found
    finally:
        pool.close()


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
@pytest.mark.parametrize("proc_writable", [False, True], ids=["cpu rules", "a gpu worker's writable /proc"])
def test_a_template_child_reaches_no_sibling_no_template_and_no_later_child(tmp_path, monkeypatch, proc_writable):
    """A child reads no sibling's folder or handed-over files and sees no other folder of the
    pool's; it signals, traces and reads the memory and environment of neither its template nor
    a sibling, nor lowers a sibling's priority through a session's autogroup, nor writes the
    /proc files of a worker waiting for a later candidate; it holds and reaches none of the
    template's descriptors; and what it writes anywhere it can, a later
    child of the same template finds nowhere, nor does the host find it in the template's folder
    or the pool's. So too under a GPU worker's Landlock rules, which let it write under /proc."""
    _skip_without_a_template()
    if proc_writable:
        settings = Sandbox._settings
        monkeypatch.setattr(Sandbox, "_settings", lambda self, *arguments: (lambda found: {
            **found, "writable": [*found["writable"], "/proc"]})(settings(self, *arguments)))
    pool = _pool(depth=2)
    try:
        pool.prime()
        secret = tmp_path / "sibling_secret.txt"
        secret.write_text("a sibling's copy\n")
        sibling, _ = _run(pool, tmp_path, {"submission.py": FIXTURES / "torch_submission.py", "sibling_secret.txt": secret})
        assert isinstance(sibling._current.process, ForkedProcess)
        template_pid = pool.template.pid
        common = {"folders_root": pool.folders_root, "template_folder": str(pool.template.folder),
                  "sibling_pid": _inner_pid(sibling._current.process.pid), "sibling_folder": str(sibling.folder),
                  "waiting_pid": _inner_pid(pool.waiting()[-1].process.pid)}  # still waiting once the attacker is taken
        attacker, output = _run(pool, tmp_path, {"submission.py": PROBE, "probe_targets.json": _targets(
            tmp_path, "attacker.json", mark="a", **common)})
        said = _said(output)
        assert set(said) >= set(TRIED), output
        assert [what for what in TRIED if said[what]] == [], output
        assert sibling.alive and pool.template.alive and pool.template.pid == template_pid
        attacker.close()
        later, output = _run(pool, tmp_path, {"submission.py": PROBE, "probe_targets.json": _targets(
            tmp_path, "later.json", look_for="a", **common)})
        found = _said(output)
        assert [what for what in found if what.startswith("find a mark")], output
        assert [what for what, through in found.items() if through] == [], output
        later.close()
        sibling.close()
        assert not [path for root in (pool.folders_root, pool.template.folder.parent)
                    for path in Path(root).rglob("nvfp4-mark-*")]
    finally:
        pool.close()


FILTERED = """
import os, resource, sys
from harness.runner import confine
confine.syscall_filter().load()
parent, own = os.getppid(), {min(os.sched_getaffinity(0))}
UNUSED_UID = 2**31 - 7  # no process's: nothing changes where the call is let through (here, every call leaves all as it was)
def refused(call):
    try:
        call()
    except PermissionError:
        return True
    return False
print(sorted(what for what, call in {
    "limit": lambda: resource.prlimit(parent, resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)),
    "renice": lambda: os.setpriority(os.PRIO_PROCESS, parent, os.getpriority(os.PRIO_PROCESS, parent)),
    "renice a uid": lambda: os.setpriority(os.PRIO_USER, UNUSED_UID, 19),
    "pin": lambda: os.sched_setaffinity(parent, os.sched_getaffinity(parent)),
    "policy": lambda: os.sched_setscheduler(parent, os.sched_getscheduler(parent), os.sched_param(0)),
}.items() if refused(call)))
resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
print(resource.prlimit(parent, resource.RLIMIT_NOFILE) == resource.getrlimit(resource.RLIMIT_NOFILE))
os.nice(1)
os.sched_setaffinity(0, own)
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
print(os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0) == own, os.sched_getscheduler(0) == os.SCHED_BATCH)
"""


@pytest.mark.skipif(not LINUX, reason="seccomp is Linux's")
def test_the_filter_refuses_another_process_s_limits_and_scheduling_and_leaves_a_process_its_own():
    """What the kernel lets one process of a uid change of another's (its limits, nice, affinity,
    policy, and every process of a uid's nice at once) the filter refuses, whatever the caller's
    privileges (each call here would set what is already set); a process's own it leaves:
    reading another's limits, changing its own."""
    from harness.runner import confine

    if confine.syscall_filter() is None:
        pytest.skip("no libseccomp binding")
    found = subprocess.run([sys.executable, "-c", FILTERED], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).parent.parent)
    assert found.stdout.splitlines() == ["['limit', 'pin', 'policy', 'renice', 'renice a uid']", "True",
                                         f"{os.getpriority(os.PRIO_PROCESS, 0) + 1} True True"], found.stderr


OWN_PID_NAMED = """
import os, resource
from harness.runner import confine
confine.syscall_filter(others_in_sight=False).load()
me, own = os.getpid(), {min(os.sched_getaffinity(0))}
os.setpriority(os.PRIO_PROCESS, me, os.getpriority(os.PRIO_PROCESS, me) + 1)  # as psutil's nice() names it
os.sched_setaffinity(me, own)  # as psutil's cpu_affinity() names it
resource.prlimit(me, resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))
print(os.getpriority(os.PRIO_PROCESS, 0), os.sched_getaffinity(0) == own)
"""


@pytest.mark.skipif(not LINUX, reason="seccomp is Linux's")
def test_a_fresh_workers_filter_leaves_it_naming_its_own_pid():
    """bubblewrap's worker has a pid namespace of its own, where no pid names another's: its filter
    (sandbox.py `_seccomp_program`) lets it change its own nice, affinity and limits by its pid, as
    psutil does, which the filter of a template's child refuses with every other pid."""
    from harness.runner import confine

    if confine.syscall_filter() is None:
        pytest.skip("no libseccomp binding")
    found = subprocess.run([sys.executable, "-c", OWN_PID_NAMED], capture_output=True, text=True, timeout=60,
                           cwd=Path(__file__).parent.parent)
    assert found.stdout.split() == [str(os.getpriority(os.PRIO_PROCESS, 0) + 1), "True"], found.stderr
    refused = subprocess.run([sys.executable, "-c", OWN_PID_NAMED.replace("others_in_sight=False", "")],
                             capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent.parent)
    assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused.stdout


def _cgroup_of(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text().strip().rsplit("/", 1)[-1]


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_child_s_nested_pid_namespace_is_never_taken_for_the_template_s_next_child(tmp_path):
    """A running child leaves processes in a pid namespace of its own below the template's, their
    pids there those the template's next forks get (tests/fixtures/sandbox/
    cheat_takes_the_next_childs_pid.py): the judge still finds the next child itself, puts it
    in its own cgroup, and the attacker's processes stay in the attacker's cgroup (ended with
    its case)."""
    _skip_without_a_template()
    pool = _pool(depth=1)
    try:
        pool.prime()
        attacker, output = _run(pool, tmp_path, {"submission.py": FIXTURES / "sandbox" / "cheat_takes_the_next_childs_pid.py"})
        covered = output.split("nested pids: ", 1)[1].split()[0]
        if covered.startswith("none"):
            pytest.skip(f"this system makes no nested pid namespace in a child: {output}")
        first, last = map(int, covered.split("-"))
        taken = pool.take(echo=False)  # the template forks the next child now
        assert first <= _inner_pid(pool.waiting()[-1].process.pid) <= last, "the attacker's pids miss the next child's"
        for spawned in [taken, *pool.waiting()]:
            pid = spawned.process.pid
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            assert comm == "nvfp4-worker" and _cgroup_of(pid) == spawned.cgroup.path.name, (
                f"the judge took {comm} {pid} (in {_cgroup_of(pid)}) for its child; the attacker's pids {first}-{last}")
        taken.close()
        attacker.close()
    finally:
        pool.close()


CRASHES = {
    "a segfault": "import os, signal\n\ndef custom_kernel(data):\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
    "an exit": "import os\n\ndef custom_kernel(data):\n    os._exit(3)\n",
}


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_template_childs_crash_reads_as_a_fresh_workers(tmp_path):
    """A child that kills itself or exits is reported with its exit status, in the very words a
    fresh worker's end is: the template reaps it and tells the judge."""
    _skip_without_a_template()
    from harness.service.judges import LocalJudge

    messages = {}
    for templates in ("on", "off"):
        judge = LocalJudge("cpu", environment={**os.environ, LAYERS_OFF_ENV: "" if templates == "on" else "template"})
        started = judge.start()
        assert started["sandbox"]["template"] == ("in use" if templates == "on" else "not used: switched off"), started
        try:
            for name, source in CRASHES.items():
                reply = judge.judge({"id": f"{name} {templates}", "source": source, "mode": "test", "tests": ONE_CASE,
                                     "options": {}})
                messages[name, templates] = [(case["status"], case["message"]) for case in reply["document"]["cases"]]
        finally:
            judge.close()
    assert messages["a segfault", "on"] == messages["a segfault", "off"] == [
        ("crash", "worker process died without a result: killed by signal SIGSEGV (exit status -11)")]
    assert messages["an exit", "on"] == messages["an exit", "off"] == [
        ("crash", "worker process died without a result: exit status 3")]


@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_templates_switched_off_or_refused_leave_fresh_workers_named_in_the_report(monkeypatch):
    """Switched off (NVFP4_SANDBOX_OFF=template), or on a system whose Landlock has no scopes
    (below ABI 6), a pool starts every worker afresh, and the sandbox's report says why; nothing
    of it is a refused layer (a service's judge serves on)."""
    from harness.runner import confine

    for layers_off, abi, reason in (("template", confine.landlock_abi(), "not used: switched off"),
                                    ("", 5, "not used: no Landlock ABI 6")):
        monkeypatch.setenv(LAYERS_OFF_ENV, layers_off)
        monkeypatch.setattr(confine, "landlock_abi", lambda abi=abi: abi)
        pool = _pool(depth=1)
        try:
            assert pool.sandbox.layers["template"].startswith(reason), pool.sandbox.layers
            assert not any("template" in refused for refused in pool.sandbox.refused)
            pool.prime()
            taken = pool.take(echo=False)
            assert isinstance(taken.process, subprocess.Popen) and pool.template is None
            taken.close()
        finally:
            pool.close()


@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_template_that_will_not_start_leaves_fresh_workers(monkeypatch):
    _skip_without_a_template()
    from harness.runner import template

    monkeypatch.setattr(template, "PROGRAM", "import sys; print('a template that will not start'); sys.exit(3)")
    pool = _pool(depth=1)
    try:
        assert pool.sandbox.layers["template"].startswith("not used: the template did not start"), pool.sandbox.layers
        assert "a template that will not start" in pool.sandbox.layers["template"]
        taken = pool.take(echo=False)
        assert isinstance(taken.process, subprocess.Popen)
        taken.close()
    finally:
        pool.close()


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_template_that_dies_is_started_again_and_the_next_candidate_gets_a_true_verdict(tmp_path):
    """The template killed while workers wait: they end with it, none is handed out, a template
    starts again, and the next candidate is judged by one of its children; killed while that
    candidate runs, the run ends with no verdict (WorkerLost: the machine's fault, never the
    file's crash). The judge's sweep of strays keeps the template and its waiting children."""
    _skip_without_a_template()
    pool = _pool(depth=2)
    try:
        pool.prime()
        first = pool.template.pid
        end_strays(set(pool.pids))
        assert pool.template.alive and all(spawned.alive for spawned in pool.waiting())
        waiting = pool.waiting()
        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(is_running(spawned.process.pid) for spawned in waiting) and time.monotonic() < deadline:
            time.sleep(0.05)
        worker, _ = _run(pool, tmp_path, {"submission.py": FIXTURES / "torch_submission.py"})
        assert pool.template.pid != first and pool.sandbox.layers["template"] == "in use"
        assert isinstance(worker._current.process, ForkedProcess) and worker._current not in waiting
        os.kill(pool.template.pid, signal.SIGKILL)  # mid-run: the run's worker ends with it, no verdict of the file's
        deadline = time.monotonic() + 10
        while is_running(worker._current.process.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(WorkerLost):
            worker.request("load")
        worker.close()
    finally:
        pool.close()


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_the_fixtures_test_verdicts_hold_through_a_pool_whose_workers_come_from_a_template():
    """Every CPU test-mode verdict of tests/test_fixtures.py (`VERDICTS`, but `--official`'s, which
    the service does not run) through a service's judge whose workers come from a template: the
    honest patterns (a fork pool, spawned pools, a thread pool) pass, and every cheat and mistake
    gets the one-shot command's status and exit status."""
    _skip_without_a_template()
    import re

    from test_fixtures import VERDICTS

    from harness.service.judges import LocalJudge

    chosen = [expected for expected in VERDICTS if expected.mode == "test" and not expected.official
              and "cpu" in expected.devices]
    assert {"honest_uses_a_process_pool", "honest_uses_spawned_process_pools",
            "honest_waits_for_a_thread_pool"} <= {expected.fixture for expected in chosen}
    judge = LocalJudge("cpu")
    assert judge.start()["sandbox"]["template"] == "in use"
    try:
        for expected in chosen:
            options = {"timeout_s": expected.timeout_s} if expected.timeout_s else {}
            reply = judge.judge({"id": expected.id, "source": (FIXTURES / f"{expected.fixture}.py").read_text(),
                                 "mode": "test", "tests": "\n".join(expected.cases) + "\n", "options": options})
            statuses = [case["status"] for case in reply["document"]["cases"]]
            assert reply["exit_status"] == expected.exit_status, (expected.id, reply["report"])
            assert statuses and all(re.fullmatch(expected.status, status) for status in statuses), (expected.id, reply["report"])
    finally:
        judge.close()


@pytest.mark.e2e
@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_gpu_judges_workers_come_from_a_template_and_judge_through_cuda_ipc():
    """On a GPU the template makes no CUDA call, and each child makes its context, opens the
    judge's IPC handles (its uid the judge's) and exports its own: a test and a benchmark of the
    fast torch file pass through a pool whose workers and partner come from a template, and the
    child's layers are a fresh GPU worker's."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: a GPU pool's template")
    from harness.judge.sandbox import UNSAFE_ENV
    from harness.service.judges import LocalJudge

    judge = LocalJudge("cuda", environment={**os.environ, UNSAFE_ENV: "1"} if os.geteuid() == 0 else None)
    started = judge.start()
    try:
        assert started["sandbox"]["template"] == "in use", started
        source = (FIXTURES / "torch_submission.py").read_text()
        for mode in ("test", "benchmark"):
            reply = judge.judge({"id": mode, "source": source, "mode": mode, "tests": ONE_CASE, "options": {"max_repeats": 5}})
            assert reply["exit_status"] == 0 and [case["status"] for case in reply["document"]["cases"]] == ["pass"], reply["report"]
    finally:
        judge.close()


def _states_once_stopped(pids: list[int], wait_s: float = 2.0) -> dict[int, str]:
    """Each process's state (/proc's letter), read until all are stopped (a SIGSTOP takes effect
    as its process next runs) or `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        states = {pid: Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in pids}
        if set(states.values()) == {"T"} or time.monotonic() > deadline:
            return states
        time.sleep(0.01)


@pytest.mark.e2e  # sandboxed templates of their own
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_pause_by_signals_keeps_the_template_its_waiting_children_and_the_run_s_worker(tmp_path, monkeypatch):
    """Where a cgroup does not freeze in time the judge stops the run's worker by SIGSTOP, after
    ending the strays of its children: the template (whose end would end every child, the run's
    worker among them) and its waiting children are none."""
    _skip_without_a_template()
    from harness.judge.cgroups import WorkerCgroup

    pool = _pool(depth=1)
    try:
        pool.prime()
        worker, _ = _run(pool, tmp_path, {"submission.py": FIXTURES / "torch_submission.py"})
        monkeypatch.setattr(WorkerCgroup, "freeze", lambda self, frozen: False)
        with worker.paused(keep=set()):
            stopped = _states_once_stopped([worker._current.process.pid])[worker._current.process.pid]
        assert stopped == "T" and worker.alive and pool.template.alive and all(s.alive for s in pool.waiting())
        worker.close()
    finally:
        pool.close()


@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_pause_by_signals_stops_an_orphan_the_template_s_namespace_adopted(tmp_path, monkeypatch):
    """A child's orphan is adopted by the init of the template's pid namespace, outside the
    worker's tree, and kept by the sweep of strays as the template's: a pause by signals stops
    every process of the worker's cgroup, that orphan among them
    (tests/fixtures/sandbox/cheat_leaves_an_orphan_outside_its_tree.py)."""
    _skip_without_a_template()
    from harness.judge.cgroups import WorkerCgroup
    from harness.judge.isolation import _descendants, _parents

    pool = _pool(depth=1)
    try:
        pool.prime()
        worker, _ = _run(pool, tmp_path, {"submission.py": FIXTURES / "sandbox" / "cheat_leaves_an_orphan_outside_its_tree.py"})
        current = worker._current
        members = [int(pid) for pid in (current.cgroup.path / "cgroup.procs").read_text().split()]
        tree = {current.process.pid, *_descendants(current.process.pid, _parents())}
        orphans = [pid for pid in members if pid not in tree]
        assert orphans, f"no orphan outside the worker's tree: {members}, {tree}"
        monkeypatch.setattr(WorkerCgroup, "freeze", lambda self, frozen: False)
        with worker.paused(keep=set()):
            states = _states_once_stopped(members)
        assert set(states.values()) == {"T"}, states
        assert pool.template.alive and all(spawned.alive for spawned in pool.waiting())
        worker.close()
    finally:
        pool.close()


@pytest.mark.e2e  # sandboxed templates of their own
@pytest.mark.skipif(not LINUX, reason="templates are Linux's")
def test_a_template_whose_children_cannot_make_their_walls_or_fork_leaves_fresh_workers(monkeypatch):
    """A child whose walls the system refuses (here a bind it cannot make) gives the pool's check
    no report: the pool starts fresh workers and says why; a fork refused later gives a fresh
    worker too, never a run's failure."""
    _skip_without_a_template()
    from harness.judge.templates import Template, TemplateFailed

    forked = Sandbox.forked
    monkeypatch.setattr(Sandbox, "forked", lambda self, *arguments, **settings: (
        lambda launch, found: (launch, {**found, "handed_over": "/proc/nonexistent"}))(*forked(self, *arguments, **settings)))
    pool = _pool(depth=1)
    try:
        assert pool.sandbox.layers["template"].startswith("not used: the template's child gave no report"), pool.sandbox.layers
        assert "bind /proc/nonexistent" in pool.sandbox.layers["template"]
        assert isinstance(pool.take(echo=False).process, subprocess.Popen)
    finally:
        pool.close()
    monkeypatch.setattr(Sandbox, "forked", forked)

    def refused(*arguments, **settings):
        raise TemplateFailed("a fork refused")

    pool = _pool(depth=1)
    try:
        assert pool.sandbox.layers["template"] == "in use"
        monkeypatch.setattr(Template, "worker", refused)
        taken = pool.take(echo=False)
        assert isinstance(taken.process, subprocess.Popen) and taken.alive
        taken.close()
    finally:
        pool.close()
