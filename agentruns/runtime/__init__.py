"""The durable tool loop. Pure parts: `state` (fold + next action = recovery planning),
`context` (log → provider messages, pairing), `budget`, `redaction`. I/O parts: `journal`
(fenced writes), `lease`, `executor`."""
