"""Certificates, key stores and tokens made at run time for the security
tests, with the `cryptography` package: a CA, server and client
certificates (PEM files and PKCS12 stores), an untrusted CA, and JWTs
(unsecured, and RS256-signed with a JWKS file to check them)."""

from __future__ import annotations

import base64
import datetime
import json
import time
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

STORE_PASSWORD = "store-secret"


def _name(cn: str, ou: str | None = None) -> x509.Name:
    attributes = [
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Strom"),
    ]
    if ou:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attributes)


def _pem(key) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


@dataclass
class Issued:
    """A certificate with its key, written as PEM files."""

    cert: x509.Certificate
    key: object
    cert_path: Path
    key_path: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _pem(self.key)

    def encrypted_key_pem(self, password: str) -> bytes:
        encryption = serialization.BestAvailableEncryption(password.encode())
        return self.key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def joined(pem: bytes) -> str:
    """PEM as a properties file's continued lines leave it: one line, no breaks."""
    return "".join(line.strip() for line in pem.decode().splitlines())


class Authority:
    """A CA that issues server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.ca_path = directory / f"{name}.pem"
        self.ca_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(self, file_stem: str, cn: str, ou: str | None = None, server: bool = False,
              client: bool = False, dns_only: bool = False) -> Issued:
        """A certificate for a server (`server`), a client, or (both flags) a
        node that serves and connects to other nodes. A server's names are
        localhost and 127.0.0.1, or (`dns_only`) localhost alone."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(cn, ou))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            names = [x509.DNSName("localhost")]
            if not dns_only:
                names.append(x509.IPAddress(IPv4Address("127.0.0.1")))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
            usage = [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]
            if client:
                usage.append(x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH)
        else:
            usage = [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self.directory / f"{file_stem}.crt.pem"
        key_path = self.directory / f"{file_stem}.key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(_pem(key))
        return Issued(cert, key, cert_path, key_path)

    def pem_keystore(self, issued: Issued, path: Path) -> Path:
        """A PEM key store file as Kafka reads one: the key, then the chain."""
        path.write_bytes(issued.key_pem + issued.cert_pem + self.cert.public_bytes(serialization.Encoding.PEM))
        return path

    def pkcs12_keystore(self, issued: Issued, path: Path, password: str = STORE_PASSWORD, legacy: bool = False) -> Path:
        """A PKCS12 key store: AES and SHA-256 as today's tools write it, or
        (`legacy`) 3DES and SHA-1 as Java 8 and OpenSSL 1.1 did."""
        encryption = serialization.BestAvailableEncryption(password.encode())
        if legacy:
            encryption = (
                serialization.PrivateFormat.PKCS12.encryption_builder()
                .key_cert_algorithm(pkcs12.PBES.PBESv1SHA1And3KeyTripleDESCBC)
                .hmac_hash(hashes.SHA1())
                .build(password.encode())
            )
        data = pkcs12.serialize_key_and_certificates(b"server", issued.key, issued.cert, [self.cert], encryption)
        path.write_bytes(data)
        return path

    def pkcs12_truststore(self, path: Path, password: str = STORE_PASSWORD) -> Path:
        encryption = serialization.BestAvailableEncryption(password.encode())
        ca = pkcs12.PKCS12Certificate(self.cert, b"ca")
        path.write_bytes(pkcs12.serialize_java_truststore([ca], encryption))
        return path


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(n: int) -> str:
    return b64url(n.to_bytes((n.bit_length() + 7) // 8, "big"))


def claims(sub: str, lifetime_s: float = 3600, **extra) -> dict:
    now = time.time()
    return {"sub": sub, "iat": int(now), "exp": int(now + lifetime_s), **extra}


class JwtIssuer:
    """An RSA key that signs RS256 JWTs, and the JWKS file that checks them."""

    def __init__(self, directory: Path, kid: str = "strom-test"):
        directory.mkdir(parents=True, exist_ok=True)
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        numbers = self.key.public_key().public_numbers()
        jwk = {"kty": "RSA", "kid": kid, "alg": "RS256", "use": "sig", "n": _uint(numbers.n), "e": _uint(numbers.e)}
        self.jwks_path = directory / "jwks.json"
        self.jwks_path.write_text(json.dumps({"keys": [jwk]}))

    def token(self, payload: dict) -> str:
        header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": self.kid}).encode())
        body = b64url(json.dumps(payload).encode())
        signature = self.key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{body}.{b64url(signature)}"


def unsecured_token(payload: dict) -> str:
    return f"{b64url(json.dumps({'alg': 'none'}).encode())}.{b64url(json.dumps(payload).encode())}."
