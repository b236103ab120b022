"""The memories app's HTTP endpoints, one module per resource (routes: memories/urls.py).

Each module validates a request, calls the write gateway (memories.services) or a selector,
and serialises the answer; the input shapes several endpoints (and other apps) share are in
memories.serializers.
"""
