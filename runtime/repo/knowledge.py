"""knowledge/*.md: documents an agent reads through `load_knowledge`."""

from __future__ import annotations

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
        text = reader.read(relative)
        if text is None:
            continue
        body = _markdown.split(text).body
        title = next((h.title for h in _markdown.headings(body) if h.level == 1), entry.stem)
        title = title.removeprefix("Knowledge:").strip() or entry.stem
        if not body.strip():
            reader.report.warn(relative, "the document is empty")
        documents.append(KnowledgeDocument(entry.stem, title, body.strip(), relative))
    return documents
