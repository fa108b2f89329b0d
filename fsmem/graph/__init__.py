"""L3: graph.db in HomeAgent's schema, and the distillers that turn text into triples."""
