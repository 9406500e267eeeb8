"""pycheck.py — the PASS/FAIL lines scripts/run_tests.sh counts, for the Python tests.

    from pycheck import check, failed
    check(ok, "name", "why it failed")
    sys.exit(1 if failed() else 0)
"""
_failures = 0


def check(ok, name, why=""):
    """Print "PASS name" or "FAIL name: why" (flushed, so a crash keeps them)."""
    global _failures
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        _failures += 1
        print(f"FAIL {name}: {why}", flush=True)


def failed():
    """How many checks have failed so far."""
    return _failures
