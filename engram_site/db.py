"""Small database helpers shared by the apps."""

from django.db import models


class TransactionNow(models.Func):
    """``now()``: the transaction's start time, as seed 000's ``DEFAULT NOW()``.

    Django's ``Now()`` renders ``STATEMENT_TIMESTAMP()`` on PostgreSQL; the schema
    of record uses ``now()``, so every row written in one transaction shares it.
    """

    template = "now()"
    output_field = models.DateTimeField()
