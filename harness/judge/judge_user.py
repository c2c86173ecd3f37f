"""The user a root GPU judge runs as: an unprivileged uid of its own, taken before CUDA starts, so
that its workers run as that same uid, unprivileged.

The NVIDIA driver opens a CUDA IPC handle only in a process whose uid is the exporting
process's (docs/figures.md, the CUDA IPC row). The judge exports the inputs and outputs it
shares with a worker, so a root judge's GPU worker would have to be root, or uid 0 in a user
namespace of its own. `drop_root` makes the judge's uid (real, effective, saved, and its group)
an unprivileged one instead: by default `DEDICATED_ID`, which no account holds, or the user
`JUDGE_USER_ENV` names; and the sandbox then changes its workers to the same uid
(harness/judge/sandbox.py). `JUDGE_USER_ENV=root` keeps the judge root, and its GPU workers are
uid 0 in a user namespace of their own, which the sandbox's check names as a refused layer.

Once changed, the judge's HOME, USER and LOGNAME are its own user's (root's home is closed to it;
a uid no account holds has no entry to look up), so that a folder's reference.py runs as under root.

Before it changes, the judge tries, in a child of the target user, what its workers will read
of their root (harness/judge/worker_root.py `unreadable_by`): a folder of the import path closed
to that user (an archive unpacked with a root folder of mode 0700) would fail every worker's
import, so the judge refuses to start instead (`JudgeCannotStart`), naming the folder.

The judge keeps the capabilities its own work takes (`KEPT_CAPABILITIES`): reading and writing
files of any owner (the kit, the store, the cgroups it makes for its workers), ending and
reading its workers' processes, and becoming root again in the child that starts bubblewrap
(`regain_root`), which then runs as it ran before. It gives up the rest (mounts, namespaces:
its own `/dev/shm` is entered before, harness/judge/dev_shm.py), keeps none across `exec`, and
no inheritable or ambient one: the programs it runs (git, ldconfig, kernelguard's interpreter)
run as its uid without any. Capabilities are a thread's: a thread started before the change
holds none after it (the service's judge starts the thread that ends cancelled runs after it).

A worker of the same uid cannot reach the judge: it is not in the worker's pid namespace (no
signal, `kill(-1)` or `setpriority(PRIO_USER)` reaches it), it is not dumpable and holds
capabilities the worker lacks (ptrace and its `/proc` files need CAP_SYS_PTRACE), seccomp refuses
ptrace and the process_vm calls, Landlock scopes signals to the worker's own domain (ABI 6), and
the judge's files are outside the worker's root or bound read-only there (`/sys` with the cgroups
among them), but for its CUDA IPC files, bound read-write into a GPU worker's /dev/shm: their owner
is the worker's user, which may change their modes until the judge gives them back when the worker
ends (harness/judge/worker_dev_shm.py `restore_modes`).
"""

import atexit
import contextlib
import ctypes
import os
import pwd
import resource
import shutil
import sys
import tempfile

JUDGE_USER_ENV = "NVFP4_JUDGE_USER"  # a user's name or a uid; unset, DEDICATED_ID; STAY_ROOT, the judge stays root
STAY_ROOT = "root"
# The judge's own uid and gid where no user is named: in the range systemd leaves unused
# (65520-65533, between its dynamic service users and nobody), so no account tool or dynamic
# service user takes it, and it needs no entry in /etc/passwd; nobody's 65534 is shared with
# whatever else runs as nobody on the host.
DEDICATED_ID = 65533
CAPABILITY_NUMBERS = {"CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3, "CAP_KILL": 5,
                      "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SYS_PTRACE": 19, "CAP_SYS_RESOURCE": 24}
# Files of any owner (the kit, the store, the cgroups), its workers' processes (bubblewrap's stays
# root) and their /proc files (the sweep of its /dev/shm reads which files they hold), root again
# in the child that starts bubblewrap, and the per-user limits its workers count against too.
KEPT_CAPABILITIES = tuple(CAPABILITY_NUMBERS)
PR_SET_KEEPCAPS = 8
LINUX_CAPABILITY_VERSION_3 = 0x20080522

_DROPPED: list[tuple[int, int]] = []  # (uid, gid), once the judge has changed to it
_REFUSED: list[str] = []


class JudgeCannotStart(Exception):
    """The judge cannot run its workers as its own user: the message names what and the fix. No
    verdict: the machine's setup, never the file's."""


def judge_ids() -> tuple[int, int]:
    """(uid, gid) of `JUDGE_USER_ENV`: a user's name, or a number (its own gid then); unset,
    `DEDICATED_ID`. ValueError for root, a name the system lacks, or a `DEDICATED_ID` that an
    account of this system holds."""
    wanted = os.environ.get(JUDGE_USER_ENV, "").strip()
    if not wanted:
        with contextlib.suppress(KeyError):
            holder = pwd.getpwuid(DEDICATED_ID).pw_name
            raise ValueError(f"the judge's own uid {DEDICATED_ID} is the account {holder!r} of this system: name a uid no "
                             f"other process runs as in {JUDGE_USER_ENV}")
        return DEDICATED_ID, DEDICATED_ID
    if wanted.isascii() and wanted.isdigit():
        uid, gid = int(wanted), int(wanted)
    else:
        try:
            entry = pwd.getpwnam(wanted)
            uid, gid = entry.pw_uid, entry.pw_gid
        except (KeyError, ValueError):  # no such name; a NUL in it
            raise ValueError(f"{JUDGE_USER_ENV}={wanted!r} names no user of this system") from None
    if uid == 0 or gid == 0:
        raise ValueError(f"{JUDGE_USER_ENV}={wanted!r} is root's: the judge's own user must be unprivileged "
                         f"({JUDGE_USER_ENV}={STAY_ROOT} keeps the judge root)")
    return uid, gid


def _kept_mask() -> int:
    return sum(1 << CAPABILITY_NUMBERS[name] for name in KEPT_CAPABILITIES)


def _capset(libc, capabilities: int) -> None:
    """This thread's effective and permitted sets made `capabilities` (a bit mask) where it holds
    them (a container may lack some), inheritable none."""
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    held = (ctypes.c_uint32 * 6)()
    if libc.capget(header, held) != 0:
        raise OSError(ctypes.get_errno(), f"capget: {os.strerror(ctypes.get_errno())}")
    capabilities &= held[1] | held[4] << 32
    low, high = capabilities & 0xFFFFFFFF, capabilities >> 32
    data = (ctypes.c_uint32 * 6)(low, low, 0, high, high, 0)  # effective, permitted, inheritable; twice
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), f"capset: {os.strerror(ctypes.get_errno())}")


def drop_root() -> str | None:
    """Where this process is root on Linux, change its user to the judge's own (`judge_ids`),
    keeping `KEPT_CAPABILITIES` alone. Once, before CUDA starts; returns what was refused (the
    sandbox's `user` layer switched off, `JUDGE_USER_ENV=root`, no such user, a call the system
    refused), also kept for `refused`. JudgeCannotStart where the workers of that user could
    not read the import path. The commit the run records is read first (`HARNESS_COMMIT`): git
    refuses a repository another user owns."""
    if _DROPPED or _REFUSED or not sys.platform.startswith("linux") or os.geteuid() != 0:
        return None
    from harness.judge.layers import layers_off
    from harness.judge.worker_root import unreadable_by
    from harness.shared.paths import git_commit

    if "user" in layers_off():
        return None
    if os.environ.get(JUDGE_USER_ENV, "").strip() == STAY_ROOT:
        _REFUSED.append(f"its own user ({JUDGE_USER_ENV}={STAY_ROOT}): it stays root, and its GPU workers are uid 0 in a "
                        "user namespace of their own")
        return _REFUSED[0]
    try:
        uid, gid = judge_ids()
    except ValueError as error:
        _REFUSED.append(f"its own user ({error}): it stays root, and so do its GPU workers")
        return _REFUSED[0]
    closed = unreadable_by(uid, gid, [entry for entry in sys.path if entry and os.path.isabs(entry)])
    if closed:
        raise JudgeCannotStart(f"the judge's own user (uid {uid}) cannot read {closed[0]}, which its workers import from: "
                               f"open it to others (chmod o+rX, or a+rX on each folder of it) or name its owner in "
                               f"{JUDGE_USER_ENV} ({JUDGE_USER_ENV}={STAY_ROOT} keeps the judge root, a refused layer)")
    os.environ.setdefault("HARNESS_COMMIT", git_commit())
    libc = ctypes.CDLL(None, use_errno=True)
    # Its workers' processes count against its uid's process limit too: none where root may lift it
    # (CAP_SYS_RESOURCE), else the highest, for the judge and them alike (their cgroups' pids.max
    # bounds theirs), so that they can hardly refuse it a fork.
    processes = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    for limit in (resource.RLIM_INFINITY, processes):
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit))
            break
        except (ValueError, OSError):
            continue
    try:
        if libc.prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        _capset(libc, _kept_mask())
        libc.prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0)
    except OSError as error:
        _REFUSED.append(f"its own user (uid {uid}: {error}): its GPU workers cannot open its CUDA IPC handles")
        return _REFUSED[0]
    _DROPPED.append((uid, gid))
    _environment_of_its_own(uid)
    return None


def _environment_of_its_own(uid: int) -> None:
    """HOME, USER and LOGNAME of the judge's own user. Root's home is closed to it, and a uid no
    account holds has no entry for Python's fallbacks (`os.path.expanduser` without HOME,
    `getpass.getuser` without USER) to find: a folder's reference.py, or a library it calls, that
    caches under `~` or names its user runs here as it ran under root. The home is a folder of
    its own (mode 0700), removed when the judge ends; the XDG folders follow it."""
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = f"nvfp4-judge-{uid}"
    home = tempfile.mkdtemp(prefix="nvfp4-judge-home-")
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    for variable in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"):
        os.environ.pop(variable, None)
    os.environ.update(HOME=home, USER=name, LOGNAME=name)


def dropped_ids() -> tuple[int, int] | None:
    """(uid, gid) the judge changed to from root, or None."""
    return _DROPPED[0] if _DROPPED else None


def judge_is_root() -> bool:
    """Root, or root that changed to its own user: its workers' user is then the sandbox's choice."""
    return os.geteuid() == 0 or bool(_DROPPED)


def regain_root() -> None:
    """In a child of a judge that changed its user, about to start bubblewrap: root again, as the
    judge was (bubblewrap sets the worker's user). Nothing where the judge did not change."""
    if _DROPPED:
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)


@contextlib.contextmanager
def files_of_root():
    """Files and folders made in the block owned by root, not by the judge's user (this thread's
    file-system uid and gid 0 for the block): the cgroups the judge makes for its workers, whose
    limits a worker of the judge's uid could otherwise write wherever it reached them."""
    if not _DROPPED:
        yield
        return
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = _DROPPED[0]
    libc.setfsgid(0)
    libc.setfsuid(0)
    try:
        yield
    finally:
        libc.setfsuid(uid)
        libc.setfsgid(gid)
        # A file-system uid back from 0 clears the file capabilities from the effective set.
        _capset(libc, _kept_mask())


def refused() -> list[str]:
    """What `drop_root` reported, where it ran."""
    return list(_REFUSED)
