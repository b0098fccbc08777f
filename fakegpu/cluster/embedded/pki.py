"""A private CA and the certificates a small Kubernetes cluster needs.

ECDSA P-256 everywhere: every Kubernetes component accepts it and it is fast to generate on a
small host. Keys are written 0600; certificates 0644. Nothing here talks to the network.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for any test session, short enough that a leaked cert is not forever.
VALIDITY = datetime.timedelta(days=365)
# Clocks on CI hosts drift a little: back-date so a fresh cert is valid immediately.
BACKDATE = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    # Create with 0600 from the start: never a moment where the key is world-readable.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)


def _name(cn: str, orgs: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


class CertificateAuthority:
    """A CA whose files live in ``directory`` as ``ca.crt`` / ``ca.key``."""

    def __init__(self, directory: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey):
        self.directory = directory
        self._cert = cert
        self._key = key

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def key_path(self) -> Path:
        return self.directory / "ca.key"

    @classmethod
    def create(cls, directory: Path, common_name: str = "fakegpu-ca") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        name = _name(common_name)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True,
                    content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        ca = cls(directory, cert, key)
        _write_key(ca.key_path, key)
        _write_cert(ca.cert_path, cert)
        return ca

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
        key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{directory / 'ca.key'}: not an EC key")
        return cls(directory, cert, key)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        orgs: Sequence[str] = (),
        dns: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
        directory: Path | None = None,
    ) -> CertPair:
        """Write ``<name>.crt`` / ``<name>.key`` (beside the CA unless ``directory``)."""
        if not (server or client):
            raise ValueError("a certificate must be for a server, a client or both")
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
            [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, orgs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_encipherment=False, key_cert_sign=False,
                    crl_sign=False, content_commitment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), False
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        out = directory or self.directory
        pair = CertPair(out / f"{name}.crt", out / f"{name}.key")
        _write_key(pair.key, key)
        _write_cert(pair.cert, cert)
        return pair


def service_account_keypair(directory: Path) -> CertPair:
    """The key pair the apiserver signs service-account tokens with (``sa.key``/``sa.pub``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    _write_key(pair.key, key)
    pair.cert.write_bytes(pub)
    return pair
