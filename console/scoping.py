"""Which tenants an operator may see — the one place the console scopes by tenant.

Superusers operate every tenant. Any other staff user operates only the tenants they
are a member of (``tenants.OperatorMembership``); without a membership they see no
tenant data at all. Everything in the console goes through this module:

- :func:`operator_tenant_ids` / :func:`operator_tenants` / :func:`scope_queryset` for the
  console pages (console/views/, console/selectors.py, console/forms.py);
- :class:`TenantScopedAdmin`, the base of every model admin of tenant data: changelists,
  change / delete / history views, actions, autocomplete, FK dropdowns and list filters;
- :func:`enter_operator_scope`, which every console view runs in (``ConsoleAdminSite.admin_view``):
  the tenant scope of the operator's tenants, so that even a query that forgot to narrow
  reads nothing else (engram_site/scoping.py);
- :class:`SuperuserOnlyAdmin` for everything else. ``ConsoleAdminSite.register`` wraps
  any model admin that is not a ``TenantScopedAdmin`` in it, so an admin added later
  without thinking about tenants is closed to tenant operators rather than open to them.

An object outside the operator's tenants answers exactly like a missing one: 404, never
a 403 that would confirm it exists.
"""

from __future__ import annotations

import uuid

from django.contrib import admin
from django.contrib.admin import helpers
from django.contrib.admin.utils import get_fields_from_path
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import Model, QuerySet
from django.http import Http404

from console.changelist import SafeDateHierarchyChangeList
from engram_site.scoping import enter_for_request, scope, scopes_disabled
from tenants.models import Bucket, OperatorMembership, Tenant

# Where the cached tenant ids of a user object live for the rest of its request.
_CACHE_ATTR = "_engram_operator_tenant_ids"


def is_unrestricted(user) -> bool:
    """Superusers operate every tenant."""
    return bool(getattr(user, "is_active", False) and getattr(user, "is_superuser", False))


def operator_tenant_ids(user) -> frozenset | None:
    """The ids of the tenants ``user`` operates; ``None`` means every tenant (a superuser).

    Anonymous, inactive and non-staff users operate none. Cached on the user object,
    which lives as long as its request."""
    if is_unrestricted(user):
        return None
    cached = getattr(user, _CACHE_ATTR, None)
    if cached is not None:
        return cached
    if not (getattr(user, "is_active", False) and getattr(user, "is_staff", False) and getattr(user, "pk", None)):
        ids = frozenset()
    else:
        # Cross-tenant: which tenants the operator may see is what decides their scope.
        with scopes_disabled():
            ids = frozenset(OperatorMembership.objects.filter(user_id=user.pk).values_list("tenant_id", flat=True))
    setattr(user, _CACHE_ATTR, ids)
    return ids


def enter_operator_scope(request) -> None:
    """Run the rest of a console request in the tenant scope of its operator: the tenants
    they operate, every tenant for a superuser (engram_site/scoping.py). The pages narrow
    their querysets themselves as well (:func:`scope_queryset`); the scope is what holds
    for code that forgot to."""
    ids = operator_tenant_ids(request.user)
    if ids is None:
        # Cross-tenant: a superuser operates every tenant.
        enter_for_request(request, scopes_disabled())
    else:
        enter_for_request(request, scope(tenant=sorted(ids, key=str)))


def forget_operator_tenants(user) -> None:
    """Drop the cached ids (after memberships of ``user`` changed in this request)."""
    if hasattr(user, _CACHE_ATTR):
        delattr(user, _CACHE_ATTR)


def operator_tenants(user) -> QuerySet[Tenant]:
    """The tenants ``user`` operates (every tenant for a superuser)."""
    return scope_queryset(Tenant.objects.all(), user=user, tenant_field="pk")


def tenant_field_of(model: type[Model]) -> str | None:
    """The lookup from ``model`` to its tenant, or ``None`` for data outside any tenant."""
    if model is Tenant:
        return "pk"
    try:
        field = model._meta.get_field("tenant")
    except FieldDoesNotExist:
        return None
    return "tenant" if getattr(field, "related_model", None) is Tenant else None


def scope_queryset(queryset: QuerySet, *, user, tenant_field: str | None = None) -> QuerySet:
    """``queryset`` narrowed to the tenants ``user`` operates. ``tenant_field`` is the
    lookup to the tenant (``"tenant"``, ``"bucket__tenant"``, ``"pk"`` for tenants
    themselves); by default it is found on the model. A model outside any tenant is
    visible to superusers only."""
    ids = operator_tenant_ids(user)
    if ids is None:
        return queryset
    field = tenant_field or tenant_field_of(queryset.model)
    if field is None or not ids:
        return queryset.none()
    if field == "pk":
        return queryset.filter(pk__in=ids)
    return queryset.filter(**{f"{field}__in": ids})


def visible_bucket(user, value) -> Bucket | None:
    """The bucket ``value`` names if ``user`` operates its tenant; else ``None`` (also for a
    malformed id)."""
    try:
        pk = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        return None
    return scope_queryset(Bucket.objects.select_related("tenant"), user=user).filter(pk=pk).first()


# --- model admins ---------------------------------------------------------------------------------


class _MissingIsNotFound:
    """The change, delete and history views of an object the operator cannot see (or that
    does not exist) answer 404, instead of Django's redirect with "doesn't exist" (which
    would differ from the answer for an object they see but may not change). Every model
    admin's changelist has a date drill-down that cannot overflow (console/changelist.py)."""

    def get_changelist(self, request, **kwargs):
        return SafeDateHierarchyChangeList

    def get_object(self, request, object_id, from_field=None):
        obj = super().get_object(request, object_id, from_field)
        if obj is None:
            raise Http404
        return obj


class ScopedRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """A list filter on a relation whose choices are the operator's tenants' rows only."""

    def field_choices(self, field, request, model_admin):
        ordering = self.field_admin_ordering(field, request, model_admin)
        related = field.related_model
        visible = scope_queryset(related._default_manager.all(), user=request.user)
        limit = None if is_unrestricted(request.user) else {"pk__in": visible.values("pk")}
        return field.get_choices(include_blank=False, ordering=ordering, limit_choices_to=limit)


class TenantScopedAdmin(_MissingIsNotFound, admin.ModelAdmin):
    """The base of every model admin of tenant data. ``tenant_field`` is the lookup from
    the model to its tenant (``"pk"`` for the tenant admin itself).

    - changelist, search, date drill-down, change / delete / history: the queryset is
      narrowed to the operator's tenants, and an invisible object answers 404;
    - actions: a selection naming an object the operator cannot see (or a missing one)
      answers 404 and runs nothing — a forged POST cannot reach another tenant's rows, even
      mixed with the operator's own;
    - FK dropdowns and autocomplete fields offer, and accept, only the operator's tenants'
      rows (the autocomplete endpoint asks the related model's admin, scoped the same way);
    - list filters on relations list only the operator's tenants' rows.
    """

    tenant_field: str = "tenant"

    def get_queryset(self, request):
        return scope_queryset(super().get_queryset(request), user=request.user, tenant_field=self.tenant_field)

    def get_field_queryset(self, db, db_field, request):
        queryset = super().get_field_queryset(db, db_field, request)
        related = db_field.related_model
        if tenant_field_of(related) is None:
            return queryset
        if queryset is None:
            queryset = related._default_manager.using(db).all()
        return scope_queryset(queryset, user=request.user)

    def get_list_filter(self, request):
        return [self._scoped_filter(spec) for spec in super().get_list_filter(request)]

    def _scoped_filter(self, spec):
        if isinstance(spec, str):
            name = spec
        elif isinstance(spec, tuple) and spec[1] is admin.RelatedFieldListFilter:
            name = spec[0]
        else:
            return spec  # custom filters; RelatedOnlyFieldListFilter reads our (scoped) queryset
        try:
            field = get_fields_from_path(self.model, name)[-1]
        except (FieldDoesNotExist, AttributeError):
            return spec
        if getattr(field, "related_model", None) is None or tenant_field_of(field.related_model) is None:
            return spec
        return (name, ScopedRelatedFieldListFilter)

    def changelist_view(self, request, extra_context=None):
        # Before any action runs, and whether or not the admin has actions at all.
        if request.method == "POST":
            selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
            if selected:
                try:
                    pks = {self.model._meta.pk.to_python(value) for value in selected}
                except ValidationError:
                    raise Http404 from None
                if self.get_queryset(request).filter(pk__in=pks).count() != len(pks):
                    raise Http404
        return super().changelist_view(request, extra_context)


class SuperuserOnlyAdmin(_MissingIsNotFound):
    """Mixed into every model admin that is not a :class:`TenantScopedAdmin` (by
    ``ConsoleAdminSite.register``): data outside any tenant — users, groups, schedules,
    job runs, operator memberships — is for superusers only."""

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        return queryset if is_unrestricted(request.user) else queryset.none()

    def has_module_permission(self, request):
        return is_unrestricted(request.user) and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return is_unrestricted(request.user) and super().has_view_permission(request, obj)

    def has_add_permission(self, request, *args):
        return is_unrestricted(request.user) and super().has_add_permission(request, *args)

    def has_change_permission(self, request, obj=None):
        return is_unrestricted(request.user) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return is_unrestricted(request.user) and super().has_delete_permission(request, obj)


def superuser_only(admin_class: type) -> type:
    """``admin_class`` closed to tenant operators (unchanged if it already is, or if it is
    tenant-scoped)."""
    if issubclass(admin_class, (TenantScopedAdmin, SuperuserOnlyAdmin)):
        return admin_class
    return type(
        admin_class.__name__,
        (SuperuserOnlyAdmin, admin_class),
        {"__module__": admin_class.__module__, "__doc__": admin_class.__doc__},
    )
