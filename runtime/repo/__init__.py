"""Loading an agent repo: every file format, every rule, every problem at once."""

from runtime.repo.loader import LoadCache, LoadResult, load_bundle, load_repo

__all__ = ["LoadCache", "LoadResult", "load_bundle", "load_repo"]
