#!/usr/bin/env python3
"""Checks the manual: README.md and docs/*.md.

  check_docs.py links SOURCE_DIR
      Every relative link (and image) resolves to a file or folder of the checkout, and every
      #anchor to a heading of the page it names (GitHub's anchors: the heading's text in lower
      case, spaces to '-', punctuation other than '-' and '_' removed, -1, -2, ... after repeats).

  check_docs.py commands SOURCE_DIR SPOTDNN DATA_DIR
      Every `spotdnn` command in a fenced block (`spotdnn ...` or `build/spotdnn ...`, after an
      optional `$ ` prompt) that needs no running service and names a built-in catalog or workload
      (deploy/catalogs, deploy/workloads) runs with the built binary SPOTDNN and exits 0, or with
      the status its line gives in a comment (`# exit 3`). Commands that need `spotdnn up`, a data
      directory, a server, the network, a file that is not there, or elide part of themselves
      (`...`) are skipped, each with its reason. The commands of a page run in order in one fresh
      folder where deploy/ is the checkout's and ../shared/data is DATA_DIR, so a file one command
      writes (`--out`) is there for the next one.

Exit status 0 when everything checked holds, 1 otherwise (each failure named with file:line).
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.parse

FENCE = re.compile(r'^\s*(```+|~~~+)\s*([\w+-]*)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
LINK = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
HTML_ANCHOR = re.compile(r'<a\s+(?:name|id)="([^"]+)"', re.I)


def manual_pages(source):
    docs = os.path.join(source, 'docs')
    pages = [os.path.join(source, 'README.md')]
    pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))
    return pages


def split_fences(text):
    """Yields (kind, first_line_number, lines): kind 'text' or ('code', info string)."""
    lines = text.split('\n')
    block, start, info, marker = [], 1, None, None
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if marker is None and m:
            yield 'text', start, block
            block, start, info, marker = [], number + 1, m.group(2), m.group(1)
        elif marker is not None and line.strip().startswith(marker[0] * len(marker)) and \
                line.strip().strip(marker[0]) == '':
            yield ('code', info), start, block
            block, start, marker = [], number + 1, None
        else:
            block.append(line)
    yield ('text' if marker is None else ('code', info)), start, block


def slug(heading):
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', heading)
    text = text.replace('`', '').replace('*', '').strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors_of(path, cache={}):
    if path not in cache:
        seen, anchors = {}, set()
        for kind, _, lines in split_fences(open(path, encoding='utf-8').read()):
            if kind != 'text':
                continue
            for line in lines:
                anchors.update(HTML_ANCHOR.findall(line))
                m = HEADING.match(line)
                if not m:
                    continue
                base = slug(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                anchors.add(base if n == 0 else f'{base}-{n}')
        cache[path] = anchors
    return cache[path]


def check_links(source):
    failures, checked = [], 0
    root = os.path.realpath(source)
    for page in manual_pages(source):
        shown = os.path.relpath(page, source)
        for kind, start, lines in split_fences(open(page, encoding='utf-8').read()):
            if kind != 'text':
                continue
            text = '\n'.join(lines)
            # Code spans are not links: blank them, keeping the line count.
            text = re.sub(r'(`+)(.+?)\1', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text,
                          flags=re.S)
            for m in LINK.finditer(text):
                target = m.group(1)
                line = start + text.count('\n', 0, m.start())
                if re.match(r'^[a-zA-Z][a-zA-Z0-9+.-]*:', target):
                    continue  # http:, https:, mailto:
                checked += 1
                path_part, _, anchor = target.partition('#')
                path = page if not path_part else os.path.normpath(
                    os.path.join(os.path.dirname(page), urllib.parse.unquote(path_part)))
                where = f'{shown}:{line}: ({target})'
                if not os.path.realpath(path).startswith(root + os.sep):
                    failures.append(f'{where} leads out of the checkout')
                elif not os.path.exists(path):
                    failures.append(f'{where} {os.path.relpath(path, source)} does not exist')
                elif anchor and path.endswith('.md'):
                    if urllib.parse.unquote(anchor) not in anchors_of(path):
                        failures.append(f'{where} {os.path.relpath(path, source)} has no heading '
                                        f'with the anchor #{anchor}')
    print(f'{checked} relative links checked in {len(manual_pages(source))} pages')
    return failures


# The commands that need no running service: plan, predict, simulate, the listings, and
# `catalog hazards` from lifetime files.
RUNNABLE = {'plan', 'predict', 'simulate', 'catalogs', 'workloads', 'catalog hazards'}
# Flags that name a server, a data directory or a store (state a running stack keeps).
STATEFUL_FLAGS = {'--server', '--profiler', '--provisioner', '--detector', '--data-dir', '--db',
                  '--store', '--from-detector'}
OUTPUT_FLAGS = {'--out', '--plot'}
PROGRAM = re.compile(r'^(?:\./)?(?:build/)?spotdnn$')


def commands_of(page):
    """(line, text, variables) for every spotdnn command in the page's fenced blocks."""
    found = []
    for kind, start, lines in split_fences(open(page, encoding='utf-8').read()):
        if kind == 'text':
            continue
        prompted = any(l.startswith('$ ') for l in lines)
        variables = {}
        i = 0
        while i < len(lines):
            line, number = lines[i], start + i
            i += 1
            if prompted:
                if not line.startswith('$ '):
                    continue
                line = line[2:]
            command = line
            while command.endswith('\\') and i < len(lines):
                command = command[:-1] + ' ' + lines[i].strip()
                i += 1
            assignment = re.match(r'^([A-Za-z_]\w*)=(\S+)\s*(#.*)?$', command.strip())
            if assignment:
                variables[assignment.group(1)] = assignment.group(2)
                continue
            try:
                words = shlex.split(command, comments=True)
            except ValueError:
                continue
            if words and PROGRAM.match(words[0]) and len(words) > 1:
                found.append((number, command, dict(variables)))
    return found


def builtin_names(source):
    names = set()
    for folder in ('catalogs', 'workloads'):
        for f in os.listdir(os.path.join(source, 'deploy', folder)):
            if f.endswith('.json'):
                names.add(f[:-len('.json')])
    return names


def flag_values(words, flag):
    values = []
    for i, w in enumerate(words):
        if w == flag and i + 1 < len(words):
            values.append(words[i + 1])
        elif w.startswith(flag + '='):
            values.append(w[len(flag) + 1:])
    return values


def why_skipped(words, builtins):
    """The reason a command is not run, or None."""
    if any(w in ('...', '…') or '…' in w or '...' in w for w in words):
        return 'leaves part of itself out (...)'
    name = words[1] if words[1] != 'catalog' or len(words) < 3 else f'catalog {words[2]}'
    if name not in RUNNABLE:
        return f'`spotdnn {name}` needs a running stack, a data directory or the network'
    stateful = [w.split('=')[0] for w in words if w.split('=')[0] in STATEFUL_FLAGS]
    if stateful:
        return f'{stateful[0]} needs a server or a data directory'
    named = flag_values(words, '--catalog') + flag_values(words, '--workload')
    if not any(n in builtins for n in named):
        return 'names no built-in catalog or workload'
    stored = [n for n in named if n not in builtins and '/' not in n and not n.endswith('.json')]
    if stored:
        return f'{stored[0]} is a stored profile (a data directory)'
    return None


def input_files(words):
    """The paths a command reads: arguments (and TYPE=PATH lists) that look like files."""
    paths = []
    for i, w in enumerate(words[1:], 1):
        if w.startswith('-') or words[i - 1] in OUTPUT_FLAGS:
            continue
        for piece in w.split(','):
            piece = piece.split('=', 1)[-1]
            if '/' in piece or re.search(r'\.(json|csv|log|txt|tsv)$', piece):
                paths.append(piece)
    return paths


def check_commands(source, spotdnn, data_dir):
    builtins = builtin_names(source)
    failures, ran, skipped = [], 0, 0
    for page in manual_pages(source):
        shown = os.path.relpath(page, source)
        commands = commands_of(page)
        if not commands:
            continue
        with tempfile.TemporaryDirectory(prefix='spotdnn-docs-') as work:
            os.symlink(os.path.join(source, 'deploy'), os.path.join(work, 'deploy'))
            os.makedirs(os.path.join(work, 'home'))
            env = dict(os.environ, SPOTDNN_HOME=os.path.join(work, 'home'),
                       HOME=os.path.join(work, 'home'))
            for number, command, variables in commands:
                where = f'{shown}:{number}'
                expanded = re.sub(r'\$\{?([A-Za-z_]\w*)\}?',
                                  lambda m: variables.get(m.group(1), m.group(0)), command)
                words = shlex.split(expanded, comments=True)
                expected = 0
                said = re.search(r'#.*\bexit(?: status)?\s+(\d+)', command)
                if said:
                    expected = int(said.group(1))
                reason = why_skipped(words, builtins)
                if reason is None and any('$' in w for w in words):
                    reason = 'uses a shell variable the block does not set'
                words = [re.sub(r'(^|[=,])\.\./shared/data', lambda m: m.group(1) + data_dir, w)
                         for w in words]
                if reason is None:
                    missing = [p for p in input_files(words)
                               if not os.path.exists(os.path.join(work, p))]
                    if missing:
                        reason = f'needs {missing[0]}, which is not there'
                if reason is not None:
                    skipped += 1
                    print(f'skip {where}: {reason}: {command.strip()[:100]}')
                    continue
                for flag in OUTPUT_FLAGS:
                    for value in flag_values(words, flag):
                        os.makedirs(os.path.join(work, os.path.dirname(value)), exist_ok=True)
                began = time.monotonic()
                try:
                    run = subprocess.run([spotdnn] + words[1:], cwd=work, env=env, timeout=600,
                                         capture_output=True, text=True)
                    code, err = run.returncode, run.stderr
                except subprocess.TimeoutExpired:
                    code, err = 'timeout', 'ran past 600 s'
                ran += 1
                print(f'ran  {where}: exit {code} (expected {expected}) in '
                      f'{time.monotonic() - began:.1f} s: {" ".join(words[1:])[:100]}')
                if code != expected:
                    failures.append(f'{where}: `{command.strip()}` exited {code}, the page says '
                                    f'{expected}:\n{err.strip()[-2000:]}')
    print(f'{ran} commands run, {skipped} skipped')
    if ran == 0:
        failures.append('no command of the manual was run: the check itself is broken')
    return failures


def main(argv):
    if len(argv) == 3 and argv[1] == 'links':
        failures = check_links(os.path.abspath(argv[2]))
    elif len(argv) == 5 and argv[1] == 'commands':
        failures = check_commands(os.path.abspath(argv[2]), os.path.abspath(argv[3]),
                                  os.path.abspath(argv[4]))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for f in failures:
        print(f'FAIL {f}', file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
