"""gunicorn's settings for agentruns (OPS-8): `gunicorn -c config/gunicorn.py`, also what
`manage.py serve` starts. Each comes from the environment; GUNICORN_CMD_ARGS overrides any.

Sync workers: a request holds its worker, and one that runs past `timeout` has its worker
killed and replaced, so a stuck request cannot hold the site. Requests are short (the loop
runs on the cluster, never in a request), so a few processes serve many clients.
"""

import logging
import multiprocessing
import os
import sys

wsgi_app = "config.wsgi:application"
bind = os.environ.get("AGENTRUNS_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("AGENTRUNS_WEB_WORKERS") or 2 * multiprocessing.cpu_count() + 1)
worker_class = "sync"
# Seconds a request may take before its worker is killed and replaced.
timeout = int(os.environ.get("AGENTRUNS_WEB_TIMEOUT") or 30)
# On SIGTERM, how long in-flight requests may finish before the workers are killed.
graceful_timeout = int(os.environ.get("AGENTRUNS_WEB_GRACEFUL_TIMEOUT") or 5)
accesslog = os.environ.get("AGENTRUNS_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("AGENTRUNS_WEB_LOG_LEVEL", "warning")


def worker_exit(server: object, worker: object) -> None:
    """A worker told to stop leaves at once (OPS-8). Finalising a Django process's heap
    takes seconds on a busy machine, longer than `graceful_timeout`, and the master then
    kills it and logs "Worker was sent SIGKILL! Perhaps out of memory?" for every worker of
    a clean Ctrl-C. Runs in the worker as it exits (and in the master for a worker already
    gone, left alone); a worker that fails keeps its exit status and its finalisation."""
    stopping = sys.exc_info()[1]
    if getattr(worker, "pid", None) != os.getpid() or not isinstance(stopping, SystemExit):
        return
    if stopping.code not in (0, None):
        return
    from agentruns import tracing

    tracing.flush()  # spans still waiting for their batch
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
