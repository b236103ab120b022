"""What the sources app tells itself after a commit (its receivers are connected in
SourcesConfig.ready). The services that store a source cannot import the task that processes
it: sources.tasks imports the services its tasks run, so a service importing the tasks would
close a cycle. They announce the source instead, and sources/receivers.py queues the task."""

from django.dispatch import Signal

# source_id: a source waits to be processed (submitted, submitted again, retried by an
# operator); sent after the commit that made it pending.
source_pending = Signal()
