"""The front's cancel path (harness/service/front.py `cancel`) under cancels a client chooses: ids
never submitted, cancels racing the judge's reply, many cancels of one candidate in a row. Nothing
answers 500 or stops the front, and every candidate accepted ends once, `done` or `cancelled`,
judged at most once."""

import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the service's API needs the `service` extra (pip install '.[service]')")
from fastapi.testclient import TestClient  # noqa: E402

from harness.service.app import create_app  # noqa: E402
from harness.service.front import Service  # noqa: E402
from tests.test_service import ONE_CASE, RecordingJudge  # noqa: E402


class CancellableJudge(RecordingJudge):
    """A stand-in judge whose run ends when the front cancels it, or after `hold_s`, or at random
    in between (a reply racing the cancel)."""

    def __init__(self, hold_s: float):
        super().__init__()
        self.hold_s, self.cancels, self.ids = hold_s, [], []
        self._cancelled = threading.Event()
        self._running = None

    def judge(self, request):
        self.ids.append(request["id"])
        self._running = request["id"]
        self._cancelled.clear()
        self._cancelled.wait(self.hold_s)
        self._running = None
        return super().judge(request)

    def cancel(self, candidate_id):
        self.cancels.append(candidate_id)
        if self._running == candidate_id:
            self._cancelled.set()
            return True
        return False


ACTIONS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.booleans()),
    st.tuples(st.just("cancel"), st.integers(0, 8)),          # the n-th candidate accepted, where it is
    st.tuples(st.just("cancel_unknown"), st.sampled_from(["c999", "c0", "x", "c01", "c" + "9" * 18, "c" + "9" * 30, "%00"])),
    st.tuples(st.just("cancel_burst"), st.integers(0, 8)),
    st.tuples(st.just("sleep"), st.sampled_from([0.0, 0.01, 0.05])),
), min_size=1, max_size=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(actions=ACTIONS, hold_s=st.sampled_from([0.0, 0.02, 0.2]))
def test_every_candidate_accepted_ends_once_whatever_cancels_come(actions, hold_s):
    judge = CancellableJudge(hold_s)
    service = Service([judge], None, commit="abc123")
    service.start()
    try:
        client = TestClient(create_app(service))
        accepted = []
        for action, argument in actions:
            if action == "submit":
                response = client.post("/candidates", json={"source": "# wrong\n" if argument else "# ok\n", "tests": ONE_CASE})
                assert response.status_code == 200, response.text
                accepted.append(response.json()["id"])
            elif action in ("cancel", "cancel_burst") and accepted:
                identifier = accepted[argument % len(accepted)]
                for _ in range(5 if action == "cancel_burst" else 1):
                    response = client.delete(f"/candidates/{identifier}")
                    assert response.status_code == 200, response.text
                    assert response.json()["state"] in ("queued", "running", "done", "cancelled")
            elif action == "cancel_unknown":
                response = client.delete(f"/candidates/{argument}")
                assert response.status_code == 404, response.text
            elif action == "sleep":
                time.sleep(argument)
        for identifier in accepted:
            found = client.get(f"/candidates/{identifier}", params={"wait": 30}).json()
            assert found["state"] in ("done", "cancelled"), found
            if found["state"] == "done":
                assert found["error_class"] is not None and found["passed"] is not None, found
        assert service.healthy() and client.get("/health").status_code == 200
        assert sorted(judge.ids) == sorted(set(judge.ids)), judge.ids  # none judged twice
        assert set(judge.ids) <= set(accepted)
        counts = service.candidates.counts()
        assert counts.get("queued", 0) == counts.get("running", 0) == 0, counts
        assert not service._cancelled, service._cancelled  # no cancel left for an id that ended
    finally:
        judge.release.set()
        service.close()
