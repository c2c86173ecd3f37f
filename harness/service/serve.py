"""`python -m harness serve`: the front's process. Starts the judges (a process per local GPU,
or Ray actors), then the HTTP API on uvicorn until interrupted (SIGINT or SIGTERM), then ends the
judges and puts the candidates they were running back in the queue (harness/service/front.py)."""

import os
import signal

from harness.judge.sandbox import UNSAFE_ENV
from harness.results.store import DEFAULT_PATH, Store
from harness.service.candidates import Candidates
from harness.service.front import MAX_SOURCE_BYTES, Service
from harness.service.judges import JudgeEnded, LocalJudge


class NoJudge(Exception):
    pass


class Interrupted(Exception):
    """SIGTERM, once uvicorn has stopped serving: raised where the signal would end the process
    before the front's cleanup ran."""


def local_judges(gpus: list[int] | None, device: str, count: int, memory_limit_mib: int | None,
                 lanes: int = 1) -> list[LocalJudge]:
    """A judge per GPU of `gpus` (every GPU by default), each seeing its own alone; or `count`
    CPU judges. Each with `lanes` - 1 more that judge test-mode candidates beside it."""
    if device == "cpu":
        return [LocalJudge("cpu", memory_limit_mib=memory_limit_mib, slot=slot, lane=lane, lanes=lanes)
                for slot in range(count) for lane in range(lanes)]
    import torch

    available = torch.cuda.device_count()
    if not available:
        raise NoJudge("no CUDA device: `serve --device cpu` judges torch-only files without one")
    chosen = gpus if gpus is not None else list(range(available))
    missing = [index for index in chosen if index >= available]
    if missing:
        raise NoJudge(f"no GPU {missing[0]}: this machine has {available}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = visible.split(",") if visible else [str(index) for index in range(available)]
    return [LocalJudge("cuda", visible_devices=names[index], memory_limit_mib=memory_limit_mib, lane=lane, lanes=lanes)
            for index in chosen for lane in range(lanes)]


def build_service(gpus=None, device="cuda", judges_per_node=1, ray_address=None, store_path=DEFAULT_PATH,
                  memory_limit_mib=None, max_source_bytes=MAX_SOURCE_BYTES, test_lanes=1, candidate_dirs=()) -> Service:
    """`store_path` None: no store, every candidate judged, and the queue in memory alone.
    `candidate_dirs`: the folders whose files a request may name by `path`."""
    if ray_address:
        try:
            import ray
        except ImportError:
            raise NoJudge('--ray needs the cluster extra: pip install ".[cluster]"') from None

        from harness.service.ray_judges import cluster_judges

        ray.init(address=ray_address)
        secret = {"POPCORN_SEED": os.environ["POPCORN_SEED"]} if os.environ.get("POPCORN_SEED") else {}
        secret.update({UNSAFE_ENV: os.environ[UNSAFE_ENV]} if UNSAFE_ENV in os.environ else {})
        judges = cluster_judges(device, judges_per_node, memory_limit_mib, secret, lanes=test_lanes)
    else:
        judges = local_judges(gpus, device, judges_per_node, memory_limit_mib, test_lanes)
    return Service(judges, Store(store_path) if store_path else None,
                   candidates=Candidates(store_path) if store_path else None, max_source_bytes=max_source_bytes,
                   candidate_dirs=candidate_dirs)


def serve_until_stopped(service: Service, host: str, port: int, max_request_bytes: int | None = None,
                        announce=print) -> None:
    """Start the judges, serve the API until SIGINT or SIGTERM, then close the service: uvicorn
    handles both signals itself and raises the one it got again once it has stopped serving;
    SIGTERM's handler here turns that into an exception, so that the cleanup runs."""
    import uvicorn

    from harness.service.app import MAX_REQUEST_BYTES, create_app

    def interrupted(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupted)
    announce(f"starting {len(service.judges)} judge(s): {', '.join(judge.name for judge in service.judges)}")
    try:
        service.start()
        announce(f"judges ready on {', '.join(service.device_names)}; http://{host}:{port} (docs at /docs)")
        uvicorn.run(create_app(service, max_request_bytes or MAX_REQUEST_BYTES), host=host, port=port, log_level="warning")
    except (Interrupted, KeyboardInterrupt):
        pass
    finally:
        service.close()
        signal.signal(signal.SIGTERM, previous)


def run_service(gpus, device, judges_per_node, ray_address, host, port, store_path, memory_limit_mib,
                max_source_bytes=MAX_SOURCE_BYTES, test_lanes=1, candidate_dirs=()) -> None:
    """`store_path` None: no store, every candidate judged."""
    import click

    try:
        import uvicorn  # noqa: F401

        import harness.service.app  # noqa: F401
    except ImportError as error:
        raise click.ClickException(f"the service needs its extra: pip install \".[service]\" ({error})") from None

    try:
        service = build_service(gpus, device, judges_per_node, ray_address, store_path, memory_limit_mib, max_source_bytes,
                                test_lanes, candidate_dirs)
    except NoJudge as error:
        raise click.ClickException(str(error)) from None
    try:
        serve_until_stopped(service, host, port, announce=lambda text: click.echo(text, err=True))
    except JudgeEnded as error:  # no judge got ready: a sandbox lacking a layer among the reasons
        raise click.ClickException(f"{error} (its reason above)") from None
