"""The kit's folders, found from this file: the repository's root (the kit's files a runner folder
holds, the GEMM's problem files, shapes/) and results/, the kit's records (the store, the CSV
export, the measurements the model reads), which the judge writes and no worker reads; and the
commit the kit's files are at, which every record names."""

import os
import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "results"

# Every commit is recorded and printed at git's default abbreviation, the length docs/figures.md
# cites: runs recorded at different lengths would otherwise sit side by side in `compare`.
COMMIT_CHARACTERS = 7


def short_commit(commit: str) -> str:
    """`commit` as every output prints it: its hash's first COMMIT_CHARACTERS characters, then
    what follows the hash (`-dirty`) unchanged."""
    sha, dash, rest = str(commit).partition("-")
    return sha[:COMMIT_CHARACTERS] + dash + rest


def git_commit(repo: Path = REPO_ROOT) -> str:
    """HEAD's short hash (`short_commit`), with `-dirty` when the working tree differs from it.

    A copy of the tree without its git history (a machine the tree was shipped to) names its
    commit through HARNESS_COMMIT.
    """
    if os.environ.get("HARNESS_COMMIT"):
        return os.environ["HARNESS_COMMIT"]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return short_commit(commit + ("-dirty" if dirty else ""))
