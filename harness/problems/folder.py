"""A problem folder's task.py, utils.py and reference.py, imported side by side with the kit's own.

Beside a submission these files are the modules `task`, `utils` and `reference`, and each imports
the others by those names (`from task import input_t`, `from utils import make_match_reference`).
The judge holds several problems' files in one process, and the kit's own three at the
repository's root are already imported under the plain names. So each file is imported here under
a name of its own, and while it runs, the plain names point at its own folder's files; afterwards
they point where they pointed before.
"""

import contextlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

RUNNER_MODULES = ("task", "utils", "reference")  # in the order each may import the ones before it


@contextlib.contextmanager
def plain_names_bound_to(modules: dict[str, ModuleType]):
    saved = {name: sys.modules.get(name) for name in RUNNER_MODULES}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def import_runner_files(files: dict[str, Path], prefix: str) -> dict[str, ModuleType]:
    """{"task": module, "utils": ..., "reference": ...} from `files` (plain name -> path), each
    imported once per process as `<prefix>_<name>` with the plain names bound to its siblings."""
    modules: dict[str, ModuleType] = {}
    for name in RUNNER_MODULES:
        unique = f"{prefix}_{name}"
        module = sys.modules.get(unique)
        if module is None:
            spec = importlib.util.spec_from_file_location(unique, files[name])
            module = importlib.util.module_from_spec(spec)
            with plain_names_bound_to({**modules, name: module}):
                sys.modules[unique] = module
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[unique]
                    raise
        modules[name] = module
    return modules
