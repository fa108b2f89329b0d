"""The store: its lock, marker, journal and recovery, publish and move of units, config, the
access log, pins, snapshot."""
