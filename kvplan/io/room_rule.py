"""What a reader is given to turn a rank's logged values into its room: the Room rule, owned by the core.

The readers report what the logs say. The Room rule (:data:`kvplan.room.ROOM_RULE`: which evidence
gives a rank's room, and the warnings about where rooms came from) is a domain rule of the core floor;
a reader applies it only when given it (the readers of :mod:`kvplan.room` give it), both to fill
``room_bytes`` / ``room_source`` and to keep the safest of conflicting observations of one rank.
Without it a reader fills no room, and of conflicting observations keeps the one with the least free
memory at startup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class BootPlace(Protocol):
    """Where a boot is: its index in the file, its first line, its Ray-collapsed lines."""

    index: int
    first_line: int
    ray_repeats: list


#: ``room(values, rank, flags, origin, source, warnings)`` → ``(room_bytes, room_source, (line, raw))``
#: or None; ``flags`` are the boot's ``estimate_applied``, ``eager`` and ``version``.
RoomOf = Callable[[dict, int, dict, dict, str, list], "tuple[int, str, tuple] | None"]
#: ``boot_warnings(rows, key, flags, source, boot, origin, warnings)``: notes about one boot's rooms.
BootRoomWarnings = Callable[[dict, dict, dict, str, BootPlace, dict, list], None]


@dataclass(frozen=True)
class RoomRule:
    """The Room rule as a reader applies it: the room of one rank, and the notes about one boot's rooms."""

    room: RoomOf
    boot_warnings: BootRoomWarnings
