"""Loading an agent repo: every file format, every rule, every problem at once."""

from runtime.repo.loader import LoadResult, load_bundle, load_repo

__all__ = ["LoadResult", "load_bundle", "load_repo"]
