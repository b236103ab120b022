"""Create the first operator account if there is none, and say how to log in."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create an 'admin' superuser with a random password when no superuser exists."

    def handle(self, *args, **options):
        User = get_user_model()
        path = settings.ENGRAM_HOME / "initial_admin_password"
        if User.objects.filter(is_superuser=True).exists():
            if path.exists():
                self.stdout.write(f"Admin login: user 'admin', password in {path}")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", email="", password=password)
        path.write_text(password + "\n")
        path.chmod(0o600)
        self.stdout.write(f"Created admin user 'admin' with password: {password}")
        self.stdout.write(f"(also saved in {path}; change it in the admin)")
