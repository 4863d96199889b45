#!/usr/bin/env python3
"""The public API of the installed headers against the installed library's exports
(tests/install/install.sh, docs/design.md §9.1).

    public_api.py INCLUDEDIR EXPORTED HEADER...

INCLUDEDIR is include/sequoia/ of the installation, EXPORTED a file with the names that
`nm -D --defined-only libsequoia.so` lists (one a line), HEADER the installed headers relative
to INCLUDEDIR. Reads every file-scope declaration of a function or an `extern` variable of the
headers (outside comments, preprocessor lines and braces; `static inline` definitions are not
declarations of the library) and fails when one is not marked SQ_API, when an exported name is
not such a declaration, when a declared one is not exported, or when a name is not sq_*/SQ_*.
Exit 0 when all holds, 1 otherwise, naming each problem."""
import re
import sys


def statements(text):
    """The file-scope statements of a C header, each as (line, text), without comments,
    preprocessor lines and the SQ_BEGIN_DECLS/SQ_END_DECLS markers."""
    i, n, depth, start, line = 0, len(text), 0, None, 1
    at_line_start = True
    while i < n:
        if text.startswith('/*', i):
            j = text.index('*/', i + 2) + 2
            line += text.count('\n', i, j)
            i = j
            continue
        if text.startswith('//', i):
            i = text.index('\n', i)
            continue
        c = text[i]
        if at_line_start and (c == '#' or text.startswith(('SQ_BEGIN_DECLS', 'SQ_END_DECLS'), i)):
            while True:  # to the end of the line, with continuations
                j = text.index('\n', i)
                if text[j - 1] == '\\':
                    line += 1
                    i = j + 1
                    continue
                i = j
                break
            continue
        if c in '"\'':
            j = i + 1
            while text[j] != c:
                j += 2 if text[j] == '\\' else 1
            i = j + 1
            continue
        if c == '\n':
            line += 1
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
        elif depth == 0 and start is None and not c.isspace() and c != ';':
            start, start_line = i, line
        if depth == 0 and c == ';' and start is not None:
            yield start_line, ' '.join(text[start:i + 1].split())
            start = None
        if depth == 0 and c == '}' and start is not None and text[start:i + 1].lstrip().startswith(
                ('static', 'SQ_HD')):
            start = None  # the end of an inline function's body: no ';' follows
        i += 1


def declarations(text):
    """(line, name, marked) for each function prototype and extern variable."""
    # A guard written out (format/mode.h) rather than SQ_BEGIN_DECLS: its braces are not a scope.
    def blank(m):
        return '\n' * m.group(0).count('\n')
    text = re.sub(r'#ifdef __cplusplus\s*\nextern "C" \{\s*\n#endif', blank, text)
    text = re.sub(r'#ifdef __cplusplus\s*\n\}\s*\n#endif', blank, text)
    out = []
    for line, st in statements(text):
        marked = st.startswith('SQ_API ')
        body = st[len('SQ_API '):] if marked else st
        if body.startswith(('typedef', 'static')) or '{' in body:
            continue
        m = re.search(r'([A-Za-z_]\w*)\s*\(', body)
        if m and not body.startswith('extern'):
            out.append((line, m.group(1), marked))
        elif body.startswith('extern'):
            m = re.search(r'([A-Za-z_]\w*)\s*(\[[^\]]*\])?\s*;$', body)
            out.append((line, m.group(1), marked))
    return out


def main(argv):
    includedir, exported_file = argv[1], argv[2]
    exported = {l.strip() for l in open(exported_file) if l.strip()}
    declared = {}
    problems = []
    for h in argv[3:]:
        for line, name, marked in declarations(open(f'{includedir}/{h}').read()):
            declared[name] = f'{h}:{line}'
            if not marked:
                problems.append(f'{h}:{line}: {name} is declared without SQ_API')
    for name in sorted(exported - set(declared)):
        problems.append(f'libsequoia.so exports {name}, which no installed header declares')
    for name in sorted(set(declared) - exported):
        problems.append(f'{declared[name]}: {name} is declared but libsequoia.so does not '
                        'export it')
    for name in sorted(exported | set(declared)):
        if not re.match(r'(sq|SQ)_', name):
            problems.append(f'{name}: a public name outside sq_/SQ_')
    for p in problems:
        print(f'FAIL: {p}')
    if not problems:
        print(f'nm -D: {len(exported)} symbols exported, all sq_*, each declared SQ_API in an '
              f'installed header, and every declaration of the {len(argv) - 3} headers exported')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
