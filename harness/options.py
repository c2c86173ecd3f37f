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
                           help="One JSON document on stdout (schema in README); the report goes to stderr.")

strict_option = click.option("--strict", is_flag=True, help="kernelguard's hits fail the file instead of warning.")
