"""gunicorn's settings for agentruns (OPS-8): `gunicorn -c config/gunicorn.py`, also what
`manage.py serve` starts. Each comes from the environment; GUNICORN_CMD_ARGS overrides any.

Sync workers: a request holds its worker, and one that runs past `timeout` has its worker
killed and replaced, so a stuck request cannot hold the site. Requests are short (the loop
runs on the cluster, never in a request), so a few processes serve many clients.
"""

import multiprocessing
import os

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
