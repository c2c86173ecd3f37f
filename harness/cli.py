"""`python -m harness <command>`: the local stand-in for the competition's evaluation.

Exit statuses: 0 every case passed; 112 a case failed (wrong output, broken rule, error, crash,
timeout); 1 (--official) the submission raised what the competition's eval does not catch;
113 the tests file cannot be read or parsed, or a case lacks a key, has one more, or has a value
of another type than its problem's; 114 no CUDA device for a GPU run; 115 the problem's own
reference (a folder's, `--problem DIR`) cannot run on the device; 116 no verdict, a worker did not
start (the machine's failure); 117 the file is over the competition's size limit; 2 bad command
line (harness/judge/exits.py).
"""

import os
import re
import sys
from pathlib import Path

import click

from harness import api
from harness.judge.exits import EXIT_ABORTED, EXIT_CHECK_FAILED, EXIT_PASS, EXIT_USAGE
from harness.judge.given_up import end_on_own_error, end_process
from harness.judge.record import Listeners
from harness.problems import sol, taskfile
from harness.results import compare, document
from harness.results.console import Reporter
from harness.results.popcorn import PopcornLines, PopcornLog
from harness.results.recording import Recording, keep_run
from harness.results.rows import RESULTS_CSV
from harness.results.store import DEFAULT_PATH as STORE_PATH
from harness.shared.stats import geomean
from harness.submitting import lint, submit
from harness.submitting.compile import compile_command
from harness.submitting.options import json_option, problem_option, strict_option, submission_option


def _secret_seed() -> int | None:
    """POPCORN_SEED, read once and removed from the environment before any worker starts."""
    value = os.environ.pop("POPCORN_SEED", None)
    return int(value) if value else None


def _device(ctx, param, value: str) -> str:
    """cpu, cuda or cuda:N, refused here rather than by every worker."""
    if value == "cpu" or re.fullmatch(r"cuda(:\d+)?", value):
        return value
    raise click.BadParameter(f"{value!r} is not cpu, cuda or cuda:N")


def run_options(function):
    decorators = [
        click.argument("tests_file", required=False, type=click.Path(dir_okay=False)),
        submission_option,
        problem_option,
        click.option("--device", default="cuda", show_default=True, callback=_device, help="Where inputs live: cuda, cuda:N, or cpu (no timing events)."),
        click.option("--official", is_flag=True, help="The competition's eval exactly: one shared worker, only its verdicts."),
        click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Seconds per case before its process is killed [a folder's task.yml's timeouts, else test 180, benchmark 300, leaderboard 600]."),
        click.option("--stop-on-first-failure", is_flag=True, help="The cases after the first that does not pass are not run."),
        click.option("--wall-limit", "wall_limit_s", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Seconds for the whole run, kernelguard's reading of the file and worker starts included, "
                          "checked before each case: a case's calls "
                          "get at most what is left, counted once its inputs are drawn and its worker started (the "
                          "drawing is not bounded); "
                          "the cases it leaves are not run."),
        json_option,
        strict_option,
    ]
    for decorator in reversed(decorators):
        function = decorator(function)
    return function


max_repeats_option = click.option("--max-repeats", type=click.IntRange(min=3), default=None,
                                  help="Cap on timed rounds per case (quick runs); the competition's caps otherwise.")


def _run(mode: str, tests_file, submission, problem, device, official, timeout_s, as_json, strict,
         recording: Recording | None = None, **extra) -> None:
    if as_json and os.environ.get("POPCORN_FD") == "1":
        raise click.UsageError("--json and POPCORN_FD=1 would both write to stdout")
    secret = _secret_seed()
    cases, options = api.prepare(mode, tests_file, submission, problem, device, official, timeout_s, strict, secret, **extra)
    popcorn = PopcornLog.from_environment()
    # People read whichever standard stream the verdicts and the --json document leave free:
    # stderr when POPCORN_FD is set (it may be 1, and on the runner stdout is captured) or with
    # --json, stdout when POPCORN_FD is 2.
    reporter = Reporter(stream=sys.stderr if as_json or (popcorn.active and popcorn.fd != 2) else sys.stdout)
    if api.DEFAULT_SETS[mode] == "benchmarks" and device == "cpu":
        _cpu_benchmarks_note(reporter, problem, cases, tests_file, extra.get("wall_limit_s"))
    try:
        record = api.run(mode, cases, options, Listeners(PopcornLines(popcorn), reporter))
    finally:
        popcorn.close()
    data = document.run_document(record) if as_json or recording is not None else None
    if recording is not None:
        asked = {"official": official, "strict": strict, "timeout_s": timeout_s, **extra}
        written = keep_run(recording, record, tests_file, asked, "secret" if secret is not None else "fixed", data)
        for path, count in written:
            reporter.console.print(f"[dim]run kept in {os.path.relpath(path)} ({count} row{'' if count == 1 else 's'})[/dim]")
    if as_json:
        document.write(data, record.exit_status)
    end_process(record.exit_status)


def _cpu_benchmarks_note(reporter: Reporter, problem, cases: list, tests_file, wall_limit_s: float | None) -> None:
    """A timed run on the CPU: what stands in for the benchmarks without a tests file, and up
    front, the named cases whose work is a built-in problem's official benchmarks' (hours a case
    there)."""
    if not tests_file:
        official = (os.path.relpath(problem.benchmarks_file) if problem.builtin
                    else f"{os.path.relpath(problem.folder / 'task.yml')}'s `benchmarks`, a line each in a tests file")
        reporter.console.print(f"on the CPU without a tests file, {problem.name}'s official test of least work stands in for its "
                               f"benchmarks, {'which take hours a case there' if problem.builtin else 'sized for a GPU'}; "
                               f"name a tests file to time others ({official}: the official ones)")
        return
    heavy = problem.benchmark_sized(cases) if problem.builtin else []  # a folder's sizes say nothing of its cost here
    if not heavy:
        return
    limit = (f"; --wall-limit {wall_limit_s:g} is checked before each case and bounds its calls, counted once its "
             "inputs are drawn: the drawing itself is not bounded" if wall_limit_s else "")
    reporter.console.print(
        f"[yellow]warning[/yellow]: on the CPU, {len(heavy)} of these {len(cases)} cases {'has' if len(heavy) == 1 else 'have'} "
        f"the work of {problem.name}'s "
        f"official benchmarks, which take hours a case there: each draws {problem.eval.calls_per_batch} inputs a batch with "
        f"their exact references (\"generating inputs\" alone takes minutes){limit}. Without a tests file, the official "
        "test of least work stands in for them")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli():
    """Judge a submission to GPU MODE's NVFP4 problems like the competition, and time it against speed-of-light."""


@cli.command()
@run_options
def test(tests_file, **options):
    """Check custom_kernel on the official tests (or TESTS_FILE)."""
    _run("test", tests_file, **options)


ceilings_option = click.option("--ceilings", type=click.Choice(["table", "measured"]), default="table", show_default=True, help="SOL from the devices table, or from a copy and a bf16 matmul measured now.")
def record_options(function):
    function = click.option("--no-record", is_flag=True, help="Keep the run nowhere: neither the store nor a CSV.")(function)
    function = click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), default=STORE_PATH,
                            show_default="results/verdicts.sqlite (git-ignored)",
                            help="SQLite store the run's verdict and rows go to (what `compare` reads).")(function)
    return click.option("--results", "results_csv", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS_CSV,
                        show_default="results/runs.csv (git-ignored)",
                        help="CSV export the run's rows are appended to; this kit's reference measurements go to "
                             "results/reference/runs.csv.")(function)


def _recording(no_record: bool, store_path: Path, results_csv: Path) -> Recording | None:
    return None if no_record else Recording(store=store_path, csv=results_csv)


@cli.command()
@run_options
@max_repeats_option
@ceilings_option
@click.option("--baselines", is_flag=True, help="Also time cuBLAS bf16, torch dequantize+matmul and an empty CuTeDSL call's host side on the same inputs.")
@record_options
def benchmark(tests_file, ceilings, baselines, no_record, store_path, results_csv, **options):
    """Time the official benchmarks (or TESTS_FILE): stats, SOL, geomean."""
    _run("benchmark", tests_file, measure_ceilings=ceilings == "measured", baselines=baselines,
         recording=_recording(no_record, store_path, results_csv), **options)


@cli.command()
@run_options
@max_repeats_option
@ceilings_option
@record_options
def leaderboard(tests_file, ceilings, no_record, store_path, results_csv, **options):
    """Benchmark with every timed output rechecked and a recheck on fresh inputs."""
    _run("leaderboard", tests_file, measure_ceilings=ceilings == "measured",
         recording=_recording(no_record, store_path, results_csv), **options)


@cli.command()
@run_options
@click.option("--ncu", is_flag=True, help="One bare call per shape in an NVTX range `custom_kernel`, for ncu/nsys around this command.")
def profile(tests_file, ncu, **options):
    """Profile one call per benchmark shape with the torch profiler."""
    _run("profile", tests_file, ncu=ncu, **options)


@cli.command("sol")
@click.argument("tests_file", required=False, type=click.Path(dir_okay=False))
@problem_option
@click.option("--gpu", type=click.Choice(sorted(sol.DEVICES)), default="B200", show_default=True)
def sol_command(tests_file, problem, gpu):
    """Speed-of-light per benchmark shape (or TESTS_FILE) on a GPU from the devices table, by the
    problem's formula; on a B200 beside the competition's published table where it lists the shape."""
    cases = api.load_cases(tests_file, "benchmarks", None, problem)
    if problem.speed_of_light is None:
        raise click.UsageError(f"{problem.name} has no speed-of-light formula")
    ceilings = problem.ceilings(gpu)
    published = {tuple(spec.items()): microseconds for spec, microseconds in problem.speed_of_light.rows()} if gpu == "B200" else {}
    click.echo(f"{problem.name} on {gpu}: {ceilings.peak_flops / 1e12:.0f} TFLOP/s, {ceilings.bandwidth / 1e12:.2f} TB/s ({ceilings.source})")
    width = max(len(case.label) for case in cases)
    click.echo(f"{'shape':<{width}} {'SOL µs':>9} {'published':>9}  bound")
    times = []
    for case in cases:
        work = problem.work(case.args)
        times.append(ceilings.seconds(work))
        listed = published.get(tuple((key, case.args[key]) for key in problem.spec_keys))
        click.echo(f"{case.label:<{width}} {times[-1] * 1e6:>9.3f} {'-' if listed is None else f'{listed:.3f}':>9}  {ceilings.bound_of(work)}")
    click.echo(f"geomean {geomean(times) * 1e6:.3f} µs")


@cli.command("task-yml")
@problem_option
@click.option("--check", is_flag=True, help="Only report whether task.yml matches the tests files (exit 1 if stale).")
def task_yml(problem, check):
    """Write a built-in problem's task.yml from its tests and benchmarks files (their single source)."""
    if not problem.builtin:
        click.echo(f"{problem.folder / 'task.yml'} is the folder's own: its cases are read from it, nothing to write")
        sys.exit(EXIT_PASS)
    path = taskfile.path_of(problem)
    if check:
        current = taskfile.is_current(problem)
        click.echo(f"{path} is current" if current else f"{path} is stale: run `python -m harness task-yml --problem {problem.name}`")
        sys.exit(EXIT_PASS if current else EXIT_CHECK_FAILED)
    click.echo(f"wrote {taskfile.write(problem)}")


@cli.command("model")
@click.option("--fit", is_flag=True, help="Time the model with the constants refitted now, not the recorded ones.")
def model_command(fit):
    """The B200 cost model: its constants, its calibration against published times (a fit set
    and a set held out by configuration, and each configuration left out in turn), its terms
    with what backs each, and its times for this kit's sm_100a configurations, with their low
    and high. A model's figures, not measurements."""
    from harness.b200 import calibration as b200_calibration, model as b200_model, report as b200_report
    from harness.runner.files import import_submission
    from harness.results.tables import console_for

    console = console_for()
    errors = b200_calibration.grid_errors()
    refitted = b200_calibration.fit(errors)
    if refitted != b200_model.FITTED:
        console.print(f"[bold red]the recorded constants are not the fit's[/]: refitted {refitted}")
    constants = refitted if fit else b200_model.FITTED
    console.print(b200_report.constants_table(constants))
    if not b200_model.OVERLAP.measured:
        console.print("[bold]The two-calls-in-flight figures rest on an ASSUMED overlap[/]: no bandwidth-bound "
                      "pdl_overlap run is recorded in results/pdl-overlap-bandwidth.json (make pdl-overlap-bandwidth).")
    console.print(b200_report.calibration_table(constants))
    console.print(b200_report.cross_validation_table(b200_calibration.cross_validation()))
    submission = import_submission(Path(__file__).resolve().parents[1], "nvfp4_kit_submission")
    configs = {shape: submission.sm100_config(submission.Problem(*shape), conservative=False)
               for shape in b200_model.BENCHMARK_SHAPES}
    near_optimal = b200_calibration.near_optimal(errors)
    console.print(b200_report.predictions_table(configs, near_optimal))
    console.print(b200_report.range_table(configs, near_optimal))
    console.print(b200_report.terms_table(configs, near_optimal))
    console.print(b200_report.preferred_table(configs))
    console.print(b200_report.sensitivity_table(configs))
    console.print(b200_report.levers_table(configs))


def _gpus(ctx, param, value: str | None) -> list[int] | None:
    if value is None or value == "all":
        return None
    try:
        return [int(index) for index in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of GPU indices") from None


@cli.command()
@click.option("--gpus", callback=_gpus, default=None, help="GPU indices to judge on, e.g. 0,1 [every GPU of the machine].")
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="cpu: judges without a GPU (torch-only files), --judges of them.")
@click.option("--judges", type=click.IntRange(min=1), default=1, show_default=True, help="With --device cpu: judges per machine (per node under --ray).")
@click.option("--ray", "ray_address", default=None, help="A Ray cluster's address (or `auto`): a judge actor per GPU of every node (the `cluster` extra).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=int, default=8765, show_default=True)
@click.option("--store", "store_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              show_default="results/verdicts.sqlite", help="SQLite file of every verdict.")
@click.option("--no-store", is_flag=True, help="Keep no verdicts: every candidate is judged.")
@click.option("--memory-limit-mib", type=click.IntRange(min=1), default=None,
              help="A worker's memory cgroup holds it to this (memfds and tmpfs files count); over it, a crash naming the limit.")
@click.option("--max-source-bytes", type=click.IntRange(min=1), default=lint.MAX_BYTES, show_default=True,
              help="A candidate's source over this is refused (422).")
@click.option("--test-lanes", type=click.IntRange(min=1), default=1, show_default=True,
              help="Judges per GPU (or CPU judge): test-mode candidates run side by side; a timed one has the GPU alone.")
@click.option("--candidates-dir", "candidate_dirs", multiple=True,
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A folder whose files a request may name by `path` (repeatable); without one, only sources are taken.")
@click.option("--unsafe-sandbox", is_flag=True, help="Serve even where the workers' sandbox lacks a layer (each judge names those it lacks).")
def serve(gpus, device, judges, ray_address, host, port, store_path, no_store, memory_limit_mib, max_source_bytes, test_lanes,
          candidate_dirs, unsafe_sandbox):
    """Keep a judge per GPU alive and judge candidates sent over HTTP (docs/service.md)."""
    from harness.judge.sandbox import UNSAFE_ENV
    from harness.service.serve import run_service

    if unsafe_sandbox:  # the judges' environment, which never reaches a worker (harness/judge/sandbox.py)
        os.environ[UNSAFE_ENV] = "1"
    run_service(gpus=gpus, device=device, judges_per_node=judges, ray_address=ray_address, host=host, port=port,
                store_path=None if no_store else store_path or STORE_PATH, memory_limit_mib=memory_limit_mib,
                max_source_bytes=max_source_bytes, test_lanes=test_lanes, candidate_dirs=candidate_dirs)


cli.add_command(benchmark, name="bench")
cli.add_command(lint.lint_command)
cli.add_command(submit.submit_command)
cli.add_command(compare.compare_command)
cli.add_command(compile_command)


def _end_early(status: int, shown: str, error: str) -> None:
    """`shown` on stderr, and with --json on the command line the one document the command
    promises, though it stopped before its report: `passed` false, `exit_status`, `error`."""
    click.echo(shown, err=True)
    arguments = sys.argv[1:]
    if "--json" in arguments:
        command = next((cli.commands[argument].name for argument in arguments if argument in cli.commands), None)
        document.write({"schema": document.SCHEMA, "command": command, "passed": False, "error": error}, status)
    end_process(status)


def main():
    """Bad command lines get one line and exit status 2 (click would add its usage text); a
    command that stops before its report still writes its --json document."""
    try:
        status = cli.main(standalone_mode=False)
    except click.UsageError as error:
        _end_early(EXIT_USAGE, f"error: {error.format_message()}", error.format_message())
    except api.Stopped as stopped:
        _end_early(stopped.status, stopped.message, stopped.message)
    except click.ClickException as error:
        _end_early(error.exit_code, f"Error: {error.format_message()}", error.format_message())
    except click.Abort:  # Ctrl-C, perhaps while a queue of the judge's was given up
        end_process(EXIT_ABORTED)
    except Exception:
        end_on_own_error()
        raise
    end_process(status or EXIT_PASS)
