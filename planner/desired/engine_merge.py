"""Whether what cargoship's config drop-in sets is what the engine will use, once it merges
config.yaml and every config.yaml.d file the way rke2 and k3s do (facts/engine_config.py).

A later file that sets the same scalar key, or a list key without the `+` suffix, wins over
the drop-in: the plan would say "audit policy on" while the engine ran without it.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ..facts.engine_config import EngineSettings, merge_layers


def overridden(layers: list[tuple[str, dict[str, Any]]], dropin_path: str,
               dropin: dict[str, Any], skip: frozenset[str] = frozenset()) -> list[str]:
    """One message per setting of the drop-in (but `skip`) that the merged config does not
    keep."""
    dropin_dir = posixpath.dirname(dropin_path)

    def order(item: tuple[str, dict[str, Any]]) -> tuple[int, bytes]:
        # The config file first, then its drop-ins in name order (byte order, os.ReadDir).
        return (posixpath.dirname(item[0]) == dropin_dir,
                posixpath.basename(item[0]).encode())

    ordered = sorted([*[(p, d) for p, d in layers if p != dropin_path], (dropin_path, dropin)],
                     key=order)
    merged = merge_layers([d for _, d in ordered])
    position = next(i for i, (p, _) in enumerate(ordered) if p == dropin_path)
    later = ordered[position + 1:]
    messages = []
    for key, value in dropin.items():
        base = key.removesuffix("+")
        if base in skip:
            continue
        final = merged.get(base)
        if key.endswith("+"):
            kept = all(item in (final if isinstance(final, list) else [final])
                       for item in value)
        else:
            kept = final == value
        if not kept:
            by = [p for p, d in later if base in d]
            messages.append(f"{', '.join(by) or 'a later file'} sets {base} after cargoship's "
                            f"{posixpath.basename(dropin_path)}, so the engine would not use "
                            f"what cargoship writes there (use {base}+ in that file to "
                            "append, or remove the setting)")
    return messages


# The API server flags cargoship's drop-in sets, by the setting that carries each on rke2
# (its own keys; k3s has only kube-apiserver-arg).
RKE2_KEYS = {"audit-policy-file": "audit-policy-file",
              "pod-security-admission-config-file": "admission-control-config-file"}


def our_apiserver_flags(distro: str, dropin: dict[str, Any]) -> dict[str, str]:
    """flag -> value: what the API server runs with from cargoship's drop-in."""
    if distro == "rke2":
        return {flag: str(dropin[key]) for key, flag in RKE2_KEYS.items() if key in dropin}
    flags = {}
    for item in dropin.get("kube-apiserver-arg+", []):
        flag, _, value = str(item).partition("=")
        flags[flag] = value
    return flags


def apiserver_overrides(settings: EngineSettings, distro: str, dropin_path: str,
                        dropin: dict[str, Any]) -> list[str]:
    """One message per setting outside cargoship's drop-in that gives the API server another
    audit policy, admission config or audit log than the drop-in's. On rke2 the engine puts
    its own --audit-policy-file and --admission-control-config-file first and the user's
    kube-apiserver-arg after them (rke2 pkg/executor/staticpod/staticpod.go, APIServer); on
    k3s every kube-apiserver-arg reaches the API server in order (k3s pkg/util/args.go,
    GetArgs); the API server takes the last value of a flag. Wherever the other value sits,
    one of the two is silently dropped."""
    ours = our_apiserver_flags(distro, dropin)
    messages = []
    for arg in settings.apiserver_args:
        if arg.where.rsplit(":", 1)[0] == dropin_path:
            continue
        flag, _, value = arg.value.lstrip("-").partition("=")
        flag = flag.rstrip("+-")
        if flag in ours and value != ours[flag]:
            messages.append(f"{arg.where}: kube-apiserver-arg sets {flag}={value}, but "
                            f"cluster.yaml asks for {ours[flag]} (cargoship's "
                            f"{posixpath.basename(dropin_path)}): the API server takes only "
                            "one; remove that setting, or make it the same path")
    if distro == "rke2":  # its own keys, from any file, the command line or the environment
        for key, value, where in settings.occurrences:
            flag = RKE2_KEYS.get(key.removesuffix("+"))
            if flag is None or flag not in ours or str(value) == ours[flag] or \
                    where.rsplit(":", 1)[0] == dropin_path:
                continue
            messages.append(f"{where}: sets {key.removesuffix('+')}={value}, but cluster.yaml "
                            f"asks for {ours[flag]} (cargoship's "
                            f"{posixpath.basename(dropin_path)}): the engine would use only "
                            "one; remove that setting, or make it the same path")
    return messages
