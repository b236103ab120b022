"""The operator console's admin site.

``ConsoleAdminSite`` is ``admin.site`` (installed through ``ConsoleAdminConfig``,
console/admin_config.py, in place of ``django.contrib.admin``), so every ``@admin.register`` lands on it. It adds
the console pages (console/views/, one module per page) under ``/admin/console/`` and puts the pending
review count and the console's pages on the index.

Tenant scoping (console/scoping.py) cannot be forgotten by a new model admin:
``register`` closes every admin that is not a ``TenantScopedAdmin`` to tenant operators
(superusers only). The login form counts failures per address and per username
(console/login.py) and answers 429 past the limits.
"""

from __future__ import annotations

import functools

from django.contrib import admin
from django.core.exceptions import BadRequest
from django.urls import path, reverse

from console.login import ThrottledAuthenticationForm
from console.scoping import enter_operator_scope, superuser_only
from console.selectors import console_summary
from console.views import (
    blocks,
    bucket_merge,
    conflicts,
    duplicates,
    entities,
    health,
    home,
    playground,
    topics,
    usage,
)


def refuse_nul(request) -> None:
    """Raise BadRequest (400) when a query parameter or a form field of ``request``, name or
    value, holds a NUL: PostgreSQL text cannot hold one, so it would otherwise reach the
    database from a filter, a search or a form the console reads by hand, and fail there (a
    500). The API refuses them in its serializers; Django's form fields refuse them too, but
    the console's pages read many inputs without one."""
    for values in (request.GET, request.POST):
        for name, items in values.lists():
            if "\x00" in name or any("\x00" in item for item in items):
                raise BadRequest("A NUL character in a text input; nothing was done.")


class ConsoleAdminSite(admin.AdminSite):
    site_header = "Engram console"
    site_title = "Engram console"
    index_title = "Operator console"
    index_template = "console/index.html"

    @property
    def login_form(self):
        return ThrottledAuthenticationForm

    def admin_view(self, view, cacheable=False):
        # Every page of the console (model admins included) runs in its operator's tenant scope,
        # entered inside the view so that a database outage is still the 503 page; it lasts
        # until the answer is rendered (engram_site/scoping.py). It is also the one place that
        # refuses a NUL in what the operator sends (refuse_nul).
        @functools.wraps(view)
        def in_operator_scope(request, *args, **kwargs):
            refuse_nul(request)
            enter_operator_scope(request)
            return view(request, *args, **kwargs)

        return super().admin_view(in_operator_scope, cacheable)

    def register(self, model_or_iterable, admin_class=None, **options):
        # Data outside any tenant (users, schedules, job runs, ...) and any admin that does
        # not declare how it is scoped are for superusers only.
        super().register(model_or_iterable, superuser_only(admin_class or admin.ModelAdmin), **options)

    def login(self, request, extra_context=None):
        response = super().login(request, extra_context)
        form = (getattr(response, "context_data", None) or {}).get("form")
        wait = getattr(form, "throttled_for", 0)
        if wait:
            response.status_code = 429
            response["Retry-After"] = str(wait)
        return response

    def get_urls(self):
        def page(route: str, view, name: str):
            return path(f"console/{route}", self.admin_view(view), name=name)

        return [
            page("", home.home, "console_home"),
            page("health/", health.health, "console_health"),
            page("health/retry/", health.enrichment_retry, "console_enrichment_retry"),
            page("usage/", usage.usage, "console_usage"),
            page("review/", duplicates.review_queue, "console_review"),
            page("review/confirm/", duplicates.review_confirm, "console_review_confirm"),
            page("conflicts/", conflicts.conflicts_queue, "console_conflicts"),
            page("conflicts/resolve/", conflicts.conflicts_resolve, "console_conflicts_resolve"),
            page("bucket-merge/", bucket_merge.bucket_merge, "console_bucket_merge"),
            page("topics/", topics.topics_index, "console_topics"),
            page("topics/<uuid:bucket_id>/", topics.topics_bucket, "console_topics_bucket"),
            page("topics/<uuid:bucket_id>/memories/", topics.topic_detail, "console_topic_detail"),
            page("playground/", playground.playground, "console_playground"),
            page("blocks/", blocks.blocks_index, "console_blocks"),
            page("blocks/<uuid:bucket_id>/", blocks.blocks_bucket, "console_blocks_bucket"),
            page("blocks/<uuid:bucket_id>/<uuid:block_id>/history/", blocks.block_history, "console_block_history"),
            page("entities/", entities.entities_index, "console_entities"),
            page("entities/<uuid:bucket_id>/", entities.entities_bucket, "console_entities_bucket"),
            page("entities/<uuid:bucket_id>/<uuid:entity_id>/", entities.entity_page, "console_entity"),
        ] + super().get_urls()

    # The console's pages, in the navigation sidebar of every admin page.
    PAGES = (
        ("Near-duplicate review", "console_review", "maintenance.view_duplicatecandidate"),
        ("Contradiction review", "console_conflicts", "maintenance.view_conflictcandidate"),
        ("Topics", "console_topics", "memories.view_memory"),
        ("Entities", "console_entities", "memories.view_memory"),
        ("Memory blocks", "console_blocks", "memories.view_memory"),
        ("Merge buckets", "console_bucket_merge", "tenants.change_bucket"),
        ("Retrieval playground", "console_playground", "memories.view_memory"),
        ("Health", "console_health", "tenants.view_tenant"),
        ("Usage", "console_usage", "tenants.view_tenant"),
    )

    def each_context(self, request):
        context = super().each_context(request)
        if context.get("available_apps") is not None and getattr(request.user, "is_staff", False):
            pages = [
                {"name": name, "object_name": url_name, "admin_url": reverse(f"{self.name}:{url_name}"),
                 "view_only": True, "perms": {"view": True}}
                for name, url_name, perm in self.PAGES
                if request.user.has_perm(perm)
            ]  # fmt: skip
            if pages:
                console = {
                    "name": "Operator console", "app_label": "console", "app_url": reverse(f"{self.name}:console_home"),
                    "has_module_perms": True, "models": pages,
                }  # fmt: skip
                context["available_apps"] = [console, *context["available_apps"]]
        return context

    def index(self, request, extra_context=None):
        extra_context = {**(extra_context or {}), "console": console_summary(user=request.user)}
        return super().index(request, extra_context)
