"""Memory blocks: every write of ``memory_blocks`` and its history (``block_edit_log``).

A block is a named text (``persona``, ``human``, any label) an agent keeps in every prompt, per
bucket and optionally per agent, held to its ``max_tokens``. Writes are optimistic: each names
what it was based on (:class:`Expected`: a version's entity tag, any version, or no block at
all), and the change is a compare-and-set in one statement (``UPDATE … WHERE id AND version``,
or an ``INSERT`` the unique constraint refuses a second time), so of two writers based on the
same version exactly one wins and the other is refused (412) without anything being lost or
half-written. Every change records its version in ``block_edit_log``, an audit event and an
event of the change feed (``block_created``, ``block_updated``, ``block_deleted``:
memories/services/feed_writer.py), in its transaction.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, connection, transaction

from audit.services import Actor, audit_record
from engram_site.exceptions import Conflict, DomainError, NotFound
from engram_site.providers.embedding import count_tokens
from memories.models import (
    BLOCK_LABEL_PATTERN,
    BLOCK_MAX_TOKENS_DEFAULT,
    BLOCK_MAX_TOKENS_LIMIT,
    BlockChange,
    BlockEdit,
    EventKind,
    MemoryBlock,
)
from memories.services.feed_writer import events_erase_blocks, events_record_block
from tenants.models import Bucket, Tenant

_LABEL = re.compile(BLOCK_LABEL_PATTERN)
# A write with If-Match: * that keeps meeting a newer version retries its compare-and-set this
# many times before answering 409 retry (each retry reads the block again).
ANY_VERSION_ATTEMPTS = 5


class PreconditionFailed(DomainError):
    status_code = 412
    code = "precondition_failed"


class PreconditionRequired(DomainError):
    status_code = 428
    code = "precondition_required"


@dataclass(frozen=True)
class Expected:
    """What a write was based on. ``block_id``/``version``: one version (an If-Match entity tag);
    ``any``: whatever version there is (If-Match: *); ``absent``: no block yet (If-None-Match: *);
    none of them: the request said nothing (a create, or 428 for a change)."""

    block_id: uuid.UUID | None = None
    version: int | None = None
    any: bool = False
    absent: bool = False

    @property
    def given(self) -> bool:
        return self.any or self.absent or self.version is not None

    @classmethod
    def from_headers(cls, if_match: str | None, if_none_match: str | None) -> Expected:
        """From the request's If-Match / If-None-Match headers (RFC 9110). An If-Match list may
        name several tags; a block is at one version, so only a list of one is meaningful, and a
        tag that is not one of ours can never match (412)."""
        if if_none_match is not None and if_none_match.strip() == "*":
            return cls(absent=True)
        if if_none_match is not None:
            raise DomainError("If-None-Match takes only *: create the block if there is none.", code="invalid")
        if if_match is None:
            return cls()
        value = if_match.strip()
        if value == "*":
            return cls(any=True)
        match = re.fullmatch(r'"([0-9a-f-]{36})\.([0-9]{1,9})"', value)
        if match is None:
            # Well-formed but not a tag of a block (weak, another resource's, a list): never matches.
            return cls(block_id=uuid.UUID(int=0), version=0)
        return cls(block_id=uuid.UUID(match[1]), version=int(match[2]))


def block_label_check(label: str) -> str:
    if not isinstance(label, str) or not _LABEL.match(label):
        raise DomainError(
            "A block label is 1 to 64 characters: lower-case letters, digits, '_' and '-', starting with a letter "
            "or digit.",
            code="invalid_label",
        )
    return label


def block_tokens(text: str) -> int:
    """What ``text`` costs of a token budget: the count the search budget uses (the model's
    WordPiece tokenizer, or its stated rough estimate); 0 for an empty block."""
    return count_tokens([text])[0] if text else 0


def _check_limit(content: str, max_tokens: int) -> int:
    if not 1 <= max_tokens <= BLOCK_MAX_TOKENS_LIMIT:
        raise DomainError(f"max_tokens is 1 to {BLOCK_MAX_TOKENS_LIMIT}.", code="invalid")
    tokens = block_tokens(content)
    if tokens > max_tokens:
        raise DomainError(
            f"The block's text is {tokens} tokens, over its limit of {max_tokens}: shorten it or raise max_tokens. "
            "Nothing was changed.",
            code="block_too_long",
            extra={"token_count": tokens, "max_tokens": max_tokens},
        )
    return tokens


def _stale(block: MemoryBlock | None) -> PreconditionFailed:
    if block is None:
        return PreconditionFailed("There is no such block (any more): nothing was changed.")
    return PreconditionFailed(
        f"The block is at version {block.version}, not the one this write was based on: read it again and "
        "reapply the change. Nothing was changed.",
        extra={"version": block.version, "etag": block.etag},
    )


def _current(bucket: Bucket, agent_id: str | None, label: str) -> MemoryBlock | None:
    # memory_blocks_owner_label: WHERE tenant_id, bucket_id, agent_id, label.
    return MemoryBlock.objects.for_bucket(bucket).owned_by(agent_id).filter(label=label).first()


def _record(
    *, tenant, block: MemoryBlock, change: str, reason: str, actor: Actor | None, action: str, fields=None
) -> None:
    actor = actor or Actor.system("engram")
    BlockEdit.objects.create(
        block_id=block.pk, tenant_id=block.tenant_id, bucket_id=block.bucket_id, version=block.version,
        change=change, content=block.content, token_count=block.token_count, max_tokens=block.max_tokens,
        reason=reason, actor_kind=str(actor.kind), actor_id=actor.id[:64], actor_label=actor.label[:200],
    )  # fmt: skip
    audit_record(
        actor=actor, action=action, tenant=tenant, object_type="block", object_ids=[block.pk],
        details={"label": block.label, "version": block.version, "tokens": block.token_count, "reason": reason},
    )  # fmt: skip
    kind = EventKind.BLOCK_CREATED if change == BlockChange.CREATED else EventKind.BLOCK_UPDATED
    events_record_block(kind=kind, block=block, actor=actor, reason=reason, fields=fields)


def _create(
    *, bucket: Bucket, agent_id: str | None, label: str, content: str, max_tokens: int | None, reason: str, actor
) -> MemoryBlock:
    limit = max_tokens or BLOCK_MAX_TOKENS_DEFAULT
    tokens = _check_limit(content, limit)
    block = MemoryBlock(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, agent_id=agent_id, label=label, content=content,
        token_count=tokens, max_tokens=limit, version=1,
    )  # fmt: skip
    try:
        with transaction.atomic():  # a savepoint: the losing create leaves the transaction usable
            block.save(force_insert=True)
    except IntegrityError:
        # Another request created it since this one looked: this write was based on its absence.
        raise _stale(_current(bucket, agent_id, label)) from None
    block.refresh_from_db(fields=["created_at", "updated_at"])
    _record(
        tenant=bucket.tenant, block=block, change=BlockChange.CREATED, reason=reason, actor=actor, action="block.create"
    )
    return block


def _update(
    *,
    tenant,
    block: MemoryBlock,
    expected: Expected,
    make: Callable[[MemoryBlock], tuple[str, int]],
    reason: str,
    actor,
) -> MemoryBlock:
    """Change ``block`` to ``make(current block)`` = (content, max_tokens) if it is still at the
    expected version: one ``UPDATE … WHERE version = %s``, so a concurrent writer's commit
    between the read and the write makes this one match no row (412), never overwrite it. With
    ``expected.any`` the change is made again on the newer version (an append or a replacement
    then applies to the text as it now is)."""
    for _attempt in range(ANY_VERSION_ATTEMPTS):
        if not expected.any and (expected.block_id != block.pk or expected.version != block.version):
            raise _stale(block)
        content, max_tokens = make(block)
        tokens = _check_limit(content, max_tokens)
        with connection.cursor() as cur:
            cur.execute(
                """
                UPDATE memory_blocks
                   SET content = %s, token_count = %s, max_tokens = %s, version = version + 1, updated_at = now()
                 WHERE id = %s AND tenant_id = %s AND version = %s
             RETURNING version, updated_at
                """,
                [content, tokens, max_tokens, block.pk, block.tenant_id, block.version],
            )
            row = cur.fetchone()
        if row is not None:
            changed = [name for name, new in (("content", content), ("max_tokens", max_tokens))
                       if getattr(block, name) != new]  # fmt: skip
            block.content, block.token_count, block.max_tokens = content, tokens, max_tokens
            block.version, block.updated_at = row
            _record(
                tenant=tenant, block=block, change=BlockChange.EDITED, reason=reason, actor=actor,
                action="block.update", fields=changed,
            )  # fmt: skip
            return block
        # Someone else's version committed first (or the block was deleted). Of any version, the
        # change is made again on the newer one, with the row locked this time so the next
        # attempt cannot lose again (FOR UPDATE waits for any writer still holding it).
        fresh = MemoryBlock.objects.filter(tenant_id=block.tenant_id, pk=block.pk)
        fresh = (fresh.select_for_update() if expected.any else fresh).first()
        if fresh is None or not expected.any:
            raise _stale(fresh)
        block = fresh
    raise Conflict("The block kept changing under this write; retry it.", code="retry")


@transaction.atomic
def block_put(
    *,
    bucket: Bucket,
    agent_id: str | None,
    label: str,
    content: str,
    max_tokens: int | None = None,
    reason: str = "",
    expected: Expected,
    actor: Actor | None = None,
) -> tuple[MemoryBlock, bool]:
    """Set the block's whole text (and limit, if given); (the block, whether it was created).

    No block yet: created at version 1, unless ``expected`` names a version or any version (412:
    the block it was based on is gone). A block: replaced if ``expected`` matches it (or is
    any version); 412 if it names another version or no block; 428 if it says nothing, since a
    replace not based on what the caller read would silently drop another writer's edit."""
    block_label_check(label)
    block = _current(bucket, agent_id, label)
    if block is None:
        if expected.any or expected.version is not None:
            raise _stale(None)
        created = _create(
            bucket=bucket, agent_id=agent_id, label=label, content=content, max_tokens=max_tokens, reason=reason,
            actor=actor,
        )  # fmt: skip
        return created, True
    if expected.absent:
        raise _stale(block)
    if not expected.given:
        raise PreconditionRequired(
            "The block exists: send If-Match with the ETag of the version this text replaces (or * to replace "
            "whatever is there).",
            extra={"version": block.version, "etag": block.etag},
        )

    def whole(current: MemoryBlock) -> tuple[str, int]:
        return content, max_tokens or current.max_tokens

    updated = _update(tenant=bucket.tenant, block=block, expected=expected, make=whole, reason=reason, actor=actor)
    return updated, False


@dataclass(frozen=True)
class BlockPatch:
    """One change of a block's text (at most one of content, append, replace) and/or its limit."""

    content: str | None = None
    append: str | None = None
    replace: tuple[str, str] | None = None  # (old text, new text): its first occurrence
    max_tokens: int | None = None

    def apply(self, block: MemoryBlock) -> tuple[str, int]:
        text = block.content
        if self.content is not None:
            text = self.content
        elif self.append is not None:
            text = f"{text}\n{self.append}" if text else self.append
        elif self.replace is not None:
            old, new = self.replace
            if old not in text:
                raise Conflict(
                    "The text to replace is not in the block (any more): read it again. Nothing was changed.",
                    code="replace_text_missing",
                    extra={"version": block.version, "etag": block.etag},
                )
            text = text.replace(old, new, 1)
        return text, self.max_tokens or block.max_tokens


@transaction.atomic
def block_patch(
    *,
    bucket: Bucket,
    agent_id: str | None,
    label: str,
    patch: BlockPatch,
    reason: str = "",
    expected: Expected,
    actor: Actor | None = None,
) -> MemoryBlock:
    """Change the block: replace its text, append a line, replace a part, or change its limit.
    ``expected`` must name its version (412 if another) or any version (the change is applied
    to the text as it is when written, retried if another write lands first); 428 without."""
    block = _current(bucket, agent_id, label)
    if block is None:
        raise NotFound("Block not found.")
    if not expected.given:
        raise PreconditionRequired(
            "Send If-Match with the ETag of the version this change is based on (or * to apply it to whatever "
            "version there is).",
            extra={"version": block.version, "etag": block.etag},
        )
    if expected.absent:
        raise _stale(block)
    return _update(tenant=bucket.tenant, block=block, expected=expected, make=patch.apply, reason=reason, actor=actor)


@transaction.atomic
def block_delete(
    *,
    bucket: Bucket,
    agent_id: str | None,
    label: str,
    expected: Expected,
    reason: str = "",
    actor: Actor | None = None,
) -> None:
    """Delete the block with its history, if ``expected`` matches it (one ``DELETE … WHERE
    version``); 412 otherwise, 428 without. Audited as ``block.delete`` (label, last version,
    reason)."""
    block = _current(bucket, agent_id, label)
    if block is None:
        raise NotFound("Block not found.")
    if not expected.given:
        raise PreconditionRequired(
            "Send If-Match with the ETag of the version to delete (or * for whatever version there is).",
            extra={"version": block.version, "etag": block.etag},
        )
    if expected.absent or (not expected.any and (expected.block_id, expected.version) != (block.pk, block.version)):
        raise _stale(block)
    with connection.cursor() as cur:
        version_clause = "" if expected.any else " AND version = %s"
        params = [block.pk, block.tenant_id] + ([] if expected.any else [expected.version])
        cur.execute(
            f"DELETE FROM memory_blocks WHERE id = %s AND tenant_id = %s{version_clause} RETURNING version", params
        )
        row = cur.fetchone()
    if row is None:
        raise _stale(MemoryBlock.objects.filter(tenant_id=block.tenant_id, pk=block.pk).first())
    block.version = row[0]
    actor = actor or Actor.system("engram")
    audit_record(
        actor=actor, action="block.delete", tenant=bucket.tenant,
        object_type="block", object_ids=[block.pk],
        details={"label": block.label, "version": block.version, "reason": reason},
    )  # fmt: skip
    events_record_block(kind=EventKind.BLOCK_DELETED, block=block, actor=actor, reason=reason)


def blocks_move_bucket(*, source: Bucket, target: Bucket, actor: Actor | None = None) -> dict[str, int]:
    """Part of a bucket merge: the source's blocks move to the target with their history. A
    block whose label (and owner) the target already has keeps its text under the label
    ``<label>-from-<8 hex of the source id>`` (cut to fit), so no one's text is lost; the
    target's block keeps its label. Each moved block has a ``block_updated`` event in the
    target's feed (``fields``: bucket_id, and label if renamed; ``from_bucket_id``).
    Returns {"blocks_moved", "blocks_renamed"}."""
    suffix = f"-from-{source.pk.hex[:8]}"
    labels = dict(MemoryBlock.objects.for_bucket(source).values_list("pk", "label"))
    with connection.cursor() as cur:
        # Colliding labels first: renamed in the source, then everything moves in one statement.
        cur.execute(
            """
            UPDATE memory_blocks s SET label = left(s.label, %s) || %s
              FROM memory_blocks t
             WHERE s.tenant_id = %s AND s.bucket_id = %s AND t.tenant_id = s.tenant_id AND t.bucket_id = %s
               AND t.agent_id IS NOT DISTINCT FROM s.agent_id AND t.label = s.label
            """,
            [64 - len(suffix), suffix, source.tenant_id, source.pk, target.pk],
        )
        renamed = cur.rowcount
        cur.execute(
            "UPDATE memory_blocks SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
            [target.pk, source.tenant_id, source.pk],
        )
        moved = cur.rowcount
        cur.execute(
            "UPDATE block_edit_log SET bucket_id = %s WHERE tenant_id = %s AND bucket_id = %s",
            [target.pk, source.tenant_id, source.pk],
        )
    actor = actor or Actor.system("engram")
    for block in MemoryBlock.objects.for_bucket(target).filter(pk__in=list(labels)).order_by("agent_id", "label"):
        fields = ["bucket_id"] + (["label"] if block.label != labels[block.pk] else [])
        events_record_block(
            kind=EventKind.BLOCK_UPDATED, block=block, actor=actor, reason="bucket merge", fields=fields,
            extra={"from_bucket_id": str(source.pk)},
        )  # fmt: skip
    return {"blocks_moved": moved, "blocks_renamed": renamed}


@dataclass(frozen=True)
class BlocksErased:
    blocks: int
    versions: int
    ids: list
    texts: list[str]  # what the blocks said, now and before, and the reasons given: for audit_scrub


def blocks_erase(*, tenant: Tenant, agent_id: str, bucket: Bucket | None = None) -> BlocksErased:
    """Part of an agent's erasure (memories.services.erasure): delete the agent's blocks (in
    ``bucket``, or in every bucket of the tenant) with their history; what they said is returned
    for the audit log's scrub."""
    blocks = MemoryBlock.objects.for_tenant(tenant).filter(agent_id=agent_id)
    if bucket is not None:
        blocks = blocks.filter(bucket_id=bucket.pk)
    ids = list(blocks.values_list("pk", flat=True))
    # The change feed: the blocks' earlier events lose their text, and each gets its block_deleted.
    events_erase_blocks(tenant_id=tenant.pk, block_ids=ids)
    history = BlockEdit.objects.for_tenant(tenant).filter(block_id__in=ids)
    texts = [text for pair in history.values_list("content", "reason") for text in pair if text]
    versions = history.delete()[0]
    deleted = MemoryBlock.objects.for_tenant(tenant).filter(pk__in=ids).delete()[0]
    return BlocksErased(blocks=deleted, versions=versions, ids=ids, texts=texts)
