"""The judge's watch over its own code: a write a worker could make shows, even once undone."""

import sys
from pathlib import Path

from harness.judge.integrity import HARNESS_ROOT, CodeWatch, watched_paths


def test_the_harness_sources_and_loaded_modules_are_watched():
    paths = {str(path) for path in watched_paths()}
    assert str(HARNESS_ROOT / "judge" / "cases.py") in paths
    assert sys.modules["harness.judge.integrity"].__file__ in paths


def test_a_file_written_and_restored_still_shows(tmp_path):
    reference = tmp_path / "reference.py"
    reference.write_text("def ref_kernel(data):\n    return data[-1]\n")
    watch = CodeWatch(extra=(reference,))
    assert watch.changed() == []
    original = reference.read_text()
    reference.write_text("def ref_kernel(data):\n    return 0\n")
    reference.write_text(original)
    assert watch.changed() == [str(reference)]


def test_a_pth_file_added_to_site_packages_shows(tmp_path, monkeypatch):
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    watch = CodeWatch()
    (site / "zz_submission.pth").write_text("import os\n")
    assert str(site) in watch.changed()


def test_a_modules_cached_bytecode_is_watched():
    import harness.judge.cases as cases

    assert cases.__cached__ in {str(path) for path in watched_paths()}


def test_bytecode_that_is_not_its_sources_compiled_form_shows(tmp_path, monkeypatch):
    import py_compile

    from harness.judge import integrity

    package = tmp_path / "harness"
    (package / "judge").mkdir(parents=True)
    source = package / "judge" / "verdicts.py"
    source.write_text("PASS = 'pass'\n")
    monkeypatch.setattr(integrity, "HARNESS_ROOT", package)
    watch = CodeWatch()
    honest = Path(py_compile.compile(str(source), doraise=True))  # as the first import writes it
    assert integrity.compiled_from_its_source(honest) and watch.changed() == []
    (tmp_path / "other.py").write_text("PASS = 'fail'\n")
    other = Path(py_compile.compile(str(tmp_path / "other.py"), doraise=True))
    # Other code under this source's header: the import would run it.
    honest.write_bytes(honest.read_bytes()[:16] + other.read_bytes()[16:])
    assert watch.changed() == [str(honest)]


def test_a_start_up_hook_that_appears_in_the_user_site_shows(tmp_path, monkeypatch):
    import site

    user_site = tmp_path / "user-site"
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(user_site))
    watch = CodeWatch()
    user_site.mkdir()
    (user_site / "usercustomize.py").write_text("import os\n")
    assert {str(user_site), str(user_site / "usercustomize.py")} <= set(watch.changed())


def test_a_pth_file_that_appears_in_the_user_site_of_the_judges_home_of_now_shows(tmp_path, monkeypatch):
    # A root judge that changed to its own user has a HOME of that user's, which the interpreters
    # it starts (torch.compile's workers) take their user site from; its own start read root's.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("PYTHONUSERBASE", raising=False)
    user_site = tmp_path / "home" / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    user_site.mkdir(parents=True)
    watch = CodeWatch()
    (user_site / "planted.pth").write_text("import os\n")
    assert str(user_site) in watch.changed()


def test_a_watch_kept_across_runs_is_stamped_again_once_a_module_loads_and_shows_a_change_between_runs(tmp_path, monkeypatch):
    """The service's judge keeps its watch from run to run (harness/judge/modes.py
    KeptCodeWatches): the same stamps while nothing was loaded, new ones that watch a module
    loaded since, and a file changed between two runs shows at the next run's check."""
    import importlib

    from harness.judge.modes import KeptCodeWatches
    from harness.problems import PROBLEMS

    problem = PROBLEMS["nvfp4_gemm"]
    kept = KeptCodeWatches()
    first = kept.watch(problem)
    assert kept.watch(problem) is first
    module = tmp_path / "kept_watch_module.py"
    module.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "kept_watch_module", raising=False)
    importlib.import_module("kept_watch_module")
    second = kept.watch(problem)
    assert second is not first and str(module) not in first.changed()
    assert kept.watch(problem) is second and second.changed() == []
    module.write_text("VALUE = 2\n")
    assert str(module) in kept.watch(problem).changed()
