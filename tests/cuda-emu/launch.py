#!/usr/bin/env python3
"""Rewrites CUDA launches `kernel<<<grid, block[, shmem[, stream]]>>>(args)` of a .cu file into
`sq_emu_launch(sq_emu_config(grid, block, ...), "kernel", kernel, args)` for the CPU emulation
(tests/cuda-emu/include/cuda_runtime.h); everything else is copied unchanged, and a #line
directive keeps compiler messages pointing at the .cu file.

    launch.py IN.cu OUT.cc"""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_]\w*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>\s*\(', re.S)


def rewrite(text):
    def one(m):
        name, cfg = m.group(1), m.group(2)
        base = name.split('<')[0]
        return 'sq_emu_launch(sq_emu_config(%s), "%s", %s, ' % (cfg, base, name)
    out, n = LAUNCH.subn(one, text)
    if '<<<' in out or '>>>' in out:
        raise SystemExit('launch.py: a launch was not rewritten')
    return out, n


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    out, n = rewrite(text)
    if n == 0:
        raise SystemExit('launch.py: %s: no launch found' % src)
    with open(dst, 'w') as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(out)


if __name__ == '__main__':
    main()
