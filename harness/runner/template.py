"""A template worker: a sandboxed process that has imported what every worker imports (torch
first; on a GPU it makes no CUDA call) and forks, on the judge's request, one worker per request
(harness/judge/templates.py). Each child makes its own walls before it reads anything but the
judge's go: a session of its own; every descriptor but its own closed; a user, mount, IPC and
network namespace of its own (its own uid and gid mapped one to one: a GPU worker keeps the
judge's uid, which CUDA IPC needs); a tmpfs of its own over the pool's folders (no sibling's folder or handed-over files
in sight), over /tmp (the read-only folders bound under it bound again) and over /dev/shm (on a
GPU its folder of the judge's /dev/shm with the judge's IPC files); then the worker's own
confinement (harness/runner/confine.py: no capability, no_new_privs, the seccomp filter,
Landlock, whose scopes keep its signals and abstract sockets to its own domain), and the
worker's serve loop (harness/runner/worker.py), exactly as a worker started afresh.

The template itself runs under bubblewrap as a worker does, as the workers' user, with no
capability, but with neither the seccomp filter nor Landlock (its children need unshare and mount)
and not dumpable (its memory and environment closed to its children, which share its uid; their
filter refuses them its limits and scheduling, which each later child inherits:
harness/runner/confine.py `OTHERS_PROCESSES`). It runs no candidate code and reads nothing but the
judge's requests: one message each on its control socket (a fork request: the child's settings, its
socket and its log). It answers each with the child's pid in its namespace, and reports each
child's exit status once reaped. It runs one thread when it forks (a library's thread pool ended by
its fork handlers at a first fork of its own), so no child inherits a lock that a vanished thread
held.

`PROGRAM` is the whole of the program the judge starts: `python -I -B -c PROGRAM SETTINGS`.
"""

import atexit
import contextlib
import ctypes
import json
import os
import select
import signal
import socket
import sys
import traceback

from harness.runner import confine

PROGRAM = ("import json, sys; settings = json.loads(sys.argv[1]); sys.path[:0] = settings['import_path']; "
           "from harness.runner.template import main; main(settings)")
# What a child waits for before its first step: the judge has put it in its cgroup.
GO = b"\x01"
MESSAGE_BYTES = 1 << 20

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_PR_SET_DUMPABLE, _PR_SET_NAME = 4, 15
# The processes' names (/proc/PID/comm), by which `ps` tells them apart: a child's command line is its template's.
NAMES = {"template": "nvfp4-template", "worker": "nvfp4-worker", "partner": "nvfp4-partner"}
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


def _name(kind: str) -> None:
    confine._libc().prctl(_PR_SET_NAME, NAMES[kind].encode(), 0, 0, 0)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def main(settings: dict) -> None:
    """Settle as a worker does (no Landlock, no filter), import, then fork on request until the
    judge closes the control socket."""
    for what in confine.settle(settings):
        print(f"template: the system refused {what}", file=sys.stderr, flush=True)
    if confine._libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        print("template: the system refused prctl(PR_SET_DUMPABLE)", file=sys.stderr, flush=True)
    _name("template")
    control = socket.socket(fileno=settings["socket"])
    import harness.runner.calls, harness.runner.echo, harness.runner.files, harness.shared.cuda_ipc  # noqa: F401  (torch with them)
    confine.syscall_filter()  # the filter's binding, which each child loads
    if _threads() > 1:  # a thread pool of a library's (OpenBLAS's): its fork handlers end it
        first = os.fork()
        if first == 0:
            os._exit(0)
        os.waitpid(first, 0)
    # Woken by a child's end as by a request, never by a clock: an idle template takes no time
    # from the cores a timed case runs on.
    ended_read, ended_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(ended_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    import torch

    # A CUDA context made before a fork is unusable in the child: the judge refuses a template that has one.
    _send(control, {"ready": True, "threads": _threads(), "cuda": torch.cuda.is_initialized()})
    children: dict[int, int] = {}  # pid -> the judge's id of its request
    while True:
        _reap(control, children)
        if control not in select.select([control, ended_read], [], [])[0]:
            with contextlib.suppress(BlockingIOError):
                os.read(ended_read, 4096)
            continue
        try:
            data, descriptors, _, _ = socket.recv_fds(control, MESSAGE_BYTES, 2)
        except OSError:
            return
        if not data:
            return  # the judge closed the socket: its children end with the namespace
        request = json.loads(data)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _child({**request["settings"], "template_folder": settings["folder"]}, *descriptors)
        for descriptor in descriptors:
            os.close(descriptor)
        children[pid] = request["id"]
        _send(control, {"forked": pid, "id": request["id"]})


def _send(control: socket.socket, message: dict) -> None:
    control.send(json.dumps(message).encode())


def _reap(control: socket.socket, children: dict[int, int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            _send(control, {"ended": children.pop(pid), "status": os.waitstatus_to_exitcode(status)})


def _child(settings: dict, socket_fd: int, log_fd: int) -> None:
    """A worker: walls of its own, then the worker's serve loop (or the sandbox's check); never returns."""
    code = 1
    try:
        settings = {**settings, "socket": socket_fd, "log": log_fd}
        # A session and process group of its own, as bubblewrap's --new-session gives a fresh
        # worker: its scheduler's autogroup, whose nice a GPU worker may write (/proc/self/autogroup), its own.
        os.setsid()
        confine.settle({**settings, "user": None})  # the control socket closed first; no capability yet to give up
        _name("partner" if settings["echo"] else "worker")
        go = socket.socket(fileno=os.dup(socket_fd))
        if go.recv(1) != GO:
            os._exit(1)
        go.close()
        _walls(settings)
        os.environ.clear()
        os.environ.update(settings["environment"])
        sys.modules["__main__"].settings = settings  # where a fresh worker's bootstrap holds its own
        if settings.get("check"):
            confine.report(settings, lambda: {"device_context": _device_context(settings["device"])})
        else:
            from harness.runner import worker

            worker.begin(settings, confine.confine(settings))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _device_context(device: str) -> str:
    """`made` where this child, confined, made its device's context as a worker does first (or the
    device is the CPU), else the error: a template whose children cannot is not used."""
    if not device.startswith("cuda"):
        return "made"
    import torch

    try:
        torch.cuda.synchronize(torch.device(device))
    except Exception as error:  # noqa: BLE001 - whatever the driver raises is the answer
        return f"{type(error).__name__}: {error}"
    return "made"


def _walls(settings: dict) -> None:
    """Namespaces and mounts of its own (module docstring), or OSError: the child then ends
    before its first message, which the judge reads as a worker that did not start."""
    libc = confine._libc()
    uid, gid = os.getuid(), os.getgid()
    # Dumpable while it writes its own /proc files (its maps), not after (the end of this function).
    _check(libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")
    _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWIPC | _CLONE_NEWNET), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as mapping:
            mapping.write(text)
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    folders_root, folder = settings["folders_root"], settings["folder"]
    size = settings.get("tmp_bytes")
    handed_over = os.open(folder, os.O_PATH | os.O_CLOEXEC)  # the judge's copies, seen read-only through the template's bind
    _bind(libc, handed_over, settings["handed_over"])
    os.close(handed_over)
    _cover("/tmp", size, libc, keep=[folders_root])
    os.makedirs(folders_root, exist_ok=True)
    _tmpfs(libc, folders_root, size, 0o755)
    os.mkdir(folder, 0o700)
    if os.path.isdir(settings["template_folder"]):  # the template's own, where no cover above hid it
        _tmpfs(libc, settings["template_folder"], size, 0o700)
    if settings.get("dev_shm"):
        _own_gpu_dev_shm(libc, settings["dev_shm"])
    else:
        _tmpfs(libc, "/dev/shm", size, 0o1777)
    _loopback_up()
    # Not dumpable, as a worker started afresh is not (its user changed from root's): no sibling
    # of its pid namespace and uid writes its /proc files (a GPU worker may write under /proc),
    # its OOM score among them.
    _check(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(PR_SET_DUMPABLE)")


def _check(result: int, what: str) -> None:
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


def _tmpfs(libc, path: str, size: int | None, mode: int) -> None:
    options = f"mode={mode:o}" + (f",size={size}" if size else "")
    _check(libc.mount(b"tmpfs", path.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options.encode()), f"mount tmpfs {path}")


def _bind(libc, descriptor: int, target: str) -> None:
    """What `descriptor` (O_PATH) names bound at `target` with its mounts below: those the
    template has read-only stay read-only (their flags are locked in this namespace)."""
    _check(libc.mount(f"/proc/self/fd/{descriptor}".encode(), target.encode(), None, _MS_BIND | _MS_REC, None),
           f"bind {target}")


def _read_only_mounts() -> list[str]:
    """The mount points of this namespace whose mounts are read-only."""
    points = []
    with open("/proc/self/mountinfo") as mounts:
        for line in mounts:
            fields = line.split()
            if "ro" in fields[5].split(","):
                points.append(fields[4].encode().decode("unicode_escape"))
    return points


def _cover(path: str, size: int | None, libc, keep: list[str]) -> None:
    """A fresh tmpfs over `path`, the outermost read-only mounts below it bound again where they
    were (the root's folders bound under /tmp: a virtual environment there), but `keep`'s (covered
    apart). Nothing writable below it is bound again: the template's own folder there stays out
    of sight."""
    below = sorted(point for point in _read_only_mounts() if point.startswith(path + "/")
                   and not any(point == kept or point.startswith(kept + "/") for kept in keep))
    outermost = [point for point in below if not any(point.startswith(other + "/") for other in below)]
    held = [(point, os.open(point, os.O_PATH | os.O_CLOEXEC)) for point in outermost]
    _tmpfs(libc, path, size, 0o1777)
    for point, descriptor in held:
        os.makedirs(point, exist_ok=True)
        _bind(libc, descriptor, point)
        os.close(descriptor)


def _own_gpu_dev_shm(libc, dev_shm: dict) -> None:
    """The worker's folder of the judge's /dev/shm (which the template's /dev/shm is) over
    /dev/shm, the judge's IPC files bound into it read-write (harness/judge/worker_dev_shm.py)."""
    judges = [(name, os.open(os.path.join("/dev/shm", name), os.O_PATH | os.O_CLOEXEC)) for name in dev_shm["judges"]]
    own = os.open(os.path.join("/dev/shm", dev_shm["folder"]), os.O_PATH | os.O_CLOEXEC)
    _bind(libc, own, "/dev/shm")
    os.close(own)
    for name, descriptor in judges:
        target = os.path.join("/dev/shm", name)
        with open(target, "a"):
            pass
        _bind(libc, descriptor, target)
        os.close(descriptor)


def _loopback_up() -> None:
    """The network namespace's loopback up, as bubblewrap leaves a worker's."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        flags = struct.unpack("16sH", fcntl.ioctl(probe, _SIOCGIFFLAGS, struct.pack("16sH", b"lo", 0))[:18])[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | _IFF_UP))
