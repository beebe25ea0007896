"""tests/support.free_ports: the ports every suite's servers bind. Picked where the kernel never hands out a port
by itself, so nothing else on the host takes one between the pick and the caller's bind."""

import socket

from support import _ephemeral_range, free_port, free_ports


def test_ports_are_distinct_free_outside_the_ephemeral_range_and_never_repeated():
    low, high = _ephemeral_range()
    first, second = free_ports(6), free_ports(6)
    ports = first + second + [free_port()]
    assert len(set(ports)) == len(ports), ports
    assert all(not low <= p <= high and 10_000 <= p <= 65535 for p in ports), (low, high, ports)
    for port in ports:  # free now: a listener can bind each of them
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen()
