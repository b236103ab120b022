"""A confirmation step for model admin actions that change or remove things."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin import helpers
from django.template.response import TemplateResponse


def confirmed(request) -> bool:
    return request.POST.get("confirm") == "yes"


def confirm_action(request, *, queryset, action: str, title: str, message: str, button: str, describe=str):
    """Render "are you sure?" for an admin action; its form posts the action back with
    ``confirm=yes`` and the same selection."""
    context = {
        **admin.site.each_context(request),
        "title": title,
        "message": message,
        "button": button,
        "action": action,
        "items": [(obj.pk, describe(obj)) for obj in queryset],
        "opts": queryset.model._meta,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "console/action_confirm.html", context)
