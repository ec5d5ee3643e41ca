"""The two install routes agree, and the README's commands are the ones the Makefile and CI run."""

import os
import re
import shutil
import subprocess
from importlib.metadata import metadata, requires
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_lists_the_runtime_and_notebook_dependencies():
    # the installed metadata is pyproject.toml's [project] table; extras are marked "; extra == ..."
    # environment.yml keeps the design card's full set: the runtime, the notebooks ([lab]) and nbval.
    deps = requires("kvplan-kit")
    runtime = {_name(dep) for dep in deps if "extra ==" not in dep}
    runtime |= {_name(dep) for dep in deps if 'extra == "lab"' in dep} | {"nbval"}
    text = (ROOT / "environment.yml").read_text()
    conda_block = text.split("dependencies:", 1)[1]
    conda = {
        _name(line.strip()[2:])
        for line in conda_block.splitlines()
        if line.startswith("  - ") and not line.strip().endswith(":")
    }
    assert runtime == conda - {"python", "pip"}


def test_distribution_name_differs_from_the_other_kvplan():
    assert metadata("kvplan-kit")["Name"] == "kvplan-kit"
    assert 'kvplan = "kvplan.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test:.*\bunit\b", makefile, re.M)
    assert "--doctest-modules kvplan" in makefile


def _make_system_deps(tmp_path, packages: str, uid: int) -> subprocess.CompletedProcess:
    """``make system-deps`` with ``DEBIAN_PACKAGES=packages``, as a user whose ``id -u`` prints ``uid``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (fake / "id").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "system-deps", f"DEBIAN_PACKAGES={packages}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="a Debian machine's dpkg-query")
def test_system_deps_says_the_one_line_install_when_not_root(tmp_path):  # issue 27
    # coreutils is always installed on Debian; the other name exists nowhere, so it is the one named
    done = _make_system_deps(tmp_path, "coreutils kvplan-no-such-package", uid=1000)
    assert done.returncode == 2
    assert done.stdout.strip() == (
        "error: missing Debian packages: kvplan-no-such-package; "
        "install them with: sudo apt-get install -y kvplan-no-such-package"
    )


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="a Debian machine's dpkg-query")
def test_system_deps_is_silent_when_everything_is_installed(tmp_path):  # issue 27
    done = _make_system_deps(tmp_path, "coreutils", uid=1000)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_test_and_demo_install_the_system_packages_and_ci_only_calls_make_test():  # issue 27
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: system-deps\b", makefile, re.M)
    assert re.search(r"^demo: system-deps\b", makefile, re.M)
    assert re.search(r"^DEBIAN_PACKAGES := .*\bchromium\b", makefile, re.M)
    ci = (ROOT / ".ci" / "run").read_text()
    assert "apt-get" not in ci and "MPLBACKEND=Agg" in ci


def test_demo_asks_for_no_test_only_package():  # issue 27: a demo needs no browser, so no root
    done = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "-n", "demo"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "for package in ;" in done.stdout and "chromium" not in done.stdout
