"""How the stand-in engine finds and reads its configuration, the way rke2 and k3s do.

The engine does not merge a dictionary: it turns its config files into command-line flags
and parses those with the rest of its command line (k3s pkg/configfilearg/parser.go,
Parser.Parse and readConfigFile; rke2 runs the same code through its copy of k3s's flags,
rke2 pkg/cli/cmds/k3sopts.go). The lab does the same, in these steps:

* Where the config is: `$<PROGRAM>_CONFIG_FILE` (K3S_CONFIG_FILE, RKE2_CONFIG_FILE), else
  `--config`/`-c` on the command line, else /etc/rancher/<distro>/config.yaml
  (findConfigFileFlag). Its drop-ins are in `<that path>.d`: every entry that is not a
  directory and whose name ends in `.yaml` or `.yml`, any case (util.HasSuffixI), in the
  order os.ReadDir gives, which is by name, byte order (dotDFiles). A missing config file
  with drop-ins is fine; neither is fine too (no settings).
* Files in that order; each key's first appearance fixes its place; a key written with a
  `+` suffix appends to the value earlier files gave it (a scalar counts as a one-item
  list), any other replaces it. Each key then becomes `--key=value`, one per list item.
* Those flags go right after the subcommand, before the command line's own flags, so a
  flag on the command line (the unit's ExecStart) wins over the files for a single-valued
  setting and adds to them for a list (urfave/cli: the last value of a string flag wins,
  a string-slice flag collects every value).
* A flag with an environment variable (node-name: `<PROGRAM>_NODE_NAME`; on rke2 also
  `RKE2_AUDIT_POLICY_FILE`, `RKE2_POD_SECURITY_ADMISSION_CONFIG_FILE`, rke2
  pkg/cli/cmds/root.go) takes the variable only when no flag (file or command line) set it.
  The environment is the unit's: systemd's EnvironmentFile= lines, which the lab's runit
  `run` script reproduces (hostfs.ENV_FILES).
* data-dir (default /var/lib/rancher/<distro>) holds server/manifests; private-registry
  (default /etc/rancher/<distro>/registries.yaml) is the registries file.
* The node name: node-name, else the hostname, lowercased either way; `with-node-id` adds
  a dash and a random id kept in the data directory (stable across restarts).
* The kube-apiserver's own arguments (apiserver_args) and its config files, which the real
  kube-apiserver refuses to start with when they are invalid.

Runs on the lab host's system Python (python3-yaml); imports nothing from the repository.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
from pathlib import Path
from typing import Any

import yaml

AUDIT_LEVELS = ("None", "Metadata", "Request", "RequestResponse")
PROGRAMS = {"k3s": "K3S", "rke2": "RKE2"}
# String-slice flags among those the lab acts on (k3s pkg/cli/cmds/server.go, agent.go):
# every value is kept. Any other flag is a string (or bool) flag: the last value wins.
SLICE_FLAGS = frozenset({
    "kube-apiserver-arg", "kube-controller-manager-arg", "kube-scheduler-arg", "kubelet-arg",
    "kube-proxy-arg", "etcd-arg", "node-label", "node-taint", "tls-san", "node-ip",
    "node-external-ip", "disable", "cluster-cidr", "service-cidr"})


def environment_flags(distro: str) -> dict[str, str]:
    """flag -> the environment variable the engine reads it from (when no flag sets it)."""
    program = PROGRAMS[distro]
    flags = {"node-name": f"{program}_NODE_NAME", "token": f"{program}_TOKEN",
             "server": f"{program}_URL"}
    if distro == "rke2":
        flags["audit-policy-file"] = "RKE2_AUDIT_POLICY_FILE"
        flags["pod-security-admission-config-file"] = "RKE2_POD_SECURITY_ADMISSION_CONFIG_FILE"
    return flags


class ConfigError(Exception):
    """A file the engine (or its API server) cannot start with; the message is one line."""


def load_mapping(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping; missing or empty means no settings."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"failed to read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigError(f"failed to parse {path}: {detail}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"failed to parse {path}: expected a mapping, "
                          f"got {type(data).__name__}")
    return data


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _text(value: Any) -> str:
    # convert.ToString: YAML's true is "true", not Python's "True".
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def config_location(distro: str, argv: list[str], environ: dict[str, str]) -> Path:
    """findConfigFileFlag: the environment variable, else --config/-c, else the default."""
    from_env = environ.get(f"{PROGRAMS[distro]}_CONFIG_FILE", "")
    if from_env:
        return Path(from_env)
    for i, arg in enumerate(argv):
        for name in ("--config", "-c"):
            if arg == name and i + 1 < len(argv):
                return Path(argv[i + 1])
            if arg.startswith(name + "="):
                return Path(arg[len(name) + 1:])
    return Path(f"/etc/rancher/{distro}/config.yaml")


def config_files(config_path: Path) -> list[Path]:
    """The config file (when it exists), then its drop-ins (dotDFiles)."""
    dropin_dir = Path(str(config_path) + ".d")
    try:
        names = sorted(os.listdir(dropin_dir), key=os.fsencode)
    except OSError:
        names = []
    dropins = [dropin_dir / name for name in names
               if not (dropin_dir / name).is_dir()
               and name.lower().endswith((".yaml", ".yml"))]
    return ([config_path] if config_path.exists() else []) + dropins


def config_flags(config_path: Path) -> list[str]:
    """readConfigFile: the files' settings as `--key=value` flags, in first-seen key order."""
    order: list[str] = []
    values: dict[str, Any] = {}
    for path in config_files(config_path):
        for raw_key, value in load_mapping(path).items():
            key = _text(raw_key)
            append = key.endswith("+")
            key = key.rstrip("+") if append else key
            if key not in values and key not in order:
                order.append(key)
            if append and key in values:
                values[key] = _as_list(values[key]) + _as_list(value)
            else:
                values[key] = value
    flags = []
    for key in order:
        dash = "-" if len(key) == 1 else "--"
        value = values[key]
        items = value if isinstance(value, list) else [value]
        flags += [f"{dash}{key}={_text(item)}" for item in items]
    return flags


def parse_flags(flags: list[str]) -> dict[str, Any]:
    """What the command's flag parser keeps: slice flags collect, others the last value."""
    settings: dict[str, Any] = {}
    for i, arg in enumerate(flags):
        if not arg.startswith("-"):
            continue
        name, has_value, value = arg.lstrip("-").partition("=")
        if not has_value:  # `--flag value` or a bare bool flag
            following = flags[i + 1] if i + 1 < len(flags) else ""
            value = following if following and not following.startswith("-") else "true"
        if name in SLICE_FLAGS:
            settings.setdefault(name, []).append(value)
        else:
            settings[name] = value
    return settings


def effective_settings(distro: str, argv: list[str],
                       environ: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """The config file's path and every setting the engine runs with: files, then the
    command line, then the environment for what neither set."""
    path = config_location(distro, argv, environ)
    settings = parse_flags(config_flags(path) + argv)
    settings.pop("config", None)
    settings.pop("c", None)
    for flag, variable in environment_flags(distro).items():
        if flag not in settings and environ.get(variable):
            settings[flag] = environ[variable]
    return path, settings


def data_dir(distro: str, settings: dict[str, Any]) -> Path:
    return Path(settings.get("data-dir") or settings.get("d") or f"/var/lib/rancher/{distro}")


def registries_path(distro: str, settings: dict[str, Any]) -> Path:
    return Path(settings.get("private-registry") or f"/etc/rancher/{distro}/registries.yaml")


def node_name(config: dict[str, Any], data_dir: Path) -> str:
    # node-name or the hostname, lowercased either way "to comply with kubernetes
    # constraint" (k3s pkg/agent/config/config.go, getHostnameAndIPs; rke2 runs k3s's).
    name = str(config.get("node-name") or socket.gethostname()).lower()
    if str(config.get("with-node-id")).lower() == "true":
        id_file = data_dir / "lab-node-id"
        if not id_file.exists():
            id_file.parent.mkdir(parents=True, exist_ok=True)
            id_file.write_text(secrets.token_hex(4) + "\n")
        name = f"{name}-{id_file.read_text().strip()}"
    return name


def node_addresses(config: dict[str, Any], name: str) -> list[dict[str, str]]:
    """The node's status.addresses as the kubelet posts them: InternalIP is the engine's
    node-ip when set, else the address of the host's first global interface
    (kubernetes pkg/kubelet/nodestatus/setters.go NodeAddress: the --node-ip, else
    ChooseHostInterface in k8s.io/apimachinery/pkg/util/net/interface.go, the interface
    of the default route), then the Hostname."""
    ips = [str(ip).split(",")[0].strip() for ip in _as_list(config.get("node-ip"))]
    if not ips:
        found = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"],
                               capture_output=True, text=True, check=False).stdout.split()
        ips = [found[found.index("inet") + 1].split("/")[0]] if "inet" in found else []
    return [*({"type": "InternalIP", "address": ip} for ip in ips[:1]),
            {"type": "Hostname", "address": name}]


def node_labels(config: dict[str, Any]) -> dict[str, str]:
    labels = {}
    for item in _as_list(config.get("node-label")):
        key, _, value = str(item).partition("=")
        labels[key] = value
    return labels


def _engine_args(extra: list[str]) -> list[str]:
    """k3s pkg/util/args.go GetArgs, for a component without defaults of these flags: the
    flags sorted by name, repeated ones in the order given (`name+=` appends, `name-=`
    prepends to the values before it)."""
    values: dict[str, list[str]] = {}
    for item in extra:
        name, _, value = str(item).removeprefix("--").partition("=")
        clean = name.rstrip("+-")
        before = values.get(clean, [])
        values[clean] = [value, *before] if name.endswith("-") and not name.endswith("+") \
            else [*before, value]
    return [f"--{name}={value}" for name in sorted(values) for value in values[name]]


def apiserver_args(distro: str, settings: dict[str, Any]) -> list[str]:
    """The kube-apiserver's command line as the engine builds it. rke2 puts its own files
    first (pkg/executor/staticpod/staticpod.go, APIServer): --admission-control-config-file,
    --audit-policy-file and, unless kube-apiserver-arg gives one, --audit-log-path under
    the data dir; the user's kube-apiserver-arg come after them, so a value there wins."""
    args = _engine_args(_as_list(settings.get("kube-apiserver-arg")))
    if distro == "rke2":
        own = []
        if settings.get("pod-security-admission-config-file"):
            own.append("--admission-control-config-file="
                       + str(settings["pod-security-admission-config-file"]))
        if settings.get("audit-policy-file"):
            own.append(f"--audit-policy-file={settings['audit-policy-file']}")
            if not any(a.startswith("--audit-log-path=") for a in args):
                own.append(f"--audit-log-path={data_dir(distro, settings)}/server/logs/audit.log")
        args = own + args
    return args


def apiserver_files(args: list[str]) -> dict[str, str]:
    """The API server's config files: kind -> path, the last of each flag (pflag: the last
    value of a string flag wins)."""
    files: dict[str, str] = {}
    for arg in args:
        flag, _, value = arg.lstrip("-").partition("=")
        if flag == "audit-policy-file":
            files["audit"] = value
        elif flag == "admission-control-config-file":
            files["admission"] = value
        elif flag == "audit-log-path":
            files["audit-log"] = value
    return files


def check_apiserver_files(files: dict[str, str]) -> None:
    """What kube-apiserver checks at start-up; ConfigError says what it would log."""
    if "audit" in files:
        path = Path(files["audit"])
        policy = load_mapping(path)
        if policy.get("kind") != "Policy":
            raise ConfigError(f"loading audit policy file: {path}: expected kind Policy, "
                              f"got {policy.get('kind')!r}")
        # kubernetes apiserver/pkg/apis/audit/validation/validation.go, validatePolicyRule.
        for i, rule in enumerate(_as_list(policy.get("rules"))):
            level = rule.get("level") if isinstance(rule, dict) else None
            if level not in AUDIT_LEVELS:
                raise ConfigError(f"loading audit policy file: {path}: rules[{i}].level: "
                                  f"Unsupported value: {level!r}: supported values: "
                                  + ", ".join(f'"{v}"' for v in AUDIT_LEVELS))
            urls = rule.get("nonResourceURLs") or []
            if urls and (rule.get("resources") or rule.get("namespaces")):
                raise ConfigError(f"loading audit policy file: {path}: rules[{i}]."
                                  f"nonResourceURLs: Invalid value: {urls!r}: rules cannot "
                                  "apply to both regular resources and non-resource URLs")
    if "admission" in files:
        path = Path(files["admission"])
        admission = load_mapping(path)
        if admission.get("kind") != "AdmissionConfiguration":
            raise ConfigError(f"failed to read plugin config: {path}: expected kind "
                              f"AdmissionConfiguration, got {admission.get('kind')!r}")


def process_age() -> float:
    """Seconds since this process started (from /proc, 0 if unreadable): the stand-ins
    count their fixed start-up times from there, so their own Python start-up is inside
    them rather than added."""
    try:
        stat = Path("/proc/self/stat").read_text()
        started = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)
