"""HomeAgent's formats, read in place: legacy documents and media, context.json, the old graph
tables."""
