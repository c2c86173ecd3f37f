"""A root judge's own user (harness/judge/judge_user.py): the change, what it keeps, and what its
operator's setting may name. The change cannot be undone, so each run is a process of its own."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.judge import judge_user
from harness.judge.layers import LAYERS_OFF_ENV

ROOT = sys.platform.startswith("linux") and os.geteuid() == 0
NEEDS_ROOT = pytest.mark.skipif(not ROOT, reason="a judge changes to a user of its own only where it is root")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _judge(program: str, **environment) -> dict:
    """`program` run after `drop_root` in a process of its own, which prints one JSON line."""
    prologue = textwrap.dedent(f"""
        import json, os, subprocess, sys
        sys.path.insert(0, {REPO!r})
        from harness.judge import judge_user
        refused = judge_user.drop_root()
        def capabilities(status):
            fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
            return {{name: int(fields[name], 16) for name in ("CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd")}}
    """)
    ran = subprocess.run([sys.executable, "-c", prologue + textwrap.dedent(program)], capture_output=True, text=True,
                         timeout=120, env={**os.environ, LAYERS_OFF_ENV: "", judge_user.JUDGE_USER_ENV: "", **environment})
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def _judge_with_folders_on_its_path(tmp_path, closed: list[str], entries: list[str], device: str = "cuda"):
    """`python -m harness test` on `device` as a root judge whose import path holds `entries`
    (folders under tmp_path, those in `closed` of mode 0700, the rest 0755)."""
    for entry in entries:
        (tmp_path / entry).mkdir(parents=True, exist_ok=True)
        (tmp_path / entry).chmod(0o700 if entry in closed else 0o755)
    submission = Path(REPO) / "tests" / "fixtures" / "problems" / "nvfp4_gemm_torch.py"
    return subprocess.run([sys.executable, "-m", "harness", "test", "--submission", str(submission), "--device", device],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, LAYERS_OFF_ENV: "", judge_user.JUDGE_USER_ENV: "",
                               "PYTHONPATH": os.pathsep.join(str(tmp_path / entry) for entry in entries)})


@NEEDS_ROOT
def test_a_root_judge_changes_to_its_own_user_keeping_only_the_capabilities_its_work_takes(tmp_path):
    found = _judge(f"""
        status = capabilities(open("/proc/self/status").read())
        executed = capabilities(subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout)
        with judge_user.files_of_root():
            open({str(tmp_path / "root.txt")!r}, "w").close()
        open({str(tmp_path / "own.txt")!r}, "w").close()
        after = capabilities(open("/proc/self/status").read())
        child = os.fork()
        if child == 0:
            judge_user.regain_root()
            os._exit(0 if os.getresuid() == (0, 0, 0) else 1)
        print(json.dumps({{"refused": refused, "uids": os.getresuid(), "gids": os.getresgid(), "groups": os.getgroups(),
                          "status": status, "executed": executed, "after": after, "regained": os.waitpid(child, 0)[1] == 0,
                          "commit": os.environ.get("HARNESS_COMMIT"),
                          "processes": __import__("resource").getrlimit(__import__("resource").RLIMIT_NPROC)}}))
    """)
    uid, gid = judge_user.judge_ids()
    assert found["refused"] is None
    assert found["uids"] == [uid] * 3 and found["gids"] == [gid] * 3 and found["groups"] == []
    kept = sum(1 << judge_user.CAPABILITY_NUMBERS[name] for name in judge_user.KEPT_CAPABILITIES)
    status = found["status"]
    assert status["CapEff"] == status["CapPrm"] == kept & status["CapBnd"] != 0
    assert status["CapInh"] == status["CapAmb"] == 0
    # What it runs (git, ldconfig, kernelguard's interpreter) runs as its uid with no capability.
    assert found["executed"]["CapEff"] == found["executed"]["CapPrm"] == 0
    assert found["after"] == status, "the files made as root cost the judge no capability"
    assert (tmp_path / "root.txt").stat().st_uid == 0 and (tmp_path / "own.txt").stat().st_uid == uid
    assert found["regained"] and found["commit"]
    import resource

    soft, hard = found["processes"]
    assert soft == hard and hard >= resource.getrlimit(resource.RLIMIT_NPROC)[1], "its uid's process limit at its highest"


@NEEDS_ROOT
def test_a_root_judge_changes_by_default_to_the_dedicated_uid_that_no_account_holds():
    found = _judge('print(json.dumps({"refused": refused, "uids": os.getresuid(), "gids": os.getresgid()}))')
    assert found == {"refused": None, "uids": [judge_user.DEDICATED_ID] * 3, "gids": [judge_user.DEDICATED_ID] * 3}
    import pwd

    with pytest.raises(KeyError):
        pwd.getpwuid(judge_user.DEDICATED_ID)  # no account of this machine holds it: a uid of the judge's alone


@NEEDS_ROOT
def test_a_judge_of_its_own_uid_has_a_home_and_a_name_of_its_own_where_root_had_none_to_give():
    # As a service's judge may start: root's HOME, USER and LOGNAME, or none.
    found = _judge("""
        import getpass, pathlib, stat
        home = pathlib.Path(os.path.expanduser("~"))
        (home / ".cache" / "library").mkdir(parents=True)  # a library's cache under ~, as torch's and triton's
        print(json.dumps({"home": str(home), "mode": stat.S_IMODE(home.stat().st_mode), "owner": home.stat().st_uid,
                          "user": getpass.getuser(), "uid": os.getuid(), "xdg": os.environ.get("XDG_CACHE_HOME")}))
    """, HOME="/root", USER="root", LOGNAME="root", XDG_CACHE_HOME="/root/.cache")
    assert found["home"] != "/root" and found["owner"] == found["uid"] == judge_user.DEDICATED_ID
    assert found["mode"] == 0o700 and found["xdg"] is None
    assert found["user"] == f"nvfp4-judge-{judge_user.DEDICATED_ID}"
    assert not os.path.exists(found["home"]), "the judge's home is removed when it ends"
    bare = {name: value for name, value in os.environ.items() if name not in ("HOME", "USER", "LOGNAME")}
    ran = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {REPO!r}); "
                          "from harness.judge import judge_user; judge_user.drop_root(); import getpass, os; "
                          "print(getpass.getuser(), os.path.expanduser('~'))"],
                         capture_output=True, text=True, timeout=120,
                         env={**bare, LAYERS_OFF_ENV: "", judge_user.JUDGE_USER_ENV: ""})
    assert ran.returncode == 0, ran.stderr[-2000:]
    user, home = ran.stdout.split()
    assert user == f"nvfp4-judge-{judge_user.DEDICATED_ID}" and home.startswith(tempfile.gettempdir())


@NEEDS_ROOT
@pytest.mark.parametrize("setting", ["root", "0", "no-such-user-of-this-system"])
def test_a_judge_user_that_is_root_or_unknown_is_refused_and_named_and_the_judge_stays_root(setting):
    found = _judge('print(json.dumps({"refused": refused, "uid": os.geteuid(), "listed": judge_user.refused()}))',
                   **{judge_user.JUDGE_USER_ENV: setting})
    assert found["uid"] == 0 and found["refused"] and found["listed"] == [found["refused"]]
    assert judge_user.JUDGE_USER_ENV in found["refused"]


@NEEDS_ROOT
@pytest.mark.parametrize(("closed", "entries", "named"), [
    (["archive"], ["archive"], "archive"),  # an archive's own folder of mode 0700 on the import path
    (["kit/inner"], ["kit", "kit/inner"], "kit/inner"),  # a closed folder inside a bound one
])
def test_a_root_judge_whose_user_cannot_read_a_folder_of_the_import_path_refuses_to_start_naming_it(tmp_path, closed, entries,
                                                                                                     named):
    """The workers of the judge's own user would fail to import from it: no verdict, one line
    naming the folder and the fix, the infrastructure's exit status; nothing judged."""
    from harness.judge.exits import EXIT_INFRASTRUCTURE

    ran = _judge_with_folders_on_its_path(tmp_path, closed, entries)
    assert ran.returncode == EXIT_INFRASTRUCTURE, ran.stdout + ran.stderr
    lines = [line for line in ran.stderr.splitlines() if str(tmp_path / named) in line]
    assert len(lines) == 1 and "cannot read" in lines[0] and "chmod" in lines[0] and judge_user.JUDGE_USER_ENV in lines[0], ran.stderr
    assert "test 0" not in ran.stdout


@NEEDS_ROOT
def test_a_folder_open_to_all_under_a_closed_parent_lets_the_judge_change_user(tmp_path):
    """Above the folders it binds the worker's root holds folders anyone may cross: a closed parent
    on the host (/root, pytest's own 0700 folder) is no reason to refuse."""
    from harness.judge.worker_root import unreadable_by

    (tmp_path / "closed" / "open").mkdir(parents=True)
    (tmp_path / "closed").chmod(0o700)
    (tmp_path / "closed" / "open").chmod(0o755)
    assert unreadable_by(judge_user.DEDICATED_ID, judge_user.DEDICATED_ID, [str(tmp_path / "closed" / "open")]) == []
    (tmp_path / "closed" / "open").chmod(0o750)
    assert unreadable_by(judge_user.DEDICATED_ID, judge_user.DEDICATED_ID,
                         [str(tmp_path / "closed" / "open")]) == [str(tmp_path / "closed" / "open")]


@NEEDS_ROOT
def test_a_services_judge_that_cannot_read_its_import_path_says_it_cannot_start():
    """The service's judge process ends before its ready line with the infrastructure's status
    and one line naming the folder (the front shows it: harness/service/serve.py)."""
    from harness.judge.exits import EXIT_INFRASTRUCTURE

    with tempfile.TemporaryDirectory(dir=REPO) as folder:  # a folder no pytest parent of mode 0700 holds
        os.chmod(folder, 0o700)
        ran = subprocess.run([sys.executable, "-m", "harness.service.judge", "--device", "cuda"], capture_output=True, text=True,
                             timeout=300, cwd=REPO, stdin=subprocess.DEVNULL,
                             env={**os.environ, LAYERS_OFF_ENV: "", judge_user.JUDGE_USER_ENV: "", "PYTHONPATH": folder})
    assert ran.returncode == EXIT_INFRASTRUCTURE and ran.stdout == "", ran.stderr
    assert [line for line in ran.stderr.splitlines() if "cannot start" in line and folder in line], ran.stderr


@NEEDS_ROOT
def test_the_user_layer_switched_off_keeps_the_judge_root():
    found = _judge('print(json.dumps({"refused": refused, "uid": os.geteuid()}))', **{LAYERS_OFF_ENV: "user"})
    assert found == {"refused": None, "uid": 0}


@settings(max_examples=200, deadline=None)
@given(setting=st.one_of(st.text(max_size=12), st.integers(min_value=0, max_value=2**32).map(str),
                         st.sampled_from(["root", "0", "00", " 0 ", "nobody", "daemon"])))
def test_no_setting_of_the_judge_user_names_root(setting):
    """Whatever the operator's setting holds, the judge's own user is never root: ids of an
    unprivileged user, or ValueError naming the setting."""
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(judge_user.JUDGE_USER_ENV, setting.replace("\x00", ""))  # no NUL in an environment
            uid, gid = judge_user.judge_ids()
    except ValueError as error:
        assert judge_user.JUDGE_USER_ENV in str(error)
        return
    assert uid != 0 and gid != 0
