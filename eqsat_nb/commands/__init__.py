"""Larger `eqsat-nb` commands, one module each.

Each module defines `add_parser(sub)`, which adds its subcommand to the argparse sub-parsers and
sets `func` to a handler `(argparse.Namespace) -> int`. `eqsat_nb.cli` lists the modules in
`COMMAND_MODULES`. Handlers raise `TirError` (or a subclass) for anything the user got wrong;
the CLI prints it without a traceback.
"""
