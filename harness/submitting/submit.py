"""Submit to the GPU MODE leaderboard the way a careful competitor would.

Order: the static lint (a rejected file wastes a submission), the official tests on the local
GPU when there is one, then the popcorn client, whose answer is kept in results/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import click
from rich.console import Console

from harness.judge.exits import EXIT_CHECK_FAILED, EXIT_CLOSED, EXIT_NO_CLIENT
from harness.submitting.lint import GPU, failed, lint_file, print_report
from harness.submitting.options import problem_option, submission_option

MODES = ("test", "benchmark", "leaderboard", "profile")
# The current client installs `popcorn` (and a `popcorn-cli` beside it); older releases only
# the latter.
CLIENT_NAMES = ("popcorn", "popcorn-cli")
INSTALL_HINT = (
    "the GPU MODE client (popcorn) is not on PATH. Install it with\n"
    "  curl -fsSL https://raw.githubusercontent.com/gpu-mode/popcorn-cli/main/install.sh | bash\n"
    "(or put a release binary from https://github.com/gpu-mode/popcorn-cli/releases on PATH),\n"
    "then register once: popcorn register discord"
)
RESULTS_DIR = Path("results")


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def closed_since(problem, now: datetime) -> datetime | None:
    """The problem's leaderboard's deadline (harness/problems) where it has passed, else None;
    the server refuses a submission after it."""
    deadline = datetime.fromisoformat(problem.deadline) if problem.deadline else None
    return deadline if deadline is not None and now > deadline else None


def find_client() -> str | None:
    for name in CLIENT_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def supports_no_tui(client: str) -> bool:
    """Releases before December 2025 have no --no-tui and would refuse the flag."""
    try:
        help_text = subprocess.run(
            [client, "submit", "--help"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--no-tui" in help_text


def client_command(client: str, submission: Path, leaderboard: str, mode: str, output: Path, no_tui: bool) -> list[str]:
    command = [client, "submit", "--leaderboard", leaderboard, "--gpu", GPU, "--mode", mode]
    if no_tui:
        command.append("--no-tui")
    return command + ["--output", str(output), str(submission)]


def default_output(mode: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return RESULTS_DIR / f"popcorn-{mode}-{stamp}.json"


def local_gpu() -> str | None:
    """Name of the local CUDA device, or None when torch sees none."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def run_local_test(submission: Path, problem, console: Console) -> int:
    gpu = local_gpu()
    if gpu is None:
        console.print(
            "[yellow]local test skipped[/]: no CUDA device visible to torch here; "
            "the server runs the tests on its own GPU"
        )
        return 0
    console.print(f"[bold]local test[/] on {gpu}")
    return subprocess.run([sys.executable, "-m", "harness", "test", "--submission", str(submission),
                           "--problem", problem.selector]).returncode


@click.command("submit")
@submission_option
@problem_option
@click.option("--mode", type=click.Choice(MODES), default="leaderboard", show_default=True, help="Server-side mode.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to keep the server's answer [default: results/popcorn-MODE-TIME.json].",
)
@click.option("--skip-local-test", is_flag=True, help="Do not run `test` on the local GPU first.")
@click.option("--after-deadline", is_flag=True, help="Send although the leaderboard has closed (the server is expected to refuse it).")
def submit_command(submission: Path, problem, mode: str, output: Path | None, skip_local_test: bool, after_deadline: bool) -> None:
    """Lint, test on the local GPU if any, then submit with the GPU MODE client.

    Exit status 5: the leaderboard's deadline has passed (nothing sent)."""
    # Soft wrap keeps commands and URLs on one line, so they can be copied.
    console = Console(soft_wrap=True)

    leaderboard = problem.leaderboard
    deadline = closed_since(problem, utc_now())
    if deadline is not None:
        closed = f"the {leaderboard} leaderboard closed on {deadline:%Y-%m-%d %H:%M} UTC"
        if not after_deadline:
            console.print(f"[bold red]not submitted[/]: {closed}; the server refuses submissions after it. "
                          "`make check` and `make bench` judge the file here as the competition did "
                          "(--after-deadline sends it anyway)")
            raise SystemExit(EXIT_CLOSED)
        console.print(f"[yellow]{closed}[/]: sending anyway (--after-deadline); expect the server to refuse it")

    findings = lint_file(submission, leaderboard=leaderboard)
    print_report(submission, findings, console)
    if failed(findings):
        console.print("[bold red]not submitted[/]: fix the lint failures first")
        raise SystemExit(EXIT_CHECK_FAILED)

    if skip_local_test:
        console.print("[yellow]local test skipped[/]: --skip-local-test")
    elif (status := run_local_test(submission, problem, console)) != 0:
        console.print(f"[bold red]not submitted[/]: the local test failed (exit status {status})")
        raise SystemExit(status)

    client = find_client()
    if client is None:
        console.print(f"[bold red]not submitted[/]: {INSTALL_HINT}")
        raise SystemExit(EXIT_NO_CLIENT)
    if "POPCORN_API_URL" not in os.environ:
        console.print(
            "[yellow]POPCORN_API_URL is not set[/]: the client needs it; the installer adds it to "
            "your shell profile, or get it with /get-api-url on the GPU MODE Discord"
        )

    output = output or default_output(mode)
    output.parent.mkdir(parents=True, exist_ok=True)
    command = client_command(client, submission, leaderboard, mode, output, supports_no_tui(client))
    console.print("[bold]submitting[/]: " + " ".join(command))
    status = subprocess.run(command).returncode
    if status != 0:
        console.print(f"[bold red]the client failed[/] (exit status {status})")
        raise SystemExit(status)
    if output.exists():
        console.print(f"server's answer kept in {output}")
