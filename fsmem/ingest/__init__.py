"""Ingest: the inbox and watch daemon, importers of foreign exports, and archive export/import."""
