"""Where an agent's key lives: one server, the Redis Cluster node that owns its slot, or
the master a Sentinel names.

The Redis store asks `address(key, query)` before each attempt and reports back what
the servers said: `moved` (a cluster's MOVED: that slot lives elsewhere now) and `lost`
(the node did not answer, or a master turned replica). `query(address, command)` is one
round trip on the store's own connections, within the decision's budget, so finding a
node spends the same `storeTimeout` as the decision itself.
"""

from __future__ import annotations

import binascii

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Address = tuple[str, int]
    Query = Callable[[Address, tuple[Any, ...]], Any]

SLOTS = 16384


class TopologyError(Exception):
    """No node could say where the key lives (no sentinel knows the service, ...)."""


def key_slot(key: bytes) -> int:
    """Redis Cluster's slot of `key`: CRC16 (XMODEM) of the key, or of its `{hash tag}`."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key, 0) % SLOTS


class Single:
    """One server: a lost connection is an outage, not a reason to look elsewhere."""

    reroutes = False

    def __init__(self, address: Address) -> None:
        self._address = address

    def address(self, key: bytes | None, query: Query) -> Address:
        return self._address

    def masters(self, query: Query) -> list[Address]:
        return [self._address]

    def moved(self, slot: int, address: Address) -> None:
        raise TopologyError(f"MOVED from a server that is not a cluster node (slot {slot})")

    def lost(self, address: Address) -> None:
        pass


class Cluster:
    """A Redis Cluster, found from any of its `seeds`: the slot map comes from `CLUSTER
    SLOTS` on first use and after a node is lost; a MOVED updates the one slot.

    Safe under threads without a lock: a reader takes the map once (`self._slots` may be
    replaced by another thread's `lost` or refresh at any moment, never emptied in
    place), and a MOVED writes one slot of a map that keeps its length."""

    reroutes = True

    def __init__(self, seeds: list[Address]) -> None:
        self._seeds = seeds
        self._slots: list[Address | None] = []

    def address(self, key: bytes | None, query: Query) -> Address:
        if key is None:
            return self.masters(query)[0]
        slot = key_slot(key)
        owner = self._map(query)[slot]
        if owner is None:  # the cluster has no node for this slot right now
            raise TopologyError(f"no cluster node serves slot {slot}")
        return owner

    def masters(self, query: Query) -> list[Address]:
        found = list(dict.fromkeys(a for a in self._map(query) if a is not None))
        if not found:
            raise TopologyError("the cluster serves no slot")
        return found

    def moved(self, slot: int, address: Address) -> None:
        slots = self._slots
        if slots:
            slots[slot] = address
        if address not in self._seeds:
            self._seeds.append(address)

    def lost(self, address: Address) -> None:
        self._slots = []

    def _map(self, query: Query) -> list[Address | None]:
        slots = self._slots
        return slots if slots else self._refresh(query)

    def _refresh(self, query: Query) -> list[Address | None]:
        failures = []
        for seed in list(self._seeds):
            try:
                reply = query(seed, ("CLUSTER", "SLOTS"))
            except (OSError, ConnectionError) as exc:
                failures.append(f"{seed[0]}:{seed[1]}: {exc}")
                continue
            slots = _slot_map(reply, seed)
            for address in slots:
                if address is not None and address not in self._seeds:
                    self._seeds.append(address)
            self._slots = slots
            return slots
        raise ConnectionError("no cluster node answered (" + "; ".join(failures) + ")")


def _slot_map(reply: Any, asked: Address) -> list[Address | None]:
    """CLUSTER SLOTS' [[first, last, [host, port, ...], replicas...], ...] as one owner
    per slot (an empty host is the node that was asked)."""
    slots: list[Address | None] = [None] * SLOTS
    if not isinstance(reply, list):
        raise TopologyError(f"CLUSTER SLOTS answered {str(reply)[:100]}")
    for entry in reply:
        try:
            first, last, (host, port, *_), *_ = entry
            address = (host.decode() or asked[0], int(port))
            slots[int(first) : int(last) + 1] = [address] * (int(last) - int(first) + 1)
        except (TypeError, ValueError, AttributeError) as exc:
            raise TopologyError(f"unreadable CLUSTER SLOTS entry: {str(entry)[:100]}") from exc
    return slots


class Sentinel:
    """The master of `service` as the first answering sentinel names it; asked again
    after the master is lost (a failover), so decisions follow the new master."""

    reroutes = True

    def __init__(self, sentinels: list[Address], service: str) -> None:
        self._sentinels = sentinels
        self._service = service
        self._master: Address | None = None

    def address(self, key: bytes | None, query: Query) -> Address:
        if self._master is None:
            self._master = self._ask(query)
        return self._master

    def masters(self, query: Query) -> list[Address]:
        return [self.address(None, query)]

    def moved(self, slot: int, address: Address) -> None:
        raise TopologyError(f"MOVED from a Sentinel-managed master (slot {slot})")

    def lost(self, address: Address) -> None:
        if self._master == address:
            self._master = None

    def _ask(self, query: Query) -> Address:
        failures = []
        for sentinel in self._sentinels:
            try:
                reply = query(sentinel, ("SENTINEL", "get-master-addr-by-name", self._service))
            except (OSError, ConnectionError) as exc:
                failures.append(f"{sentinel[0]}:{sentinel[1]}: {exc}")
                continue
            if isinstance(reply, list) and len(reply) == 2:
                try:
                    return reply[0].decode(), int(reply[1])
                except (AttributeError, ValueError):
                    pass
            failures.append(f"{sentinel[0]}:{sentinel[1]} does not know {self._service!r}")
        raise ConnectionError("no sentinel named a master (" + "; ".join(failures) + ")")
