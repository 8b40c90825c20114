"""The host layer reads known_hosts once per file version and finds, per connection, only
the keys recorded for that host's name (plain, [host]:port and hashed entries)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import paramiko
import pytest

from planner.hosts.host_keys import HostKey, KnownHostsFiles, fingerprint, known_hosts_name


def _key(tmp_path: Path, name: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / name)],
                   check=True)
    return " ".join((tmp_path / f"{name}.pub").read_text().split()[:2])


def test_only_the_hosts_own_keys_are_trusted(tmp_path: Path) -> None:
    a, b, c = _key(tmp_path, "a"), _key(tmp_path, "b"), _key(tmp_path, "c")
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {a}\n[127.0.0.1]:2201 {b}\n10.0.0.3 {c}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(known)], check=True,
                   capture_output=True)  # hashed names, as HashKnownHosts writes them
    files = KnownHostsFiles()
    for host, port, expected in (("10.0.0.1", 22, a), ("127.0.0.1", 2201, b),
                                 ("10.0.0.3", 22, c)):
        keys = files.lookup(known, known_hosts_name(host, port)) or {}
        assert [f"{k.get_name()} {k.get_base64()}" for k in keys.values()] == [expected]
    assert files.lookup(known, "10.0.0.9") is None


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    a, b = _key(tmp_path, "a"), _key(tmp_path, "b")
    known = tmp_path / "known_hosts"
    known.write_text(f"10.0.0.1 {a}\n")
    files = KnownHostsFiles()
    assert files.lookup(known, "10.0.0.2") is None
    known.write_text(f"10.0.0.1 {a}\n10.0.0.2 {b}\n")  # another size: another version
    assert files.lookup(known, "10.0.0.2") is not None


def test_the_index_answers_as_paramiko_does(tmp_path: Path) -> None:
    """Plain and hashed names, several names on a line, a host with two key types, a
    second line of the same type (the first wins), [host]:port names: the indexed lookup
    gives what paramiko's walk over every entry gives, for each name and for strangers."""
    a, b, c, d, e = (_key(tmp_path, n) for n in "abcde")
    rsa = tmp_path / "rsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-N", "", "-f", str(rsa)],
                   check=True)
    r = " ".join((tmp_path / "rsa.pub").read_text().split()[:2])
    hashed = tmp_path / "hashed"
    hashed.write_text(f"10.0.0.5 {d}\n[10.0.0.6]:2222 {e}\n")
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", str(hashed)], check=True,
                   capture_output=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"# comment\n10.0.0.1,web-1 {a}\n10.0.0.1 {r}\n10.0.0.1 {b}\n"
                     f"[127.0.0.1]:2201 {c}\n" + hashed.read_text() + f"10.0.0.5 {a}\n")
    theirs = paramiko.HostKeys(str(known))
    files = KnownHostsFiles()
    names = ["10.0.0.1", "web-1", "[127.0.0.1]:2201", "127.0.0.1", "10.0.0.5",
             "[10.0.0.6]:2222", "10.0.0.6", "10.0.0.9"]
    for name in names:
        expected = theirs.lookup(name)
        got = files.lookup(known, name)
        if expected is None:
            assert got is None, name
            continue
        assert got is not None, name
        assert list(got) == list(dict.fromkeys(expected.keys())), name
        for kind, key in got.items():
            assert key.asbytes() == expected[kind].asbytes(), (name, kind)
    assert list(files.lookup(known, "10.0.0.1") or {}) == ["ssh-ed25519", "ssh-rsa"]


def test_revoked_keys_are_known_as_revoked_for_every_host(tmp_path: Path) -> None:
    a, b = _key(tmp_path, "a"), _key(tmp_path, "b")
    known = tmp_path / "known_hosts"
    # OpenSSH's markers: a revoked key (here for a pattern), a CA line that is no host key.
    known.write_text(f"10.0.0.1 {a}\n@revoked 10.0.0.* {a}\n@cert-authority *.lab {b}\n"
                     "@revoked 10.0.0.2 ssh-ed25519 not-base64!\n")
    files = KnownHostsFiles()
    key_a, key_b = (paramiko.PKey.from_type_string(k.split()[0], base64.b64decode(k.split()[1]))
                    for k in (a, b))
    assert files.revoked(known, key_a)
    assert not files.revoked(known, key_b)
    # The marker lines are no host's keys: the CA key is nobody's, the revoked one only
    # where a plain line names it (the handshake refuses it there first).
    assert files.lookup(known, "@cert-authority") is None
    assert files.lookup(known, "*.lab") is None


@pytest.mark.parametrize(("kind", "bits"), [("ed25519", None), ("rsa", "2048"),
                                            ("ecdsa", "256"), ("ecdsa", "384"),
                                            ("ecdsa", "521")])
def test_a_key_is_read_as_paramiko_reads_it_and_fingerprinted_as_ssh_keygen_does(
        tmp_path: Path, kind: str, bits: str | None) -> None:
    path = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", kind, *(["-b", bits] if bits else []), "-N", "",
                    "-f", str(path)], check=True)
    name, text = (tmp_path / "key.pub").read_text().split()[:2]
    blob = base64.b64decode(text)
    ours = HostKey.from_blob(blob)
    theirs = paramiko.PKey.from_type_string(name, blob)
    assert ours is not None
    assert (ours.get_name(), ours.asbytes(), ours.get_base64()) == \
        (theirs.get_name(), theirs.asbytes(), theirs.get_base64())
    shown = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "key.pub")], check=True,
                           capture_output=True, text=True).stdout.split()[1]
    assert fingerprint(ours) == shown
    # Refused: a blob under another type's name (paramiko refuses it too) and a cut one
    # (paramiko reads some of those; no host sends one).
    other = "ssh-rsa" if name != "ssh-rsa" else "ssh-ed25519"
    assert HostKey.from_blob(blob, other) is None
    for alias in ("rsa-sha2-256", "rsa-sha2-512"):  # an RSA key's line may name these
        read = HostKey.from_blob(blob, alias)
        assert (read is not None) == (name == "ssh-rsa")
        assert read is None or read.get_name() == paramiko.PKey.from_type_string(
            alias, blob).get_name() == "ssh-rsa"
    assert HostKey.from_blob(blob[:-1]) is None


def test_a_blob_of_an_unknown_type_or_a_bent_one_is_no_key() -> None:
    def wire(*fields: bytes) -> bytes:
        return b"".join(len(f).to_bytes(4, "big") + f for f in fields)

    assert HostKey.from_blob(wire(b"ssh-foo", b"x")) is None
    assert HostKey.from_blob(wire(b"ssh-ed25519", b"x" * 31)) is None  # not 32 bytes
    assert HostKey.from_blob(wire(b"ssh-ed25519", b"x" * 32, b"more")) is None
    assert HostKey.from_blob(wire(b"ecdsa-sha2-nistp256", b"nistp384", b"\x04")) is None
    assert HostKey.from_blob(b"\xff\xff\xff\xff") is None
    assert HostKey.from_blob(b"") is None
    assert HostKey.from_blob(wire(b"ssh-ed25519", b"x" * 32)) is not None


def test_a_key_sent_in_another_of_its_encodings_is_no_key(tmp_path: Path) -> None:
    """@revoked is a list of blobs: a revoked key re-encoded (an mpint with a needless
    zero, an ECDSA point compressed) must not slip past it, so only a key's one encoding
    is a key at all."""
    def wire(*fields: bytes) -> bytes:
        return b"".join(len(f).to_bytes(4, "big") + f for f in fields)

    def fields(blob: bytes) -> list[bytes]:
        out, at = [], 0
        while at < len(blob):
            size = int.from_bytes(blob[at:at + 4], "big")
            out.append(blob[at + 4:at + 4 + size])
            at += 4 + size
        return out

    made = {}
    for kind, bits in (("rsa", "2048"), ("ecdsa", "256")):
        path = tmp_path / kind
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-b", bits, "-N", "", "-f", str(path)],
                       check=True)
        made[kind] = base64.b64decode((tmp_path / f"{kind}.pub").read_text().split()[1])
    name, e, n = fields(made["rsa"])
    assert HostKey.from_blob(made["rsa"]) is not None
    assert HostKey.from_blob(wire(name, b"\0" + e, n)) is None  # e with a needless zero
    assert HostKey.from_blob(wire(name, e, b"\0" + n)) is None  # n: its top bit is set, so
    assert n[0] == 0 and HostKey.from_blob(wire(name, e, n[1:])) is None  # ... negative
    name, curve, point = fields(made["ecdsa"])
    compressed = bytes([2 + (point[-1] & 1)]) + point[1:33]
    assert HostKey.from_blob(wire(name, curve, compressed)) is None
    assert HostKey.from_blob(wire(name, b"nistp384", point)) is None
