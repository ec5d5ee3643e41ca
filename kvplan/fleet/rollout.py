"""The rollout plan: waves by class, a canary set of every class first, each with its flag and gate command.

Canaries of a class are its limiting host (the most at risk at the class value) and the hosts nearest
the median budget, up to ``canaries`` hosts; the class's remaining hosts follow in one wave. Classes go
smallest first (the least capacity at stake while the procedure is proven). Each wave names the flag to
launch with and the ``kvplan fleet gate`` command that decides whether to go on: it names
:data:`CANARY_FLEET`, the logs of the wave's new boots at that flag, never the planning fleet (the gate
refuses the approval's own inputs as a canary).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

#: Canary hosts per class by default.
CANARIES = 2
#: What the printed gate command names for the canaries' logs: the wave's boots at the class value.
CANARY_FLEET = "CANARY_FLEET"


def canary_hosts(host_budgets: Mapping[str, int], limiting_host: str, canaries: int = CANARIES) -> list[str]:
    """The limiting host, then the hosts nearest the median budget, ``canaries`` in all.

    >>> canary_hosts({"a": 10, "b": 12, "c": 13, "d": 20}, "a", 2)
    ['a', 'c']
    """
    ordered = sorted(host_budgets, key=lambda host: (host_budgets[host], host))
    middle = host_budgets[ordered[len(ordered) // 2]]
    rest = sorted(
        (h for h in ordered if h != limiting_host), key=lambda h: (abs(host_budgets[h] - middle), h)
    )
    return [limiting_host, *rest][: max(1, canaries)]


def gate_command(bundle: str | None, hosts: Sequence[str]) -> str:
    """The ``kvplan fleet gate`` command for ``hosts`` against ``bundle``, on the canaries' new logs
    (:data:`CANARY_FLEET`); every name shell-quoted (host names come from a manifest).

    >>> gate_command("ev/b1", ["h1", "h2"])
    'kvplan fleet gate --approved ev/b1 CANARY_FLEET --hosts h1,h2'
    >>> gate_command("ev/b1", ["h1;rm -rf ~"])
    "kvplan fleet gate --approved ev/b1 CANARY_FLEET --hosts 'h1;rm -rf ~'"
    """
    approved = bundle or "BUNDLE"
    return (
        f"kvplan fleet gate --approved {shlex.quote(approved)} {CANARY_FLEET} "
        f"--hosts {shlex.quote(','.join(hosts))}"
    )


def rollout_waves(classes: Sequence[Mapping], canaries: int = CANARIES) -> list[dict]:
    """Waves for approved ``classes`` (dicts with ``class``, ``flag``, ``bundle``, ``limiting_host``,
    ``host_budgets``): every class's canaries first, then each class's other hosts, smallest class first."""
    ordered = sorted(classes, key=lambda item: (len(item["host_budgets"]), item["class"]))
    waves: list[dict] = []
    rest = []
    for item in ordered:
        chosen = canary_hosts(item["host_budgets"], item["limiting_host"], canaries)
        waves.append(_wave(len(waves) + 1, "canary", item, chosen))
        rest.append((item, [host for host in item["host_budgets"] if host not in chosen]))
    for item, hosts in rest:
        if hosts:
            waves.append(_wave(len(waves) + 1, "class", item, hosts))
    return waves


def _wave(number: int, kind: str, item: Mapping, hosts: list[str]) -> dict:
    return {
        "wave": number,
        "kind": kind,
        "class": item["class"],
        "hosts": hosts,
        "flag": item["flag"],
        "gate": gate_command(item["bundle"], hosts),
        "stop_when": "any rank's adjusted budget is below the class value (free-memory floor) or the "
        "tokens fall below the admission plan: the gate exits 1",
    }
