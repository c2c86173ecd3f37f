"""The worker's first steps, before it imports anything but the standard library: descriptors
fixed, its user changed where the judge is root, privileges given up, the file system and signals confined (Landlock), the system-call
filter loaded where bubblewrap did not load it (harness/judge/sandbox.py).

`BOOTSTRAP` is the whole of the program the judge starts: `python -I -B -c BOOTSTRAP SETTINGS`.
It puts the judge's import path (given in SETTINGS, the worker's own folder first) in place of
the one isolated mode leaves, and hands over to `harness.runner.worker.main`.
"""

import ctypes
import os
import sys

BOOTSTRAP = ("import json, sys; settings = json.loads(sys.argv[1]); sys.path[:0] = settings['import_path']; "
             "from harness.runner.worker import main; main(settings)")
# The sandbox's check (harness/judge/sandbox.py Sandbox._check): confined as a worker is, it prints
# which layers are in force and exits.
CHECK = ("import json, sys; settings = json.loads(sys.argv[1]); sys.path[:0] = settings['import_path']; "
         "from harness.runner.confine import report; report(settings)")

# Syscalls no worker makes honestly: tracing or reading other processes, leaving or changing its
# namespaces and mounts, changing the clocks or the kernel. Refused with EPERM, by bubblewrap's
# filter before the interpreter starts, or here where there is no bubblewrap.
DENIED_SYSCALLS = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "open_tree", "move_mount", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "bpf", "userfaultfd", "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "syslog", "quotactl",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm", "personality",
)

# Syscalls that change another process's limits or scheduling, which the kernel allows between
# processes of one uid (neither ptrace's check nor Landlock's scopes): refused with EPERM where
# they name another process, a process's own (pid 0) allowed. A template's children share their
# template's uid and pid namespace, and what the template holds each later child inherits. Each
# rule refuses its syscall where every condition (argument, comparison, value) holds. A worker
# bubblewrap started has a pid namespace of its own, in which no pid names another's (nor does a
# uid, for PRIO_USER and IOPRIO_WHO_USER): its filter leaves these out, so that its own pid named
# (psutil's nice and affinity) or a thread's stays allowed.
_PRIO_USER, _IOPRIO_WHO_USER = 2, 3
OTHERS_PROCESSES = (
    ("prlimit64", ((0, "NE", 0), (2, "NE", 0))),  # a new limit, for another process
    ("setpriority", ((1, "NE", 0),)), ("setpriority", ((0, "EQ", _PRIO_USER),)),
    ("ioprio_set", ((1, "NE", 0),)), ("ioprio_set", ((0, "EQ", _IOPRIO_WHO_USER),)),
    *((name, ((0, "NE", 0),)) for name in ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")),
)

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
LINUX_CAPABILITY_VERSION_3 = 0x20080522
HIGHEST_CAPABILITY = 63

# Landlock (linux/landlock.h)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_READ_ONLY = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read file, read dir
_TRUNCATE = 1 << 14  # from ABI 3
# The rights a rule on a file (not a folder) may carry: execute, write, read, truncate, ioctl.
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | _TRUNCATE | (1 << 15)
_ALL_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1, 2


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none."""
    if not sys.platform.startswith("linux"):
        return 0
    version = _libc().syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(version, 0)


def _landlock(writable: list[str], unshrinkable: list[str]) -> str | None:
    """Read and execute anywhere, write only beneath `writable` and `unshrinkable`, and from ABI 3
    shrink or empty no file beneath `unshrinkable`; from ABI 6, no signal to and no abstract socket
    of a process outside this one's domain. Returns what was refused."""
    abi = landlock_abi()
    if abi == 0:
        return "Landlock (not in this kernel)"
    handled = _ALL_BY_ABI.get(abi, (1 << 16) - 1)
    libc = _libc()
    attributes = _RulesetAttr(handled, 0, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attributes), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return f"Landlock (create_ruleset: {os.strerror(ctypes.get_errno())})"
    try:
        rules = [("/", _READ_ONLY), *((path, handled) for path in writable),
                 *((path, handled & ~_TRUNCATE) for path in unshrinkable)]
        for path, access in rules:
            try:
                descriptor = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    access &= _FILE_RIGHTS
                rule = _PathBeneath(access & handled, descriptor)
                if libc.syscall(_SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return f"Landlock (add_rule {path}: {os.strerror(ctypes.get_errno())})"
            finally:
                os.close(descriptor)
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
            return f"Landlock (restrict_self: {os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return None


def syscall_filter(others_in_sight: bool = True):
    """The filter of DENIED_SYSCALLS, and OTHERS_PROCESSES where processes not the worker's are in
    its pid namespace (`others_in_sight`), through libseccomp (pyseccomp); None where either is
    missing."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError):  # the binding, or the library it loads, is missing
        return None
    import errno

    denied = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    rules = [(name, ()) for name in DENIED_SYSCALLS] + (list(OTHERS_PROCESSES) if others_in_sight else [])
    for name, conditions in rules:
        try:
            denied.add_rule(pyseccomp.ERRNO(errno.EPERM), name,
                            *(pyseccomp.Arg(index, getattr(pyseccomp, comparison), value) for index, comparison, value in conditions))
        except Exception:  # a name this kernel's table lacks
            continue
    return denied


def _seccomp() -> str | None:
    """The filter loaded here, where bubblewrap did not load it before the interpreter started (a
    template's child, or no bubblewrap: others' processes in sight either way)."""
    denied = syscall_filter()
    if denied is None:
        return "seccomp (no libseccomp binding)"
    denied.load()
    return None


def _change_user(uid: int, gid: int) -> list[str]:
    """The unprivileged user and group, no supplementary group: the judge is root (or changed from
    root to `uid`, harness/judge/judge_user.py), and bubblewrap left this process the two
    capabilities this takes (changing the uid from 0 clears them)."""
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as error:
        return [f"the worker's user ({error})"]
    return []


def _give_up_privileges() -> list[str]:
    """No capability, and no way to gain one (no_new_privs: no exec of a setuid or file-capability
    file gains any). The bounding set is emptied only where this process holds CAP_SETPCAP, which
    under bubblewrap it does not (its CapBnd stays as bubblewrap left it); no_new_privs holds there."""
    libc, refused = _libc(), []
    for capability in range(HIGHEST_CAPABILITY + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # fails harmlessly for numbers the kernel lacks
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    no_capabilities = (ctypes.c_uint32 * 6)()
    for what, call in (("prctl(PR_SET_NO_NEW_PRIVS)", lambda: libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)),
                       ("capset", lambda: libc.capset(header, no_capabilities))):
        if call() != 0:
            refused.append(f"{what} ({os.strerror(ctypes.get_errno())})")
    return refused


def settle(settings: dict) -> list[str]:
    """Every descriptor closed but the judge's socket, the log (stdout and stderr made the log)
    and those `kept_fds` names (a folder's eval's POPCORN_FD), the user changed where the judge
    is root, and every capability given up: a worker's first steps, and all of a template's
    (harness/runner/template.py), which must keep the system calls and the file system its
    children confine themselves with. Returns what the system refused."""
    keep = {0, 1, 2, settings["socket"], settings["log"], *settings.get("kept_fds", ())}
    for descriptor in map(int, os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else ():
        if descriptor not in keep:
            try:
                os.close(descriptor)
            except OSError:
                pass
    os.dup2(settings["log"], 1)
    os.dup2(settings["log"], 2)
    if not sys.platform.startswith("linux"):
        return ["every layer (not Linux)"]
    refused = _change_user(*settings["user"]) if settings.get("user") is not None else []
    return refused + _give_up_privileges()


def confine(settings: dict) -> list[str]:
    """Everything above, in order; returns what the system refused, for the worker to print."""
    refused = settle(settings)
    if not sys.platform.startswith("linux"):
        return refused
    # The calibration partner, not dumpable: where a worker shares its pid namespace (no
    # bubblewrap), its /proc files and memory stay closed to it even as the same user.
    if settings["echo"] and _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        refused.append(f"prctl(PR_SET_DUMPABLE) for the partner ({os.strerror(ctypes.get_errno())})")
    off = set(settings["layers_off"])
    for step in (None if "landlock" in off else lambda: _landlock(settings["writable"], settings["unshrinkable"]),
                 None if settings["seccomp_loaded"] or "seccomp" in off else _seccomp):
        if step is not None:
            problem = step()
            if problem:
                refused.append(problem)
    return refused


def _host_uid() -> int:
    """This process's uid outside every user namespace (/proc/self/uid_map: inside, outside, count)."""
    uid = os.getuid()
    try:
        for line in open("/proc/self/uid_map"):
            inside, outside, count = map(int, line.split())
            if inside <= uid < inside + count:
                return outside + uid - inside
    except (OSError, ValueError):
        pass
    return uid


def _reachable(path: str) -> bool:
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(0.5)
        try:
            client.connect(path)
            return True
        except OSError:
            return False


def report(settings: dict, confined=dict) -> None:
    """Confined, print what is in force, as one JSON line: the user, capabilities, no_new_privs,
    the seccomp mode (/proc/self/status), whether Landlock's ruleset was enforced, and which of
    the host's listening sockets (`sockets`, named by the judge) it reached; and what `confined`,
    called once confined, returns (a template's child: whether it made its device's context)."""
    import json

    refused = confine(settings)
    status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
    print(json.dumps({**confined(), "uid": os.getuid(), "gid": os.getgid(), "host_uid": _host_uid(), "refused": refused,
                      "capabilities": int(status["CapEff"], 16) | int(status["CapPrm"], 16) | int(status.get("CapAmb", "0"), 16),
                      "no_new_privs": status.get("NoNewPrivs", "0").strip() == "1",
                      "seccomp": status.get("Seccomp", "0").strip() == "2",
                      "sockets_reached": [path for path in settings.get("sockets", ()) if _reachable(path)],
                      "landlock": "landlock" not in settings["layers_off"] and not any(
                          problem.startswith("Landlock") for problem in refused) and landlock_abi() > 0}), flush=True)
