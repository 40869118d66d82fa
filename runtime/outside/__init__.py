"""The live clients of outside systems: MCP servers (`mcp.py`), REST connections
(`rest.py`), the secrets they use and scrub (`secrets.py`), and `amodal validate
--online` (`online.py`)."""
