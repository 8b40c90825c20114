"""The files that make a lab host what it is: prepared on the machine before it starts.

Everything goes under the host's own directory; the host's init mounts it over /etc
(an overlay), /root (an overlay hiding the shell rc files), /var (an overlay),
/etc/rancher, /var/lib/rancher, /usr/local/bin and /home.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import py_compile
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import yaml

from .osreleases import OS_RELEASES
from .spec import HostSpec

HERE = Path(__file__).parent
ENGINE_SOURCE = HERE / "engine.py"
# Programs copied into each host's /usr/local/bin (the host may not see the checkout). The
# engine is a module behind a two-line script, so that Python caches its bytecode: a script
# is compiled anew at every start.
HOST_PROGRAMS = {"lab_engine.py": "engine.py", "engine_node.py": "engine_node.py",
                 "engine_config.py": "engine_config.py", "deploy.py": "deploy.py",
                 "engine_mirror.py": "engine_mirror.py"}
ENGINE_SCRIPT = "import lab_engine\n\nlab_engine.entry()\n"
API_PROGRAMS = ("kubeapi.py", "kubeapi_lang.py", "kubeapi_store.py", "kubeapi_watch.py",
                "kubeapi_views.py", "kubeapi_hostile.py", "kubeapi_hostile_serve.py",
                "kubeapi_etcd.py", "kubeapi_etcdstore.py")
API_PORT = 6443  # every controller's API server (TLS)
DATASTORE_PORT = 6444  # the lab's own view, on the first controller (plain HTTP)
RC_FILES = (".bashrc", ".profile", ".bash_profile", ".bash_login")
FIRST_UID = 1001
ETCD_SERVICE = "etcd"  # a controller's etcd member, in a lab with etcd
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
# Told by the lab (Lab.etcd_manifest_changed): the next rke2 start rewrites the etcd static
# pod's manifest, so the kubelet recreates the member's pod.
ETCD_MANIFEST_CHANGED = "lab-etcd-manifest-changed"
# Written by the engine at each start (engine.py DATA_DIR_FILE): its data dir, from which
# the static pods' run scripts take their paths, as rke2 writes their manifests from it.
DATA_DIR_FILE = "lab-data-dir"


def engine_service(distro: str, role: str) -> str:
    if distro == "rke2":
        return "rke2-server" if role == "controller" else "rke2-agent"
    return "k3s" if role == "controller" else "k3s-agent"


def faketime_library() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    if not found:
        raise RuntimeError("libfaketime not found (apt-get install faketime)")
    return found[0]


def sshd_config(address: str, clock_offset: int) -> str:
    lines = [
        f"ListenAddress {address}",
        "Port 22",
        "HostKey /etc/ssh/lab_host_ed25519_key",
        "StrictModes no",
        "UsePAM no",
        "UseDNS no",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "AuthorizedKeysFile .ssh/authorized_keys",
        "PidFile /run/sshd.pid",
        "Subsystem sftp internal-sftp",
    ]
    if clock_offset:
        # Every process of an SSH session then sees the shifted clock.
        lines.append(f"SetEnv LD_PRELOAD={faketime_library()} FAKETIME={clock_offset:+d}")
    return "\n".join(lines) + "\n"


def engine_wrapper(distro: str, version: str) -> str:
    commit = "6b4e1a7b" if distro == "rke2" else "98262b5d"
    go = "go version go1.22.5 X:boringcrypto" if distro == "rke2" else "go version go1.22.5"
    return (
        "#!/bin/sh\n"
        "case \"$1\" in\n"
        f"  --version|-v) printf '%s\\n' '{distro} version {version} ({commit})' '{go}'; "
        "exit 0;;\n"
        "esac\n"
        f"exec /usr/bin/python3 /usr/local/bin/lab-engine.py --distro {distro} \"$@\"\n"
    )


def install_program(source: Path, target: Path) -> None:
    """A lab program in a host's /usr/local/bin, with its bytecode beside it: each host
    compiled its own copies at its first start (about 50 ms of CPU a controller, a few per
    cent of the suite's CPU), as no real host compiles its engine. The bytecode is
    checked-hash (PEP 552): a host whose copy was changed, by a test or by root on that
    host, compiles that copy anew, never runs the checkout's. Written under the running
    interpreter's cache tag, so a host Python of another version ignores it."""
    shutil.copyfile(source, target)
    cache = target.parent / "__pycache__"
    cache.mkdir(exist_ok=True)
    name = f"{target.stem}.{sys.implementation.cache_tag}.pyc"
    (cache / name).write_bytes(_bytecode(source, source.read_bytes()))


@functools.cache
def _bytecode(source: Path, text: bytes) -> bytes:
    """Compiled once per process for each content (`text` is part of the cache's key).
    The file name inside is the checkout's, but an import names the copy it loaded."""
    del text
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.pyc"
        py_compile.compile(str(source), cfile=str(out), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        return out.read_bytes()


def write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def prepare(host_dir: Path, spec: HostSpec, *, address: str, distro: str, version: str,
            client_pubkey: str, registries: Mapping[str, object], uid: int,
            api: dict[str, object] | None = None, pki: Path | None = None,
            etcd: dict[str, str] | None = None) -> str:
    """`etcd` (controllers of a lab with etcd): {"name": member name, "cluster": the
    initial cluster, "token": the cluster token}."""
    """Lay out a host's files; returns its SSH host public key line (type + base64)."""
    if spec.os not in OS_RELEASES:
        raise ValueError(f"unknown lab OS {spec.os!r}; known: {', '.join(OS_RELEASES)}")
    for name in ("etc.upper", "etc.work", "root.upper", "root.work", "var.upper", "var.work",
                 "var.upper/lib/rancher", "rancher-etc", "rancher-var", "bin", "home"):
        (host_dir / name).mkdir(parents=True, exist_ok=True)
    write(host_dir / "hostname", spec.name + "\n")
    etc = host_dir / "etc.upper"
    write(etc / "os-release", OS_RELEASES[spec.os])
    write(etc / "hostname", spec.name + "\n")
    # sudo resolves the host's own name; without an entry it waits for DNS (seconds).
    write(etc / "hosts", Path("/etc/hosts").read_text() + f"127.0.1.1 {spec.name}\n")
    write(etc / "bash.bashrc", "")  # Debian's bash reads it for ssh commands: ~80 ms each
    (etc / "rancher").mkdir(exist_ok=True)  # mount point
    write(etc / "ssh" / "sshd_config_lab", sshd_config(address, spec.clock_offset))
    key = etc / "ssh" / "lab_host_ed25519_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", spec.name, "-f",
                    str(key)], check=True)
    services = etc / "service"
    services.mkdir(exist_ok=True)
    # Opaque: the machine's own /etc/service entries must not appear inside the host.
    os.setxattr(services, "trusted.overlay.opaque", b"y")
    write(services / "sshd" / "run",
          "#!/bin/sh\nexec /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config_lab 2>&1\n", 0o755)
    if spec.engine_installed:
        set_engine_version(host_dir, distro, version)
        for target, source in HOST_PROGRAMS.items():
            install_program(HERE / source, host_dir / "bin" / target)
        write(host_dir / "bin" / "lab-engine.py", ENGINE_SCRIPT)
        mode = "server" if spec.role == "controller" else "agent"
        _engine_service(services / engine_service(distro, spec.role), distro, mode,
                        stops_etcd=etcd is not None and distro == "k3s")
        config_dir = host_dir / "rancher-etc" / distro
        settings: dict[str, object] = {"write-kubeconfig-mode": "0600"}
        if api is not None and spec.role == "controller" and etcd is None:
            # No member of its own: the servers of this lab share the lab's datastore, and
            # say so as a k3s/rke2 server on an external one does (k3s
            # pkg/cli/cmds/server.go, --datastore-endpoint).
            settings["datastore-endpoint"] = api["api"]
        settings.update(spec.engine_config or {})
        write(config_dir / "config.yaml", yaml.safe_dump(settings, sort_keys=False), 0o600)
        write(config_dir / "registries.yaml", yaml.safe_dump(registries, sort_keys=False),
              0o600)
        (host_dir / "rancher-var" / distro).mkdir(exist_ok=True)
        if api is not None:
            api = dict(api)
            if spec.role == "controller":
                assert pki is not None
                _add_controller_api(host_dir, spec, distro, address, api, pki, etcd)
            write(host_dir / "rancher-var" / distro / "lab-cluster.json", json.dumps(api), 0o600)
    _authorize(host_dir / "root.upper", client_pubkey, 0, 0)
    for name in RC_FILES:
        whiteout = host_dir / "root.upper" / name
        if not whiteout.exists():
            os.mknod(whiteout, 0o600 | 0o020000, os.makedev(0, 0))  # char 0/0 = whiteout
    if spec.user != "root":
        _add_user(host_dir, spec, uid, client_pubkey)
    return " ".join((key.with_suffix(".pub")).read_text().split()[:2])


def env_files(distro: str, service: str) -> tuple[str, ...]:
    """The unit's EnvironmentFile= lines, in order (a missing one is skipped, the `-`):
    k3s's install.sh writes /etc/default/%N, /etc/sysconfig/%N and
    /etc/systemd/system/<unit>.env; rke2's units (bundle/lib/systemd/system/
    rke2-server.service) /etc/default/%N, /etc/sysconfig/%N and
    /usr/local/lib/systemd/system/%N.env."""
    last = f"/etc/systemd/system/{service}.service.env" if distro == "k3s" \
        else f"/usr/local/lib/systemd/system/{service}.env"
    return (f"/etc/default/{service}", f"/etc/sysconfig/{service}", last)


def _engine_service(service: Path, distro: str, mode: str,
                    stops_etcd: bool = False) -> None:
    """The engine under runit, logging through svlogd to /var/log/<service>/current (the
    usual runit layout); `check` is true once the engine is READY (Type=notify), so
    `sv start` waits for that, as `systemctl start` does. The `run` script stands in for
    the systemd unit: it exports the unit's environment files (KEY=value lines, which
    systemd's EnvironmentFile= and the shell read alike) and its last line is the unit's
    ExecStart (tests add flags there)."""
    sources = " ".join(env_files(distro, service.name))
    write(service / "run", "#!/bin/sh\nset -a\n"
          f"for f in {sources}; do [ -r \"$f\" ] && . \"$f\"; done\nset +a\n"
          f"exec /usr/local/bin/{distro} {mode} 2>&1\n", 0o755)
    write(service / "log" / "run", f"#!/bin/sh\nmkdir -p /var/log/{service.name}\n"
          f"exec svlogd -tt /var/log/{service.name}\n", 0o755)
    # Shell builtins only, no program: a restart's script runs it at every tick while the
    # engine starts, and on a real host a readiness check costs that host alone, not the
    # 20 others sharing the lab's CPUs. The state file is one line of JSON, "pid" first.
    write(service / "check",
          "#!/bin/sh\nread -r pid < supervise/pid || exit 1\n"
          f"read -r state 2>/dev/null < /var/lib/rancher/{distro}/lab-engine.json || exit 1\n"
          "case \"$state\" in *'\"pid\": '\"$pid\"[,}]*) exit 0;; esac\nexit 1\n", 0o755)
    if stops_etcd:
        # k3s runs its etcd member inside its own process (pkg/etcd/etcd.go, embed): when
        # the process ends, however it ends, so does the member. The engine stops it
        # itself on a clean stop; this covers a crash or a kill.
        write(service / "finish", f"#!/bin/sh\nsv down /etc/service/{ETCD_SERVICE}\n", 0o755)


SV_REQUESTS_LOG = "/var/log/lab-sv/requests.log"
# The service manager's own record of what it was asked, as opposed to what it did by
# itself. rke2's units (rke2-server.service, rke2-agent.service) and k3s's have
# Restart=always, RestartSec=5s: systemd starts a crashed engine again with nobody asking,
# and tells the two apart: a requested job is journaled as "Stopping/Starting
# rke2-server.service" by whoever called systemctl, a respawn as "rke2-server.service:
# Scheduled restart job, restart counter is at N" (and only respawns count in
# `systemctl show -p NRestarts`). runsv keeps no such record (its control/u hook runs
# at every start, respawns included), so the lab puts one in front of runit's `sv`: every
# request that is not a look (status, check) is a line `<unix time> <cwd> <arguments>`,
# written before runit sees it. The time is the machine's real clock (LD_PRELOAD off),
# the clock of the engine's events.log, also on a host whose SSH sessions have an offset.
SV_RECORDER = f"""#!/bin/sh
case "$1" in
  s|status|check) ;;
  *) printf '%s %s %s\\n' "$(LD_PRELOAD= date +%s.%N)" "$PWD" "$*" \\
       >> {SV_REQUESTS_LOG} 2>/dev/null ;;
esac
exec /usr/bin/sv "$@"
"""


def install_sv_recorder(host_dir: Path) -> None:
    """From now on, requests to runit on this host are recorded (SV_RECORDER). Opt-in: each
    `sv status` then costs a shell's start more, ~1 ms, and a restart's script looks every
    0.05 s while the engine starts."""
    write(host_dir / "bin" / "sv", SV_RECORDER, 0o755)


def apiserver_args(spec: HostSpec, distro: str, api: dict[str, object]) -> list[str]:
    tls = f"/var/lib/rancher/{distro}/server/tls"
    args = ["--listen", f"0.0.0.0:{API_PORT}", "--token", str(api["token"]),
            "--upstream", str(api["api"]),
            "--tls-cert", f"{tls}/serving-kube-apiserver.crt",
            "--tls-key", f"{tls}/serving-kube-apiserver.key",
            "--client-ca", f"{tls}/client-ca.crt",
            "--apiserver-args", f"/var/lib/rancher/{distro}/lab-apiserver-args.json",
            "--timing-file", f"/var/lib/rancher/{distro}/lab-timing.json",
            "--engine-state", f"/var/lib/rancher/{distro}/lab-engine.json",
            "--node-name", spec.node_name(),
            # Every API server runs the node lifecycle controller on its own cache: with
            # the datastore's grace period.
            "--stale-after", f"{float(api.get('stale_after', 0)):g}"]  # type: ignore[arg-type]
    if distro == "rke2":
        # The static pod: its logs as the kubelet keeps them, its start as the container
        # runtime records it (engine_mirror.py).
        args += ["--pod-log-dir", f"/var/log/pods/kube-system_kube-apiserver-"
                 f"{spec.node_name()}_lab/kube-apiserver",
                 "--container-state", f"/var/lib/rancher/{distro}/agent/"
                 "lab-apiserver-container.json",
                 "--manifest", f"/var/lib/rancher/{distro}/agent/pod-manifests/"
                 "kube-apiserver.yaml"]
    return args


def _add_controller_api(host_dir: Path, spec: HostSpec, distro: str, address: str,
                        api: dict[str, object], pki: Path,
                        etcd: dict[str, str] | None = None) -> None:
    """Certificates, and the API server: rke2's static pod (a runit service the engine
    starts, left `down` until then), or k3s's (inside the engine process)."""
    from .pki import controller_tls  # cryptography: only labs with an API need it

    tls = host_dir / "rancher-var" / distro / "server" / "tls"
    controller_tls(tls, pki, spec.name, address, spec.tls_sans())
    for name in API_PROGRAMS:
        install_program(HERE / name, host_dir / "bin" / name)
    api["tls_dir"] = f"/var/lib/rancher/{distro}/server/tls"
    args = apiserver_args(spec, distro, api)
    if etcd is not None:
        args += _add_etcd(host_dir, spec, distro, address, pki, etcd)
    api["apiserver_args"] = args
    if distro == "rke2":
        service = host_dir / "etc.upper" / "service" / "kube-apiserver"
        # Only a running kubelet (re)starts a static pod: a restart runsv had scheduled
        # before the engine stopped must not start the API server after it.
        engine = f"/etc/service/{engine_service(distro, 'controller')}"
        write(service / "run", f"#!/bin/sh\nsv status {engine} | grep -q '^run:' || "
              "{ sv down .; exit 0; }\n" + _data_dir_line(distro) +
              "exec /usr/bin/python3 /usr/local/bin/kubeapi.py "
              + _relocatable(" ".join(args), distro) + " 2>&1\n", 0o755)
        # Only a running kubelet restarts a static pod that died: with the engine stopped,
        # a crashed API server stays down (a running one keeps running).
        write(service / "finish", f"#!/bin/sh\nsv status /etc/service/"
              f"{engine_service(distro, 'controller')} | grep -q '^run:' || sv down .\n",
              0o755)
        write(service / "down", "")


def _data_dir_line(distro: str) -> str:
    """A static pod's run script: the engine's data dir as its last start found it."""
    default = f"/var/lib/rancher/{distro}"
    return f"D=$(cat {default}/{DATA_DIR_FILE} 2>/dev/null) || D={default}\n"


def _relocatable(command: str, distro: str) -> str:
    """Paths in the data dir (server/, agent/), through the run script's $D
    (_data_dir_line); the lab's own lab-* files stay where they are."""
    for part in ("server", "agent"):
        command = command.replace(f"/var/lib/rancher/{distro}/{part}/", f'"$D"/{part}/')
    return command


def set_engine_version(host_dir: Path, distro: str, version: str) -> None:
    write(host_dir / "bin" / distro, engine_wrapper(distro, version), 0o755)


def set_sshd_config(host_dir: Path, address: str, clock_offset: int) -> None:
    write(host_dir / "etc.upper" / "ssh" / "sshd_config_lab", sshd_config(address, clock_offset))


def _authorize(home: Path, pubkey: str, uid: int, gid: int) -> None:
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    write(ssh / "authorized_keys", pubkey, 0o600)
    for path in (home, ssh, ssh / "authorized_keys"):
        os.chown(path, uid, gid)


def _add_user(host_dir: Path, spec: HostSpec, uid: int, pubkey: str) -> None:
    etc = host_dir / "etc.upper"
    user = spec.user
    for name, line, mode in (
        ("passwd", f"{user}:x:{uid}:{uid}::/home/{user}:/bin/bash\n", 0o644),
        ("group", f"{user}:x:{uid}:\n", 0o644),
        ("shadow", f"{user}:*:19000:0:99999:7:::\n", 0o640),
    ):
        original = Path("/etc", name).read_text()
        write(etc / name, original + line, mode)
        shutil.copystat(Path("/etc", name), etc / name)
        stat = Path("/etc", name).stat()
        os.chown(etc / name, stat.st_uid, stat.st_gid)
    if spec.sudo:
        write(etc / "sudoers.d" / f"lab-{user}", f"{user} ALL=(ALL) NOPASSWD:ALL\n", 0o440)
    home = host_dir / "home" / user
    home.mkdir(parents=True, exist_ok=True)
    _authorize(home, pubkey, uid, uid)


def add_datastore(host_dir: Path, token: str, stale_after: float, members: list[str],
                  pki: Path) -> None:
    """The lab's own view of its cluster (a runit service, independent of the engine): what
    the tests and the kubelets read and write, and where API faults are set. With etcd
    `members` (their addresses) it keeps nothing itself: the objects are in etcd, which it
    reads and writes as a client of the first member that answers, with a client
    certificate of its own. Without (an external datastore), it holds the objects."""
    for name in API_PROGRAMS:
        install_program(HERE / name, host_dir / "bin" / name)
    flags = ""
    if members:
        from .pki import etcd_cas, issue

        server_ca, _ = etcd_cas(pki)
        tls = host_dir / "etc.upper" / "lab-datastore"
        tls.mkdir(parents=True, exist_ok=True)
        (tls / "server-ca.crt").write_bytes(server_ca.cert_pem)
        issue(server_ca, "lab-datastore", client=True).save(tls, "etcd-client")
        urls = ",".join(f"https://{a}:{ETCD_CLIENT_PORT}" for a in members)
        flags = (f" --etcd-servers {urls} --etcd-cafile /etc/lab-datastore/server-ca.crt"
                 " --etcd-certfile /etc/lab-datastore/etcd-client.crt"
                 " --etcd-keyfile /etc/lab-datastore/etcd-client.key")
    write(host_dir / "etc.upper" / "service" / "lab-datastore" / "run",
          f"#!/bin/sh\nexec /usr/bin/python3 /usr/local/bin/kubeapi.py --listen "
          f"0.0.0.0:{DATASTORE_PORT} --token {token} --stale-after {stale_after:g}{flags}"
          " 2>&1\n", 0o755)


def _add_etcd(host_dir: Path, spec: HostSpec, distro: str, address: str, pki: Path,
              etcd: dict[str, str]) -> list[str]:
    """The controller's etcd member: Debian's etcd 3.4 under runit, laid out and flagged
    as k3s (pkg/etcd/etcd.go, cluster() and its embed config) and rke2 (its etcd static
    pod, pkg/podexecutor/staticpod.go) run theirs: data in server/db/etcd, clients on
    127.0.0.1 and the node address over TLS with client certificates, peers on the node
    address. Started by the engine (engine.py); returns the API server's etcd flags.
    rke2's member is a static pod: it outlives an engine stop and, with the engine
    stopped, a member that dies stays down (only a running kubelet restarts it). k3s's is
    inside the engine: the engine stops it (and its service's `finish`, for a crash)."""
    from .pki import etcd_tls

    data = f"/var/lib/rancher/{distro}"
    tls = f"{data}/server/tls/etcd"
    etcd_tls(host_dir / "rancher-var" / distro / "server" / "tls" / "etcd", pki, spec.name,
             address)
    engine = f"/etc/service/{engine_service(distro, 'controller')}"
    flags = [
        "--name", etcd["name"], "--data-dir", f"{data}/server/db/etcd",
        "--listen-client-urls", f"https://127.0.0.1:{ETCD_CLIENT_PORT},"
        f"https://{address}:{ETCD_CLIENT_PORT}",
        "--advertise-client-urls", f"https://{address}:{ETCD_CLIENT_PORT}",
        "--listen-peer-urls", f"https://{address}:{ETCD_PEER_PORT}",
        "--initial-advertise-peer-urls", f"https://{address}:{ETCD_PEER_PORT}",
        "--initial-cluster", etcd["cluster"], "--initial-cluster-state", "new",
        "--initial-cluster-token", etcd["token"],
        "--cert-file", f"{tls}/server-client.crt", "--key-file", f"{tls}/server-client.key",
        "--trusted-ca-file", f"{tls}/server-ca.crt", "--client-cert-auth",
        "--peer-cert-file", f"{tls}/peer-server-client.crt",
        "--peer-key-file", f"{tls}/peer-server-client.key",
        "--peer-trusted-ca-file", f"{tls}/peer-ca.crt", "--peer-client-cert-auth",
        # The engines' own timing, not etcd's defaults (100 ms / 1 s): k3s sets a 500 ms
        # heartbeat and a 5 s election timeout (pkg/etcd/etcd.go, cluster():
        # HeartbeatInterval 500, ElectionTimeout 5000), and rke2's etcd pod runs with that
        # same config (pkg/podexecutor/staticpod.go, ETCD(): `--config-file` written from
        # k3s's ETCDConfig). A leader lost without handing over leaves the cluster
        # leaderless for 5-10 s, not 1-2 s: a lab with etcd's defaults hid that, for a few
        # per cent of the suite's time (tests/bench/FINDINGS.md).
        # Pre-vote on, as the engines' etcd 3.5 has it by default (etcd CHANGELOG-3.5,
        # v3.5.0: "Turned on --pre-vote by default", etcd-io/etcd#12770; Debian's 3.4 has
        # it off): a member back from a restart or a pause that has not heard the leader
        # yet asks before it campaigns, and does not take a healthy leader down.
        "--pre-vote", "--heartbeat-interval", "500", "--election-timeout", "5000",
        "--logger", "zap", "--log-level", "warn",
    ]
    service = host_dir / "etc.upper" / "service" / ETCD_SERVICE
    write(service / "run", f"#!/bin/sh\nsv status {engine} | grep -q '^run:' || "
          "{ sv down .; exit 0; }\n" + _data_dir_line(distro) + "exec /usr/bin/etcd "
          + _relocatable(" ".join(flags), distro) + " 2>&1\n", 0o755)
    write(service / "log" / "run", f"#!/bin/sh\nmkdir -p /var/log/{ETCD_SERVICE}\n"
          f"exec svlogd -tt /var/log/{ETCD_SERVICE}\n", 0o755)
    if distro == "rke2":
        write(service / "finish", f"#!/bin/sh\nsv status {engine} | grep -q '^run:' || "
              "sv down .\n", 0o755)
    write(service / "down", "")
    return ["--etcd-servers", f"https://127.0.0.1:{ETCD_CLIENT_PORT}",
            "--etcd-cafile", f"{tls}/server-ca.crt", "--etcd-certfile", f"{tls}/client.crt",
            "--etcd-keyfile", f"{tls}/client.key"]
