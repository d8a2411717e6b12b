"""`python -m tensor_tracker view PATH`: open a recording on disk as an HTML report."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from ._api import load
from .errors import TensorTrackerError
from .export import report


def main(argv: list[str] | None = None) -> int:
    """The command line: `view PATH [--out FILE] [--no-open] [--recover] [--debug]`. An
    error prints its message to stderr and exits with status 1; `--debug` shows its
    traceback instead.

    Example:
        >>> main(["view", "runs/today", "--no-open"])  # doctest: +SKIP
        runs/today/report.html
        0
    """
    parser = argparse.ArgumentParser(prog="python -m tensor_tracker")
    commands = parser.add_subparsers(dest="command", required=True)
    view = commands.add_parser("view", help="write (and open) the HTML report of a recording")
    view.add_argument("path", type=Path, help="the recording's directory")
    view.add_argument("--out", type=Path, help="the HTML file (default: PATH/report.html)")
    view.add_argument("--no-open", action="store_true", help="do not open a browser")
    view.add_argument("--recover", action="store_true", help="read a truncated recording")
    view.add_argument("--debug", action="store_true", help="show the traceback of an error")
    args = parser.parse_args(argv)
    try:
        recording = load(args.path, recover=args.recover)
        out = report(recording, args.out or args.path / "report.html", title=args.path.name)
    except TensorTrackerError as error:
        if args.debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(out)
    if not args.no_open and not webbrowser.open(out.resolve().as_uri()):
        print(f"no web browser was found to open it: open {out.resolve().as_uri()} yourself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
