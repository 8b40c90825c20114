"""The lab's certificates, laid out as rke2/k3s keep theirs (server/tls/ in the data dir).

One CA signs the API servers' serving certificates (SANs: 127.0.0.1, localhost, the
controller's address and name and its tls-san entries, as the real ones list), another the
client certificates (the admin: CN system:admin, O system:masters). Made on this machine
with `cryptography` (the test virtualenv has it through paramiko), once per lab.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID = datetime.timedelta(days=365)


@dataclass
class Pair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return self.key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.TraditionalOpenSSL,
                                      serialization.NoEncryption())

    def save(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{name}.crt").write_bytes(self.cert_pem)
        key = directory / f"{name}.key"
        key.write_bytes(self.key_pem)
        key.chmod(0o600)

    @classmethod
    def load(cls, directory: Path, name: str) -> Pair:
        cert = x509.load_pem_x509_certificate((directory / f"{name}.crt").read_bytes())
        key = serialization.load_pem_private_key((directory / f"{name}.key").read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return cls(cert, key)


def _name(cn: str, org: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(parts)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
             ) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + VALID))


def make_ca(cn: str) -> Pair:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(_name(cn), _name(cn), key)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return Pair(cert, key)


def issue(ca: Pair, cn: str, *, org: str | None = None, ips: tuple[str, ...] = (),
          dns: tuple[str, ...] = (), client: bool = False, both: bool = False) -> Pair:
    """`both`: server and client use in one certificate, as etcd's server-client and
    peer-server-client certificates are (a member dials its peers with the same pair)."""
    key = ec.generate_private_key(ec.SECP256R1())
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if both else \
        [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
    builder = (_builder(_name(cn, org), ca.cert.subject, key)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if ips or dns:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return Pair(builder.sign(ca.key, hashes.SHA256()), key)


def lab_pki(directory: Path) -> tuple[Pair, Pair, Pair]:
    """The lab's server CA, client CA and admin client pair, made once and kept in DIR."""
    if not (directory / "server-ca.crt").exists():
        server_ca, client_ca = make_ca("lab-server-ca"), make_ca("lab-client-ca")
        admin = issue(client_ca, "system:admin", org="system:masters", client=True)
        for pair, name in ((server_ca, "server-ca"), (client_ca, "client-ca"),
                           (admin, "client-admin")):
            pair.save(directory, name)
    return (Pair.load(directory, "server-ca"), Pair.load(directory, "client-ca"),
            Pair.load(directory, "client-admin"))


def controller_tls(tls_dir: Path, pki: Path, name: str, address: str,
                   sans: list[str] | tuple[str, ...] = ()) -> None:
    """A controller's server/tls: the CAs, the admin pair, its own serving pair."""
    server_ca, client_ca, admin = lab_pki(pki)
    tls_dir.mkdir(parents=True, exist_ok=True)
    (tls_dir / "server-ca.crt").write_bytes(server_ca.cert_pem)
    (tls_dir / "client-ca.crt").write_bytes(client_ca.cert_pem)
    admin.save(tls_dir, "client-admin")
    extra_ips, extra_dns = [], []
    for san in sans:  # tls-san: addresses and names, as the engines add them
        try:
            extra_ips.append(str(ipaddress.ip_address(san)))
        except ValueError:
            extra_dns.append(san)
    serving = issue(server_ca, "kube-apiserver", ips=("127.0.0.1", address, *extra_ips),
                    dns=("localhost", "kubernetes", "kubernetes.default", name.lower(),
                         *extra_dns))
    serving.save(tls_dir, "serving-kube-apiserver")


def etcd_cas(directory: Path) -> tuple[Pair, Pair]:
    """The lab's etcd server CA and peer CA (k3s/rke2 make one of each per cluster), made
    once and kept in DIR."""
    if not (directory / "etcd-server-ca.crt").exists():
        make_ca("etcd-server-ca").save(directory, "etcd-server-ca")
        make_ca("etcd-peer-ca").save(directory, "etcd-peer-ca")
    return Pair.load(directory, "etcd-server-ca"), Pair.load(directory, "etcd-peer-ca")


def etcd_tls(etcd_dir: Path, pki: Path, name: str, address: str) -> None:
    """A controller's server/tls/etcd, with the names k3s gives them
    (pkg/daemons/control/deps/deps.go: ETCDServerCA server-ca.crt, ETCDPeerCA peer-ca.crt,
    ServerETCDCert server-client.crt, PeerServerClientETCDCert peer-server-client.crt,
    ClientETCDCert client.crt, the API server's), which rke2 inherits. The member serves
    clients with server-client.crt, and that same pair is what a person on the host (and
    cargoship) reads etcd with, as rke2's docs show for etcdctl."""
    server_ca, peer_ca = etcd_cas(pki)
    etcd_dir.mkdir(parents=True, exist_ok=True)
    (etcd_dir / "server-ca.crt").write_bytes(server_ca.cert_pem)
    (etcd_dir / "peer-ca.crt").write_bytes(peer_ca.cert_pem)
    ips, dns = ("127.0.0.1", address), ("localhost", name.lower())
    issue(server_ca, "etcd-server", ips=ips, dns=dns, both=True).save(etcd_dir, "server-client")
    issue(peer_ca, "etcd-peer", ips=ips, dns=dns, both=True).save(etcd_dir,
                                                                  "peer-server-client")
    issue(server_ca, "etcd-client", client=True).save(etcd_dir, "client")
