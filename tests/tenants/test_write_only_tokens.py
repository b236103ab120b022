"""A token without the read scope never receives stored content: write answers carry ids and status."""

from __future__ import annotations

import pytest

from tests.factories import make_client, write

pytestmark = pytest.mark.django_db

SECRET = "The vault code is 4471, said the other agent."


@pytest.fixture
def writer(tenant):
    return make_client(tenant, scopes=["write"])


def test_write_only_patch_answers_the_id_and_no_content(writer, api, bucket):
    memory_id = write(bucket, SECRET, api=api, metadata={"pin": "4471"}, hint_tags=["vault"])[0]
    assert writer.get(f"/api/v1/memories/{memory_id}").status_code == 403
    response = writer.patch(f"/api/v1/memories/{memory_id}", {}, format="json")
    assert response.status_code == 200
    assert response.json() == {"id": memory_id}
    assert "4471" not in response.content.decode()


def test_write_only_patch_does_not_return_another_writers_run_context(writer, api, bucket):
    write(bucket, SECRET, api=api, run_id="run-1")[0]
    mine = write(bucket, "I will open the vault later.", api=writer, run_id="run-1")[0]
    response = writer.patch(f"/api/v1/memories/{mine}", {"hint_tags": ["later"]}, format="json")
    assert response.status_code == 200
    # Only the id (whose random hex may happen to hold "4471": the content's words are what must be absent).
    assert response.json() == {"id": mine}
    assert "vault code" not in response.content.decode()


def test_write_only_patch_still_applies_the_change(writer, api, bucket):
    memory_id = write(bucket, "Old wording", api=api)[0]
    assert writer.patch(f"/api/v1/memories/{memory_id}", {"content": "New wording"}, format="json").status_code == 200
    assert api.get(f"/api/v1/memories/{memory_id}").json()["content"] == "New wording"


def test_a_token_with_read_still_gets_the_whole_memory_from_patch(api, bucket):
    memory_id = write(bucket, SECRET, api=api, metadata={"pin": "4471"})[0]
    body = api.patch(f"/api/v1/memories/{memory_id}", {}, format="json").json()
    assert body["content"] == SECRET and body["metadata"] == {"pin": "4471"}


def test_write_only_document_and_conversation_answers_hold_no_content(writer, bucket):
    document = writer.post(f"/api/v1/buckets/{bucket.pk}/documents", {"title": "Vault", "text": SECRET}, format="json")
    conversation = writer.post(
        f"/api/v1/buckets/{bucket.pk}/conversations",
        {"messages": [{"role": "user", "content": SECRET}]},
        format="json",
    )
    for response in (document, conversation):
        assert response.status_code == 202, response.content
        assert set(response.json()) == {"id", "status", "deduplicated", "chunks_total"}
        assert "4471" not in response.content.decode()


def test_write_only_bucket_patch_answers_the_id_and_no_description(writer, api, bucket):
    api.patch(f"/api/v1/buckets/{bucket.pk}", {"description": "Vault code 4471"}, format="json")
    assert writer.get(f"/api/v1/buckets/{bucket.pk}").status_code == 403
    response = writer.patch(f"/api/v1/buckets/{bucket.pk}", {}, format="json")
    assert response.status_code == 200
    assert response.json() == {"id": str(bucket.pk)}
    assert api.patch(f"/api/v1/buckets/{bucket.pk}", {}, format="json").json()["description"] == "Vault code 4471"
