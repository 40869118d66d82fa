"""The turn engine: internal, not part of the public API (everything outside reaches it
through `runtime.api.Runtime`).

Read it in this order: `chats.py` (ChatService: what can refuse a request, then a
claimed `Turn`), `turn.py` (one turn: re-rooting, the surface, the prompt, the root
run, `done`), `runs.py` (a run's record at any depth, and specialists), `loop.py` (one
run: model call, tools, budgets, approvals). Around them: `rooting.py` (which agent
roots a turn), `leases.py` (one turn per session), `log.py` (the session's log: typed
entries and the wire events they stand for), `transcript.py` (what the model is shown),
`streams.py` (turns that outlive their HTTP client) and `model_pool.py` (which model
answers a call).
"""
