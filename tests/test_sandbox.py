"""The worker's sandbox, tried from inside as an attacker would (tests/fixtures/sandbox/): a
sandboxed worker imports a file that attempts each way out and says which got through."""

import os
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.judge import sandbox as sandbox_module
from harness.judge.isolation import WorkerProcess, protect_the_judge
from harness.judge.memory import SharedPool
from harness.runner.files import REPO_ROOT, runner_files

LINUX = sys.platform.startswith("linux")
FIXTURES = Path(__file__).parent / "fixtures" / "sandbox"
# What the probe says of itself; its writes are judged by what reached the judge's own files.
ATTEMPTS = ("signal the judge", "trace the judge", "see the judge's process", "reach a network interface",
            "set the clock", "keep a capability", "open a kernel setting for writing")


def _planted(tmp_path) -> list[str]:
    """The probe's writes that reached the judge's side: a module where the kit imports from, a
    line in results/, a file in the judge's log folder."""
    runs = REPO_ROOT / "results" / "runs.csv"
    return [str(path) for path in (REPO_ROOT / "click.py", tmp_path / "planted.txt", Path("/dev/shm/nvfp4-probe-planted"))
            if path.exists()] + ([str(runs)] if runs.exists() and "# planted" in runs.read_text()[-200:] else [])


def _attempts(tmp_path, monkeypatch, probe: str, layers_off: str = "") -> dict[str, bool]:
    """attempt -> whether it got through, from a sandboxed worker that imported `probe`."""
    monkeypatch.setenv(sandbox_module.LAYERS_OFF_ENV, layers_off)
    monkeypatch.setenv("PROBE_JUDGE_PID", str(os.getpid()))
    monkeypatch.setenv("PROBE_REPO", str(REPO_ROOT))
    monkeypatch.setenv("PROBE_JUDGE_TMP", str(tmp_path))
    protect_the_judge()
    sandbox = sandbox_module.Sandbox("cpu")
    worker = WorkerProcess(sandbox, str(tmp_path), {**runner_files(), "submission.py": FIXTURES / probe}, "cpu", 42,
                           SharedPool(torch.device("cpu")).describe)
    try:
        worker.begin_case(120, lambda text: None)
        worker.request("load")
        output = worker.output_of_case()
    finally:
        worker.close_all()
        sandbox.close()
    said = {}
    for line in output.splitlines():
        verdict, _, what = line.partition(" ")
        if verdict in ("GOT", "REFUSED"):
            said[what.split(" (")[0]] = verdict == "GOT"
    assert set(said) >= set(ATTEMPTS) | {"write its own folder"}, output
    said["planted"] = _planted(tmp_path)
    return said


def _missing_layers() -> list[str]:
    sandbox = sandbox_module.Sandbox("cpu")
    sandbox.close()
    return sandbox.refused


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_worker_with_every_layer_gets_out_by_no_way_an_attacker_tries(tmp_path, monkeypatch):
    missing = _missing_layers()
    if missing:
        pytest.skip(f"this system lacks sandbox layers: {'; '.join(missing)}")
    said = _attempts(tmp_path, monkeypatch, "probe_escape.py")
    assert [what for what in ATTEMPTS if said[what]] == []
    assert said["planted"] == []
    assert said["write its own folder"]


@pytest.mark.skipif(not LINUX, reason="Landlock is Linux's")
def test_landlock_alone_still_keeps_a_worker_out_of_the_judges_files(tmp_path, monkeypatch):
    from harness.runner import confine

    if not confine.landlock_abi():
        pytest.skip("this kernel has no Landlock")
    said = _attempts(tmp_path, monkeypatch, "probe_escape.py", layers_off="bubblewrap,seccomp,cgroup")
    assert said["planted"] == []
    assert not said["keep a capability"] and not said["trace the judge"]  # no capability; the judge not dumpable
    assert said["write its own folder"]
    if confine.landlock_abi() >= 6:  # signals scoped to the worker's own domain
        assert not said["signal the judge"]


def test_a_layer_named_wrongly_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(sandbox_module.LAYERS_OFF_ENV, "bubblewrap,firewall")
    with pytest.raises(ValueError, match="firewall"):
        sandbox_module.layers_off()


@pytest.mark.skipif(not LINUX, reason="cgroups are Linux's")
def test_a_worker_that_hops_pids_is_frozen_by_its_cgroup_and_ended_with_it(tmp_path, monkeypatch):
    """A tree that forks a new process and exits, over and over (no pid to hold on to): frozen
    whole while the judge calibrates, and gone when its case ends."""
    sandbox = sandbox_module.Sandbox("cpu")
    if not sandbox.has_cgroups:
        pytest.skip("cgroup v2 is not writable here")
    worker = WorkerProcess(sandbox, str(tmp_path), {**runner_files(), "submission.py": FIXTURES / "hops_pids.py"}, "cpu", 42,
                           SharedPool(torch.device("cpu")).describe)
    try:
        worker.begin_case(120, lambda text: None)
        worker.request("load")
        cgroup = worker._current.cgroup.path
        with worker.paused(keep=set()):
            assert "frozen 1" in (cgroup / "cgroup.events").read_text()
            count = len(worker.output_of_case().splitlines())
            time.sleep(0.5)
            assert len(worker.output_of_case().splitlines()) == count  # nothing inside ran
        time.sleep(0.5)
        assert len(worker.output_of_case().splitlines()) > count  # it runs again after
    finally:
        worker.close_all()
    assert not cgroup.exists()
    sandbox.close()
