"""The service on one GPU: one judge alive across candidates in turn (honest files, and cheats
that leave something behind for the next candidate), each verdict printed beside the expected.

    python experiments/service_smoke/run.py
"""

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.service.front import Service  # noqa: E402
from harness.service.judges import LocalJudge  # noqa: E402

TESTS = "m: 128; n: 256; k: 512; l: 2; seed: 1111\nm: 256; n: 512; k: 256; l: 1; seed: 7\n"
FIXTURES = ROOT / "tests" / "fixtures"
# (file, whether it passes): the honest file between the cheats shows nothing of theirs reached it.
PLAN = [("torch_submission.py", True), ("cheat_patches_the_judge.py", False), ("cheat_leaves_a_file_in_dev_shm.py", True),
        ("torch_submission.py", True), ("cheat_truncates_its_inputs.py", True), ("torch_submission.py", True)]


def main() -> None:
    service = Service([LocalJudge("cuda")], candidate_dirs=[FIXTURES])
    service.start()
    try:
        for name, should_pass in PLAN:
            started = time.monotonic()
            view = service.get(service.submit(path=str(FIXTURES / name), mode="test", tests=TESTS, rerun=True), wait_s=600)
            cases = (view["document"] or {}).get("cases") or []
            print(f"{Path(name).stem:40s} passed={view['passed']} expected={should_pass} exit={view['exit_status']} "
                  f"{time.monotonic() - started:5.1f} s  {[(case.get('status'), (case.get('message') or '')[:90]) for case in cases][:2]}",
                  flush=True)
        print("judge status:", [judge.status() for judge in service.judges])
    finally:
        service.close()


if __name__ == "__main__":
    main()
