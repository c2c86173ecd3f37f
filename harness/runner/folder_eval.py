"""A problem folder's own eval, run whole inside a worker's sandbox as the competition's runner
runs it (`--official` on a problem folder: harness/judge/folder_eval.py).

`PROGRAM` is the whole of what the judge starts: `python -I -B -c PROGRAM SETTINGS`. The process
confines itself as a worker does (harness/runner/confine.py), takes the files the judge handed
over (task.yml's files, the submission as submission.py, the cases file), tells the judge on its
`socket` that it started, and runs the eval as `python MAIN MODE CASES` would, in its folder: the
eval is the process's `__main__`, and `__mp_main__` too, as a spawned child of its pool imports it
(the pool's results name its classes, its Stats among them, by that module), and its exit status
is the process's.
"""

import os
import sys
import types

from harness.runner.confine import confine
from harness.runner.files import take_handed_over

PROGRAM = ("import json, sys; settings = json.loads(sys.argv[1]); sys.path[:0] = settings['import_path']; "
           "from harness.runner.folder_eval import main; main(settings)")
CASES_FILE = "cases.txt"  # the cases, one a line, as the runner writes task.yml's (folder_task.cases_as_tests_file)
STARTED = b"\x01"  # on the socket once confined and the files taken: what follows is the eval's


def main(settings: dict) -> None:
    refused = confine(settings)
    for problem in refused:
        print(f"the sandbox lacks a layer: {problem}", file=sys.stderr, flush=True)
    folder = settings["folder"]
    take_handed_over(settings["handed_over"], folder)
    os.chdir(folder)
    os.write(settings["socket"], STARTED)
    os.close(settings["socket"])
    path = os.path.join(folder, settings["eval_main"])
    sys.argv = [path, settings["mode"], CASES_FILE]
    main_module = types.ModuleType("__main__")
    main_module.__file__ = path
    sys.modules["__main__"] = sys.modules["__mp_main__"] = main_module
    with open(path) as source:
        code = compile(source.read(), path, "exec")
    exec(code, main_module.__dict__)
