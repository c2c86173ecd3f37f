"""A candidate's name: one that a judge can write a file by and every reply can carry. The front
refuses any other (harness/service/app.py); a judge fed by another caller names its copy
`submission.py` instead (harness/service/judge.py). The standard library alone: the judge
imports it before torch."""

NAME_MAX_BYTES = 255  # a file name's longest on Linux file systems


def checked_name(name: str) -> str:
    """`name` where a judge can write a file by it and every reply can carry it; ValueError
    naming why not otherwise."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("a name must be text (a lone surrogate is not)") from None
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise ValueError("a name must be a plain file name: not empty, `.` or `..`, without `/` or NUL")
    if size > NAME_MAX_BYTES:
        raise ValueError(f"a name must be {NAME_MAX_BYTES} bytes at most")
    return name
