"""Distillation: one chunk (a slice of a document, or one message) in, self-contained statements out.

Two distillers share one small interface (:class:`Distiller`):

- :class:`RulesDistiller` (the default, no network, deterministic): Markdown clean-up,
  sentence segmentation (spaCy's parser from :mod:`engram_site.providers.nlp` when it is available, a
  regular-expression splitter otherwise), then clean-up into statements — greetings,
  thanks, acknowledgements and questions that carry no information are dropped; leading
  interjections ("ugh,", "ok so") are trimmed; fragments ("120km.", "first author") are
  joined to their neighbouring sentence; list items get their introducing line ("Allergies:
  peanuts"); a document sentence that does not mention its section's subject gets the
  heading as context; a short answer to a question gets the question ("How old is Biscuit?
  5 years already!"); and, when asked to (``resolve_first_person``), first person becomes the
  speaker's name ("I moved to Lisbon" → "Maya moved to Lisbon"). Dates and numbers are never
  dropped.
- :class:`LLMDistiller` (``ENGRAM_DISTILLER=llm``): asks the OpenAI-compatible endpoint of
  :mod:`engram_site.providers.llm` for the statements, and falls back to the rules when the endpoint
  fails or answers something unusable — writes never depend on an LLM being up.

One module per job: :mod:`.units` (what a distiller takes and returns), :mod:`.markdown` (Markdown
to plain blocks), :mod:`.sentences` (segmentation), :mod:`.statements` (what to drop, what to trim,
heading context, the bounds of a statement), :mod:`.first_person`, :mod:`.rules` and :mod:`.llm`
(the two distillers) and :mod:`.configured` (the one ``ENGRAM_DISTILLER`` chooses).

docs/SOURCES.md describes the rules and why they are what they are.
"""
