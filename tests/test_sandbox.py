"""The worker's sandbox, tried from inside as an attacker would (tests/fixtures/sandbox/): a
sandboxed worker imports a file that attempts each way out and says which got through."""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.judge import judge_user
from harness.judge import sandbox as sandbox_module
from harness.judge.layers import LAYERS_OFF_ENV
from harness.judge.isolation import CaseStopped, WorkerProcess, protect_the_judge
from harness.judge.memory import SharedPool
from harness.runner.calls import SANITIZER_ENV
from harness.runner.files import HANDED_OVER_FOLDER, REPO_ROOT, runner_files

LINUX = sys.platform.startswith("linux")
ROOT = LINUX and os.geteuid() == 0
FIXTURES = Path(__file__).parent / "fixtures" / "sandbox"
# What the probe says of itself; its writes are judged by what reached the judge's own files.
ATTEMPTS = ("signal the judge", "signal every other process of its user", "trace the judge", "read the judge's memory",
            "see the judge's process", "rewrite the judge's copies", "reach a network interface",
            "set the clock", "keep a capability", "run as root", "run as root on the host", "open a kernel setting for writing",
            "read the judge's log folder", "read the judge's records", "reach the sandbox's init")
# The device nodes a CPU worker has, every one of them (harness/judge/worker_root.py).
CPU_DEVICES = {f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom")}
# A variable of the judge's that no worker may see.
JUDGES_SECRET = ("NVFP4_PROBE_JUDGES_SECRET", "the judge's own 1c0ffee")


@dataclasses.dataclass
class Probe:
    """What a sandboxed worker that imported the probe reached."""

    said: dict[str, bool]  # attempt -> whether it got through
    environment: dict[str, str]
    given: set[str]  # the variables the judge gives a worker (Sandbox.environment)
    planted: list[str]
    output: str
    crash: str | None = None

    def got(self, prefix: str) -> list[str]:
        return sorted(what.removeprefix(prefix) for what, through in self.said.items() if through and what.startswith(prefix))

    def tried(self, prefix: str) -> list[str]:
        return sorted(what.removeprefix(prefix) for what in self.said if what.startswith(prefix))


def _planted(tmp_path) -> list[str]:
    """The probe's writes that reached the judge's side: a module where the kit imports from, a
    line in results/, a file in the judge's log folder."""
    runs = REPO_ROOT / "results" / "runs.csv"
    return [str(path) for path in (REPO_ROOT / "click.py", tmp_path / "planted.txt", Path("/dev/shm/nvfp4-probe-planted"))
            if path.exists()] + ([str(runs)] if runs.exists() and "# planted" in runs.read_text()[-200:] else [])


def _probe(tmp_path, monkeypatch, layers_off: str = "", device: str = "cpu", memory_bytes: int | None = None,
           **targets) -> Probe:
    """Runs the probe in a sandboxed worker, aimed at this process as its judge and at `targets`."""
    monkeypatch.setenv(LAYERS_OFF_ENV, layers_off)
    monkeypatch.setenv(*JUDGES_SECRET)
    (tmp_path / "judges-secret.txt").write_text("another candidate's file\n")
    aims = tmp_path / "aims"
    aims.mkdir(exist_ok=True)
    (aims / "probe_targets.json").write_text(json.dumps(
        {"judge_pid": os.getpid(), "repo": str(REPO_ROOT), "judge_tmp": str(tmp_path), "handed_over": HANDED_OVER_FOLDER,
         **targets}))
    protect_the_judge()
    sandbox = sandbox_module.Sandbox(device, memory_bytes=memory_bytes)
    files = {**runner_files(), "submission.py": FIXTURES / "probe_escape.py", "probe_targets.json": aims / "probe_targets.json"}
    worker = WorkerProcess(sandbox, str(tmp_path), files, device, 42, SharedPool(torch.device(device)).describe)
    crash, given = None, set(sandbox.environment(tmp_path))
    try:
        worker.begin_case(300, lambda text: None)
        try:
            worker.request("load")
        except CaseStopped as stopped:
            crash = stopped.result.message
        output = Path(worker.log_path).read_text(errors="replace")  # whole: the case's tail would cut it
    finally:
        worker.close()
        sandbox.close()
    said, environment = {}, {}
    for line in output.splitlines():
        verdict, _, what = line.partition(" ")
        if verdict in ("GOT", "REFUSED"):
            said[what.rsplit(" (", 1)[0] if verdict == "REFUSED" else what] = verdict == "GOT"
        elif verdict == "ENVIRONMENT":
            name, _, value = what.partition("=")
            environment[name] = value
    assert crash is not None or set(said) >= set(ATTEMPTS) | {"write its own folder"}, output
    return Probe(said, environment, given, _planted(tmp_path), output, crash)


def _probe_by_a_judge_of_its_own_user(tmp_path, device: str, **targets) -> tuple[Probe, dict]:
    """`_probe` with a root judge that changed to its own user (tests/judge_of_its_own_user.py, a
    process of its own), and that judge's report: what it refused, its uids, the sandbox's layers."""
    ran = subprocess.run([sys.executable, str(Path(__file__).parent / "judge_of_its_own_user.py"), str(tmp_path), device,
                          json.dumps(targets)], capture_output=True, text=True, timeout=600,
                         env={**os.environ, LAYERS_OFF_ENV: ""})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    judge = json.loads(ran.stdout.strip().splitlines()[-1])
    found = judge.pop("probe")
    return Probe(**{**found, "given": set(found["given"])}), judge


def _attempts(tmp_path, monkeypatch, probe: str, layers_off: str = "", **targets) -> dict[str, bool]:
    """attempt -> whether it got through, and `planted`: what reached the judge's side."""
    found = _probe(tmp_path, monkeypatch, layers_off, **targets)
    return {**found.said, "planted": found.planted}


def _missing_layers() -> list[str]:
    sandbox = sandbox_module.Sandbox("cpu")
    sandbox.close()
    return sandbox.refused


def _skip_without_every_layer() -> None:
    missing = _missing_layers()
    if missing:
        pytest.skip(f"this system lacks sandbox layers: {'; '.join(missing)}")


@contextlib.contextmanager
def _listening(path: Path):
    """A Unix socket listening at `path`, and the connections it accepted (read after the block)."""
    accepted = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    server.setblocking(False)
    try:
        yield accepted
        with contextlib.suppress(BlockingIOError):
            while True:
                accepted.append(server.accept()[0])
    finally:
        for connection in accepted:
            connection.close()
        server.close()
        path.unlink(missing_ok=True)


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_worker_with_every_layer_gets_out_by_no_way_an_attacker_tries(tmp_path, monkeypatch):
    """The probe, as an attacker: the judge's files and processes, the network, the clock, its
    privileges, every socket file it finds, every device node, every /proc and /sys file for
    writing, the environment."""
    _skip_without_every_layer()
    found = _probe(tmp_path, monkeypatch)
    assert [what for what in ATTEMPTS if found.said[what]] == [], found.output
    assert found.planted == []
    assert found.said["write its own folder"]
    assert found.got("connect to socket ") == []
    assert found.got("open for writing ") == [], "a /proc or /sys file opened for writing"
    assert len(found.tried("connect to socket ")) >= 9, "the probe tried the well-known sockets"
    assert len(found.tried("open for writing /sys/")) > 10, "the probe walked /sys"
    # Item 1 on a CPU: the device nodes, all of them, are the harmless five.
    assert set(found.tried("open device ")) == CPU_DEVICES
    assert JUDGES_SECRET[0] not in found.environment
    # What the judge gives, what bubblewrap sets (the working folder) and the worker itself sets.
    assert set(found.environment) - found.given <= {"PWD", "CUTE_DSL_DISABLE_FILE_CACHING"}
    assert all(_allowed(name) for name in found.given)


@pytest.mark.skipif(not ROOT, reason="a judge changes to a user of its own only where it is root")
def test_a_root_judge_of_its_own_user_has_workers_of_its_uid_that_reach_nothing_of_its(tmp_path):
    """A root judge that changed to its own user (as a GPU judge does, for CUDA IPC): its worker
    runs as the judge's uid on the host, without a capability, and as that same user still
    reaches nothing of the judge's: no signal (to it or to every process of the user), no trace,
    no /proc file or memory of it, none of its files; the judge still ends the worker's tree."""
    _skip_without_every_layer()
    found, judge = _probe_by_a_judge_of_its_own_user(tmp_path, "cpu")
    uid, gid = judge_user.judge_ids()
    assert judge["refused"] is None and judge["uids"] == [uid] * 3
    layers = judge["layers"]
    assert layers["uid"] == layers["host_uid"] == uid and layers["gid"] == gid and layers["capabilities"] == 0
    assert layers["refused"] == []
    assert [what for what in ATTEMPTS if found.said[what]] == [], found.output
    assert found.planted == [] and found.got("open for writing ") == [] and found.got("connect to socket ") == []
    assert found.said["write its own folder"]


@pytest.mark.e2e  # a sandboxed probe of its own per layer set: the suite CI runs beside make test
@pytest.mark.skipif(not ROOT, reason="a judge changes to a user of its own only where it is root")
@pytest.mark.parametrize("layers_off", ["", "bubblewrap,seccomp,cgroup"], ids=["every layer", "Landlock alone"])
def test_a_root_judge_of_its_own_users_home_is_out_of_its_workers_reach(tmp_path, layers_off):
    """The judge's HOME is its user's (judge_user.py), a folder of the uid its workers run as,
    where a folder's reference.py and the libraries it calls keep caches: outside a worker's root
    under bubblewrap, and beyond Landlock's writable folders without it."""
    if layers_off:
        from harness.runner import confine

        if not confine.landlock_abi():
            pytest.skip("this kernel has no Landlock")
        closed = [str(parent) for parent in Path(os.path.realpath(sys.executable)).parents if not parent.stat().st_mode & 0o001]
        if closed:
            pytest.skip(f"{closed[0]} is closed to the judge's user: without bubblewrap its workers cannot start")
        # Without bubblewrap no one hands the worker its folder: the runs' folder open to its user,
        # as a judge's own temporary folder is (pytest's is root's alone).
        runs = Path(tempfile.mkdtemp(prefix="nvfp4-test-runs-"))
        runs.chmod(0o777)
    else:
        _skip_without_every_layer()
        runs = tmp_path
    try:
        found, judge = _probe_by_a_judge_of_its_own_user(runs, "cpu", layers_off=layers_off, walk_for_sockets=False)
    finally:
        if runs != tmp_path:
            shutil.rmtree(runs, ignore_errors=True)
    assert judge["refused"] is None, judge
    assert found.said["write its own folder"], found.output
    assert found.said["write the judge's home"] is False, found.output


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_no_socket_file_of_the_host_is_reachable_even_on_the_import_path(tmp_path, monkeypatch):
    """A Unix socket listening in a folder the worker's root binds (on the judge's import path),
    and one elsewhere under /tmp: a read-only mount does not refuse connect(), so the root must
    not hold them."""
    _skip_without_every_layer()
    on_the_path = Path(tempfile.mkdtemp(prefix="nvfp4-import-path-"))
    monkeypatch.syspath_prepend(str(on_the_path))
    try:
        sockets = [on_the_path / "service.sock", tmp_path / "elsewhere.sock"]
        with _listening(sockets[0]) as accepted_on_path, _listening(sockets[1]) as accepted_elsewhere:
            # Open to every user: the root's allow-list alone keeps them out, not the worker's user.
            for path in (on_the_path, tmp_path, *sockets):
                os.chmod(path, 0o777)
            found = _probe(tmp_path, monkeypatch, sockets=[str(path) for path in sockets])
        assert set(found.tried("connect to socket ")) >= set(map(str, sockets))
        assert found.got("connect to socket ") == []
        assert accepted_on_path == accepted_elsewhere == []
    finally:
        shutil.rmtree(on_the_path, ignore_errors=True)


@pytest.mark.skipif(not LINUX, reason="cgroups are Linux's")
@pytest.mark.parametrize("place", ["memfd", "/tmp", "/dev/shm", "."])
def test_memory_hoarded_past_the_limit_anywhere_is_a_crash_naming_the_limit_or_refused(tmp_path, monkeypatch, place):
    """Memory a worker holds where no resident size counts (a memfd never mapped, a tmpfs file, its
    own folder, a tmpfs of its sandbox's rather than the judge's disk): the worker's memory cgroup
    counts it, and the kernel ends the worker past the limit (a crash naming the limit); a tmpfs
    held to the limit refuses the write first."""
    limit = 192 << 20
    sandbox = sandbox_module.Sandbox("cpu", memory_bytes=limit)
    sandbox.close()
    if not sandbox.layers.get("memory_limit_bytes"):
        pytest.skip("no writable memory cgroup here")
    found = _probe(tmp_path, monkeypatch, memory_bytes=limit, hoard=place, hoard_bytes=limit + (128 << 20))
    assert f"HOARDED {place}" not in found.output
    if place == "memfd":
        assert found.crash is not None and "192 MiB limit" in found.crash, found.output
    else:
        assert found.crash is not None and "192 MiB limit" in found.crash or not found.said[f"hoard memory in {place}"]


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_the_judge_checks_each_layer_in_force_inside_a_sandboxed_process():
    """The check process's report: an unprivileged user, no capability, no_new_privs, seccomp
    loaded and Landlock enforced, where the system has each."""
    _skip_without_every_layer()
    sandbox = sandbox_module.Sandbox("cpu")
    sandbox.close()
    layers = sandbox.layers
    assert layers["checked"] and layers["uid"] != 0 and layers["gid"] != 0
    assert layers["capabilities"] == 0 and layers["no_new_privs"] and layers["seccomp"] and layers["landlock"]


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_layer_switched_off_is_named_in_the_check(monkeypatch):
    monkeypatch.setenv(LAYERS_OFF_ENV, "landlock")
    sandbox = sandbox_module.Sandbox("cpu")
    sandbox.close()
    assert sandbox.layers["landlock"] is False
    assert any("Landlock" in refused for refused in sandbox.refused)


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_the_check_names_a_host_socket_its_root_would_let_a_worker_reach(monkeypatch):
    """Were a listening socket's file in a bound folder left uncovered, the check process, which
    tries every socket listening on the host, reaches it, and the judge names it as refused."""
    _skip_without_every_layer()
    from harness.judge import worker_root

    on_the_path = Path(tempfile.mkdtemp(prefix="nvfp4-import-path-"))
    monkeypatch.syspath_prepend(str(on_the_path))
    monkeypatch.setattr(worker_root, "host_sockets", lambda folders: [])
    monkeypatch.setattr(sandbox_module, "_CHECKED", {})
    try:
        with _listening(on_the_path / "left.sock") as accepted:
            # Open to every user, as /run/docker.sock is to its group: the worker's own user does
            # not stop it then.
            os.chmod(on_the_path, 0o755)
            os.chmod(on_the_path / "left.sock", 0o777)
            sandbox = sandbox_module.Sandbox("cpu")
            sandbox.close()
        assert sandbox.layers["host_sockets_reached"] == [str(on_the_path / "left.sock")]
        assert any("reaches sockets of the host" in refused for refused in sandbox.refused)
        assert len(accepted) == 1
    finally:
        shutil.rmtree(on_the_path, ignore_errors=True)


def _judge_process(environment: dict) -> subprocess.CompletedProcess:
    """A service's judge on the CPU, its stdin closed at once: its ready line, or its refusal."""
    return subprocess.run([sys.executable, "-m", "harness.service.judge", "--device", "cpu"], cwd=REPO_ROOT,
                          env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_services_judge_refuses_to_serve_without_a_layer_unless_told_it_is_unsafe():
    from harness.judge.exits import EXIT_SANDBOX_REFUSED

    _skip_without_every_layer()
    environment = {name: value for name, value in os.environ.items() if not name.startswith(("POPCORN_", "NVFP4_"))}
    whole = _judge_process(environment)
    assert whole.returncode == 0, whole.stderr
    ready = json.loads(whole.stdout.splitlines()[0])
    assert ready["sandbox"]["uid"] != 0 and ready["sandbox"]["landlock"] and ready["sandbox"]["refused"] == []
    lacking = _judge_process({**environment, LAYERS_OFF_ENV: "landlock"})
    assert lacking.returncode == EXIT_SANDBOX_REFUSED and "Landlock" in lacking.stderr and lacking.stdout == ""
    unsafe = _judge_process({**environment, LAYERS_OFF_ENV: "landlock", sandbox_module.UNSAFE_ENV: "1"})
    assert unsafe.returncode == 0, unsafe.stderr
    assert json.loads(unsafe.stdout.splitlines()[0])["sandbox"]["landlock"] is False


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_every_json_document_of_a_run_records_the_sandboxs_layers(tmp_path):
    _skip_without_every_layer()
    cases = tmp_path / "cases.txt"
    cases.write_text("m: 128; n: 256; k: 512; l: 2; seed: 1111\n")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("POPCORN_")}
    result = subprocess.run([sys.executable, "-m", "harness", "test", "--json", "--submission",
                             str(REPO_ROOT / "tests" / "fixtures" / "torch_submission.py"), "--device", "cpu", str(cases)],
                            cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600)
    layers = json.loads(result.stdout)["sandbox"]
    assert layers["checked"] and layers["uid"] != 0 and layers["seccomp"] and layers["refused"] == []


@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_judge_in_a_virtual_environment_under_tmp_starts_its_workers(tmp_path):
    """The interpreter in a virtual environment under /tmp, outside the kit's folder (the
    worker's /tmp is a fresh tmpfs): the worker's root binds it, and an honest file passes."""
    _skip_without_every_layer()
    venv = Path(tempfile.mkdtemp(prefix="nvfp4-venv-", dir="/tmp")) / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True)
        # This interpreter's own packages, where it is itself a virtual environment's (whose
        # packages --system-site-packages leaves out): the judge needs them, the venv's link stays.
        site_packages = next((venv / "lib").glob("python*/site-packages"))
        (site_packages / "judges-packages.pth").write_text(
            "\n".join(entry for entry in sys.path if entry.endswith("-packages")) + "\n")
        cases = tmp_path / "cases.txt"
        cases.write_text("m: 128; n: 256; k: 512; l: 2; seed: 1111\n")
        environment = {name: value for name, value in os.environ.items() if not name.startswith("POPCORN_")}
        result = subprocess.run([str(venv / "bin" / "python"), "-m", "harness", "test", "--submission",
                                 str(REPO_ROOT / "tests" / "fixtures" / "torch_submission.py"), "--device", "cpu", str(cases)],
                                cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "check: pass" in result.stdout
    finally:
        shutil.rmtree(venv.parent, ignore_errors=True)


def _cuda_probe(tmp_path, monkeypatch) -> Probe:
    """The probe through a CUDA worker, whose judge is this process, or where this process is root,
    a root judge that changed to its own user before CUDA started, as a GPU judge does (a test
    process that stays root would export its memory as root: CUDA IPC needs the worker as root)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    _skip_without_every_layer()
    if not ROOT:
        return _probe(tmp_path, monkeypatch, device="cuda")
    found, judge = _probe_by_a_judge_of_its_own_user(tmp_path, "cuda")
    assert judge["refused"] is None and judge["layers"]["host_uid"] == judge["uids"][0] != 0
    assert judge["layers"]["refused"] == [], judge["layers"]
    return found


@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_cuda_worker_has_its_gpus_nodes_and_no_other_device_as_an_unprivileged_user(tmp_path, monkeypatch):
    """Item 1 on a GPU: the probe through a CUDA worker opens the harmless five, the GPU's own
    nodes (nvidia<N> of the judge's GPUs, nvidiactl, nvidia-uvm and -tools, nvidia-caps) and
    nothing else, and runs as the judge's user (under a root judge, the user it changed to before
    CUDA started), without a capability, reaching nothing of the judge's."""
    found = _cuda_probe(tmp_path, monkeypatch)
    assert found.crash is None, found.output
    assert [what for what in ATTEMPTS if found.said[what]] == [], found.output
    gpu_nodes = {path for path in found.got("open device ") if path.startswith("/dev/nvidia")}
    assert set(found.got("open device ")) - gpu_nodes <= CPU_DEVICES
    assert "/dev/nvidiactl" in gpu_nodes and any(re.fullmatch(r"/dev/nvidia\d+", path) for path in gpu_nodes)
    assert found.got("connect to socket ") == []
    # Its /dev/shm is a folder of its own (harness/judge/worker_dev_shm.py): what it writes there
    # never reaches its judge's /dev/shm.
    assert found.said["write its own folder"] and found.planted == []


@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_cuda_worker_opens_no_kernel_file_for_writing(tmp_path, monkeypatch):
    """The probe through a CUDA worker opens no file under /proc or /sys for writing: a root
    judge's worker is the judge's own unprivileged user, and /proc/driver's files are root's."""
    found = _cuda_probe(tmp_path, monkeypatch)
    assert found.tried("open for writing /proc/") and found.got("open for writing ") == []


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
    # Without bubblewrap the host's /tmp is in view, and a test beside this one may listen there.
    said = _attempts(tmp_path, monkeypatch, "probe_escape.py", layers_off="bubblewrap,seccomp,cgroup", walk_for_sockets=False)
    assert said["planted"] == []
    assert not said["keep a capability"] and not said["trace the judge"]  # no capability; the judge not dumpable
    assert said["write its own folder"]
    if confine.landlock_abi() >= 6:  # signals scoped to the worker's own domain
        assert not said["signal the judge"]


@pytest.fixture(scope="module")
def cpu_sandbox():
    sandbox = sandbox_module.Sandbox("cpu")
    yield sandbox
    sandbox.close()


# The names the judge sets in a worker's environment; the others are the allow-list's.
SET_NAMES = {"PATH", "HOME", "TMPDIR", "XDG_CACHE_HOME", "CUDA_CACHE_PATH", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
             "OMP_WAIT_POLICY"}


def _allowed(name: str) -> bool:
    return (name in SET_NAMES or name in sandbox_module.PASSED_VARIABLES or name == SANITIZER_ENV
            or name.startswith(("LC_", "CUDA_INJECTION", "NVTX_INJECTION", "NV_", "NSYS_")))


@settings(max_examples=200, deadline=None)
@given(variables=st.dictionaries(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e, exclude_characters="="), min_size=1, max_size=24),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40), max_size=8))
def test_no_variable_of_the_judges_reaches_a_worker_but_the_allow_list(variables, cpu_sandbox):
    """Whatever the judge's environment holds (names and values an attacker might have planted in
    it), a worker's holds the allow-list's names only, and its own folder's paths."""
    folder = Path("/nvfp4-worker-folder")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in variables.items():
            patch.setenv(name, value)
        environment = cpu_sandbox.environment(folder)
    assert all(_allowed(name) for name in environment)
    for name in variables:
        if not _allowed(name):
            assert name not in environment
    assert environment["HOME"] == str(folder) and environment["TORCHINDUCTOR_CACHE_DIR"].startswith(str(folder))


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_worker_grows_and_shrinks_files_in_its_own_dev_shm_and_a_gpu_worker_nothing_else_under_dev(tmp_path):
    """The Landlock rules a worker is given inside bubblewrap: its own /dev/shm writable whole
    (multiprocessing's semaphores, torch's files for CPU tensors a process pool shares); on a
    GPU nothing else under /dev may shrink. Without bubblewrap a GPU worker shares its judge's
    /dev/shm, and nothing under /dev is writable whole."""
    gpu, cpu = sandbox_module.Sandbox("cuda"), sandbox_module.Sandbox("cpu")
    gpu.close()
    cpu.close()
    gpu_settings, cpu_settings = (sandbox._settings(tmp_path, 3, 4, False, 0) for sandbox in (gpu, cpu))
    assert gpu_settings["unshrinkable"] == ["/dev"]
    under_dev = [path for path in gpu_settings["writable"] if path == "/dev" or path.startswith("/dev/")]
    assert under_dev == (["/dev/shm"] if sandbox_module._bwrap() else [])
    if sandbox_module._bwrap():
        assert "/dev/shm" in cpu_settings["writable"]


def test_a_layer_named_wrongly_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(LAYERS_OFF_ENV, "bubblewrap,firewall")
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


@pytest.mark.skipif(not ROOT, reason="a judge changes to a user of its own only where it is root")
def test_a_root_judge_of_its_own_user_freezes_and_ends_a_worker_that_hops_pids(tmp_path):
    """The test above with a root judge that changed to its own user: the cgroups it makes (root's)
    still freeze and end its worker's whole tree."""
    ran = subprocess.run([sys.executable, str(Path(__file__).parent / "judge_of_its_own_user.py"), str(tmp_path), "--test",
                          test_a_worker_that_hops_pids_is_frozen_by_its_cgroup_and_ended_with_it.__name__],
                         capture_output=True, text=True, timeout=300, env={**os.environ, LAYERS_OFF_ENV: ""})
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    judge = json.loads(ran.stdout.strip().splitlines()[-1])
    assert judge["refused"] is None and judge["uids"] == [judge_user.judge_ids()[0]] * 3


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


def test_a_gpu_workers_nodes_are_read_once_a_judge_process_not_at_every_workers_start(monkeypatch):
    """The GPUs a judge's CUDA sees are fixed once CUDA starts: the second worker's command asks
    CUDA nothing, and binds the nodes the first one's did."""
    from harness.judge import worker_root

    asked = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: asked.append("device_count") or 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: dataclasses.make_dataclass("Properties", ["pci_domain_id", "pci_bus_id", "pci_device_id"])(0, 0x1b, 0))
    worker_root._gpu_minors.cache_clear()
    try:
        first = worker_root.device_arguments(True, [])
        assert worker_root.device_arguments(True, []) == first
    finally:
        worker_root._gpu_minors.cache_clear()
    assert asked == ["device_count"]


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="two /dev/shm of their own (two judges) need root")
def test_a_gpu_worker_without_bubblewrap_reaches_no_other_judges_dev_shm_through_a_workers_root():
    """Where bubblewrap is missing, a worker shares the host's pid namespace, and
    /proc/PID/root/dev/shm of another judge's worker (capability-less and dumpable, as the worker
    is) is that judge's /dev/shm, which Landlock's rule on /dev (an inode's, whatever the mount)
    would let a GPU worker write. Landlock closes the link itself: a process it restricts may
    reach /proc/PID/root only of a process in its own domain (without Landlock the link is
    followed, and the write lands)."""

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


def test_a_workers_root_binds_the_cuda_toolkit_torchs_extension_builds_use_wherever_it_lies(tmp_path, monkeypatch):
    # As NVIDIA's packages lay a toolkit out outside /usr (/opt/cuda-13.0), reached through a link.
    import torch.utils.cpp_extension

    from harness.judge import worker_root

    toolkit = tmp_path / "opt" / "cuda-13.0"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "include" / "cuda_runtime.h").write_text("")
    (tmp_path / "cuda").symlink_to(toolkit)
    monkeypatch.setattr(torch.utils.cpp_extension, "CUDA_HOME", str(tmp_path / "cuda"))
    assert not any(worker_root._within(folder, str(tmp_path)) for folder in worker_root.read_only_folders([])), \
        "a folder without nvcc is no toolkit"
    (toolkit / "bin" / "nvcc").write_text("")
    assert str(toolkit) in worker_root.read_only_folders([])
    for named in (None, "/"):
        monkeypatch.setattr(torch.utils.cpp_extension, "CUDA_HOME", named)
        assert "/" not in worker_root.read_only_folders([])
        assert not any(worker_root._within(folder, str(tmp_path)) for folder in worker_root.read_only_folders([]))


@pytest.mark.e2e  # a sandboxed probe; the binding's rule itself is the fast test above
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_cuda_home_that_is_no_toolkit_leaves_its_folder_out_of_a_workers_sight(tmp_path, monkeypatch):
    # torch takes CUDA_HOME as the folder above the first nvcc on PATH: a link in ~/bin makes it a
    # home, its keys beside nvcc, which a worker of the home's owner could read and print.
    import torch.utils.cpp_extension

    from harness.judge import worker_root

    if "bubblewrap" in " ".join(_missing_layers()):
        pytest.skip("no bubblewrap: the worker's root is the host's")
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("")
    key = home / ".ssh" / "id_ed25519"
    key.parent.mkdir()
    key.write_text("a key of the judge's user\n")
    for path in (tmp_path, home, key.parent):
        path.chmod(0o755)  # readable by the worker's user, as the owner's own files are to a worker of the owner's uid
    key.chmod(0o644)
    monkeypatch.setattr(torch.utils.cpp_extension, "CUDA_HOME", str(home))
    assert not any(worker_root._within(str(key), folder) for folder in worker_root.read_only_folders([]))
    said = _attempts(tmp_path, monkeypatch, "probe_escape.py", beside_the_toolkit=str(key))
    assert said["read a file beside the CUDA toolkit"] is False and said["planted"] == []
