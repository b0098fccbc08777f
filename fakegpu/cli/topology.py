"""``fakegpu topology list|validate|show``: the packaged topologies, checks of topology files and
what they describe. Each takes a packaged topology's name where it takes a file."""

from __future__ import annotations

import argparse
import sys

from fakegpu.errors import EXIT_INVALID, EXIT_OK, InvalidInput, printable
from fakegpu.topology import packaged
from fakegpu.topology.errors import TopologyError
from fakegpu.topology.load import load_topology
from fakegpu.topology.model import Topology
from fakegpu.topology.render import to_json, to_table


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add this concern's commands to the top-level parser."""
    # Imported here, as fakegpu.cli imports the command modules.
    from fakegpu.cli import add_verbose, options, show_help

    parser = sub.add_parser("topology", help="list, validate and show topologies",
                            description="Validate and show fake GPU cluster topologies.")
    add_verbose(parser)
    commands = parser.add_subparsers(dest="topology_command", metavar="COMMAND")
    parser.set_defaults(func=show_help(parser))

    listing = commands.add_parser(
        "list", help="the topologies fakegpu ships (use their names after --topology)",
        description="List the packaged topologies: name and a one-line description. A name "
                    "works wherever a topology file does.")
    options.add_output(listing, table="one line each")
    add_verbose(listing)
    listing.set_defaults(func=_list)

    where = commands.add_parser(
        "path", help="print the file a packaged name (or a path) stands for",
        description="Print the topology file NAME|FILE resolves to, e.g. for "
                    "helm --set-file topology=\"$(fakegpu topology path gb200-mini)\".")
    where.add_argument("topology", metavar="NAME|FILE",
                       help="a packaged topology's name or a topology YAML")
    add_verbose(where)
    where.set_defaults(func=_path)

    validate = commands.add_parser(
        "validate", help="check topology files (exit 2 and one line per problem if invalid)",
        description="Check topology files; print one line per problem and exit 2 if any "
                    "is invalid.")
    validate.add_argument("files", nargs="+", metavar="NAME|FILE",
                          help="packaged topologies' names or topology YAMLs")
    add_verbose(validate)
    validate.set_defaults(func=_validate)

    show = commands.add_parser("show", help="print the GPUs and NVLinks a topology describes",
                               description="Print a topology as nvidia-smi -L and topo -m "
                                           "would, or as JSON.")
    show.add_argument("file", metavar="NAME|FILE",
                      help="a packaged topology's name or a topology YAML")
    options.add_output(show, table="as nvidia-smi -L and topo -m")
    add_verbose(show)
    show.set_defaults(func=_show)


def _list(args: argparse.Namespace) -> int:
    from fakegpu.cli import options

    shipped = packaged.packaged()

    def table() -> None:
        width = max(len(p.name) for p in shipped)
        for p in shipped:
            print(f"{p.name:<{width}}  {p.description}")

    options.emit([{"name": p.name, "description": p.description} for p in shipped],
                 args.output, table)
    return EXIT_OK


def _path(args: argparse.Namespace) -> int:
    print(packaged.resolve_topology(args.topology).resolve())
    return EXIT_OK


def _load(given: str) -> Topology | None:
    """The topology a name or file gives, or None after printing one line per problem."""
    try:
        return load_topology(packaged.resolve_topology(given))
    except InvalidInput as err:
        print(err, file=sys.stderr)
    except TopologyError as err:
        for line in err.lines():
            print(line, file=sys.stderr)
    return None


def _validate(args: argparse.Namespace) -> int:
    status = EXIT_OK
    for path in args.files:
        topology = _load(path)
        if topology is None:
            status = EXIT_INVALID
            continue
        print(f"{printable(path)}: ok ({len(topology.nodes)} nodes, {topology.gpu_count} GPUs)")
    return status


def _show(args: argparse.Namespace) -> int:
    topology = _load(args.file)
    if topology is None:
        return EXIT_INVALID
    from fakegpu.cli import options

    options.emit(to_json(topology), args.output, lambda: sys.stdout.write(to_table(topology)))
    return EXIT_OK
