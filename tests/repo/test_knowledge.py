"""knowledge/ (SPEC 1.5): one document per file, titled by its first heading or its name."""

from __future__ import annotations

from ._helpers import load, valid, warnings_in


def test_title_is_the_first_heading_without_the_knowledge_prefix(make_repo):
    root = make_repo({"knowledge/style-guide.md": "# Knowledge: House Style\n\nShort sentences.\n"})

    document = valid(load(root)).bundle.knowledge["style-guide"]

    assert document.title == "House Style"
    assert document.body == "# Knowledge: House Style\n\nShort sentences."
    assert document.file == "knowledge/style-guide.md"


def test_title_is_the_file_name_without_a_heading(make_repo):
    root = make_repo({"knowledge/glossary.md": "Terms.\n\n## Section\n"})

    assert valid(load(root)).bundle.knowledge["glossary"].title == "glossary"


def test_frontmatter_is_not_part_of_the_document(make_repo):
    root = make_repo({"knowledge/faq.md": "---\nowner: docs\n---\n# FAQ\n\nAnswers.\n"})

    document = valid(load(root)).bundle.knowledge["faq"]

    assert (document.title, document.body) == ("FAQ", "# FAQ\n\nAnswers.")


def test_a_file_that_is_not_markdown_is_ignored_with_a_warning(make_repo):
    root = make_repo({"knowledge/data.csv": "a,b\n"})

    result = valid(load(root))

    assert result.bundle.knowledge == {}
    assert "knowledge/*.md" in warnings_in(result, "knowledge/data.csv")[0].message


def test_an_empty_document_is_a_warning(make_repo):
    root = make_repo({"knowledge/empty.md": "\n"})

    result = valid(load(root))

    assert "empty" in warnings_in(result, "knowledge/empty.md")[0].message
