"""Clients for the judge service (harness/service/app.py), for a search loop's process: one
synchronous, one for asyncio, with the same methods.

    from harness.service.client import JudgeClient
    judge = JudgeClient("http://127.0.0.1:8765")
    ids = judge.submit_batch([{"source": text, "mode": "test"} for text in candidates])
    verdicts = [judge.result(id) for id in ids]   # waits for each

    from harness.service.client import AsyncJudgeClient
    async with AsyncJudgeClient() as judge:
        verdicts = await asyncio.gather(*(judge.result(id) for id in await judge.submit_batch(batch)))

A candidate has ended once its `state` is `done` or `cancelled`; its `error_class` says whose
fault a reply is (`verdict`, `infrastructure`). A refused request raises Refused, with the
service's reasons (per item for a batch, none of whose candidates was queued).

They only speak HTTP: the loop's process never becomes a judge (no subreaper, no prctl).
"""

import asyncio
import time

import httpx

from harness.service.candidates import ENDED  # the standard library alone

WAIT_STEP_S = 60.0


class Refused(RuntimeError):
    """The service refused the request (4xx): `status` and `detail`, its reasons."""

    def __init__(self, status: int, detail):
        self.status, self.detail = status, detail
        super().__init__(f"{status}: {detail}")


def _checked(response: httpx.Response):
    if 400 <= response.status_code < 500:
        try:
            detail = response.json().get("detail")
        except ValueError:
            detail = response.text
        raise Refused(response.status_code, detail)
    if response.status_code >= 500:
        raise RuntimeError(f"{response.request.method} {response.request.url.path}: {response.status_code} {response.text}")
    return response.json()


def _candidate(source: str | None, path: str | None, fields: dict) -> dict:
    return {key: value for key, value in {"source": source, "path": path, **fields}.items() if value is not None}


def _filters(state, since, sha256, limit) -> dict:
    return {key: value for key, value in {"state": state, "since": since, "sha256": sha256, "limit": limit}.items()
            if value is not None}


def _wait(deadline: float) -> float:
    return max(0.0, min(WAIT_STEP_S, deadline - time.monotonic()))


class JudgeClient:
    def __init__(self, url: str = "http://127.0.0.1:8765", timeout_s: float = 30.0):
        self._http = httpx.Client(base_url=url, timeout=timeout_s + WAIT_STEP_S)

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def submit(self, source: str | None = None, *, path: str | None = None, **fields) -> str:
        """Queue one candidate (its source, or a path on the service's machine); its id. Fields:
        name, problem, mode, tests, rerun, idempotency_key, official, strict, timeout_s,
        wall_limit_s, stop_on_first_failure, max_repeats, baselines."""
        return _checked(self._http.post("/candidates", json=_candidate(source, path, fields)))["id"]

    def submit_batch(self, candidates: list[dict]) -> list[str]:
        return _checked(self._http.post("/batches", json={"candidates": candidates}))["ids"]

    def poll(self, candidate_id: str) -> dict:
        return _checked(self._http.get(f"/candidates/{candidate_id}"))

    def result(self, candidate_id: str, timeout_s: float | None = None) -> dict:
        """The candidate once ended (its `document` is the one-shot command's --json document)."""
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
        while True:
            found = _checked(self._http.get(f"/candidates/{candidate_id}", params={"wait": _wait(deadline)}))
            if found["state"] in ENDED or time.monotonic() >= deadline:
                return found

    def list(self, state: str | None = None, since: str | None = None, sha256: str | None = None,
             limit: int | None = None) -> dict:
        """A page of candidates (`next`: the `since` of the next page, None after the last)."""
        return _checked(self._http.get("/candidates", params=_filters(state, since, sha256, limit)))

    def cancel(self, candidate_id: str) -> dict:
        return _checked(self._http.delete(f"/candidates/{candidate_id}"))

    def health(self) -> dict:
        return _checked(self._http.get("/health"))

    def status(self) -> dict:
        return _checked(self._http.get("/status"))

    def metrics(self) -> str:
        return self._http.get("/metrics").text

    def wait_until_up(self, timeout_s: float = 600.0) -> dict:
        """The service's health once every judge is up (they start before it answers)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.health()
            except (httpx.TransportError, RuntimeError, Refused):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


class AsyncJudgeClient:
    """JudgeClient's methods as coroutines (httpx.AsyncClient), for loops that run on asyncio."""

    def __init__(self, url: str = "http://127.0.0.1:8765", timeout_s: float = 30.0, transport=None):
        self._http = httpx.AsyncClient(base_url=url, timeout=timeout_s + WAIT_STEP_S, transport=transport)

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def submit(self, source: str | None = None, *, path: str | None = None, **fields) -> str:
        return _checked(await self._http.post("/candidates", json=_candidate(source, path, fields)))["id"]

    async def submit_batch(self, candidates: list[dict]) -> list[str]:
        return _checked(await self._http.post("/batches", json={"candidates": candidates}))["ids"]

    async def poll(self, candidate_id: str) -> dict:
        return _checked(await self._http.get(f"/candidates/{candidate_id}"))

    async def result(self, candidate_id: str, timeout_s: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout_s if timeout_s is not None else float("inf"))
        while True:
            found = _checked(await self._http.get(f"/candidates/{candidate_id}", params={"wait": _wait(deadline)}))
            if found["state"] in ENDED or time.monotonic() >= deadline:
                return found

    async def list(self, state: str | None = None, since: str | None = None, sha256: str | None = None,
                   limit: int | None = None) -> dict:
        return _checked(await self._http.get("/candidates", params=_filters(state, since, sha256, limit)))

    async def cancel(self, candidate_id: str) -> dict:
        return _checked(await self._http.delete(f"/candidates/{candidate_id}"))

    async def health(self) -> dict:
        return _checked(await self._http.get("/health"))

    async def status(self) -> dict:
        return _checked(await self._http.get("/status"))

    async def metrics(self) -> str:
        return (await self._http.get("/metrics")).text

    async def wait_until_up(self, timeout_s: float = 600.0) -> dict:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return await self.health()
            except (httpx.TransportError, RuntimeError, Refused):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
