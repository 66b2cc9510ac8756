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
  resumption) from one Python thread for --handshake-seconds.

Reported per run: wall time, MiB/s of record values, and broker CPU
(utime+stime from /proc) per GB (1e9 value bytes).
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))

from harness import Broker, create_topic, free_port  # noqa: E402
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
        plain, tls = free_port(), free_port()
        broker = Broker(work / "broker", {
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls}",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
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
            print(f"{args.records} records of {args.record_size} B ({mib:.0f} MiB), STROM_BIN={os.environ.get('STROM_BIN', 'release build')}")
            for run, (wall, cpu) in results.items():
                print(f"{run:18} {wall:6.2f} s {mib / wall:8.1f} MiB/s  broker CPU {cpu / gb:6.2f} s/GB")
            for kind in ["produce", "consume"]:
                ratio = (mib / results[f"{kind} ssl"][0]) / (mib / results[f"{kind} plaintext"][0])
                print(f"{kind}: SSL throughput is {ratio:.2f} of plaintext")
            rate = handshakes_per_second(tls, ca.ca_path, args.handshake_seconds)
            print(f"TLS handshakes: {rate:.0f} new connections/s (one Python client thread)")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
