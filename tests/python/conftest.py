"""Fixtures that start the real `strom` binary for each test.

`broker` is a broker with the default configuration; `broker_factory(**overrides)`
starts one with extra config (keyword names use `_` for `.`, or pass a dict
of Kafka keys); the keywords `port` (fixed, for listeners set by hand),
`nofile` (an open files limit), `start_timeout_s` and `start` (False: the
test starts it later) set up the process instead. Every broker a test made
is shut down at teardown, and a
broker that died on its own or failed a clean shutdown fails the test. When a
test fails, the tail of each broker's log is attached to the report.

Every test has a time-out (`TEST_TIMEOUT_S`, or `@pytest.mark.timeout(s)`):
past it the test fails with every thread's stack, and its teardown still
stops its brokers.
"""

from __future__ import annotations

import faulthandler
import signal
import sys

import pytest

from harness import START_TIMEOUT_S, Broker, BrokerError, config_value, dotted


@pytest.fixture
def broker_factory(request, tmp_path):
    brokers: list[Broker] = []
    request.node.strom_brokers = brokers

    def start_broker(
        overrides: dict[str, object] | None = None,
        /,
        *,
        port: int | None = None,
        nofile: int | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
        start: bool = True,
        **keyword_overrides: object,
    ) -> Broker:
        config = {key: config_value(value) for key, value in (overrides or {}).items()}
        config.update(dotted(keyword_overrides))
        broker = Broker(tmp_path / f"broker{len(brokers)}", config, port)
        broker.nofile = nofile
        brokers.append(broker)
        if start:
            broker.start(start_timeout_s)
        return broker

    yield start_broker

    failures = []
    for broker in brokers:
        try:
            broker.close()
        except AssertionError as exc:
            failures.append((broker, exc))
    if len(failures) == 1:
        raise failures[0][1]
    if failures:
        # Every broker's failure, not only the first one's.
        raise BrokerError("\n\n".join(f"{broker.workdir.name}: {exc}" for broker, exc in failures))


@pytest.fixture
def broker(broker_factory) -> Broker:
    return broker_factory()


TEST_TIMEOUT_S = 300


def pytest_configure(config):
    config.addinivalue_line("markers", "timeout(seconds): fail the test once it has run this long")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("timeout")
    limit_s = marker.args[0] if marker else TEST_TIMEOUT_S

    def expire(signum, frame):
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        # pytest's Failed is a BaseException: a test's `except Exception` cannot swallow it.
        pytest.fail(f"test timed out after {limit_s} s", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        for broker in getattr(item, "strom_brokers", ()):
            report.sections.append((f"strom log {broker.log_path}", broker.log_tail()))
    return report
