"""Forms of the console pages. They validate input only; the views call services.

Forms that pick buckets take the operator (``user``): they offer and accept only the
buckets of the tenants the operator operates (console/scoping.py).
"""

from __future__ import annotations

from django import forms

from console.scoping import visible_bucket
from console.selectors import bucket_choices
from memories.retrieval import MAX_LIMIT, MODES
from memories.topics import TOPIC_MAX_CHARS


class BucketField(forms.TypedChoiceField):
    """A bucket picked from the operator's buckets, grouped by tenant."""

    def __init__(self, **kwargs):
        super().__init__(choices=(), empty_value=None, **kwargs)
        self.user = None  # set per form instance by _with_buckets (fields are copied per form)

    def _coerce(self, value):
        if value == self.empty_value or value in self.empty_values:
            return self.empty_value
        bucket = visible_bucket(self.user, value)
        if bucket is None:
            raise forms.ValidationError("No such bucket.")
        return bucket


def _with_buckets(form: forms.Form, user) -> None:
    choices = [("", "— choose a bucket —"), *bucket_choices(user=user)]
    for field in form.fields.values():
        if isinstance(field, BucketField):
            field.choices = choices
            field.user = user


class BucketMergeForm(forms.Form):
    source = BucketField(label="Source bucket (merged away)")
    target = BucketField(label="Target bucket (receives the memories)")
    remove_source = forms.BooleanField(
        required=False, initial=True, label="Delete the source bucket afterwards (otherwise it is left empty)"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        _with_buckets(self, user)

    def clean(self):
        data = super().clean()
        source, target = data.get("source"), data.get("target")
        if source and target:
            if source.tenant_id != target.tenant_id:
                raise forms.ValidationError("Source and target must belong to the same tenant.")
            if source.pk == target.pk:
                raise forms.ValidationError("Choose two different buckets.")
        return data


class PlaygroundForm(forms.Form):
    bucket = BucketField()
    query = forms.CharField(max_length=4_000, widget=forms.TextInput(attrs={"size": 80, "autofocus": True}))
    mode = forms.ChoiceField(choices=[(m, m) for m in MODES], initial="hybrid")
    limit = forms.IntegerField(min_value=1, max_value=MAX_LIMIT, initial=10)
    token_budget = forms.IntegerField(min_value=1, max_value=1_000_000, required=False)
    include_superseded = forms.BooleanField(required=False, initial=True)

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        _with_buckets(self, user)


class TopicNameField(forms.CharField):
    def __init__(self, **kwargs):
        super().__init__(max_length=TOPIC_MAX_CHARS, strip=True, **kwargs)
