"""Which addresses a webhook may reach, and that the worker connects to the address it checked
(issue 46, items 1 and 2)."""

from __future__ import annotations

import socket
import ssl
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler

import pytest
from django.utils import timezone

from tests.support import LoopbackServer
from webhooks import services
from webhooks.models import WebhookAttempt, WebhookDelivery, WebhookSubscription

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _quick_attempts(settings):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = False
    settings.ENGRAM_WEBHOOKS_TIMEOUT = 2.0
    settings.ENGRAM_WEBHOOKS_BACKOFF_SECONDS = 1.0


# Every form below reaches a loopback, private, link-local or otherwise non-public IPv4 host, or
# lies in an IPv6 range no public receiver lives in. Python's `is_global` says yes to most of them.
HIDDEN_OR_SPECIAL = [
    "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 (RFC 6052) of 169.254.169.254
    "http://[64:ff9b::a00:1]/",  # NAT64 of 10.0.0.1
    "http://[64:ff9b::7f00:1]/",  # NAT64 of 127.0.0.1
    "http://[64:ff9b::c0a8:101]/",  # NAT64 of 192.168.1.1
    "http://[64:ff9b:1::a00:1]/",  # local-use NAT64 prefix (RFC 8215)
    "http://[2002:a9fe:a9fe::1]/",  # 6to4 of 169.254.169.254
    "http://[2002:7f00:1::1]/",  # 6to4 of 127.0.0.1
    "http://[2002:a00:1::1]/",  # 6to4 of 10.0.0.1
    "http://[::127.0.0.1]/",  # IPv4-compatible (deprecated)
    "http://[::a9fe:a9fe]/",  # IPv4-compatible of 169.254.169.254
    "http://[::8.8.8.8]/",  # IPv4-compatible, even of a public address: deprecated, no route
    "http://[::ffff:127.0.0.1]/",  # IPv4-mapped
    "http://[::ffff:a9fe:a9fe]/",  # IPv4-mapped of 169.254.169.254
    "http://[::ffff:0:7f00:1]/",  # IPv4-translated (RFC 2765) of 127.0.0.1
    "http://[::ffff:0:a00:1]/",  # IPv4-translated of 10.0.0.1
    "http://[fec0::1]/",  # site-local (deprecated)
    "http://[fc00::1]/",  # unique local
    "http://[fe80::1]/",  # link-local
    "http://[ff02::1]/",  # multicast
    "http://[100::1]/",  # discard-only
    "http://[2001::1]/",  # Teredo
    "http://[2001:db8::1]/",  # documentation
    "http://[3fff::1]/",  # documentation (RFC 9637)
    "http://[5f00::1]/",  # segment routing SIDs, outside global unicast
    "http://[::]/",
    "http://[::1]/",
    "http://0.0.0.0/",
    "http://100.64.0.1/",  # shared address space (carrier-grade NAT)
    "http://192.0.0.1/",
    "http://192.0.2.1/",
    "http://192.88.99.1/",  # 6to4 relay anycast (deprecated)
    "http://198.18.0.1/",
    "http://224.0.0.1/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://2130706433/",  # 127.0.0.1 as one number
    "http://0x7f.1/",
]

PUBLIC = [
    "http://8.8.8.8/hook",
    "http://[2606:4700:4700::1111]/hook",
    "http://[64:ff9b::808:808]/hook",  # NAT64 of a public address
    "http://[2002:808:808::1]/hook",  # 6to4 of a public address
    "http://[::ffff:8.8.8.8]/hook",  # IPv4-mapped of a public address
]


@pytest.mark.parametrize("url", HIDDEN_OR_SPECIAL)
def test_a_url_naming_a_hidden_private_ipv4_or_a_special_range_is_refused_on_create_and_patch(admin_api, url):
    response = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_url"
    assert not WebhookSubscription.objects.exists()

    hook = admin_api.post("/api/v1/webhooks", {"url": PUBLIC[0]}, format="json").json()
    response = admin_api.patch(f"/api/v1/webhooks/{hook['id']}", {"url": url}, format="json")
    assert response.status_code == 400, response.content
    assert WebhookSubscription.objects.get().url == PUBLIC[0]


@pytest.mark.parametrize("url", PUBLIC)
def test_a_url_naming_a_public_address_in_any_form_is_accepted(admin_api, url):
    response = admin_api.post("/api/v1/webhooks", {"url": url}, format="json")
    assert response.status_code == 201, response.content


# --- what an attempt keeps of a failed answer ----------------------------------------------------


class Answering(LoopbackServer):
    """Answers every POST with ``status``, a reason phrase and a body of its own; records the
    Host header of each request."""

    def __init__(self, status: int, body: bytes = b"", reason: str = "", host: str = "127.0.0.1"):
        self.hosts: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers["Content-Length"]))
                server.hosts.append(self.headers["Host"])
                self.send_response(status, reason or None)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(Handler)


def _hook_and_event(api, bucket, url: str) -> None:
    hook = WebhookSubscription.objects.create(tenant=bucket.tenant, url=url, secret="whsec_test")
    assert hook.pk
    response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"content": "Something to send."}, format="json")
    assert response.status_code == 201


def test_a_failed_attempt_keeps_the_status_and_never_the_receivers_words(admin_api, api, bucket, settings):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    secret = b"root:x:0:0:the internal answer " * 20
    with Answering(500, body=secret, reason="LEAKED-REASON") as receiver:
        _hook_and_event(api, bucket, receiver.url + "/hook")
        assert services.webhooks_run()["retrying"] == 1
    attempt = WebhookAttempt.objects.get()
    delivery = WebhookDelivery.objects.get()
    assert attempt.status_code == 500
    assert attempt.error == delivery.last_error == "HTTP 500 Internal Server Error"
    answer = admin_api.get(f"/api/v1/webhooks/{delivery.subscription_id}/deliveries").content
    assert b"internal answer" not in answer and b"LEAKED" not in answer


def test_an_answer_that_is_not_http_is_not_echoed(admin_api, api, bucket, settings):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def banner():
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            # httpx's parser quotes a line it cannot read in its exception's message.
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Banner\x01: secret banner of an internal service\r\n\r\n")

    thread = threading.Thread(target=banner, daemon=True)
    thread.start()
    _hook_and_event(api, bucket, f"http://127.0.0.1:{port}/hook")
    services.webhooks_run()
    thread.join(timeout=10)
    listener.close()
    attempt = WebhookAttempt.objects.get()
    assert attempt.status_code is None
    assert "secret banner" not in attempt.error and "X-Banner" not in attempt.error
    assert "127.0.0.1" in attempt.error  # the host it tried, for the operator


# --- the address checked is the address connected to ---------------------------------------------


class Resolver:
    """A stand-in for the system resolver: ``name`` answers each address of ``answers`` in turn
    (the last one from then on); any other host is resolved as usual."""

    def __init__(self, monkeypatch, name: str, answers: list[str]):
        self.name = name
        self.answers = list(answers)
        self.asked = 0
        real = socket.getaddrinfo

        def getaddrinfo(host, port, *args, **kwargs):
            if host != self.name:
                return real(host, port, *args, **kwargs)
            address = self.answers[min(self.asked, len(self.answers) - 1)]
            self.asked += 1
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_name_that_resolves_elsewhere_the_second_time_is_connected_to_the_address_checked(
    admin_api, api, bucket, monkeypatch
):
    """DNS rebinding: the name answers a public address to the check and loopback afterwards.
    The worker must connect to the address it checked, never look the name up again."""
    public = "93.184.215.14"
    connected: list[tuple] = []
    real_create_connection = socket.create_connection

    def create_connection(address, *args, **kwargs):
        if address[0] == public:
            connected.append(address)  # stands for the public receiver; nothing leaves the machine
            raise ConnectionRefusedError(111, "Connection refused")
        return real_create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", create_connection)
    with Answering(200) as internal:
        port = internal.server.server_address[1]
        Resolver(monkeypatch, "rebind.example", [public, "127.0.0.1"])
        _hook_and_event(api, bucket, f"http://rebind.example:{port}/hook")
        services.webhooks_run()
        assert internal.hosts == []  # the loopback service never heard of it
    assert connected == [(public, port)]
    assert WebhookAttempt.objects.get().status_code is None


def test_a_pinned_connection_keeps_the_host_header_of_the_url(admin_api, api, bucket, monkeypatch, settings):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    with Answering(204) as receiver:
        port = receiver.server.server_address[1]
        Resolver(monkeypatch, "hooks.example", ["127.0.0.1"])
        _hook_and_event(api, bucket, f"http://hooks.example:{port}/hook")
        assert services.webhooks_run()["delivered"] == 1
    assert receiver.hosts == [f"hooks.example:{port}"]


def _self_signed(tmp_path, name: str) -> tuple[str, str]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(cert_path), str(key_path)


def test_a_pinned_tls_connection_sends_the_urls_host_name_as_sni(
    admin_api, api, bucket, monkeypatch, settings, tmp_path
):
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*_self_signed(tmp_path, "hooks.example"))
    names: list[str | None] = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        try:
            with context.wrap_socket(conn, server_side=True):
                pass
        except (ssl.SSLError, OSError):
            pass  # the worker does not trust a self-signed certificate: the handshake ends there

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    Resolver(monkeypatch, "hooks.example", ["127.0.0.1"])
    _hook_and_event(api, bucket, f"https://hooks.example:{port}/hook")
    services.webhooks_run(now=timezone.now())
    thread.join(timeout=10)
    listener.close()
    assert names == ["hooks.example"]
    assert WebhookAttempt.objects.get().status_code is None
