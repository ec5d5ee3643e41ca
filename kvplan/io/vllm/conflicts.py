"""Conflicting evidence about one rank: the observation with the lowest room is kept, with a note naming each
(``docs/safety.md``: keeping the first or the last would let more evidence raise a budget)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kvplan.notes import Note


@dataclass
class Observation:
    """One rank's values as one process printed them: each one's (line, raw) and family, start, families since."""

    key: tuple | None
    values: dict = field(default_factory=dict)
    origin: dict = field(default_factory=dict)
    families: dict = field(default_factory=dict)
    start: int = 0
    printed: set = field(default_factory=set)


class RankObservations:
    """The observations of every rank of one boot, filled event by event."""

    def __init__(self) -> None:
        self._by_rank: dict[int, list[Observation]] = {}
        self._latest: dict[tuple, Observation] = {}

    def add(self, rank: int, key: tuple | None, family: str, values: Mapping, where: tuple) -> None:
        """Record one event's ``values`` (copied) of ``family`` printed by process ``key`` for ``rank``."""
        current = self._latest.get((rank, key))
        if current is None:
            current = self._start(rank, key, {}, {}, where)
        elif family in current.printed:  # only a family printed before can print a value again
            families, held = current.families, current.values
            for name, value in values.items():
                if families.get(name) == family and held.get(name) != value:  # printed again: a new one
                    current = self._start(rank, key, dict(held), dict(current.origin), where)
                    break
        current.printed.add(family)
        held, origin, families = current.values, current.origin, current.families
        for name, value in values.items():  # a loop: dict.update of a read-only mapping is 3× slower
            held[name], origin[name], families[name] = value, where, family

    def _start(self, rank: int, key: tuple | None, values: dict, origin: dict, where: tuple) -> Observation:
        current = Observation(key, values, origin, start=where[0] if isinstance(where[0], int) else 0)
        self._by_rank.setdefault(rank, []).append(current)
        self._latest[rank, key] = current
        return current

    def ranks(self) -> list[int]:
        return list(self._by_rank)

    def of(self, rank: int) -> list[Observation]:
        return self._by_rank.get(rank, [])


def completed(observations: list[Observation]) -> list[Observation]:
    """Each observation completed from its process's latest (issue 26), its own values kept."""
    latest = {item.key: item for item in observations}
    return [
        item
        if item is latest[item.key]
        else Observation(
            item.key,
            {**latest[item.key].values, **item.values},
            {**latest[item.key].origin, **item.origin},
            {**latest[item.key].families, **item.families},
            item.start,
            item.printed | latest[item.key].printed,
        )
        for item in observations
    ]


def agreed(observations: list[Observation], rooms: list[int | None]) -> Observation | None:
    """One observation for them all when they do not conflict (one process's with one room and free memory: the
    latest; several processes' with no field of two values: joined), else None."""
    if len({item.key for item in observations}) == 1:  # the room and the free memory decide (a gate's F_boot)
        same = len(set(rooms)) == 1 and len({_free(item) for item in observations}) == 1
        return observations[-1] if same else None
    values: dict = {}
    origin: dict = {}
    for item in observations:
        for name, value in item.values.items():
            if name in values and values[name] != value:
                return None
            values[name] = value
            origin.setdefault(name, item.origin.get(name))
    first = observations[0]
    return Observation(first.key, values, origin, start=first.start)


def safest(
    rank: int,
    observations: list[Observation],
    room_of: Callable[[dict, dict], int | None],
    source: str,
    boot: int,
) -> tuple[Observation, Note | None]:
    """The observation with the lowest room by ``room_of(values, origin)`` (then the least free memory at startup),
    and the note when several conflict."""
    if len(observations) == 1:
        return observations[0], None
    rooms = [room_of(dict(item.values), dict(item.origin)) for item in observations]
    merged = agreed(observations, rooms)
    if merged is not None:
        return merged, None
    shown = [
        (room, _free(observations[index]), index) for index, room in enumerate(rooms) if room is not None
    ]
    index = min(shown)[2] if shown else min(range(len(observations)), key=lambda i: _free(observations[i]))
    chosen = observations[index]
    listing = "; ".join(
        ("a process without prefix" if item.key is None else f"pid {item.key[0]}")
        + f" from {source}:{item.start}"
        + (f" shows room {room} B" if room is not None else " shows no room")
        for item, room in zip(observations, rooms)
    )
    kept = (
        f"the lowest room (then the least free memory) is kept ({source}:{chosen.start})"
        if shown
        else f"the least free memory is kept ({source}:{chosen.start})"
    )
    note = Note(
        f"{source}:{chosen.start}: boot {boot} rank {rank}: {len(observations)} observations of this "
        f"rank conflict ({listing}); {kept}. Two launches or processes wrote one file? Give each launch's "
        "log on its own.",
        code="conflicting-rank-evidence",
        file=source,
        line=chosen.start,
    )
    return chosen, note


def _free(observation: Observation) -> float:
    free = observation.values.get("init_free_bytes")
    return free if isinstance(free, int) else float("inf")


class TwoLaunches(ValueError):
    """Two launches' lines interleave in one boot and disagree on what was launched."""


def two_launches(conflicts: list, source: str) -> TwoLaunches:
    """The refusal of a boot whose identity fields were printed with two values."""
    column, (first, first_line), (second, second_line) = conflicts[0]
    others = "".join(f"; {c} {a!r} vs {b!r} (lines {la}, {lb})" for c, (a, la), (b, lb) in conflicts[1:])
    return TwoLaunches(
        f"{source}:{first_line}: two launches in one boot: {column} {first!r} at {source}:{first_line} vs "
        f"{second!r} at {source}:{second_line}{others}. Their lines interleave, so no rank's evidence can be "
        "told apart; give each launch's log on its own"
    )
