"""The console's own pages (registered by console/sites.py under /admin/console/), one module per page.

Views are thin: check the operator's permission, validate, call the same service
the API calls, report. Destructive steps (merges) render a confirmation page first
and act only on a POST carrying ``confirm=yes``. Every change is audited by the
service it calls (the operator is the actor).

Every page sees only the tenants the operator operates (console/scoping.py). An id — in
the path, the query string or the form — naming an object outside them answers 404, like
a missing one, and changes nothing.
"""
