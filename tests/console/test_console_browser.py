"""The operator console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``./engram``) driven by Selenium against a live server.

Each step saves a screenshot (under ``$ENGRAM_HOME/screenshots/console/<test>/``, printed
at the end of each test) and checks the database, not only the page. Selenium never
downloads a browser or a driver: both paths are given, and Selenium Manager is kept offline.
"""

from __future__ import annotations

import hashlib
import re
import urllib.request
from datetime import UTC, datetime

import pytest

from audit.models import AuditEvent
from graph.models import Correction, Entity
from graph.services.extraction import graph_extract_memories
from maintenance.models import DuplicateCandidate
from maintenance.services.duplicates import near_duplicates_find_for
from memories import access
from memories.models import DeletedMemory, Memory, MemoryAccess
from memories.services import buckets as memory_buckets
from memories.services import memory_update
from memories.services.buckets import bucket_create
from tenants import services as tenant_services
from tenants.models import ApiToken, Bucket, Tenant
from tests.factories import write
from tests.support.browser import SKIP_REASON

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "ok"),
]

COFFEE = "I prefer dark roast coffee in the morning."
COFFEE_AGAIN = "In the morning I prefer a dark roast coffee."


def test_log_in_create_a_tenant_and_a_token_see_the_secret_once_and_revoke_it(console, superuser):
    console.login(superuser)
    console.shot("index")
    assert console.text("#pending-review-count") == "0"

    # A tenant, through its admin form (the slug is filled in by the page's script).
    console.open("/admin/tenants/tenant/add/")
    console.type("#id_name", "Acme Robotics")
    console.shot("tenant-form")
    console.click("input[name=_save]")
    tenant = Tenant.objects.get(name="Acme Robotics")
    assert tenant.slug == "acme-robotics"
    assert AuditEvent.objects.filter(action="tenant.create", tenant=tenant, actor_label="operator").exists()
    console.shot("tenant-saved")

    # A token: the secret is on the page once, and only its hash is stored.
    console.open("/admin/tenants/apitoken/add/")
    console.select("#id_tenant", str(tenant.pk))
    console.type("#id_name", "agent-1")
    console.shot("token-form")
    console.click("input[name=_save]")
    console.shot("token-secret-shown-once")
    match = re.search(r"\b(egm_[A-Za-z0-9_-]{20,})", console.text(".messagelist"))
    assert match, console.text(".messagelist")
    secret = match.group(1)
    token = ApiToken.objects.get(name="agent-1", tenant=tenant)
    assert token.token_hash == hashlib.sha256(secret.encode()).hexdigest() and token.prefix == secret[:12]
    assert sorted(token.scopes) == ["read", "write"] and token.revoked_at is None
    assert AuditEvent.objects.filter(action="token.create", object_ids=[str(token.pk)]).exists()
    console.open("/admin/tenants/apitoken/")
    assert secret not in console.driver.page_source and token.prefix in console.text("#result_list")

    # The token works, and its last use shows up in the list.
    request = urllib.request.Request(console.base + "/api/v1/buckets", headers={"Authorization": f"Bearer {secret}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
    token.refresh_from_db()
    assert token.last_used_at is not None
    console.open("/admin/tenants/apitoken/")
    assert "-" not in console.text("td.field-last_used_at").strip()[:1]
    console.shot("token-list-last-use")

    # Revoke: a confirmation page first.
    console.find(f"input[name=_selected_action][value='{token.pk}']").click()
    console.select("select[name=action]", "revoke")
    console.click("button[name=index]")
    console.shot("revoke-confirmation")
    token.refresh_from_db()
    assert token.revoked_at is None
    console.click("#confirm-action")
    console.shot("revoked")
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", object_ids=[str(token.pk)]).exists()


def test_review_queue_merge_a_pair(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    coffee, again, other = write(
        bucket, COFFEE, COFFEE_AGAIN, "My sister Anna works as a nurse in Boston.", sequence=False
    )
    Memory.objects.filter(pk=again).update(hint_tags=["morning"])
    near_duplicates_find_for(memory_ids=[again])
    pair = DuplicateCandidate.objects.get()
    assert {pair.memory_a_id, pair.memory_b_id} == {coffee, again}

    console.login(superuser)
    assert console.text("#pending-review-count") == "1"
    console.shot("index-one-pending")
    console.click("#console-panel a[href$='/console/review/']")
    # Choosing a tenant filters at once (console/static/console/console.js).
    console.select("select[name=tenant]", str(tenant.pk))
    console.wait_for_url(f"tenant={tenant.pk}")
    console.shot("review-queue")
    assert COFFEE in console.text(f"#pair-{pair.pk}") and COFFEE_AGAIN in console.text(f"#pair-{pair.pk}")
    keep = "a" if pair.memory_a_id == coffee else "b"
    console.click(f"#pair-{pair.pk} .merge-keep-{keep}")
    console.shot("merge-confirmation")
    assert Memory.objects.filter(pk=again).exists()  # nothing happens before the confirmation
    console.click("#confirm-merge")
    console.shot("merged")
    assert "Merged 1 pair" in console.text(".messagelist")
    assert set(Memory.objects.for_bucket(bucket).values_list("id", flat=True)) == {coffee, other}
    assert Memory.objects.get(pk=coffee).hint_tags == ["morning"]
    assert not DuplicateCandidate.objects.exists()
    event = AuditEvent.objects.get(action="duplicate.merge")
    assert (event.actor_kind, event.actor_label, event.details["removed_id"]) == ("operator", "operator", str(again))


def test_bucket_merge_preview_and_confirm(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    inbox = bucket_create(tenant=tenant, name="inbox")
    archive = bucket_create(tenant=tenant, name="archive")
    inbox_id = inbox.pk
    write(inbox, COFFEE, "I live in Lisbon.", "My cat is called Miso.", sequence=False)
    [kept] = write(archive, COFFEE, sequence=False)

    console.login(superuser)
    console.open("/admin/console/bucket-merge/")
    console.select("#id_source", str(inbox.pk))
    console.select("#id_target", str(archive.pk))
    console.shot("merge-form")
    console.click("#preview-merge")
    console.shot("merge-preview")
    assert (console.text("#plan-move"), console.text("#plan-dedup")) == ("2", "1")
    assert Memory.objects.for_bucket(inbox).count() == 3  # the preview changed nothing
    console.click("#confirm-merge")
    console.shot("merged")
    assert "Merged “inbox” into “archive”" in console.text(".messagelist")
    assert not Bucket.objects.filter(pk=inbox.pk).exists()
    assert Memory.objects.for_bucket(archive).count() == 3 and Memory.objects.filter(pk=kept).exists()
    assert memory_buckets._rows_left_in(Bucket(pk=inbox_id)) == []
    event = AuditEvent.objects.get(action="bucket.merge")
    assert event.details["deduplicated"] == 1 and event.actor_label == "operator"


def test_playground_query_with_explain(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    coffee, *_ = write(
        bucket, COFFEE, "I live in Lisbon.", "My cat is called Miso.", "I run 5k on Saturdays.", sequence=False
    )

    console.login(superuser)
    console.open("/admin/console/playground/")
    console.select("#id_bucket", str(bucket.pk))
    console.type("#id_query", "what coffee do I like in the morning?")
    console.select("#id_mode", "hybrid")
    console.shot("playground-form")
    console.click("#run-search")
    console.shot("playground-results")
    assert "mode used: hybrid" in console.text("#search-summary")
    rows = console.all("#search-results tr.search-hit")
    assert rows and COFFEE in rows[0].text
    assert "vector" in rows[0].text and "keyword" in rows[0].text and "recency" in rows[0].text
    access.flush()
    assert not MemoryAccess.objects.filter(memory_id=coffee).exists()
    assert not Memory.objects.filter(pk=coffee, last_accessed_at__isnull=False).exists()


def test_topics_and_health_pages(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    ids = write(
        bucket, "I like ramen.", "We had lasagna.", "Our cat Miso is twelve.", "The car needs tyres.", sequence=False
    )
    Memory.objects.filter(pk__in=ids[:2]).update(classified_topic="food")
    Memory.objects.filter(pk=ids[2]).update(classified_topic="pets")

    console.login(superuser)
    console.open(f"/admin/console/topics/{bucket.pk}/")
    console.shot("topics")
    assert "(unlabelled)" in console.text("#topic-groups")
    console.select("#rename-from", "food")
    console.type("#rename-to", "cooking")
    console.click("#rename-topic")
    console.shot("topic-rename-confirmation")
    assert console.text("#topic-count") == "2" and Memory.objects.filter(classified_topic="food").count() == 2
    console.click("#confirm-topics")
    console.shot("topic-renamed")
    assert Memory.objects.filter(classified_topic="cooking").count() == 2
    assert AuditEvent.objects.get(action="topic.rename").object_count == 2

    console.open("/admin/console/health/")
    console.shot("health")
    assert "Acme" in console.text("#health-tenants")
    assert "idx_memories_embedding_hnsw" in console.text("#health-indexes")


def test_a_memorys_history_pin_delete_and_restore(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    [memory_id] = write(
        bucket, "<script>window.__engramXss = 1;</script> The spare key is under the mat.", sequence=False
    )
    memory_update(memory=Memory.objects.get(pk=memory_id), content="The spare key is under the mat.")

    def unharmed():
        # Stored markup is shown as text, never run.
        assert console.driver.execute_script("return window.__engramXss === undefined;")

    console.login(superuser)
    console.open(f"/admin/memories/memory/{memory_id}/change/")
    console.shot("memory-page")
    unharmed()
    assert "<script>window.__engramXss" in console.text("#version-1")
    console.click("#pin-memory")
    console.shot("pinned")
    unharmed()
    assert Memory.objects.get(pk=memory_id).importance == 1.0
    assert "operator" in console.text("#version-2") and "importance" in console.text("#version-2")

    console.open(f"/admin/memories/memory/{memory_id}/delete/")
    console.click("#content form input[type=submit]")
    assert DeletedMemory.objects.filter(pk=memory_id).exists()
    console.open("/admin/memories/deletedmemory/")
    console.shot("deleted-memories")
    assert "The spare key is under the mat." in console.text("#result_list")
    console.click(f"#result_list a[href$='/{memory_id}/change/']")
    console.shot("deleted-memory-page")
    unharmed()
    assert "deleted" in console.text("#version-3")
    console.click("#restore-memory")
    console.shot("restored")
    unharmed()
    assert Memory.objects.filter(pk=memory_id).exists() and not DeletedMemory.objects.filter(pk=memory_id).exists()
    assert "restored" in console.text("#version-4") and "Restored" in console.text(".messagelist")
    console.driver.execute_script("document.getElementById('memory-history').scrollIntoView({behavior: 'instant'});")
    console.shot("restored-history")
    assert AuditEvent.objects.filter(action="memory.restore", actor_label="operator").exists()


def test_the_browser_enforces_the_policy_and_the_check_sees_what_it_refuses(console, superuser):
    """The pages' Content-Security-Policy is on, Chromium enforces it, and what it refuses
    reaches the log that every step of these tests reads."""
    console.login(superuser)
    policy = urllib.request.urlopen(console.base + "/admin/login/", timeout=30).headers["Content-Security-Policy"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
    console.driver.execute_script(
        "document.head.insertAdjacentHTML('beforeend', '<style>#console-panel { display: none; }</style>');"
        "document.body.insertAdjacentHTML('beforeend', '<img src=x onerror=\"window.__engramInline = 1\">');"
    )
    assert console.find("#console-panel").is_displayed()  # the injected style was not applied
    assert console.driver.execute_script("return window.__engramInline === undefined;")  # nor the handler run
    with pytest.raises(AssertionError, match="Content Security Policy"):
        console.assert_no_csp_violation()


def test_a_schedules_form_translates_its_crontab(console, superuser):
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    nightly = CrontabSchedule.objects.create(minute="0", hour="3", timezone="UTC")
    task = PeriodicTask.objects.create(name="nightly job", task="maintenance.tasks.purge_memories", crontab=nightly)
    other = CrontabSchedule.objects.create(minute="30", hour="4", timezone="UTC")
    console.login(superuser)
    console.open(f"/admin/django_celery_beat/periodictask/{task.pk}/change/")
    console.shot("schedule-form")
    assert not console.find(".field-crontab_translation").is_displayed()  # hidden by the page's script
    console.select("#id_crontab", str(other.pk))
    console.shot("schedule-crontab-changed")
    help_text = console.text(".field-crontab .help")
    assert "Translation: At 04:30 AM" in help_text, help_text
    assert PeriodicTask.objects.get(pk=task.pk).crontab_id == nightly.pk  # nothing saved


def test_the_api_docs_render_under_the_policy(console):
    console.open("/api/docs/")
    console.find(".swagger-ui .opblock")  # operations drawn from /api/schema/ by Swagger UI's scripts
    console.shot("api-docs")
    assert "/api/v1/buckets/{bucket_id}/memories" in console.text("#swagger-ui")
    assert len(console.all(".swagger-ui .opblock")) >= 20


def test_entity_pages_merge_and_list_the_correction(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    graph_extract_memories(
        memory_ids=write(bucket, "Robert Smith works at Initech.", "Smitty moved to Austin.", sequence=False)
    )
    smitty = Entity.objects.get(normalized_name="smitty")

    console.login(superuser)
    console.open(f"/admin/console/entities/{bucket.pk}/")
    console.shot("entities")
    assert "Smitty" in console.text("#entities")
    console.open(f"/admin/console/entities/{bucket.pk}/{smitty.pk}/")
    console.shot("entity")
    console.type("#merge-into", "Robert Smith")
    console.click("#merge-form button")
    console.shot("merge-confirmation")
    assert Entity.objects.filter(pk=smitty.pk).exists()
    console.click("#confirm-correction")
    console.shot("merged")
    assert not Entity.objects.filter(pk=smitty.pk).exists()
    assert "merged into" in console.text("#corrections")
    assert Correction.objects.get().actor_label == superuser.get_username()


def test_an_entitys_neighbourhood_and_timeline_render_under_the_policy_and_their_nodes_link(console, superuser):
    tenant = tenant_services.tenant_create(name="Acme")
    bucket = bucket_create(tenant=tenant, name="main")
    when = [datetime(2019, 3, 1), datetime(2019, 6, 1), datetime(2020, 1, 1), datetime(2021, 5, 1),
            datetime(2022, 9, 1), datetime(2023, 2, 1), datetime(2023, 4, 1), datetime(2024, 3, 1),
            datetime(2024, 4, 1)]  # fmt: skip
    contents = [
        "Maya Patel lives in Porto.", "Maya works at Farfetch as a designer.", "Maya's brother Leo is a chef.",
        "Maya moved to Lisbon.", "Maya joined Stripe.", "Maya is married to Tomas.", "Maya likes surfing.",
        "Maya moved to Berlin in 2024.", "Maya's manager is Priya.",
    ]  # fmt: skip
    items = [{"content": c, "created_at": w.replace(tzinfo=UTC)} for c, w in zip(contents, when, strict=True)]
    graph_extract_memories(memory_ids=write(bucket, *items, sequence=False))
    entities = {e.name: e for e in Entity.objects.for_bucket(bucket)}
    maya = entities["Maya Patel"]

    console.login(superuser)
    console.open(f"/admin/console/entities/{bucket.pk}/{maya.pk}/")
    graph = console.find("svg#entity-graph")
    console.shot("entity-graph")
    # The figures alone, as docs/CONSOLE.md shows them.
    for name in ("entity-graph", "entity-timeline"):
        console.driver.execute_script(f"document.querySelector('figure.{name}').scrollIntoView({{block: 'center'}});")
        console.find(f"figure.{name}").screenshot(str(console.shots / f"figure-{name}.png"))
    assert graph.size["width"] > 500 and graph.size["height"] > 300
    style = "return getComputedStyle(arguments[0]).getPropertyValue(arguments[1]);"
    # Ten facts, one curve each; the three a newer fact ended are dashed (a class of console.css:
    # the stylesheet applies, and no inline style was needed).
    current = console.all("#entity-graph .graph-link.current path.edge")
    past = console.all("#entity-graph .graph-link.past path.edge")
    assert (len(current), len(past)) == (7, 3)
    assert {console.driver.execute_script(style, p, "stroke-dasharray") for p in current} == {"none"}
    assert all(console.driver.execute_script(style, p, "stroke-dasharray") != "none" for p in past)
    labels = console.text("#entity-graph")
    assert "lives_in" in labels and "2021-05-01 – 2024-01-01" in labels and "since 2024-01-01" in labels
    # Every entity is a link to its own page; values (designer, surfing) are not entities.
    links = {a.get_dom_attribute("href") for a in console.all("#entity-graph a.graph-node")}
    pages = {f"/admin/console/entities/{bucket.pk}/{entities[n].pk}/" for n in (
        "Maya Patel", "Porto", "Lisbon", "Berlin", "Farfetch", "Stripe", "Leo", "Tomas", "Priya")}  # fmt: skip
    assert links == pages
    assert len(console.all("#entity-graph .graph-node.value")) == 2
    # The timeline: a bar per fact, the ended ones apart.
    assert len(console.all("#entity-timeline .timeline-row")) == 10
    assert len(console.all("#entity-timeline .timeline-row.past")) == 3
    console.driver.execute_script("document.getElementById('entity-timeline').scrollIntoView({behavior: 'instant'});")
    console.shot("entity-timeline")
    assert "Berlin (since 2024-01-01)" in console.text("#entity-digest")

    # A node's link opens that entity's page, whose picture links back.
    console.click(f"#entity-graph a.graph-node[href$='/{entities['Berlin'].pk}/'] circle")
    assert console.driver.current_url.endswith(f"/{bucket.pk}/{entities['Berlin'].pk}/")
    console.shot("berlin")
    console.click(f"#entity-graph a.graph-node[href$='/{maya.pk}/'] circle")
    assert console.driver.current_url.endswith(f"/{maya.pk}/")

    # As of a day: what the memories written by then said.
    console.open(f"/admin/console/entities/{bucket.pk}/{maya.pk}/?as_of=2020-06-01")
    console.shot("entity-graph-2020")
    assert console.find("#as-of").get_attribute("value") == "2020-06-01"
    assert len(console.all("#entity-graph .graph-link")) == 4 and "Berlin" not in console.text("#entity-graph")
    console.assert_no_csp_violation()
