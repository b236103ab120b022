"""Brute-force protection for the console's login form.

Failed logins are counted per client address and per username in the cache every
worker process shares (engram_site/throttle.py). Past the address limit the form is
shown again with an error and status 429, and the password is not even checked, so
guessing goes no faster however many workers there are. Past the username limit the
same holds for every address that has itself failed a login within the window; an
address with no failures still has its password checked, so guessing at a username
cannot lock its owner out (a guesser gets one more try per fresh address). Behind a
proxy listed in FORWARDED_ALLOW_IPS the address is the client's it forwards
(tenants.auth.client_address). A successful login clears its username's count (not
its address's: one operator's success must not buy an attacker on the same address a
fresh budget).

Nothing an attacker typed is logged: the log line names the address and which limit
was hit, never the username or the password.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from engram_site.throttle import FailureCounter
from tenants.auth import client_address

logger = logging.getLogger("engram.security")

THROTTLED_MESSAGE = "Too many failed login attempts. Try again in {minutes} minute{s}."


def _counters() -> tuple[FailureCounter, FailureCounter]:
    return (
        FailureCounter("admin-login-address", settings.ENGRAM_LOGIN_FAILURES_PER_ADDRESS),
        FailureCounter("admin-login-username", settings.ENGRAM_LOGIN_FAILURES_PER_USERNAME),
    )


def _username_key(username: str) -> str:
    return username.strip().casefold()


class ThrottledAuthenticationForm(AdminAuthenticationForm):
    """The admin's login form, refusing to check passwords past the failure limits."""

    #: seconds to wait, set when the form refused because of the limits (the site answers 429)
    throttled_for: int = 0

    def clean(self):
        by_address, by_username = _counters()
        address = client_address(self.request) if self.request is not None else "unknown"
        username = _username_key(self.cleaned_data.get("username") or "")
        waits = {"address": by_address.blocked_for(address)}
        if username and by_address.has_failed(address):
            # A username past its limit refuses only addresses that have failed a login
            # themselves: anyone can fail logins as 'admin', and a hard lock would let them
            # keep the operator out. A clean address still has its password checked.
            waits["username"] = by_username.blocked_for(username)
        wait = max(waits.values())
        if wait:
            self.throttled_for = wait
            logger.warning(
                "admin login refused: too many failures (%s limit) from %s",
                " and ".join(name for name, w in waits.items() if w),
                address,
            )
            minutes = max(1, -(-wait // 60))
            raise ValidationError(THROTTLED_MESSAGE.format(minutes=minutes, s="" if minutes == 1 else "s"),
                                  code="throttled")  # fmt: skip
        try:
            data = super().clean()
        except ValidationError:
            by_address.record(address)
            if username:
                by_username.record(username)
            raise
        if username:
            by_username.clear(username)
        return data
