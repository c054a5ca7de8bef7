"""Test support shipped with the package, so child processes and benchmarks can use it too."""
