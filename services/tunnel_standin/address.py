"""Which address the stand-in's public side listens on.

In the CPU form the sandboxes (Harbor `docker` environment containers) must reach the capture proxy
THROUGH the stand-in, exactly as E2B sandboxes reach it through cloudflared. The proxy binds
127.0.0.1, which a container cannot reach; the docker0 bridge gateway (172.17.0.1 by default) is an
address of the host that every container can route to, including containers on user-defined bridge
networks (their traffic to a host address is delivered locally, not forwarded between bridges).
Never 0.0.0.0: that would publish the proxy on every interface of the host, public ones included.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct

SIOCGIFADDR = 0x8915
_WILDCARDS = {"0.0.0.0", "::", "[::]", "*"}


class AddressError(ValueError):
    pass


def interface_ipv4(name: str) -> str | None:
    """IPv4 address of a network interface of this (host-network) container, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def listen_host(configured: str | None, bridge: str = "docker0") -> str:
    value = (configured or "").strip()
    if value in _WILDCARDS:
        raise AddressError(
            f"STANDIN_LISTEN_HOST={value} would publish the capture proxy on every interface; set it "
            "to the docker bridge gateway (e.g. 172.17.0.1) or leave it empty to detect docker0"
        )
    if value and value != "auto":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise AddressError(f"STANDIN_LISTEN_HOST={value!r} is not an IP address (e.g. 172.17.0.1)") from None
        return value
    found = interface_ipv4(bridge)
    if not found:
        raise AddressError(
            f"no {bridge} interface here to detect the sandbox-reachable address: set STANDIN_LISTEN_HOST "
            "to the gateway of the docker network the sandboxes use (docker network inspect bridge)"
        )
    return found
