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
    removes it when its worker ends: a waiting worker's holds the mount points of the judge's files
    bound into its /dev/shm, which a removal would take from it. Returns the paths removed,
    relative to /dev/shm."""
    if _ENTERED != [True]:
        return []
    device = os.stat("/dev/shm").st_dev
    held = _held(device)
    removed = []
    for folder, folders, files in os.walk("/dev/shm", topdown=False):
        if os.path.relpath(folder, "/dev/shm").startswith(WORKER_FOLDER_PREFIX):
            continue
        folders = [name for name in folders if not (folder == "/dev/shm" and name.startswith(WORKER_FOLDER_PREFIX))]
        for name in files + folders:
            path = os.path.join(folder, name)
            with contextlib.suppress(OSError):
                status = os.lstat(path)
                if stat.S_ISDIR(status.st_mode):
                    os.rmdir(path)  # empty by now, unless it holds what a process holds
                elif status.st_ino not in held:
                    os.unlink(path)
                else:
                    continue
                removed.append(os.path.relpath(path, "/dev/shm"))
    return removed


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
