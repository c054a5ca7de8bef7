"""The loop's actions, one for each `next_action` (`model_turn`, `call_tools` and the
endings' `finish`), and what they share: `base` (the run's context and the one write of
a durable step), `gating` (the sources and the gate), `send` (the one provider call),
`compact`, `endings` (finish, park, release, a step boundary)."""
