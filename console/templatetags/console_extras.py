"""Small template filters for the console pages."""

from django import template
from django.template.defaultfilters import filesizeformat

register = template.Library()


@register.filter(name="bytes")
def bytes_(value):
    return "—" if value in (None, "") else filesizeformat(value)


@register.filter
def dictitem(mapping, key):
    return (mapping or {}).get(key)


@register.filter
def pretty(value):
    """A float rounded for the explain columns."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return value
