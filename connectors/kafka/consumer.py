"""The one consumer interface ``KafkaSource`` drives, whichever client sits behind it.

An adapter (``kafka_python.KafkaPythonConsumer``, ``confluent.ConfluentConsumer``) polls its client and
hands back one ``Fetched`` per partition per poll, in offset order; it reports offset commits and errors
its client raises on its own threads through callbacks, and rebalances through ``subscribe``'s hooks.
Partitions are ``(topic, partition)`` tuples here and ``"topic:partition"`` keys in offsets and
checkpoints.

>>> partition_key("edges", 3), split_key("edges:3")
('edges:3', ('edges', 3))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...errors import ConfigError, OffsetOutOfRangeError
from .producer import CONTENT_TYPE_HEADER

TP = tuple[str, int]
OnAssign = Callable[[list[TP]], dict[TP, int]]  # records ownership, returns offsets to seek to
OnRevoke = Callable[[list[TP]], dict[TP, int]]  # drops buffered data, returns delivered offsets to commit
OnCommit = Callable[[dict[TP, int]], None]  # hears which offsets Kafka acknowledged
OnFailure = Callable[[BaseException, str], None]  # hears of errors the client reports on its own thread


def partition_key(topic: str, partition: int) -> str:
    """The ``"topic:partition"`` key used in ``positions()`` and checkpoint manifests."""
    return f"{topic}:{partition}"


def split_key(key: str) -> TP:
    """``"topic:partition"`` back into ``(topic, partition)``; a malformed key is a ``ConfigError``."""
    topic, sep, part = key.rpartition(":")
    if not sep or not part.isdigit():
        raise ConfigError(f"offset key {key!r} is not 'topic:partition' (e.g. 'edges:0')")
    return topic, int(part)


START_POLICIES = ("earliest", "latest")  # where a partition with no saved or committed offset starts


def out_of_range(tp: TP, position: int, low: int | None, end: int | None) -> OffsetOutOfRangeError:
    """The error for a partition whose next offset lies outside its log ``[low, end)``."""
    key = partition_key(*tp)
    where = "after the end" if end is not None and position > end else "before the start"
    span = f"[{'?' if low is None else low}, {'?' if end is None else end}]"
    return OffsetOutOfRangeError(
        f"partition {key}: the next offset to read, {position}, is {where} of its log {span}: the topic was "
        "recreated or truncated (a broker that lost its data, or retention), and reading on would skip "
        f"events. To read what the log holds now from its start, pass start_offsets={{{key!r}: 0}} or a "
        "store without these offsets"
    )


@dataclass
class Fetched:
    """One partition's messages from one poll, in offset order."""

    topic: str
    partition: int
    offsets: list[int]
    values: list[bytes | None]
    ctypes: list[str | None]


def content_type(headers) -> str | None:
    """The ``content-type`` header of a message (any case), or None."""
    if not headers:
        return None
    k, v = headers[0]
    if k == CONTENT_TYPE_HEADER and type(v) is bytes:  # how EventProducer sends it: a per-message fast path
        known = _CTYPES.get(v)
        if known is None:
            known = v.decode("latin-1")
            if len(_CTYPES) < 64:
                _CTYPES[v] = known
        return known
    for k, v in headers:
        if k == CONTENT_TYPE_HEADER or k.lower() == CONTENT_TYPE_HEADER:
            return None if v is None else bytes(v).decode("latin-1")
    return None


_CTYPES: dict[bytes, str] = {}  # decoded content types (a handful in practice)


def content_types(headers: list) -> list[str | None]:
    """``content_type`` of each message's headers; at C speed when all messages carry the same headers
    (what one producer sends), the usual case."""
    if headers and headers.count(headers[0]) == len(headers):
        return [content_type(headers[0])] * len(headers)
    return list(map(content_type, headers))


class Consumer(Protocol):
    """What ``KafkaSource`` needs of a client. Every method but ``close`` runs on the source's poller
    thread (or before it starts); rebalance hooks run inside ``poll``."""

    def partitions_for(self, topic: str) -> list[int]:
        """Partition ids of ``topic``, empty when it does not exist."""

    def subscribe(self, topics: list[str], assigned: OnAssign, revoked: OnRevoke) -> None:
        """Join the consumer group for ``topics``; the hooks hear of every assignment and revocation."""

    def assign(self, parts: list[TP], offsets: dict[TP, int]) -> None:
        """Read exactly ``parts``, from ``offsets`` where given (else the committed or reset offset)."""

    def poll(self, timeout_s: float, max_messages: int) -> list[Fetched]:
        """What arrived within ``timeout_s`` (at once if something was already fetched)."""

    def caught_up(self, parts: list[TP]) -> set[TP]:
        """The partitions read up to the end offset the broker last reported; raises
        ``OffsetOutOfRangeError`` for one whose position the broker confirms is beyond that end."""

    def end_offsets(self, parts: list[TP]) -> dict[TP, int]:
        """The broker's end offset (next offset to be written) of each of ``parts`` now (one request)."""

    def set_paused(self, parts: list[TP], paused: bool) -> None:
        """Stop or restart fetching ``parts`` while polling goes on (group membership survives)."""

    def commit(self, offsets: dict[TP, int], wait: bool) -> None:
        """Commit ``offsets``; the commit callback hears of success."""

    def close(self) -> None:
        """Leave the group and close connections, committing nothing more."""
