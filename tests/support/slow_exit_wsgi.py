"""A WSGI app whose process takes seconds to finalise, as a Django worker's large heap does
on a busy machine: the stand-in that makes gunicorn's stop (OPS-8) testable."""

import atexit
import os
import pathlib
import time

FINALISE_SECONDS = 12.0

atexit.register(time.sleep, FINALISE_SECONDS)

# Each worker loads the app once it has set its signal handlers: a file per booted worker
# tells a test that a Ctrl-C now reaches a worker that can act on it (one still booting
# has the master's handlers and loses the signal, so the master waits it out).
if booted := os.environ.get("SLOW_EXIT_BOOTED_DIR"):
    (pathlib.Path(booted) / str(os.getpid())).touch()


def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
