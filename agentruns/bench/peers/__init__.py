"""The peers of SPEC §14 and the floor, as scripts the benchmarks run in child processes.

LangGraph and DBOS run in their own virtual environment (`.venv-peers`, made from
`requirements.txt` on first use by `agentruns.bench.harness`), never as project
dependencies; nothing in the project imports these modules. Each prints one JSON object
per measurement on its own line (`common.emit`).
"""
