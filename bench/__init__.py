"""Benchmarks of the runtime (SPEC 13). They print numbers; tests never assert on them."""
