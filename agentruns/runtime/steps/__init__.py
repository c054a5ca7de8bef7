"""The units of the loop that act, each a layer of the executor: `base` (state, config,
the one write), `endings`, `gating`, `compact`, `tool_calls`, `model_turn`."""
