"""SEC-9: where a URL that staff set (a webhook, an MCP server) may send the cluster.

Staff could otherwise register `http://127.0.0.1:5432/`, `http://169.254.169.254/…` or
`http://10.0.0.1/` and have the cluster, which sits inside the network, call them. So a
target must be `http` or `https` and every address its host resolves to must be public:
not loopback, private, link-local (where cloud metadata lives), shared, reserved,
unspecified or multicast, also when dressed as IPv6 (`::ffff:127.0.0.1`, 6to4, NAT64).
A host the deployer listed (`AGENTRUNS_WEBHOOK_ALLOWED_HOSTS` for webhooks,
`AGENTRUNS_MCP_ALLOWED_HOSTS` for MCP servers: `Exemptions`) skips the address check.

The check runs when a webhook is saved and again on every connection, after DNS, and the
connection goes to the address that was checked (`PinnedTransport`), so a name that
resolves to a public address at the check and to 127.0.0.1 a moment later (DNS
rebinding) still reaches only the public one.

SEC-8: every attempt has one total deadline. httpx's and smtplib's timeouts bound each
network operation, so a receiver sending a byte a second, or a mail server trickling its
greeting, never trips them. `DeadlineBackend` gives each webhook connection a deadline
that every connect, read and write shares; `DeadlineEmailBackend` closes an SMTP
connection's socket when its deadline passes, whatever smtplib is waiting for.
"""

from __future__ import annotations

import contextlib
import ipaddress
import smtplib
import socket
import ssl
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from django.conf import settings
from django.core.mail.backends.smtp import EmailBackend

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
SCHEMES = {"http": 80, "https": 443}
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(httpx.TransportError):
    """The host is not one the cluster may connect to (SEC-9); nothing was sent."""


def address_problem(address: Address) -> str | None:
    """Why the cluster may not connect to `address`, or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return address_problem(embedded)
    for kind, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local (where cloud metadata lives)", address.is_link_local),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
    ):
        if flag:
            return f"{address} is a {kind} address"
    if not address.is_global:
        return f"{address} is not a public address"
    return None


def _bare(host: str) -> str:
    return host.strip().lower().strip("[]")


@dataclass(frozen=True)
class Exemptions:
    """The hosts one kind of target may reach despite their addresses: those listed in the
    deployer's `setting`, and exact (host, port) pairs the product runs itself (the demo's
    MCP server)."""

    setting: str
    pairs: tuple[tuple[str, int], ...] = ()

    def allows(self, host: str, port: int | None = None) -> bool:
        listed = {_bare(name) for name in getattr(settings, self.setting)}
        return _bare(host) in listed or (_bare(host), port) in self.pairs


WEBHOOKS = Exemptions("AGENTRUNS_WEBHOOK_ALLOWED_HOSTS")


def mcp_exemptions() -> Exemptions:
    """MCP servers: the hosts of AGENTRUNS_MCP_ALLOWED_HOSTS, and the one address the demo's
    own server listens on (AGENTRUNS_DEMO_MCP_URL, which `manage.py serve` starts)."""
    demo = urlsplit(settings.AGENTRUNS_DEMO_MCP_URL or "")
    pairs: tuple[tuple[str, int], ...] = ()
    if demo.hostname and demo.scheme in SCHEMES:
        pairs = ((_bare(demo.hostname), demo.port or SCHEMES[demo.scheme]),)
    return Exemptions("AGENTRUNS_MCP_ALLOWED_HOSTS", pairs)


def host_allowed(host: str) -> bool:
    return WEBHOOKS.allows(host)


def resolve(host: str, port: int) -> list[Address]:
    """Every address `host` names: itself when it is a literal, else what DNS answers."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in answers))


def checked_address(host: str, port: int) -> Address:
    """The address to connect to, once every address of `host` is found public."""
    try:
        addresses = resolve(host, port)
    except OSError as exc:
        raise httpx.ConnectError(f"{host} could not be resolved") from exc
    for address in addresses:
        problem = address_problem(address)
        if problem:
            raise TargetRefused(f"refused: {host} resolves to {problem}")
    if not addresses:
        raise httpx.ConnectError(f"{host} could not be resolved")
    return addresses[0]


def url_problem(url: str, exemptions: Exemptions = WEBHOOKS) -> str | None:
    """On save: why the cluster may never call `url`, or None. A name that does not
    resolve yet is accepted; the connection is checked again anyway."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        return "Only http and https URLs are allowed."
    host = parts.hostname or ""
    if not host:
        return "The URL needs a host."
    try:
        port = parts.port or SCHEMES[parts.scheme]
        if exemptions.allows(host, port):
            return None
        checked_address(host, port)
    except ValueError:
        return "The URL's port is not a number from 0 to 65535."
    except TargetRefused as exc:
        return f"{exc} Ask the deployer to list the host in {exemptions.setting}."
    except httpx.ConnectError:
        return None
    return None


class PinnedTransport(httpx.BaseTransport):
    """httpx's own transport, connecting only to an address checked a moment before:
    the URL's host is replaced by that address, while the Host header and, for https, the
    TLS server name (so the certificate is verified against the name) stay the host's."""

    def __init__(self, *, deadline_seconds: float | None = None, **options: Any) -> None:
        # No connection is kept for a later request: each one is resolved and checked
        # anew, and a TLS session verified for one name never carries another's request.
        # So each request has a connection of its own, and its deadline (SEC-8).
        options.setdefault("limits", httpx.Limits(max_keepalive_connections=0))
        self._inner = httpx.HTTPTransport(**options)
        if deadline_seconds is not None:
            # httpx takes no network backend; its connection pool (httpcore) does.
            self._inner._pool._network_backend = DeadlineBackend(deadline_seconds)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in SCHEMES:
            raise TargetRefused(f"refused: {url.scheme} is not http or https")
        if not host_allowed(url.host):
            address = checked_address(url.host, url.port or SCHEMES[url.scheme])
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": url.host}
            request.url = url.copy_with(host=str(address))
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()


# ---- SEC-8: one total deadline per attempt ---------------------------------------------

CHUNK = 16_384  # a write is cut into pieces so a receiver that reads slowly meets it too


def _left(deadline: float, timeout: float | None, late: type[Exception]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise late("the attempt's deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(self._deadline, timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), CHUNK):
            wait = _left(self._deadline, timeout, httpcore.WriteTimeout)
            self._inner.write(buffer[start : start + CHUNK], wait)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        wait = _left(self._deadline, timeout, httpcore.ConnectTimeout)
        return DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, wait), self._deadline
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """Connections whose every operation, together, ends `seconds` after connecting."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        deadline = time.monotonic() + self.seconds
        wait = _left(deadline, timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, wait, local_address, socket_options)
        return DeadlineStream(stream, deadline)


class DeadlineSMTP(smtplib.SMTP):
    """smtplib's client whose `timeout` bounds the whole connection, not each read: its
    socket is shut down that long after connecting, so a blocked read returns and
    smtplib gives up (disconnected)."""

    _timer: threading.Timer | None = None

    def _get_socket(self, host: str, port: int, timeout: Any) -> socket.socket:
        sock = super()._get_socket(host, port, timeout)  # type: ignore[misc]  # untyped
        if isinstance(timeout, int | float):
            self._timer = threading.Timer(timeout, _shut, args=(sock,))
            self._timer.daemon = True
            self._timer.start()
        return sock

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().close()


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


class DeadlineEmailBackend(EmailBackend):
    """Django's SMTP backend with one total deadline per connection: EMAIL_TIMEOUT seconds
    for connecting, the greeting, STARTTLS, login and the messages of one send together,
    so a mail server that accepts and never answers, or answers a byte at a time, holds a
    send EMAIL_TIMEOUT at most (SEC-8). Implicit TLS (EMAIL_USE_SSL) keeps smtplib's."""

    @property
    def connection_class(self) -> type[smtplib.SMTP]:
        return smtplib.SMTP_SSL if self.use_ssl else DeadlineSMTP
