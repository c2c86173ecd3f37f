"""A GPU worker's /dev/shm (harness/judge/worker_dev_shm.py): the judge's files found from the
judge's process, the bubblewrap arguments that bind them into the worker's folder, the worker's
own files linked out for the judge only while it opens the worker's handles, whatever the worker
named or made them; and the Landlock rules under which a worker grows a file of its own there."""

import contextlib
import json
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.judge import worker_dev_shm
from harness.judge.dev_shm import WORKER_FOLDER_PREFIX

LINUX = sys.platform.startswith("linux")
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not LINUX, reason="/proc's descriptors and maps are Linux's")
def test_the_judges_files_are_those_its_process_maps_or_holds_open(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    for name in ("cuda.shm.mapped", "torch_held_open", "left.by.someone", "named.like.cuda.shm.0.1.1"):
        (shm / name).write_bytes(b"x" * 4096)
    (shm / "folder").mkdir()
    held_open = open(shm / "torch_held_open", "rb")
    with open(shm / "cuda.shm.mapped", "r+b") as mapped_file:
        mapped = mmap.mmap(mapped_file.fileno(), 0)
    try:
        os.symlink(shm / "torch_held_open", shm / "a-link-to-a-held-file")
        assert worker_dev_shm.judges_files(str(shm)) == ["cuda.shm.mapped", "torch_held_open"]
    finally:
        mapped.close()
        held_open.close()
    assert worker_dev_shm.judges_files(str(shm)) == []


def test_the_workers_dev_shm_is_its_folder_with_each_judges_file_bound_after_it():
    arguments = worker_dev_shm.bubblewrap_arguments("/dev/shm/.worker-1", ["cuda.shm.0.a4a.1", "torch_1_2_0"])
    assert arguments == ["--bind", "/dev/shm/.worker-1", "/dev/shm",
                         "--bind", "/dev/shm/cuda.shm.0.a4a.1", "/dev/shm/cuda.shm.0.a4a.1",
                         "--bind", "/dev/shm/torch_1_2_0", "/dev/shm/torch_1_2_0"]


def test_a_workers_folder_is_its_users_alone_and_left_by_the_sweep(tmp_path):
    folder = worker_dev_shm.make_folder(None, str(tmp_path))
    assert os.path.basename(folder).startswith(WORKER_FOLDER_PREFIX) and os.stat(folder).st_mode & 0o777 == 0o700


def test_a_workers_folder_nested_past_the_recursion_limit_and_path_max_is_removed_whole(tmp_path):
    """What tests/fixtures/sandbox/cheat_nests_folders_in_its_dev_shm.py nests in a GPU worker's
    /dev/shm (shutil.rmtree raises RecursionError there, and a path to its bottom is past
    PATH_MAX), removed whole when its worker ends; a link in it to a file of the judge's removed,
    never followed."""
    from harness.judge.sandbox import Launch

    judges = tmp_path / "cuda.shm.judges"
    judges.write_bytes(b"the judge's")
    folder = worker_dev_shm.make_folder(None, str(tmp_path))
    descriptor = os.open(folder, os.O_RDONLY)
    for _ in range(3000):
        os.symlink(judges, "link", dir_fd=descriptor)
        os.mkfifo("fifo", dir_fd=descriptor)
        os.mkdir("d", dir_fd=descriptor)
        inner = os.open("d", os.O_RDONLY, dir_fd=descriptor)
        os.close(descriptor)
        descriptor = inner
    os.close(descriptor)

    class Cgroup:
        def remove(self):
            pass

    try:
        Launch([], (), Cgroup(), None, dev_shm=folder).remove()
        assert sorted(os.listdir(tmp_path)) == ["cuda.shm.judges"] and judges.read_bytes() == b"the judge's"
    finally:
        subprocess.run(["rm", "-rf", folder], check=False)  # what a failed removal left, past pytest's own cleanup


NAMES = st.text(alphabet=st.sampled_from("abc.-_ \n\u2028é"), min_size=1, max_size=8).filter(lambda name: name not in (".", ".."))
KINDS = st.sampled_from(["file", "link to the judge's file", "link to its own file", "folder", "fifo"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(made=st.lists(st.tuples(NAMES, KINDS), max_size=8), judges=st.lists(NAMES, min_size=1, max_size=3, unique=True))
def test_a_workers_files_are_linked_out_only_where_a_name_is_free_and_only_while_the_judge_opens(tmp_path_factory, made,
                                                                                                 judges):
    """Whatever names and kinds a worker gives what it makes in its /dev/shm: in the block the
    judge's /dev/shm holds each of the worker's regular files whose name was free, as a link to the
    same file, and no file of the judge's is replaced; nothing the worker made but its regular
    files is linked; after the block the judge's /dev/shm holds exactly what it held before."""
    base = tmp_path_factory.mktemp("shm")
    shm, folder = base / "shm", base / "shm" / f"{WORKER_FOLDER_PREFIX}1"
    folder.mkdir(parents=True)
    for name in judges:
        (shm / name).write_bytes(b"the judge's")
    before = {entry.name: entry.inode() for entry in os.scandir(shm)}
    for name, kind in made:
        path = folder / name
        if os.path.lexists(path):
            continue
        if kind == "file":
            path.write_bytes(b"the worker's")
        elif kind == "link to the judge's file":
            os.symlink(shm / judges[0], path)
        elif kind == "link to its own file":
            os.symlink(name + "x", path)
        elif kind == "folder":
            path.mkdir()
        else:
            os.mkfifo(path)
    regular = {entry.name: entry.inode() for entry in os.scandir(folder) if entry.is_file(follow_symlinks=False)}
    with worker_dev_shm.exposed(str(folder), str(shm)) as linked:
        during = {entry.name: entry.inode() for entry in os.scandir(shm)}
        for name, inode in before.items():
            assert during[name] == inode, "a file of the judge's replaced"
        expected = {name: inode for name, inode in regular.items() if name not in before and not name.startswith(".")}
        assert {name: during[name] for name in during if name not in before} == expected
        assert sorted(linked) == sorted(str(shm / name) for name in expected)
    assert {entry.name: entry.inode() for entry in os.scandir(shm)} == before


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="a /dev/shm of its own (the test's files stay off the host's) needs root")
def test_a_process_pool_shares_a_cpu_tensor_under_a_gpu_workers_rules():
    """torch's way of sharing a CPU tensor with a pool's process (a file in /dev/shm made, then
    grown), under the Landlock rules a GPU worker inside bubblewrap is given: its /dev/shm is its
    own and writable whole, the rest of /dev may be written and never shrunk."""
    from harness.judge.sandbox import Sandbox, _bwrap
    from harness.runner import confine

    if confine.landlock_abi() < 3 or _bwrap() is None:
        pytest.skip("needs bubblewrap (a GPU worker's /dev/shm is its own inside it) and Landlock's right to truncate")
    sandbox = Sandbox("cuda")
    sandbox.close()
    rules = sandbox._settings(REPO, 3, 4, False, 0)
    program = r"""
import json, os, sys
from harness.judge.dev_shm import own_dev_shm
assert own_dev_shm() is None
import torch
from harness.runner.confine import _landlock
rules = json.loads(sys.argv[1])
assert _landlock(rules["writable"], rules["unshrinkable"]) is None
storage = torch.arange(4096, dtype=torch.float32).untyped_storage()
descriptor, size = storage._share_fd_cpu_()
print("shared", size)
"""
    result = subprocess.run([sys.executable, "-c", program, json.dumps(rules)], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 0 and result.stdout == "shared 16384\n", result.stderr[-2000:]


def _loaded_by_a_worker(tmp_path, device: str, submission: Path) -> tuple[str, list[str]]:
    """`submission` imported by a sandboxed worker of this process as its judge, the worker then
    closed: (what the worker printed, the judge's files when it started)."""
    import torch

    from harness.judge.isolation import CaseStopped, WorkerProcess, protect_the_judge
    from harness.judge.memory import SharedPool
    from harness.judge.sandbox import Sandbox
    from harness.runner.files import runner_files

    protect_the_judge()
    sandbox = Sandbox(device)
    files = {**runner_files(), "submission.py": submission}
    worker = WorkerProcess(sandbox, str(tmp_path), files, device, 42, SharedPool(torch.device(device)).describe)
    judges = worker_dev_shm.judges_files() if device == "cuda" else []
    try:
        worker.begin_case(300, lambda text: None)
        with contextlib.suppress(CaseStopped):  # the output is read whatever the load's end
            worker.request("load")
        output = Path(worker.log_path).read_text(errors="replace")
    finally:
        worker.close()
        sandbox.close()
    return output, judges


def _dev_shm_probe(tmp_path, device: str) -> tuple[dict[str, bool], list[str], list[str]]:
    """tests/fixtures/sandbox/probe_dev_shm.py imported by a sandboxed worker of this process as
    its judge: (attempt -> whether it got through, what it saw it had not made, the judge's
    files when it started)."""
    output, judges = _loaded_by_a_worker(tmp_path, device, REPO / "tests" / "fixtures" / "sandbox" / "probe_dev_shm.py")
    said, seen = {}, []
    for line in output.splitlines():
        verdict, _, what = line.partition(" ")
        if verdict in ("GOT", "REFUSED"):
            said[what.rsplit(" (", 1)[0] if verdict == "REFUSED" else what] = verdict == "GOT"
        elif verdict == "SEES":
            seen.append(what)
    assert "grow and shrink a file of its own" in said, output
    return said, seen, judges


@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_cpu_worker_sees_nothing_but_its_own_in_its_dev_shm_and_grows_files_there(tmp_path):
    from harness.judge.sandbox import _bwrap

    if _bwrap() is None:
        pytest.skip("a worker's /dev/shm is its own inside bubblewrap")
    said, seen, _ = _dev_shm_probe(tmp_path, "cpu")
    assert seen == []
    assert said == {"grow and shrink a file of its own": True, "reach another process's /dev/shm": False}


@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_gpu_worker_sees_the_judges_ipc_files_alone_in_its_dev_shm_and_grows_its_own(tmp_path):
    """Its /dev/shm holds the judge's IPC files and nothing of another worker's; it may write and
    shrink those (the edge docs/judge.md names) but neither replace nor remove them (mount points),
    grows files of its own, and reaches no other /dev/shm; the judge's /dev/shm keeps nothing of it."""
    import torch

    from harness.judge.sandbox import _bwrap

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a GPU worker's /dev/shm holds its judge's IPC files")
    if _bwrap() is None:
        pytest.skip("a worker's /dev/shm is its own inside bubblewrap")
    before = set(os.listdir("/dev/shm"))
    said, seen, judges = _dev_shm_probe(tmp_path, "cuda")
    assert judges and set(judges) <= set(seen), (seen, judges)
    assert not (set(seen) - set(judges)) & before, "a file of the judge's /dev/shm beside its IPC files"
    for name in judges:
        assert said[f"write in place {name}"] and said[f"shrink {name}"]
        assert not said[f"replace {name}"] and not said[f"remove {name}"]
    assert said["grow and shrink a file of its own"] and not said["reach another process's /dev/shm"]
    assert set(os.listdir("/dev/shm")) <= before | set(judges)


@pytest.mark.gpu
def test_the_allocation_the_judge_exports_to_make_its_ipc_files_holds_nothing_else_of_the_judges():
    """CUDA IPC exports a whole segment of torch's allocator: the judge's small tensors made after
    the priming export never sit in the primed segment, which any handle of it would map whole."""
    import torch

    from harness.shared import cuda_ipc

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: the judge primes its IPC files with a CUDA allocation")
    worker_dev_shm.prime("cuda")
    primed = worker_dev_shm._PRIMED[0]
    reference = torch.ones(1 << 10, device="cuda")

    def base(tensor):
        return tensor.untyped_storage().data_ptr() - cuda_ipc.export(tensor)[2]

    assert base(primed) != base(reference)


NEEDS_ROOT = pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="a /dev/shm of its own and a judge's own user need root")


def _in_a_gpu_judges_sandbox(tmp_path, fixture: str, while_alive: str = "", size: str = "1g") -> str:
    """What a fresh interpreter printed that took a /dev/shm of its own of `size`, made a file
    there as its driver's IPC file (held open, of the judge's own user, as a root judge's driver
    makes it: harness/judge/judge_user.py), ran tests/fixtures/sandbox/`fixture` in a worker of a
    GPU judge's sandbox as a judge that changed to its own user does (the worker's torch on the
    CPU), ran `while_alive` before closing the worker (the workers it adds to `later` closed
    after it), then printed its file's mode."""
    from harness.judge.sandbox import _bwrap

    if _bwrap() is None:
        pytest.skip("a GPU worker's /dev/shm is a folder of its judge's inside bubblewrap")
    program = r"""
import contextlib, os, sys
from pathlib import Path
from harness.judge import dev_shm
dev_shm.SIZE = sys.argv[3]
assert dev_shm.own_dev_shm() is None
import torch
from harness.judge import judge_user
from harness.judge.isolation import CaseStopped, WorkerProcess, protect_the_judge
from harness.judge.memory import SharedPool
from harness.judge.sandbox import Sandbox
from harness.runner.files import runner_files
judges = "/dev/shm/cuda.shm.0.1.1"
with open(judges, "wb") as made:
    made.write(b"driver" * 100)
os.chown(judges, judge_user.DEDICATED_ID, judge_user.DEDICATED_ID)
os.chmod(judges, 0o600)
held = open(judges, "rb")
judge_user._DROPPED.append((judge_user.DEDICATED_ID, judge_user.DEDICATED_ID))  # the ids drop_root changes to
protect_the_judge()
sandbox = Sandbox("cuda")
files = {**runner_files(), "submission.py": Path("tests/fixtures/sandbox") / sys.argv[2]}
worker = WorkerProcess(sandbox, sys.argv[1], files, "cpu", 42, SharedPool(torch.device("cpu")).describe)
try:
    worker.begin_case(300, lambda text: None)
    with contextlib.suppress(CaseStopped):
        worker.request("load")
    print(Path(worker.log_path).read_text(errors="replace"))
    later = []  # workers `while_alive` started, closed after this one
    exec(sys.argv[4])
finally:
    worker.close()
    for other in later:
        other.close()
    sandbox.close()
print("MODE", oct(os.stat(judges).st_mode & 0o7777))
"""
    result = subprocess.run([sys.executable, "-c", program, str(tmp_path), fixture, size, while_alive],
                            capture_output=True, text=True, cwd=REPO, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO)})  # the kit on the workers' import path
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.mark.e2e  # a whole sandboxed run as the judge's own user: the suite CI runs beside make test
@NEEDS_ROOT
def test_a_worker_that_locks_its_judges_ipc_files_leaves_them_as_they_were(tmp_path):
    """tests/fixtures/sandbox/cheat_locks_the_judges_ipc_files.py: the worker, of the judge's own
    user, takes every permission from the judge's file bound into its /dev/shm; once the worker
    has ended the file has its mode back, and a worker started while it was locked (the service's
    next worker, started ahead) gives it no other mode when it ends after."""
    while_alive = """
other = WorkerProcess(sandbox, sys.argv[1], {**runner_files(), "submission.py": Path("tests/fixtures/torch_submission.py")},
                      "cpu", 42, SharedPool(torch.device("cpu")).describe)
later.append(other)
other.begin_case(300, lambda text: None)
other.request("load")
print("STARTED WHILE LOCKED", oct(os.stat(judges).st_mode & 0o7777))
"""
    printed = _in_a_gpu_judges_sandbox(tmp_path, "cheat_locks_the_judges_ipc_files.py", while_alive)
    assert "STARTED WHILE LOCKED 0o0" in printed, printed[-3000:]
    assert "LOCKED cuda.shm.0.1.1" in printed, printed[-3000:]
    assert printed.splitlines()[-1] == "MODE 0o600"


@pytest.mark.e2e  # a whole sandboxed run as the judge's own user
@NEEDS_ROOT
@pytest.mark.xfail(strict=True, reason="a GPU worker's folder shares its judge's /dev/shm and its size: no per-worker "
                                       "limit holds there but its memory cgroup's, none by default, and a file "
                                       "system of the worker's own would refuse the hard links that expose its files")
def test_a_worker_that_fills_its_dev_shm_leaves_its_judge_room_for_its_ipc_files(tmp_path):
    """tests/fixtures/sandbox/cheat_fills_its_dev_shm.py: while the worker lives, its judge still
    writes a page of a file of its own in its /dev/shm (its driver's next export)."""
    while_alive = """
try:
    with open("/dev/shm/cuda.shm.0.1.2", "wb") as later:
        later.write(os.urandom(1 << 20))
    print("JUDGE WROTE")
except OSError as error:
    print("JUDGE REFUSED", error)
"""
    printed = _in_a_gpu_judges_sandbox(tmp_path, "cheat_fills_its_dev_shm.py", while_alive, size="64m")
    assert "FILLED 6" in printed, printed[-3000:]  # it reached the 64 MiB of the judge's /dev/shm
    assert "JUDGE WROTE" in printed, printed[-3000:]


@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_gpu_worker_that_locks_its_judges_ipc_files_leaves_them_as_they_were(tmp_path):
    """tests/fixtures/sandbox/cheat_locks_the_judges_ipc_files.py in a GPU worker: it takes every
    permission from the judge's IPC files bound into its /dev/shm; once it has ended they have
    their modes back, and an honest worker after it opens the judge's handles."""
    import torch

    from harness.judge.sandbox import _bwrap

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a GPU worker's /dev/shm holds its judge's IPC files")
    if _bwrap() is None:
        pytest.skip("a worker's /dev/shm is its own inside bubblewrap")
    def modes_now(names):
        return {name: os.stat(os.path.join("/dev/shm", name)).st_mode & 0o7777 for name in names}

    worker_dev_shm.prime("cuda")
    before = modes_now(worker_dev_shm.judges_files())
    output, judges = _loaded_by_a_worker(tmp_path, "cuda",
                                         REPO / "tests" / "fixtures" / "sandbox" / "cheat_locks_the_judges_ipc_files.py")
    assert judges and all(f"LOCKED {name}" in output for name in judges), output
    assert modes_now(judges) == {name: before.get(name) for name in judges} and all(mode & 0o600 == 0o600 for mode in before.values())
    said, _, _ = _dev_shm_probe(tmp_path, "cuda")
    assert all(said[f"write in place {name}"] for name in judges)


@pytest.mark.gpu
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_gpu_worker_that_nests_folders_past_the_recursion_limit_leaves_nothing_in_the_judges_dev_shm(tmp_path):
    """tests/fixtures/sandbox/cheat_nests_folders_in_its_dev_shm.py in a GPU worker: its folder of
    the judge's /dev/shm is removed whole when it is closed, which raises nothing."""
    import torch

    from harness.judge.sandbox import _bwrap

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a GPU worker's /dev/shm is a folder of its judge's")
    if _bwrap() is None:
        pytest.skip("a worker's /dev/shm is its own inside bubblewrap")
    before = set(os.listdir("/dev/shm"))
    output, judges = _loaded_by_a_worker(tmp_path, "cuda",
                                         REPO / "tests" / "fixtures" / "sandbox" / "cheat_nests_folders_in_its_dev_shm.py")
    assert "Traceback" not in output, output
    assert set(os.listdir("/dev/shm")) <= before | set(judges)


@pytest.mark.gpu
@pytest.mark.e2e
@pytest.mark.skipif(not LINUX, reason="the sandbox's layers are Linux's")
def test_a_worker_that_cuts_short_its_judges_ipc_files_ends_at_most_its_own_judge(tmp_path):
    """Two one-shot judges on one GPU, as two lanes of the service are: one judging a file that
    truncates every file of its /dev/shm it did not make (its judge's IPC files), the other an
    honest file. The honest one passes; the cheat gets its honest verdict (pass) or none, its
    judge ended, never another's."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device: a GPU worker's /dev/shm holds its judge's IPC files")
    cases = tmp_path / "cases.txt"
    cases.write_text("m: 128; n: 256; k: 256; l: 1; seed: 1111\nm: 128; n: 1536; k: 7168; l: 1; seed: 1112\n")

    def judge(submission: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "harness", "test", "--submission", str(submission), str(cases)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)

    cheat = judge(REPO / "tests" / "fixtures" / "sandbox" / "cheat_truncates_the_judges_ipc_files.py")
    honest = judge(REPO / "tests" / "fixtures" / "problems" / "nvfp4_gemm_torch.py")
    honest_output, _ = honest.communicate(timeout=600)
    cheat_output, _ = cheat.communicate(timeout=600)
    assert honest.returncode == 0 and "check: pass" in honest_output, honest_output
    judged = [line for line in cheat_output.splitlines() if line.startswith("check: ")]
    assert all(line.startswith("check: pass") for line in judged), cheat_output
    assert (cheat.returncode == 0) == bool(judged), cheat_output
