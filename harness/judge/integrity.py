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

import os
import sys
from pathlib import Path

HARNESS_ROOT = Path(__file__).resolve().parents[1]
# Where Python's start-up runs the `.pth` files it finds.
SITE_FOLDERS = ("site-packages", "dist-packages")


def watched_paths(extra: tuple[Path, ...] = ()) -> list[Path]:
    """The harness's sources, every module the judge has loaded with its cached bytecode and that
    cache's folder, every site-packages folder on its import path with the `.pth` files Python's
    start-up runs from it, and `extra` (the problem's files)."""
    paths = set(HARNESS_ROOT.rglob("*.py")) | {Path(path) for path in extra}
    for module in list(sys.modules.values()):
        for attribute in ("__file__", "__cached__"):
            path = getattr(module, attribute, None)
            if isinstance(path, str):  # some modules answer any attribute (torch.ops)
                paths.add(Path(path))
                if attribute == "__cached__":
                    # Python runs a cached .pyc whose header matches the source's time and size:
                    # a forged one, or a new one beside it, changes its folder.
                    paths.add(Path(path).parent)
    for entry in sys.path:
        folder = Path(entry or os.getcwd())
        if folder.name in SITE_FOLDERS and folder.is_dir():
            paths.add(folder)  # a file added there (a .pth) changes the folder
            paths.update(folder.glob("*.pth"))
    return sorted(paths)


def _stamp(path: Path):
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ctime_ns, status.st_size


class CodeWatch:
    """A stamp of every watched path, taken before any submission runs; `changed()` names the
    ones that differ since."""

    def __init__(self, extra: tuple[Path, ...] = ()):
        self._stamps = {path: _stamp(path) for path in watched_paths(extra)}

    def changed(self) -> list[str]:
        return [str(path) for path, stamp in self._stamps.items() if _stamp(path) != stamp]
