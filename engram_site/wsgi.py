import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "engram_site.settings")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

application = get_wsgi_application()

from django.conf import settings  # noqa: E402

if settings.ENGRAM_PRELOAD_MODELS:
    from memories import embedding

    embedding.warm_up_in_background()
