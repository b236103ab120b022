"""Writes to the knowledge graph, one module per job: extraction (and rebuilds), entity
resolution, timelines and supersession, erasure, merges.

The graph is a view of the memories table. Extracting a memory replaces that
memory's mentions and edges (so it can be repeated safely), then recomputes the
validity windows of every functional timeline it touched and the supersession
state of the memories on those timelines. A rebuild does the same for a whole
bucket from scratch, in ``created_at`` order; running it twice gives the same
graph.
"""
