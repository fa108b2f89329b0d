"""The on-disk format and the data model: errors, Structs, timestamps, blocks, units, the
layout of a root, and the one filesystem layer (fsops)."""
