"""Which IP addresses a server-side fetch may connect to: public unicast only.

Python's `is_global` and friends changed between 3.11 and 3.13, so the refused ranges are also listed
here explicitly (IANA special-purpose registries plus cloud metadata endpoints), and addresses that
embed an IPv4 address (IPv4-mapped, IPv4-compatible, NAT64, 6to4) are judged by that IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_REFUSED_NETWORKS: tuple[IPNetwork, ...] = tuple(
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",  # "this network", unspecified
        "10.0.0.0/8",  # private
        "100.64.0.0/10",  # carrier-grade NAT (also Alibaba Cloud metadata, 100.100.100.200)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local (AWS/GCP/Azure/OpenStack metadata at 169.254.169.254)
        "172.16.0.0/12",  # private
        "192.0.0.0/24",  # IETF protocol assignments (Oracle Cloud metadata, 192.0.0.192)
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",  # private
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",  # documentation
        "203.0.113.0/24",  # documentation
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and 255.255.255.255 broadcast
        "::/128",  # unspecified
        "::1/128",  # loopback
        "100::/64",  # discard-only
        "2001::/23",  # IETF protocol assignments (Teredo, ORCHID, …)
        "2001:db8::/32",  # documentation
        "fc00::/7",  # unique local (AWS metadata over IPv6, fd00:ec2::254)
        "fe80::/10",  # link-local
        "fec0::/10",  # deprecated site-local
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def refusal_reason(address: IPAddress) -> str | None:
    """Why a fetch must not connect to `address` (e.g. "loopback"), or None when it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            reason = refusal_reason(inner)
            return None if reason is None else f"{reason} (embedded in {address})"
    for network in _REFUSED_NETWORKS:
        if address.version == network.version and address in network:
            return f"{_describe(address)} address"
    if not address.is_global or address.is_reserved:
        return "non-global address"
    return None


def is_public(address: IPAddress | str, allowed_networks: Iterable[IPNetwork] = ()) -> bool:
    """True when a server-side fetch may connect to `address` (public, or inside an explicitly allowed network)."""
    ip = ipaddress.ip_address(address) if isinstance(address, str) else address
    if any(ip.version == n.version and ip in n for n in allowed_networks):
        return True
    return refusal_reason(ip) is None


def _describe(address: IPAddress) -> str:
    for label, flag in (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
    ):
        if flag:
            return label
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10"):
        return "carrier-grade NAT"
    return "private or reserved"
