"""knowledge/*.md: documents an agent reads through `load_knowledge`."""

from __future__ import annotations

from functools import partial

from runtime.repo import _markdown
from runtime.repo._reader import Reader
from runtime.repo.bundle import KnowledgeDocument

KNOWLEDGE_DIR = "knowledge"


def load_knowledge(reader: Reader) -> list[KnowledgeDocument]:
    directory = reader.root / KNOWLEDGE_DIR
    if not directory.is_dir():
        return []
    documents = []
    for entry in sorted(directory.iterdir()):
        relative = reader.relative(entry)
        if not entry.is_file() or entry.suffix != ".md":
            reader.report.warn(relative, "ignored: knowledge documents are `knowledge/*.md` files")
            continue
        document = reader.unit(relative, partial(_load_document, reader, relative, entry.stem))
        if document is not None:
            documents.append(document)
    return documents


def _load_document(reader: Reader, relative: str, name: str) -> KnowledgeDocument | None:
    text = reader.read(relative)
    if text is None:
        return None
    body = _markdown.split(text).body
    title = next((h.title for h in _markdown.headings(body) if h.level == 1), name)
    title = title.removeprefix("Knowledge:").strip() or name
    if not body.strip():
        reader.report.warn(relative, "the document is empty")
    return KnowledgeDocument(name, title, body.strip(), relative)
