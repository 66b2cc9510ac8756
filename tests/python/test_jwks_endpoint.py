"""OAUTHBEARER against a JWKS served over https, as Kafka's
`sasl.oauthbearer.jwks.endpoint.url` fetches it: at start, every
`sasl.oauthbearer.jwks.endpoint.refresh.ms`, and at once (rate limited)
when a token names a key id the JWKS lacks; a failed refresh keeps the
keys. The endpoint's CA comes from the `ssl.truststore.*` options of the
OAUTHBEARER JAAS entry, as Kafka's JWKS client reads its TLS settings."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from harness import BrokerError, distinct_free_ports, wait_until
from security_material import Authority, JwtIssuer, claims
from test_security import authentication_error, jaas

pytestmark = pytest.mark.timeout(180)


class JwksServer:
    """An https server on 127.0.0.1 answering every GET with the current
    JWKS (or a failure status), counting the requests."""

    def __init__(self, ca: Authority):
        issued = ca.issue("jwks-server", "localhost", server=True)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(issued.cert_path, issued.key_path)
        self.body, self.status, self.requests = b"{}", 200, 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                server.requests += 1
                self.send_response(server.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, *issuers: JwtIssuer, status: int = 200) -> None:
        keys = [json.loads(issuer.jwks_path.read_text())["keys"][0] for issuer in issuers]
        self.body, self.status = json.dumps({"keys": keys}).encode(), status

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def pki(tmp_path):
    ca = Authority(tmp_path / "pki", "idp-ca")
    server = JwksServer(ca)
    yield ca, server
    server.close()


def jwt_broker(broker_factory, ca: Authority, url: str, refresh_ms: int):
    plain_port, jwt_port = distinct_free_ports(2)
    prefix = "listener.name.jwt.oauthbearer."
    broker = broker_factory({
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},JWT://127.0.0.1:{jwt_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,JWT:SASL_PLAINTEXT",
        "listener.name.jwt.sasl.enabled.mechanisms": "OAUTHBEARER",
        f"{prefix}sasl.jaas.config": jaas("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
                                          **{"ssl.truststore.type": "PEM",
                                             "ssl.truststore.location": str(ca.ca_path)}),
        f"{prefix}sasl.server.callback.handler.class":
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
        f"{prefix}sasl.oauthbearer.jwks.endpoint.url": url,
        f"{prefix}sasl.oauthbearer.jwks.endpoint.refresh.ms": refresh_ms,
        f"{prefix}sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": 50,
        f"{prefix}sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": 100,
        f"{prefix}sasl.oauthbearer.expected.audience": "strom",
    }, port=plain_port)
    return broker, f"127.0.0.1:{jwt_port}"


def client(bootstrap: str, issuer: JwtIssuer, sub: str = "carol") -> dict:
    token = issuer.token(claims(sub, aud="strom"))
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, claims(sub)["exp"])}


def authenticates(conf: dict) -> bool:
    try:
        return bool(AdminClient(conf).list_topics(timeout=3).brokers)
    except KafkaException:
        return False


def test_an_unknown_key_id_refreshes_the_jwks_at_once_and_rate_limited(broker_factory, pki, tmp_path):
    ca, server = pki
    first, second = JwtIssuer(tmp_path / "a", kid="first"), JwtIssuer(tmp_path / "b", kid="second")
    server.serve(first)
    broker, bootstrap = jwt_broker(broker_factory, ca, server.url, refresh_ms=3_600_000)
    assert server.requests == 1, "the JWKS is fetched once at start"
    assert authenticates(client(bootstrap, first))

    # The provider adds a key; the first token naming it asks for a refresh.
    server.serve(first, second)
    wait_until(lambda: authenticates(client(bootstrap, second, "dave")), 30, "the new key fetched on demand")
    assert 2 <= server.requests <= 3, server.requests

    # A key id that never appears is chased at most once a minute.
    stranger = JwtIssuer(tmp_path / "c", kid="stranger")
    fetched = server.requests
    for _ in range(3):
        assert "invalid_token" in authentication_error(client(bootstrap, stranger)).str()
    assert server.requests == fetched + 1, (fetched, server.requests)
    assert broker.alive()


def test_the_jwks_is_refreshed_on_schedule_and_a_failed_refresh_keeps_the_keys(broker_factory, pki, tmp_path):
    ca, server = pki
    first, second = JwtIssuer(tmp_path / "a", kid="first"), JwtIssuer(tmp_path / "b", kid="second")
    server.serve(first)
    broker, bootstrap = jwt_broker(broker_factory, ca, server.url, refresh_ms=500)

    server.serve(first, status=500)
    failed = server.requests
    wait_until(lambda: server.requests >= failed + 4, 20, "refreshes that fail")
    assert authenticates(client(bootstrap, first)), "a failed refresh keeps the keys"

    # The provider rotates: the scheduled refresh drops the retired key.
    server.serve(second)
    wait_until(lambda: authenticates(client(bootstrap, second)), 20, "the rotated key")
    assert "invalid_token" in authentication_error(client(bootstrap, first)).str(), "the retired key is gone"
    assert broker.alive()


def test_a_jwks_endpoint_with_an_untrusted_certificate_stops_the_start(broker_factory, pki, tmp_path):
    _, server = pki
    server.serve(JwtIssuer(tmp_path / "a"))
    stranger_ca = Authority(tmp_path / "other", "other-ca")
    with pytest.raises(BrokerError) as failed:
        jwt_broker(broker_factory, stranger_ca, server.url, refresh_ms=3_600_000)
    assert "sasl.oauthbearer.jwks.endpoint.url" in str(failed.value), failed.value
    assert "UnknownIssuer" in str(failed.value), failed.value
