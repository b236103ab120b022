"""Tenant scopes: a tenant-owned table cannot be read without saying whose rows are meant.

Platform layer: no domain imports. Built on django-scopes' context variable
(``scope``/``scopes_disabled``, re-exported here so the apps have one door).

The rule, for every model whose rows belong to a tenant (a ``tenant_id`` column, or a relation
to a row that has one; ``tenant_owned_models()`` lists them and a test checks the list):

- Its default manager (``objects``) is a :class:`TenantScopedManager`. Inside
  ``scope(tenant=A)`` (a tenant, its id, or a list of them) every queryset it starts holds
  only A's rows, also in code that forgot to filter.
- Outside any scope a query raises :class:`ScopeError` — except one that names its tenant
  itself: ``Model.objects.for_tenant(t)`` and ``.for_bucket(b)`` start a queryset filtered
  by that tenant, and so count as a scope. Everything else (``filter``, ``get``, ``count``,
  the models' own queryset methods, related managers, ``prefetch_related``, a subquery)
  refuses with a message that says so; ``all()`` gives a copy that refuses when read (forms
  copy their querysets with it when a class is defined). Creating rows (``create``,
  ``bulk_create``) and ``none()`` need no scope. ``scope(tenant=None)`` is no scope: it never
  means every tenant.
- ``scopes_disabled()`` lifts the rule, for work that is about every tenant (a sweep, the
  lookup of a token before its tenant is known, metrics). Each use says why in a comment;
  ``git grep scopes_disabled`` lists them all.

Scopes are entered where work comes in: a request (:class:`TenantScopeMiddleware` starts
each one with no scope; API authentication and the console enter theirs with
:func:`enter_for_request`), a Celery task (:class:`ScopedTask`), a management command.
Raw SQL is not affected: it names its tenant in its own WHERE clause.

A context variable does not follow work into another thread: a thread started here runs with
no scope. Hand it the caller's with :func:`in_this_context`.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from celery import Task
from django.apps import apps
from django.db import models
from django_scopes import ScopeError, get_scope, scope, scopes_disabled

__all__ = [
    "ScopeError",
    "ScopedTask",
    "TenantScopeMiddleware",
    "TenantScopedManager",
    "enter_for_request",
    "in_this_context",
    "scope",
    "scoped_manager",
    "scopes_disabled",
    "tenant_owned_models",
    "tenant_scope",
]

# The queryset methods that name a tenant themselves (engram_site/querysets.py): allowed
# outside a scope, they return an ordinary queryset filtered by that tenant.
NAMING_METHODS = ("for_tenant", "for_bucket")
# What needs no scope: no row is read (creating rows, an empty queryset, choosing the database,
# a copy — forms copy the querysets of their choice fields with all() when a class is defined).
ALLOWED_METHODS = ("as_manager", "create", "acreate", "bulk_create", "abulk_create", "none", "using", "all")


def _tenant_pk(value: Any) -> Any:
    return getattr(value, "pk", value)


def _refusal(queryset: models.QuerySet, what: str) -> ScopeError:
    name = queryset.model.__name__
    return ScopeError(
        f"{what} on {name} without a tenant scope: {name} is tenant-owned. Start the query with "
        ".for_tenant(tenant) or .for_bucket(bucket), run it inside scope(tenant=...) (requests and tasks "
        "enter one), or, for work across tenants, inside scopes_disabled() with a comment saying why."
    )


@functools.cache
def _refusing_class(queryset_class: type[models.QuerySet]) -> type[models.QuerySet]:
    """``queryset_class`` with every read refused; ``for_tenant``/``for_bucket`` turn it
    back into an ordinary ``queryset_class`` filtered by the tenant they are given."""

    def refuse(name: str):
        def refused(self, *args, **kwargs):
            raise _refusal(self, name)

        refused.__name__ = name
        return refused

    def names_tenant(name: str):
        def method(self, *args, **kwargs):
            unlocked = queryset_class(model=self.model, query=self._query, using=self._db, hints=self._hints)
            return getattr(unlocked, name)(*args, **kwargs)

        method.__name__ = name
        return method

    def none(self):
        # An empty queryset reads nothing; unlocked, so that chaining onto it stays possible.
        return queryset_class(model=self.model, query=self._query.chain(), using=self._db, hints=self._hints).none()

    def using(self, alias):
        return type(self)(model=self.model, query=self._query.chain(), using=alias, hints=self._hints)

    def copy(self):
        return type(self)(model=self.model, query=self._query.chain(), using=self._db, hints=self._hints)

    def refused_query(self):
        # A queryset used as a subquery (Exists, Subquery, __in) is compiled through .query.
        raise _refusal(self, "query")

    attrs: dict[str, Any] = {"__module__": __name__}
    for name in dir(queryset_class):
        if name.startswith("_") or name in ALLOWED_METHODS:
            continue
        if name in NAMING_METHODS:
            attrs[name] = names_tenant(name)
        elif callable(getattr(queryset_class, name)):
            attrs[name] = refuse(name)
    for dunder in ("__iter__", "__aiter__", "__len__", "__bool__", "__getitem__", "__and__", "__or__", "__xor__"):
        attrs[dunder] = refuse(dunder)
    attrs["none"] = none
    attrs["using"] = using
    attrs["all"] = copy
    attrs["query"] = property(refused_query, models.QuerySet.query.fset)
    attrs["ordered"] = property(lambda self: refused_query(self))
    attrs["__repr__"] = lambda self: f"<{type(self).__name__}: no tenant scope>"
    return type(f"Unscoped{queryset_class.__name__}", (queryset_class,), attrs)


class TenantScopedManager(models.Manager):
    """The default manager of a tenant-owned model: querysets narrowed to the active tenant
    scope, refused without one (see the module's docstring). ``tenant_lookup`` is the path
    from the model to its tenant's id: ``tenant_id``, or e.g. ``memory__tenant_id`` for a
    table that reaches its tenant through a relation (which costs a join)."""

    tenant_lookup = "tenant_id"

    def get_queryset(self) -> models.QuerySet:
        queryset = super().get_queryset()
        current = get_scope()
        if not current.get("_enabled", True):
            return queryset
        tenant = current.get("tenant")
        if tenant is None:
            queryset.__class__ = _refusing_class(type(queryset))
            return queryset
        if isinstance(tenant, (list, tuple, set, frozenset)):
            return queryset.filter(**{f"{self.tenant_lookup}__in": [_tenant_pk(t) for t in tenant]})
        return queryset.filter(**{self.tenant_lookup: _tenant_pk(tenant)})


def scoped_manager(
    queryset_class: type[models.QuerySet] = models.QuerySet, *, tenant: str = "tenant_id"
) -> TenantScopedManager:
    """A :class:`TenantScopedManager` with ``queryset_class``'s methods, reaching the tenant
    by the lookup ``tenant``. ``TenantScopedQuerySet.as_manager()`` is this with ``tenant_id``."""
    manager_class = TenantScopedManager.from_queryset(queryset_class)
    # On the class, not the instance: a related manager (``source.chunks``) is an instance of a
    # subclass of the default manager's class.
    manager_class.tenant_lookup = tenant
    return manager_class()


def tenant_owned_models() -> list[type[models.Model]]:
    """Every installed model whose default manager is tenant-scoped."""
    return [model for model in apps.get_models() if isinstance(model._default_manager, TenantScopedManager)]


def tenant_scope(tenants: Iterable | Any) -> contextlib.AbstractContextManager:
    """``scope(tenant=...)`` for one tenant (or id) or several; an empty list sees no rows."""
    if isinstance(tenants, (list, tuple, set, frozenset)):
        return scope(tenant=[_tenant_pk(t) for t in tenants])
    return scope(tenant=_tenant_pk(tenants))


# --- requests ----------------------------------------------------------------------------------

_REQUEST_ATTR = "_engram_tenant_scopes"


class TenantScopeMiddleware:
    """Every request starts with no tenant scope, whatever its thread ran before, and ends
    with the scopes entered during it closed.

    Authentication enters the scope of the request's tenant with :func:`enter_for_request`;
    it then spans the view, the rendering of its answer and, for a streamed answer, every
    chunk of it (produced after this middleware has returned).
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        with contextlib.ExitStack() as stack:
            stack.enter_context(scope(tenant=None))
            setattr(request, _REQUEST_ATTR, stack)
            try:
                response = self.get_response(request)
                if getattr(response, "streaming", False) and not getattr(response, "is_async", False):
                    response.streaming_content = _in_context(response.streaming_content, contextvars.copy_context())
                return response
            finally:
                delattr(request, _REQUEST_ATTR)


def enter_for_request(request, context: contextlib.AbstractContextManager) -> None:
    """Enter ``context`` (a ``scope(...)`` or ``scopes_disabled()``) for the rest of ``request``."""
    django_request = getattr(request, "_request", request)  # a DRF Request wraps Django's
    stack = getattr(django_request, _REQUEST_ATTR, None)
    if stack is None:
        raise RuntimeError("engram_site.scoping.TenantScopeMiddleware is not in MIDDLEWARE")
    stack.enter_context(context)


def _in_context(chunks: Iterable, context: contextvars.Context) -> Iterator:
    iterator = iter(chunks)
    while True:
        try:
            chunk = context.run(next, iterator)
        except StopIteration:
            return
        yield chunk


# --- tasks and threads --------------------------------------------------------------------------


class ScopedTask(Task):
    """The base of every Celery task (``task_cls`` of the app): a task runs in a scope of its
    own, never in that of whoever ran it (an eager task in a request, a test).

    ``tenant_scope`` (a task option) is a function of the task's arguments returning the
    tenant ids its rows belong to; the task runs in ``scope(tenant=those ids)``. Without it
    the task runs with no scope: a sweep over every tenant says so with ``scopes_disabled()``
    in its body.
    """

    tenant_scope: Callable[..., Iterable] | None = None

    def __call__(self, *args, **kwargs):
        resolve = type(self).tenant_scope
        with scope(tenant=None):
            context = tenant_scope(list(resolve(*args, **kwargs))) if resolve else contextlib.nullcontext()
            with context:
                return super().__call__(*args, **kwargs)


def in_this_context(function: Callable) -> Callable:
    """``function`` bound to a copy of the current context (its tenant scope included), for
    a thread or an executor: ``Thread(target=in_this_context(work))``."""
    return functools.partial(contextvars.copy_context().run, function)
