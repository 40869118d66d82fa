"""knowledge/*.md: documents an agent reads through `load_knowledge`."""

from __future__ import annotations

from functools import partial

from runtime.repo import _markdown
from runtime.repo._reader import Reader, split_suffix
from runtime.repo.bundle import KnowledgeDocument

KNOWLEDGE_DIR = "knowledge"


def load_knowledge(reader: Reader) -> list[KnowledgeDocument]:
    if not reader.is_dir(KNOWLEDGE_DIR):
        return []
    documents = []
    for name, kind in reader.listing(KNOWLEDGE_DIR).items():
        relative = f"{KNOWLEDGE_DIR}/{name}"
        stem, suffix = split_suffix(name)
        if kind != "file" or suffix != ".md":
            reader.report.warn(relative, "ignored: knowledge documents are `knowledge/*.md` files")
            continue
        document = reader.unit(relative, partial(_load_document, reader, relative, stem))
        if document is not None:
            documents.append(document)
    return documents


def _load_document(reader: Reader, relative: str, name: str) -> KnowledgeDocument | None:
    text = reader.read(relative)
    if text is None:
        return None
    body = _markdown.split(text).body
    first = _markdown.first_heading(body, level=1)
    title = first.title if first is not None else name
    title = title.removeprefix("Knowledge:").strip() or name
    if not body.strip():
        reader.report.warn(relative, "the document is empty")
    return KnowledgeDocument(name, title, body.strip(), relative)
