"""A small client for the web console (`console.listener`), shared by the
handler tests and the browser tests: one broker per test module with the
console on, plain HTTP requests that keep the CSRF cookie, and the parsing
the tests need (the table cells of a page, a form's hidden token).
"""

from __future__ import annotations

import base64
import html
import http.client
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from harness import Broker, free_port

HTTP_TIMEOUT_S = 15.0
TOKEN = re.compile(r'name="csrf" value="([0-9a-f]{32})"')
ROW = re.compile(r"<tr>(.*?)</tr>", re.S)
CELL = re.compile(r"<td[^>]*>(.*?)</td>", re.S)
TAG = re.compile(r"<[^>]+>")


def start_console_broker(workdir: Path, **overrides: str) -> tuple[Broker, int]:
    """A broker with the console on a free loopback port, sampling its plots every 500 ms."""
    port = free_port()
    config = {
        "console.listener": f"http://127.0.0.1:{port}",
        "console.metrics.sample.ms": "500",
        **overrides,
    }
    broker = Broker(workdir, config)
    broker.start()
    return broker, port


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str

    def location(self) -> str:
        return self.headers.get("location", "")


@dataclass
class ConsoleClient:
    port: int
    credentials: tuple[str, str] | None = None
    cookies: dict[str, str] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> Reply:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=HTTP_TIMEOUT_S)
        sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        if self.credentials:
            token = base64.b64encode(":".join(self.credentials).encode()).decode()
            sent["Authorization"] = f"Basic {token}"
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            connection.request(method, path, body=body, headers=sent)
            response = connection.getresponse()
            reply = Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode())
        finally:
            connection.close()
        cookie = reply.headers.get("set-cookie", "")
        if "=" in cookie:
            name, value = cookie.split(";", 1)[0].split("=", 1)
            self.cookies[name] = value
        return reply

    def get(self, path: str, **params: object) -> Reply:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        return self.request("GET", f"{path}?{query}" if query else path)

    def page(self, path: str, **params: object) -> str:
        reply = self.get(path, **params)
        assert reply.status == 200, f"GET {path} {params}: {reply.status}\n{reply.body[:2000]}"
        return reply.body

    def csrf(self) -> str:
        """The token of this client's cookie, as the pages' forms carry it."""
        if "strom_console_csrf" not in self.cookies:
            self.page("/")
        return self.cookies["strom_console_csrf"]

    def post(self, path: str, csrf: str | None = None, **fields: object) -> Reply:
        token = self.csrf() if csrf is None else csrf
        body = urllib.parse.urlencode({"csrf": token, **{k: str(v) for k, v in fields.items()}}).encode()
        return self.request("POST", path, body)

    def act(self, path: str, **fields: object) -> str:
        """Posts an action that must work; returns the notice it redirects with."""
        reply = self.post(path, **fields)
        assert reply.status == 303, f"POST {path} {fields}: {reply.status}\n{error_of(reply.body)}"
        query = urllib.parse.parse_qs(urllib.parse.urlparse(reply.location()).query)
        return query.get("notice", [""])[0]


def text(cell_html: str) -> str:
    """A cell's text: tags dropped, entities decoded."""
    return html.unescape(TAG.sub("", cell_html)).strip()


def table(page: str, table_id: str) -> list[list[str]]:
    """The body rows of a table as cell texts (the 'none' row of an empty table is no row)."""
    found = re.search(rf'<table id="{re.escape(table_id)}"[^>]*>(.*?)</table>', page, re.S)
    assert found, f"no table {table_id}"
    body = found.group(1).split("</thead>", 1)[1]
    rows = [[text(c) for c in CELL.findall(row)] for row in ROW.findall(body)]
    return [r for r in rows if r != ["none"]]


def facts(page: str) -> dict[str, str]:
    """The label -> value pairs of a page's summary."""
    return {text(k): text(v) for k, v in re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", page, re.S)}


def error_of(page: str) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', page, re.S)
    return html.unescape(found.group(1)) if found else ""
