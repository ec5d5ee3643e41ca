"""Charts of a fleet plan, one question each (``matplotlib.figure.Figure`` objects, never pyplot).

Every function takes the dict of :meth:`kvplan.fleet.plan.FleetPlan.to_dict` and only draws it.
"""

from __future__ import annotations

from collections.abc import Mapping

from matplotlib.figure import Figure

from kvplan.units import GiB, format_size


def classes_chart(plan: Mapping) -> Figure:
    """Which classes are there and how big are they: clean hosts per class, and the excluded hosts."""
    names = [c["class"] for c in plan["classes"]] + ["excluded"]
    counts = [c["clean_hosts"] for c in plan["classes"]] + [len(plan["excluded"])]
    colours = ["tab:blue" if c["approved"] else "tab:orange" for c in plan["classes"]] + ["tab:grey"]
    figure = Figure(figsize=(8, 0.5 + 0.45 * len(names)))
    axes = figure.subplots()
    axes.barh(names[::-1], counts[::-1], color=colours[::-1])
    for y, count in enumerate(counts[::-1]):
        axes.text(count, y, f" {count}", va="center")
    axes.set_xlabel("hosts (blue: approved class, orange: not approved, grey: excluded)")
    axes.set_title(
        f"Host classes and their size: {len(plan['classes'])} class(es), {len(plan['excluded'])} host(s) excluded"
    )
    figure.tight_layout()
    return figure


def host_budgets_chart(plan: Mapping) -> Figure:
    """Per-host budgets of each class, the class value as a line, limiting host and outliers marked."""
    classes = plan["classes"]
    figure = Figure(figsize=(9, 2.2 * len(classes) + 0.5))
    axes_list = figure.subplots(len(classes), 1, squeeze=False)[:, 0]
    for axes, c in zip(axes_list, classes):
        hosts = sorted(c["host_budgets"], key=lambda host: c["host_budgets"][host])
        values = [c["host_budgets"][host] / GiB for host in hosts]
        outliers = {o["host"] for o in c["outliers"]}
        colours = [
            "tab:red" if h == c["limiting_host"] else "tab:orange" if h in outliers else "tab:blue"
            for h in hosts
        ]
        axes.bar(range(len(hosts)), values, color=colours)
        axes.axhline(c["uniform_budget_bytes"] / GiB, color="black", linestyle="--", linewidth=1)
        axes.set_ylim(min(values) * 0.97, max(values) * 1.01)
        axes.set_xticks([])
        axes.set_ylabel("GiB per GPU")
        axes.set_title(
            f"{c['class']}: class value {format_size(c['uniform_budget_bytes'])} (dashed); red: "
            f"limiting host {c['limiting_host']}, orange: outliers",
            fontsize=9,
        )
    figure.tight_layout()
    return figure


def split_gain_chart(plan: Mapping) -> Figure:
    """What splitting the weak hosts off buys: tokens per class now, split, and with the outliers fixed."""
    classes = [c for c in plan["classes"] if c["split"].get("gain_split_tokens")]
    figure = Figure(figsize=(9, 1.6 + 0.9 * max(1, len(classes))))
    axes = figure.subplots()
    if not classes:
        axes.text(0.5, 0.5, "no class has outliers below the split bound", ha="center", va="center")
        axes.set_axis_off()
        axes.set_title("What splitting the weak hosts off buys: nothing (no class below the split bound)")
        return figure
    for y, c in enumerate(classes):
        now = c["capacity"][-1]["tokens"] * c["clean_hosts"] if c["capacity"] else 0
        split, fixed = now + c["split"]["gain_split_tokens"], now + c["split"]["gain_fixed_tokens"]
        labels = [
            "now",
            f"outliers split off: +{c['split']['gain_split_tokens']:,} tokens",
            f"outliers fixed: +{c['split']['gain_fixed_tokens']:,} tokens",
        ]
        for offset, value, colour, label in zip(
            (0.25, 0, -0.25), (now, split, fixed), ("tab:grey", "tab:blue", "tab:green"), labels
        ):
            axes.barh(y + offset, value / 1e6, height=0.25, color=colour, label=label)
    axes.set_yticks(range(len(classes)), [c["class"].replace(" / ", "\n") for c in classes], fontsize=8)
    axes.set_xlabel("KV tokens over the class [millions]")
    axes.legend(loc="lower left", fontsize=8)
    split = sum(c["split"]["gain_split_tokens"] for c in classes)
    fixed = sum(c["split"]["gain_fixed_tokens"] or 0 for c in classes)
    axes.set_title(f"What splitting the weak hosts off buys: +{split:,} tokens (+{fixed:,} with them fixed)")
    figure.tight_layout()
    return figure


def waves_chart(plan: Mapping) -> Figure:
    """The rollout waves in order: hosts per wave, canaries first, each with its class's flag value."""
    waves = plan["waves"]
    figure = Figure(figsize=(8, 0.6 + 0.45 * max(1, len(waves))))
    axes = figure.subplots()
    labels = [f"wave {w['wave']} {w['kind']}: {w['class']}" for w in waves]
    counts = [len(w["hosts"]) for w in waves]
    axes.barh(
        labels[::-1],
        counts[::-1],
        color=["tab:orange" if w["kind"] == "canary" else "tab:blue" for w in waves][::-1],
    )
    for y, wave in enumerate(waves[::-1]):
        axes.text(len(wave["hosts"]), y, f" {wave['flag']}", va="center", fontsize=8)
    axes.set_xlabel("hosts (orange: canaries, gated before the class's wave)")
    axes.set_title(f"Rollout waves: {len(waves)} wave(s), every class's canaries first")
    figure.tight_layout()
    return figure
