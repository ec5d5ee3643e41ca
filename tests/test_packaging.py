"""The two install routes agree, and the README's commands are the ones the Makefile and CI run."""

import re
from importlib.metadata import metadata, requires
from pathlib import Path

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
