"""Providers: the only modules that load and run models (the embedding model, spaCy's
pipelines, an optional LLM). The domain apps call them; tests and fallbacks swap them here."""
