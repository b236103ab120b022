"""The changelist of every model admin: Django's, with a date drill-down that cannot overflow.

Django bounds a drill-down period by the start of the next one (the next year, month or day),
which does not exist for the last of the calendar: ``?created_at__year=9999`` raised a
ValueError and the month and day of 31 December 9999 an OverflowError, a 500 for rows already
stored that late. Such a period here runs to the end of time instead: ``>= start``, no ``<``.
A year, month or day too large for a date at all (``?created_at__year=99999999999999999999``)
is an invalid lookup, as one that is not a number: Django's redirect with ``?e=1``, not a 500.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.utils.timezone import make_aware


class SafeDateHierarchyChangeList(ChangeList):
    def get_filters(self, request):
        field = self.date_hierarchy
        names = [f"{field}__{part}" for part in ("year", "month", "day")] if field else []
        start = _period_start(*(self.filter_params.get(name) for name in names)) if field else None
        if start is None or _has_next_period(start, *(self.filter_params.get(name) for name in names[1:])):
            return super().get_filters(request)
        # The last period of the calendar: Django would compute its end and fail. Filter on its
        # start alone, for the length of this call; the drill-down links still read the
        # year, month and day from the query string.
        saved = self.filter_params
        self.filter_params = {key: value for key, value in saved.items() if key not in names}
        self.filter_params[f"{field}__gte"] = [make_aware(start) if settings.USE_TZ else start]
        try:
            return super().get_filters(request)
        finally:
            self.filter_params = saved


def _period_start(year, month, day) -> datetime | None:
    """The period's first moment, or None when there is no period or Django should judge it
    (a value that is not a date is Django's IncorrectLookupParameters). A number too large for
    a date raises IncorrectLookupParameters here: Django's own check lets OverflowError through."""
    if year is None:
        return None
    try:
        return datetime(int(year[-1]), int(month[-1]) if month else 1, int(day[-1]) if day else 1)
    except OverflowError as exc:
        raise IncorrectLookupParameters(exc) from exc
    except (TypeError, ValueError):
        return None


def _has_next_period(start: datetime, month, day) -> bool:
    """Whether Django can compute the start of the period after the one beginning at ``start``
    (with the same arithmetic as ChangeList.get_filters)."""
    try:
        if day:
            start + timedelta(days=1)
        elif month:
            (start + timedelta(days=32)).replace(day=1)
        else:
            start.replace(year=start.year + 1)
    except (OverflowError, ValueError):
        return False
    return True
