"""`python -m harness serve`: the front's process. Starts the judges (a process per local GPU,
or Ray actors), then the HTTP API on uvicorn until interrupted."""

import os

from harness.judge.sandbox import UNSAFE_ENV
from harness.service.front import Service
from harness.service.judges import JudgeEnded, LocalJudge
from harness.store import DEFAULT_PATH, Store


class NoJudge(Exception):
    pass


def local_judges(gpus: list[int] | None, device: str, count: int, memory_limit_mib: int | None) -> list[LocalJudge]:
    """A judge per GPU of `gpus` (every GPU by default), each seeing its own alone; or `count`
    CPU judges."""
    if device == "cpu":
        return [LocalJudge("cpu", memory_limit_mib=memory_limit_mib) for _ in range(count)]
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
    return [LocalJudge("cuda", visible_devices=names[index], memory_limit_mib=memory_limit_mib) for index in chosen]


def build_service(gpus=None, device="cuda", judges_per_node=1, ray_address=None, store_path=DEFAULT_PATH,
                  memory_limit_mib=None) -> Service:
    if ray_address:
        try:
            import ray
        except ImportError:
            raise NoJudge('--ray needs the cluster extra: pip install ".[cluster]"') from None

        from harness.service.ray_judges import cluster_judges

        ray.init(address=ray_address)
        secret = {"POPCORN_SEED": os.environ["POPCORN_SEED"]} if os.environ.get("POPCORN_SEED") else {}
        secret.update({UNSAFE_ENV: os.environ[UNSAFE_ENV]} if UNSAFE_ENV in os.environ else {})
        judges = cluster_judges(device, judges_per_node, memory_limit_mib, secret)
    else:
        judges = local_judges(gpus, device, judges_per_node, memory_limit_mib)
    return Service(judges, Store(store_path) if store_path else None)


def run_service(gpus, device, judges_per_node, ray_address, host, port, store_path, memory_limit_mib) -> None:
    """`store_path` None: no store, every candidate judged."""
    import click

    try:
        import uvicorn

        from harness.service.app import create_app
    except ImportError as error:
        raise click.ClickException(f"the service needs its extra: pip install \".[service]\" ({error})") from None

    try:
        service = build_service(gpus, device, judges_per_node, ray_address, store_path, memory_limit_mib)
    except NoJudge as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"starting {len(service.judges)} judge(s): {', '.join(judge.name for judge in service.judges)}", err=True)
    try:
        service.start()
    except JudgeEnded as error:
        raise click.ClickException(f"{error} (its reason above)") from None
    click.echo(f"judges ready on {', '.join(service.device_names)}; http://{host}:{port} (docs at /docs)", err=True)
    try:
        uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
    finally:
        service.close()
