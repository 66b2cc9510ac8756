"""Private networks of Linux network namespaces, whose links a test cuts.

Each member gets a namespace of its own with one veth link to a bridge in
a hub namespace, and an address in a private /24 that exists only on that
bridge; this (the test's) namespace joins the bridge with one more veth.
Members reach each other and the test reaches them, nothing else is
routed. The bridge lives in a fresh namespace so that this namespace's
bridge netfilter rules (br_netfilter) never see the members' traffic. `cut(member)` blackholes the member's traffic to
every other member and theirs to it (in both directions, so no half-open
links), while the test still reaches every member; `heal()` undoes it.
Needs root (`ip netns add`); `close()` removes every namespace and link,
also after a failed `create()`.
"""

from __future__ import annotations

import os
import subprocess


class NetnsUnavailable(Exception):
    """This machine cannot create network namespaces (no root, no `ip`)."""


def ip(*args: str, netns: str | None = None) -> None:
    command = ["ip", *(["netns", "exec", netns, "ip"] if netns else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")


class Network:
    """Members 1..n, each `namespace(i)` with `address(i)`."""

    def __init__(self, members: list[int]):
        # Unique per test process, so concurrent tests do not collide.
        tag = f"{os.getpid() % 100000}"
        self.subnet = f"10.213.{os.getpid() % 250}"
        self.bridge = "br0"
        self.hub = f"strom{tag}-hub"
        self.uplink = f"stv{tag}up"
        self.members = {member: index + 1 for index, member in enumerate(members)}
        self.tag = tag
        self.created: list[str] = []
        self.uplink_created = False
        self.cut_routes: list[tuple[str, str]] = []

    def namespace(self, member: int) -> str:
        return f"strom{self.tag}-{member}"

    def address(self, member: int) -> str:
        return f"{self.subnet}.{self.members[member]}"

    def create(self) -> None:
        try:
            ip("netns", "add", self.hub)
        except (RuntimeError, OSError) as e:
            raise NetnsUnavailable(str(e)) from e
        self.created.append(self.hub)
        try:
            ip("link", "add", self.bridge, "type", "bridge", netns=self.hub)
            ip("link", "set", self.bridge, "up", netns=self.hub)
            ip("link", "add", self.uplink, "type", "veth", "peer", "name", f"{self.uplink}p")
            self.uplink_created = True
            self._attach(f"{self.uplink}p")
            ip("addr", "add", f"{self.subnet}.254/24", "dev", self.uplink)
            ip("link", "set", self.uplink, "up")
            for member in self.members:
                self._add(member)
        except (RuntimeError, OSError) as e:
            self.close()
            raise NetnsUnavailable(str(e)) from e

    def _add(self, member: int) -> None:
        ns, index = self.namespace(member), self.members[member]
        outer, inner = f"stv{self.tag}o{index}", f"stv{self.tag}i{index}"
        ip("netns", "add", ns)
        self.created.append(ns)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", inner, "netns", ns)
        self._attach(outer)
        ip("link", "set", "lo", "up", netns=ns)
        ip("addr", "add", f"{self.address(member)}/24", "dev", inner, netns=ns)
        ip("link", "set", inner, "up", netns=ns)

    def _attach(self, link: str) -> None:
        """Moves `link` into the hub and onto its bridge."""
        ip("link", "set", link, "netns", self.hub)
        ip("link", "set", link, "master", self.bridge, netns=self.hub)
        ip("link", "set", link, "up", netns=self.hub)

    def cut(self, member: int) -> None:
        """Blackholes every link between `member` and the other members."""
        for other in self.members:
            if other != member:
                self._blackhole(self.namespace(member), self.address(other))
                self._blackhole(self.namespace(other), self.address(member))

    def _blackhole(self, ns: str, address: str) -> None:
        ip("route", "add", "blackhole", f"{address}/32", netns=ns)
        self.cut_routes.append((ns, address))

    def heal(self) -> None:
        while self.cut_routes:
            ns, address = self.cut_routes.pop()
            ip("route", "del", "blackhole", f"{address}/32", netns=ns)

    def close(self) -> None:
        """Deletes this namespace's end of the uplink, then the namespaces
        (their veth pairs and the bridge go with them)."""
        errors = []
        if self.uplink_created:
            try:
                ip("link", "del", self.uplink)
                self.uplink_created = False
            except (RuntimeError, OSError) as e:
                errors.append(e)
        for ns in self.created:
            try:
                ip("netns", "del", ns)
            except (RuntimeError, OSError) as e:
                errors.append(e)
        self.created.clear()
        if errors:
            raise errors[0]
