"""The store: its lock, marker, journal and recovery, publish and move of units, config, access log, snapshot."""
