"""Small database helpers shared by the apps."""

import numpy as np
from django.db import models
from psycopg.adapt import Dumper
from psycopg.pq import Format


class TransactionNow(models.Func):
    """``now()``: the transaction's start time, as seed 000's ``DEFAULT NOW()``.

    Django's ``Now()`` renders ``STATEMENT_TIMESTAMP()`` on PostgreSQL; the schema
    of record uses ``now()``, so every row written in one transaction shares it.
    """

    template = "now()"
    output_field = models.DateTimeField()


class CurrentTransactionId(models.Func):
    """``pg_current_xact_id()`` as a bigint: the id of the writing transaction (assigning one
    if it has none yet). The change feed serves a row only once every transaction with a
    smaller id has ended (memories/selectors_feed.py); an xid8 is a 64-bit counter that never
    wraps, so the cast is exact."""

    template = "(pg_current_xact_id()::text::bigint)"
    output_field = models.BigIntegerField()


class VectorBinaryDumper(Dumper):
    """A 1-D numpy array as a query parameter in pgvector's binary format: two big-endian
    uint16 (dimensions, unused) and the big-endian float32 values. The type is left for
    the server to infer, so the statement must cast the placeholder (``%s::vector``)."""

    format = Format.BINARY
    oid = 0

    def dump(self, obj):
        values = np.asarray(obj, dtype=">f4")
        if values.ndim != 1:
            raise ValueError(f"a vector parameter must be one-dimensional, not of shape {values.shape}")
        return np.array([values.shape[0], 0], dtype=">u2").tobytes() + values.tobytes()


def binding_cursor(connection):
    """A cursor of ``connection`` that sends the parameters apart from the statement
    (server-side binding), numpy arrays as binary vectors; otherwise an ordinary Django
    cursor (the same wrappers, error translation and query logging).

    Django's cursors bind on the client: every parameter is spelled into the SQL text. For
    a batch insert that text runs to megabytes (each vector ~3.5 kB of decimals), which the
    web process formats and the database parses again. Bound apart and in binary, a
    1000-memory insert spent ~0.1 s less CPU in Python and ~0.05 s less in the database
    (bench/README.md). Statements are not prepared (Django leaves ``prepare_threshold``
    unset), so this works through a transaction-pooling proxy too.
    """
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    cursor = ServerBindingCursor(connection.connection)
    cursor.adapters.register_dumper(np.ndarray, VectorBinaryDumper)
    return connection._prepare_cursor(cursor)
