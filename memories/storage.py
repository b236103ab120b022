"""How much each tenant stores, measured into its usage row (tenants/usage.py).

A measurement scans the tenant's live memories once (``count(*)`` and the UTF-8 size of
their text), so it runs at most every ``MEASURE_SECONDS`` per tenant: when a console usage
page is shown. The charts carry the last measurement forward over days without one.
"""

from __future__ import annotations

from django.core.cache import cache
from django.db.models import BigIntegerField, Count, F, Func, Sum
from django.db.models.functions import Coalesce

from memories.models import Memory
from tenants import usage

MEASURE_SECONDS = 600


def usage_storage_refresh(*, tenant_ids) -> int:
    """Measure the tenants not measured in the last ``MEASURE_SECONDS``; returns how many."""
    due = [tid for tid in tenant_ids if cache.add(f"usage-storage:{tid}", 1, MEASURE_SECONDS)]
    if not due:
        return 0
    measured = {tid: (0, 0) for tid in due}
    # octet_length: bytes of the UTF-8 text (Django's Length counts characters).
    octets = Func(F("content"), function="octet_length", output_field=BigIntegerField())
    rows = (
        Memory.objects.filter(tenant_id__in=due)
        .values("tenant_id")
        .annotate(n=Count("id"), size=Coalesce(Sum(octets), 0))
        .values_list("tenant_id", "n", "size")
    )
    for tenant_id, count, size in rows:
        measured[tenant_id] = (count, size)
    usage.storage_record(measured=measured)
    return len(due)
