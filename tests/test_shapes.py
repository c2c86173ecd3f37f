import dataclasses
import re

import pytest
from hypothesis import given, settings, strategies as st

from harness.problems import PROBLEMS
from harness.problems import taskfile
from harness.problems.shapes import CaseFormat, ShapeFileError, apply_secret_seed, combine_seeds, official_cases, parse_cases

ISSUE_TESTS = [
    (128, 256, 256), (128, 1536, 7168), (128, 3072, 1536), (256, 7168, 256), (256, 7168, 2048),
    (2304, 4608, 7168), (384, 7168, 2304), (512, 512, 7168), (512, 4096, 512), (512, 1536, 7168),
]
ISSUE_BENCHMARKS = [(128, 7168, 16384), (128, 4096, 7168), (128, 7168, 2048)]


def test_official_sets_are_the_competitions():
    for name, shapes in (("tests", ISSUE_TESTS), ("benchmarks", ISSUE_BENCHMARKS)):
        cases = official_cases(name)
        assert [case.mnkl for case in cases] == [(*shape, 1) for shape in shapes]
        assert {case.args["seed"] for case in cases} == {1111}


def test_parser_reads_the_official_format():
    (case,) = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1111")
    assert case.args == {"m": 128, "n": 256, "k": 256, "l": 1, "seed": 1111}
    assert case.spec == "m: 128; n: 256; k: 256; l: 1; seed: 1111"
    assert case.label == "128x256x256"


def test_parser_skips_comments_and_blank_lines():
    cases = parse_cases("# sweep\n\nm: 256; n: 512; k: 1024; l: 2; seed: -5\n")
    assert cases[0].args == {"m": 256, "n": 512, "k": 1024, "l": 2, "seed": -5}
    assert cases[0].label == "256x512x1024x2"


@pytest.mark.parametrize("text", ["m: 128; n: 256; k: 256; l: 1.5", "m 128; n: 256; k: 256; l: 1", "m: 128; n: 256; k: 256", "# only a comment\n"])
def test_parser_rejects_bad_lines(text):
    with pytest.raises(ShapeFileError):
        parse_cases(text)


GOOD_LINE = "m: 128; n: 256; k: 256; l: 1; seed: 1"


@pytest.mark.parametrize("line, said", [
    ("m: 128; n: 256; k: 256; l: 1; sed: 1", "unknown key `sed` (a case has exactly m, n, k, l, seed)"),
    ("m: 128; n: 256; k: 256; l: 1", "lacks key `seed`"),
    ("m: 128; n: abc; k: 256; l: 1; seed: 1", "key `n`: 'abc' is not an integer"),
    ("m: 128; n: 256; k: 256; l: 1; seed: 1; m: 64", "key `m` given twice"),
])
def test_a_line_without_exactly_the_problems_integer_keys_is_named_with_its_file_line_and_key(line, said):
    with pytest.raises(ShapeFileError) as error:
        parse_cases(f"# sweep\n{GOOD_LINE}\n{line}\n", source="sweep.txt")
    assert str(error.value).startswith("sweep.txt:3: ")
    assert said in str(error.value)


BAD_LINES = ["m: 128; n: 256; k: 256; l: 1; sed: 1", "m: 128; n: 256; k: 256; l: 1", "m: 128; n: abc; k: 256; l: 1; seed: 1",
             "m: 128, n: 256, k: 256, l: 1, seed: 1", "m: 128; n: 256; k: 256; l: 1; seed: 1; m: 64"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from([GOOD_LINE, "# a comment", "", *BAD_LINES]), min_size=1, max_size=12))
def test_every_mistake_of_a_file_is_named_at_once_a_line_each(lines):
    """However many lines are wrong and wherever they are, one error names each, in the file's
    order, with its line number; a file without one parses."""
    wrong = [number for number, line in enumerate(lines, start=1) if line in BAD_LINES]
    text = "\n".join(lines) + "\n"
    if not wrong and GOOD_LINE in lines:
        assert len(parse_cases(text, source="many.txt")) == lines.count(GOOD_LINE)
        return
    if not wrong:
        with pytest.raises(ShapeFileError, match="many.txt: no cases"):
            parse_cases(text, source="many.txt")
        return
    with pytest.raises(ShapeFileError) as error:
        parse_cases(text, source="many.txt")
    said = str(error.value).splitlines()
    assert [int(line.split(":")[1]) for line in said] == wrong
    assert all(line.startswith(f"many.txt:{number}: ") for line, number in zip(said, wrong))


def test_another_problem_passes_its_own_keys():
    (case,) = parse_cases("m: 64; k: 7168; l: 1; seed: 3", case_format=CaseFormat(("m", "k", "l", "seed")))
    assert case.args == {"m": 64, "k": 7168, "l": 1, "seed": 3}
    with pytest.raises(ShapeFileError, match="unknown key `n`"):
        parse_cases(GOOD_LINE, case_format=CaseFormat(("m", "k", "l", "seed")))


def test_seed_combining_is_the_competitions_pairing():
    assert combine_seeds(1111, 0) == 1111 + 1111 * 1112 // 2
    assert combine_seeds(3, 4) == 3 + 7 * 8 // 2
    secret = 987654321
    (case,) = apply_secret_seed(parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1111"), secret)
    assert case.args["seed"] == 1111 + (1111 + secret) * (1112 + secret) // 2
    assert case.spec.endswith("seed: 1111")  # reported as written, like the official eval
    assert apply_secret_seed(official_cases("tests"), None) == official_cases("tests")


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_each_task_yml_lists_its_problems_tests_files(name):
    problem = PROBLEMS[name]
    assert taskfile.is_current(problem), f"stale: run `python -m harness task-yml --problem {name}`"
    yaml = pytest.importorskip("yaml", reason="pyyaml (a declared dependency) is needed to parse task.yml")
    task = yaml.safe_load(taskfile.path_of(problem).read_text())
    for which in ("tests", "benchmarks"):
        assert task[which] == [{key: list(value) if isinstance(value, tuple) else value for key, value in case.args.items()}
                               for case in problem.cases(which)]
    assert task["ranking_by"] == "geom"
    assert {"files", "lang", "description", "config"} <= set(task)


@pytest.mark.parametrize("name", ["nvfp4_gemm", "nvfp4_group_gemm"])
def test_task_yml_staleness_is_detected_and_writing_mends_it(name, tmp_path):
    problem = dataclasses.replace(PROBLEMS[name], folder=tmp_path)
    (tmp_path / "task.yml").write_text(taskfile.render(PROBLEMS[name]).replace('"seed": 1111}', '"seed": 1112}', 1))
    assert not taskfile.is_current(problem)
    taskfile.write(problem)
    assert taskfile.is_current(problem)
    assert (tmp_path / "task.yml").read_text() == taskfile.path_of(PROBLEMS[name]).read_text()


GROUPED = CaseFormat(keys=("m", "n", "k", "g", "seed"), list_keys=("m", "n", "k"), count_key="g")


def test_a_grouped_case_holds_a_list_per_size_one_entry_per_group():
    (case,) = parse_cases("m: [80, 176]; n: [4096, 4096]; k: (7168, 7168); g: 2; seed: 7", case_format=GROUPED)
    assert case.args == {"m": (80, 176), "n": (4096, 4096), "k": (7168, 7168), "g": 2, "seed": 7}
    assert case.label == "m80..176 n4096 k7168 g2"


@pytest.mark.parametrize("line, said", [
    ("m: [80, 176]; n: [4096]; k: [7168, 7168]; g: 2; seed: 7", "`g: 2` groups, but `m` lists 2, `n` lists 1, `k` lists 2"),
    ("m: 80; n: [4096]; k: [7168]; g: 1; seed: 7", "key `m`: '80' is not a list of integers"),
    ("m: [80, x]; n: [4096, 1]; k: [7168, 1]; g: 2; seed: 7", "key `m`: '[80, x]' is not a list of integers"),
    ("m: [80]; n: [4096]; k: [7168]; g: [1]; seed: 7", "key `g`: '[1]' is not an integer"),
])
def test_a_grouped_case_that_does_not_add_up_is_the_files_error(line, said):
    with pytest.raises(ShapeFileError, match=re.escape(said)):
        parse_cases(line, case_format=GROUPED)


@pytest.mark.parametrize("line, said", [
    ("m: 128, n: 256, k: 256, l: 1, seed: 1", "invalid test case: 'm: 128, n: 256, k: 256, l: 1, seed: 1' (fields are separated by `;`, not `,`"),
    ("m: 128; n: 256; k: 256; l: 1; seed: 1;", "invalid test case: 'm: 128; n: 256; k: 256; l: 1; seed: 1;' (a `;` ends the line"),
    ("m: 128;; n: 256; k: 256; l: 1; seed: 1", "(two `;` with nothing between them)"),
    ("m=128; n: 256; k: 256; l: 1; seed: 1", "at 'm=128' (a field is `key: value`, with a colon)"),
    ("m: 128; n: 256 k: 256; l: 1; seed: 1", "at 'n: 256 k: 256' (two fields with no `;` between them)"),
    ("m: 128; n: 256; k: 256; l: 1; seed: 1.5", "at 'seed: 1.5' (a value is an integer"),
])
def test_common_typos_get_a_hint_and_the_line_once(line, said):
    with pytest.raises(ShapeFileError) as raised:
        parse_cases(line, "cases.txt")
    message = str(raised.value)
    assert message.startswith("cases.txt:1: invalid test case: ") and said in message
    assert message.count(line) == 1 and "''" not in message


@pytest.mark.parametrize("name, line", [
    ("nvfp4_gemm", "m: 128; n: 256; k: 250; l: 1; seed: 1"),
    ("nvfp4_gemv", "m: 128; k: 250; l: 1; seed: 1"),
    ("nvfp4_dual_gemm", "m: 128; n: 256; k: 250; l: 1; seed: 1"),
    ("nvfp4_group_gemm", "m: [128, 64]; n: [256, 256]; k: [256, 250]; g: 2; seed: 1"),
])
def test_a_k_the_generator_cannot_scale_is_the_files_error_naming_the_constraint(name, line):
    """K comes in blocks of 16, one fp8 scale each (reference.py's sf_vec_size): 250 is the tests
    file's mistake, found as it is read, never a submission's failed case."""
    case_format = PROBLEMS[name].case_format
    with pytest.raises(ShapeFileError, match=re.escape("mine.txt:1: `k: 250` is not a multiple of 16 (one fp8 scale per "
                                                       "16 elements along K: reference.py's sf_vec_size)")):
        parse_cases(line, "mine.txt", case_format)
    (case,) = parse_cases(line.replace("250", "272"), "mine.txt", case_format)
    assert 272 in (case.args["k"] if name == "nvfp4_group_gemm" else (case.args["k"],))


def test_every_official_case_meets_its_problems_constraints():
    for problem in PROBLEMS.values():
        assert problem.cases("tests") and problem.cases("benchmarks")  # parsed with the constraints
