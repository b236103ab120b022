from django import forms
from django.contrib import admin, messages
from django.utils import timezone

from tenants import services
from tenants.models import ApiToken, Bucket, Scope, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "is_active", "created_at"]
    list_filter = ["is_active"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["id", "created_at"]


@admin.register(Bucket)
class BucketAdmin(admin.ModelAdmin):
    list_display = ["name", "tenant", "created_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "tenant__name"]
    list_select_related = ["tenant"]
    readonly_fields = ["id", "created_at"]
    autocomplete_fields = ["tenant"]


class ApiTokenCreationForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices, initial=[Scope.READ, Scope.WRITE], widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = ApiToken
        fields = ["tenant", "name", "scopes", "bucket", "expires_at"]

    def clean(self):
        data = super().clean()
        bucket, tenant = data.get("bucket"), data.get("tenant")
        if bucket and tenant and bucket.tenant_id != tenant.pk:
            raise forms.ValidationError("The bucket belongs to another tenant.")
        expires_at = data.get("expires_at")
        if expires_at and expires_at <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "prefix",
        "tenant",
        "scopes",
        "bucket",
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
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["tenant", "name", "scopes", "bucket", "expires_at"]
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
        )
        obj.pk = issued.token.pk
        # Shown exactly once: the message is consumed when the next page renders.
        messages.warning(request, f"Token secret (copy it now, it will not be shown again): {issued.secret}")

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            services.token_revoke(token=token)
        self.message_user(request, f"Revoked {queryset.count()} token(s).", messages.SUCCESS)
