"""What an agent may use, per caller, and what it is told: `caller.py` (who asks, from
verified claims), `resolution.py` (predicates and per-caller resolution with exclusion
reasons), `prompt.py` (the layered system prompt and per-turn context) and
`inspection.py` (`amodal inspect`)."""

from runtime.surface.resolution import Exclusion, Surface, SurfaceContext, resolve

__all__ = ["Exclusion", "Surface", "SurfaceContext", "resolve"]
