"""Whose fault a reply is: every reply of the service names one class.

- `verdict`: about the file. The only class stored as the file's and answered from the store.
- `infrastructure`: about the machinery: a judge that ended or stopped answering, a worker that
  could not start (its case ended before the file was imported), the sandbox, the device, load.
  Judged again on another or a fresh judge, a bounded number of times, then returned as such;
  never stored as the file's.
- `rejected`: about the request: a tests file that cannot be read, a problem whose reference
  cannot run. Nothing is judged again.
"""

from harness.judge.exits import (EXIT_BAD_TESTS_FILE, EXIT_INFRASTRUCTURE, EXIT_NO_GPU, EXIT_REFERENCE_CANNOT_RUN,
                           EXIT_REJECTED)

VERDICT, INFRASTRUCTURE, REJECTED = "verdict", "infrastructure", "rejected"
CLASSES = (VERDICT, INFRASTRUCTURE, REJECTED)
# The exit statuses of a run stopped without a verdict on the file, by whose fault it is
# (harness/api.py Stopped; a worker that did not start stops the run after cases that did).
STOPPED = {EXIT_BAD_TESTS_FILE: REJECTED, EXIT_REFERENCE_CANNOT_RUN: REJECTED, EXIT_REJECTED: REJECTED,
           EXIT_NO_GPU: INFRASTRUCTURE, EXIT_INFRASTRUCTURE: INFRASTRUCTURE}
# A case that ended in these before the file was imported ended for the judge's reasons, not the file's.
TROUBLE = ("crash", "timeout", "error")
# The phases (harness/judge/phases.py) a case goes through before the file is imported.
BEFORE_THE_FILE = ("references", "start")


def classify(reply: dict) -> tuple[str, str | None]:
    """(class, why) of a judge's reply; why is None for a verdict."""
    document = reply.get("document") or {}
    cases = document.get("cases") or []
    if reply.get("error_class") in CLASSES:  # the judge's own word (a request it could not run)
        return reply["error_class"], document.get("error")
    status = reply.get("exit_status")
    if not cases or status in STOPPED:
        return STOPPED.get(status, INFRASTRUCTURE), document.get("error") or f"no verdict on the file (exit status {status})"
    for case in cases:
        if case.get("status") in TROUBLE and set(case.get("phases_s") or {}) <= set(BEFORE_THE_FILE):
            return INFRASTRUCTURE, (f"case {case.get('index')} ended ({case.get('status')}) before the file was imported: "
                                    f"{case.get('message')}")
    return VERDICT, None
