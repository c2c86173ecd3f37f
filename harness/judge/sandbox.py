"""How a worker process is started: sandboxed before its first instruction.

Every process that runs submission code is a fresh interpreter in isolated mode (no working
folder, user site or environment variable on its import path; the import path is the judge's,
given explicitly, behind the worker's own folder), with no descriptor but its end of the judge's
socket and its log, started under these layers, each where the system allows it:

| layer | what it closes |
|---|---|
| bubblewrap: a mount namespace in which `/` is read-only, `/tmp` (and the judge's `TMPDIR` elsewhere) a fresh tmpfs, and only the worker's own folder writable | planting modules where the judge or a later run imports from, rewriting `results/`, the judge's files or its logs |
| bubblewrap: network, IPC, UTS and pid namespaces; `--die-with-parent`, a new session, no capability | reaching anything over a network or an abstract socket, signalling or tracing the judge, the partner or other workers (they are not in its pid namespace), outliving the judge |
| a cgroup of its own (v2) | the whole tree frozen at once while the judge calibrates (nothing inside can wake it), and killed at once when the case ends, whatever its pids do |
| seccomp (libseccomp, through bubblewrap where it runs) | ptrace, process_vm_*, namespaces and mounts, clock and kernel changes, even where the layers above are missing |
| Landlock (applied by the worker before it imports anything but the standard library: harness/runner/confine.py) | writing outside its folder, /tmp and the devices; signals and abstract sockets outside its own domain |

A layer the system refuses is reported once per run (`refused`) and the others still hold; the
threat table in docs/judge.md says which class each remaining layer still closes.
"""

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.runner import confine

# A file a worker writes past this size gets SIGXFSZ: its log and its folder stay bounded.
MAX_FILE_BYTES = 1 << 30
BWRAP_ENV = "NVFP4_BWRAP"  # a bubblewrap binary elsewhere than on PATH
# Layers switched off by hand, comma-separated (bubblewrap, seccomp, cgroup, landlock): to find
# which layer a system or a driver does not bear. Every layer switched off is reported as refused.
LAYERS_OFF_ENV = "NVFP4_SANDBOX_OFF"
LAYERS = ("bubblewrap", "seccomp", "cgroup", "landlock")


def layers_off() -> set[str]:
    off = {name.strip() for name in os.environ.get(LAYERS_OFF_ENV, "").split(",") if name.strip()}
    unknown = off - set(LAYERS)
    if unknown:
        raise ValueError(f"{LAYERS_OFF_ENV} names no layer {sorted(unknown)}: the layers are {', '.join(LAYERS)}")
    return off


def _bwrap() -> str | None:
    if "bubblewrap" in layers_off():
        return None
    return os.environ.get(BWRAP_ENV) or shutil.which("bwrap")


def _seccomp_program() -> int | None:
    """A descriptor holding the compiled filter (BPF), for bubblewrap's --seccomp; None without libseccomp."""
    denied = None if "seccomp" in layers_off() else confine.syscall_filter()
    if denied is None:
        return None
    with tempfile.TemporaryFile() as program:
        denied.export_bpf(program)
        program.seek(0)
        return os.dup(program.fileno())


def _cgroup_root() -> Path | None:
    """A new cgroup (v2) of the judge's, holding no process, under which each worker gets one; None
    where cgroup v2 is not mounted or not writable, or lacks freeze and kill."""
    if "cgroup" in layers_off():
        return None
    with contextlib.suppress(OSError, StopIteration):
        mount = next(Path(line.split()[1]) for line in Path("/proc/self/mounts").read_text().splitlines()
                     if line.split()[2] == "cgroup2")
        root = Path(tempfile.mkdtemp(prefix=f"nvfp4-judge-{os.getpid()}-", dir=mount))
        if (root / "cgroup.freeze").exists() and (root / "cgroup.kill").exists():
            return root
        root.rmdir()
    return None


class WorkerCgroup:
    """A cgroup of the worker's own under the judge's `root`, or nothing where there is none."""

    def __init__(self, root: Path | None, name: str):
        self.path = None
        if root is not None:
            with contextlib.suppress(OSError):
                (root / name).mkdir()
                self.path = root / name

    def enter(self) -> None:
        """Called in the new process before it executes anything: it and all it starts belong here."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text("0")

    def _write(self, name: str, value: str) -> bool:
        if self.path is None:
            return False
        try:
            (self.path / name).write_text(value)
            return True
        except OSError:
            return False

    def freeze(self, frozen: bool) -> bool:
        """Asks the kernel to stop (or let go) every process in it at once; True where it took the
        request. A stop completes asynchronously (a process inside a system call stops when it
        returns): `frozen` says when it has."""
        return self._write("cgroup.freeze", "1" if frozen else "0")

    @property
    def frozen(self) -> bool:
        if self.path is None:
            return False
        try:
            return "frozen 1" in (self.path / "cgroup.events").read_text()
        except OSError:
            return False

    def kill(self) -> None:
        self._write("cgroup.kill", "1")

    def remove(self) -> None:
        """Everything in it killed, then the cgroup removed once the kernel has emptied it."""
        if self.path is None:
            return
        self.kill()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if "populated 0" in (self.path / "cgroup.events").read_text():
                    break
            time.sleep(0.005)
        with contextlib.suppress(OSError):
            self.path.rmdir()
        self.path = None


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _judges_temporary_folder() -> str | None:
    """The folder the judge keeps its runs in (`TMPDIR`) where it lies outside /tmp, which the
    sandbox hides anyway: hidden too, unless it holds the interpreter (a `TMPDIR` of the user's
    home with a virtual environment in it), which a tmpfs over it would take away. The judge's
    import path under it is bound back, as under /tmp."""
    folder = os.path.realpath(tempfile.gettempdir())
    if _within(folder, "/tmp") or folder == "/":
        return None
    needed = [sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))]
    if any(_within(os.path.realpath(path), folder) for path in needed):
        return None
    return folder


def _sizes_a_tmpfs(bwrap: str) -> bool:
    """Whether this bubblewrap takes --size (0.7 and later)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return "--size" in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    return False


@dataclasses.dataclass
class Launch:
    """A worker's command line and what its process must do before it executes it."""

    argv: list[str]
    pass_fds: tuple[int, ...]
    cgroup: WorkerCgroup
    seccomp_fd: int | None

    def preexec(self) -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        self.cgroup.enter()

    def close(self) -> None:
        if self.seccomp_fd is not None:
            os.close(self.seccomp_fd)
            self.seccomp_fd = None


def _layers_report(bwrap: str | None, seccomp: bool, cgroup: bool) -> list[str]:
    refused = []
    if bwrap is None:
        refused.append("no bubblewrap (`bwrap`; `make setup` installs it with apt): workers share the judge's "
                       "file system, network and pid namespace (Landlock and seccomp still apply where present)")
    if not seccomp:
        refused.append("no libseccomp binding (pyseccomp): no system-call filter")
    if not cgroup:
        refused.append("cgroup v2 not writable: a worker's tree is paused and ended process by process")
    if "landlock" in layers_off() or not confine.landlock_abi():
        refused.append("no Landlock (not in this kernel, or switched off): the file-system layer rests on bubblewrap alone")
    return refused


class Sandbox:
    """The launches of one judge's workers; `refused` lists the layers this system lacks."""

    def __init__(self, device: str, tmp_bytes: int | None = None):
        """`tmp_bytes`: the most the worker's own /tmp (a tmpfs: memory that no process's resident
        size counts) may hold, where a memory limit is kept (the service's); unbounded without."""
        self._device = device
        self._cuda = device.startswith("cuda")
        self._bwrap = _bwrap()
        self._has_seccomp = "seccomp" not in layers_off() and confine.syscall_filter() is not None
        self._cgroup_root = _cgroup_root()
        self.refused = _layers_report(self._bwrap, self._has_seccomp, self._cgroup_root is not None)
        self._tmp_bytes = tmp_bytes if tmp_bytes and self._bwrap and _sizes_a_tmpfs(self._bwrap) else None
        if tmp_bytes and self._bwrap and self._tmp_bytes is None:
            self.refused.append("bubblewrap before 0.7 (no --size): the worker's /tmp is not held to the memory limit")
        self._count = 0

    def launch(self, folder: Path, socket_fd: int, log_fd: int, echo: bool, rng_seed: int) -> Launch:
        """The command that starts a worker whose own writable folder is `folder`, talking on
        `socket_fd` (its number in the new process too) and printing to `log_fd`."""
        self._count += 1
        cgroup = WorkerCgroup(self._cgroup_root, f"worker-{self._count}")
        import_path = [entry for entry in sys.path if entry and Path(entry).is_absolute()]
        settings = {"import_path": [str(folder), *import_path], "folder": str(folder), "socket": socket_fd,
                    "log": log_fd, "device": self._device, "rng_seed": rng_seed, "echo": echo,
                    # The CUDA driver writes under /dev and /proc (Landlock's rules otherwise make
                    # cudaGetDeviceCount fail: OS call failed), and opens a file under /proc with
                    # O_TRUNC; a CPU's worker writes /dev/null alone. /tmp is the worker's own only
                    # inside bubblewrap.
                    "writable": [str(folder)] + (["/tmp"] if self._bwrap else []) + (["/proc"] if self._cuda else []),
                    # Under /dev, written, never shrunk: CUDA IPC needs the driver's files in
                    # /dev/shm shared with the judge, and one cut short under a process that maps
                    # it kills that process (SIGBUS).
                    "unshrinkable": ["/dev"] if self._cuda else ["/dev/null"],
                    "seccomp_loaded": self._bwrap is not None and self._has_seccomp,
                    "layers_off": sorted(layers_off())}
        python = [sys.executable, "-I", "-B", "-c", confine.BOOTSTRAP, json.dumps(settings)]
        if self._bwrap is None:
            return Launch(python, (socket_fd, log_fd), cgroup, None)
        seccomp_fd = None
        # /proc/sys read-only: the worker keeps uid 0 (CUDA IPC needs the judge's user), and a
        # file there (kernel.core_pattern) would run a program of its choosing outside every layer.
        # A GPU's worker gets its judge's /dev (the host's device nodes, and the judge's own
        # /dev/shm, which CUDA IPC needs shared: harness/judge/dev_shm.py); a CPU's a minimal one of
        # its own.
        devices = ["--dev-bind", "/dev", "/dev"] if self._cuda else ["--dev", "/dev"]
        prefix = [self._bwrap, "--ro-bind", "/", "/", *devices, "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
        if os.path.exists("/proc/sysrq-trigger"):
            prefix += ["--ro-bind", "/proc/sysrq-trigger", "/proc/sysrq-trigger"]
        prefix += (["--size", str(self._tmp_bytes)] if self._tmp_bytes else []) + ["--tmpfs", "/tmp"]
        hidden = ["/tmp"]
        judges_tmp = _judges_temporary_folder()
        if judges_tmp is not None:  # the judge's runs and candidates, out of sight as under /tmp
            prefix += ["--tmpfs", judges_tmp]
            hidden.append(judges_tmp)
        # What the tmpfs hid that the worker needs: the judge's import path there (packages
        # unpacked into /tmp on a machine without a registry), and its own folder, the one place
        # it writes.
        for entry in import_path:
            if any(_within(entry, root) for root in hidden) and Path(entry).exists():
                prefix += ["--ro-bind", entry, entry]
        prefix += ["--bind", str(folder), str(folder), "--chdir", str(folder), "--setenv", "HOME", str(folder),
                   "--setenv", "TMPDIR", "/tmp", "--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
                   "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self._has_seccomp:
            seccomp_fd = _seccomp_program()
            prefix += ["--seccomp", str(seccomp_fd)]
        fds = (socket_fd, log_fd) + ((seccomp_fd,) if seccomp_fd is not None else ())
        return Launch(prefix + python, fds, cgroup, seccomp_fd)

    def environment(self, folder: Path) -> dict[str, str]:
        """The judge's environment, with the worker's home and temporary files in its own folder
        (bubblewrap sets them inside the sandbox). A CPU worker's OpenMP threads sleep when idle
        instead of spinning: spinning after the calls, they take the cores from the hand-over the
        judge's clock times, and on a machine of few cores an honest file's judged figure comes out
        above its own beyond the tolerance."""
        environment = {**os.environ, "HOME": str(folder), "TMPDIR": "/tmp" if self._bwrap else str(folder)}
        if not self._cuda:
            environment["OMP_WAIT_POLICY"] = "PASSIVE"
        return environment

    @property
    def has_cgroups(self) -> bool:
        return self._cgroup_root is not None

    def close(self) -> None:
        """The judge's cgroup removed (its workers' are gone by then)."""
        if self._cgroup_root is not None:
            with contextlib.suppress(OSError):
                self._cgroup_root.rmdir()
            self._cgroup_root = None
