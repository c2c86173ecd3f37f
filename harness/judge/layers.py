"""The sandbox's layers, and those switched off by hand: read by the sandbox (harness/judge/sandbox.py)
and by the judge's change of user (harness/judge/judge_user.py), the `user` layer's first step.
The standard library alone: a judge reads it before torch's import."""

import os

# Layers switched off by hand, comma-separated (bubblewrap, seccomp, cgroup, landlock, user): to find
# which layer a system or a driver does not bear. Every layer switched off is reported as refused.
# `template` is no layer: it switches off a service's template workers (harness/judge/templates.py),
# whose pools then start every worker afresh; the sandbox's report says so, as no refusal.
LAYERS_OFF_ENV = "NVFP4_SANDBOX_OFF"
LAYERS = ("bubblewrap", "seccomp", "cgroup", "landlock", "user", "template")


def layers_off() -> set[str]:
    off = {name.strip() for name in os.environ.get(LAYERS_OFF_ENV, "").split(",") if name.strip()}
    unknown = off - set(LAYERS)
    if unknown:
        raise ValueError(f"{LAYERS_OFF_ENV} names no layer {sorted(unknown)}: the layers are {', '.join(LAYERS)}")
    return off
