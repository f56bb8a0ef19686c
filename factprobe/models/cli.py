"""`factprobe models ...`: list the model aliases and prepare their cache folders.

    factprobe models list            table: alias, cached yes/no, folder, description
    factprobe models path ALIAS      prepare ALIAS if needed (download + convert once) and
                                     print its folder (the only line on stdout)
    factprobe models verify ALIAS    re-hash the cached files against the marker; rebuild
                                     the folder when it is corrupt

`models_cli(argv)` returns the exit status: 0 on success, 2 for a user error (unknown alias,
failed download, ...), whose single-line message goes to stderr without a traceback.
"""

from __future__ import annotations

import argparse
import sys

from factprobe.errors import FactprobeError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="factprobe models", description="List and prepare the models factprobe can probe.")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{list,path,verify}")
    sub.add_parser("list", help="table of aliases: cached yes/no, folder, description")
    pp = sub.add_parser("path", help="prepare ALIAS (download + convert once), print its folder")
    pp.add_argument("alias")
    pv = sub.add_parser("verify", help="re-hash ALIAS's cached files; rebuild it if corrupt")
    pv.add_argument("alias")
    return p


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def models_cli(argv: list[str]) -> int:
    """Run `factprobe models <argv>`; return the process exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage / help
        return int(exc.code or 0)
    from factprobe.models import aliases, gguf_cache

    try:
        if args.cmd == "list":
            rows = [["ALIAS", "CACHED", "PATH", "DESCRIPTION"]]
            for spec in gguf_cache.list_models():
                rows.append([spec.alias, "yes" if spec.cached else "no", str(spec.cache_dir), spec.description])
            print(_table(rows))
            return 0
        if args.cmd == "path":
            aliases.get_spec(args.alias)
            print(gguf_cache.prepare_alias(args.alias))
            return 0
        if args.cmd == "verify":
            aliases.get_spec(args.alias)
            problem = gguf_cache.check_cache(args.alias, full=True)
            if problem is None:
                print(f"{args.alias}: OK ({aliases.model_cache_dir(args.alias)})")
                return 0
            if problem != "not cached":
                print(f"{args.alias}: {problem}; rebuilding", file=sys.stderr)
            print(gguf_cache.prepare_alias(args.alias, force=True))
            return 0
    except FactprobeError as err:
        print(f"factprobe: error: {err}", file=sys.stderr)
        return 2
    return 2  # pragma: no cover - argparse rejects other commands


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(models_cli(sys.argv[1:]))
