"""The worker's sandbox, tried from inside as an attacker would (tests/fixtures/sandbox/): a
sandboxed worker imports a file that attempts each way out and says which got through."""

import os
import shutil
import sys
import tempfile
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
            "set the clock", "keep a capability", "open a kernel setting for writing", "read the judge's log folder")


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
    (tmp_path / "judges-secret.txt").write_text("another candidate's file\n")
    protect_the_judge()
    sandbox = sandbox_module.Sandbox("cpu")
    worker = WorkerProcess(sandbox, str(tmp_path), {**runner_files(), "submission.py": FIXTURES / probe}, "cpu", 42,
                           SharedPool(torch.device("cpu")).describe)
    try:
        worker.begin_case(120, lambda text: None)
        worker.request("load")
        output = worker.output_of_case()
    finally:
        worker.close()
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


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_judges_temporary_folder_outside_tmp_is_out_of_its_workers_sight(tmp_path, monkeypatch):
    """A judge whose TMPDIR is not under /tmp keeps its runs (in a service, its candidates) there:
    hidden from its workers like /tmp, the worker's own folder in it still its own."""
    missing = _missing_layers()
    if missing:
        pytest.skip(f"this system lacks sandbox layers: {'; '.join(missing)}")
    outside = Path("/var/tmp")
    if not (outside.is_dir() and os.access(outside, os.W_OK)):
        pytest.skip("no writable /var/tmp to keep the judge's temporary folder outside /tmp")
    judges_tmp = Path(tempfile.mkdtemp(prefix="nvfp4-judge-tmp-", dir=outside))
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(judges_tmp))
        said = _attempts(judges_tmp, monkeypatch, "probe_escape.py")
        assert not said["read the judge's log folder"] and said["planted"] == []
        assert said["write its own folder"]
    finally:
        shutil.rmtree(judges_tmp, ignore_errors=True)


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
        worker.close()
    assert not cgroup.exists()
    sandbox.close()


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="a /dev/shm of its own (the test's files stay off the host's) needs root")
def test_a_gpu_workers_rules_shrink_no_file_under_dev_by_any_path():
    """A GPU worker's Landlock rules (write under /dev and /proc, shrink nothing under /dev),
    applied in a child with a /dev/shm of its own, against each way of cutting short a file that
    a process maps there: O_TRUNC by its path, through /proc/self/fd and through
    /proc/self/root; truncate and ftruncate. A hole punched keeps the size: the mapper reads
    zeros, as after a write, and gets no SIGBUS. What the rules still let through (a rename
    over the name, an unlink) is printed and judged below."""
    import ast
    import errno
    import subprocess

    from harness.runner import confine

    if confine.landlock_abi() < 3:
        pytest.skip("Landlock before ABI 3 has no right to truncate")
    program = r"""
import ctypes, errno, mmap, os
from harness.judge.dev_shm import own_dev_shm
from harness.runner.confine import _landlock
assert own_dev_shm() is None
path = "/dev/shm/drivers-file"
with open(path, "wb") as made:
    made.write(b"x" * 65536)
mapped = mmap.mmap(os.open(path, os.O_RDWR), 0)
assert _landlock([os.getcwd(), "/proc"], ["/dev"]) is None
outcome = {}
def attempt(name, action):
    try:
        action()
        outcome[name] = "done"
    except OSError as error:
        outcome[name] = errno.errorcode[error.errno]
writer = os.open(path, os.O_WRONLY)
attempt("O_TRUNC by path", lambda: os.open(path, os.O_WRONLY | os.O_TRUNC))
attempt("O_TRUNC through /proc/self/fd", lambda: os.open(f"/proc/self/fd/{writer}", os.O_WRONLY | os.O_TRUNC))
attempt("O_TRUNC through /proc/self/root", lambda: os.open("/proc/self/root" + path, os.O_WRONLY | os.O_TRUNC))
attempt("truncate", lambda: os.truncate(path, 0))
attempt("ftruncate", lambda: os.ftruncate(writer, 0))
libc = ctypes.CDLL(None, use_errno=True)
def fallocate(mode):
    if libc.fallocate(writer, mode, ctypes.c_long(0), ctypes.c_long(65536)) != 0:
        raise OSError(ctypes.get_errno(), "fallocate")
attempt("punch a hole", lambda: fallocate(0x01 | 0x02))  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
attempt("collapse a range", lambda: fallocate(0x08))
print("size", os.fstat(writer).st_size, "mapped", bytes(mapped[:1]), "last", bytes(mapped[-1:]))
def replace():
    with open("/dev/shm/short", "wb"):
        pass
    os.rename("/dev/shm/short", path)
attempt("rename over its name", replace)
attempt("unlink", lambda: os.unlink(path))
print(outcome)
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert result.returncode == 0, result.stderr
    sizes, outcome = result.stdout.splitlines()
    outcome = ast.literal_eval(outcome)
    refused = ("O_TRUNC by path", "O_TRUNC through /proc/self/fd", "O_TRUNC through /proc/self/root", "truncate", "ftruncate")
    assert {name: outcome[name] for name in refused} == dict.fromkeys(refused, "EACCES")
    assert outcome["collapse a range"] == errno.errorcode[errno.EOPNOTSUPP]  # tmpfs shortens no file by a range
    assert sizes == "size 65536 mapped b'\\x00' last b'\\x00'", "a hole punched keeps the size: zeros, no SIGBUS"
    # Open (docs/judge.md): the name's file is replaced or removed, what a later opener finds.
    assert outcome["rename over its name"] == outcome["unlink"] == "done"


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="two /dev/shm of their own (two judges) need root")
def test_a_gpu_worker_without_bubblewrap_reaches_no_other_judges_dev_shm_through_a_workers_root():
    """Where bubblewrap is missing, a worker shares the host's pid namespace, and
    /proc/PID/root/dev/shm of another judge's worker (capability-less and dumpable, as the worker
    is) is that judge's /dev/shm, which Landlock's rule on /dev (an inode's, whatever the mount)
    would let a GPU worker write. Landlock closes the link itself: a process it restricts may
    reach /proc/PID/root only of a process in its own domain (without Landlock the link is
    followed, and the write lands)."""
    import subprocess

    from harness.runner import confine

    if confine.landlock_abi() < 3:
        pytest.skip("Landlock before ABI 3 has no right to truncate")
    other_worker = r"""
import json, os, sys
from harness.judge.dev_shm import own_dev_shm
from harness.runner.confine import confine
assert own_dev_shm() is None
with open("/dev/shm/drivers-file", "wb") as made:
    made.write(b"the other judge's driver")
print(os.getpid(), flush=True)
log = os.open(os.devnull, os.O_WRONLY)
confine({"socket": log, "log": log, "echo": False, "layers_off": [], "seccomp_loaded": False,
         "writable": [os.getcwd(), "/proc"], "unshrinkable": ["/dev"]})
sys.stdin.read()
"""
    attacker = r"""
import os, sys
from harness.judge.dev_shm import own_dev_shm
from harness.runner.confine import _give_up_privileges, _landlock
assert own_dev_shm() is None
assert not _give_up_privileges() and _landlock([os.getcwd(), "/proc"], ["/dev"]) is None
try:
    with open(f"/proc/{sys.argv[1]}/root/dev/shm/drivers-file", "r+b") as reached:
        reached.write(b"overwritten")
    print("GOT")
except OSError as error:
    print("REFUSED", type(error).__name__)
"""
    other = subprocess.Popen([sys.executable, "-c", other_worker], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=REPO_ROOT)
    try:
        pid = other.stdout.readline().strip()
        assert pid.isdigit()
        result = subprocess.run([sys.executable, "-c", attacker, pid], capture_output=True, text=True, cwd=REPO_ROOT,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout == "REFUSED PermissionError\n"
    finally:
        other.stdin.close()
        other.wait(timeout=30)
