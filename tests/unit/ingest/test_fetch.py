"""URL fetching refuses our own network at every hop, caps size and time, and keeps Host/SNI right."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import trustme

from shared.errors import InvalidInput, PayloadTooLarge, UpstreamFailed
from shared.ingest import fetch_url
from shared.ingest.addresses import is_public, refusal_reason


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("93.184.216.34", True),
        ("2606:4700:4700::1111", True),
        ("::ffff:8.8.8.8", True),
        ("2002:0808:0808::1", True),  # 6to4 of a public IPv4
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("172.31.255.255", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("100.100.100.200", False),  # Alibaba Cloud metadata
        ("169.254.169.254", False),  # AWS / GCP / Azure metadata
        ("169.254.170.2", False),  # ECS task metadata
        ("192.0.0.192", False),  # Oracle Cloud metadata
        ("0.0.0.0", False),
        ("0.1.2.3", False),
        ("224.0.0.1", False),
        ("239.255.255.250", False),
        ("240.0.0.1", False),
        ("255.255.255.255", False),
        ("192.0.2.10", False),
        ("198.18.0.1", False),
        ("::1", False),
        ("::", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("fd00:ec2::254", False),  # AWS metadata over IPv6
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:169.254.169.254", False),
        ("::ffff:10.0.0.1", False),
        ("::127.0.0.1", False),  # IPv4-compatible (deprecated) loopback
        ("64:ff9b::a9fe:a9fe", False),  # NAT64 of 169.254.169.254
        ("2002:7f00:0001::1", False),  # 6to4 of 127.0.0.1
        ("2001:db8::1", False),
        ("2001::1", False),  # Teredo
    ],
)
def test_address_classification(address: str, public: bool) -> None:
    assert is_public(address) is public
    assert (refusal_reason(ipaddress.ip_address(address)) is None) is public


def test_refusal_reasons_name_the_kind_of_address() -> None:
    assert refusal_reason(ipaddress.ip_address("127.0.0.1")) == "loopback address"
    assert refusal_reason(ipaddress.ip_address("169.254.169.254")) == "link-local address"
    assert refusal_reason(ipaddress.ip_address("100.64.0.1")) == "carrier-grade NAT address"
    assert refusal_reason(ipaddress.ip_address("::ffff:127.0.0.1")) == "loopback address (embedded in ::ffff:7f00:1)"


def test_allowed_networks_admit_only_themselves() -> None:
    trusted = [ipaddress.ip_network("10.1.2.0/24")]
    assert is_public("10.1.2.3", trusted)
    assert not is_public("10.1.3.3", trusted)


def test_fetches_a_page_with_its_final_url_and_type(http_server: str) -> None:
    fetched = fetch_url(f"{http_server}/article", allow_private=True)
    assert b"The Heron Migration" in fetched.content
    assert fetched.url == f"{http_server}/article"
    assert fetched.content_type == "text/html; charset=utf-8"


def test_loopback_is_refused_when_private_addresses_are_not_allowed(http_server: str) -> None:
    with pytest.raises(InvalidInput, match=r"resolves to 127.0.0.1, a loopback address") as caught:
        fetch_url(f"{http_server}/article")
    assert caught.value.status_code == 422


def test_localhost_by_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match="loopback"):
        fetch_url("http://localhost:9/")


def test_a_redirect_to_loopback_is_refused_at_that_hop(second_loopback_server: str, http_server: str) -> None:
    # The first hop is a host this deployment trusts (127.0.0.2 stands in for it); the redirect is not.
    start = f"{second_loopback_server}/redirect?to={http_server}/article"
    assert fetch_url(start, allow_private=True).url == f"{http_server}/article"
    with pytest.raises(InvalidInput, match=r"refused to fetch http://127.0.0.1:\d+/article: .* loopback"):
        fetch_url(start, allowed_networks=["127.0.0.2/32"])


def test_a_redirect_to_the_metadata_service_is_refused(second_loopback_server: str) -> None:
    with pytest.raises(InvalidInput, match=r"169\.254\.169\.254, a link-local address"):
        fetch_url(
            f"{second_loopback_server}/redirect?to=http://169.254.169.254/latest/meta-data/",
            allowed_networks=["127.0.0.2/32"],
        )


def test_a_redirect_to_another_scheme_is_refused(second_loopback_server: str) -> None:
    with pytest.raises(InvalidInput, match="only http and https"):
        fetch_url(f"{second_loopback_server}/redirect?to=file:///etc/passwd", allowed_networks=["127.0.0.2/32"])


def test_dns_answers_are_checked_all_of_them(http_server: str) -> None:
    port = http_server.rsplit(":", 1)[1]
    with pytest.raises(InvalidInput, match=r"innocent\.example resolves to 10\.0\.0\.5"):
        fetch_url(f"http://innocent.example:{port}/", resolver=lambda host, port: ["93.184.216.34", "10.0.0.5"])
    with pytest.raises(InvalidInput, match=r"resolves to 127\.0\.0\.1"):
        fetch_url(f"http://rebind.example:{port}/", resolver=lambda host, port: ["127.0.0.1"])


def test_the_name_is_resolved_once_and_the_host_header_kept(http_server: str) -> None:
    port = http_server.rsplit(":", 1)[1]
    lookups: list[str] = []

    def resolver(host: str, _port: int) -> list[str]:
        lookups.append(host)
        return ["127.0.0.1"]

    fetched = fetch_url(f"http://docs.example:{port}/echo-host", allow_private=True, resolver=resolver)
    # One lookup, checked and then connected to: a second answer (DNS rebinding) never gets asked for.
    assert lookups == ["docs.example"]
    assert fetched.content == f"docs.example:{port}".encode()  # the Host header names the host, not the IP


def test_the_next_checked_address_is_tried_when_one_refuses_connections(http_server: str) -> None:
    port = http_server.rsplit(":", 1)[1]
    # Nothing listens on 127.0.0.3 (a dead first address, as an unreachable IPv6 one often is).
    fetched = fetch_url(
        f"http://docs.example:{port}/echo-host", allow_private=True, resolver=lambda h, p: ["127.0.0.3", "127.0.0.1"]
    )
    assert fetched.content == f"docs.example:{port}".encode()
    with pytest.raises(UpstreamFailed, match="could not connect"):
        fetch_url(f"http://docs.example:{port}/", allow_private=True, resolver=lambda h, p: ["127.0.0.3"])


def test_a_name_without_addresses_is_an_upstream_failure() -> None:
    with pytest.raises(UpstreamFailed, match="has no address"):
        fetch_url("http://empty.example/", resolver=lambda h, p: [])


@pytest.mark.parametrize("scheme_url", ["ftp://example.org/file", "file:///etc/passwd", "gopher://x/", "javascript:1"])
def test_only_http_and_https(scheme_url: str) -> None:
    with pytest.raises(InvalidInput, match="only http and https"):
        fetch_url(scheme_url)


def test_too_many_redirects(http_server: str) -> None:
    with pytest.raises(InvalidInput, match=r"too many redirects \(more than 3\)"):
        fetch_url(f"{http_server}/loop/0", allow_private=True, max_redirects=3)
    assert fetch_url(f"{http_server}/redirect?to=/article", allow_private=True, max_redirects=1).content


@pytest.mark.parametrize("path", ["/big", "/stream-big", "/gzip-bomb"])
def test_bodies_over_the_size_limit_are_cut(http_server: str, path: str) -> None:
    with pytest.raises(PayloadTooLarge, match="larger than the 1,000,000 byte limit") as caught:
        fetch_url(f"{http_server}{path}", allow_private=True, max_bytes=1_000_000)
    assert caught.value.status_code == 413


def test_slow_servers_time_out(http_server: str) -> None:
    with pytest.raises(UpstreamFailed, match="timed out"):
        fetch_url(f"{http_server}/slow", allow_private=True, read_timeout_s=0.3)


def test_error_statuses_are_upstream_failures(http_server: str) -> None:
    with pytest.raises(UpstreamFailed, match="answered HTTP 404") as caught:
        fetch_url(f"{http_server}/status/404", allow_private=True)
    assert caught.value.status_code == 502


def test_unresolvable_hosts_are_upstream_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_answer(*_args: object, **_kwargs: object) -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_answer)  # no DNS query leaves this machine
    with pytest.raises(UpstreamFailed, match=r"cannot resolve host 'no-such-host\.invalid'"):
        fetch_url("http://no-such-host.invalid/")


class _Hello(BaseHTTPRequestHandler):
    def log_message(self, *_args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = f"hello {self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def tls_server() -> Iterator[tuple[int, trustme.CA]]:
    """An HTTPS server on 127.0.0.1 with a certificate for docs.example only."""
    ca = trustme.CA()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("docs.example").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], ca
    finally:
        server.shutdown()
        server.server_close()


def test_https_to_a_pinned_address_still_verifies_the_certificate_for_the_host(
    tls_server: tuple[int, trustme.CA],
) -> None:
    port, ca = tls_server
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    to_loopback = {"allow_private": True, "resolver": lambda _host, _port: ["127.0.0.1"], "verify": trust}
    fetched = fetch_url(f"https://docs.example:{port}/", **to_loopback)
    assert fetched.content == f"hello docs.example:{port}".encode()
    # Same address, another name: the certificate is checked against the name (SNI), so this fails.
    with pytest.raises(UpstreamFailed, match=r"CERTIFICATE_VERIFY_FAILED"):
        fetch_url(f"https://other.example:{port}/", **to_loopback)
