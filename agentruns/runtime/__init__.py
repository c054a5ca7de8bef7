"""The durable tool loop. Pure parts: `state` (fold + next action = recovery planning),
`context` (log → provider messages, pairing), `compose` (the request a turn sends),
`effects` (how a side effect happens once), `budget`, `compaction`, `redaction`. Acting
parts: `loop` (drive) and `actions/`; `journal` (fenced writes, through the store),
`config`."""
