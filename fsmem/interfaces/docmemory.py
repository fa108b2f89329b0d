"""The SDK's DocMemoryAPI over a Memory: insert, insert_with_media, query, remove, stats.

Doc.content is rendered from the unit's events (a view, never truncated); Doc.title maps to
the unit's summary, as the HomeAgent kernel maps Title↔Summary.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from fsmem.format.model import MediaAttachment
from fsmem.memory.facade import Memory

__all__ = ["Doc", "DocMemory"]


class Doc(msgspec.Struct, kw_only=True, omit_defaults=True):
    """SDK Doc: ``id``, ``title``, ``content``, ``score``, ``media_digests``, ``attachments``."""

    id: str = ""
    title: str = ""
    content: str = ""
    score: float = 0.0
    media_digests: list[str] = []
    attachments: list[MediaAttachment] = []


class DocMemory:
    """L2 as the SDK sees it. ``source`` labels inserts (the kernel uses ``plugin:<name>``)."""

    def __init__(self, mem: Memory, *, source: str = "manual") -> None:
        self.mem = mem
        self.source = source

    def insert(self, doc: Doc) -> str:
        return self.insert_with_media(doc, ())

    def insert_with_media(self, doc: Doc, attachments: Sequence[MediaAttachment]) -> str:
        """Write ``doc`` as one L2 unit; attachments with data are new blocks, digest-only
        ones link blocks already in the store. Sets and returns ``doc.id``."""
        atts = [*doc.attachments, *attachments,
                *(MediaAttachment(digest=d) for d in doc.media_digests)]
        doc.id = self.mem.commit(doc.content, summary=doc.title, attachments=atts,
                                 source=self.source)
        return doc.id

    def query(self, text: str, top_k: int = 3) -> list[Doc]:
        """Read-only search: each Doc has its full content view; media as digests only."""
        out = []
        for hit in self.mem.query(text, top_k):
            d = self.mem.document(hit.unit_id)
            media = [b for b in d.blocks if b.modality != "text"]
            out.append(Doc(id=d.id, title=d.summary, content=d.content, score=hit.score,
                           media_digests=[b.digest for b in media],
                           attachments=[MediaAttachment(digest=b.digest, mime=b.mime,
                                                        name=b.name) for b in media]))
        return out

    def remove(self, unit_id: str) -> None:
        """Delete an L2 unit (an explicit request; nothing else in fsmem deletes memory)."""
        self.mem.remove(unit_id)

    def stats(self) -> dict[str, int]:
        return self.mem.stats()
