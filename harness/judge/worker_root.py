"""What a sandboxed worker's file system holds: nothing but what it needs, as bubblewrap's
arguments (harness/judge/sandbox.py).

The root is a fresh tmpfs of bubblewrap's holding, read-only but for the worker's own folder,
its /tmp and its /dev/shm:

- `/usr` (with the host's `/bin`, `/lib`, `/lib64`, `/sbin` links or folders): the system's
  libraries and the C/C++ toolchain (compiler, assembler, linker, headers) that torch.compile's
  C++ backend and Triton's launchers build with;
- the interpreter's prefixes and every folder on the judge's import path, resolved through
  links (a virtual environment anywhere, /tmp included);
- the CUDA toolkit torch's extension builds use (`CUDA_HOME`: nvcc for `load_inline`), wherever it lies,
  where it holds nvcc and the runtime's headers;
- the folders of every shared library the judge has loaded (`/proc/self/maps`: the interpreter's,
  torch's, Triton's, the CUDA driver's once the judge has made its context) and of every one the
  dynamic loader's cache names (`ldconfig -p`: what a worker may load later);
- a minimal `/etc`: the loader's cache and configuration, the alternatives' links, and a `passwd`
  and `group` naming the worker's user;
- `/proc` of the worker's pid namespace, its system-wide entries read-only but the driver's
  (`proc_arguments`); `/sys` read-only;
- `/dev`: null, zero, full, random, urandom, the `/proc/self/fd` links; on a GPU the device's own
  nodes and a /dev/shm of its own holding the judge's CUDA IPC files (harness/judge/worker_dev_shm.py),
  on a CPU a private /dev/shm.

A listening socket's file in a bound folder is covered with /dev/null: a read-only mount does
not refuse `connect()`, and neither the network namespace nor Landlock covers named sockets. The
kit's `results/` (the store and its export: every judged file's source, verdict and figures) is
covered with an empty read-only tmpfs: the kit's folder is on the import path, its records are
no worker's to read.
"""

import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.shared.paths import RESULTS_DIR

SYSTEM_LINKS = ("/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin")
DEVICES = ("null", "zero", "full", "random", "urandom")
GPU_SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
# /etc/alternatives: the links through which Debian's packages reach the version chosen among
# those installed (/usr/bin/awk; NVIDIA's CUDA packages' /usr/local/cuda, and so nvcc for
# torch's load_inline); links alone, no secret.
ETC_FILES = ("alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf")
# Folders of the judge's inside a bound folder that no worker reads: the kit's records.
PRIVATE_FOLDERS = (str(RESULTS_DIR),)
# The worker's home, temporary files and caches, and its user's name in its /etc/passwd.
WORKER_NAME = "worker"


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths) -> list[str]:
    """The paths that no other of them holds, sorted."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(_within(path, outer) for outer in kept):
            kept.append(path)
    return kept


def _mapped_library_folders() -> set[str]:
    folders = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/"):
                folders.add(os.path.dirname(fields[5].rstrip("\n").removesuffix(" (deleted)")))
    return folders


@functools.cache
def _loader_cache_folders() -> frozenset[str]:
    """The folders of the libraries the dynamic loader's cache names."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(os.path.dirname(match) for match in re.findall(r"=> (/\S+)", listing))


# What a folder holds to be bound as the CUDA toolkit: nvcc, and the runtime's header torch's
# extension builds compile against.
TOOLKIT_FILES = (("bin", "nvcc"), ("include", "cuda_runtime.h"))


def _cuda_toolkit() -> list[str]:
    """The CUDA toolkit torch's extension builds compile with (torch.utils.cpp_extension's
    CUDA_HOME: load_inline's nvcc and headers), wherever it lies (/opt included); only a folder
    laid out as one (`TOOLKIT_FILES`) and not the root itself. Without CUDA_HOME set, torch takes
    the folder above the first nvcc on PATH: a link in ~/bin names a whole home, its keys and
    tokens beside nvcc, which a worker of the home's owner could read and print."""
    if "torch" not in sys.modules:
        return []
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # a torch without its extension builder: nothing of it to bind
        return []
    if not CUDA_HOME or os.path.realpath(CUDA_HOME) == "/" or \
            not all(os.path.isfile(os.path.join(CUDA_HOME, *parts)) for parts in TOOLKIT_FILES):
        return []
    return [CUDA_HOME]


def read_only_folders(import_path: list[str]) -> list[str]:
    """Every folder bound read-only, outermost first, each existing and resolved through links.
    None that holds the judge's temporary folder (a script's folder of /tmp on the import path):
    the runs there, other candidates' among them, stay out of sight; the worker's /tmp is its own."""
    wanted = ["/usr", sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              *import_path, *_mapped_library_folders(), *_loader_cache_folders(), *_cuda_toolkit()]
    resolved = {os.path.realpath(path) for path in wanted if path and os.path.isabs(path)}
    runs = os.path.realpath(tempfile.gettempdir())
    return [path for path in _outermost(resolved - {folder for folder in resolved if _within(runs, folder)})
            if os.path.isdir(path)]


def _needed(import_path: list[str]) -> list[tuple[str, str, int]]:
    """(bound folder, path relative to it, access) for what a worker reads of its root: the
    interpreter's prefixes and the import path's folders listed and crossed, the interpreter
    executed; each within the folder of `read_only_folders` that binds it."""
    bound = read_only_folders(import_path)
    wanted = [(path, os.R_OK | os.X_OK) for path in (sys.prefix, sys.base_prefix, *import_path)]
    wanted.append((sys.executable, os.X_OK))
    needed = []
    for path, access in wanted:
        resolved = os.path.realpath(path)
        folder = next((folder for folder in bound if _within(resolved, folder)), None)
        if folder is not None and os.path.exists(resolved):
            needed.append((folder, os.path.relpath(resolved, folder), access))
    return needed


def unreadable_by(uid: int, gid: int, import_path: list[str]) -> list[str]:
    """What of `_needed` a process of `uid` and `gid`, with no supplementary group and no
    capability, cannot list, cross or execute: tried by the kernel's own checks (modes, ACLs) in
    a child changed to that user, from each bound folder down, for above them the worker's root
    holds folders anyone may cross (`open_parents`). Empty where the trial cannot be made."""
    needed = _needed(import_path)
    folders = {folder: os.open(folder, os.O_PATH | os.O_DIRECTORY) for folder in {folder for folder, _, _ in needed}}
    reading, writing = os.pipe()
    try:
        child = os.fork()
        if child == 0:
            closed = []
            try:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)  # from root without PR_SET_KEEPCAPS: every capability cleared
                for folder, relative, access in needed:
                    if not os.access(relative, access, dir_fd=folders[folder]):  # the real ids: the child's own
                        closed.append(os.path.join(folder, relative) if relative != "." else folder)
                os.write(writing, json.dumps(closed).encode())
            finally:
                os._exit(0)
        os.close(writing)
        writing = None
        with os.fdopen(reading, "rb") as report:
            reading = None
            text = report.read()
        os.waitpid(child, 0)
    finally:
        for descriptor in (reading, writing, *folders.values()):
            if descriptor is not None:
                os.close(descriptor)
    try:
        return [os.path.normpath(path) for path in json.loads(text)]
    except ValueError:  # the child could not change its user: drop_root names that itself
        return []


def _system_links() -> list[str]:
    arguments = []
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            arguments += ["--ro-bind", path, path]
    return arguments


def listening_sockets() -> set[str]:
    """The files of the named Unix sockets listening in the judge's network namespace
    (/proc/net/unix: a path in its last column; an abstract one starts with `@`). A walk of the
    bound folders for socket files takes seconds; a socket file nothing listens on refuses
    `connect()` anyway."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {fields[7] for fields in map(str.split, lines) if len(fields) >= 8 and fields[7].startswith("/")}


def host_sockets(folders: list[str]) -> list[str]:
    """The listening sockets' files inside the bound folders."""
    return sorted(path for path in listening_sockets() if any(_within(path, folder) for folder in folders)
                  and os.path.exists(path))


def write_etc(folder: Path, uid: int, gid: int) -> None:
    """The worker's /etc/passwd and /etc/group, naming its user and group alone (and root, the
    owner of every file it reads)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "passwd").write_text(f"root:x:0:0::/nonexistent:/usr/sbin/nologin\n"
                                   f"{WORKER_NAME}:x:{uid}:{gid}::/tmp:/usr/sbin/nologin\n")
    (folder / "group").write_text(f"root:x:0:\n{WORKER_NAME}:x:{gid}:\n")


def etc_arguments(generated: Path) -> list[str]:
    arguments = ["--dir", "/etc"]
    for name in ETC_FILES:
        path = os.path.join("/etc", name)
        if os.path.exists(path):
            arguments += ["--ro-bind", path, path]
    return arguments + ["--ro-bind", str(generated / "passwd"), "/etc/passwd",
                        "--ro-bind", str(generated / "group"), "/etc/group"]


@functools.cache
def _gpu_minors() -> list[int] | None:
    """The device minors (/dev/nvidia<N>) of the GPUs the judge's CUDA sees, from their PCI
    addresses; None where they cannot be told (every GPU's node is bound then). Once a process:
    the GPUs its CUDA sees are fixed when CUDA starts, and every worker's start would read them."""
    try:
        import torch

        minors = []
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            address = f"{properties.pci_domain_id:08x}:{properties.pci_bus_id:02x}:{properties.pci_device_id:02x}.0"
            information = Path("/proc/driver/nvidia/gpus") / address / "information"
            if not information.exists():
                information = Path("/proc/driver/nvidia/gpus") / address[4:] / "information"
            minors.append(int(re.search(r"Device Minor:\s*(\d+)", information.read_text()).group(1)))
        return minors
    except (AttributeError, OSError, RuntimeError, ImportError):
        return None


def proc_arguments() -> list[str]:
    """A /proc of the worker's pid namespace whose system-wide entries are read-only, all but the
    driver's (the CUDA driver may write there): its own processes' files stay writable. A GPU
    worker is uid 0 on the host under a root judge, and Landlock lets it write /proc, where files
    such as /proc/sys/*, /proc/sysrq-trigger and /proc/irq/*/smp_affinity obey a write of root's."""
    arguments = ["--proc", "/proc"]
    for name in sorted(os.listdir("/proc")):
        path = os.path.join("/proc", name)
        if name.isdigit() or name == "driver" or os.path.islink(path):
            continue
        arguments += ["--ro-bind", path, path]
    return arguments


def private_tmpfs(path: str, size_bytes: int | None) -> list[str]:
    """A fresh tmpfs anyone inside may write, as the host's /tmp and /dev/shm (1777), of at most
    `size_bytes` where given."""
    return ["--perms", "1777"] + (["--size", str(size_bytes)] if size_bytes else []) + ["--tmpfs", path]


def device_arguments(cuda: bool, dev_shm: list[str]) -> list[str]:
    """The worker's /dev: the harmless nodes, on a GPU its own nodes, and `dev_shm`, the
    arguments of its /dev/shm (a private tmpfs on a CPU, harness/judge/worker_dev_shm.py's on a GPU)."""
    arguments = ["--tmpfs", "/dev"]
    for name in DEVICES:
        arguments += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        arguments += ["--symlink", f"/proc/self/fd/{number}", f"/dev/{name}"]
    arguments += ["--symlink", "/proc/self/fd", "/dev/fd"]
    if not cuda:
        return arguments + dev_shm
    minors = _gpu_minors()
    nodes = [f"/dev/nvidia{minor}" for minor in minors] if minors is not None else sorted(
        str(path) for path in Path("/dev").glob("nvidia*") if re.fullmatch(r"nvidia\d+", path.name))
    nodes += [f"/dev/{name}" for name in GPU_SHARED_NODES] + ["/dev/nvidia-caps"]
    for node in nodes:
        if os.path.exists(node):
            arguments += ["--dev-bind", node, node]
    return arguments + dev_shm


def open_parents(path: str) -> list[str]:
    """The folders above `path` made in the root as folders anyone may cross: bubblewrap would copy
    the host's modes (a `/root` of 0700 under a virtual environment), closed to the worker's user."""
    arguments = []
    for parent in reversed(Path(path).parents[:-1]):
        arguments += ["--dir", str(parent)]
    return arguments


def root_arguments(import_path: list[str], generated_etc: Path) -> list[str]:
    """bubblewrap's arguments for the read-only part of the root, listening sockets covered."""
    folders = read_only_folders(import_path)
    arguments = []
    for folder in folders:
        arguments += open_parents(folder) + ["--ro-bind", folder, folder]
    for path in host_sockets(folders):
        arguments += ["--ro-bind", "/dev/null", path]
    for path in map(os.path.realpath, PRIVATE_FOLDERS):
        if os.path.isdir(path) and any(_within(path, folder) for folder in folders):
            arguments += ["--tmpfs", path, "--remount-ro", path]
    return arguments + _system_links() + etc_arguments(generated_etc)
