"""A separate client process that writes memories through the HTTP API of a live server.

Usage: python -m tests.scripts.http_writer BASE_URL TOKEN BUCKET_ID START_LINE BATCH_SIZE CONTENT...
Waits at START_LINE (tests/scripts/start_line.py) with the other clients (so that they all
collide), posts the
contents in batches of BATCH_SIZE (1: one memory object per request), prints one
JSON line per item: {"content", "status", "id", "deduplicated"}. Standard library
only: it stands for any agent talking to Engram over HTTP.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request

from tests.scripts.start_line import wait_at


def call(method: str, url: str, token: str, body=None, *, timeout: float = 60) -> tuple[int, dict, dict]:
    """One request; returns (status, JSON body or {}, headers). Status 0: no answer in time."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, raw, headers = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        status, raw, headers = exc.code, exc.read(), dict(exc.headers)
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        return 0, {"error": repr(exc)}, {}
    try:
        payload = json.loads(raw) if raw else {}
    except ValueError:
        payload = {"raw": raw[:500].decode(errors="replace")}
    return status, payload, headers


def main() -> None:
    base, token, bucket_id, start_line, batch_size, *contents = sys.argv[1:]
    size = int(batch_size)
    wait_at(start_line)
    url = f"{base}/api/v1/buckets/{bucket_id}/memories"
    for start in range(0, len(contents), size):
        chunk = contents[start : start + size]
        body = {"content": chunk[0]} if size == 1 else {"memories": [{"content": c} for c in chunk], "sequence": False}
        status, payload, _ = call("POST", url, token, body)
        results = payload.get("results") or [{}] * len(chunk)
        for content, result in zip(chunk, results, strict=True):
            line = {
                "content": content,
                "status": status,
                "id": result.get("id"),
                "deduplicated": result.get("deduplicated"),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
