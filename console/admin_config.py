"""The admin app with the console's site as ``admin.site``.

Its own module, imported while the app registry loads (INSTALLED_APPS names it): it must
not import models, so console/sites.py — which does — is named here, not imported.
"""

from django.contrib.admin.apps import AdminConfig


class ConsoleAdminConfig(AdminConfig):
    default_site = "console.sites.ConsoleAdminSite"
