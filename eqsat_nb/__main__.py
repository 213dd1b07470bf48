import sys

try:
    from .cli import main
except KeyboardInterrupt:       # Ctrl-C while Python imports the package: no traceback either
    print("eqsat-nb: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
