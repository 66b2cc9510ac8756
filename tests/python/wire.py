"""Just enough of the Kafka wire protocol, encoded by hand, to send requests no
real client would send and to read the broker's reaction byte by byte.

A request frame is size(int32) | api_key(int16) | api_version(int16) |
correlation_id(int32) | client_id(nullable int16-length string), plus an empty
tagged-field section (uvarint 0) in header v2, which flexible versions use.
Responses start with size | correlation_id; ApiVersions responses always use
response header v0, so no tagged fields follow the correlation id.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import NamedTuple

API_VERSIONS = 18
METADATA = 3
UNSUPPORTED_VERSION = 35

# First flexible version of each API Strom serves; earlier versions use request header v1.
FIRST_FLEXIBLE_VERSION = {0: 9, 1: 12, 2: 6, 3: 9, 18: 3, 19: 5, 20: 4, 60: 0}


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


def connect(port: int, timeout_s: float = 5.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
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
    """Sequential decoding of a response body; running off the end raises struct.error."""

    def __init__(self, data: bytes):
        self.data, self.position = data, 0

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

    def at_end(self) -> bool:
        return self.position == len(self.data)


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
