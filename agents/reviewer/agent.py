"""The reviewer's surface depends on who is asking.

Permission predicates read verified claims (`ctx.claims`), never the request
context: a client can put anything in `context`, but claims come only from the
caller's credentials.
"""


def is_manager(ctx):
    return ctx.claims["role"] == "manager"


def on_review_page_or_delegated(ctx):
    # Curation by page state must allow delegation explicitly: a specialist
    # inherits the caller's context with is_subagent set.
    return ctx.is_subagent or ctx.context.get("page") == "review"


agent = {
    "tools": ["load_knowledge", {"name": "word_count", "conditional": on_review_page_or_delegated}],
    "stores": {
        "research-notes": "read",
        "decisions": {"mode": "rw", "conditional": is_manager},
    },
    "maxToolCalls": 8,
}
