#!/usr/bin/env python3
"""Tests of check_floors.py on small made-up trees, then the check of this repository itself."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, 'check_floors.py')
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))

RULES = textwrap.dedent('''\
    # architecture

    <!-- floor rules -->
    ```
    base/     -> (none)
    low/      -> base
    high/     -> low, base
    top/      -> anything
    testkit/  -> (none)
    test support: testkit
    ```
    ''')


def run_check(repo):
    return subprocess.run([sys.executable, CHECK, repo], capture_output=True, text=True)


class MadeUpTree(unittest.TestCase):
    def make_tree(self, files, rules=RULES):
        root = tempfile.mkdtemp()
        self.addCleanup(subprocess.run, ['rm', '-rf', root])
        files = dict(files)
        files['docs/architecture.md'] = rules
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        subprocess.run(['git', 'init', '-q', root], check=True)
        return root

    def test_an_include_of_a_lower_floor_passes(self):
        root = self.make_tree({
            'base/include/fusetune/base/b.h': '',
            'low/include/fusetune/low/l.h': '#include "fusetune/base/b.h"\n',
            'high/src/h.cc': '#include "fusetune/low/l.h"\n#include "local.h"\n',
            'high/src/local.h': '',
        })
        result = run_check(root)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn('0 break the floor rules', result.stdout)

    def test_an_include_of_a_higher_floor_fails_naming_the_file_and_line(self):
        root = self.make_tree({
            'low/include/fusetune/low/l.h': '',
            'high/include/fusetune/high/h.h': '',
            'low/src/l.cc': '#include "fusetune/low/l.h"\n\n#include "fusetune/high/h.h"\n',
        })
        result = run_check(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('low/src/l.cc:3: low/ includes "fusetune/high/h.h" of high/', result.stdout)

    def test_a_header_found_through_include_directories_is_attributed_to_its_folder(self):
        root = self.make_tree({
            'high/src/helpers/only_here.h': '',
            'low/src/l.cc': '#include "only_here.h"\n',
        })
        result = run_check(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('of high/', result.stdout)

    def test_third_party_headers_are_not_checked(self):
        root = self.make_tree({'base/src/b.cc': '#include "absl/status/status.h"\n#include <vector>\n'})
        self.assertEqual(run_check(root).returncode, 0)

    def test_only_tests_may_include_test_support(self):
        root = self.make_tree({
            'testkit/kit.h': '',
            'low/src/l_test.cc': '#include "testkit/kit.h"\n',
            'low/src/l.cc': '#include "testkit/kit.h"\n',
        })
        result = run_check(root)
        self.assertEqual(result.returncode, 1)
        self.assertIn('low/src/l.cc:1', result.stdout)
        self.assertNotIn('l_test.cc', result.stdout)

    def test_a_folder_without_a_rule_is_an_error(self):
        root = self.make_tree({'elsewhere/x.cc': ''})
        result = run_check(root)
        self.assertEqual(result.returncode, 2)
        self.assertIn('elsewhere', result.stdout)

    def test_a_rule_naming_an_unknown_folder_is_an_error(self):
        root = self.make_tree({'base/b.cc': ''}, rules=RULES.replace('low, base', 'low, nowhere'))
        result = run_check(root)
        self.assertEqual(result.returncode, 2)
        self.assertIn('names nowhere/, which has no rule of its own', result.stdout)


class ThisRepository(unittest.TestCase):
    def test_every_include_keeps_to_the_floor_rules_of_docs_architecture(self):
        if not os.path.isdir(os.path.join(REPO, '.git')) and not os.path.isfile(os.path.join(REPO, '.git')):
            self.skipTest('not a git checkout: the check lists files with git')
        result = run_check(REPO)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


if __name__ == '__main__':
    unittest.main()
