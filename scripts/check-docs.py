#!/usr/bin/env python3
"""check-docs.py -- every relative link and section reference in README.md and docs/ resolves.

Checks, in each Markdown file:
  [text](path)            path exists (relative to the file); http(s)/mailto links are not fetched
  [text](path#anchor)     and path has a heading whose GitHub anchor is `anchor`
  [text](#anchor)         a heading of this file has that anchor
  `FILE.md` §N, FILE.md §N, "§N" alone
                          FILE.md (found next to the referring file, in docs/, docs/internals/
                          or the top level) has a heading numbered N ("## 5.", "### 5a ...",
                          "## §5"); a bare §N refers to the file itself
  every tests/mount/cases/NAME.sh is named (`NAME`) in docs/testing.md
Prints one line per broken reference and "docs: N passed, M failed" (N = references checked).
Exit 0 if all resolve, 1 otherwise.
"""
import os
import re
import sys

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SECT = re.compile(r"(?:`?([A-Za-z0-9_./-]+\.md)`?\s+)?§\s?([0-9]+[a-z]?)")
MDNAME = re.compile(r"(?<![\w/.-])([A-Za-z0-9_-]+\.md)\b")
LINKED = re.compile(r"\]\([^)]*\.md")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def files():
    out = [os.path.join(TOP, "README.md")]
    for root, _, names in os.walk(os.path.join(TOP, "docs")):
        out += [os.path.join(root, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in out if os.path.exists(f)]


def lines_outside_code(path):
    """(line number, text) of the lines outside fenced code blocks."""
    inside = False
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield i, line


def anchor(text):
    """GitHub's anchor for a heading text."""
    text = re.sub(r"`|\*\*|__|\[([^\]]*)\]\([^)]*\)", r"\1", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


_headings = {}


def headings(path):
    if path not in _headings:
        hs = []
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if m:
                hs.append(m.group(2))
        _headings[path] = hs
    return _headings[path]


def anchors(path):
    seen, out = {}, set()
    for h in headings(path):
        a = anchor(h)
        n = seen.get(a, 0)
        out.add(a if n == 0 else "%s-%d" % (a, n))
        seen[a] = n + 1
    return out


def section_body(path, num):
    """The text under the heading numbered num (up to the next heading of the same
    or a higher level), or None if there is no such heading."""
    pat = re.compile(r"^(?:§\s?)?%s(?:[.):\s]|$)" % re.escape(num))
    level, body = None, []
    for _, line in lines_outside_code(path):
        m = HEADING.match(line)
        if m and level is not None and len(m.group(1)) <= level:
            break
        if m and level is None and pat.match(m.group(2)):
            level = len(m.group(1))
            continue
        if level is not None:
            body.append(line)
    return None if level is None else "".join(body)


def is_empty(body):
    """No text, or only the header of a table with no rows."""
    rows = [l for l in body.splitlines() if l.strip()]
    return all(l.lstrip().startswith("|") for l in rows) and len(rows) <= 2


def find_md(name, near):
    for d in (os.path.dirname(near), os.path.join(TOP, "docs"),
              os.path.join(TOP, "docs", "internals"), TOP):
        p = os.path.normpath(os.path.join(d, name))
        if os.path.exists(p):
            return p
    return None


def main():
    checked, bad = 0, []
    for path in files():
        rel = os.path.relpath(path, TOP)
        for no, line in lines_outside_code(path):
            plain = re.sub(r"`[^`]*`", lambda m: m.group(0) if m.group(0).endswith('.md`')
                           else "", line)
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z]+:", target):
                    continue
                checked += 1
                file_part, _, frag = target.partition("#")
                dest = path if not file_part else os.path.normpath(
                    os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    bad.append("%s:%d: link to missing %s" % (rel, no, file_part))
                    continue
                if frag and dest.endswith(".md") and frag not in anchors(dest):
                    bad.append("%s:%d: no heading #%s in %s" %
                               (rel, no, frag, os.path.relpath(dest, TOP)))
            for m in SECT.finditer(plain):
                name, num = m.group(1), m.group(2)
                checked += 1
                dest = path if not name else find_md(name, path)
                if dest is None:
                    bad.append("%s:%d: %s §%s: no such file" % (rel, no, name, num))
                else:
                    body = section_body(dest, num)
                    if body is None:
                        bad.append("%s:%d: %s has no section %s" %
                                   (rel, no, os.path.relpath(dest, TOP), num))
                    elif is_empty(body):
                        bad.append("%s:%d: section %s of %s is empty" %
                                   (rel, no, num, os.path.relpath(dest, TOP)))
            for m in MDNAME.finditer(line):
                name = m.group(1)
                if "/" not in name and find_md(name, path) is None and not LINKED.search(line):
                    checked += 1
                    bad.append("%s:%d: cites %s, which is not in the repository" %
                               (rel, no, name))
    # every mount case is described in docs/testing.md's table of cases
    testing = os.path.join(TOP, "docs", "testing.md")
    cases = os.path.join(TOP, "tests", "mount", "cases")
    if os.path.exists(testing) and os.path.isdir(cases):
        text = open(testing, encoding="utf-8").read()
        for name in sorted(os.listdir(cases)):
            if name.endswith(".sh"):
                checked += 1
                if "`%s`" % name[:-3] not in text:
                    bad.append("docs/testing.md: mount case %s is not described" % name[:-3])
    for b in bad:
        print(b)
    print("docs: %d passed, %d failed" % (checked - len(bad), len(bad)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
