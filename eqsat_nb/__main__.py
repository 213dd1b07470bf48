import sys

try:
    from .cli import entry
except KeyboardInterrupt:       # Ctrl-C while Python imports the package: no traceback either
    print("eqsat-nb: interrupted", file=sys.stderr)
    sys.exit(130)

entry()
