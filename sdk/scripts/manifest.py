#!/usr/bin/env python3
"""Print the `chitin:manifest` custom section(s) of a WebAssembly component
or module: top level first, then inside nested core modules / components.

usage: manifest.py FILE.wasm
"""
import json
import sys


def leb(data, at):
    result = shift = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, at


def walk(data, path):
    """Yields (path, kind, name, payload) for custom sections, recursing."""
    magic, version = data[:4], data[4:8]
    if magic != b"\0asm":
        raise ValueError(f"{path}: not WebAssembly")
    is_component = version == b"\x0d\x00\x01\x00"
    kind = "component" if is_component else "module"
    at, index = 8, 0
    while at < len(data):
        sid = data[at]
        size, at = leb(data, at + 1)
        body = data[at : at + size]
        at += size
        if sid == 0:
            n, p = leb(body, 0)
            yield path, kind, body[p : p + n].decode(), body[p + n :]
        elif is_component and sid in (1, 4):  # core module / component
            yield from walk(body, f"{path}/{'module' if sid == 1 else 'component'}[{index}]")
            index += 1


def main():
    data = open(sys.argv[1], "rb").read()
    print("component" if data[4:8] == b"\x0d\x00\x01\x00" else "core module", file=sys.stderr)
    found = [(p, k, payload) for p, k, name, payload in walk(data, "") if name == "chitin:manifest"]
    if not found:
        sys.exit("no chitin:manifest section")
    for path, kind, payload in found:
        print(f"chitin:manifest in {kind} {path or '/'} ({len(payload)} bytes)", file=sys.stderr)
        print(json.dumps(json.loads(payload.decode("utf-8")), indent=2))


if __name__ == "__main__":
    main()
