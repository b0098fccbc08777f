"""``fakegpu topology validate|show``: check topology files and print what they describe."""

from __future__ import annotations

import argparse
import json
import sys

from fakegpu.errors import EXIT_INVALID, EXIT_OK, printable
from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import load_topology
from fakegpu.topology.render import to_json, to_table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    # Imported here, as fakegpu.cli imports the command modules.
    from fakegpu.cli import add_verbose, show_help

    parser = sub.add_parser("topology", help="validate and show topology files",
                            description="Validate and show fake GPU cluster topologies.")
    add_verbose(parser)
    commands = parser.add_subparsers(dest="topology_command", metavar="COMMAND")
    parser.set_defaults(func=show_help(parser))

    validate = commands.add_parser(
        "validate", help="check topology files (exit 2 and one line per problem if invalid)",
        description="Check topology files; print one line per problem and exit 2 if any "
                    "is invalid.")
    validate.add_argument("files", nargs="+", metavar="FILE")
    add_verbose(validate)
    validate.set_defaults(func=_validate)

    show = commands.add_parser("show", help="print the GPUs and NVLinks a topology describes",
                               description="Print a topology as nvidia-smi -L and topo -m "
                                           "would, or as JSON.")
    show.add_argument("file", metavar="FILE")
    show.add_argument("--format", choices=("table", "json"), default="table")
    add_verbose(show)
    show.set_defaults(func=_show)


def _validate(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        try:
            topology = load_topology(path)
        except TopologyError as err:
            for line in err.lines():
                print(line, file=sys.stderr)
            status = EXIT_INVALID
            continue
        print(f"{printable(path)}: ok ({len(topology.nodes)} nodes, {topology.gpu_count} GPUs)")
    return status


def _show(args: argparse.Namespace) -> int:
    try:
        topology = load_topology(args.file)
    except TopologyError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
        return EXIT_INVALID
    if args.format == "json":
        json.dump(to_json(topology), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(to_table(topology))
    return EXIT_OK
