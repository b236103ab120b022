"""Shared fixtures: tenants, buckets, tokens and authenticated API clients (made by
tests/factories.py), and the rules every test runs under.

Every test runs against real PostgreSQL + pgvector: the embedded server (or
DATABASE_URL), in the ``test_engram`` database that pytest-django migrates.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from django.contrib.auth.models import User
from django.test.signals import setting_changed
from rest_framework.test import APIClient

from engram_site.scoping import scopes_disabled
from memories.services.buckets import bucket_create
from tenants import services
from tenants.models import Bucket, Tenant
from tests.factories import make_client
from tests.support.browser import PASSWORD, Console, chromium

_DATABASE_FIXTURES = {"db", "transactional_db", "live_server", "django_db_setup"}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The long tests first, so that the short ones fill the end of a parallel run.

    pytest-django has already put the tests in Django's order (plain database tests, then
    transactional ones, whose flush empties the tables migrations fill, then those without a
    database); pytest-xdist hands them out in that order. Kept: that order between database
    tests. Changed: the modules that start processes (a ``slow`` test in them) go first within
    their group, and those of them that never touch the test database (they start their own
    PostgreSQL, or none) go before everything. Otherwise the longest tests of the suite (a
    topology under load, a database restart) came last and one worker ran them alone.
    Modules move whole, so a module-scoped fixture is still set up once per worker."""

    def group(item) -> int:  # pytest-django's order (pytest_django.plugin.pytest_collection_modifyitems)
        marker = item.get_closest_marker("django_db")
        fixtures = set(getattr(item, "fixturenames", ()))
        transactional = bool(marker and (marker.kwargs.get("transaction") or marker.kwargs.get("reset_sequences")))
        if transactional or fixtures & {"transactional_db", "live_server"}:
            return 2
        return 1 if marker or "db" in fixtures else 3

    def module(item) -> str:
        return item.nodeid.split("::")[0]

    groups = {item: group(item) for item in items}
    slow: set[tuple[str, int]] = set()  # (module, group) holding a slow test
    on_database: set[tuple[str, int]] = set()  # (module, group) with a test that reaches the test database
    for item in items:
        key = (module(item), groups[item])
        if item.get_closest_marker("slow"):
            slow.add(key)
        if groups[item] != 3 or set(getattr(item, "fixturenames", ())) & _DATABASE_FIXTURES:
            on_database.add(key)

    def rank(item) -> tuple[int, bool]:
        key = (module(item), groups[item])
        if key in slow and key not in on_database:
            return (0, False)
        return (groups[item], key not in slow)

    items.sort(key=rank)


@pytest.fixture(autouse=True, scope="session")
def _private_broker(tmp_path_factory):
    """Hints published by the test process (and by processes it starts) go to a broker
    folder of this session, never to $ENGRAM_HOME/broker where a running
    ``./engram serve`` would pick them up."""
    from tests.support import use_broker

    root = tmp_path_factory.mktemp("broker")
    previous = {name: os.environ.get(name) for name in ("ENGRAM_BROKER_DIR", "CELERY_BROKER_URL", "REDIS_URL")}
    os.environ.update(ENGRAM_BROKER_DIR=str(root), CELERY_BROKER_URL="", REDIS_URL="")
    with use_broker("filesystem://", broker_dir=root):
        yield root
    for name, value in previous.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(autouse=True, scope="session")
def _tenant_scopes_lifted():
    """Test bodies and fixtures set up and inspect the rows of several tenants directly, so they
    run with tenant scopes lifted (engram_site/scoping.py): for the whole session, so that module
    fixtures are lifted as well. What a test calls into scopes itself again:
    each request starts with no scope and enters its token's or its operator's, each task the
    scope of the rows it works on (tests/platform/test_scoping.py checks that this fixture does not
    leak into them). A test of scoping itself enters ``scope(...)`` explicitly. A thread starts
    with no scope, as in production: a test's thread that runs test code gets the test's with
    ``Thread(target=in_this_context(fn))``."""
    with scopes_disabled():
        yield


@pytest.fixture(autouse=True, scope="session")
def _quick_password_hashing():
    """Passwords hashed in one round instead of PBKDF2's many: the console and throttle tests log
    in hundreds of times, and what they check is who may do what, not the hash. (Processes a
    test starts keep the production hashers; no test shares a password with one.)"""
    from django.conf import settings

    def use(hashers, enter: bool) -> None:
        settings.PASSWORD_HASHERS = hashers
        # What override_settings sends, so that Django forgets the hashers it cached (not
        # override_settings itself: the settings module would no longer be settings_test's).
        setting_changed.send(sender=settings.__class__, setting="PASSWORD_HASHERS", value=hashers, enter=enter)

    production = settings.PASSWORD_HASHERS
    use(["django.contrib.auth.hashers.MD5PasswordHasher"], enter=True)
    yield
    use(production, enter=False)


@pytest.fixture(autouse=True, scope="session")
def _static_files_listed_once():
    """Django's test client builds the middleware chain anew for every client it makes, and
    WhiteNoise's middleware, which serves from the static finders outside production
    (settings.WHITENOISE_USE_FINDERS), lists and stats every static file of every app when it
    is built: about a fifth of the CPU time of a test that makes an API client or two. The
    files do not change during a session, so the list is made once per configuration and
    every later middleware gets the same entries (the same answers, headers included)."""
    from django.conf import settings
    from whitenoise.middleware import WhiteNoiseMiddleware

    original = WhiteNoiseMiddleware.add_files_from_finders
    listed: dict[tuple, dict] = {}

    def add_files_from_finders(self):
        key = (
            self.static_prefix, self.max_age, self.allow_all_origins, self.charset, self.index_file,
            self.add_headers_function, repr(getattr(settings, "WHITENOISE_MIMETYPES", None)),
            tuple(settings.INSTALLED_APPS), repr(settings.STATICFILES_DIRS), tuple(settings.STATICFILES_FINDERS),
        )  # fmt: skip
        if key not in listed:
            before = dict(self.files)
            original(self)
            listed[key] = {url: entry for url, entry in self.files.items() if before.get(url) is not entry}
        self.files.update(listed[key])

    WhiteNoiseMiddleware.add_files_from_finders = add_files_from_finders
    yield
    WhiteNoiseMiddleware.add_files_from_finders = original


@pytest.fixture(autouse=True)
def _processes_only_in_slow_tests(request):
    """The fast tier (``./engram test --fast``: ``-m "not slow"``) stays fast only if every test
    that starts a process (a server, a worker, a browser, a second PostgreSQL, a script) is marked
    ``slow``: an unmarked one fails here, naming what it started, instead of slowing the tier.
    (A module-scoped fixture's processes start before this looks; its tests are marked by hand.)"""
    if request.node.get_closest_marker("slow"):
        yield
        return
    started: list[str] = []
    original = subprocess.Popen._execute_child

    def recorded(popen, args, *rest, **kwargs):
        started.append(" ".join(map(str, args)) if isinstance(args, list | tuple) else str(args))
        return original(popen, args, *rest, **kwargs)

    subprocess.Popen._execute_child = recorded
    try:
        yield
    finally:
        subprocess.Popen._execute_child = original
    if started:
        pytest.fail(f"{request.node.nodeid} starts processes but is not marked slow: {started}", pytrace=False)


@pytest.fixture(autouse=True)
def _no_module_rows_under_transactional_tests(request):
    """A transactional test's rows are committed (a server in another process reads them): it
    cannot run inside a module's rows held in an open transaction (tests.support.db.ModuleRows),
    which are rolled back first. pytest-django runs transactional tests last, so none needs them
    again."""
    marker = request.node.get_closest_marker("django_db")
    transactional = {"transactional_db", "live_server"} & set(request.fixturenames)
    if (marker and marker.kwargs.get("transaction")) or transactional:
        from tests.support.db import ModuleRows

        ModuleRows.release_all()
    yield


@pytest.fixture
def celery_eager():
    """Tasks run in the calling process, synchronously, when they are queued."""
    from engram_site.celery import app
    from memories import hooks

    hooks.reset_backoff()
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def _clear_cache():
    # Throttling state lives in the caches; tests must not leak it to each other.
    from django.core.cache import cache, caches

    from memories import access
    from memories.retrieval import bucket_stats
    from tenants import usage

    cache.clear()
    caches["shared"].clear()
    access.discard()
    usage.discard()
    bucket_stats.clear()
    yield
    cache.clear()
    caches["shared"].clear()
    access.discard()
    usage.discard()


@pytest.fixture
def tenant(db) -> Tenant:
    return services.tenant_create(name="Acme")


@pytest.fixture
def other_tenant(db) -> Tenant:
    return services.tenant_create(name="Outsider")


@pytest.fixture
def bucket(tenant) -> Bucket:
    return bucket_create(tenant=tenant, name="main")


@pytest.fixture
def other_bucket(other_tenant) -> Bucket:
    return bucket_create(tenant=other_tenant, name="main")


@pytest.fixture
def client_factory(db):
    return make_client


@pytest.fixture
def api(tenant) -> APIClient:
    """A read+write client of ``tenant``."""
    return make_client(tenant)


@pytest.fixture
def admin_api(tenant) -> APIClient:
    return make_client(tenant, scopes=("admin",))


@pytest.fixture
def outsider_api(other_tenant) -> APIClient:
    """An admin client of another tenant: it must never see ``tenant``'s data."""
    return make_client(other_tenant, scopes=("admin",))


@pytest.fixture
def pg_home():
    """A state folder for a private PostgreSQL (tests.support.PrivatePostgres), outside
    pytest's temporary root: the server runs as its own user, and every pytest session
    that starts makes that root 0700 again, after which ``pg_ctl stop`` cannot reach it."""
    import shutil
    import tempfile
    from pathlib import Path

    from engram_site import embedded_pg

    home = Path(tempfile.mkdtemp(prefix="engram-test-pg-"))
    home.chmod(0o755)
    yield home / "home"
    # The server is stopped; this process no longer holds it (its exit hook would recreate the folder).
    embedded_pg._registered.pop((home / "home").resolve(), None)
    shutil.rmtree(home, ignore_errors=True)


# --- the console in a real browser (tests/support/browser.py) --------------------------------------


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = chromium(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def console(browser, live_server, request) -> Console:
    """The console's pages in the browser, against the live server, with a screenshot folder
    for this test; a Content-Security-Policy violation on any page shown fails the test."""
    browser.get_log("browser")  # what earlier tests left
    page = Console(browser, live_server.url, request.node.name)
    yield page
    page.report()
    page.assert_no_csp_violation()  # on the last page


@pytest.fixture
def superuser(transactional_db) -> User:
    """The operator who logs in to the console in the browser (``console.login(superuser)``)."""
    return User.objects.create_superuser("operator", email="", password=PASSWORD)
