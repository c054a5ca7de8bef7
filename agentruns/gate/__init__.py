"""The context gate (§2 CG, §3 FS): what a send carries, and whether its zone may take it.

`core` decides over plain values, `readout` renders that decision, `lookups` builds the
plain values from the database, and `audit` asserts a decision (audit row, then raise or
log).
"""
