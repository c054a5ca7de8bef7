"""The pages people use (SPEC §12): Django templates over the selectors and services.

Views here are thin: they read through `agentruns.selectors`, act through
`agentruns.services`, and turn error codes into words with `agentruns.pages.words`.
"""
