#!/usr/bin/env python3
"""The Hopper kernels' instruction classes read from their sm_90a code, without cuobjdump.

A build machine has nvcc and ptxas but not cuobjdump or nvdisasm (kernels/cuda/dev/sass_loops.py
needs one on the GPU host). This script reads the sm_90a cubin embedded in an object that nvcc
wrote (`build_hopper_dev.sh`'s OUT/NAME/fused_wgmma_{fp16,bf16}.cu.o) or a .cubin, and per
kernel (`.text.<kernel>` section) classifies each 16-byte instruction by the low 12 bits of its
first word, which name the opcode and its operand form. Four classes are identified:
MUFU (0x308), FMNMX (0x209), HGMMA with both operands in shared memory (0xdf0, Q K^T) and with A
in registers (0x9f0, P V). The classes are read from the bits, not from a disassembler; they fit
the d128 st2/persistent kernel's structure (16 + 16 HGMMA: the peeled step's and the key loop's
Q K^T, the key loop's and the last P V; 66 MUFU in each softmax), and its G below is the 17 that
sass_loops.py found with cuobjdump on a GPU host.

What it is for: ptxas places the second row's maximum among the first row's exponentials in the
shipped key loop, and nearby sources often lose that interleave and run about 3 % slower
(docs/perf.md, "the shipped kernel's 3 %"). G counts it: in the softmax between the kernel's first
two Q K^T groups, the gaps between consecutive MUFU that hold an FMNMX (17 in the shipped kernel,
0 in the slow schedule). So a variant can be screened here, before any GPU time:

  cubin_opcodes.py [--kernel PATTERN] [--base OBJ] OBJ...

prints per object each matching kernel's instructions, class counts, G and, with --base, the
opcode-sequence similarity to the base's kernel of the same name (whole, then split where the
set-up ends at the first HGMMA: a change of the tile decode shows in the set-up, a moved key-loop
schedule after it) and which kernels differ from the base at all (byte for byte and opcode for
opcode). The similarity says where a variant changed code, not whether it is faster: against
the same base, the fp16 kernel with the 32-bit tile decode (measured 0.5 % faster) is 0.80
similar (0.83 from the first HGMMA on), two tile handovers that lost 0.8-1.1 % are 0.74-0.75
(0.78-0.79). --self-test checks the ELF reading and the counting on a synthetic cubin.
"""
import argparse
import difflib
import struct
import sys

MUFU, FMNMX, HGMMA_SS, HGMMA_RS = 0x308, 0x209, 0xDF0, 0x9F0
DEFAULT_KERNEL = "Li128ELi128ELi128ELi2ELb0ELb1EEELb0E"  # d128 bm128 bs128 st2 persistent, unsplit


EM_CUDA = 190


def elf_sections(elf):
    """Section name -> bytes of an ELF64 little-endian image of NVIDIA GPU code."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or struct.unpack_from("<H", elf, 0x12)[0] != EM_CUDA:
        raise ValueError("not a cubin")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]
    sections = {}
    for name, _type, _flags, _addr, offset, size in headers:
        end = elf.index(b"\0", names_at + name)
        sections[elf[names_at + name:end].decode()] = elf[offset:offset + size]
    return sections


def cubin_of(data):
    """The cubin of an object (the first embedded GPU ELF holding kernel text; the object itself is
    a host ELF) or the cubin itself."""
    start = 0
    while True:
        at = data.find(b"\x7fELF", start)
        if at < 0:
            raise ValueError("no cubin with kernel code found")
        try:
            sections = elf_sections(data[at:])
        except (ValueError, struct.error, IndexError):
            sections = {}
        if any(name.startswith(".text.") for name in sections):
            return sections
        start = at + 4


def opcodes(text):
    return [struct.unpack_from("<Q", text, i)[0] & 0xFFF for i in range(0, len(text) - 15, 16)]


def softmax_gaps(ops):
    """(MUFU count, G) in the softmax between the first and second groups of Q K^T HGMMA."""
    ss = [i for i, op in enumerate(ops) if op == HGMMA_SS]
    if len(ss) < 9:
        return 0, 0
    lo, hi = ss[0], ss[8]
    mufu = [i for i in range(lo, hi) if ops[i] == MUFU]
    gaps = sum(1 for a, b in zip(mufu, mufu[1:]) if FMNMX in ops[a + 1:b])
    return len(mufu), gaps


def describe(text, base_text=None):
    ops = opcodes(text)
    count = {c: ops.count(c) for c in (MUFU, FMNMX, HGMMA_SS, HGMMA_RS)}
    mufu, gaps = softmax_gaps(ops)
    line = (f"{len(ops)} instructions, MUFU {count[MUFU]}, FMNMX {count[FMNMX]}, "
            f"HGMMA {count[HGMMA_SS]}+{count[HGMMA_RS]}, softmax MUFU {mufu} G {gaps}")
    if base_text is not None:
        base_ops = opcodes(base_text)
        if base_text == text:
            line += ", the base's byte for byte"
        else:
            line += f", opcode similarity to the base {similarity(base_ops, ops):.3f}"
            b, v = first_hgmma(base_ops), first_hgmma(ops)
            line += (f" (set-up {similarity(base_ops[:b], ops[:v]):.3f},"
                     f" from the first HGMMA on {similarity(base_ops[b:], ops[v:]):.3f})")
    return line


def similarity(a, b):
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def first_hgmma(ops):
    """Where the set-up ends: the first HGMMA of either form (len(ops) without one)."""
    return next((i for i, op in enumerate(ops) if op in (HGMMA_SS, HGMMA_RS)), len(ops))


def kernels(sections, pattern):
    return sorted(k for k in sections if k.startswith(".text.") and pattern in k)


def report(paths, pattern, base_path=None, out=sys.stdout):
    base = cubin_of(open(base_path, "rb").read()) if base_path else None
    for path in paths:
        sections = cubin_of(open(path, "rb").read())
        print(path, file=out)
        for k in kernels(sections, pattern):
            base_text = base.get(k) if base else None
            print(f"  {k[len('.text.'):]}: {describe(sections[k], base_text)}", file=out)
        if base:
            names = sorted(k for k in sections if k.startswith(".text."))
            changed = [k for k in names if base.get(k) != sections[k]]
            ops_changed = [k for k in changed if k not in base or opcodes(base[k]) != opcodes(sections[k])]
            print(f"  {len(names)} kernels: {len(names) - len(changed)} byte for byte the base's, "
                  f"{len(ops_changed)} with other opcodes", file=out)
            for k in ops_changed:
                print(f"    differs: {k[len('.text.'):]}", file=out)


def synthetic_elf(sections):
    """An ELF64 image with the given (name, bytes) sections and a section-name table."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in sections) + b".shstrtab\0"
    body, offsets, at = b"", [], 64
    for _, data in sections:
        offsets.append(at + len(body))
        body += data
    names_off = at + len(body)
    body += names
    shoff = at + len(body)
    header = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 2, EM_CUDA, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(sections) + 2,
                          len(sections) + 1)
    table = bytes(64)  # the null section
    name_at = 1
    for (name, data), off in zip(sections, offsets):
        table += struct.pack("<IIQQQQIIQQ", name_at, 1, 6, 0, off, len(data), 0, 0, 16, 0)
        name_at += len(name) + 1
    table += struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, names_off, len(names), 0, 0, 1, 0)
    return header + body + table


def self_test():
    def text(ops):
        return b"".join(struct.pack("<QQ", (0xABC000 | op) if op < 0x1000 else op, 0) for op in ops)

    # Q K^T (8 HGMMA), a softmax of 5 MUFU with FMNMX in 2 of the 4 gaps, the next Q K^T (8), P V (8).
    fast = [HGMMA_SS] * 8 + [MUFU, FMNMX, MUFU, 0x223, MUFU, FMNMX, 0x223, MUFU, MUFU] + [HGMMA_SS] * 8 + [HGMMA_RS] * 8
    slow = [HGMMA_SS] * 8 + [FMNMX, FMNMX, MUFU, 0x223, MUFU, 0x223, MUFU, MUFU, MUFU] + [HGMMA_SS] * 8 + [HGMMA_RS] * 8
    assert softmax_gaps(opcodes(text(fast))) == (5, 2), softmax_gaps(opcodes(text(fast)))
    assert softmax_gaps(opcodes(text(slow))) == (5, 0)
    assert softmax_gaps([MUFU, FMNMX, MUFU]) == (0, 0)  # no Q K^T groups: nothing counted
    base = synthetic_elf([(".text.kA" + DEFAULT_KERNEL, text(fast)), (".text.kB", text([0x223] * 4))])
    other = synthetic_elf([(".text.kA" + DEFAULT_KERNEL, text(slow)), (".text.kB", text([0x223] * 4))])
    host = bytearray(synthetic_elf([(".text.main", text([0x223] * 2))]))
    struct.pack_into("<H", host, 0x12, 62)  # x86-64: the object's own ELF, whose .text is host code
    padded = bytes(host) + b"\x7fELF-not-an-elf" + other  # an object: the cubin somewhere inside
    sections = cubin_of(padded)
    assert kernels(sections, DEFAULT_KERNEL) == [".text.kA" + DEFAULT_KERNEL], sections.keys()
    line = describe(sections[".text.kA" + DEFAULT_KERNEL], cubin_of(base)[".text.kA" + DEFAULT_KERNEL])
    assert "softmax MUFU 5 G 0" in line and "HGMMA 16+8" in line and "similarity" in line, line
    assert "(set-up 1.000, from the first HGMMA on 0." in line, line  # both start with Q K^T
    assert first_hgmma([0x223, 0x223, HGMMA_RS, HGMMA_SS]) == 2 and first_hgmma([0x223]) == 1
    assert "byte for byte" in describe(sections[".text.kB"], cubin_of(base)[".text.kB"])
    import io
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, image in (("base.o", base), ("other.o", padded)):
            paths.append(os.path.join(tmp, name))
            with open(paths[-1], "wb") as f:
                f.write(image)
        out = io.StringIO()
        report([paths[1]], DEFAULT_KERNEL, base_path=paths[0], out=out)
        text_out = out.getvalue()
        assert "2 kernels: 1 byte for byte the base's, 1 with other opcodes" in text_out, text_out
        assert "differs: kA" + DEFAULT_KERNEL in text_out, text_out
    print("cubin_opcodes self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("objects", nargs="*", help="objects nvcc wrote for sm_90a, or cubins")
    ap.add_argument("--kernel", default=DEFAULT_KERNEL, help="a substring of the kernels' mangled names")
    ap.add_argument("--base", help="the base build's object of the same source")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.objects:
        ap.error("give at least one object")
    report(args.objects, args.kernel, args.base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
