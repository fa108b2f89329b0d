"""The on-disk format and the data model: errors, Structs, timestamps, blocks, units, layout, the one filesystem layer."""
