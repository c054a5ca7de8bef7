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
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

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
            raise TargetRefused(f"refused (SEC-9): {host} resolves to {problem}")
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

    def __init__(self, **options: Any) -> None:
        # No connection is kept for a later request: each one is resolved and checked
        # anew, and a TLS session verified for one name never carries another's request.
        options.setdefault("limits", httpx.Limits(max_keepalive_connections=0))
        self._inner = httpx.HTTPTransport(**options)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in SCHEMES:
            raise TargetRefused(f"refused (SEC-9): {url.scheme} is not http or https")
        if not host_allowed(url.host):
            address = checked_address(url.host, url.port or SCHEMES[url.scheme])
            if url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": url.host}
            request.url = url.copy_with(host=str(address))
        return self._inner.handle_request(request)

    def close(self) -> None:
        self._inner.close()
