"""A WSGI app whose process takes seconds to finalise, as a Django worker's large heap does
on a busy machine: the stand-in that makes gunicorn's stop (OPS-8) testable."""

import atexit
import time

FINALISE_SECONDS = 4.0

atexit.register(time.sleep, FINALISE_SECONDS)


def application(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]
