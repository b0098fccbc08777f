"""The CA and the certificates it issues, checked by parsing and verifying them."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fakegpu.cluster.embedded.pki import CertificateAuthority, service_account_keypair


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_issued_server_cert_has_sans_and_verifies(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    pair = ca.issue("apiserver", "kube-apiserver", server=True,
                    dns=("kubernetes.default.svc", "localhost"), ips=("127.0.0.1", "10.96.0.1"))
    cert = _load(pair.cert)
    cert.verify_directly_issued_by(_load(ca.cert_path))
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"kubernetes.default.svc", "localhost"}
    assert set(san.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.96.0.1")}
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_client_cert_carries_user_and_groups(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    pair = ca.issue("kubelet-n0", "system:node:n0", orgs=("system:nodes",), client=True)
    cert = _load(pair.cert)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n0"
    orgs = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    assert orgs == ["system:nodes"]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_keys_are_private(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    pair = ca.issue("x", "x", client=True)
    sa = service_account_keypair(tmp_path)
    for key in (ca.key_path, pair.key, sa.key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


def test_loaded_ca_issues_certs_the_original_verifies(tmp_path: Path) -> None:
    original = CertificateAuthority.create(tmp_path)
    pair = CertificateAuthority.load(tmp_path).issue("y", "y", client=True)
    _load(pair.cert).verify_directly_issued_by(_load(original.cert_path))


def test_a_cert_must_have_a_purpose(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    with pytest.raises(ValueError):
        ca.issue("z", "z")


def test_ca_is_a_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority.create(tmp_path)
    bc = _load(ca.cert_path).extensions.get_extension_for_class(x509.BasicConstraints).value
    assert bc.ca
    assert isinstance(_load(ca.cert_path).public_key(), ec.EllipticCurvePublicKey)
