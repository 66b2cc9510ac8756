#!/usr/bin/env python3
"""Benchmark of TLS against plaintext on one Strom broker.

This is a benchmark, not a test: it asserts nothing and reports numbers. A
fresh `strom server` (STROM_BIN, else the release build, as the test
harness picks it) gets a
PLAINTEXT and an SSL listener (a PEM key store made at run time, as the
security tests make it). Then, with kcat (librdkafka) as the client:

* produce: `kcat -P -l FILE` of N records of --record-size bytes, once per
  listener, each into its own topic;
* consume: `kcat -C -e -o beginning` of the plaintext topic to /dev/null,
  --repeats times per listener, alternating, best run reported (the page
  cache is warm: the file was just written), so plaintext fetches go out
  by sendfile and TLS ones through rustls;
* handshakes: new TLS connections per second (full handshakes, no
  resumption) from one Python thread for --handshake-seconds;
* SCRAM: SCRAM-SHA-256 authentications per second (new connection,
  SaslHandshake, two SaslAuthenticate round trips) on a SASL_PLAINTEXT
  listener from one Python thread for --handshake-seconds; the client keeps
  its salted password, so each authentication costs it a few HMACs, as it
  costs the broker.

Reported per run: wall time, MiB/s of record values, and broker CPU
(utime+stime from /proc) per GB (1e9 value bytes).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))

import wire  # noqa: E402
from harness import Broker, create_topic, distinct_free_ports  # noqa: E402
from security_material import Authority  # noqa: E402


def broker_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(broker: Broker, command: list[str], **kwargs) -> tuple[float, float]:
    """Runs `command`; (wall seconds, broker CPU seconds)."""
    cpu = broker_cpu_s(broker.pid)
    started = time.monotonic()
    subprocess.run(command, check=True, timeout=600, **kwargs)
    return time.monotonic() - started, broker_cpu_s(broker.pid) - cpu


def handshakes_per_second(port: int, ca: Path, seconds: float) -> float:
    context = ssl.create_default_context(cafile=str(ca))
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1"):
                count += 1
    return count / seconds


def sasl_exchange(sock, correlation_id: int, token: bytes) -> bytes:
    """One SaslAuthenticate v2 round trip: the server's bytes (error code checked)."""
    request = wire.request(36, 2, correlation_id, wire.uvarint(len(token) + 1) + token + b"\0", flexible=True)
    wire.send(sock, request)
    frames, _ = wire.split_frames(wire.drain(sock, timeout_s=5, until_frames=1).received)
    reader = wire.Reader(frames[0], flexible=True)
    reader.int32()
    reader.skip_tagged_fields()
    assert reader.int16() == 0, "SCRAM authentication failed"
    message = reader.uvarint() - 1
    reader.raw(max(message, 0))
    return reader.raw(reader.uvarint() - 1)


def scram_authentications_per_second(port: int, user: str, password: str, seconds: float) -> float:
    salted: dict[bytes, bytes] = {}
    count, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        with wire.connect(port) as sock:
            handshake = wire.Writer(flexible=False).nullable_string("SCRAM-SHA-256").build()
            wire.send(sock, wire.request(17, 1, 1, handshake))
            wire.drain(sock, timeout_s=5, until_frames=1)
            nonce = base64.b64encode(os.urandom(18)).decode()
            bare = f"n={user},r={nonce}"
            server_first = sasl_exchange(sock, 2, f"n,,{bare}".encode()).decode()
            fields = dict(item.split("=", 1) for item in server_first.split(","))
            salt = base64.b64decode(fields["s"])
            if salt not in salted:
                salted[salt] = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, int(fields["i"]))
            client_key = hmac.digest(salted[salt], b"Client Key", "sha256")
            without_proof = f"c=biws,r={fields['r']}"
            auth_message = f"{bare},{server_first},{without_proof}".encode()
            signature = hmac.digest(hashlib.sha256(client_key).digest(), auth_message, "sha256")
            proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()
            sasl_exchange(sock, 3, f"{without_proof},p={proof}".encode())
            count += 1
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--handshake-seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="strom-tls-bench-") as work:
        work = Path(work)
        ca = Authority(work / "pki", "bench-ca")
        keystore = ca.pem_keystore(ca.issue("server", "localhost", server=True), work / "pki" / "server.pem")
        plain, tls, sasl = distinct_free_ports(3)
        broker = Broker(work / "broker", {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config":
                'org.apache.kafka.common.security.scram.ScramLoginModule required user_bench="bench-secret";',
        }, port=plain)
        broker.start()
        try:
            payload = work / "records.txt"
            line = b"x" * (args.record_size - 1) + b"\n"
            payload.write_bytes(line * args.records)
            mib = args.records * args.record_size / 2**20
            gb = args.records * args.record_size / 1e9
            clients = {
                "plaintext": ["kcat", "-b", f"127.0.0.1:{plain}"],
                "ssl": ["kcat", "-b", f"127.0.0.1:{tls}", "-X", "security.protocol=SSL",
                        "-X", f"ssl.ca.location={ca.ca_path}"],
            }
            results = {}
            for name, kcat in clients.items():
                create_topic(broker.bootstrap, f"bench-{name}")
                wall, cpu = timed(broker, [*kcat, "-P", "-t", f"bench-{name}", "-l", str(payload),
                                           "-X", "linger.ms=5", "-X", "batch.size=1048576"])
                results[f"produce {name}"] = (wall, cpu)
            for _ in range(args.repeats):
                for name, kcat in clients.items():
                    wall, cpu = timed(broker, [*kcat, "-C", "-t", "bench-plaintext", "-o", "beginning", "-e", "-q"],
                                      stdout=subprocess.DEVNULL)
                    best = results.get(f"consume {name}")
                    if best is None or wall < best[0]:
                        results[f"consume {name}"] = (wall, cpu)
            binary = os.environ.get("STROM_BIN", "the release build")
            print(f"{args.records} records of {args.record_size} B ({mib:.0f} MiB), STROM_BIN={binary}")
            for run, (wall, cpu) in results.items():
                print(f"{run:18} {wall:6.2f} s {mib / wall:8.1f} MiB/s  broker CPU {cpu / gb:6.2f} s/GB")
            for kind in ["produce", "consume"]:
                ratio = (mib / results[f"{kind} ssl"][0]) / (mib / results[f"{kind} plaintext"][0])
                print(f"{kind}: SSL throughput is {ratio:.2f} of plaintext")
            rate = handshakes_per_second(tls, ca.ca_path, args.handshake_seconds)
            print(f"TLS handshakes: {rate:.0f} new connections/s (one Python client thread)")
            cpu = broker_cpu_s(broker.pid)
            rate = scram_authentications_per_second(sasl, "bench", "bench-secret", args.handshake_seconds)
            cpu = broker_cpu_s(broker.pid) - cpu
            per_auth_us = cpu / (rate * args.handshake_seconds) * 1e6
            print(f"SCRAM-SHA-256: {rate:.0f} authentications/s (one Python client thread), "
                  f"broker CPU {per_auth_us:.0f} us each")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
