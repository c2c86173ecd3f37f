"""A GPU worker's /dev/shm: a folder of its own in its judge's /dev/shm (harness/judge/dev_shm.py),
holding none of another process's files but the judge's CUDA IPC files, bound in read-write;
the worker's own files linked into the judge's /dev/shm only while the judge opens one of the
worker's handles.

The NVIDIA driver opens a CUDA IPC handle only with the exporter's files in /dev/shm, read-write
(docs/figures.md, the CUDA IPC files row), and handles go both ways: a worker opens the judge's
inputs and events, the judge a worker's own outputs. A process pool that shares CPU tensors
(torch.multiprocessing) makes a file in /dev/shm and grows it, which Landlock allows a GPU worker
beneath its /dev/shm (harness/judge/sandbox.py): in a folder of its own, what it grows, shrinks,
leaves or reads is its own, but for the judge's files bound in, whose truncation is what
docs/judge.md names as still in its reach.

The folder is one of the judge's file system, not a tmpfs of the worker's: the judge reaches the
worker's files there by a hard link, which no other file system allows. What the worker writes
there is memory its cgroup is charged for, within the judge's /dev/shm's size.
"""

import contextlib
import os
import stat
import tempfile

from harness.judge.dev_shm import WORKER_FOLDER_PREFIX, held_by
from harness.shared import cuda_ipc

SHM = "/dev/shm"
_PRIMED: list = []  # the allocation and event exported once and the allocation's pool, kept for the process
_FIRST_MODES: dict[tuple[str, int], int] = {}  # (name, inode) of a file of the judge's -> its mode when first bound


def prime(device: str) -> None:
    """Make the judge's driver create its IPC files before any worker starts (it creates them at
    the first export): a worker is given those present at its start. Nothing without CUDA."""
    import torch

    if _PRIMED or not torch.cuda.is_available():
        return

    # A pool of its own: an exported allocation is a whole segment of torch's allocator, which
    # would otherwise go on to hold the judge's own small tensors (references, pristine inputs).
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        block = torch.empty(1 << 16, dtype=torch.uint8, device=device)
    event = torch.cuda.Event(interprocess=True)
    event.record(torch.cuda.current_stream(block.device))
    cuda_ipc.export(block)
    event.ipc_handle()
    _PRIMED.extend((block, event, pool))


def judges_files(shm: str = SHM) -> list[str]:
    """The names of the files at the top of `shm` that this process maps or holds open: its
    driver's IPC files, found from the process itself, not by their names."""
    held = held_by([os.getpid()], os.stat(shm).st_dev)
    names = []
    with os.scandir(shm) as entries:
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.inode() in held:
                    names.append(entry.name)
    return sorted(names)


def make_folder(owner: tuple[int, int] | None, shm: str = SHM) -> str:
    """A worker's folder in `shm`, its user's alone (mode 0700)."""
    folder = tempfile.mkdtemp(prefix=WORKER_FOLDER_PREFIX, dir=shm)
    if owner is not None:
        os.chown(folder, *owner)
    return folder


def bubblewrap_arguments(folder: str, judges: list[str]) -> list[str]:
    """The worker's /dev/shm: `folder`, and in it each of the judge's files `judges` bound read-write."""
    arguments = ["--bind", folder, SHM]
    for name in judges:
        arguments += ["--bind", os.path.join(SHM, name), os.path.join(SHM, name)]
    return arguments


def modes(names: list[str], shm: str = SHM) -> dict[tuple[str, int], int]:
    """The permission bits of the judge's files `names` in `shm`, by name and inode, as each was
    when a worker's start first found it: a root judge's own user made them, which is its
    workers' user too (harness/judge/judge_user.py), and a file's owner may change its mode, the
    next candidate's workers then refused them. A worker changes only files bound into it, found
    at its start, so a mode first found is the judge's own even where a worker started while
    another had changed it. `restore_modes` gives them back once the worker has ended."""
    found = {}
    for name in names:
        with contextlib.suppress(OSError):
            status = os.lstat(os.path.join(shm, name))
            found[name, status.st_ino] = _FIRST_MODES.setdefault((name, status.st_ino), stat.S_IMODE(status.st_mode))
    return found


def restore_modes(found: dict[tuple[str, int], int], shm: str = SHM) -> None:
    """The judge's files given back the modes `modes` found, each where its name still names the
    same file (no worker reaches a name of `shm` itself, only the files bound into its /dev/shm)."""
    for (name, inode), mode in found.items():
        path = os.path.join(shm, name)
        with contextlib.suppress(OSError):
            if os.lstat(path).st_ino == inode:
                os.chmod(path, mode)


@contextlib.contextmanager
def exposed(folder: str, shm: str = SHM):
    """The worker's regular files at the top of `folder` linked into `shm` under their names for
    the block, each where the name is free; the links removed after (the judge's driver keeps
    what it opened). A name the worker chose never replaces a file of `shm`, a link or folder of
    the worker's is never followed, and a file swapped for another while linked is removed only
    where the link is still the one made."""
    made = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_file(follow_symlinks=False):
                    continue
                target = os.path.join(shm, entry.name)
                with contextlib.suppress(OSError):
                    os.link(entry.path, target, follow_symlinks=False)
                    linked = os.lstat(target)
                    if stat.S_ISREG(linked.st_mode):
                        made.append((target, linked.st_ino))
                    else:  # swapped for a link or a device between the look and the link
                        os.unlink(target)
        yield [target for target, _ in made]
    finally:
        for target, inode in made:
            with contextlib.suppress(OSError):
                if os.lstat(target).st_ino == inode:
                    os.unlink(target)


class WorkerOutputs(cuda_ipc.OpenedBlocks):
    """The allocations the judge opens from one GPU worker's handles, the worker's files exposed
    (`exposed`) while each is opened."""

    def __init__(self, folder: str | None):
        super().__init__()
        self._folder = folder

    def _open_handle(self, raw) -> int:
        if self._folder is None:
            return super()._open_handle(raw)
        with exposed(self._folder):
            return super()._open_handle(raw)
