"""The harness's exit statuses, each defined once; docs/commands.md says which command exits with which."""

EXIT_PASS = 0
# --official: the competition's eval ended on an uncaught exception (its own process's status).
EXIT_EVAL_STOPPED = 1
EXIT_CHECK_FAILED = 1  # lint, compile, task-yml --check, submit's lint: a check did not hold
EXIT_ABORTED = 1  # a command interrupted at a prompt (click's Abort)
EXIT_NO_RUNS = 1  # compare: no runs to show or export
EXIT_USAGE = 2  # a bad command line, or an option the problem has no use for (sol without a formula)
EXIT_PATH_MISSING = 3  # compile: the file's kernel_for_arch has no kernel for the arch
EXIT_CLOSED = 5  # submit: the problem's leaderboard has closed
EXIT_NO_CLIENT = 127  # submit: the competition's client is not on PATH (the shell's status for a missing command)
EXIT_FAIL = 112  # a case did not pass: the competition's status for a failed check
EXIT_BAD_TESTS_FILE = 113  # the tests file cannot be read or parsed
EXIT_NO_GPU = 114  # a CUDA device was asked for and there is none
EXIT_REFERENCE_CANNOT_RUN = 115  # --problem DIR: the folder's reference.py cannot run on the device
EXIT_INFRASTRUCTURE = 116  # the judge's machine failed (a worker did not start, its own user cannot read the import path): no verdict on the file
EXIT_REJECTED = 117  # the file is refused before anything runs: over the competition's size limit
# A service's judge process (harness/service/judge.py) ends with these for whoever started it.
EXIT_DEVICE_LOST = 3  # the judge's GPU no longer answers after a case: start another judge
EXIT_FILES_CHANGED = 4  # a candidate changed the judge's own files: a judge started from them is not to be trusted
EXIT_DEV_SHM_FULL = 6  # the judge's own /dev/shm stays full after a candidate: start another judge
EXIT_SANDBOX_REFUSED = 7  # the workers' sandbox lacks a layer and the service was not started with --unsafe-sandbox
