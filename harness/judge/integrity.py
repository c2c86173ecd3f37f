"""The code the judge runs, watched while submissions run.

A worker runs as the judge's user (CUDA IPC needs it), so it can write whatever files that user
can: the harness's own sources, the problem's reference, a `.pth` file or a module in
site-packages. The judge imports everything it uses before the first worker starts and starts no
trusted process after it, so such a write changes no code the judge runs; but it is still a
submission rewriting its judge, and the run says so and stops.

A file's change time (ctime) moves with every write, rename or change of mode and cannot be set
back without CAP_SYS_TIME, which a worker gives up (harness/runner/worker.py): a file written
and restored between two looks still shows.
"""

import contextlib
import importlib.util
import marshal
import os
import site
import sys
from pathlib import Path

HARNESS_ROOT = Path(__file__).resolve().parents[1]
# Where Python's start-up runs the `.pth` files it finds, and the modules it imports if found.
SITE_FOLDERS = ("site-packages", "dist-packages")
START_UP_HOOKS = ("sitecustomize.py", "usercustomize.py")


def watched_paths(extra: tuple[Path, ...] = ()) -> list[Path]:
    """The harness's sources, every module the judge has loaded and its cached bytecode, every
    site-packages folder on its import path with the `.pth` files Python's start-up runs from it,
    and `extra` (the problem's files)."""
    paths = set(HARNESS_ROOT.rglob("*.py")) | {Path(path) for path in extra}
    for module in list(sys.modules.values()):
        for attribute in ("__file__", "__cached__"):
            path = getattr(module, attribute, None)
            if isinstance(path, str):  # some modules answer any attribute (torch.ops)
                paths.add(Path(path))
    for entry in sys.path:
        folder = Path(entry or os.getcwd())
        # Start-up hooks a new interpreter runs (the next run's judge, its workers), watched where
        # they are missing too: one that appears is a change.
        paths.update(folder / name for name in START_UP_HOOKS)
        if folder.name in SITE_FOLDERS and folder.is_dir():
            paths.add(folder)  # a file added there (a .pth) changes the folder
            paths.update(folder.glob("*.pth"))
    for user_site in user_sites():
        paths.update([user_site, *(user_site / name for name in START_UP_HOOKS)])
        paths.update(user_site.glob("*.pth"))
    paths.add(Path(os.path.realpath(sys.executable)))
    paths.update(_mapped_files())
    return sorted(paths)


def user_sites() -> set[Path]:
    """The user site this interpreter read at its start, and the one an interpreter it starts now
    reads: a root judge that changed to its own user has a HOME of that user's
    (harness/judge/judge_user.py), whose user site its children (torch.compile's workers among
    them) run the `.pth` files of. `site.getusersitepackages` keeps its first answer, so the
    second is asked of site's own path functions with the HOME of now."""
    return {Path(site.getusersitepackages()), Path(site._get_path(site._getuserbase()))}


# Mapped files that are no code: device nodes, and the CUDA driver's shared memory in /dev/shm,
# which changes as processes use CUDA IPC (the judge's own events among them).
NOT_CODE = ("/dev/", "/proc/", "/sys/", "/memfd:")


def _mapped_files() -> set[Path]:
    """The files this process has mapped: the interpreter's shared libraries, torch's, CUDA's."""
    try:
        with open("/proc/self/maps") as maps:
            fields = [line.split(maxsplit=5) for line in maps]
        return {Path(field[5].strip()) for field in fields
                if len(field) == 6 and field[5].startswith("/") and not field[5].startswith(NOT_CODE)}
    except OSError:
        return set()


def _stamp(path: Path):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ctime_ns, status.st_size


def _harness_bytecode() -> dict[Path, tuple | None]:
    return {path: _stamp(path) for path in HARNESS_ROOT.rglob("__pycache__/*.pyc")}


def compiled_from_its_source(pyc: Path) -> bool:
    """Whether `pyc` is what this Python compiles its source to: Python runs a cached file whose
    header names the source's modification time and size, whatever code it holds. A file another
    Python's import wrote (another magic number) is that Python's to check."""
    try:
        data = pyc.read_bytes()
        source = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
        status = source.stat()
        if data[:4] != importlib.util.MAGIC_NUMBER:
            return True
        header = (int.from_bytes(data[4:8], "little"), int.from_bytes(data[8:12], "little"),
                  int.from_bytes(data[12:16], "little"))
        if header != (0, int(status.st_mtime) & 0xFFFFFFFF, status.st_size & 0xFFFFFFFF):
            return False
        return marshal.loads(data[16:]) == compile(source.read_bytes(), str(source), "exec", dont_inherit=True)
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False


class CodeWatch:
    """A stamp of every watched path, taken before any submission runs; `changed()` names the
    ones that differ since. The harness's own cached bytecode is allowed to appear or change
    (the first process that imports a module writes it) where it is its source's compiled form."""

    def __init__(self, extra: tuple[Path, ...] = ()):
        self._stamps = {path: _stamp(path) for path in watched_paths(extra)}
        self._bytecode = _harness_bytecode()

    def changed(self) -> list[str]:
        changed = [path for path, stamp in self._stamps.items() if _stamp(path) != stamp]
        changed += [path for path, stamp in _harness_bytecode().items()
                    if self._bytecode.get(path) != stamp and path not in self._stamps]
        return [str(path) for path in changed if path.suffix != ".pyc" or not compiled_from_its_source(path)]


def import_the_row_writer() -> None:
    """pandas, which a timed run's rows are appended to the CSV export with once its cases are
    over (harness/results/rows.py append_rows), imported now: a run calls this before its first worker
    starts, since the judge runs only code it loaded before a submission could write its files.
    Without pandas (the compile check's minimal environment) there is nothing to import."""
    with contextlib.suppress(ImportError):
        import pandas  # noqa: F401
