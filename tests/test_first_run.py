"""`make b200-first-run`'s pieces on the host: what it times, the literal it writes into
submission.py, the refit of the model to measured times, the table it prints and the ncu
output it reads. The flow itself needs a GPU (docs/b200-first-run.md)."""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import submission as sub
from harness.b200 import calibration, first_run, model

SHAPES = model.BENCHMARK_SHAPES


def _load(path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "x".join(map(str, shape)))
def test_every_configuration_a_benchmark_can_run_is_timed(shape):
    """The chosen configuration and every rung of its ladder among the candidates, each once;
    nothing the kernel lacks (share-K, more than two splits)."""
    configs = first_run.sm100_candidates(shape)
    assert len(set(configs)) == len(configs)
    problem = sub.Problem(*shape)
    assert {config for _, config in sub.sm100_ladder(problem)} <= set(configs)
    assert sub.sm100_config(problem) == configs[0] or sub.sm100_config(problem) in configs
    assert all(config.split_k <= 2 for config in configs)
    assert any(config.pdl for config in configs) and any(not config.pdl for config in configs)


_CONFIGS = st.builds(
    lambda mma_n, split_k, pdl, two: sub.Sm100Config(
        mma_n, split_k, sub.Sm100Config.max_stages(mma_n, 2 if two and mma_n == 64 else 1), pdl=pdl,
        ctas_per_sm=2 if two and mma_n == 64 else 1),
    st.sampled_from([64, 128]), st.integers(1, 4), st.booleans(), st.booleans())


@settings(max_examples=20, deadline=None)
@given(st.lists(_CONFIGS, min_size=3, max_size=3))
def test_the_written_literal_is_what_the_submission_then_holds(tmp_path_factory, configs):
    target = tmp_path_factory.mktemp("first-run") / "submission.py"
    shutil.copyfile(first_run.SUBMISSION, target)
    table = {sub.Problem(*shape): config for shape, config in zip(SHAPES, configs)}
    first_run.write_table(target, table, "NVIDIA B200, 2026-12-02, at abc1234")
    first_run.write_table(target, table, "NVIDIA B200, 2026-12-02, at abc1234")  # again: still one
    text = target.read_text()
    assert text.count(f"{first_run.TABLE_NAME} = {{") == 1 and text.count(first_run.GENERATED) == 1
    written = _load(target, "written_submission")
    # The loaded module's classes are its own: compared by their fields.
    assert {tuple(problem): (type(config).__name__, dataclasses.astuple(config))
            for problem, config in written.SM100_BENCHMARK_CONFIGS.items()} == \
        {tuple(problem): ("Sm100Config", dataclasses.astuple(config)) for problem, config in table.items()}
    # Nothing else moved: the file is the original with the literal replaced.
    original = first_run.SUBMISSION.read_text()
    assert text.replace(first_run.config_literal(table, "NVIDIA B200, 2026-12-02, at abc1234"), "") == \
        first_run._LITERAL.sub("", original)


def test_a_file_without_the_literal_is_refused(tmp_path):
    target = tmp_path / "other.py"
    target.write_text("x = 1\n")
    with pytest.raises(ValueError, match="0 SM100_BENCHMARK_CONFIGS literals"):
        first_run.write_table(target, {}, "note")


def test_the_fastest_measured_configuration_of_each_shape_is_chosen():
    a, b = first_run.sm100_candidates(SHAPES[0])[:2]
    rows = [first_run.Measured(SHAPES[0], a, 20.0, 14.0), first_run.Measured(SHAPES[0], b, 18.5, 15.0),
            first_run.Measured(SHAPES[1], a, None, 5.0, note="RuntimeError: no"),
            first_run.Measured(SHAPES[1], b, 9.0, 6.0)]
    assert first_run.fastest(rows) == {SHAPES[0]: b, SHAPES[1]: b}


def _rows(constants: model.Constants) -> list:
    return [first_run.Measured(shape, config, first_run.sm100_modelled_us(config, shape, constants), 0.0)
            for shape in SHAPES for config in first_run.sm100_candidates(shape)]


def _measured_error(rows, constants) -> float:
    return sum((first_run.sm100_modelled_us(row.config, row.shape, constants) / row.measured_us - 1) ** 2
               for row in rows)


def test_times_the_model_predicts_leave_its_constants_as_they_are():
    assert first_run.refit(_rows(model.FITTED)) == calibration.fit()


def test_the_refit_moves_the_constants_toward_what_was_measured():
    """Times measured as another constant set predicts them: the refit fits them better than
    the recorded constants do, and moves each constant the measured times pull on."""
    truth = model.Constants(launch_s=2.0e-6, latency_s=1.6e-6, ingest_bytes_per_s=90e9, dram_efficiency=0.85)
    rows = _rows(truth)
    refitted = first_run.refit(rows)
    assert refitted != model.FITTED
    assert _measured_error(rows, refitted) < _measured_error(rows, model.FITTED) / 4
    assert refitted.ingest_bytes_per_s < model.FITTED.ingest_bytes_per_s
    # Rows that could not run pull on nothing.
    assert first_run.refit([row._replace(measured_us=None) for row in rows]) == calibration.fit()


def test_the_table_shows_measured_beside_modelled_and_the_chosen_one():
    config = sub.sm100_config(sub.Problem(*SHAPES[2]))
    other = sub.sm100_plain_config()
    rows = [first_run.Measured(SHAPES[2], config, 4.25, 3.62), first_run.Measured(SHAPES[2], other, None, 6.0,
                                                                                   note="ValueError: refused")]
    console = Console(width=250, record=True)
    console.print(first_run.report(rows, [3.9, None], {SHAPES[2]: config}))
    text = console.export_text()
    (chosen,) = [line for line in text.splitlines() if "2 CTAs an SM" in line]
    assert "4.25" in chosen and "3.62" in chosen and "3.90" in chosen and "yes" in chosen
    (failed,) = [line for line in text.splitlines() if "6 stages" in line]
    assert "ValueError: refused" in failed and "6.00" in failed


def test_ncu_csv_is_read_from_its_last_launch():
    text = ('==PROF== Connected to process 1\n'
            '"ID","Kernel Name","launch__occupancy_limit_registers","launch__occupancy_limit_shared_mem",'
            '"launch__shared_mem_config_size","launch__occupancy_limit_warps"\n'
            '"","","block","block","Kbyte","block"\n'
            '"0","kernel_a","2","1","233.47","10"\n'
            '"1","kernel_b","2","2","200.70","10"\n')
    assert first_run.parse_ncu_csv(text) == {
        "launch__occupancy_limit_registers": "2", "launch__occupancy_limit_shared_mem": "2",
        "launch__shared_mem_config_size": "200.70", "launch__occupancy_limit_warps": "10"}
    assert first_run.parse_ncu_csv("==ERR== no kernels were profiled\n") == {}


def test_the_screened_rungs_are_the_timed_configurations_in_order(monkeypatch):
    """The trial process screens rung `number` as the configuration the first run then times
    as number `number`: both lists come from `candidates`."""
    import torch

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: type("Properties", (), {"multi_processor_count": sub.SM100_NUM_SMS}))
    built = []
    monkeypatch.setattr(first_run.Sm100Candidates, "launch_plan",
                        classmethod(lambda cls, problem, device, config: built.append(config) or config))
    for shape in SHAPES:
        timed = [config for config, _ in first_run.Sm100Candidates.candidates(shape, sub.SM100_NUM_SMS)]
        rungs = first_run.Sm100Candidates.rungs(sub.Problem(*shape), torch.device("cpu"))
        assert [rung.name for rung in rungs] == [config.describe() for config in timed]
        assert [rung.build() for rung in rungs] == timed and built[-len(timed):] == timed
        assert len({rung.traits for rung in rungs}) == len(rungs)  # a failure passes over no other
    assert first_run.Sm100Candidates.TRIAL_IN_CHILD and first_run.StandInCandidates.TRIAL_IN_CHILD


def test_the_candidate_classes_are_importable_by_name_when_the_flow_runs_as_a_script():
    """`python -m harness.b200.first_run` runs `main` from the module imported by its own name,
    so that the trial process finds the candidate classes there."""
    import subprocess

    program = ("import runpy, sys; sys.argv = ['b200_first_run', '--help']\n"
               "try:\n    runpy.run_module('harness.b200.first_run', run_name='__main__')\n"
               "except SystemExit:\n    pass\n"
               "module = sys.modules['harness.b200.first_run']\n"
               "print(module.Sm100Candidates.__module__, module.StandInCandidates.__qualname__)")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=first_run.ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "harness.b200.first_run StandInCandidates"
