"""The HTTP transport both SDK adapters share.

httpx's timeouts bound each network operation, not a call: a server that sends its
headers and then one byte every half second never trips a one-second read timeout, and
the run would wait on it for ever (SEC-3). The transport here also bounds the whole
response body by the provider's `timeout_seconds`, per attempt; running out raises the
same `ReadTimeout` a silent server would, which the SDKs report as a timeout (retryable,
TZ-5)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx2

# The SDKs keep only 100 idle connections; a busy cluster would reconnect for every call.
LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=1000)


class DeadlineTransport(httpx2.HTTPTransport):
    def __init__(self, *, seconds: float, **kwargs: Any) -> None:
        super().__init__(limits=LIMITS, **kwargs)
        self.seconds = seconds

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = time.monotonic() + self.seconds
        response = super().handle_request(request)
        response.stream = _Deadline(response.stream, deadline, request)
        return response


class _Deadline(httpx2.SyncByteStream):
    def __init__(self, stream: Any, deadline: float, request: httpx2.Request) -> None:
        self._stream = stream
        self._deadline = deadline
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._stream:
            if time.monotonic() > self._deadline:
                raise httpx2.ReadTimeout(
                    "the reply did not complete in time", request=self._request
                )
            yield chunk

    def close(self) -> None:
        self._stream.close()
