"""The folder a submission runs in, laid out as on the competition's runner.

There the eval runs in one folder holding the submission as `submission.py` and the problem's
files (task.yml's `files`): `task.py`, `utils.py` and `reference.py`. A file written from the
competition's template imports from them (`from task import input_t, output_t`). Here the same
three files are the problem's (Problem.runner_files: nvfp4_gemm's at the repository's root,
another problem's in its folder), and the folder holds one more, the kit's Hopper stand-in
(`hopper_stand_in.py`), which the kit's submission imports on compute capability 9.x only (the
leaderboard's B200 never does; lint fails a file that imports it as it loads). Nothing else: a
module that sits beside the user's file at home is not importable on the runner either.
"""

import importlib
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from harness.problems import PROBLEMS, Problem
from harness.problems import folder as problem_folder
from harness.shared.paths import REPO_ROOT

RUNNER_MODULES = frozenset(problem_folder.RUNNER_MODULES)
KIT_LOCAL_FILES = ("hopper_stand_in.py",)
KIT_LOCAL_MODULES = frozenset(Path(name).stem for name in KIT_LOCAL_FILES)


def runner_files(problem: Problem = PROBLEMS["nvfp4_gemm"]) -> dict[str, Path]:
    """File name in the runner folder -> the file copied there: `problem`'s runner files and
    the kit's local ones (the submission is added by whoever runs it)."""
    files = {f"{module}.py": path for module, path in problem.runner_files().items()}
    return {**files, **{name: REPO_ROOT / name for name in KIT_LOCAL_FILES}}


def make_runner_folder(submission: Path, parent: str | None = None, problem: Problem = PROBLEMS["nvfp4_gemm"]) -> Path:
    """A new folder with runner_files(problem) and a copy of `submission` as submission.py."""
    folder = Path(tempfile.mkdtemp(prefix="runner-", dir=parent))
    for name, path in {**runner_files(problem), "submission.py": submission}.items():
        shutil.copyfile(path, folder / name)
    return folder


def import_submission(folder: Path, module_name: str = "submission"):
    """Import the folder's submission.py, the folder first on sys.path as on the runner."""
    sys.path.insert(0, str(folder))
    if module_name == "submission":
        module = importlib.import_module("submission")
    else:  # a second name, so that a harness process can hold it beside its own modules
        spec = importlib.util.spec_from_file_location(module_name, folder / "submission.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # dataclasses look their module up while it executes
        spec.loader.exec_module(module)
    if not callable(getattr(module, "custom_kernel", None)):
        raise AttributeError("the submission defines no callable custom_kernel")
    return module
