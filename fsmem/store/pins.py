"""Pins: the L1 units a recall brought in, kept from eviction through the rest of the turn.

State outside every unit (``ROOT/.fsmem/pins.json``), written under the writer lock; a pin is a
courtesy to the agent, never needed for consistency, so an unreadable file is ignored.
"""

from __future__ import annotations

import logging
import os
from typing import Iterable

import msgspec

from fsmem.format import fsops as _fsops
from fsmem.format.errors import FsmemError
from fsmem.format.layout import layer_agent, read_small
from fsmem.store.store import Store

__all__ = ["PINS_FILE", "read_pins", "pin_units", "tick_pins"]

log = logging.getLogger("fsmem.turn")

PINS_FILE = "pins.json"
_PINS_CAP = 1 << 20         # a pins file is a few hundred bytes; refuse anything huge


class _Pins(msgspec.Struct, kw_only=True):
    format: int = 1
    pins: dict[str, int] = {}     # unit id -> write calls it still survives


_pins_decoder = msgspec.json.Decoder(_Pins)


def _pins_path(store: Store, layer: str = "context") -> str:
    """``pins.json`` of the default agent's L1; ``pins@<agent>.json`` of an agent's
    (``context@<agent>``): each agent's pins tick with its own writes only."""
    name = PINS_FILE if layer == "context" else f"pins@{layer_agent(layer)}.json"
    return os.path.join(store.meta, name)


def read_pins(store: Store, layer: str = "context") -> dict[str, int]:
    """The pinned unit ids of the L1 ``layer`` (nothing when the file is absent or
    unreadable: a pin is a courtesy to the agent, never needed for consistency). Opened
    safely, read-only."""
    path = _pins_path(store, layer)
    try:
        data = read_small(path, _PINS_CAP)
    except FileNotFoundError:
        return {}
    except (OSError, FsmemError) as exc:
        log.warning("%s: ignoring pins: %s", path, exc)
        return {}
    try:
        return dict(_pins_decoder.decode(data).pins)
    except msgspec.DecodeError as exc:
        log.warning("%s: undecodable pins ignored: %s", path, exc)
        return {}


def _write_pins(store: Store, pins: dict[str, int], layer: str = "context") -> None:
    """Replace the pins file atomically (under the writer lock, the only writer of pins);
    temp files a crashed writer left beside it go first."""
    path = _pins_path(store, layer)
    for name in os.listdir(store.meta):
        if name.startswith(os.path.basename(path) + ".") and name.endswith(".tmp"):
            _fsops.unlink(os.path.join(store.meta, name))
    if not pins:
        if os.path.lexists(path):
            _fsops.unlink(path)
        return
    store.write_file_atomic(path, msgspec.json.encode(_Pins(pins=pins)))


def pin_units(store: Store, unit_ids: Iterable[str], layer: str = "context") -> None:
    """Pin freshly recalled units of the L1 ``layer`` through the rest of this turn (call
    under the lock)."""
    ids = list(unit_ids)
    if not ids:
        return
    pins = read_pins(store, layer)
    pins.update({uid: 1 for uid in ids})
    _write_pins(store, pins, layer)


def tick_pins(store: Store, layer: str = "context") -> None:
    """One write call of the agent of L1 ``layer`` ended: its pins that have lived through
    it are released; pins of units no longer in that L1 are dropped."""
    pins = read_pins(store, layer)
    if not pins:
        return
    with store.locked():
        pins = read_pins(store, layer)
        kept = {uid: n - 1 for uid, n in pins.items()
                if n > 1 and os.path.isdir(store.unit_dir(layer, uid))}
        if kept != pins:
            _write_pins(store, kept, layer)
