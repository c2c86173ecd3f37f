"""The service's HTTP API (FastAPI, served by uvicorn in the front's process): candidates in,
verdicts out, health and status. Everything it answers comes from harness/service/front.py.

    POST /candidates          one candidate -> {"id"}
    POST /batches             {"candidates": [...]} -> {"ids": [...]}
    GET  /candidates/{id}     its state and, once done, its verdict (?wait=SECONDS to wait for it)
    GET  /health              whether the judges are being fed
    GET  /status              the queue, and each judge's state
"""

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from harness.service.front import Service


class CandidateIn(BaseModel):
    """One candidate: its source (or a path on the service's machine) and how to judge it."""

    source: str | None = None
    path: str | None = None
    name: str | None = None
    problem: str = "nvfp4_gemm"
    mode: str = "test"
    tests: str | None = Field(None, description="a tests file's text; the problem's official cases for the mode without it")
    rerun: bool = Field(False, description="judge again though a verdict under the same key is stored")
    official: bool = False
    strict: bool = False
    timeout_s: float | None = Field(None, gt=0, description="seconds per case")
    wall_limit_s: float | None = Field(None, gt=0, description="seconds for the whole candidate")
    stop_on_first_failure: bool = False
    max_repeats: int | None = Field(None, ge=3)
    baselines: bool = False


class BatchIn(BaseModel):
    candidates: list[CandidateIn]


def create_app(service: Service) -> FastAPI:
    app = FastAPI(title="nvfp4 judge service", description=__doc__)

    def submit(candidate: CandidateIn) -> str:
        try:
            return service.submit(**candidate.model_dump())
        except (ValueError, OSError) as error:
            raise HTTPException(status_code=422, detail=str(error)) from None

    @app.post("/candidates")
    def post_candidate(candidate: CandidateIn) -> dict:
        return {"id": submit(candidate)}

    @app.post("/batches")
    def post_batch(batch: BatchIn) -> dict:
        return {"ids": [submit(candidate) for candidate in batch.candidates]}

    @app.get("/candidates/{candidate_id}")
    def get_candidate(candidate_id: str, wait: float = 0.0) -> dict:
        found = service.get(candidate_id, wait_s=min(max(wait, 0.0), 600.0))
        if found is None:
            raise HTTPException(status_code=404, detail=f"no candidate {candidate_id}")
        return found

    @app.get("/health")
    def health() -> dict:
        healthy = service.healthy()
        if not healthy:
            raise HTTPException(status_code=503, detail="no judge is being fed")
        return {"ok": True, "judges": len(service.judges)}

    @app.get("/status")
    def status() -> dict:
        return service.status()

    return app
