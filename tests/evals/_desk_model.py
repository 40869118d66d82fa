"""A deterministic stand-in for a model that follows the example repo's agents.

It plays what a capable model does with the example suites' messages (greet with the
Craft Greeting skill, look terms up in the glossary, delegate research, keep notes,
review and record decisions), with one rule a real model also obeys: it can only call
a tool it is offered. So when an agent loses a tool, a skill or a specialist, the
scripted trajectory breaks exactly as a real one would, and the suites fail.

Which play answers a request: the longest trigger found in the last user message (a
specialist's last user message is its task). Which step: one per tool round since
that message, skipping steps whose tool is not offered; then the play's reply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runtime.models import AssistantMessage, UserMessage
from runtime.testing import RecordedRequest, Step, tool_call

DRAFT = "Solar output at plant A rose to 4.2 MW in May. The May ops report is the source."
RESEARCH_TASK = "Find what the knowledge base and research notes say about solar output at plant A."


@dataclass(frozen=True)
class Play:
    trigger: str
    steps: tuple[tuple[str, Mapping[str, Any]], ...]
    reply: Callable[[set[str]], str]
    """The final reply, from the names of the tools the play could call."""


def _always(text: str) -> Callable[[set[str]], str]:
    return lambda called: text


PLAYS = (
    Play(
        "Hello!",
        (
            ("load_skill", {"name": "Craft Greeting"}),
            ("word_count", {"text": "Hello! What can the research desk look into for you?"}),
        ),
        _always("Hello! What can the research desk look into for you?"),
    ),
    Play(
        "What is a Decision",
        (("load_knowledge", {"name": "glossary"}),),
        lambda called: (
            "A Decision is a reviewer's recorded verdict on a draft (Glossary)."
            if "load_knowledge" in called
            else "I am not sure what a Decision is here."
        ),
    ),
    Play(
        "what is a Note?",
        (("load_knowledge", {"name": "glossary"}),),
        _always("A Note is one entry of the research-notes store (Glossary)."),
    ),
    Play(
        "Research what we know",
        (("call_subagent", {"calls": [{"subagent": "researcher", "task": RESEARCH_TASK}]}),),
        _always("The researcher found no note on solar output at plant A yet."),
    ),
    Play(
        "Find what the knowledge base and research notes say",
        (
            ("store__research_notes__query", {"filter": {"topic": "solar output"}}),
            ("load_knowledge", {"name": "glossary"}),
        ),
        _always("No research note covers solar output at plant A yet."),
    ),
    Play(
        "Note this for later",
        (
            (
                "store__research_notes__put",
                {
                    "slug": "plant-a-solar-output",
                    "topic": "solar output",
                    "summary": "Solar output at plant A was 4.2 MW in May.",
                    "confidence": "medium",
                    "sources": ["the May ops report"],
                    "updated": None,
                },
            ),
        ),
        lambda called: (
            "Saved as note:plant-a-solar-output."
            if "store__research_notes__put" in called
            else "I cannot keep notes."
        ),
    ),
    Play(
        "Draft a two-sentence summary",
        (("load_knowledge", {"name": "style-guide"}), ("word_count", {"text": DRAFT})),
        _always(DRAFT),
    ),
    Play(
        "Review this draft",
        (("load_knowledge", {"name": "style-guide"}), ("word_count", {"text": DRAFT})),
        lambda called: (
            "The draft has 16 words and follows the house style."
            if "word_count" in called
            else "The draft follows the house style."
        ),
    ),
    *(
        Play(
            f"Review draft {draft}",
            (
                ("load_knowledge", {"name": "style-guide"}),
                (
                    "store__decisions__put",
                    {
                        "id": draft,
                        "subject": "Solar output at plant A in May",
                        "approved": True,
                        "score": 8,
                        "reviewer": {"name": "Ana"},
                    },
                ),
            ),
            lambda called, draft=draft: (
                f"Approved; the decision is recorded as {draft}."
                if "store__decisions__put" in called
                else "The draft is good, but I cannot record decisions for you."
            ),
        )
        for draft in ("D-7", "D-8")
    ),
)


def desk_responder(request: RecordedRequest) -> Step | str:
    """The answer to one chat request of the example agents (a `ScriptedModel` responder)."""
    messages = request.conversation  # the same on either provider's wire
    last = max((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), default=-1)
    text = request.last_user or ""
    plays = [play for play in PLAYS if play.trigger in text]
    if not plays:
        return "I can help with research, drafts and reviews."
    play = max(plays, key=lambda play: len(play.trigger))
    offered = set(request.tools)
    steps = [step for step in play.steps if step[0] in offered]
    rounds = sum(
        1 for m in messages[last + 1 :] if isinstance(m, AssistantMessage) and m.tool_calls
    )
    if rounds < len(steps):
        name, arguments = steps[rounds]
        return tool_call(name, arguments)
    return play.reply({name for name, _ in steps})
