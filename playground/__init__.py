"""The pages people use (SPEC §12): home, the playground and its inspector, the inbox and
the runs, as a Django app beside the engine (`agentruns`).

Views here are thin: they act through `agentruns.services`, read through
`agentruns.selectors` and `agentruns.policy`, and say what an error code means with
`agentruns.words`. How a run executes, is stored, gated or sent is the engine's; an
import-linter contract keeps it so.
"""
