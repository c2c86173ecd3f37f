"""A reference-kernels problem folder's task.yml, read as the competition's runner reads it.

The runner copies each of `files` into one folder, `source` taken relative to the problem's
folder (`{"name": "utils.py", "source": "../utils.py"}`: pmpp_v2's, linalg's and helion's shared
utils), `@SUBMISSION@` standing for the submitted file. A case is a flat mapping; some keys appear
in some cases only (linalg's `case`, whose generator has a default) and some take words. The
timeouts are seconds per mode, `ranking_by` how the benchmarks' means make a score.
"""

import dataclasses
from pathlib import Path

import yaml

SUBMISSION_SOURCE = "@SUBMISSION@"
TIMEOUT_KEYS = {"test": "test_timeout", "benchmark": "benchmark_timeout", "leaderboard": "ranked_timeout"}


class TaskFileError(ValueError):
    """A task.yml the folder's own runner could not run either: a source missing, a case unreadable."""


@dataclasses.dataclass(frozen=True)
class FolderTask:
    folder: Path
    files: dict  # runner file name -> the file it is copied from (the submission left out)
    tests: list[dict]
    benchmarks: list[dict]
    timeouts_s: dict  # mode (test, benchmark, leaderboard) -> seconds, where task.yml gives one
    ranking_by: str | None
    main: str = "eval.py"

    @property
    def eval_file(self) -> Path | None:
        """The eval the runner starts (config.main, eval.py by default), where `files` holds it."""
        return self.files.get(self.main)

    def case_keys(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """(every key in the order first seen, keys some case leaves out, keys whose values are words)."""
        cases = self.tests + self.benchmarks
        keys = list(dict.fromkeys(key for case in cases for key in case))
        optional = tuple(key for key in keys if not all(key in case for case in cases))
        words = tuple(key for key in keys if any(isinstance(case.get(key), str) for case in cases))
        return tuple(keys), optional, words


def cases_as_tests_file(cases: list[dict]) -> str:
    """`cases` in the tests-file format the runner writes from task.yml: a line a case, its
    `key: value` pairs joined by `; `, a list as `[a, b]`."""
    return "".join("; ".join(f"{key}: {_format_value(value)}" for key, value in case.items()) + "\n" for case in cases)


def _format_value(value) -> str:
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(item) for item in value) + "]"
    return str(value)


def read_task(folder: Path) -> FolderTask:
    """`folder`'s task.yml; every source of `files` resolved from `folder` and present."""
    path = folder / "task.yml"
    try:
        task = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise TaskFileError(f"{path}: {error}") from None
    main = (task.get("config") or {}).get("main") or "eval.py"
    files, missing = {}, []
    for entry in task.get("files") or []:
        name, source = entry.get("name"), entry.get("source")
        if not name or not source:
            raise TaskFileError(f"{path}: a `files` entry lacks its name or source: {entry}")
        if source == SUBMISSION_SOURCE:
            continue
        resolved = (folder / source).resolve()
        if not resolved.is_file() and (folder / name).is_file():
            resolved = folder / name  # the source's copy, brought into the folder
        if not resolved.is_file():
            missing.append(f"{name} (from {source})")
        files[name] = resolved
    missing = [entry for entry in missing if not entry.startswith(f"{main} ")]  # the eval is told by its name alone
    if missing:
        raise TaskFileError(f"{folder} lacks {', '.join(missing)}")
    cases = {}
    for which in ("tests", "benchmarks"):
        cases[which] = list(task.get(which) or [])
        bad = [case for case in cases[which] if not isinstance(case, dict)
               or not all(isinstance(value, (int, str, list)) and not isinstance(value, bool) for value in case.values())]
        if bad:
            raise TaskFileError(f"{path}: a case of `{which}` is no mapping of integers, words or lists: {bad[0]}")
    timeouts = {mode: float(task[key]) for mode, key in TIMEOUT_KEYS.items() if task.get(key) is not None}
    return FolderTask(folder=folder, files=files, tests=cases["tests"], benchmarks=cases["benchmarks"],
                      timeouts_s=timeouts, ranking_by=task.get("ranking_by"), main=main)
