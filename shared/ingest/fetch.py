"""Fetch a URL on a user's behalf without letting it reach our own network (SSRF).

Each hop resolves the host once, refuses it unless every address is public, then connects to the
checked address itself — the URL's host is replaced by that IP, with the Host header and TLS SNI
(hence certificate checking) still naming the original host — so a DNS answer that changes between
check and connect (rebinding) cannot redirect the request. Redirects are followed by hand, each hop
checked the same way; bodies are streamed and cut at `max_bytes`; proxies from the environment are
ignored, since a proxy would resolve the name itself.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin

import httpx

from shared.errors import InvalidInput, PayloadTooLarge, UpstreamFailed
from shared.ingest.addresses import IPNetwork, is_public, refusal_reason
from shared.ingest.params import IngestParams

DEFAULT_MAX_BYTES = IngestParams.max_bytes
DEFAULT_MAX_REDIRECTS = 5
USER_AGENT = "mnemoflow-ingest/0.1"
_REDIRECTS = {301, 302, 303, 307, 308}

# host, port → the addresses it resolves to (strings); replaceable in tests and by deployments with their own DNS.
Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True, slots=True)
class Fetched:
    """A fetched body with the URL it finally came from (after redirects) and its declared content type."""

    content: bytes
    url: str
    content_type: str | None
    status_code: int


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host` (IPv4 and IPv6)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UpstreamFailed(f"cannot resolve host {host!r}: {exc.strerror}", details={"host": host}) from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def check_url(
    url: str,
    *,
    allow_private: bool = False,
    allowed_networks: Iterable[str | IPNetwork] = (),
    resolver: Resolver = system_resolver,
) -> list[str]:
    """The addresses `url` would be fetched from now, after the checks `fetch_url` applies to its first hop.

    For refusing a bad URL up front (the fetch itself checks again, every hop, at the time it connects).
    Raises InvalidInput (scheme, refused address) or UpstreamFailed (the host does not resolve).
    """
    networks = [ipaddress.ip_network(n) if isinstance(n, str) else n for n in allowed_networks]
    return _checked_addresses(_parsed(url), resolver, allow_private, networks)


def fetch_url(
    url: str,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    connect_timeout_s: float = 10.0,
    read_timeout_s: float = 20.0,
    total_timeout_s: float = 60.0,
    allow_private: bool = False,
    allowed_networks: Iterable[str | IPNetwork] = (),
    resolver: Resolver = system_resolver,
    verify: ssl.SSLContext | bool = True,
) -> Fetched:
    """GET `url` (http or https only), following up to `max_redirects` redirects, refusing non-public addresses.

    `allow_private` turns the address check off (tests, trusted single-tenant deployments);
    `allowed_networks` admits only the listed networks (e.g. an intranet wiki) and keeps refusing the rest.
    Raises InvalidInput (bad or refused URL, too many redirects), PayloadTooLarge (body over `max_bytes`)
    or UpstreamFailed (DNS, connection, timeout, or an error status from the server).
    """
    networks = [ipaddress.ip_network(n) if isinstance(n, str) else n for n in allowed_networks]
    deadline = time.monotonic() + total_timeout_s
    timeout = httpx.Timeout(
        connect=connect_timeout_s, read=read_timeout_s, write=read_timeout_s, pool=connect_timeout_s
    )
    current = url
    with httpx.Client(timeout=timeout, verify=verify, trust_env=False, follow_redirects=False) as client:
        for _hop in range(max_redirects + 1):
            if time.monotonic() > deadline:
                raise UpstreamFailed(f"fetching {url} took longer than the total time limit", details={"url": url})
            target = _parsed(current)  # a redirect's Location too: "http://0177.0.0.1/" is refused, not retried
            response = _connect(client, target, _checked_addresses(target, resolver, allow_private, networks))
            try:
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if response.status_code >= 400:
                    raise UpstreamFailed(
                        f"{current} answered HTTP {response.status_code}",
                        details={"url": current, "status": response.status_code},
                    )
                content = _read_limited(response, max_bytes, deadline, current)
                return Fetched(content, current, response.headers.get("content-type"), response.status_code)
            finally:
                response.close()
    raise InvalidInput(f"too many redirects (more than {max_redirects}) from {url}", details={"url": url})


def _parsed(url: str) -> httpx.URL:
    try:
        return httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidInput(f"not a valid URL: {url!r} ({exc})", details={"url": url}) from exc


def _connect(client: httpx.Client, target: httpx.URL, addresses: list[str]) -> httpx.Response:
    """Send the GET to the first of the checked `addresses` that accepts a connection (e.g. IPv4 after IPv6)."""
    for position, address in enumerate(addresses):
        request = client.build_request(
            "GET",
            target.copy_with(host=address),
            headers={"Host": _host_header(target), "User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
            extensions={"sni_hostname": target.host} if target.scheme == "https" else {},
        )
        try:
            return client.send(request, stream=True)
        except httpx.ConnectError as exc:
            if position + 1 < len(addresses):
                continue
            raise UpstreamFailed(f"could not connect to {target}: {exc}", details={"url": str(target)}) from exc
        except httpx.TimeoutException as exc:
            raise UpstreamFailed(f"timed out fetching {target}", details={"url": str(target)}) from exc
        except httpx.RemoteProtocolError as exc:
            if "location header" in str(exc):  # httpx parses a redirect's Location before we see it
                message = f"not a valid URL in the redirect from {target} ({exc})"
                raise InvalidInput(message, details={"url": str(target)}) from exc
            raise UpstreamFailed(f"could not fetch {target}: {exc}", details={"url": str(target)}) from exc
        except httpx.HTTPError as exc:
            raise UpstreamFailed(f"could not fetch {target}: {exc}", details={"url": str(target)}) from exc
    raise UpstreamFailed(f"host {target.host!r} has no address", details={"host": target.host})


def _checked_addresses(
    target: httpx.URL, resolver: Resolver, allow_private: bool, networks: list[IPNetwork]
) -> list[str]:
    """The addresses to connect to for `target`, after refusing bad schemes and non-public resolutions."""
    if target.scheme not in ("http", "https") or not target.host:
        raise InvalidInput(
            f"only http and https URLs can be fetched, not {str(target)!r}", details={"url": str(target)}
        )
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        addresses = [ipaddress.ip_address(target.host)]
    except ValueError:
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in resolver(target.host, port)]
    if not addresses:
        raise UpstreamFailed(f"host {target.host!r} has no address", details={"host": target.host})
    if not allow_private:
        # Every answer must pass, not just the first: otherwise a name listing one public and one internal
        # address would be let through and the connection could still land on the internal one.
        for address in addresses:
            if not is_public(address, networks):
                raise InvalidInput(
                    f"refused to fetch {target}: {target.host} resolves to {address}, a {refusal_reason(address)}",
                    details={"url": str(target), "address": str(address)},
                )
    return [str(address) for address in addresses]


def _host_header(target: httpx.URL) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port is None else f"{host}:{target.port}"


def _read_limited(response: httpx.Response, max_bytes: int, deadline: float, url: str) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(url, max_bytes)
    body = bytearray()
    try:
        # iter_bytes decodes gzip/deflate, so the limit counts decompressed bytes: a compressed bomb stops too.
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise _too_large(url, max_bytes)
            if time.monotonic() > deadline:
                raise UpstreamFailed(f"fetching {url} took longer than the total time limit", details={"url": url})
    except httpx.TimeoutException as exc:
        raise UpstreamFailed(f"timed out reading {url}", details={"url": url}) from exc
    except httpx.HTTPError as exc:
        raise UpstreamFailed(f"could not read {url}: {exc}", details={"url": url}) from exc
    return bytes(body)


def _too_large(url: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{url} is larger than the {max_bytes:,} byte limit", details={"url": url, "max_bytes": max_bytes}
    )
