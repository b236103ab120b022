"""What every console page does: its template context, the operator's permission check and
actor, ids of rows and buckets the operator may name."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404

from audit.services import Actor
from console.scoping import visible_bucket
from tenants.models import Bucket


def page_context(request, title: str, **extra) -> dict:
    return {**admin.site.each_context(request), "title": title, **extra}


def row_id(text: str) -> int | None:
    """A posted row id as a number, or None when it cannot name a row: not ASCII digits ("²" is a
    digit to str.isdigit but not to int), or beyond PostgreSQL's bigint."""
    if text.isascii() and text.isdigit() and 0 < int(text) < 2**63:
        return int(text)
    return None


def require(request, *perms: str) -> None:
    if not request.user.has_perms(perms):
        raise PermissionDenied


def operator_actor(request) -> Actor:
    return Actor.operator(request.user, request)


def bucket_or_404(request, value) -> Bucket:
    """The bucket ``value`` names, if the operator operates its tenant; else 404."""
    bucket = visible_bucket(request.user, value)
    if bucket is None:
        raise Http404
    return bucket
