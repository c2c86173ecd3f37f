"""The submission's self-check as the judge sees it: on a first call whose result it finds
wrong, submission.py writes one line to stderr that starts with FALLBACK_PREFIX (the problem,
the configuration, the first wrong element) and runs a slower configuration instead. The
answer stays right, so only these lines tell that the chosen configuration failed."""

# The submission's own constant, repeated: the judge never imports the file it judges
# (tests/test_self_check.py holds the two equal).
FALLBACK_PREFIX = "nvfp4 self-check FALLBACK:"


def fallbacks_in(output: str) -> list[str]:
    """The fallback lines in a case's captured worker output, in order, without line ends."""
    return [line.strip() for line in output.splitlines() if line.lstrip().startswith(FALLBACK_PREFIX)]
