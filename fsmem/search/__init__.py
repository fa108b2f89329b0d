"""Search: the analyzer, ranking arithmetic, the derived index and its files, embedders,
vector caches."""
