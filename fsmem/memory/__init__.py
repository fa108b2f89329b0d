"""The memory flows: append, commit, prune, recall, turn, render, L3 moves, fsck; Reader,
Writer and Memory."""
