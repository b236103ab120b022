"""Knowledge graph models (entities and temporal triples) live here."""
