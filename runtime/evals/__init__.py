"""Evals (SPEC 18): suites of cases in `evals/`, run against the repo's agents and graded.

- `suite`: the file format (`SuiteFile`, checked strictly) and what a valid file
  becomes (`Suite`, `Case`); loading and reference checks live with the other repo
  files in `runtime.repo.evals`, so `amodal validate` reports suites too.
- `runner`: `run_evals`, every case in a fresh session on a throwaway database,
  concurrently, repeated; `expectations` and `judge` grade what a case did.
- `report`: run records under `.amodal/evals/`, JUnit XML, `--compare`;
  `terminal`: `amodal eval` as a person runs it.

Importing this package loads the format only: the runner and the terminal (which
needs `rich`) load when a run starts.
"""

from runtime.repo.eval_suites import EXPECTATIONS, Case, Expect, Suite, SuiteFile

__all__ = ["EXPECTATIONS", "Case", "Expect", "Suite", "SuiteFile"]
