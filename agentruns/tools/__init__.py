"""Tools are registered in code (TOOL-1): `registry` holds them, `builtin` defines them,
`policy` decides what a configuration grants and what needs a human."""
