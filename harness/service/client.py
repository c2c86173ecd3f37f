"""A small client for the judge service (harness/service/app.py), for a search loop's process.

    from harness.service.client import JudgeClient
    judge = JudgeClient("http://127.0.0.1:8765")
    ids = judge.submit_batch([{"source": text, "mode": "test"} for text in candidates])
    verdicts = [judge.result(id) for id in ids]   # waits for each

It only speaks HTTP: the loop's process never becomes a judge (no subreaper, no prctl).
"""

import time

import httpx

WAIT_STEP_S = 60.0


class JudgeClient:
    def __init__(self, url: str = "http://127.0.0.1:8765", timeout_s: float = 30.0):
        self._http = httpx.Client(base_url=url, timeout=timeout_s + WAIT_STEP_S)

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _json(self, response: httpx.Response):
        if response.status_code >= 400:
            raise RuntimeError(f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}")
        return response.json()

    def submit(self, source: str | None = None, *, path: str | None = None, **fields) -> str:
        """Queue one candidate (its source, or a path on the service's machine); its id. Fields:
        name, problem, mode, tests, rerun, official, strict, timeout_s, wall_limit_s,
        stop_on_first_failure, max_repeats, baselines."""
        return self._json(self._http.post("/candidates", json={"source": source, "path": path, **fields}))["id"]

    def submit_batch(self, candidates: list[dict]) -> list[str]:
        return self._json(self._http.post("/batches", json={"candidates": candidates}))["ids"]

    def poll(self, candidate_id: str) -> dict:
        return self._json(self._http.get(f"/candidates/{candidate_id}"))

    def result(self, candidate_id: str, timeout_s: float | None = None) -> dict:
        """The candidate once judged (its `document` is the one-shot command's --json document)."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
        while True:
            wait = max(0.0, min(WAIT_STEP_S, deadline - time.monotonic()))
            found = self._json(self._http.get(f"/candidates/{candidate_id}", params={"wait": wait}))
            if found["state"] == "done" or time.monotonic() >= deadline:
                return found

    def health(self) -> dict:
        return self._json(self._http.get("/health"))

    def status(self) -> dict:
        return self._json(self._http.get("/status"))

    def wait_until_up(self, timeout_s: float = 600.0) -> dict:
        """The service's status once it answers (its judges start before it does)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.health()
            except (httpx.TransportError, RuntimeError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
