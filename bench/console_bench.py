#!/usr/bin/env python3
"""Benchmark of the web console: how long its pages take to load and what an
open, auto-refreshing console costs the broker in CPU.

This is a benchmark, not a test: it asserts nothing and reports numbers.

* Data: a fresh `strom server` (loopback, temp data dir, the console on, its
  metrics sampled every 10 s as by default) gets `--topics` topics of
  `--partitions` partitions, `--records` records of 200 bytes spread over them
  with confluent-kafka, and `--groups` consumer groups that committed half of
  each partition.
* Page load: each main page is fetched `--repeat` times over HTTP on
  loopback (one connection per request, as the console serves them); min,
  median and max wall time from sending the request to the last byte. With
  `--browser`, each page is also loaded in headless Chromium and the
  Navigation Timing `loadEventEnd` is reported (HTML, CSS, script, layout).
* CPU: utime+stime of the strom process (/proc/PID/stat) over `--seconds`
  with nobody looking, then with the overview page open in headless Chromium
  (it refreshes its live parts every 5 s), then the same for a group page.

Usage: bench/console_bench.py [--binary target/debug/strom] [--browser]
Needs the Python packages of tests/requirements.txt (selenium for --browser)
and Debian's chromium and chromium-driver for the browser parts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from console_client import ConsoleClient  # noqa: E402
import harness  # noqa: E402

PAGES = {
    "overview": "/",
    "topics": "/topics",
    "topic": "/topic?name=topic-0",
    "messages": "/messages?topic=topic-0",
    "groups": "/groups",
    "group": "/group?id=group-0",
    "broker": "/broker",
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def populate(broker, args) -> None:
    for t in range(args.topics):
        harness.create_topic(broker.bootstrap, f"topic-{t}", partitions=args.partitions)
    producer = harness.confluent_producer(broker.bootstrap, **{"linger.ms": 20})
    value = b"x" * 200
    for i in range(args.records):
        producer.produce(f"topic-{i % args.topics}", value=value, key=str(i).encode())
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    for g in range(args.groups):
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"group-{g}", "enable.auto.commit": False})
        per_partition = args.records // args.topics // args.partitions // 2
        offsets = [TopicPartition(f"topic-{t}", p, per_partition) for t in range(args.topics) for p in range(args.partitions)]
        consumer.commit(offsets=offsets, asynchronous=False)
        consumer.close()


def page_loads(port: int, repeat: int) -> dict[str, list[float]]:
    client = ConsoleClient(port)
    timings = {}
    for name, path in PAGES.items():
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            reply = client.request("GET", path)
            samples.append((time.perf_counter() - started) * 1e3)
            assert reply.status == 200, (path, reply.status)
        timings[name] = samples
    return timings


def chromium():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"]:
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))


def browser_loads(driver, base: str, repeat: int) -> dict[str, list[float]]:
    timings = {}
    for name, path in PAGES.items():
        samples = []
        for _ in range(repeat):
            driver.get(base + path)
            harness.wait_until(
                lambda: driver.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd") > 0,
                20, f"{name} loaded")
            samples.append(driver.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd"))
        timings[name] = samples
    return timings


def cpu_over(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return cpu_seconds(pid) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=os.environ.get("STROM_BIN", "target/debug/strom"))
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--groups", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--browser", action="store_true")
    args = parser.parse_args()
    os.environ["STROM_BIN"] = str(Path(args.binary).resolve())
    with tempfile.TemporaryDirectory() as workdir:
        port = harness.free_port()
        broker = harness.Broker(Path(workdir), {"console.listener": f"http://127.0.0.1:{port}"})
        broker.start()
        try:
            populate(broker, args)
            print(f"binary {args.binary}; {args.topics} topics x {args.partitions} partitions, "
                  f"{args.records} records, {args.groups} groups")
            print("page load over HTTP (ms): min / median / max")
            for name, samples in page_loads(port, args.repeat).items():
                print(f"  {name:9} {min(samples):7.1f} {statistics.median(samples):7.1f} {max(samples):7.1f}")
            driver = chromium() if args.browser else None
            try:
                if driver:
                    print("page load in Chromium (loadEventEnd, ms): min / median / max")
                    for name, samples in browser_loads(driver, f"http://127.0.0.1:{port}", 5).items():
                        print(f"  {name:9} {min(samples):7.1f} {statistics.median(samples):7.1f} {max(samples):7.1f}")
                    driver.get("about:blank")
                print(f"broker CPU seconds over {args.seconds:.0f} s:")
                print(f"  no console page open        {cpu_over(broker.pid, args.seconds):.3f}")
                if driver:
                    for name in ("overview", "group"):
                        driver.get(f"http://127.0.0.1:{port}{PAGES[name]}")
                        print(f"  {name} page auto-refreshing {cpu_over(broker.pid, args.seconds):.3f}")
                    driver.get("about:blank")
            finally:
                if driver:
                    driver.quit()
        finally:
            broker.close()


if __name__ == "__main__":
    main()
