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


def test_a_modules_cached_bytecode_and_its_folder_are_watched():
    import harness.judge.cases as cases

    paths = {str(path) for path in watched_paths()}
    assert cases.__cached__ in paths
    assert str(Path(cases.__cached__).parent) in paths
