"""The web console in headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by selenium from tests/requirements.txt): pages load
without console errors, a topic created in the UI is seen by confluent-kafka,
records produced by confluent-kafka appear in the message browser, a group's
lag shown equals what `strom groups --describe` prints, and a reset done in
the UI is seen by the consumer. A screenshot of each page is saved under
`target/test-artifacts/console/` (or `$STROM_TEST_ARTIFACTS/console/`).

One broker and one browser serve the whole module.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from console_client import start_console_broker
from harness import (
    ADMIN_TIMEOUT_S,
    REPO_ROOT,
    OutRecord,
    admin_client,
    admin_ok,
    confluent_producer,
    create_topic,
    produce_confluent,
    skip_unless_ci,
    topic_partitions,
    wait_until,
)

UI_TIMEOUT_S = 20.0
ARTIFACTS = Path(os.environ.get("STROM_TEST_ARTIFACTS", REPO_ROOT / "target" / "test-artifacts")) / "console"


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        skip_unless_ci("selenium is not installed (scripts/test installs it from tests/requirements.txt)")
    paths = chromium_paths()
    if paths is None:
        skip_unless_ci("chromium and chromedriver are not installed (scripts/test installs Debian's chromium and chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for argument in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1100"]:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(paths[1]))
    driver.set_page_load_timeout(UI_TIMEOUT_S)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker, port = start_console_broker(tmp_path_factory.mktemp("console-browser"))
    yield broker, f"http://127.0.0.1:{port}"
    broker.close()


def json_records(count: int, start: int = 0) -> list[OutRecord]:
    now = int(time.time() * 1000)
    return [
        OutRecord(f"user-{i}".encode(), f'{{"order": {i}, "amount": {i * 7}}}'.encode(), (("source", b"web"),), now + i)
        for i in range(start, start + count)
    ]


def commit_group(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for `group` as a consumer that then leaves (the group is Empty)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def console_errors(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait_until(lambda: driver.execute_script("return document.readyState") == "complete", UI_TIMEOUT_S, f"{url} loaded")


def cells(driver, table_id: str) -> list[list[str]]:
    """The table's cell texts, read in one script run: a live refresh may
    replace the table between two WebDriver calls, never during a script."""
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(`#${arguments[0]} tbody tr`))"
        ".map(row => Array.from(row.querySelectorAll('td')).map(cell => cell.innerText.trim()));",
        table_id,
    )
    return [row for row in texts if row != ["none"]]


def screenshot(driver, name: str) -> None:
    """The whole page (up to 6000 px tall), not only what fits the window."""
    width, height = driver.get_window_size()["width"], driver.get_window_size()["height"]
    page_height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(page_height + 120, height), 6000))
    try:
        driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    finally:
        driver.set_window_size(width, height)


def submit(driver, action: str, fields: dict[str, str], checks: tuple[str, ...] = ()) -> None:
    """Fills the form posting to `action` as a user types, ticks `checks`, and submits it."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    form = driver.find_element(By.CSS_SELECTOR, f'form[action="{action}"]')
    for name, value in fields.items():
        element = form.find_element(By.NAME, name)
        if element.tag_name == "select":
            Select(element).select_by_value(value)
        else:
            element.clear()
            element.send_keys(value)
    for name in checks:
        form.find_element(By.NAME, name).click()
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def notice(driver) -> str:
    from selenium.webdriver.common.by import By

    def shown():
        found = driver.find_elements(By.CSS_SELECTOR, ".notice, .error")
        return found[0].text if found else None

    return wait_until(shown, UI_TIMEOUT_S, "the action's outcome")


def test_pages_load_without_console_errors(browser, served):
    broker, base = served
    create_topic(broker.bootstrap, "orders", partitions=3)
    producer = confluent_producer(broker.bootstrap)
    # A few seconds of traffic, so the plots have a line to draw.
    for round in range(6):
        produce_confluent(producer, "orders", json_records(40, round * 40))
        time.sleep(0.5)
    commit_group(broker.bootstrap, "billing", "orders", {0: 5, 1: 3, 2: 0})
    pages = {
        "overview": "/",
        "topics": "/topics",
        "topic": "/topic?name=orders",
        "messages": "/messages?topic=orders&partition=0",
        "groups": "/groups",
        "group": "/group?id=billing",
        "broker": "/broker",
    }
    browser.get_log("browser")
    for name, path in pages.items():
        open_page(browser, base + path)
        assert browser.title.endswith("· Strom"), browser.title
        assert "Not done" not in browser.page_source
        screenshot(browser, name)
        assert console_errors(browser) == [], name
    # The live parts refresh in place, and the script raises no error doing so.
    open_page(browser, base + "/")
    wait_until(lambda: browser.execute_script("return document.body.dataset.refreshedAt"), UI_TIMEOUT_S, "a live refresh")
    assert console_errors(browser) == []


def test_a_topic_created_in_the_ui_is_seen_by_confluent_kafka(browser, served):
    broker, base = served
    open_page(browser, base + "/topics")
    submit(browser, "/topics/create", {"name": "from-the-ui", "partitions": "4", "configs": "retention.ms=7200000"})
    assert notice(browser) == "created topic from-the-ui"
    admin = admin_client(broker.bootstrap)
    assert len(topic_partitions(admin, "from-the-ui")) == 4
    screenshot(browser, "topic-created")


def test_records_produced_by_confluent_kafka_appear_in_the_message_browser(browser, served):
    broker, base = served
    create_topic(broker.bootstrap, "browsed")
    producer = confluent_producer(broker.bootstrap)
    produce_confluent(producer, "browsed", json_records(5))
    open_page(browser, base + "/messages?topic=browsed&order=oldest&format=text")
    shown = [(row[0], row[2], row[3], row[4]) for row in cells(browser, "records")]
    assert shown == [(str(i), f"user-{i}", f'{{"order": {i}, "amount": {i * 7}}}', "source: web") for i in range(5)]
    # A record produced while the page is open appears without a reload.
    produce_confluent(producer, "browsed", json_records(1, start=5))
    wait_until(lambda: len(cells(browser, "records")) == 6, UI_TIMEOUT_S, "the new record on the open page")
    newest = cells(browser, "records")[5]
    assert (newest[0], newest[2]) == ("5", "user-5")
    assert console_errors(browser) == []
    screenshot(browser, "messages-live")


def described_lags(broker, group: str) -> dict[tuple[str, int], int]:
    """The LAG column `strom groups --describe` prints, per topic and partition."""
    lines = admin_ok(broker, "groups", "--describe", "--group", group).strip().splitlines()
    header = lines[0].split()
    rows = [dict(zip(header, line.split())) for line in lines[1:]]
    return {(r["TOPIC"], int(r["PARTITION"])): int(r["LAG"]) for r in rows}


def test_a_groups_lag_shown_equals_what_strom_groups_describe_prints(browser, served):
    broker, base = served
    create_topic(broker.bootstrap, "invoices", partitions=2)
    producer = confluent_producer(broker.bootstrap)
    produce_confluent(producer, "invoices", json_records(9), partition=0)
    produce_confluent(producer, "invoices", json_records(4), partition=1)
    commit_group(broker.bootstrap, "accounting", "invoices", {0: 2, 1: 4})
    open_page(browser, base + "/group?id=accounting")
    shown = {(row[0], int(row[1])): int(row[4]) for row in cells(browser, "offsets")}
    assert shown == described_lags(broker, "accounting") == {("invoices", 0): 7, ("invoices", 1): 0}
    screenshot(browser, "group-lag")


def test_a_reset_done_in_the_ui_is_seen_by_the_consumer(browser, served):
    broker, base = served
    create_topic(broker.bootstrap, "replayed")
    produce_confluent(confluent_producer(broker.bootstrap), "replayed", json_records(10))
    commit_group(broker.bootstrap, "replayers", "replayed", {0: 10})
    open_page(browser, base + "/group?id=replayers")
    submit(browser, "/group/reset", {"topics": "replayed", "scenario": "offset", "value": "3"}, checks=("execute",))
    assert notice(browser) == "reset 1 partitions"
    screenshot(browser, "group-reset")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "replayers", "enable.auto.commit": False, "auto.offset.reset": "latest"})
    try:
        consumer.subscribe(["replayed"])
        deadline = time.monotonic() + ADMIN_TIMEOUT_S * 2
        first = None
        while first is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                first = msg
        assert first is not None, "the consumer got nothing"
        assert (first.offset(), first.key()) == (3, b"user-3")
    finally:
        consumer.close()
