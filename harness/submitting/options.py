"""Command-line options that several harness commands share."""

from pathlib import Path

import click

submission_option = click.option(
    "--submission",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=Path("submission.py"),
    show_default=True,
    help="File defining custom_kernel.",
)

json_option = click.option("--json", "as_json", is_flag=True,
                           help="One JSON document on stdout (schema in docs/output-formats.md); the report goes to stderr.")

strict_option = click.option("--strict", is_flag=True, help="kernelguard's hits fail the file instead of warning.")


def _problem(ctx, param, value):
    from harness.problems import load_problem

    try:
        return load_problem(value)
    except (ValueError, FileNotFoundError) as error:
        raise click.BadParameter(str(error)) from None


problem_option = click.option(
    "--problem", default="nvfp4_gemm", show_default=True, callback=_problem,
    help="nvfp4_gemm, nvfp4_gemv, nvfp4_dual_gemm, nvfp4_group_gemm, or a folder laid out as reference-kernels' "
         "problems (task.yml, task.py, utils.py, reference.py).")
