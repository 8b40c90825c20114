"""Where a secret file may be read from.

A secret read from a file goes to every host (registries.yaml) and from there, by the
engine, to a registry. A one-line config edit that points a secret at cargoship's own SSH
key would hand that key to whoever runs the registry, and the plan could only say
`"***" -> "*** (changed)"`. So, unless the secret says `allowAnyPath: true` beside
`fromFile` (a person meant it, and the plan shows it), a secret file must lie inside the
cluster config's own directory, in no `.ssh` directory, and must not be a file the config
names for another use (an SSH key, the local kubeconfig).

Checked on the path as written and on the file it resolves to (a link in the config's
directory to ~/.ssh/id_ed25519 is the key), before the file is read at all.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

ALLOW_KEY = "allowAnyPath"  # the opt-in, as the cluster config spells it


def refusal(path: Path, *, config_dir: Path | None,
            named: Mapping[Path, str]) -> str | None:
    """Why `path` (absolute) may not be a secret file, as words that follow its path
    ("is the SSH key of ..."); None when it may be. `config_dir`: the directory of the
    cluster config (None: not known, as at apply: that rule is then left out). `named`:
    the files the config names for another use, each with what it is."""
    real = Path(os.path.realpath(path))
    for other, what in named.items():
        if real == Path(os.path.realpath(other)):
            return f"is the {what}"
    if ".ssh" in path.parts or ".ssh" in real.parts:
        return "is inside a .ssh directory, where SSH keys are kept"
    if config_dir is not None:
        home = Path(os.path.realpath(config_dir))
        if not real.is_relative_to(home):
            return f"is outside the directory of the cluster config ({config_dir})"
    return None


def advice() -> str:
    """What to do about a refusal: said once, the same way at load and at apply."""
    return (f"refused, so that no plan sends it to the hosts and on to a registry; if "
            f"that file really holds this secret, set {ALLOW_KEY}: true beside fromFile")
