from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from audit.services import Actor, audit_record
from console.actions import confirm_action, confirmed
from console.scoping import TenantScopedAdmin, is_unrestricted
from console.selectors import tenant_usage_context
from engram_site.exceptions import DomainError
from memories.services import buckets
from tenants import services
from tenants.models import ApiToken, Bucket, OperatorMembership, Scope, Tenant
from tenants.quotas import LIMITS as QUOTA_LIMITS
from tenants.quotas import quota_limits, quotas_clean


def _actor(request) -> Actor:
    return Actor.operator(request.user, request)


class TenantForm(forms.ModelForm):
    """The tenant's fields plus its quotas (tenants/quotas.py), kept in ``settings["quotas"]``."""

    max_memories = forms.IntegerField(required=False, min_value=1, help_text="Live memories; empty: no limit.")
    reads_per_minute = forms.IntegerField(
        required=False, min_value=1, help_text="Read requests (searches included) per minute; empty: no limit."
    )
    writes_per_minute = forms.IntegerField(required=False, min_value=1, help_text="Write requests per minute.")
    max_batch = forms.IntegerField(required=False, min_value=1, help_text="Memories in one write request.")
    max_document_bytes = forms.IntegerField(
        required=False, min_value=1, help_text="UTF-8 bytes of one submitted document's text."
    )

    class Meta:
        model = Tenant
        fields = ["name", "slug", "is_active"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, value in quota_limits(self.instance).items():
            self.fields[name].initial = value

    def save(self, commit=True):
        tenant = super().save(commit=False)
        limits = quotas_clean({name: self.cleaned_data.get(name) for name in QUOTA_LIMITS})
        tenant.settings = {**(tenant.settings or {}), "quotas": limits}
        if commit:
            tenant.save()
        return tenant


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_field = "pk"
    form = TenantForm
    change_form_template = "console/tenant_change_form.html"
    fieldsets = [
        (None, {"fields": ["name", "slug", "is_active"]}),
        ("Quotas", {"fields": list(QUOTA_LIMITS), "description": "Over a limit the API answers 429 (rates) or 403."}),
    ]
    list_display = ["name", "slug", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["id", "created_at"]

    def has_add_permission(self, request):
        # A tenant operator could not see a tenant they created: only superusers create tenants.
        return is_unrestricted(request.user) and super().has_add_permission(request)

    def get_readonly_fields(self, request, obj=None):
        # The id and time come from database defaults: nothing to show before the row exists.
        return self.readonly_fields if obj is not None else []

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        if is_unrestricted(request.user):
            return form
        # A tenant operator sees the tenant's quotas but cannot lift them: superusers set them.
        # (A disabled field keeps its initial value whatever is posted.)
        fields = {name: forms.IntegerField(required=False, disabled=True) for name in QUOTA_LIMITS}
        return type(f"Operator{form.__name__}", (form,), fields)

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return self.fieldsets
        return [(None, {"fields": ["id", "name", "slug", "is_active", "created_at"]}), *self.fieldsets[1:]]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        tenant = self.get_object(request, object_id)
        if tenant is not None:
            extra_context = {**(extra_context or {}), **tenant_usage_context(tenants=[tenant])}
        return super().change_view(request, object_id, form_url, extra_context)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            actor=_actor(request), action="tenant.update" if change else "tenant.create", tenant=obj,
            object_type="tenant", object_ids=[obj.pk], details={"fields": form.changed_data, "name": obj.name},
        )  # fmt: skip

    def delete_model(self, request, obj):
        self.delete_queryset(request, Tenant.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        # Everything the tenant owns goes with it (database cascades), its audit events too:
        # this event is kept outside the tenant.
        with transaction.atomic():
            for tenant in queryset:
                audit_record(
                    actor=_actor(request), action="tenant.delete", tenant=None, object_type="tenant",
                    object_ids=[tenant.pk], details={"name": tenant.name, "slug": tenant.slug},
                )  # fmt: skip
                tenant.delete()


class BucketForm(forms.ModelForm):
    class Meta:
        model = Bucket
        fields = ["tenant", "name", "description", "retention_days"]

    def clean(self):
        data = super().clean()
        # (A new bucket's pk is a database default, not None: ask whether it is being added.)
        tenant = data.get("tenant") or (None if self.instance._state.adding else self.instance.tenant)
        name = (data.get("name") or "").strip()
        if tenant and name:
            # Names are unique regardless of case (the database's rule; tenants.models.Bucket).
            clash = Bucket.objects.for_tenant(tenant).named(name).exclude(pk=self.instance.pk).first()
            if clash:
                # On the field, so that Django does not check the constraint again with a
                # generic message (it skips constraints on fields that have errors).
                self.add_error(
                    "name",
                    f"A bucket named {clash.name!r} already exists in {tenant.name} "
                    "(bucket names are unique regardless of case).",
                )
        return data


@admin.register(Bucket)
class BucketAdmin(TenantScopedAdmin):
    form = BucketForm
    list_display = ["name", "tenant", "retention_days", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__name"]
    list_select_related = ["tenant"]
    readonly_fields = ["id", "created_at"]
    autocomplete_fields = ["tenant"]
    actions = ["merge_into_another"]

    def get_readonly_fields(self, request, obj=None):
        # A bucket's tenant is fixed once it exists (its memories carry the tenant id); the id
        # and time come from database defaults, so there is nothing to show before that.
        return [*self.readonly_fields, "tenant"] if obj is not None else []

    def get_fields(self, request, obj=None):
        # A new bucket keeps deleted memories for the default window; change it once it exists.
        fields = super().get_fields(request, obj)
        return fields if obj is not None else [f for f in fields if f != "retention_days"]

    def save_model(self, request, obj, form, change):
        if change:
            # Only what the form changed, so the audit event names what changed.
            changed = {name: form.cleaned_data[name] for name in ("name", "description", "retention_days")
                       if name in form.changed_data}  # fmt: skip
            if changed:
                buckets.bucket_update(bucket=obj, actor=_actor(request), **changed)
        else:
            bucket = buckets.bucket_create(
                tenant=form.cleaned_data["tenant"],
                name=form.cleaned_data["name"],
                description=form.cleaned_data.get("description") or "",
                actor=_actor(request),
            )
            obj.pk = bucket.pk

    def delete_model(self, request, obj):
        self.delete_queryset(request, Bucket.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for bucket in queryset.select_related("tenant"):
                buckets.bucket_delete(bucket=bucket, actor=_actor(request))

    @admin.action(description="Merge into another bucket…")
    def merge_into_another(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one bucket to merge away.", messages.WARNING)
            return None
        url = reverse("admin:console_bucket_merge") + f"?source={queryset.get().pk}"
        return HttpResponseRedirect(url)


class ApiTokenCreationForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, initial=[Scope.READ, Scope.WRITE], widget=forms.CheckboxSelectMultiple
    )
    agent_ids = forms.CharField(
        required=False,
        label="Agent ids",
        help_text="Comma-separated. The token then reads, edits and deletes only these agents' memories and "
        "writes only as them (no admin scope). Empty: every agent's memories.",
    )

    class Meta:
        model = ApiToken
        fields = ["tenant", "name", "scopes", "bucket", "agent_ids", "include_shared", "expires_at"]

    def clean_agent_ids(self):
        try:
            return services.parse_agent_ids(self.cleaned_data.get("agent_ids") or "")
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None

    def clean(self):
        data = super().clean()
        if data.get("agent_ids") and Scope.ADMIN in (data.get("scopes") or []):
            raise forms.ValidationError("A token held to agents cannot have the admin scope.")
        if data.get("include_shared") and not data.get("agent_ids"):
            raise forms.ValidationError("'Include shared' applies only to a token held to agents.")
        bucket, tenant = data.get("bucket"), data.get("tenant")
        if bucket and tenant and bucket.tenant_id != tenant.pk:
            raise forms.ValidationError("The bucket belongs to another tenant.")
        expires_at = data.get("expires_at")
        if expires_at and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdmin):
    list_display = [
        "name",
        "prefix",
        "tenant",
        "scopes",
        "bucket",
        "agent_ids",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["tenant", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "tenant__name"]
    list_select_related = ["tenant", "bucket"]
    actions = ["revoke"]

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ApiTokenCreationForm
        return super().get_form(request, obj, **kwargs)

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        # A token's identity and powers are fixed; revoke and issue a new one instead.
        return [
            "tenant",
            "name",
            "prefix",
            "scopes",
            "bucket",
            "agent_ids",
            "include_shared",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "scopes", "bucket", "agent_ids", "include_shared", "expires_at"]
        return self.get_readonly_fields(request, obj)

    def save_model(self, request, obj, form, change):
        if change:
            return
        issued = services.token_issue(
            tenant=form.cleaned_data["tenant"],
            name=form.cleaned_data["name"],
            scopes=form.cleaned_data["scopes"],
            bucket=form.cleaned_data.get("bucket"),
            expires_at=form.cleaned_data.get("expires_at"),
            agent_ids=form.cleaned_data.get("agent_ids"),
            include_shared=bool(form.cleaned_data.get("include_shared")),
            actor=_actor(request),
        )
        obj.pk = issued.token.pk
        # Shown exactly once: the message is consumed when the next page renders.
        messages.warning(request, f"Token secret (copy it now, it will not be shown again): {issued.secret}")

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    def delete_model(self, request, obj):
        self.delete_queryset(request, ApiToken.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        services.tokens_delete(tokens=list(queryset.select_related("tenant")), actor=_actor(request))

    @admin.action(description="Revoke selected tokens…", permissions=["delete"])
    def revoke(self, request, queryset):
        queryset = queryset.filter(revoked_at__isnull=True).select_related("tenant")
        if not queryset:
            self.message_user(request, "The selected tokens are already revoked.", messages.INFO)
            return None
        if not confirmed(request):
            return confirm_action(
                request,
                queryset=queryset,
                action="revoke",
                title="Revoke tokens",
                message="Agents using these tokens get 401 from the next request on. This cannot be undone.",
                button=f"Yes, revoke {len(queryset)} token{'s' if len(queryset) != 1 else ''}",
                describe=lambda t: (
                    f"{t.name} ({t.prefix}…) — {t.tenant.name}, last used "
                    + (f"{t.last_used_at:%Y-%m-%d %H:%M} UTC" if t.last_used_at else "never")
                ),
            )
        revoked = services.tokens_revoke(tokens=list(queryset), actor=_actor(request))
        self.message_user(request, f"Revoked {len(revoked)} token(s).", messages.SUCCESS)
        return None


@admin.register(OperatorMembership)
class OperatorMembershipAdmin(admin.ModelAdmin):
    """Which staff users operate which tenants. Not tenant-scoped: ``ConsoleAdminSite``
    makes it superusers-only (a tenant operator must not grant themselves more)."""

    list_display = ["user", "tenant", "created_at"]
    list_filter = ["tenant"]
    list_select_related = ["user", "tenant"]
    search_fields = ["user__username", "tenant__name", "tenant__slug"]
    autocomplete_fields = ["user", "tenant"]
    fields = ["user", "tenant", "created_at"]
    readonly_fields = ["created_at"]

    def has_change_permission(self, request, obj=None):
        # A membership is a pair: remove it and add another rather than re-point it.
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change):
        membership = services.operator_grant(user=obj.user, tenant=obj.tenant, actor=_actor(request))
        obj.pk = membership.pk

    def delete_model(self, request, obj):
        self.delete_queryset(request, OperatorMembership.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for membership in queryset.select_related("user", "tenant"):
                services.operator_revoke(membership=membership, actor=_actor(request))
