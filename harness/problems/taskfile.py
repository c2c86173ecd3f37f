"""A built-in problem's task.yml in the competition's structure, its cases generated from the
problem's tests and benchmarks files, so that the cases live in one place.

nvfp4_gemm's whole file is written here (shapes/ holds its cases); another problem's keeps its
own head (files, description, config) and tail (ranking) and gets its `tests` and `benchmarks`
rewritten.
"""

import json
from pathlib import Path

from harness.problems import PROBLEMS, Problem

GEMM = PROBLEMS["nvfp4_gemm"]
CASES_START = "\ntests:\n"
CASES_END = "\nranking_by:"
GEMM_TAIL = '\nranking_by: "geom"\n'

HEADER = """\
# Generated from shapes/tests.txt and shapes/benchmarks.txt by `python -m harness task-yml`.
# Edit the shapes there, then regenerate; a unit test fails while this file is stale.
files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "reference.py", "source": "reference.py"}

lang: "py"

description: |
  NVFP4 block-scaled GEMM for NVIDIA B200. custom_kernel receives
  (a, b, sfa, sfb, sfa_permuted, sfb_permuted, c):
  * a: M x K x L, K-major, nvfp4 (e2m1, two per byte: torch.float4_e2m1fn_x2)
  * b: N x K x L, K-major, nvfp4
  * sfa: M x (K // 16) x L, K-major, fp8 (e4m3fn); sfb: N x (K // 16) x L
  * sfa_permuted / sfb_permuted: the same scales in the (32, 4, rest_mn, 4, rest_k, L) layout
  * c: M x N x L, fp16, to be written and returned
  C = sum over K of A * SFA * B * SFB, checked with rtol = atol = 1e-3.
  M and N are multiples of 128 and K a multiple of 256. Ranking: geometric mean of the
  benchmark means. Speed of light on B200 at 1.5 GHz, max(FP4 math, DRAM traffic):
    M   N    K     L time[us]
    128 7168 16384 1 8.994
    128 4096 7168  1 2.354
    128 7168 2048  1 1.333

# The competition runs its eval_better_bench.py as eval.py; `python -m harness` stands in locally.
config:
  main: "eval.py"
"""


def path_of(problem: Problem = GEMM) -> Path:
    return problem.folder / "task.yml"


def _around_the_cases(problem: Problem) -> tuple[str, str]:
    """What the file holds before its `tests` and from its `ranking_by` on."""
    if problem.name == GEMM.name:
        return HEADER, GEMM_TAIL
    text = path_of(problem).read_text()
    return text[:text.index(CASES_START)], text[text.index(CASES_END):]


def _case_lines(problem: Problem, which: str) -> str:
    return "".join(f"  - {json.dumps(case.args)}\n" for case in problem.cases(which))


def render(problem: Problem = GEMM) -> str:
    head, tail = _around_the_cases(problem)
    return f'{head}{CASES_START}{_case_lines(problem, "tests")}\nbenchmarks:\n{_case_lines(problem, "benchmarks")}{tail}'


def is_current(problem: Problem = GEMM) -> bool:
    path = path_of(problem)
    return path.exists() and path.read_text() == render(problem)


def write(problem: Problem = GEMM) -> Path:
    path = path_of(problem)
    path.write_text(render(problem))
    return path
