#!/usr/bin/env python3
"""Test 'man-TOOL' (suite docs): the manual page man/TOOL.1 and the tool's --help agree.

  man_options.py TOOL_BINARY MAN_PAGE

Every option the tool's --help prints (each --long option anywhere in the text, each short
option of an option line "  -x, --long") must appear in the manual page, and every option the
manual page documents (the tag line after a .TP request) must be one --help prints, so that an
option added to a tool without its manual page, or dropped from the tool but not from the page,
fails here. The page is read as roff source, without groff."""
import re
import subprocess
import sys

LONG = re.compile(r'(?<![\w-])(--[a-z][a-z0-9-]*)')
SHORT_DEF = re.compile(r'^\s+(-[A-Za-z]),\s+--', re.M)
SHORT = re.compile(r'(?<![\w-])(-[A-Za-z])(?![\w-])')


def roff_text(src):
    """The words of a roff source: font escapes dropped, \\- as '-', \\e as '\\'."""
    s = re.sub(r'\\f(\[[A-Z]*\]|[A-Z])', '', src)
    s = s.replace('\\-', '-').replace('\\&', '').replace('\\e', '\\')
    return s


def main():
    if len(sys.argv) != 3:
        print('usage: man_options.py TOOL_BINARY MAN_PAGE', file=sys.stderr)
        return 64
    tool, page = sys.argv[1], sys.argv[2]
    run = subprocess.run([tool, '--help'], capture_output=True, text=True)
    if run.returncode != 0:
        print(f'{tool} --help: exit {run.returncode}: {run.stderr.strip()}')
        return 1
    help_text = run.stdout
    with open(page, encoding='utf-8') as f:
        src = f.read()
    text = roff_text(src)

    help_long = set(LONG.findall(help_text))
    help_short = set(SHORT_DEF.findall(help_text))
    man_long = set(LONG.findall(text))
    man_short = set(SHORT.findall(text))
    failures = []
    for opt in sorted(help_long - man_long):
        failures.append(f'{page}: option {opt} (printed by --help) is not documented')
    for opt in sorted(help_short - man_short):
        failures.append(f'{page}: short option {opt} (printed by --help) is not documented')

    # Options the page documents: the tag line after each .TP.
    lines = src.split('\n')
    documented = set()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == '.TP':
            documented |= set(LONG.findall(roff_text(lines[i + 1])))
    for opt in sorted(documented - help_long):
        failures.append(f'{page}: documents {opt}, which {tool} --help does not print')

    if not help_long:
        failures.append(f'{tool} --help printed no option at all')
    for f in failures:
        print(f)
    print(f'{page}: {len(help_long)} long and {len(help_short)} short options of --help, '
          f'{len(documented)} documented options: {"FAIL" if failures else "ok"}')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
