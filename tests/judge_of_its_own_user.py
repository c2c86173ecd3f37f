"""The sandbox's probe (tests/test_sandbox.py `_probe`) with this process as the judge, a root
judge that changed to its own user first (harness/judge/judge_user.py), as a GPU judge does
before CUDA starts; a test process that stays root cannot be that judge itself.

    python tests/judge_of_its_own_user.py TMP_PATH DEVICE TARGETS_JSON

prints one JSON line: what `drop_root` refused, the judge's uids, the sandbox's layers and the
probe's findings. With DEVICE `--test` and TARGETS_JSON a test of tests/test_sandbox.py taking
(tmp_path, monkeypatch), it runs that test instead, as that judge, and prints its uids.
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from harness.judge import judge_user  # noqa: E402

refused = judge_user.drop_root()

import pytest  # noqa: E402
import test_sandbox  # noqa: E402

from harness.judge.sandbox import Sandbox  # noqa: E402

tmp_path, device = Path(sys.argv[1]), sys.argv[2]
if device == "--test":
    with pytest.MonkeyPatch.context() as patch:
        getattr(test_sandbox, sys.argv[3])(tmp_path, patch)
    print(json.dumps({"refused": refused, "uids": os.getresuid()}))
    sys.exit(0)
targets = {"judges_home": os.environ.get("HOME"), **json.loads(sys.argv[3])}
with pytest.MonkeyPatch.context() as patch:
    found = test_sandbox._probe(tmp_path, patch, device=device, **targets)
    sandbox = Sandbox(device, memory_bytes=targets.get("memory_bytes"))  # the probe's configuration, checked once
    sandbox.close()
print(json.dumps({"refused": refused, "uids": os.getresuid(), "layers": sandbox.layers,
                  "probe": {**dataclasses.asdict(found), "given": sorted(found.given)}}))
