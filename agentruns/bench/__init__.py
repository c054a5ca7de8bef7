"""The benchmark workloads behind `manage.py bench` (SPEC §14)."""
