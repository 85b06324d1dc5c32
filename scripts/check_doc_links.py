#!/usr/bin/env python3
"""Checks every relative markdown link of the files given (by default the
README and docs/*.md): the target exists, and its #anchor is a heading of
the target, as GitHub names heading anchors.

    python3 scripts/check_doc_links.py [FILE.md ...]
"""
import glob, os, re, sys
from collections import Counter

def strip_code(text):
    out, fence = [], False
    for line in text.split('\n'):
        if re.match(r'^\s*(```|~~~)', line):
            fence = not fence
            out.append('')
            continue
        out.append('' if fence else line)
    return out

def slugs(path):
    seen, result = Counter(), set()
    for line in strip_code(open(path, encoding='utf-8').read()):
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', m.group(2))
        slug = re.sub(r'[^\w\- ]', '', text.lower()).replace(' ', '-')
        n = seen[slug]; seen[slug] += 1
        result.add(slug if n == 0 else f'{slug}-{n}')
    return result

def links(path):
    for no, line in enumerate(strip_code(open(path, encoding='utf-8').read()), 1):
        line = re.sub(r'`[^`]*`', lambda m: m.group(0) if '](' not in m.group(0) else '', line)
        for m in re.finditer(r'\]\(([^)\s]+)\)', line):
            yield no, m.group(1)

bad = checked = 0
for f in sys.argv[1:] or ['README.md'] + sorted(glob.glob('docs/*.md')):
    for no, target in links(f):
        if re.match(r'^[a-z]+:', target):
            continue
        checked += 1
        path, _, anchor = target.partition('#')
        dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(dest):
            print(f'{f}:{no}: {target}: no such file {dest}'); bad += 1; continue
        if anchor:
            if not dest.endswith('.md'):
                print(f'{f}:{no}: {target}: anchor into a non-markdown file'); bad += 1
            elif anchor not in slugs(dest):
                print(f'{f}:{no}: {target}: no heading #{anchor} in {dest}'); bad += 1
print(f'{checked} relative links checked, {bad} broken')
sys.exit(1 if bad else 0)
