"""The Celery app of engram_site, for the worker processes tests/sources/test_sources_concurrency.py starts.

Usage: python -m celery -A tests.scripts.sources_worker_app worker ...

Each pool process commits a source's chunks in small batches and distils a chunk slowly
(ENGRAM_TEST_BATCH_CHUNKS chunks a batch, ENGRAM_TEST_DISTILL_DELAY seconds a chunk), so
that two workers given the same source are still at it together and take turns batch by
batch, instead of the first one finishing before the second has polled the broker.
"""

import os
import time

from celery.signals import worker_process_init

from engram_site.celery import app

__all__ = ["app"]


@worker_process_init.connect
def _small_batches_and_a_slow_distiller(**kwargs):
    from sources.distill.rules import RulesDistiller
    from sources.services import process

    process.BATCH_CHUNKS = int(os.environ.get("ENGRAM_TEST_BATCH_CHUNKS", "4"))
    delay = float(os.environ.get("ENGRAM_TEST_DISTILL_DELAY", "0.05"))
    rules = RulesDistiller.distill

    def slow_distill(self, unit):
        time.sleep(delay)
        return rules(self, unit)

    RulesDistiller.distill = slow_distill
