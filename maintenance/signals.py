"""Signals of the maintenance app, for the apps above it (connected in their AppConfig.ready)."""

from django.dispatch import Signal

# bucket: the link pass recorded new links in this bucket. A receiver may return how many
# memories it marked superseded (the graph's supersession pass); the pass reports the sum.
links_recorded = Signal()
