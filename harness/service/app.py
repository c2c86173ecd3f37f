"""The service's HTTP API (FastAPI, served by uvicorn in the front's process): candidates in,
verdicts out, health, status and metrics. Everything it answers comes from harness/service/front.py.

    POST   /candidates          one candidate -> {"id"}
    POST   /batches             {"candidates": [...]} -> {"ids": [...]}, every one queued or none
    GET    /candidates          ?state=&since=&sha256=&limit= -> {"candidates": [...], "next"}
    GET    /candidates/{id}     its state and, once ended, its reply (?wait=SECONDS to wait for it)
    DELETE /candidates/{id}     cancel it: a running candidate's worker is killed
    GET    /health              200 while every judge configured is alive, 503 otherwise
    GET    /status              the queue, and each judge's state
    GET    /metrics             the same in Prometheus' text format

Every reply that ends a candidate names its class: `error_class` is `verdict` (about the file),
`infrastructure` (about the judges, the sandbox, the device or load: judged again a bounded
number of times first, never stored as the file's) or, for a refused request (422, 413),
`rejected`. Unknown fields are refused. Names are plain file names of 255 bytes at most.

Limits, unless a request names its own: a candidate's wall time 300 s in test mode and 900 s in
the timed modes (each case's time limit within it), a source of 1,000,000 bytes, a request of
16,000,000 bytes. A time limit a request names is a finite number of seconds, a day at most.
"""

import functools
import math
from typing import Literal

import anyio

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness.service.candidates import PAGE_MAX, STATES
from harness.service.faults import REJECTED
from harness.service.front import Refused, Service
from harness.service.names import checked_name

MAX_REQUEST_BYTES = 16_000_000
# The longest time limit a request may name, for a case or a whole candidate: a finite number
# that the judges' clocks and deadlines can hold (1e308 s overflows them).
MAX_LIMIT_S = 86_400.0
# Requests that may wait for a candidate at once (?wait=), a thread each; more wait their turn.
MAX_WAITING = 1000


class CandidateIn(BaseModel):
    """One candidate: its source (or a path on the service's machine) and how to judge it."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = None
    path: str | None = Field(None, description="a file under a folder the service was started with (serve --candidates-dir)")
    name: str | None = Field(None, description="a plain file name (no `/`, not `.` or `..`), 255 bytes at most")
    problem: str = "nvfp4_gemm"
    mode: Literal["test", "benchmark", "leaderboard"] = "test"
    tests: str | None = Field(None, description="a tests file's text; the problem's official cases for the mode without it")
    rerun: bool = Field(False, description="judge again though a verdict under the same key is stored")
    idempotency_key: str | None = Field(None, max_length=200,
                                        description="the client's own key: a request sent again under it gets the first's id")
    official: bool = False
    strict: bool = False
    timeout_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S, allow_inf_nan=False, description="seconds per case")
    wall_limit_s: float | None = Field(None, gt=0, le=MAX_LIMIT_S, allow_inf_nan=False,
                                       description="seconds for the whole candidate, its static check included")
    stop_on_first_failure: bool = False
    max_repeats: int | None = Field(None, ge=3)
    baselines: bool = False

    @field_validator("name")
    @classmethod
    def plain_file_name(cls, name: str | None) -> str | None:
        if name is None:
            return None
        return checked_name(name)

    @field_validator("source", "tests", "path", "problem", "idempotency_key")
    @classmethod
    def encodable(cls, text: str | None) -> str | None:
        if text is not None:
            text.encode("utf-8")  # a lone surrogate: a ValueError, refused as the request's
        return text


class BatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidates: list[CandidateIn] = Field(min_length=1)


def create_app(service: Service, max_request_bytes: int = MAX_REQUEST_BYTES) -> FastAPI:
    app = FastAPI(title="nvfp4 judge service", description=__doc__)

    @app.middleware("http")
    async def bounded_requests(request: Request, call_next):
        declared = request.headers.get("content-length")
        if request.method == "POST" and declared is None:  # a body of unknown length is never read
            return _rejected(411, "a request's body needs its Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_request_bytes):
            return _rejected(413, f"a request is {max_request_bytes} bytes at most")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def refused_fields(request: Request, error: RequestValidationError):
        return _rejected(422, _plain(error.errors()))

    @app.post("/candidates")
    def post_candidate(candidate: CandidateIn) -> dict:
        try:
            return {"id": service.submit(**candidate.model_dump())}
        except Refused as refused:
            raise HTTPException(status_code=422, detail={"error_class": REJECTED, "detail": refused.errors[0]}) from None

    @app.post("/batches")
    def post_batch(batch: BatchIn) -> dict:
        try:
            return {"ids": service.submit_batch([candidate.model_dump() for candidate in batch.candidates])}
        except Refused as refused:
            raise HTTPException(status_code=422, detail={"error_class": REJECTED, "detail": "no candidate of the batch was queued",
                                                         "errors": refused.errors}) from None

    @app.get("/candidates")
    def list_candidates(state: Literal[STATES] | None = None, since: str | None = None,  # type: ignore[valid-type]
                        sha256: str | None = None, limit: int = 100) -> dict:
        return service.list(state, since, sha256, min(max(limit, 1), PAGE_MAX))

    waiting = []  # the limiter of requests that wait, made in the server's event loop at its first use

    @app.get("/candidates/{candidate_id}")
    async def get_candidate(candidate_id: str, wait: float = 0.0) -> dict:
        wait_s = 0.0 if math.isnan(wait) else min(max(wait, 0.0), 600.0)
        if not waiting:
            waiting.append(anyio.CapacityLimiter(MAX_WAITING))
        # A wait holds a thread for up to its seconds: those threads come from a pool of their own,
        # so that a loop waiting on many candidates leaves the other requests' threads free.
        found = await anyio.to_thread.run_sync(functools.partial(service.get, candidate_id, wait_s=wait_s),
                                               limiter=waiting[0] if wait_s > 0 else None)
        if found is None:
            raise HTTPException(status_code=404, detail=f"no candidate {candidate_id}")
        return found

    @app.delete("/candidates/{candidate_id}")
    def cancel_candidate(candidate_id: str) -> dict:
        found = service.cancel(candidate_id)
        if found is None:
            raise HTTPException(status_code=404, detail=f"no candidate {candidate_id}")
        return found

    @app.get("/health")
    def health():
        alive, configured = service.alive_judges(), len(service.judges)
        body = {"ok": service.healthy(), "judges": configured, "alive": alive}
        return JSONResponse(body, status_code=200 if body["ok"] else 503)

    @app.get("/status")
    def status() -> dict:
        return service.status()

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        return prometheus_text(service.metrics())

    return app


def _rejected(status: int, detail) -> JSONResponse:
    return JSONResponse({"detail": {"error_class": REJECTED, "detail": detail}}, status_code=status)


def _plain(errors: list) -> list:
    """Validation errors without their inputs (a refused request may hold a megabyte of source,
    or text no reply can encode)."""
    return [{"loc": list(error.get("loc", ())), "msg": str(error.get("msg", "")).encode("utf-8", "replace").decode("utf-8"),
             "type": error.get("type")} for error in errors]


def prometheus_text(metrics: dict) -> str:
    """Prometheus' text exposition format (version 0.0.4) of Service.metrics()."""

    def label(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    lines = ["# HELP judge_candidates Candidates by state.", "# TYPE judge_candidates gauge"]
    lines += [f'judge_candidates{{state="{state}"}} {count}' for state, count in metrics["counts"].items()]
    lines += ["# HELP judge_queue_depth Candidates queued.", "# TYPE judge_queue_depth gauge",
              f"judge_queue_depth {metrics['counts'].get('queued', 0)}"]
    lines += ["# HELP judge_replies_total Candidates ended, by the class of their reply.", "# TYPE judge_replies_total counter"]
    lines += [f'judge_replies_total{{class="{name}"}} {metrics["classes"].get(name, 0)}'
              for name in ("verdict", "infrastructure", "rejected")]
    lines += ["# HELP judge_retries_total Runs judged again after the machinery's fault.", "# TYPE judge_retries_total counter",
              f"judge_retries_total {metrics['retried']}"]
    lines += ["# HELP judge_judged_again_alone_total Test-mode runs that failed beside another, judged again alone.",
              "# TYPE judge_judged_again_alone_total counter", f"judge_judged_again_alone_total {metrics['judged_again_alone']}"]
    lines += ["# HELP judge_alive Whether each judge is alive.", "# TYPE judge_alive gauge"]
    lines += [f'judge_alive{{judge="{label(name)}"}} {int(alive)}' for name, alive in metrics["alive"].items()]
    lines += ["# HELP judge_busy_share Each judge's share of the front's time spent judging.", "# TYPE judge_busy_share gauge"]
    lines += [f'judge_busy_share{{judge="{label(name)}"}} {share:.6f}' for name, share in metrics["busy_share"].items()]
    return "\n".join(lines) + "\n"
