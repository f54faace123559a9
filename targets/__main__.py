"""`python -m targets` lists the targets the registry knows (built-in and entry points), whether
each is usable here, in full or in part, and if not, why.

With `-v`, each plugin's metadata, requirement checks and what it found on this machine; with
`--json`, the same as JSON. `python -m compiler.doctor` checks the whole installation."""
from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata

from compiler import target
from compiler.clihelp import description
from compiler.errors import TargetError
from compiler.target import requirements


def _origins() -> dict[str, str]:
    """Where each entry point comes from ("entry point of <dist> <version>")."""
    out = {}
    try:
        for ep in metadata.entry_points(group="tilejit.targets"):
            dist = getattr(ep, "dist", None)
            out[ep.name] = f"entry point {ep.value} of {dist.name} {dist.version}" if dist else f"entry point {ep.value}"
    except Exception:  # noqa: BLE001 - listing must work in a broken environment too
        pass
    return out


def describe(name: str) -> dict:
    origins = _origins()
    row = {"name": name, "origin": origins.get(name, f"built-in {target.BUILTIN_PLUGINS.get(name, '')}".strip())}
    try:
        plugin = target.load_plugin(name)
        meta = requirements.info(name, plugin)
    except TargetError as e:
        return {**row, "available": False, "why": str(e)}
    ok, why = requirements.availability(name, plugin)
    row.update(available=ok, why=why, version=meta.version, device_kinds=list(meta.device_kinds),
               capabilities=list(meta.capabilities),
               requirements=[{"what": r.what, "minimum": r.minimum, "found": found, "ok": sat}
                             for r, sat, found in requirements.requirement_report(plugin)],
               device_backend=meta.device_backend if isinstance(meta.device_backend, str) or meta.device_backend is None
               else f"{meta.device_backend.__module__}:{meta.device_backend.__qualname__}")
    if ok:
        row["limited"] = requirements.limited(name, plugin)
    status = list(plugin.status())   # what the plugin found on this machine
    if status:
        row["status"] = status
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m targets", description=description(__doc__))
    ap.add_argument("-v", "--verbose", action="store_true", help="metadata and requirement checks of each target")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    rows = [describe(n) for n in target.target_names()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    width = max(len(r["name"]) for r in rows) if rows else 4
    for r in rows:
        state = (f"available: {r['limited']}" if r.get("limited") else "available") if r["available"] \
            else f"not available: {r['why']}"
        print(f"{r['name']:<{width}}  {r.get('version', '?'):<8} {state}")
        if args.verbose:
            print(f"    from          {r['origin']}")
            for key in ("device_kinds", "capabilities"):
                if key in r:
                    print(f"    {key:<13} {', '.join(r[key]) or '-'}")
            if "device_backend" in r:
                print(f"    device        {r['device_backend'] or '-'}")
            for q in r.get("requirements", []):
                mark = "ok" if q["ok"] else "TOO OLD" if q["found"] else "MISSING"
                print(f"    requires      {q['what']} >= {q['minimum']}: {mark} (found {q['found'] or 'none'})")
            for line in r.get("status", []):
                print(f"    status        {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
