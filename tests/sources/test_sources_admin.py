"""The sources in the operator console: list, detail, retry, and delete through the service."""

from __future__ import annotations

import pytest

from memories.models import Memory
from memories.services import MemoryInput, memories_ingest
from sources.models import Source, SourceStatus
from sources.services.process import source_process
from sources.services.submit import source_submit_document

pytestmark = pytest.mark.django_db


@pytest.fixture
def processed(bucket):
    memories_ingest(bucket=bucket, items=[MemoryInput(content="The shed was painted green in 2021.")])
    source = source_submit_document(
        bucket=bucket, title="House", text="The shed was painted green in 2021.\n\nThe gate code is 4471."
    ).source
    source_process(source_id=source.pk)
    return source


def test_the_source_list_and_page_render(admin_client, processed):
    listing = admin_client.get("/admin/sources/source/").content.decode()
    assert "House" in listing and "1/1" in listing
    page = admin_client.get(f"/admin/sources/source/{processed.pk}/change/")
    assert page.status_code == 200 and "rules-v1" in page.content.decode()


def test_retry_puts_failed_sources_back_in_the_queue(admin_client, bucket):
    source = source_submit_document(bucket=bucket, title="t", text="The gate code is 4471.").source
    Source.objects.filter(pk=source.pk).update(status=SourceStatus.FAILED, attempts=5, error="boom")
    admin_client.post("/admin/sources/source/", {"action": "retry", "_selected_action": [source.pk]})
    source.refresh_from_db()
    assert source.status == SourceStatus.PENDING and source.attempts == 0


def test_deleting_in_the_admin_deletes_the_memories_the_source_created(admin_client, processed, bucket):
    response = admin_client.post(f"/admin/sources/source/{processed.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Source.objects.exists()
    # The memory that existed before stays; the one the source created is gone.
    assert list(Memory.objects.for_bucket(bucket).values_list("content", flat=True)) == [
        "The shed was painted green in 2021."
    ]
