"""The limit a plan is measured against: a minimal SSH client reading the same kind of facts
and files as a plan's host snapshot, one exec per host.

    python -m tests.bench.baseline CLUSTER.yaml

paramiko's Transport directly, one thread per host, TCP_NODELAY, host keys checked
strictly against the config's knownHosts (parsed once), the config's key (parsed once);
nothing else: no config schema, no phases, no plan.
Run by the bench as its own process, interleaved with `cargoship plan` on the same hosts
through the same proxy, so its wall time, CPU and RSS are measured the same way.
"""

from __future__ import annotations

import socket
import sys
import threading

import paramiko
import yaml

# What a plan's snapshot reads on a host, in kind: OS, kernel, init, hostname, addresses,
# privilege, clock, firewall, engine binary and service, its config files, the target
# files, the lock and the records. Missing files cost what they cost cargoship too.
SCRIPT = r"""
cat /etc/os-release; uname -srm
if [ -d /run/systemd/system ]; then echo systemd; elif command -v sv >/dev/null; then echo runit; fi
cat /proc/sys/kernel/hostname; ip -o -4 addr show; ip -4 route show default
id -u; sudo -n true 2>&1; date +%s.%N
nft -j list ruleset 2>/dev/null || iptables-save 2>/dev/null; true
for d in rke2 k3s; do b=$(command -v $d) && "$b" --version | head -n 1; done
sv status /etc/service/rke2-* 2>/dev/null; true
for f in /etc/rancher/*/config.yaml /etc/rancher/*/config.yaml.d/*.yaml \
         /etc/rancher/*/registries.yaml /etc/rancher/*/cargoship-*.yaml \
         /var/lib/rancher/*/server/manifests/cargoship-*.yaml; do
  [ -f "$f" ] && { stat -c '%a %u %g %s' "$f"; base64 "$f"; }
done
ls -A /etc/rancher/*/config.yaml.d /var/lib/rancher/*/server/manifests 2>/dev/null
cat /run/cargoship/lock 2>/dev/null; ls /var/lib/cargoship/applied 2>/dev/null; true
"""


def read_host(entry: dict, known: paramiko.HostKeys, key: paramiko.PKey,  # type: ignore[type-arg]
              results: dict[int, str], index: int, timeout: float) -> None:
    ssh = entry["ssh"]
    address, port = ssh["address"], ssh.get("port", 22)
    transport = None
    try:
        sock = socket.create_connection((address, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport = paramiko.Transport(sock)
        transport.start_client(timeout=timeout)
        name = address if port == 22 else f"[{address}]:{port}"
        served = transport.get_remote_server_key()
        if known.lookup(name) is None or \
                known.lookup(name).get(served.get_name()) != served:  # type: ignore[union-attr]
            raise paramiko.SSHException(f"host key of {name} is not the known one")
        transport.auth_publickey(ssh.get("user", "root"), key)
        channel = transport.open_session(timeout=timeout)
        channel.exec_command("sh -c " + _quote(SCRIPT))
        data = b""
        while chunk := channel.recv(65536):
            data += chunk
        results[index] = f"ok {len(data)} bytes, exit {channel.recv_exit_status()}"
    except Exception as exc:  # a bench: report the host, do not stop the others
        results[index] = f"failed: {type(exc).__name__}: {exc}"
    finally:
        if transport is not None:
            transport.close()


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def main(argv: list[str]) -> int:
    config = yaml.safe_load(open(argv[0]).read())
    hosts = config["spec"]["hosts"]
    results: dict[int, str] = {}
    # Read once for all hosts, as any minimal client would: the known_hosts file, the key.
    known = paramiko.HostKeys(hosts[0]["ssh"]["knownHosts"])
    key = paramiko.PKey.from_path(hosts[0]["ssh"]["keyPath"])
    threads = [threading.Thread(target=read_host, args=(h, known, key, results, i, 10.0))
               for i, h in enumerate(hosts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    failed = [r for r in results.values() if not r.startswith("ok")]
    print(f"baseline: {len(hosts) - len(failed)} of {len(hosts)} host(s) read"
          + (f"; first failure: {failed[0]}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
