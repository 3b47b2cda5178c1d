#!/usr/bin/python3
"""Verify every DKIM-Signature of a message with dkimpy (Debian's
python3-dkim), the keys answered from a JSON file instead of DNS.

usage: dkimverify.py RECORDS.json MESSAGE
RECORDS.json maps a record name (selector._domainkey.domain) to its TXT value.
Prints one line per signature and exits 1 unless there is at least one and
all verify."""
import json
import re
import sys

import dkim


def main():
    records = json.load(open(sys.argv[1]))
    message = open(sys.argv[2], "rb").read()

    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        value = records.get(name.rstrip("."))
        return value.encode() if value is not None else None

    d = dkim.DKIM(message)
    count = len([h for h in d.headers if h[0].lower() == b"dkim-signature"])
    if count == 0:
        print("no DKIM-Signature")
        return 1
    failed = 0
    for i in range(count):
        ok = d.verify(idx=i, dnsfunc=dnsfunc)
        sig = dict(d.signature_fields) if d.signature_fields else {}
        label = "d=%s s=%s a=%s" % (sig.get(b"d", b"?").decode(), sig.get(b"s", b"?").decode(), sig.get(b"a", b"?").decode())
        print(("pass " if ok else "fail ") + label)
        failed += 0 if ok else 1
    return 1 if failed else 0


sys.exit(main())
