"""SEC-9: webhook URLs may not reach the inside. Only http and https; loopback, private,
link-local (metadata), shared, unspecified, multicast and IPv4-mapped IPv6 targets are
refused on save (API, admin, model) and again at connect time after DNS, and the
connection goes to the address that was checked, so DNS rebinding cannot swap it —
unless the host is in `AGENTRUNS_WEBHOOK_ALLOWED_HOSTS`. Redirects are not followed, the
deliveries list does not tell open ports from closed ones, and the secret is never
shown again (API and admin)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from agentruns import outbound
from agentruns.models import Webhook, WebhookAttempt, WebhookDelivery
from agentruns.services.webhooks import NO_RESPONSE, webhook_deliver_due
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_provider
from tests.support.ops import Receiver, client_for, hook_owner, loopback, refused_port
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

SECRET = "s3cret-for-signing-0123456789"
INSIDE = [
    "http://127.0.0.1:5432/",
    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "http://[::1]/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://192.168.1.1/",
    "http://100.100.100.200/latest/meta-data/",  # shared space: Alibaba's metadata
    "http://0.0.0.0:8000/",
    "http://224.0.0.1/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:a9fe:a9fe]/",  # 169.254.169.254, mapped
    "http://[64:ff9b::a00:1]/",  # 10.0.0.1 through NAT64
    "http://[fd00:ec2::254]/",  # AWS's IPv6 metadata
    "http://[fe80::1]/",
    "http://localhost:8000/",  # a name: refused for what it resolves to
]
NOT_HTTP = ["ftp://files.example.com/x", "file:///etc/passwd"]


def webhook_body(url: str) -> dict:
    return {"url": url, "events": [], "secret": SECRET}


@pytest.mark.parametrize("url", INSIDE + NOT_HTTP)
def test_sec9_the_api_refuses_an_inside_target_on_save(staff, url):
    response = client_for(staff).post("/api/webhooks/", webhook_body(url), format="json")
    assert response.status_code == 400, response.content
    assert "url" in response.json()["fields"]
    assert SECRET not in response.content.decode()
    assert not Webhook.objects.exists()


@pytest.mark.parametrize("url", INSIDE + NOT_HTTP)
def test_sec9_model_validation_refuses_it_too(url):
    with pytest.raises(ValidationError) as caught:
        Webhook(url=url, secret=SECRET).full_clean()
    assert "url" in caught.value.message_dict


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1"])
def test_sec9_other_spellings_of_loopback_are_refused_for_what_they_resolve_to(host):
    assert "loopback" in (outbound.url_problem(f"http://{host}/") or "")


def test_sec9_the_admin_refuses_it_and_accepts_a_public_target(django_user_model):
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    form = {"url": "http://169.254.169.254/", "events": "[]", "secret": SECRET, "active": "on"}
    response = client.post("/admin/agentruns/webhook/add/", form)
    assert response.status_code == 200
    assert "link-local" in response.content.decode()
    assert not Webhook.objects.exists()
    form["url"] = "https://93.184.215.14/hook"
    assert client.post("/admin/agentruns/webhook/add/", form).status_code == 302


@pytest.mark.parametrize("url", ["https://93.184.215.14/hook", "https://hooks.example.invalid/x"])
def test_sec9_a_public_or_not_yet_resolvable_target_is_accepted(staff, url):
    """A name that does not resolve yet is accepted: the connection is checked anyway."""
    response = client_for(staff).post("/api/webhooks/", webhook_body(url), format="json")
    assert response.status_code == 201, response.content


def test_sec9_an_allow_listed_host_may_be_inside(staff, settings):
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "receiver.internal"]
    for url in ("http://127.0.0.1:9000/hook", "http://receiver.internal/hook"):
        response = client_for(staff).post("/api/webhooks/", webhook_body(url), format="json")
        assert response.status_code == 201, response.content
    bad = client_for(staff).post("/api/webhooks/", webhook_body("ftp://127.0.0.1/"))
    assert bad.status_code == 400  # the scheme rule holds for listed hosts too


# --- at connect time ----------------------------------------------------------------------


def queue_one_delivery(staff, url: str) -> Webhook:
    """A webhook row written around the save check (before the rule, or by SQL), and one
    event for it to deliver."""
    hook = Webhook.objects.create(
        url=url, events=["message.user"], secret=SECRET, created_by=hook_owner()
    )
    make_configuration(
        "wh", provider=make_provider("wh-p", zone="local"), script={"turns": [{"text": "hi"}]}
    )
    submit(staff, "wh", "hello")
    assert WebhookDelivery.objects.filter(webhook=hook).count() == 1
    return hook


def only_attempt() -> WebhookAttempt:
    [attempt] = WebhookAttempt.objects.all()
    return attempt


def test_sec9_a_row_written_earlier_is_refused_at_connect_time(staff):
    receiver = Receiver(statuses=[200])
    try:
        queue_one_delivery(staff, receiver.url)
        assert webhook_deliver_due() == 1
    finally:
        receiver.close()
    assert receiver.received == []
    attempt = only_attempt()
    assert attempt.status_code is None
    assert attempt.error.startswith("refused: 127.0.0.1 resolves to 127.0.0.1 is a loop")


def test_sec9_a_scheme_other_than_http_is_refused_at_connect_time(staff):
    queue_one_delivery(staff, "ftp://files.example.com/x")
    webhook_deliver_due()
    assert "refused: " in only_attempt().error


class FakeDNS:
    """`host` answers each lookup with the next of `answers` (the last repeats); every
    other name goes to the real resolver."""

    def __init__(self, host: str, *answers: str) -> None:
        self.host, self.answers, self.lookups = host, list(answers), 0
        self.real = socket.getaddrinfo

    def __call__(self, host, port, *args, **kw):
        if host != self.host:
            return self.real(host, port, *args, **kw)
        answer = self.answers[min(self.lookups, len(self.answers) - 1)]
        self.lookups += 1
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]


def test_sec9_dns_rebinding_after_the_save_check_is_refused_at_connect(staff, monkeypatch):
    """Public when saved, loopback when the cluster connects: refused, nothing sent."""
    receiver = Receiver(statuses=[200])
    port = receiver.server.server_address[1]
    dns = FakeDNS("rebind.test", "93.184.215.14", "127.0.0.1")
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    try:
        url = f"http://rebind.test:{port}/hook"
        saved = client_for(staff).post("/api/webhooks/", webhook_body(url), format="json")
        assert saved.status_code == 201, saved.content
        Webhook.objects.update(events=["message.user"])
        make_configuration(
            "wh", provider=make_provider("wh-p", zone="local"), script={"turns": [{"text": "x"}]}
        )
        submit(staff, "wh", "hello")
        webhook_deliver_due()
    finally:
        receiver.close()
    assert receiver.received == []
    assert "rebind.test resolves to 127.0.0.1 is a loopback" in only_attempt().error


def test_sec9_the_connection_goes_to_the_address_that_was_checked(staff, monkeypatch):
    """The name resolves to 127.0.0.1 once (taken as public for this test) and to
    127.0.0.2 — where nothing listens — on any later lookup: the delivery still arrives,
    because the cluster connects to the checked address instead of resolving again; the
    receiver sees the name in the Host header."""
    receiver = Receiver(statuses=[200])
    port = receiver.server.server_address[1]
    dns = FakeDNS("pinned.test", "127.0.0.1", "127.0.0.2")
    monkeypatch.setattr(socket, "getaddrinfo", dns)
    real_problem = outbound.address_problem
    monkeypatch.setattr(
        outbound,
        "address_problem",
        lambda address: None if str(address) == "127.0.0.1" else real_problem(address),
    )
    try:
        queue_one_delivery(staff, f"http://pinned.test:{port}/hook")
        assert webhook_deliver_due() == 1
    finally:
        receiver.close()
    assert only_attempt().status_code == 200
    [got] = receiver.received
    assert got.headers["Host"] == f"pinned.test:{port}"
    assert dns.lookups == 1


class _Redirect(BaseHTTPRequestHandler):
    target = ""

    def do_POST(self) -> None:
        self.send_response(302)
        self.send_header("Location", self.target)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_sec9_redirects_are_not_followed(staff, settings):
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    inside = Receiver(statuses=[200])
    _Redirect.target = inside.url
    try:
        with loopback(_Redirect) as base:
            queue_one_delivery(staff, f"{base}/hook")
            webhook_deliver_due()
    finally:
        inside.close()
    assert inside.received == []
    attempt = only_attempt()
    assert (attempt.status_code, attempt.error) == (302, "HTTP 302")


@contextmanager
def tcp_port(behaviour: str) -> Iterator[int]:
    """A loopback port that accepts and then talks something other than HTTP ("banner")
    or says nothing at all ("silent")."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    accepted: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            accepted.append(conn)
            if behaviour == "banner":
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                conn.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()


def test_sec9_the_deliveries_list_does_not_tell_open_ports_from_closed(staff, settings):
    """A closed port, an open port speaking another protocol and an open port that never
    answers leave the same record: no status, one error text, no duration."""
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.AGENTRUNS_WEBHOOK_TIMEOUT = 0.5
    with tcp_port("banner") as banner, tcp_port("silent") as silent:
        ports = {"closed": refused_port(), "banner": banner, "silent": silent}
        hooks = {
            name: Webhook.objects.create(
                url=f"http://127.0.0.1:{port}/",
                events=["message.user"],
                secret=SECRET,
                created_by=hook_owner(),
            )
            for name, port in ports.items()
        }
        make_configuration(
            "wh", provider=make_provider("wh-p", zone="local"), script={"turns": [{"text": "x"}]}
        )
        submit(staff, "wh", "hello")
        assert webhook_deliver_due() == 3
    api = client_for(grant(staff))
    shown = {}
    for name, hook in hooks.items():
        [delivery] = api.get(f"/api/webhooks/{hook.pk}/deliveries/").json()["results"]
        [attempt] = delivery["attempt_log"]
        shown[name] = (
            delivery["last_status_code"],
            delivery["last_error"],
            attempt["status_code"],
            attempt["latency_ms"],
            attempt["error"],
        )
    assert set(shown.values()) == {(None, NO_RESPONSE, None, 0, NO_RESPONSE)}, shown


# --- the secret -------------------------------------------------------------------------


def test_sec9_the_secret_is_never_shown_again_by_the_api(staff):
    api = client_for(staff)
    created = api.post("/api/webhooks/", webhook_body("https://93.184.215.14/"), format="json")
    hook_id = created.json()["id"]
    pages = [
        created,
        api.get("/api/webhooks/"),
        api.get(f"/api/webhooks/{hook_id}/"),
        api.patch(f"/api/webhooks/{hook_id}/", {"description": "d"}, format="json"),
        api.put(
            f"/api/webhooks/{hook_id}/",
            {**webhook_body("http://10.0.0.1/"), "secret": SECRET + "-2"},
            format="json",
        ),
        api.get(f"/api/webhooks/{hook_id}/deliveries/"),
    ]
    for page in pages:
        assert SECRET not in page.content.decode(), page.content


def test_sec9_the_secret_is_never_shown_by_the_admin_even_read_only(django_user_model):
    """A staff user who may only view webhooks gets every field as text — but the secret."""
    hook = Webhook.objects.create(
        url="https://93.184.215.14/", secret=SECRET, created_by=hook_owner()
    )
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    from django.contrib.auth.models import Permission

    viewer.user_permissions.add(Permission.objects.get(codename="view_webhook"))
    client = Client()
    client.force_login(viewer)
    page = client.get(f"/admin/agentruns/webhook/{hook.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "93.184.215.14" in html
    assert SECRET not in html
    listing = client.get("/admin/agentruns/webhook/").content.decode()
    assert SECRET not in listing
