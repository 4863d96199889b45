#!/usr/bin/env python3
"""The dependency rule of the layout (docs/design.md, "Layout"), checked on every #include.

  libsequoia/      includes nothing from planner/, runtime/ or profiler/
  libsequoia/base/ includes nothing from libsequoia/format/, libsequoia/verify/ or libsequoia/text/
  libsequoia/text/ (the tokenizers) includes from libsequoia/base/ only
  libsequoia/format/ includes nothing from libsequoia/verify/ (no exception: the table of
                   verification modes, part of the curve and plan formats, is format/mode.h)
  planner/         includes nothing from runtime/ or profiler/
  planner/accept/  (the estimator library) includes nothing from the rest of planner/; only
                   its tool, sequoia-accept.c, may use the planner
  runtime/         includes nothing from planner/ or profiler/
  profiler/        is included by nothing outside profiler/

Usage: check_layout.py SOURCE_ROOT. Prints every violation as FILE:LINE and exits 1 if any. The
tests/ folder, examples/ and build folders are not part of the product and are not checked.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
SOURCE_EXT = ('.c', '.h', '.cu', '.cuh')
PRODUCT = ('libsequoia', 'planner', 'runtime', 'profiler')
ACCEPT_TOOLS = {'planner/accept/sequoia-accept.c'}


def forbidden(src, inc):
    """The reason `src` (a path relative to the root) must not include `inc`, or None."""
    top = inc.split('/', 1)[0]
    if inc.startswith('profiler/') and not src.startswith('profiler/'):
        return 'nothing outside profiler/ includes profiler/'
    if src.startswith('libsequoia/') and top in ('planner', 'runtime', 'profiler'):
        return 'libsequoia/ depends on nothing of ours'
    if src.startswith('libsequoia/base/') and inc.startswith(('libsequoia/format/',
                                                              'libsequoia/verify/',
                                                              'libsequoia/text/')):
        return 'libsequoia/base/ is below the formats, the verification rule and the tokenizers'
    if (src.startswith('libsequoia/text/') and inc.startswith('libsequoia/') and
            not inc.startswith(('libsequoia/base/', 'libsequoia/text/'))):
        return 'libsequoia/text/ depends on libsequoia/base/ only'
    if src.startswith('libsequoia/format/') and inc.startswith('libsequoia/verify/'):
        return 'libsequoia/format/ is below the verification rule'
    if src.startswith('planner/') and top in ('runtime', 'profiler'):
        return 'planner/ depends on libsequoia/ only'
    if (src.startswith('planner/accept/') and src not in ACCEPT_TOOLS and
            inc.startswith('planner/') and not inc.startswith('planner/accept/')):
        return 'the estimator library (planner/accept/) does not use the planner; only its tool does'
    if src.startswith('runtime/') and top in ('planner', 'profiler'):
        return 'runtime/ depends on libsequoia/ only'
    return None


def main(root):
    bad = checked = 0
    for top in PRODUCT:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, '/')
                checked += 1
                with open(path, encoding='utf-8', errors='replace') as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        why = forbidden(rel, m.group(1))
                        if why:
                            print(f'{rel}:{lineno}: includes "{m.group(1)}": {why}')
                            bad += 1
    if checked == 0:
        print(f'{root}: no source files found under {", ".join(PRODUCT)}')
        return 1
    print(f'{checked} files checked, {bad} forbidden include(s)')
    return 1 if bad else 0


# (file, include, forbidden?) for every rule, both ways: --self-test checks forbidden() on them.
CASES = [
    ('runtime/specdec.c', 'planner/dp.h', True),
    ('runtime/cuda_sample.cu', 'profiler/measure.h', True),
    ('runtime/specdec.c', 'libsequoia/verify/verify.h', False),
    ('libsequoia/format/curve.c', 'planner/svg.h', True),
    ('libsequoia/verify/verify.c', 'runtime/model.h', True),
    ('libsequoia/format/curve.c', 'libsequoia/verify/mode.h', True),
    ('libsequoia/format/plan.c', 'libsequoia/verify/verify.h', True),
    ('libsequoia/format/curve.c', 'libsequoia/format/mode.h', False),
    ('libsequoia/verify/verify.h', 'libsequoia/format/mode.h', False),
    ('libsequoia/base/io.c', 'libsequoia/format/plan.h', True),
    ('libsequoia/base/cli.c', 'libsequoia/base/io.h', False),
    ('libsequoia/base/io.c', 'libsequoia/text/tokenizer.h', True),
    ('libsequoia/text/tokenizer.c', 'libsequoia/format/curve.h', True),
    ('libsequoia/text/tokenizer.c', 'libsequoia/base/json.h', False),
    ('libsequoia/text/tokenizer.c', 'runtime/model.h', True),
    ('planner/dp.c', 'runtime/model.h', True),
    ('planner/export.h', 'profiler/latency_svg.h', True),
    ('planner/dp.c', 'libsequoia/format/tree.h', False),
    ('planner/accept/accept.c', 'planner/dp.h', True),
    ('planner/accept/merge.c', 'planner/accept/stats.h', False),
    ('planner/accept/sequoia-accept.c', 'planner/dp.h', False),
    ('planner/accept/sequoia-accept.c', 'runtime/model.h', True),
    ('planner/regress.c', 'planner/accept/accept.h', False),
    ('profiler/measure.c', 'runtime/model.h', False),
    ('profiler/measure.c', 'profiler/measure.h', False),
]


def self_test():
    wrong = [(s, i, f) for s, i, f in CASES if bool(forbidden(s, i)) != f]
    for s, i, f in wrong:
        print(f'rule table: {s} including {i} should be {"forbidden" if f else "allowed"}')
    print(f'{len(CASES)} rule cases, {len(wrong)} wrong')
    return 1 if wrong else 0


if __name__ == '__main__':
    if len(sys.argv) == 2 and sys.argv[1] == '--self-test':
        sys.exit(self_test())
    if len(sys.argv) != 2:
        sys.exit('usage: check_layout.py SOURCE_ROOT | --self-test')
    sys.exit(main(sys.argv[1]))
