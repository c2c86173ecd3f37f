"""Every staged problem folder's solutions judged twice, by this kit's judge and by the folder's
own eval.py, and the verdicts compared; under --official (the folder's eval run whole in a
worker's sandbox), the benchmarks' means compared too (within 5 %).

    experiments/problem_folders/stage.sh PATH_TO_REFERENCE_KERNELS
    python experiments/problem_folders/check.py [--root .reference-kernels/problems] [--device cuda]

What is judged in every FAMILY/PROBLEM/ under the root, each with the verdict it should get:
  where the folder has solutions/ (pmpp_v2): solutions/correct/*.py pass, solutions/wrong/*.py fail;
  else (linalg, helion) submission.py and submissions/*.py pass;
  helion's only where `import helion` works (else listed as skipped, with the import's error).
Test mode on each problem's official tests: the folder's eval (`POPCORN_FD=N python eval.py test
tests.txt` in a folder laid out as the runner lays it out from task.yml) and `python -m harness
test` (the judge's own checks, and under --official the competition's). Benchmarks: the first
`--benchmarks` official benchmark cases of each folder named by --timed with its correct
solutions, by the eval and by `python -m harness benchmark --official` alone, one at a time.

The table goes to results/problem-folders-<device>-<date>-<commit>.md, each command's output to
the .log beside it. Exit status 0 where every verdict matches and every mean compared lies within
5 %, 1 otherwise.
"""

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.judge.exits import EXIT_INFRASTRUCTURE  # noqa: E402
from harness.judge.folder_eval import lay_out  # noqa: E402
from harness.runner.folder_eval import CASES_FILE  # noqa: E402
from harness.problems import load_problem  # noqa: E402
from harness.problems.folder_task import read_task, cases_as_tests_file  # noqa: E402
from harness.shared.paths import git_commit, short_commit  # noqa: E402

MEANS_WITHIN = 0.05
LIMIT_S = 600
# Solutions their folder files under one verdict that its own eval gives the other: the folder's
# fault, read from its code. Such a row agrees where this judge gives the eval's verdict; for a
# wrong solution the eval passes, where --official gives the eval's and the default still fails it.
KNOWN_FAULTS = {
    "pmpp_v2/conv2d_py: solutions/correct/ref.py":
        "the reference runs F.conv2d under DeterministicContext (cuDNN's TF32 off), the solution with torch's "
        "default (TF32 on): its sums of up to 64 x 8 x 8 products miss rtol = atol = 1e-3",
    "pmpp_v2/vectorsum_py: solutions/correct/pytorch.py":
        "the reference returns a 0-d tensor (its float64 sum cast to float32), the solution the one-element output "
        "buffer generate_input makes: the eval's check refuses that shape in every case (SIZE MISMATCH)",
    "pmpp_v2/vectorsum_py: solutions/wrong/cheat.py":
        "the cheat drops elements only past 1,000,000 (the tests are smaller) and returns a 0-d tensor as the "
        "reference does: the eval passes it; this judge's default refuses its shape against the output buffer (1,)",
}
TIMED = ("grayscale_py", "prefixsum_py", "vectoradd_py")  # pmpp_v2's whose correct solutions are timed by default


@dataclasses.dataclass
class Submission:
    folder: Path
    file: Path
    expected: str  # pass or fail

    @property
    def label(self) -> str:
        """FAMILY/PROBLEM: the file, by its path in the folder (by its own where it lies elsewhere)."""
        shown = self.file.relative_to(self.folder) if self.file.is_relative_to(self.folder) else self.file
        return f"{self.folder.parent.name}/{self.folder.name}: {shown}"


@dataclasses.dataclass
class Row:
    submission: Submission
    theirs: str = "-"
    ours: str = "-"
    ours_official: str = "-"
    means: str = "-"
    note: str = ""
    agrees: bool = True


def submissions(root: Path, helion_error: str) -> tuple[list[Submission], list[str]]:
    """What is judged, and what is left out with why (`helion_error`: why helion does not import
    here, empty where it does)."""
    found, skipped = [], []
    for folder in sorted(path.parent for path in root.glob("*/*/task.yml")):
        if folder.parent.name == "helion" and helion_error:
            skipped.append(f"{folder.parent.name}/{folder.name}: helion does not import here ({helion_error})")
        elif (folder / "solutions").is_dir():
            for verdict in ("correct", "wrong"):
                found += [Submission(folder, file, "pass" if verdict == "correct" else "fail")
                          for file in sorted((folder / "solutions" / verdict).glob("*.py"))]
        else:
            files = [folder / "submission.py", *sorted((folder / "submissions").glob("*.py"))]
            found += [Submission(folder, file, "pass") for file in files if file.is_file()]
    return found, skipped


def eval_folder(submission: Submission, cases: list[dict]) -> Path:
    """A folder as the competition's runner lays it out, as --official lays it out for the eval
    (harness/judge/folder_eval.py `lay_out`): task.yml's files, the submission as submission.py,
    and the cases as CASES_FILE."""
    folder = Path(tempfile.mkdtemp(prefix="eval-"))
    lay_out(folder, read_task(submission.folder).files.items(), submission.file, cases)
    return folder


def popcorn_lines(text: str) -> dict:
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def run_eval(submission: Submission, mode: str, cases: list[dict], log, environment: dict | None = None,
             prefix: tuple = ()) -> tuple[str, list[float]]:
    """(the eval's check verdict, its benchmark means in ns) from its POPCORN lines; `environment`
    in place of this process's, `prefix` before its command line (`taskset -c 0`)."""
    folder = eval_folder(submission, cases)
    try:
        with tempfile.TemporaryFile("w+") as popcorn:
            environment = {**(os.environ if environment is None else environment), "POPCORN_FD": str(popcorn.fileno())}
            completed = subprocess.run([*prefix, sys.executable, "eval.py", mode, CASES_FILE], cwd=folder, env=environment,
                                       pass_fds=(popcorn.fileno(),), capture_output=True, text=True, timeout=LIMIT_S)
            popcorn.seek(0)
            lines = popcorn_lines(popcorn.read())
        log(f"eval.py {mode} {submission.label}: exit {completed.returncode}\n{completed.stdout[-4000:]}{completed.stderr[-4000:]}"
            f"\n{json.dumps(lines)[:4000]}")
        means = [float(lines[f"benchmark.{index}.mean"]) for index in range(len(cases)) if f"benchmark.{index}.mean" in lines]
        return lines.get("check", f"none (exit {completed.returncode})"), means
    except subprocess.TimeoutExpired:
        return f"timeout ({LIMIT_S} s)", []
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_ours(submission: Submission, mode: str, cases: list[dict], device: str, official: bool, log) -> tuple[str, list[float]]:
    """(pass, fail or what stopped the judge, the means in ns) from `python -m harness MODE --json`."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as file:
        file.write(cases_as_tests_file(cases))
    command = [sys.executable, "-m", "harness", mode, file.name, "--problem", str(submission.folder), "--submission",
               str(submission.file), "--device", device, "--json", *(["--official"] if official else [])]
    try:
        completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return f"timeout ({LIMIT_S} s)", []
    finally:
        os.unlink(file.name)
    shown = " ".join(os.path.relpath(part, ROOT) if os.path.isabs(part) else part for part in command[1:])  # as run from the root
    log(f"{shown}: exit {completed.returncode}\n{completed.stderr[-6000:].replace(f'{ROOT}/', '')}")
    try:
        document = json.loads(completed.stdout)
    except json.JSONDecodeError:
        return f"no verdict (exit {completed.returncode}: {completed.stderr.strip().splitlines()[-1:] or ''})", []
    means = [case["stats"]["mean_ns"] for case in document.get("cases", []) if case.get("stats")]
    passed = document.get("passed")
    if passed is None or completed.returncode == EXIT_INFRASTRUCTURE:  # the judge's machine failed: nothing said of the file
        return f"no verdict (exit {completed.returncode})", means
    return "pass" if passed else "fail", means


def compare_tests(submission: Submission, device: str, log) -> Row:
    tests = read_task(submission.folder).tests
    row = Row(submission)
    row.theirs = run_eval(submission, "test", tests, log)[0]
    row.ours = run_ours(submission, "test", tests, device, False, log)[0]
    if load_problem(submission.folder).official_refused:
        row.ours_official = "refused"
    else:
        row.ours_official = run_ours(submission, "test", tests, device, True, log)[0]
    verdicts = {row.theirs, row.ours} | ({row.ours_official} if row.ours_official != "refused" else set())
    fault = KNOWN_FAULTS.get(submission.label)
    if fault and submission.expected == "fail" and row.theirs == "pass":
        row.agrees = row.ours == "fail" and row.ours_official in ("pass", "refused")
    else:
        row.agrees = verdicts == ({row.theirs} if fault else {submission.expected})
    if fault:
        row.note = f"the folder's fault: {fault}"
    if not row.agrees:
        row.note = "verdicts differ" if len(verdicts) > 1 else f"all {row.theirs}, expected {submission.expected}"
    return row


def compare_means(row: Row, count: int, device: str, log, repeats: int = 1) -> None:
    """The first `count` benchmarks, timed by the eval and by --official in turn, `repeats` times
    each; each case's medians compared. A difference beyond MEANS_WITHIN still agrees where the
    eval's own runs spread wider (a call of a few microseconds, timed one at a time, moves by tens
    of percent between two runs of the eval alone), and the note says so."""
    cases = read_task(row.submission.folder).benchmarks[:count]
    theirs_runs, ours_runs = [], []
    timed = (("eval", theirs_runs, lambda: run_eval(row.submission, "benchmark", cases, log)),
             ("--official", ours_runs, lambda: run_ours(row.submission, "benchmark", cases, device, True, log)))
    for _ in range(repeats):
        for who, runs, run in timed:
            verdict, means = run()
            if len(means) != len(cases):
                row.means, row.agrees = f"{who} {verdict}", False
                return
            runs.append(means)
    figures, notes = [], []
    for index in range(len(cases)):
        theirs, ours = ([run[index] for run in runs] for runs in (theirs_runs, ours_runs))
        ratio = statistics.median(ours) / statistics.median(theirs) - 1
        spread = (max(theirs) - min(theirs)) / statistics.median(theirs)
        figures.append(f"{statistics.median(theirs) / 1e3:.2f} / {statistics.median(ours) / 1e3:.2f} us ({ratio:+.1%})")
        if abs(ratio) > MEANS_WITHIN and abs(ratio) > spread:
            row.agrees = False
            notes.append(f"a mean beyond {MEANS_WITHIN:.0%} and beyond the eval's own spread ({spread:.1%})")
        elif abs(ratio) > MEANS_WITHIN:
            notes.append(f"beyond {MEANS_WITHIN:.0%}, within the eval's own spread over {repeats} runs ({spread:.1%})")
    row.means = ", ".join(figures) + (f" (medians of {repeats})" if repeats > 1 else "")
    if notes:
        row.note = "; ".join(([row.note] if row.note else []) + notes)


def table(rows: list[Row], skipped: list[str], header: str) -> str:
    lines = [header, "", "| submission | should | eval.py | ours | ours --official | benchmark means, eval / --official | agrees | note |",
             "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row.submission.label} | {row.submission.expected} | {row.theirs} | {row.ours} | {row.ours_official} "
                     f"| {row.means} | {'yes' if row.agrees else 'NO'} | {row.note} |")
    lines += [""] + [f"- skipped: {reason}" for reason in skipped]
    agreeing = sum(row.agrees for row in rows)
    lines += ["", f"{agreeing} of {len(rows)} rows agree."]
    return "\n".join(lines) + "\n"


def helion_import_error() -> str:
    """Why `import helion` fails here (its exception, one line), or empty where it works."""
    try:
        import helion  # noqa: F401
    except Exception as error:  # any failure of the import leaves helion's folders out, said so
        return f"{type(error).__name__}: {error}".splitlines()[0]
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--root", type=Path, default=ROOT / ".reference-kernels" / "problems")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--jobs", type=int, default=4, help="test-mode comparisons run side by side")
    parser.add_argument("--benchmarks", type=int, default=1, help="benchmark cases timed per folder of --timed")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the eval and of --official each, in turn, per timed row")
    parser.add_argument("--timed", nargs="*", default=list(TIMED), help="folders whose correct solutions are timed")
    parser.add_argument("--only", default="", help="a regular expression a submission's label must match")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    arguments = parser.parse_args()
    if not arguments.root.is_dir():
        sys.exit(f"{arguments.root} is not there: stage reference-kernels' folders first (`make check-folders "
                 "FOLDERS=path/to/reference-kernels`, a clone of github.com/gpu-mode/reference-kernels; their evals need a "
                 "GPU), or judge the practice family the kit ships, on the CPU too: `make check-folders "
                 "ARGS=\"--root tests/fixtures/reference_kernels --device cpu\"`")
    found, skipped = submissions(arguments.root, helion_import_error())
    found = [submission for submission in found if re.search(arguments.only, submission.label)]
    skipped = [reason for reason in skipped if re.search(arguments.only, reason)]
    device_name = "cpu"
    if arguments.device.startswith("cuda"):
        import torch
        device_name = torch.cuda.get_device_name(0)
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    commit = git_commit()
    staged = short_commit((arguments.root.parent / "COMMIT").read_text().strip()) if (arguments.root.parent / "COMMIT").is_file() else "?"
    today = datetime.datetime.now(datetime.timezone.utc).date()
    only = f"-{re.sub(r'[^a-z0-9]+', '-', arguments.only.lower()).strip('-')}" if arguments.only else ""
    stem = arguments.out / f"problem-folders{only}-{slug}-{today}-{commit}"
    arguments.out.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    with open(f"{stem}.log", "w") as log_file:
        def log(text: str) -> None:
            with lock:
                log_file.write(text + "\n\n")
                log_file.flush()

        with concurrent.futures.ThreadPoolExecutor(arguments.jobs) as pool:
            rows = list(pool.map(lambda submission: compare_tests(submission, arguments.device, log), found))
        for row in rows:
            print(f"{row.submission.label}: eval {row.theirs}, ours {row.ours}, --official {row.ours_official}", flush=True)
            timed = row.submission.folder.name in arguments.timed and row.submission.expected == "pass"
            if timed and arguments.benchmarks and row.agrees:
                compare_means(row, arguments.benchmarks, arguments.device, log, arguments.repeats)
                print(f"  means: {row.means}", flush=True)
    header = (f"# Problem folders: this kit's judge against each folder's eval.py\n\n{device_name}, {today}, "
              f"kit at {commit}, reference-kernels at {staged}; "
              f"`python experiments/problem_folders/check.py {' '.join(sys.argv[1:])}`")
    text = table(rows, skipped, header)
    Path(f"{stem}.md").write_text(text)
    print(text)
    return 0 if all(row.agrees for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
