"""The GPU judge's own /dev/shm: a fresh tmpfs in a mount namespace of the judge's, seen by no
other process on the machine, a folder of it each worker's /dev/shm (harness/judge/worker_dev_shm.py);
swept of what an ended candidate left there.

The CUDA driver keeps every process's IPC state in files under /dev/shm, and a worker must reach
its judge's (CUDA IPC); in the host's /dev/shm the judge's workers would reach every other CUDA
process's files too, another judge's on the same machine among them (cut short, they kill it
with SIGBUS).

This module imports nothing but the standard library: an entry point enters the namespace
before it imports torch, whose import starts a thread. A mount namespace is a thread's, and
unshare moves only the calling one: a thread started before stays on the host's /dev/shm, and
so does every thread it starts later.
"""

import contextlib
import ctypes
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x4000, 0x40000
SIZE = "1g"
# The share of the tmpfs that, still in use once the sweep is done, ends the service's judge: what
# no sweep removes is held by a live process, the judge's own driver files among them, which a
# worker may grow up to the tmpfs's size, leaving the next candidate's workers no room for
# theirs. Honest driver files hold a small part of it.
FULL_SHARE = 0.5
# A GPU worker's own folder in its judge's /dev/shm, its /dev/shm (harness/judge/worker_dev_shm.py).
WORKER_FOLDER_PREFIX = ".worker-"
_OWN_DEV_SHM: list[str | None] = []  # what was refused, once the process has tried
_ENTERED: list[bool] = []  # whether this process's /dev/shm is its own


def own_dev_shm() -> str | None:
    """Move this process into a mount namespace of its own whose /dev/shm is a fresh tmpfs, before
    it starts CUDA and before it starts a thread. Returns what was refused (it needs
    CAP_SYS_ADMIN), or which threads were left on the host's /dev/shm; once."""
    if not _OWN_DEV_SHM:
        entered, problem = _enter()
        _ENTERED.append(entered)
        _OWN_DEV_SHM.append(problem or (_threads_left_behind() if entered else None))
    return _OWN_DEV_SHM[0]


def refused() -> list[str]:
    """What `own_dev_shm` reported, where it ran."""
    return [problem for problem in _OWN_DEV_SHM if problem]


def _enter() -> tuple[bool, str | None]:
    """(whether /dev/shm is now this process's own, what was refused)."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/dev/shm"):
        return False, None
    libc = ctypes.CDLL(None, use_errno=True)
    steps = (("unshare", lambda: libc.unshare(CLONE_NEWNS)),
             ("mount --make-rprivate /", lambda: libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None)),
             ("mount tmpfs /dev/shm", lambda: libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV,
                                                         f"mode=1777,size={SIZE}".encode())))
    for what, step in steps:
        if step() != 0:
            return False, (f"a /dev/shm of its own ({what}: {os.strerror(ctypes.get_errno())}): its workers reach "
                           "every CUDA process's files there, another judge's on this machine among them")
    return True, None


def _threads_left_behind() -> str | None:
    own = os.readlink("/proc/thread-self/ns/mnt")
    behind = []
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/task/{thread}/ns/mnt") != own:
                behind.append(thread)
    if not behind:
        return None
    return (f"a /dev/shm of its own for its first thread only: {len(behind)} thread(s) started before it "
            "(an import's) keep the host's, and so does every thread they start")


def held_by(pids, device: int) -> set[int]:
    """The inodes on `device` that the processes `pids` map or hold open. By inode, never by name:
    a name can be given to another file (a rename over a held one), and a name may read like a
    held one's (a " (deleted)" suffix, an escaped newline)."""
    held = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for descriptor in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    status = os.stat(f"/proc/{pid}/fd/{descriptor}")  # the file itself, deleted or renamed
                    if status.st_dev == device:
                        held.add(status.st_ino)
        with contextlib.suppress(OSError, ValueError, IndexError):
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    major, minor = fields[3].split(":")
                    if os.makedev(int(major, 16), int(minor, 16)) == device:
                        held.add(int(fields[4]))
    return held


def _held(device: int) -> set[int]:
    """The inodes on `device` that a live process maps or holds open."""
    return held_by([entry for entry in os.listdir("/proc") if entry.isdigit()], device)


def sweep_own_dev_shm() -> list[str]:
    """Remove from this judge's own /dev/shm (only where `own_dev_shm` made it) everything no live
    process maps or holds open, at any depth: what an ended candidate's workers left there, which
    the next candidate of the same judge would otherwise find. Links are removed, never followed.
    A GPU worker's own folder (harness/judge/worker_dev_shm.py) is left to the judge, which
    removes it when its worker ends (`remove_tree`): a waiting worker's holds the mount points of
    the judge's files bound into its /dev/shm, which a removal would take from it. Returns the
    paths removed, relative to /dev/shm."""
    if _ENTERED != [True]:
        return []
    held = _held(os.stat("/dev/shm").st_dev)

    def kept(relative: str, status: os.stat_result) -> bool:
        if stat.S_ISDIR(status.st_mode):
            return "/" not in relative and relative.startswith(WORKER_FOLDER_PREFIX)
        return status.st_ino in held

    return _remove_under("/dev/shm", kept)


def remove_tree(path: str) -> None:
    """The folder `path` and everything in it removed, links never followed, at any depth: a
    worker nests folders in its /dev/shm as deep as it likes, past the recursion limit of
    shutil.rmtree and os.walk (RecursionError) and past PATH_MAX."""
    _remove_under(path, lambda relative, status: False)
    with contextlib.suppress(OSError):
        os.rmdir(path)


FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _remove_under(top: str, kept) -> list[str]:
    """Remove everything under the folder `top` that `kept(path relative to top, its lstat)` does
    not keep (a folder kept is not entered), each folder after what it holds (it goes where
    emptied); the relative paths removed. Without recursion and by descriptor, one open at a time:
    the depth is a worker's choice."""
    removed: list[str] = []
    try:
        current = os.open(top, FOLDER)
    except OSError:
        return removed
    stack = [("", _clear(current, "", kept, removed))]  # (a folder's path below top, its folders left to enter)
    try:
        while stack:
            relative, folders = stack[-1]
            if folders:
                name = folders.pop()
                with contextlib.suppress(OSError):
                    inner = os.open(name, FOLDER, dir_fd=current)
                    os.close(current)
                    current = inner
                    inner_relative = f"{relative}/{name}" if relative else name
                    stack.append((inner_relative, _clear(current, inner_relative, kept, removed)))
                continue
            stack.pop()
            if not stack:
                break
            try:
                parent = os.open("..", FOLDER, dir_fd=current)
            except OSError:
                break
            os.close(current)
            current = parent
            with contextlib.suppress(OSError):
                os.rmdir(os.path.basename(relative), dir_fd=current)  # empty by now, unless it holds what is kept
                removed.append(relative)
    finally:
        os.close(current)
    return removed


def _clear(descriptor: int, relative: str, kept, removed: list[str]) -> list[str]:
    """What is not a folder in the folder open as `descriptor` removed unless kept; its folders
    not kept, to enter."""
    folders = []
    with os.scandir(descriptor) as entries:
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            with contextlib.suppress(OSError):
                status = entry.stat(follow_symlinks=False)
                if kept(path, status):
                    continue
                if stat.S_ISDIR(status.st_mode):
                    folders.append(entry.name)
                else:
                    os.unlink(entry.name, dir_fd=descriptor)
                    removed.append(path)
    return folders


def full_after_sweep() -> str | None:
    """Why this judge's own /dev/shm can serve no next candidate (more than FULL_SHARE of it still
    in use after `sweep_own_dev_shm`), or None; None where it is not the judge's own."""
    if _ENTERED != [True]:
        return None
    usage = os.statvfs("/dev/shm")
    total, used = usage.f_blocks * usage.f_frsize, (usage.f_blocks - usage.f_bfree) * usage.f_frsize
    if used <= FULL_SHARE * total:
        return None
    return (f"the judge's own /dev/shm still holds {used >> 20} MiB of its {total >> 20} MiB after the sweep, in files "
            "a live process holds (the judge's driver files grown by a worker): a fresh judge serves the next candidate")
