"""New memories: the insert path of the write gateway, one module per job: :mod:`.rows` (a memory
on its way in), :mod:`.derived` (lemmas, token counts, vectors), :mod:`.context` (sequence
context), :mod:`.locks` (the bucket held while rows go in) and :mod:`.insert` (the batch:
embedded a chunk ahead of the inserts, deduplicated, recorded; ``memories_ingest``).

The write path itself is described in :mod:`.insert`.
"""
