#!/usr/bin/env python3
"""Checks that every #include in the tree keeps to the floor rules of docs/architecture.md.

The rules are the fenced block that follows the line "<!-- floor rules -->" in
docs/architecture.md: one line per folder, `folder/ -> folder, folder, ...` (or `-> anything`,
or `-> (none)`), naming the folders whose headers the folder's files may include, and a line
`test support: folder, ...` naming folders that any test (a *_test.* file, a test_util file or a
file under testing/) may include. A file belongs
to the longest folder of the rules that contains it; its own folder is always allowed. A quoted
include is resolved the way the build resolves it: beside the including file, then under a
folder's include/ directory, then as a path inside the repository; an include found nowhere in
the repository is a third-party header and is not checked.

Usage: check_floors.py [--rules FILE] [REPO]
  REPO defaults to the repository this script lives in; FILE (default REPO/docs/architecture.md)
  is the markdown file holding the rules block.
Exit status 0 when every include keeps to the rules; 1 with one line per violation; 2 when the
rules cannot be read or a folder of the tree is not in them.
"""

import os
import re
import subprocess
import sys

SOURCE_SUFFIXES = ('.h', '.hpp', '.cc', '.cpp', '.c', '.cu', '.cuh', '.inc', '.hip')
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
RULE_RE = re.compile(r'^\s*([\w./-]+?)/?\s*->\s*(.*?)\s*$')


class RulesError(Exception):
    """The rules block is missing or cannot be read."""


def read_rules(path):
    """Returns {folder: set of allowed folders, or None for anything}, in file order."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == '<!-- floor rules -->')
    except StopIteration:
        raise RulesError(f'{path}: no "<!-- floor rules -->" marker')
    rules = {}
    support = set()
    in_block = False
    for line in lines[start + 1:]:
        if line.startswith('```'):
            if in_block:
                break
            in_block = True
            continue
        if not in_block or not line.strip():
            continue
        if line.startswith('test support:'):
            support.update(a.strip().rstrip('/') for a in line.split(':', 1)[1].split(',') if a.strip())
            continue
        m = RULE_RE.match(line.split('#', 1)[0])
        if not m:
            raise RulesError(f'{path}: cannot read floor rule "{line}"')
        folder, allowed = m.group(1), m.group(2)
        if allowed == 'anything':
            rules[folder] = None
        elif allowed in ('(none)', ''):
            rules[folder] = set()
        else:
            rules[folder] = {a.strip().rstrip('/') for a in allowed.split(',') if a.strip()}
    if not rules:
        raise RulesError(f'{path}: the floor rules block is empty')
    for folder, allowed in rules.items():
        for a in allowed or ():
            if a not in rules:
                raise RulesError(f'{path}: rule of {folder}/ names {a}/, which has no rule of its own')
    for a in support:
        if a not in rules:
            raise RulesError(f'{path}: test support names {a}/, which has no rule of its own')
    return rules, support


def tracked_files(repo):
    out = subprocess.run(['git', '-C', repo, 'ls-files', '--cached', '--others', '--exclude-standard'],
                         check=True, capture_output=True, text=True).stdout
    return [f for f in out.splitlines() if os.path.exists(os.path.join(repo, f))]


def is_test_source(path):
    """A test, or a helper that only tests build (a testing/ folder, *test_util*)."""
    name = os.path.basename(path)
    return ('_test.' in name or 'test_util' in name or '/testing/' in path)


def folder_of(path, rules):
    best = None
    for folder in rules:
        if path == folder or path.startswith(folder + '/'):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def main():
    args = sys.argv[1:]
    rules_path = None
    if len(args) >= 2 and args[0] == '--rules':
        rules_path, args = args[1], args[2:]
    if len(args) > 1 or (args and args[0].startswith('-')):
        print(__doc__)
        return 2
    repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), '..', '..'))
    try:
        rules, support = read_rules(rules_path or os.path.join(repo, 'docs', 'architecture.md'))
    except (RulesError, OSError) as e:
        print(e)
        return 2
    files = tracked_files(repo)
    file_set = set(files)
    include_roots = sorted({f.split('/include/', 1)[0] + '/include' for f in files if '/include/' in f})
    by_suffix = {}
    for f in files:
        parts = f.split('/')
        for i in range(1, len(parts)):
            by_suffix.setdefault('/'.join(parts[i:]), []).append(f)

    sources = [f for f in files if f.endswith(SOURCE_SUFFIXES)]
    unruled = sorted({f.split('/')[0] for f in sources if folder_of(f, rules) is None})
    if unruled:
        print('folders with sources but no floor rule in docs/architecture.md: ' + ', '.join(unruled))
        return 2

    violations = []
    checked = 0
    for f in sources:
        here = folder_of(f, rules)
        allowed = rules[here]
        with open(os.path.join(repo, f), encoding='utf-8', errors='replace') as text:
            for number, line in enumerate(text, 1):
                m = INCLUDE_RE.match(line)
                if not m:
                    continue
                name = m.group(1)
                target = os.path.normpath(os.path.join(os.path.dirname(f), name))
                if target not in file_set:
                    target = next((root + '/' + name for root in include_roots
                                   if root + '/' + name in file_set), None)
                if target is None and name in file_set:
                    target = name
                if target is None:
                    # Found through a target's include directories: prefer the including
                    # file's own folder, then a single folder that has it.
                    candidates = by_suffix.get(name, [])
                    own = [c for c in candidates if folder_of(c, rules) == here]
                    folders = {folder_of(c, rules) for c in candidates}
                    if own:
                        target = own[0]
                    elif len(folders) == 1:
                        target = candidates[0]
                    elif len(folders) > 1:
                        violations.append(f'{f}:{number}: "{name}" is ambiguous: it is in '
                                          + ', '.join(sorted(folders)))
                        continue
                if target is None:
                    continue  # third party or generated
                checked += 1
                there = folder_of(target, rules)
                if there == here or allowed is None or there in allowed:
                    continue
                if there in support and is_test_source(f):
                    continue
                violations.append(f'{f}:{number}: {here}/ includes "{name}" of {there}/, '
                                  f'which {here}/ may not include (docs/architecture.md, floor rules)')
    for v in violations:
        print(v)
    print(f'{checked} includes between project folders checked in {len(sources)} files; '
          f'{len(violations)} break the floor rules')
    return 1 if violations else 0


if __name__ == '__main__':
    sys.exit(main())
