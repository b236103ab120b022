"""An entity's page draws its neighbourhood and the timeline of its facts as server-rendered SVG
(console/graph_picture.py), through Django's test client; the browser test
(test_console_browser.py) checks that Chromium renders it under the Content-Security-Policy."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from django.utils import timezone

from console import graph_picture
from graph.models import Edge, Entity
from graph.selectors.profile import entity_profile
from tests.factories import make_graph_fact, write, write_extracted

pytestmark = pytest.mark.django_db


def at(year, month=1, day=1):
    return datetime(year, month, day, tzinfo=UTC)


def figure(page: str, css_class: str) -> str:
    return re.search(rf'<figure class="{css_class}">(.*?)</figure>', page, re.S).group(1)


def test_the_entity_page_draws_the_neighbourhood_and_the_timeline_of_its_facts(admin_client, bucket):
    write_extracted(
        bucket,
        {"content": "Maya Patel lives in Porto.", "created_at": at(2019, 3)},
        {"content": "Maya moved to Lisbon.", "created_at": at(2021, 5)},
        {"content": "Maya's brother Leo is a chef.", "created_at": at(2022)},
        {"content": "Maya likes surfing.", "created_at": at(2023)},
    )
    maya = Entity.objects.for_bucket(bucket).get(normalized_name="maya patel")
    page = admin_client.get(f"/admin/console/entities/{bucket.pk}/{maya.pk}/").content.decode()
    graph = figure(page, "entity-graph")
    # One curve per fact: Porto ended by the move (dashed: the "past" class), the others current.
    assert graph.count('class="graph-link current"') == 3 and graph.count('class="graph-link past"') == 1
    assert "2019-03-01 – 2021-05-01" in graph and "since 2021-05-01" in graph
    # Every entity a link to its page, the value (surfing) a square without one.
    links = set(re.findall(r'<a class="graph-node[^"]*" href="([^"]+)"', graph))
    ids = {e.normalized_name: e.pk for e in Entity.objects.for_bucket(bucket)}
    assert links == {f"/admin/console/entities/{bucket.pk}/{ids[n]}/" for n in ("maya patel", "porto", "lisbon", "leo")}
    assert graph.count('class="graph-node value current"') == 1 and "surfing" in graph
    timeline = figure(page, "entity-timeline")
    assert timeline.count('<g class="timeline-row') == 4 and timeline.count('class="timeline-row past"') == 1
    assert ">2020</text>" in timeline and ">2023</text>" in timeline
    # Nothing the policy refuses: no script, no inline style, no event handler.
    for drawn in (graph, timeline):
        assert "<script" not in drawn and "style=" not in drawn and not re.search(r"\son\w+=", drawn)
    assert "- lives in Lisbon (since 2021-05-01)" in page  # the digest an agent gets

    # As of 2020: what the memories written by then said.
    past = admin_client.get(f"/admin/console/entities/{bucket.pk}/{maya.pk}/", {"as_of": "2020-01-01"})
    graph = figure(past.content.decode(), "entity-graph")
    assert graph.count('class="graph-link current"') == 1 and "Lisbon" not in graph and "Porto" in graph


def test_a_bad_day_is_said_and_the_entity_shown_as_it_is_now(admin_client, bucket):
    write_extracted(bucket, "Maya Patel lives in Porto.")
    maya = Entity.objects.for_bucket(bucket).get(normalized_name="maya patel")
    for bad in ("2024-02-30", "yesterday", "99999-01-01", "1066-10-14"):
        response = admin_client.get(f"/admin/console/entities/{bucket.pk}/{maya.pk}/", {"as_of": bad})
        assert response.status_code == 200
        assert "is not a date" in response.content.decode() and response.context["profile"].as_of is None


def test_names_with_markup_are_escaped_in_the_picture(admin_client, bucket):
    [memory] = write(bucket, "Something about a person.", sequence=False)
    person, _ = make_graph_fact(bucket, memory, '<img src=x onerror="alert(1)">')
    page = admin_client.get(f"/admin/console/entities/{bucket.pk}/{person.pk}/").content.decode()
    graph = figure(page, "entity-graph")
    assert "<img" not in graph and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in graph


def test_a_crowded_neighbourhood_draws_the_first_neighbours_and_counts_the_rest(bucket):
    [memory] = write(bucket, "Marta likes many things.", sequence=False)
    person, _ = make_graph_fact(bucket, memory, "zq")
    for index in range(25):
        Edge.objects.create(
            tenant_id=bucket.tenant_id, bucket_id=bucket.pk, subject=person, predicate="likes",
            object_literal=f"thing {index}", valid_from=at(2020, 1, 1 + index), source_memory_id=memory,
        )  # fmt: skip
    profile = entity_profile(entity=person)
    picture = graph_picture.neighbourhood(profile)
    assert len(picture.nodes) == graph_picture.MAX_NEIGHBOURS and picture.hidden == 26 - graph_picture.MAX_NEIGHBOURS
    assert len(picture.links) == graph_picture.MAX_NEIGHBOURS
    # Inside the picture, whatever the angle; labels upright (rotated by less than a half turn either way).
    for node in picture.nodes:
        assert 0 <= node.x <= picture.width and 0 <= node.y <= picture.height
    assert all(link.angle <= 90 or link.angle >= 270 for link in picture.links)
    chart = graph_picture.timeline(profile, now=timezone.now())
    assert len(chart.bars) == 26 and all(chart.left <= bar.x <= chart.width for bar in chart.bars)
