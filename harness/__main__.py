import sys

from harness.judge.dev_shm import own_dev_shm

# A GPU judge's own /dev/shm, entered before any import starts a thread (torch's does): a mount
# namespace is a thread's own, and a thread started before would keep the host's.
if not any(argument in ("--device=cpu", "cpu") for argument in sys.argv[1:]):
    own_dev_shm()

from harness.cli import main  # noqa: E402

main()
