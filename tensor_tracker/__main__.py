"""`python -m tensor_tracker view PATH`: open a recording on disk as an HTML report."""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from .api import load
from .export import report


def main(argv: list[str] | None = None) -> int:
    """The command line: `view PATH [--out FILE] [--no-open] [--recover]`."""
    parser = argparse.ArgumentParser(prog="python -m tensor_tracker")
    commands = parser.add_subparsers(dest="command", required=True)
    view = commands.add_parser("view", help="write (and open) the HTML report of a recording")
    view.add_argument("path", type=Path, help="the recording's directory")
    view.add_argument("--out", type=Path, help="the HTML file (default: PATH/report.html)")
    view.add_argument("--no-open", action="store_true", help="do not open a browser")
    view.add_argument("--recover", action="store_true", help="read a truncated recording")
    args = parser.parse_args(argv)
    recording = load(args.path, recover=args.recover)
    out = report(recording, args.out or args.path / "report.html", title=args.path.name)
    print(out)
    if not args.no_open and not webbrowser.open(out.resolve().as_uri()):
        print(f"no web browser was found to open it: open {out.resolve().as_uri()} yourself")
    return 0


if __name__ == "__main__":
    sys.exit(main())
