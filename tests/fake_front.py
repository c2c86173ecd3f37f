"""A service front (harness/service/serve.py `serve_until_stopped`) over judge processes of
tests/fake_judge.py: what the tests of restarts and signals kill and start again. With LANES
above one, each judge is a GPU's (the stand-in needs none) with LANES lanes, which start their
workers together between runs (harness/service/lanes.py).

    python tests/fake_front.py STORE PORT JUDGES [LANES]
"""

import sys
from pathlib import Path

from harness.results.store import Store
from harness.service.candidates import Candidates
from harness.service.front import Service
from harness.service.judges import LocalJudge
from harness.service.serve import serve_until_stopped

FAKE_JUDGE = str(Path(__file__).resolve().parent / "fake_judge.py")


def main() -> None:
    store, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    lanes = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    if lanes > 1:
        judges = [LocalJudge("cuda", visible_devices=str(gpu), lane=lane, lanes=lanes, program=(sys.executable, FAKE_JUDGE))
                  for gpu in range(count) for lane in range(lanes)]
    else:
        judges = [LocalJudge("cpu", slot=slot, program=(sys.executable, FAKE_JUDGE)) for slot in range(count)]
    service = Service(judges, Store(store), commit="fake", candidates=Candidates(store))
    serve_until_stopped(service, "127.0.0.1", port, announce=lambda text: print(text, file=sys.stderr, flush=True))


if __name__ == "__main__":
    main()
