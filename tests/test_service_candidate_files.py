"""Which files a candidate sent by `path` may be (harness/service/candidate_files.py): those
under the folders the service was started with, whatever path a client chooses (symbolic links
in and out, `..`, absolute, NUL, very long, names that are not UTF-8), links swapped while the
front reads, and the bytes judged being the bytes hashed."""

import hashlib
import itertools
import json
import os
import threading
import time
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.service.candidate_files import NO_FOLDERS, CandidateFiles

SECRET = "secret-line: a file only the service's own user may read\n"
NOT_UTF8_NAME = os.fsdecode(b"caf\xe9.py")
ALLOWED = {"ok.py": "# ok\n", "sub/inner.py": "# inner\n", NOT_UTF8_NAME: "# a name that is not UTF-8\n"}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """root/candidates: the service's folder, with links in and out of it; root/outside: files the
    service's user may read and a client must not."""
    root = tmp_path_factory.mktemp("tree")
    candidates, outside = root / "candidates", root / "outside"
    (candidates / "sub").mkdir(parents=True)
    outside.mkdir()
    for name, text in ALLOWED.items():
        (candidates / name).write_text(text)
    for name in ("secret.py", "inner.py", "ok.py"):
        (outside / name).write_text(SECRET)
        (outside / name).chmod(0o600)
    (candidates / "link_in").symlink_to("ok.py")
    (candidates / "link_out").symlink_to(outside / "secret.py")
    (candidates / "dir_out").symlink_to(outside)
    (candidates / "sub" / "up").symlink_to("..")
    (candidates / "root_link").symlink_to("/")
    (candidates / "loop").symlink_to("loop")
    os.mkfifo(candidates / "fifo")
    return root


def read(tree: Path, path: str, max_bytes: int = 1000) -> str:
    return CandidateFiles([tree / "candidates"], max_bytes).read(path)


@pytest.mark.parametrize("path, expected", [
    ("ok.py", "# ok\n"), ("{candidates}/ok.py", "# ok\n"), ("{candidates}//sub/./inner.py", "# inner\n"),
    ("link_in", "# ok\n"), ("sub/up/ok.py", "# ok\n"), (NOT_UTF8_NAME, ALLOWED[NOT_UTF8_NAME]),
])
def test_a_file_under_the_folder_is_read(tree, path, expected):
    assert read(tree, path.format(candidates=tree / "candidates")) == expected


@pytest.mark.parametrize("path, why", [
    ("{outside}/secret.py", "must lie under"), ("link_out", "must lie under"), ("dir_out/secret.py", "must lie under"),
    ("root_link/etc/hostname", "must lie under"), ("../outside/secret.py", "`..`"), ("sub/../ok.py", "`..`"),
    ("{candidates}/../outside/secret.py", "`..`"), ("/etc/hostname", "must lie under"), ("ok.py\0", "NUL"), ("", "non-empty"),
    ("fifo", "regular file"), ("sub", "regular file"), ("loop", "cannot be read"), ("missing.py", "cannot be read"),
    ("x" * 5000, "cannot be read"), ("a/" * 3000 + "ok.py", "cannot be read"),
])
def test_a_path_outside_the_folder_or_no_file_is_refused_naming_why(tree, path, why):
    with pytest.raises(ValueError, match=why) as refused:
        read(tree, path.format(candidates=tree / "candidates", outside=tree / "outside"))
    assert SECRET not in str(refused.value)


def test_without_a_folder_every_path_is_refused_naming_the_option(tree):
    with pytest.raises(ValueError, match="--candidates-dir") as refused:
        CandidateFiles([], 1000).read(str(tree / "candidates" / "ok.py"))
    assert str(refused.value) == NO_FOLDERS


def test_a_file_over_the_limit_or_not_utf8_is_refused(tree, tmp_path):
    (tmp_path / "big.py").write_text("x" * 1001)
    (tmp_path / "latin.py").write_bytes(b"# caf\xe9\n")
    files = CandidateFiles([tmp_path], 1000)
    with pytest.raises(ValueError, match="over 1000 bytes"):
        files.read("big.py")
    with pytest.raises(ValueError, match="UTF-8"):
        files.read("latin.py")


COMPONENTS = st.one_of(st.sampled_from(["ok.py", "sub", "inner.py", "link_in", "link_out", "dir_out", "secret.py", "up", "root_link",
                                        "loop", "fifo", "..", ".", "", "candidates", "outside", "etc", "hostname", NOT_UTF8_NAME]),
                       st.text(max_size=12))
PREFIXES = st.sampled_from(["", "/", "//", "{candidates}/", "{root}/", "{outside}/", "{candidates}/../"])
PATHS = st.one_of(st.builds(lambda prefix, parts: prefix + "/".join(parts), PREFIXES, st.lists(COMPONENTS, max_size=6)),
                  st.text(max_size=300), st.text(alphabet="a/.", min_size=4000, max_size=5000))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=PATHS)
def test_no_path_a_client_chooses_reads_a_file_outside_the_folder(tree, path):
    path = path.replace("{candidates}", str(tree / "candidates")).replace("{root}", str(tree)).replace("{outside}", str(tree / "outside"))
    try:
        text = read(tree, path)
    except ValueError as refused:
        assert SECRET not in str(refused)
        return
    assert text in ALLOWED.values(), path
    assert ".." not in PurePosixPath(path).parts and "\0" not in path


def test_a_link_swapped_while_the_front_reads_never_reads_outside(tree):
    """A local user flips a link in the folder between a file inside and one outside, and a
    folder between a real one and a link out, as fast as it can, while the front reads both:
    the front reads the file inside or refuses, never the one outside."""
    candidates, outside = tree / "candidates", tree / "outside"
    (candidates / "flipping").mkdir()
    (candidates / "flipping" / "inner.py").write_text("# inner\n")
    stop, seen = threading.Event(), {"accepted": 0, "refused": 0}

    def flip():
        for turn in itertools.count():
            if stop.is_set():
                break
            temporary = candidates / "flip.tmp"
            temporary.symlink_to(outside / "ok.py" if turn % 2 else "ok.py")
            os.replace(temporary, candidates / "flip")
            os.rename(candidates / "flipping", candidates / "parked")
            (candidates / "flipping").symlink_to(outside)
            os.unlink(candidates / "flipping")
            os.rename(candidates / "parked", candidates / "flipping")

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for path in ("flip", "flipping/inner.py", "flipping/ok.py"):
                try:
                    text = read(tree, path)
                except ValueError:
                    seen["refused"] += 1
                    continue
                assert text in ("# ok\n", "# inner\n"), (path, text)
                seen["accepted"] += 1
    finally:
        stop.set()
        flipper.join(10)
    assert seen["accepted"] and seen["refused"], seen


fastapi = pytest.importorskip("fastapi", reason="the service's API needs the `service` extra (pip install '.[service]')")
from fastapi.testclient import TestClient  # noqa: E402

from harness.service.app import create_app  # noqa: E402
from harness.service.front import Service  # noqa: E402
from tests.test_service import ONE_CASE, RecordingJudge  # noqa: E402


@pytest.fixture
def served(tree):
    judge = RecordingJudge()
    judge.release.clear()  # nothing is judged: what the front accepted stays in its queue
    service = Service([judge], None, commit="abc123", candidate_dirs=[tree / "candidates"])
    yield judge, service, TestClient(create_app(service))
    judge.release.set()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=PATHS)
def test_no_request_gets_a_file_outside_the_folder_into_the_queue_or_a_reply(tree, served, path):
    judge, service, client = served
    path = path.replace("{candidates}", str(tree / "candidates")).replace("{root}", str(tree)).replace("{outside}", str(tree / "outside"))
    # As JSON escapes it: a name that is not UTF-8 reaches the service as a lone surrogate.
    body = json.dumps({"path": path, "tests": ONE_CASE})
    response = client.post("/candidates", content=body, headers={"content-type": "application/json"})
    assert response.status_code in (200, 422) and "secret-line" not in response.text, response.text
    if response.status_code == 200:
        row = service.candidates.get(response.json()["id"])
        assert row["request"]["source"] in ALLOWED.values(), path


def test_the_bytes_judged_are_the_bytes_hashed_whatever_the_file_holds_later(tmp_path):
    judge = RecordingJudge()
    judge.release.clear()
    service = Service([judge], None, commit="abc123", candidate_dirs=[tmp_path])
    service.start()
    try:
        client = TestClient(create_app(service))
        (tmp_path / "candidate.py").write_text("# first\n")
        identifier = client.post("/candidates", json={"path": "candidate.py", "tests": ONE_CASE}).json()["id"]
        (tmp_path / "candidate.py").write_text("# wrong: written after the request\n")
        judge.release.set()
        found = client.get(f"/candidates/{identifier}", params={"wait": 30}).json()
        assert found["state"] == "done" and found["passed"] is True, found
        assert [request["source"] for request in judge.requests] == ["# first\n"]
        assert found["sha256"] == hashlib.sha256(b"# first\n").hexdigest() and found["name"] == "candidate.py"
    finally:
        service.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(alphabet="abcdefghij_.", min_size=1, max_size=12).filter(lambda name: name not in (".", "..")),
       target=st.sampled_from(["secret.py", "inner.py", "ok.py"]), through_sub=st.booleans())
def test_a_hard_link_in_the_folder_to_a_file_outside_is_refused(tree, name, target, through_sub):
    """A local user who may write in the folder links a file outside into it (where the kernel
    lets them: fs.protected_hardlinks off, or a file they may read and write): the kernel names
    the open file by the name inside, so only the count of its names tells; the front refuses a
    file with another name."""
    folder = tree / "candidates" / ("sub" if through_sub else "")
    link = folder / f"hard_{name}"
    os.link(tree / "outside" / target, link)
    try:
        with pytest.raises(ValueError, match="other name") as refused:
            read(tree, str(link.relative_to(tree / "candidates")))
        assert SECRET not in str(refused.value)
    finally:
        link.unlink()
