"""Writes of sources, one module per job: :mod:`.submit`, :mod:`.process` (distil chunks into
memories), :mod:`.sweep`, :mod:`.delete`, and what sources do in an :mod:`.erasure` and in
:mod:`bucket merges <.buckets>`; :mod:`.inputs` and :mod:`.locks` are shared by them.

Submitting stores the source and its chunks and answers at once; the distillation runs in
the background (a Celery hint queued after commit; the periodic sweep picks up whatever a
lost hint, a dead worker or a failure left behind). Chunks are committed in order, a few
at a time: their memories (through :func:`memories.services.memories_ingest`, so dedup,
lemmas, embeddings and sequence context apply), their provenance links and their ``done``
marks commit together — so a failure at chunk k leaves chunks 0..k-1 done and nothing of
chunk k, and the next attempt resumes at chunk k without duplicating anything.
"""
