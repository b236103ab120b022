"""Python client of Engram, the memory service for AI agents.

    from engram_client import Engram

    with Engram() as engram:                     # ENGRAM_URL, ENGRAM_TOKEN
        bucket = next(engram.list_buckets())
        engram.add_memory(bucket.id, "My sister lives in Porto.", attributed_to="user")
        for hit in engram.search(bucket.id, "where does my sister live?"):
            print(hit.score, hit.content)

:class:`AsyncEngram` has the same methods, awaited. The MCP server built on it is
:mod:`engram_client.mcp` (the ``engram-mcp`` command).
"""

from engram_client._async import AsyncEngram
from engram_client._core import UNSET, RetryPolicy, __version__
from engram_client._sync import Engram
from engram_client.errors import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    Conflict,
    EngramError,
    NotFound,
    PermissionDenied,
    PreconditionFailed,
    PreconditionRequired,
    RateLimited,
    RequestTooLarge,
    ServerError,
    ServiceUnavailable,
    ValidationError,
)
from engram_client.models import (
    Block,
    BlockVersion,
    Bucket,
    DeletedMemory,
    Edge,
    EdgeMemories,
    Entity,
    EntityRef,
    ErasureResult,
    Feedback,
    History,
    ImportResult,
    LearnedRanking,
    Memory,
    MergeResult,
    Model,
    Profile,
    ProfileFact,
    ProfileMemory,
    RelatedEntity,
    SearchHit,
    SearchResult,
    Source,
    SourceDeleted,
    SourceSubmitted,
    Version,
    WriteResult,
)

__all__ = [
    "UNSET",
    "APIConnectionError",
    "APITimeoutError",
    "AsyncEngram",
    "AuthenticationError",
    "Block",
    "BlockVersion",
    "Bucket",
    "Conflict",
    "DeletedMemory",
    "Edge",
    "EdgeMemories",
    "Engram",
    "EngramError",
    "Entity",
    "EntityRef",
    "ErasureResult",
    "Feedback",
    "History",
    "ImportResult",
    "LearnedRanking",
    "Memory",
    "MergeResult",
    "Model",
    "NotFound",
    "PermissionDenied",
    "PreconditionFailed",
    "PreconditionRequired",
    "Profile",
    "ProfileFact",
    "ProfileMemory",
    "RateLimited",
    "RelatedEntity",
    "RequestTooLarge",
    "RetryPolicy",
    "SearchHit",
    "SearchResult",
    "ServerError",
    "ServiceUnavailable",
    "Source",
    "SourceDeleted",
    "SourceSubmitted",
    "ValidationError",
    "Version",
    "WriteResult",
    "__version__",
]
