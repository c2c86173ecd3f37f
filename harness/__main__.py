import os
import sys

# `python -m harness` puts its working folder first on the import path, where the file judged may
# lie: named after a module the judge imports (numpy.py, pyseccomp.py), the judge would import it
# itself, as root and in no sandbox. That folder leaves the path, and the kit's own goes behind the
# interpreter's packages (the judge's workers import the runner from it).
KIT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path[:] = [entry for entry in sys.path
               if entry and os.path.realpath(entry) not in (os.path.realpath(os.getcwd()), KIT)] + [KIT]

from harness.judge.dev_shm import own_dev_shm  # noqa: E402

# A GPU judge's own /dev/shm, entered before any import starts a thread (torch's does): a mount
# namespace is a thread's own, and a thread started before would keep the host's.
if not any(argument in ("--device=cpu", "cpu") for argument in sys.argv[1:]):
    own_dev_shm()

from harness.cli import main  # noqa: E402

main()
