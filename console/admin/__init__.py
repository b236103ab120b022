"""The model pages of the operator console, one module per app whose tables they show.

They live in the console, the top layer, because they use its scoping and confirmation
helpers and call the services of every app below it (docs/ARCHITECTURE.md). Django's
admin autodiscovery imports ``console.admin``; importing the modules registers them.
"""

from console.admin import audit, maintenance, memories, sources, tenants, webhooks  # noqa: F401
