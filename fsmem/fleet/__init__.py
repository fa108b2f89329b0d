"""The fleet index: many stores searched as one, in PostgreSQL, fed from each store's change
feed (docs/FLEET.md). ``FleetIndex`` is the API; ``fsmem fleet`` is its command."""

from fsmem.fleet.index import FleetError, FleetHit, FleetIndex, StoreSync, SyncReport

__all__ = ["FleetIndex", "FleetHit", "StoreSync", "SyncReport", "FleetError"]
