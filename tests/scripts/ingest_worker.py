"""A separate process that writes memories through the write service.

Usage: python -m tests.scripts.ingest_worker BUCKET_ID START_LINE CONTENT...
Once ready, waits at START_LINE (tests/scripts/start_line.py) with the other workers so that
they all collide, writes each content as its own request, prints one JSON line per result.
"""

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402

# What its callers test is decided by the unique index, not by the models: the embeddings are off
# (ENGRAM_EMBEDDINGS=off in its environment) and so is the lemmatizer, which the first write
# would otherwise load after the start line (seconds of CPU in each process, on a shared machine).
settings.ENGRAM_LEMMATIZER_ENABLED = False

from engram_site.scoping import scope, scopes_disabled  # noqa: E402
from memories.services import MemoryInput, memories_ingest  # noqa: E402
from tenants.models import Bucket  # noqa: E402
from tests.scripts.start_line import wait_at  # noqa: E402


def main() -> None:
    bucket_id, start_line, *contents = sys.argv[1:]
    with scopes_disabled():  # cross-tenant: whose bucket this is, is what the lookup finds out
        bucket = Bucket.objects.select_related("tenant").get(pk=bucket_id)
    wait_at(start_line)
    for content in contents:
        # Each write as a request of the bucket's tenant makes it.
        with scope(tenant=bucket.tenant_id):
            [result] = memories_ingest(bucket=bucket, items=[MemoryInput(content=content)])
        print(json.dumps({"content": content, "id": str(result.id), "deduplicated": result.deduplicated}), flush=True)


if __name__ == "__main__":
    main()
