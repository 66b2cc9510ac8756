"""Just enough of the Kafka wire protocol, encoded by hand, to send requests no
real client would send and to read the broker's reaction byte by byte.

A request frame is size(int32) | api_key(int16) | api_version(int16) |
correlation_id(int32) | client_id(nullable int16-length string), plus an empty
tagged-field section (uvarint 0) in header v2, which flexible versions use.
Responses start with size | correlation_id; ApiVersions responses always use
response header v0, so no tagged fields follow the correlation id.

Beyond that, it speaks the requests real clients cannot be made to send as a
test needs them: Fetch with chosen sessions, epochs and size limits (v4-18),
Produce by name or topic id and with acks=0 (v3-13), Metadata and DeleteTopics
by topic id, the classic group protocol (FindCoordinator v4, JoinGroup v5-9,
SyncGroup v5, Heartbeat v4) with whatever member ids, generations and
timeouts a test needs, OffsetCommit v8 and OffsetFetch v8 (batched groups);
and it builds (uncompressed, gzip or zstd) and checks RecordBatch v2 (CRC-32C) by hand.
Decoders read every field of their version and insist nothing is left over.
"""

from __future__ import annotations

import gzip
import socket
import struct
import time
import uuid
from typing import NamedTuple, Sequence

import crc32c
import zstandard

PRODUCE = 0
FETCH = 1
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
SYNC_GROUP = 14
API_VERSIONS = 18
DELETE_TOPICS = 20
INIT_PRODUCER_ID = 22

# Kafka error codes.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
COORDINATOR_NOT_AVAILABLE = 15
UNSUPPORTED_VERSION = 35
INVALID_TIMESTAMP = 32
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

# Fetch session ids and epochs (KIP-227).
NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# First flexible version of each API Strom serves; earlier versions use request header v1.
FIRST_FLEXIBLE_VERSION = {0: 9, 1: 12, 2: 6, 3: 9, 8: 8, 9: 6, 10: 3, 11: 6, 12: 4, 14: 4, 18: 3, 19: 5, 20: 4, 22: 2, 60: 0}
# AddPartitionsToTxn, EndTxn, DescribeProducers, DescribeTransactions, ListTransactions.
FIRST_FLEXIBLE_VERSION.update({24: 3, 26: 3, 56: 0, 61: 0, 65: 0, 66: 0})
DESCRIBE_QUORUM = 55
FIRST_FLEXIBLE_VERSION[DESCRIBE_QUORUM] = 0


def int16(value: int) -> bytes:
    return struct.pack(">h", value)


def int32(value: int) -> bytes:
    return struct.pack(">i", value)


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def nullable_string(value: str | None) -> bytes:
    if value is None:
        return int16(-1)
    data = value.encode()
    return int16(len(data)) + data


def compact_string(value: str) -> bytes:
    data = value.encode()
    return uvarint(len(data) + 1) + data


def int8(value: int) -> bytes:
    return struct.pack(">b", value)


def int64(value: int) -> bytes:
    return struct.pack(">q", value)


def varint(value: int) -> bytes:
    """Zigzag varint, as record fields use."""
    return uvarint((value << 1) ^ (value >> 63))


class Writer:
    """Builds a request body for one API version: in flexible versions strings,
    bytes and arrays take their compact (uvarint length + 1) forms and
    `tagged_fields` writes an empty tagged-field section."""

    def __init__(self, flexible: bool):
        self.flexible = flexible
        self.out = bytearray()

    def raw(self, data: bytes) -> "Writer":
        self.out += data
        return self

    def int8(self, value: int) -> "Writer":
        return self.raw(int8(value))

    def int16(self, value: int) -> "Writer":
        return self.raw(int16(value))

    def int32(self, value: int) -> "Writer":
        return self.raw(int32(value))

    def int64(self, value: int) -> "Writer":
        return self.raw(int64(value))

    def boolean(self, value: bool) -> "Writer":
        return self.raw(b"\x01" if value else b"\x00")

    def uuid(self, value: uuid.UUID) -> "Writer":
        return self.raw(value.bytes)

    def length(self, size: int | None) -> "Writer":
        """A string/bytes/array length; None for null."""
        size = -1 if size is None else size
        return self.raw(uvarint(size + 1) if self.flexible else int32(size))

    def nullable_string(self, value: str | None) -> "Writer":
        if self.flexible:
            return self.raw(uvarint(0) if value is None else compact_string(value))
        return self.raw(nullable_string(value))

    string = nullable_string

    def nullable_bytes(self, value: bytes | None) -> "Writer":
        self.length(None if value is None else len(value))
        return self.raw(value or b"")

    def tagged_fields(self) -> "Writer":
        return self.raw(uvarint(0)) if self.flexible else self

    def build(self) -> bytes:
        return bytes(self.out)


def is_flexible(api_key: int, api_version: int) -> bool:
    first = FIRST_FLEXIBLE_VERSION.get(api_key)
    return first is not None and api_version >= first


def request_header(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None = "strom-tests", flexible: bool | None = None
) -> bytes:
    if flexible is None:
        flexible = is_flexible(api_key, api_version)
    header = struct.pack(">hhi", api_key, api_version, correlation_id) + nullable_string(client_id)
    return header + (uvarint(0) if flexible else b"")


def frame(payload: bytes) -> bytes:
    return int32(len(payload)) + payload


def request(api_key: int, api_version: int, correlation_id: int, body: bytes = b"", **header) -> bytes:
    return frame(request_header(api_key, api_version, correlation_id, **header) + body)


def api_versions_v3_body() -> bytes:
    """client_software_name, client_software_version (compact strings), empty tagged fields."""
    return compact_string("strom-tests") + compact_string("1.0") + uvarint(0)


def api_versions_request(version: int, correlation_id: int, **header) -> bytes:
    """A well-formed ApiVersions request; versions 0-2 have an empty body."""
    body = api_versions_v3_body() if version >= 3 else b""
    return request(API_VERSIONS, version, correlation_id, body, **header)


class Reaction(NamedTuple):
    """What the broker did with a request: bytes it sent back and whether it closed the connection."""

    received: bytes
    closed: bool


def connect(port: int, timeout_s: float = 5.0, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def send(sock: socket.socket, data: bytes) -> bool:
    """Send everything; False if the broker already closed on us (which is an answer too)."""
    try:
        sock.sendall(data)
        return True
    except (BrokenPipeError, ConnectionResetError):
        return False


def drain(sock: socket.socket, timeout_s: float = 5.0, until_frames: int | None = None) -> Reaction:
    """Read until the broker closes, `until_frames` complete frames arrived, or `timeout_s` passed."""
    received = bytearray()
    deadline = time.monotonic() + timeout_s
    while until_frames is None or len(split_frames(bytes(received))[0]) < until_frames:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Reaction(bytes(received), False)
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return Reaction(bytes(received), False)
        except ConnectionResetError:
            return Reaction(bytes(received), True)
        if not chunk:
            return Reaction(bytes(received), True)
        received += chunk
    return Reaction(bytes(received), False)


def exchange(port: int, data: bytes, half_close: bool = False, timeout_s: float = 5.0, until_frames=None) -> Reaction:
    """Open a connection, send `data`, optionally shut down our write side, and see what comes back."""
    with connect(port) as sock:
        if not send(sock, data):
            return Reaction(b"", True)
        if half_close:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                return Reaction(b"", True)
        return drain(sock, timeout_s, until_frames)


def split_frames(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete size-prefixed frames in `data`, and the incomplete rest."""
    frames, position = [], 0
    while position + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, position)
        if size < 0 or position + 4 + size > len(data):
            break
        frames.append(data[position + 4 : position + 4 + size])
        position += 4 + size
    return frames, data[position:]


class Reader:
    """Sequential decoding of a response body; running off the end raises struct.error.

    With `flexible`, strings, bytes and arrays are read in their compact
    (uvarint length + 1) forms and `tagged_fields` skips a tagged-field section.
    """

    def __init__(self, data: bytes, flexible: bool = False):
        self.data, self.position, self.flexible = data, 0, flexible

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.position)
        self.position += struct.calcsize(fmt)
        return values if len(values) > 1 else values[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.take(">B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def skip_tagged_fields(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()
            self.position += size

    def tagged_fields(self) -> None:
        if self.flexible:
            self.skip_tagged_fields()

    def int8(self) -> int:
        return self.take(">b")

    def int16(self) -> int:
        return self.take(">h")

    def int32(self) -> int:
        return self.take(">i")

    def int64(self) -> int:
        return self.take(">q")

    def boolean(self) -> bool:
        return self.take(">?")

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.raw(16))

    def raw(self, size: int) -> bytes:
        if self.position + size > len(self.data):
            raise struct.error(f"{size} bytes wanted at {self.position}, {len(self.data) - self.position} left")
        value = self.data[self.position : self.position + size]
        self.position += size
        return value

    def length(self) -> int:
        """A string/bytes/array length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.take(">i")

    def nullable_string(self) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.take(">h")
        return None if size < 0 else self.raw(size).decode()

    def string(self) -> str:
        value = self.nullable_string()
        assert value is not None, "null in a non-nullable string"
        return value

    def nullable_bytes(self) -> bytes | None:
        size = self.length()
        return None if size < 0 else self.raw(size)

    def array(self, read_item) -> list | None:
        """A (nullable) array whose items `read_item(self)` decodes."""
        count = self.length()
        return None if count < 0 else [read_item(self) for _ in range(count)]

    def at_end(self) -> bool:
        return self.position == len(self.data)

    def assert_at_end(self, what: str) -> None:
        assert self.at_end(), f"{len(self.data) - self.position} unexpected trailing bytes in {what}"


class ApiVersionsResponse(NamedTuple):
    correlation_id: int
    error_code: int
    versions: dict[int, tuple[int, int]]


def parse_api_versions(payload: bytes, version: int) -> ApiVersionsResponse:
    """Decode an ApiVersions response (header v0) of version 0 or 3, insisting every byte is accounted for."""
    reader = Reader(payload)
    correlation_id = reader.take(">i")
    error_code = reader.take(">h")
    versions = {}
    count = reader.uvarint() - 1 if version >= 3 else reader.take(">i")
    for _ in range(count):
        key, low, high = reader.take(">hhh")
        versions[key] = (low, high)
        if version >= 3:
            reader.skip_tagged_fields()
    if version >= 1:
        reader.take(">i")  # throttle_time_ms
    if version >= 3:
        reader.skip_tagged_fields()
    assert reader.at_end(), f"{len(payload) - reader.position} unexpected trailing bytes in ApiVersions v{version}"
    return ApiVersionsResponse(correlation_id, error_code, versions)


def api_versions(port: int, correlation_id: int = 1) -> ApiVersionsResponse:
    """A well-formed ApiVersions v3 round trip: the broker's health check and API table."""
    reaction = exchange(port, api_versions_request(3, correlation_id), until_frames=1)
    frames, _ = split_frames(reaction.received)
    assert frames, f"no ApiVersions response (closed={reaction.closed})"
    response = parse_api_versions(frames[0], 3)
    assert response.correlation_id == correlation_id
    return response


# ---------------------------------------------------------------- one connection, many requests


class Connection:
    """A connection for request/response round trips, read one whole frame at a time."""

    def __init__(self, port: int, timeout_s: float = 5.0, host: str = "127.0.0.1"):
        self.sock = connect(port, timeout_s, host)
        self.buffer = bytearray()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self, timeout_s: float = 5.0) -> bytes:
        """The next response frame (without its size); fails if none arrives within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            frames, _ = split_frames(bytes(self.buffer))
            if frames:
                del self.buffer[: 4 + len(frames[0])]
                return frames[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no response frame within {timeout_s}s")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise AssertionError("the broker closed the connection instead of answering")
            self.buffer += chunk

    def call(self, data: bytes, timeout_s: float = 5.0) -> bytes:
        self.send(data)
        return self.receive(timeout_s)

    def unread_by_peer(self) -> int:
        """Bytes sent on this loopback connection that the peer process has not read yet:
        our kernel send queue plus the peer socket's receive queue, from /proc/net/tcp."""
        local, peer = self.sock.getsockname(), self.sock.getpeername()
        ours = peers = None
        for row in tcp_sockets():
            if (row.local, row.remote) == (local, peer):
                ours = row
            elif (row.local, row.remote) == (peer, local):
                peers = row
        assert ours is not None and peers is not None, f"connection {local} <-> {peer} missing from /proc/net/tcp"
        return ours.tx_queue + peers.rx_queue


def call(port: int, data: bytes, timeout_s: float = 5.0, host: str = "127.0.0.1") -> bytes:
    """One request on a fresh connection; the response frame."""
    with Connection(port, timeout_s, host) as conn:
        return conn.call(data, timeout_s)


class TcpSocket(NamedTuple):
    local: tuple[str, int]
    remote: tuple[str, int]
    tx_queue: int
    rx_queue: int


def tcp_sockets() -> list[TcpSocket]:
    """IPv4 TCP sockets of this network namespace, from /proc/net/tcp."""

    def address(text: str) -> tuple[str, int]:
        host, port = text.split(":")
        return socket.inet_ntoa(struct.pack("<I", int(host, 16))), int(port, 16)

    rows = []
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            tx_queue, rx_queue = (int(q, 16) for q in fields[4].split(":"))
            rows.append(TcpSocket(address(fields[1]), address(fields[2]), tx_queue, rx_queue))
    return rows


def response_reader(payload: bytes, api_key: int, version: int) -> tuple[int, Reader]:
    """The correlation id and a reader positioned at the body (response header v1 for flexible versions)."""
    flexible = is_flexible(api_key, version)
    reader = Reader(payload, flexible)
    correlation_id = reader.int32()
    reader.tagged_fields()
    return correlation_id, reader


# ---------------------------------------------------------------- record batches (magic v2)


class BatchRecord(NamedTuple):
    """A record to put in a hand-built batch, or one read back with its absolute offset."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int = 0
    offset: int = -1


class RecordBatch(NamedTuple):
    base_offset: int
    last_offset_delta: int
    partition_leader_epoch: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    records: list[BatchRecord]
    size: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


BATCH_CRC_START = 21  # attributes onwards is covered by the CRC
COMPRESSION_MASK = 0x07
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_ZSTD = 4
COMPRESSORS = {
    CODEC_NONE: lambda body: body,
    CODEC_GZIP: gzip.compress,
    CODEC_ZSTD: lambda body: zstandard.ZstdCompressor().compress(body),
}


def _sized(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def encode_record_batch(
    records: Sequence[BatchRecord],
    base_offset: int = 0,
    crc_delta: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    codec: int = CODEC_NONE,
    max_timestamp: int | None = None,
) -> bytes:
    """A non-transactional RecordBatch v2 with CreateTime timestamps, uncompressed unless
    `codec` is CODEC_GZIP or CODEC_ZSTD.

    `crc_delta` is added to the CRC-32C, to build a batch with a wrong checksum.
    A producer id, epoch and base sequence make it an idempotent producer's batch.
    `max_timestamp` replaces the header's max timestamp (the records' largest), as
    producers that write -1 there do.
    """
    assert records, "a batch needs at least one record"
    base_ts = records[0].timestamp_ms
    body = bytearray()
    for delta, rec in enumerate(records):
        fields = (
            int8(0)
            + varint(rec.timestamp_ms - base_ts)
            + varint(delta)
            + _sized(rec.key)
            + _sized(rec.value)
            + varint(len(rec.headers))
            + b"".join(_sized(k.encode()) + _sized(v) for k, v in rec.headers)
        )
        body += varint(len(fields)) + fields
    if max_timestamp is None:
        max_timestamp = max(r.timestamp_ms for r in records)
    after_crc = (
        int16(codec)  # attributes: the codec, CreateTime, not transactional
        + int32(len(records) - 1)
        + int64(base_ts)
        + int64(max_timestamp)
        + int64(producer_id)
        + int16(producer_epoch)
        + int32(base_sequence)
        + int32(len(records))
        + COMPRESSORS[codec](bytes(body))
    )
    crc = (crc32c.crc32c(after_crc) + crc_delta) & 0xFFFFFFFF
    after_length = int32(-1) + int8(2) + struct.pack(">I", crc) + after_crc  # leader epoch, magic, crc
    return int64(base_offset) + int32(len(after_length)) + after_length


def decode_record_batches(data: bytes) -> list[RecordBatch]:
    """Every complete batch in `data` (a fetch may end with a partial one, which is dropped),
    checking magic and CRC-32C. Only uncompressed batches can be opened."""
    batches, position = [], 0
    while position + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, position)
        end = position + 12 + length
        if end > len(data):
            break
        batch = data[position:end]
        leader_epoch, magic, crc = struct.unpack_from(">ibI", batch, 12)
        assert magic == 2, f"batch at offset {base_offset}: magic {magic}"
        assert crc32c.crc32c(batch[BATCH_CRC_START:]) == crc, f"batch at offset {base_offset}: bad CRC"
        reader = Reader(batch)
        reader.position = BATCH_CRC_START
        attributes, last_delta, base_ts, max_ts = reader.take(">hiqq")
        reader.take(">qhi")  # producer id, epoch, base sequence
        count = reader.int32()
        assert attributes & COMPRESSION_MASK == 0, f"batch at offset {base_offset} is compressed"
        records = [_decode_record(reader, base_offset, base_ts) for _ in range(count)]
        reader.assert_at_end(f"batch at offset {base_offset}")
        batches.append(
            RecordBatch(base_offset, last_delta, leader_epoch, attributes, base_ts, max_ts, records, len(batch))
        )
        position = end
    return batches


def _read_varint(reader: Reader) -> int:
    raw = reader.uvarint()
    return (raw >> 1) ^ -(raw & 1)


def _read_sized(reader: Reader) -> bytes | None:
    size = _read_varint(reader)
    return None if size < 0 else reader.raw(size)


def _decode_record(reader: Reader, base_offset: int, base_ts: int) -> BatchRecord:
    length = _read_varint(reader)
    end = reader.position + length
    reader.int8()  # attributes
    timestamp = base_ts + _read_varint(reader)
    offset = base_offset + _read_varint(reader)
    key, value = _read_sized(reader), _read_sized(reader)
    headers = tuple((_read_sized(reader).decode(), _read_sized(reader)) for _ in range(_read_varint(reader)))
    assert reader.position == end, f"record at offset {offset}: length {length} does not match its fields"
    return BatchRecord(key, value, headers, timestamp, offset)


# ---------------------------------------------------------------- Metadata (v12-13: topic ids)


class MetadataPartition(NamedTuple):
    error_code: int
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]


class MetadataTopic(NamedTuple):
    error_code: int
    name: str | None
    topic_id: uuid.UUID
    partitions: list[int]
    internal: bool = False
    partition_states: tuple[MetadataPartition, ...] = ()


class MetadataResponse(NamedTuple):
    correlation_id: int
    cluster_id: str | None
    controller_id: int
    brokers: list[tuple[int, str, int]]
    topics: list[MetadataTopic]

    def topic(self, name: str) -> MetadataTopic | None:
        return next((t for t in self.topics if t.name == name), None)


def metadata_request(
    correlation_id: int, topics: Sequence[str | uuid.UUID] | None = None, version: int = 12
) -> bytes:
    """Metadata v12/v13 for all topics (None) or the named ones (names or ids); never auto-creates."""
    assert version in (12, 13)
    w = Writer(flexible=True)
    w.length(None if topics is None else len(topics))
    for topic in topics or ():
        by_id = isinstance(topic, uuid.UUID)
        w.uuid(topic if by_id else uuid.UUID(int=0)).nullable_string(None if by_id else topic).tagged_fields()
    w.boolean(False).boolean(False).tagged_fields()  # allow auto creation, include authorized operations
    return request(METADATA, version, correlation_id, w.build())


def parse_metadata(payload: bytes, version: int = 12) -> MetadataResponse:
    correlation_id, r = response_reader(payload, METADATA, version)
    r.int32()  # throttle

    def broker(r: Reader):
        node = (r.int32(), r.string(), r.int32())
        r.nullable_string()  # rack
        r.tagged_fields()
        return node

    def partition(r: Reader) -> MetadataPartition:
        error, index, leader, epoch = r.int16(), r.int32(), r.int32(), r.int32()
        replicas, isr, offline = (r.array(Reader.int32) for _ in range(3))
        r.tagged_fields()
        return MetadataPartition(error, index, leader, epoch, replicas, isr, offline)

    def topic(r: Reader) -> MetadataTopic:
        error, name, topic_id = r.int16(), r.nullable_string(), r.uuid()
        internal = r.boolean()
        states = r.array(partition)
        r.int32()  # authorized operations
        r.tagged_fields()
        return MetadataTopic(error, name, topic_id, [p.index for p in states], internal, tuple(states))

    brokers = r.array(broker)
    cluster_id, controller_id = r.nullable_string(), r.int32()
    topics = r.array(topic)
    if version >= 13:
        r.int16()  # top-level error
    r.tagged_fields()
    r.assert_at_end(f"Metadata v{version}")
    return MetadataResponse(correlation_id, cluster_id, controller_id, brokers, topics)


def topic_id_of(port: int, name: str) -> uuid.UUID:
    """The topic id the broker reports for `name` (Metadata v12)."""
    topic = parse_metadata(call(port, metadata_request(1, [name]))).topic(name)
    assert topic is not None and topic.error_code == NONE, f"topic {name!r} not in metadata: {topic}"
    assert topic.topic_id.int != 0, f"topic {name!r} has the zero topic id"
    return topic.topic_id


# ---------------------------------------------------------------- Fetch (v4-18)


class FetchPartition(NamedTuple):
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1 << 20
    current_leader_epoch: int = -1


def fetch_request(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[FetchPartition]]] = (),
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 0x7FFFFFFF,
    isolation_level: int = 0,
    session_id: int = NO_SESSION,
    session_epoch: int = FINAL_EPOCH,
    forgotten: Sequence[tuple[str | uuid.UUID, Sequence[int]]] = (),
) -> bytes:
    """A consumer's Fetch. Topics are names up to v12 and topic ids from v13."""
    assert 4 <= version <= 18
    w = Writer(is_flexible(FETCH, version))

    def topic(name_or_id) -> None:
        if version >= 13:
            assert isinstance(name_or_id, uuid.UUID), "Fetch v13+ names topics by id"
            w.uuid(name_or_id)
        else:
            w.string(name_or_id)

    if version <= 14:
        w.int32(-1)  # replica id: a consumer
    w.int32(max_wait_ms).int32(min_bytes).int32(max_bytes).int8(isolation_level)
    if version >= 7:
        w.int32(session_id).int32(session_epoch)
    w.length(len(topics))
    for name_or_id, partitions in topics:
        topic(name_or_id)
        w.length(len(partitions))
        for p in partitions:
            w.int32(p.partition)
            if version >= 9:
                w.int32(p.current_leader_epoch)
            w.int64(p.fetch_offset)
            if version >= 12:
                w.int32(-1)  # last fetched epoch
            if version >= 5:
                w.int64(-1)  # log start offset (followers only)
            w.int32(p.partition_max_bytes).tagged_fields()
        w.tagged_fields()
    if version >= 7:
        w.length(len(forgotten))
        for name_or_id, partitions in forgotten:
            topic(name_or_id)
            w.length(len(partitions))
            for p in partitions:
                w.int32(p)
            w.tagged_fields()
    else:
        assert not forgotten, "forgotten topics need Fetch v7+"
    if version >= 11:
        w.string("")  # rack id
    w.tagged_fields()
    return request(FETCH, version, correlation_id, w.build())


class FetchedPartition(NamedTuple):
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list | None
    preferred_read_replica: int
    records: bytes | None

    @property
    def batches(self) -> list[RecordBatch]:
        return decode_record_batches(self.records or b"")

    @property
    def offsets(self) -> list[int]:
        return [r.offset for b in self.batches for r in b.records]


class FetchResponse(NamedTuple):
    correlation_id: int
    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: list[tuple[str | uuid.UUID, list[FetchedPartition]]]

    def partitions(self) -> dict[tuple[str | uuid.UUID, int], FetchedPartition]:
        """Every partition in the response by (topic name or id, partition); duplicates fail."""
        found = {}
        for topic, partitions in self.topics:
            for p in partitions:
                assert (topic, p.partition) not in found, f"{topic}[{p.partition}] appears twice"
                found[(topic, p.partition)] = p
        return found


def parse_fetch_response(payload: bytes, version: int) -> FetchResponse:
    correlation_id, r = response_reader(payload, FETCH, version)
    throttle = r.int32()
    error_code, session_id = (r.int16(), r.int32()) if version >= 7 else (NONE, NO_SESSION)

    def aborted(r: Reader):
        entry = (r.int64(), r.int64())
        r.tagged_fields()
        return entry

    def partition(r: Reader) -> FetchedPartition:
        index, error, hw, lso = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        aborted_transactions = r.array(aborted)
        preferred = r.int32() if version >= 11 else -1
        records = r.nullable_bytes()
        r.tagged_fields()
        return FetchedPartition(index, error, hw, lso, log_start, aborted_transactions, preferred, records)

    def topic(r: Reader):
        name_or_id = r.uuid() if version >= 13 else r.string()
        partitions = r.array(partition)
        r.tagged_fields()
        return name_or_id, partitions

    topics = r.array(topic)
    r.tagged_fields()
    r.assert_at_end(f"Fetch v{version}")
    return FetchResponse(correlation_id, throttle, error_code, session_id, topics)


def fetch(port: int, version: int, *args, timeout_s: float = 35.0, **kwargs) -> FetchResponse:
    """One Fetch round trip on a fresh connection (see `fetch_request` for the arguments)."""
    correlation_id = 4242
    response = parse_fetch_response(
        call(port, fetch_request(version, correlation_id, *args, **kwargs), timeout_s), version
    )
    assert response.correlation_id == correlation_id
    return response


# ---------------------------------------------------------------- Produce (v3-13)


class ProducedPartition(NamedTuple):
    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None
    record_errors: tuple[tuple[int, str | None], ...] = ()  # (batch index, message), v8+
    current_leader: tuple[int, int] | None = None  # KIP-951 (leader id, leader epoch), v10+


class ProduceResponse(NamedTuple):
    correlation_id: int
    topics: list[tuple[str | uuid.UUID, list[ProducedPartition]]]
    node_endpoints: tuple[tuple[int, str, int, str | None], ...] = ()  # KIP-951 (id, host, port, rack), v10+


def produce_request(
    version: int,
    correlation_id: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[tuple[int, bytes | None]]]],
    acks: int = -1,
    timeout_ms: int = 30_000,
) -> bytes:
    """Produce record sets: (topic, [(partition, records)]); topics are names up to v12, ids from v13."""
    assert 3 <= version <= 13
    w = Writer(is_flexible(PRODUCE, version))
    w.nullable_string(None).int16(acks).int32(timeout_ms)  # no transactional id
    w.length(len(topics))
    for name_or_id, partitions in topics:
        if version >= 13:
            assert isinstance(name_or_id, uuid.UUID), "Produce v13 names topics by id"
            w.uuid(name_or_id)
        else:
            w.string(name_or_id)
        w.length(len(partitions))
        for index, records in partitions:
            w.int32(index).nullable_bytes(records).tagged_fields()
        w.tagged_fields()
    w.tagged_fields()
    return request(PRODUCE, version, correlation_id, w.build())


def parse_produce_response(payload: bytes, version: int) -> ProduceResponse:
    correlation_id, r = response_reader(payload, PRODUCE, version)

    def record_error(r: Reader):
        entry = (r.int32(), r.nullable_string())
        r.tagged_fields()
        return entry

    def partition(r: Reader) -> ProducedPartition:
        index, error, base_offset, append_time = r.int32(), r.int16(), r.int64(), r.int64()
        log_start = r.int64() if version >= 5 else -1
        message, record_errors = None, ()
        if version >= 8:
            record_errors = tuple(r.array(record_error))
            message = r.nullable_string()
        leader: list[tuple[int, int]] = []
        read_tagged(r, {0: lambda r: leader.append(leader_id_and_epoch(r))})
        current = leader[0] if leader else None
        return ProducedPartition(index, error, base_offset, append_time, log_start, message, record_errors, current)

    def topic(r: Reader):
        name_or_id = r.uuid() if version >= 13 else r.string()
        partitions = r.array(partition)
        r.tagged_fields()
        return name_or_id, partitions

    topics = r.array(topic)
    r.int32()  # throttle
    endpoints: list = []
    read_tagged(r, {0: lambda r: endpoints.extend(r.array(node_endpoint))})
    r.assert_at_end(f"Produce v{version}")
    return ProduceResponse(correlation_id, topics, tuple(endpoints))


def read_tagged(r: Reader, fields: dict) -> None:
    """A tagged-field section (flexible versions only): the tags in `fields` are
    read by their reader, which must consume exactly the field; others are skipped."""
    if not r.flexible:
        return
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.position + size
        if tag in fields:
            fields[tag](r)
            assert r.position == end, f"tagged field {tag} read {r.position - end + size} of {size} bytes"
        r.position = end


def leader_id_and_epoch(r: Reader) -> tuple[int, int]:
    """KIP-951's LeaderIdAndEpoch."""
    leader = (r.int32(), r.int32())
    r.tagged_fields()
    return leader


def node_endpoint(r: Reader) -> tuple[int, str, int, str | None]:
    """KIP-951's NodeEndpoint: (node id, host, port, rack)."""
    endpoint = (r.int32(), r.string(), r.int32(), r.nullable_string())
    r.tagged_fields()
    return endpoint


def produce(port: int, version: int, topics, acks: int = -1) -> ProduceResponse:
    """One Produce round trip (acks must not be 0: that gets no response)."""
    assert acks != 0
    correlation_id = 777
    response = parse_produce_response(call(port, produce_request(version, correlation_id, topics, acks)), version)
    assert response.correlation_id == correlation_id
    return response


# ---------------------------------------------------------------- DeleteTopics (v6: names or ids)


class DeletedTopic(NamedTuple):
    name: str | None
    topic_id: uuid.UUID
    error_code: int
    error_message: str | None


def delete_topics_v6_request(
    correlation_id: int, topics: Sequence[str | uuid.UUID], timeout_ms: int = 15_000
) -> bytes:
    w = Writer(flexible=True)
    w.length(len(topics))
    for topic in topics:
        by_id = isinstance(topic, uuid.UUID)
        w.nullable_string(None if by_id else topic).uuid(topic if by_id else uuid.UUID(int=0)).tagged_fields()
    w.int32(timeout_ms).tagged_fields()
    return request(DELETE_TOPICS, 6, correlation_id, w.build())


def parse_delete_topics_v6(payload: bytes) -> list[DeletedTopic]:
    _, r = response_reader(payload, DELETE_TOPICS, 6)
    r.int32()  # throttle

    def result(r: Reader) -> DeletedTopic:
        entry = DeletedTopic(r.nullable_string(), r.uuid(), r.int16(), r.nullable_string())
        r.tagged_fields()
        return entry

    results = r.array(result)
    r.tagged_fields()
    r.assert_at_end("DeleteTopics v6")
    return results


# ---------------------------------------------------------------- classic groups


def consumer_subscription(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0, the member metadata of protocol type "consumer"."""
    return int16(0) + int32(len(topics)) + b"".join(nullable_string(t) for t in topics) + int32(-1)


def consumer_assignment(assigned: dict[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: partitions per topic, no user data."""
    body = int16(0) + int32(len(assigned))
    for topic, partitions in assigned.items():
        body += nullable_string(topic) + int32(len(partitions)) + b"".join(int32(p) for p in partitions)
    return body + int32(-1)


class Coordinator(NamedTuple):
    key: str
    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None


def find_coordinator_v4_request(correlation_id: int, keys: Sequence[str], key_type: int = 0) -> bytes:
    """FindCoordinator v4: batched keys (KIP-699); key type 0 is a group."""
    w = Writer(flexible=True).int8(key_type).length(len(keys))
    for key in keys:
        w.string(key)
    w.tagged_fields()
    return request(FIND_COORDINATOR, 4, correlation_id, w.build())


def parse_find_coordinator_v4(payload: bytes) -> list[Coordinator]:
    _, r = response_reader(payload, FIND_COORDINATOR, 4)
    r.int32()  # throttle

    def coordinator(r: Reader) -> Coordinator:
        entry = Coordinator(r.string(), r.int32(), r.string(), r.int32(), r.int16(), r.nullable_string())
        r.tagged_fields()
        return entry

    coordinators = r.array(coordinator)
    r.tagged_fields()
    r.assert_at_end("FindCoordinator v4")
    return coordinators


def find_coordinator(port: int, key: str, key_type: int = 0) -> Coordinator:
    """The coordinator of `key` (key type 0: a group, 1: a transactional
    id), found as a client finds it before its first group or transaction
    request; the first ask creates the coordinator's internal topic."""
    (found,) = parse_find_coordinator_v4(call(port, find_coordinator_v4_request(0, [key], key_type)))
    assert found.error_code == 0, found
    return found


class JoinMember(NamedTuple):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


class JoinGroupResponse(NamedTuple):
    correlation_id: int
    error_code: int
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    skip_assignment: bool
    member_id: str
    members: list[JoinMember]


def join_group_request(
    version: int,
    correlation_id: int,
    group_id: str,
    member_id: str = "",
    *,
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 10_000,
    group_instance_id: str | None = None,
    protocol_type: str = "consumer",
    protocols: Sequence[tuple[str, bytes]] = (),
    reason: str | None = None,
) -> bytes:
    """JoinGroup v5-9 (v5 is the first with group instance ids, v8 adds the reason)."""
    assert 5 <= version <= 9
    w = Writer(is_flexible(JOIN_GROUP, version))
    w.string(group_id).int32(session_timeout_ms).int32(rebalance_timeout_ms).string(member_id)
    w.nullable_string(group_instance_id).string(protocol_type)
    w.length(len(protocols))
    for name, metadata in protocols:
        w.string(name).nullable_bytes(metadata).tagged_fields()
    if version >= 8:
        w.nullable_string(reason)
    w.tagged_fields()
    return request(JOIN_GROUP, version, correlation_id, w.build())


def parse_join_group(payload: bytes, version: int) -> JoinGroupResponse:
    correlation_id, r = response_reader(payload, JOIN_GROUP, version)
    r.int32()  # throttle
    error_code, generation_id = r.int16(), r.int32()
    protocol_type = r.nullable_string() if version >= 7 else None
    protocol_name = r.nullable_string()
    leader = r.string()
    skip_assignment = r.boolean() if version >= 9 else False
    member_id = r.string()

    def member(r: Reader) -> JoinMember:
        entry = JoinMember(r.string(), r.nullable_string(), r.nullable_bytes())
        r.tagged_fields()
        return entry

    members = r.array(member)
    r.tagged_fields()
    r.assert_at_end(f"JoinGroup v{version}")
    return JoinGroupResponse(
        correlation_id,
        error_code,
        generation_id,
        protocol_type,
        protocol_name,
        leader,
        skip_assignment,
        member_id,
        members,
    )


def join_group_v9_request(correlation_id: int, group_id: str, member_id: str = "", **kwargs) -> bytes:
    return join_group_request(9, correlation_id, group_id, member_id, **kwargs)


def parse_join_group_v9(payload: bytes) -> JoinGroupResponse:
    return parse_join_group(payload, 9)


class SyncGroupResponse(NamedTuple):
    correlation_id: int
    error_code: int
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes | None


def sync_group_v5_request(
    correlation_id: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    *,
    group_instance_id: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = None,
    assignments: dict[str, bytes] | None = None,
) -> bytes:
    w = Writer(flexible=True)
    w.string(group_id).int32(generation_id).string(member_id).nullable_string(group_instance_id)
    w.nullable_string(protocol_type).nullable_string(protocol_name)
    w.length(len(assignments or {}))
    for member, assignment in (assignments or {}).items():
        w.string(member).nullable_bytes(assignment).tagged_fields()
    w.tagged_fields()
    return request(SYNC_GROUP, 5, correlation_id, w.build())


def parse_sync_group_v5(payload: bytes) -> SyncGroupResponse:
    correlation_id, r = response_reader(payload, SYNC_GROUP, 5)
    r.int32()  # throttle
    error_code, protocol_type, protocol_name = r.int16(), r.nullable_string(), r.nullable_string()
    response = SyncGroupResponse(correlation_id, error_code, protocol_type, protocol_name, r.nullable_bytes())
    r.tagged_fields()
    r.assert_at_end("SyncGroup v5")
    return response


def heartbeat_v4_request(
    correlation_id: int, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
) -> bytes:
    w = Writer(flexible=True)
    w.string(group_id).int32(generation_id).string(member_id).nullable_string(group_instance_id).tagged_fields()
    return request(HEARTBEAT, 4, correlation_id, w.build())


def parse_heartbeat_v4(payload: bytes) -> int:
    """The error code."""
    _, r = response_reader(payload, HEARTBEAT, 4)
    r.int32()  # throttle
    error_code = r.int16()
    r.tagged_fields()
    r.assert_at_end("Heartbeat v4")
    return error_code


# ---------------------------------------------------------------- offsets (OffsetCommit v8, OffsetFetch v8)


class CommitPartition(NamedTuple):
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


def offset_commit_v8_request(
    correlation_id: int,
    group_id: str,
    generation_id_or_member_epoch: int,
    member_id: str,
    topics: Sequence[tuple[str, Sequence[CommitPartition]]],
    group_instance_id: str | None = None,
) -> bytes:
    """OffsetCommit v8 (flexible; no retention time since v5, topics by name until v10)."""
    w = Writer(flexible=True)
    w.string(group_id).int32(generation_id_or_member_epoch).string(member_id).nullable_string(group_instance_id)
    w.length(len(topics))
    for name, partitions in topics:
        w.string(name).length(len(partitions))
        for p in partitions:
            w.int32(p.partition).int64(p.offset).int32(p.leader_epoch).nullable_string(p.metadata).tagged_fields()
        w.tagged_fields()
    w.tagged_fields()
    return request(OFFSET_COMMIT, 8, correlation_id, w.build())


class OffsetCommitResponse(NamedTuple):
    correlation_id: int
    throttle_time_ms: int
    topics: list[tuple[str, list[tuple[int, int]]]]

    def errors(self) -> dict[tuple[str, int], int]:
        """Error code by (topic, partition); duplicates fail."""
        found = {}
        for topic, partitions in self.topics:
            for index, error in partitions:
                assert (topic, index) not in found, f"{topic}[{index}] appears twice"
                found[(topic, index)] = error
        return found


def parse_offset_commit_v8(payload: bytes) -> OffsetCommitResponse:
    correlation_id, r = response_reader(payload, OFFSET_COMMIT, 8)
    throttle = r.int32()

    def partition(r: Reader) -> tuple[int, int]:
        entry = (r.int32(), r.int16())
        r.tagged_fields()
        return entry

    def topic(r: Reader):
        entry = (r.string(), r.array(partition))
        r.tagged_fields()
        return entry

    topics = r.array(topic)
    r.tagged_fields()
    r.assert_at_end("OffsetCommit v8")
    return OffsetCommitResponse(correlation_id, throttle, topics)


class FetchedOffset(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str | None
    error_code: int


class FetchedGroupOffsets(NamedTuple):
    group_id: str
    error_code: int
    topics: list[tuple[str, list[tuple[int, FetchedOffset]]]]

    def offsets(self) -> dict[tuple[str, int], FetchedOffset]:
        """Every partition of this group's answer by (topic, partition); duplicates fail."""
        found = {}
        for topic, partitions in self.topics:
            for index, fetched in partitions:
                assert (topic, index) not in found, f"{self.group_id}: {topic}[{index}] appears twice"
                found[(topic, index)] = fetched
        return found


def offset_fetch_v8_request(
    correlation_id: int,
    groups: Sequence[tuple[str, Sequence[tuple[str, Sequence[int]]] | None]],
    require_stable: bool = False,
) -> bytes:
    """OffsetFetch v8, batched groups (KIP-709): (group, [(topic, [partitions])] or None for all)."""
    w = Writer(flexible=True)
    w.length(len(groups))
    for group_id, topics in groups:
        w.string(group_id)
        w.length(None if topics is None else len(topics))
        for name, partitions in topics or ():
            w.string(name).length(len(partitions))
            for p in partitions:
                w.int32(p)
            w.tagged_fields()
        w.tagged_fields()
    w.boolean(require_stable).tagged_fields()
    return request(OFFSET_FETCH, 8, correlation_id, w.build())


class OffsetFetchResponse(NamedTuple):
    correlation_id: int
    throttle_time_ms: int
    groups: list[FetchedGroupOffsets]

    def group(self, group_id: str) -> FetchedGroupOffsets:
        matches = [g for g in self.groups if g.group_id == group_id]
        assert len(matches) == 1, f"group {group_id!r} answered {len(matches)} times: {self.groups}"
        return matches[0]


def parse_offset_fetch_v8(payload: bytes) -> OffsetFetchResponse:
    correlation_id, r = response_reader(payload, OFFSET_FETCH, 8)
    throttle = r.int32()

    def partition(r: Reader) -> tuple[int, FetchedOffset]:
        index = r.int32()
        entry = FetchedOffset(r.int64(), r.int32(), r.nullable_string(), r.int16())
        r.tagged_fields()
        return index, entry

    def topic(r: Reader):
        entry = (r.string(), r.array(partition))
        r.tagged_fields()
        return entry

    def group(r: Reader) -> FetchedGroupOffsets:
        group_id, topics, error_code = r.string(), r.array(topic), r.int16()
        r.tagged_fields()
        return FetchedGroupOffsets(group_id, error_code, topics)

    groups = r.array(group)
    r.tagged_fields()
    r.assert_at_end("OffsetFetch v8")
    return OffsetFetchResponse(correlation_id, throttle, groups)


# ---------------------------------------------------------------- InitProducerId (v0-5)


class InitProducerIdResponse(NamedTuple):
    correlation_id: int
    error_code: int
    producer_id: int
    producer_epoch: int


def init_producer_id_request(
    version: int,
    correlation_id: int,
    transactional_id: str | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    transaction_timeout_ms: int = 60_000,
) -> bytes:
    """InitProducerId v0-5; the current producer id and epoch (KIP-360) travel from v3 on."""
    assert 0 <= version <= 5
    w = Writer(is_flexible(INIT_PRODUCER_ID, version))
    w.nullable_string(transactional_id).int32(transaction_timeout_ms)
    if version >= 3:
        w.int64(producer_id).int16(producer_epoch)
    w.tagged_fields()
    return request(INIT_PRODUCER_ID, version, correlation_id, w.build())


def parse_init_producer_id(payload: bytes, version: int) -> InitProducerIdResponse:
    correlation_id, r = response_reader(payload, INIT_PRODUCER_ID, version)
    r.int32()  # throttle
    response = InitProducerIdResponse(correlation_id, r.int16(), r.int64(), r.int16())
    r.tagged_fields()
    r.assert_at_end(f"InitProducerId v{version}")
    return response


def init_producer_id(port: int, version: int = 4, **kwargs) -> InitProducerIdResponse:
    """One InitProducerId round trip."""
    payload = call(port, init_producer_id_request(version, 31, **kwargs))
    response = parse_init_producer_id(payload, version)
    assert response.correlation_id == 31
    return response


# ---------------------------------------------------------------- DescribeLogDirs (v1-4)

DESCRIBE_LOG_DIRS = 35
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
KAFKA_STORAGE_ERROR = 56


class LogDirPartition(NamedTuple):
    index: int
    size: int
    offset_lag: int
    is_future: bool


class LogDirResult(NamedTuple):
    error_code: int
    log_dir: str
    topics: dict[str, list[LogDirPartition]]
    total_bytes: int
    usable_bytes: int


class DescribeLogDirsResponse(NamedTuple):
    correlation_id: int
    error_code: int
    results: list[LogDirResult]

    def dir(self, path: str) -> LogDirResult:
        found = [r for r in self.results if r.log_dir == path]
        assert len(found) == 1, f"{path} appears {len(found)} times in {[r.log_dir for r in self.results]}"
        return found[0]


def describe_log_dirs_request(
    version: int, correlation_id: int, topics: Sequence[tuple[str, Sequence[int]]] | None = None
) -> bytes:
    """DescribeLogDirs for every partition (None) or the given (topic, [partitions]); flexible from v2."""
    assert 1 <= version <= 4
    flexible = version >= 2
    w = Writer(flexible)
    w.length(None if topics is None else len(topics))
    for name, partitions in topics or ():
        w.string(name).length(len(partitions))
        for p in partitions:
            w.int32(p)
        w.tagged_fields()
    w.tagged_fields()
    return request(DESCRIBE_LOG_DIRS, version, correlation_id, w.build(), flexible=flexible)


def parse_describe_log_dirs(payload: bytes, version: int) -> DescribeLogDirsResponse:
    r = Reader(payload, flexible=version >= 2)
    correlation_id = r.int32()
    r.tagged_fields()
    r.int32()  # throttle
    error_code = r.int16() if version >= 3 else NONE

    def partition(r: Reader) -> LogDirPartition:
        entry = LogDirPartition(r.int32(), r.int64(), r.int64(), r.boolean())
        r.tagged_fields()
        return entry

    def topic(r: Reader) -> tuple[str, list[LogDirPartition]]:
        entry = (r.string(), r.array(partition))
        r.tagged_fields()
        return entry

    def result(r: Reader) -> LogDirResult:
        error, log_dir, topics = r.int16(), r.string(), dict(r.array(topic))
        total, usable = (r.int64(), r.int64()) if version >= 4 else (-1, -1)
        r.tagged_fields()
        return LogDirResult(error, log_dir, topics, total, usable)

    results = r.array(result)
    r.tagged_fields()
    r.assert_at_end(f"DescribeLogDirs v{version}")
    return DescribeLogDirsResponse(correlation_id, error_code, results)


def describe_log_dirs(port: int, version: int = 4, topics=None) -> DescribeLogDirsResponse:
    """One DescribeLogDirs round trip (see `describe_log_dirs_request`)."""
    correlation_id = 3535
    response = parse_describe_log_dirs(call(port, describe_log_dirs_request(version, correlation_id, topics)), version)
    assert response.correlation_id == correlation_id
    return response


# ---------------------------------------------------------------- ListOffsets (v5)

LIST_OFFSETS = 2
LATEST_TIMESTAMP = -1


def list_offsets_v5(
    port: int, topic: str, partitions: Sequence[int], timestamp: int = LATEST_TIMESTAMP, current_leader_epoch: int = -1
) -> dict[int, tuple[int, int]]:
    """One ListOffsets v5 round trip: (error code, offset) per partition."""
    w = Writer(flexible=False)
    w.int32(-1).int8(0)  # replica id: a consumer; read uncommitted
    w.length(1).string(topic).length(len(partitions))
    for p in partitions:
        w.int32(p).int32(current_leader_epoch).int64(timestamp)
    r = Reader(call(port, request(LIST_OFFSETS, 5, 55, w.build())))
    assert r.int32() == 55
    r.int32()  # throttle
    found = {}
    for _ in range(r.length()):
        assert r.string() == topic
        for _ in range(r.length()):
            index, error, _timestamp, offset, _epoch = r.int32(), r.int16(), r.int64(), r.int64(), r.int32()
            found[index] = (error, offset)
    r.assert_at_end("ListOffsets v5")
    return found


# ---------------------------------------------------------------- OffsetForLeaderEpoch (v2-4)

OFFSET_FOR_LEADER_EPOCH = 23
CONSUMER_REPLICA_ID = -1


def offset_for_leader_epoch(port: int, version: int, topic: str, partitions, replica_id: int = CONSUMER_REPLICA_ID):
    """One round trip; `partitions` holds (partition, current_leader_epoch,
    leader_epoch). Returns {partition: (error, leader_epoch, end_offset)}."""
    flexible = version >= 4
    w = Writer(flexible)
    if version >= 3:
        w.int32(replica_id)
    w.length(1).string(topic).length(len(partitions))
    for partition, current_leader_epoch, leader_epoch in partitions:
        w.int32(partition).int32(current_leader_epoch).int32(leader_epoch).tagged_fields()
    w.tagged_fields().tagged_fields()
    payload = call(port, request(OFFSET_FOR_LEADER_EPOCH, version, 23, w.build(), flexible=flexible))
    r = Reader(payload, flexible)
    assert r.int32() == 23
    r.tagged_fields()
    r.int32()  # throttle
    answers = {}
    for _ in range(r.length()):
        assert r.string() == topic
        for _ in range(r.length()):
            error, partition, leader_epoch, end_offset = r.int16(), r.int32(), r.int32(), r.int64()
            r.tagged_fields()
            answers[partition] = (error, leader_epoch, end_offset)
        r.tagged_fields()
    r.tagged_fields()
    r.assert_at_end("OffsetForLeaderEpoch")
    return answers


# ---------------------------------------------------------------- transactions (ListTransactions v2, Produce v9)

LIST_TRANSACTIONS = 66
TRANSACTIONAL_ATTRIBUTE = 0x10


def list_transactions(port: int, states=(), producer_ids=(), pattern: str | None = None):
    """ListTransactions v2: (error code, unknown state filters, [(transactional id, producer id, state)])."""
    version = 2
    w = Writer(True)
    w.length(len(states))
    for s in states:
        w.string(s)
    w.length(len(producer_ids))
    for p in producer_ids:
        w.int64(p)
    w.int64(-1).nullable_string(pattern).tagged_fields()
    payload = call(port, request(LIST_TRANSACTIONS, version, 6, w.build()))
    _, r = response_reader(payload, LIST_TRANSACTIONS, version)
    r.int32()
    error = r.int16()
    unknown = [r.string() for _ in range(r.length())]

    def entry(r: Reader):
        listed = (r.string(), r.int64(), r.string())
        r.tagged_fields()
        return listed

    listed = r.array(entry)
    r.tagged_fields()
    r.assert_at_end("ListTransactions")
    return error, unknown, listed


def transactional_batch(producer_id: int, epoch: int, value: bytes) -> bytes:
    """One record of a transactional producer, sequence 0, stamped now."""
    record = BatchRecord(None, value, timestamp_ms=time.time_ns() // 1_000_000)
    batch = bytearray(encode_record_batch([record], producer_id=producer_id, producer_epoch=epoch, base_sequence=0))
    batch[22] |= TRANSACTIONAL_ATTRIBUTE  # the low byte of the attributes (int16 at 21)
    batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
    return bytes(batch)


def transactional_produce(port: int, transactional_id: str, topic: str, partition: int, records: bytes) -> int:
    """Produce v9 of `records` to one partition as `transactional_id`: the partition's error code."""
    version = 9
    w = Writer(is_flexible(PRODUCE, version))
    w.nullable_string(transactional_id).int16(-1).int32(30_000)
    w.length(1).string(topic).length(1).int32(partition).nullable_bytes(records).tagged_fields().tagged_fields()
    w.tagged_fields()
    payload = call(port, request(PRODUCE, version, 10, w.build()))
    response = parse_produce_response(payload, version)
    return response.topics[0][1][0].error_code


# ---------------------------------------------------------------- DescribeQuorum (v0-2)


class QuorumReplica(NamedTuple):
    replica_id: int
    directory_id: uuid.UUID | None  # v2
    log_end_offset: int
    last_fetch_timestamp: int | None  # v1+
    last_caught_up_timestamp: int | None  # v1+


class QuorumPartition(NamedTuple):
    partition_index: int
    error_code: int
    error_message: str | None  # v2
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplica]
    observers: list[QuorumReplica]


class DescribeQuorumResponse(NamedTuple):
    error_code: int
    error_message: str | None  # v2
    topics: list[tuple[str, list[QuorumPartition]]]
    nodes: list[tuple[int, list[tuple[str, str, int]]]]  # v2: id, [(listener, host, port)]


def describe_quorum_request(correlation_id: int, version: int, topics: dict[str, Sequence[int]]) -> bytes:
    w = Writer(flexible=True)
    w.length(len(topics))
    for name, partitions in topics.items():
        w.string(name).length(len(partitions))
        for partition in partitions:
            w.int32(partition).tagged_fields()
        w.tagged_fields()
    w.tagged_fields()
    return request(DESCRIBE_QUORUM, version, correlation_id, w.build())


def parse_describe_quorum(payload: bytes, version: int) -> DescribeQuorumResponse:
    _, r = response_reader(payload, DESCRIBE_QUORUM, version)
    error_code = r.int16()
    error_message = r.nullable_string() if version >= 2 else None

    def replica(r: Reader) -> QuorumReplica:
        replica_id = r.int32()
        directory_id = r.uuid() if version >= 2 else None
        log_end_offset = r.int64()
        fetched, caught_up = (r.int64(), r.int64()) if version >= 1 else (None, None)
        r.tagged_fields()
        return QuorumReplica(replica_id, directory_id, log_end_offset, fetched, caught_up)

    def partition(r: Reader) -> QuorumPartition:
        index, code = r.int32(), r.int16()
        message = r.nullable_string() if version >= 2 else None
        leader_id, leader_epoch, high_watermark = r.int32(), r.int32(), r.int64()
        entry = QuorumPartition(index, code, message, leader_id, leader_epoch, high_watermark, r.array(replica), r.array(replica))
        r.tagged_fields()
        return entry

    def topic(r: Reader):
        entry = (r.string(), r.array(partition))
        r.tagged_fields()
        return entry

    def listener(r: Reader):
        entry = (r.string(), r.string(), r.take(">H"))
        r.tagged_fields()
        return entry

    def node(r: Reader):
        entry = (r.int32(), r.array(listener))
        r.tagged_fields()
        return entry

    topics = r.array(topic)
    nodes = r.array(node) if version >= 2 else []
    r.tagged_fields()
    r.assert_at_end(f"DescribeQuorum v{version}")
    return DescribeQuorumResponse(error_code, error_message, topics, nodes)


def describe_quorum(
    port: int, version: int = 2, topics: dict[str, Sequence[int]] | None = None, host: str = "127.0.0.1"
) -> DescribeQuorumResponse:
    """DescribeQuorum of `topics` (by default `__cluster_metadata`-0) on a fresh connection."""
    topics = {"__cluster_metadata": [0]} if topics is None else topics
    return parse_describe_quorum(call(port, describe_quorum_request(7, version, topics), host=host), version)
