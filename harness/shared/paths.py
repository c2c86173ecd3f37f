"""The kit's folders, found from this file: the repository's root (the kit's files a runner folder
holds, the GEMM's problem files, shapes/) and results/, the kit's records (the store, the CSV
export, the measurements the model reads), which the judge writes and no worker reads."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = REPO_ROOT / "results"
