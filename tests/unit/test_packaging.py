"""A non-editable install into a fresh venv gives a working `cargoship` that finds its schemas."""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_non_editable_install_finds_its_schemas(tmp_path: Path) -> None:
    # Copy the source so the build can't read the checkout's files at run time by accident.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "build", "__pycache__", ".mypy_cache", ".pytest_cache"))
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    # The dependencies come from this interpreter's site-packages (no downloads); a path
    # listed in a .pth file is not itself scanned for .pth files, so the checkout's editable
    # install does not come along with them.
    pth = next(env_dir.glob("lib/python*/site-packages")) / "_deps.pth"
    pth.write_text("\n".join(site.getsitepackages()) + "\n")
    pip = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(src)]
    subprocess.run(pip, check=True, capture_output=True, cwd=tmp_path)
    shutil.rmtree(src)
    config = tmp_path / "cluster.yaml"
    config.write_text(
        "apiVersion: cargoship/v1\nkind: Cluster\nmetadata: {name: pkg}\n"
        "spec:\n  engine: {distro: k3s, version: v1.30.4+k3s1}\n"
        "  hosts: [{role: controller, ssh: {address: 10.9.9.9}}]\n")
    cli = env_dir / "bin" / "cargoship"
    result = subprocess.run([str(cli), "validate", "-c", str(config)], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "valid (1 host(s), k3s v1.30.4+k3s1)" in result.stdout
    location = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", "import schemas; print(schemas.__file__)"],
        capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(env_dir) in location, f"schemas imported from {location}, not the install"
    # The shell hosts run is package data: every file of the checkout is in the install.
    shipped = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("*/**/sh/*.sh"))
    assert shipped
    check = ("import sys; from planner.hosts.shell import load\n"
             "for name in sys.argv[1:]:\n"
             "    package, _, file = name.rpartition('/sh/')\n"
             "    assert load(package.replace('/', '.'), file), name\n"
             "import executor; print(executor.__file__)")
    found = subprocess.run([str(env_dir / "bin" / "python"), "-c", check, *shipped],
                           capture_output=True, text=True, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert str(env_dir) in found.stdout
    assert sys.version_info >= (3, 11)
