#!/usr/bin/env python3
"""The loops of a kernel's SASS, counted: where the Hopper kernel's time goes per key step.

    python3 kernels/cuda/dev/sass_loops.py LIB KERNEL_SUBSTRING [--cuobjdump PATH] [--opcodes]
    python3 kernels/cuda/dev/sass_loops.py --listing SASS_TEXT KERNEL_SUBSTRING [--opcodes]
    python3 kernels/cuda/dev/sass_loops.py --self-test

Disassembles LIB (a .so or cubin; `cuobjdump -sass`, on a host with the CUDA toolkit's
cuobjdump) and, for every kernel whose name contains KERNEL_SUBSTRING (mangled or demangled),
finds its loops by their backward branches and prints, innermost first, each loop's
instruction count and the instructions that have cost these kernels time before
(docs/perf.md): HGMMA (16 per key step at head_dim 128: the consumers' key loop), R2UR (operands
moved to uniform registers: descriptors no longer loop-invariant), WARPSYNC, LDL/STL (local
memory: a spill on the path of every step), BAR (named barriers), and UTMALDG and SYNCS (TMA
loads and barrier waits: the producer's per-step loop issues the K and V loads). Shown: the
loops holding HGMMA or at least two UTMALDG; the others (barrier spins, the retry loop around
one TMA issue) only with --all. Two builds' lines side by side show whether a change left the
key loop and the producer's loop as they were before any timing. --opcodes adds, under each
loop shown, how many of its instructions each opcode has (with its first modifier: MUFU.EX2,
HGMMA.64x128x16): what a loop spends its instructions on, and which of them sit on paths a
step may skip (a branch over the masking or over the exact-mode softmax still counts here).
--listing reads a saved `cuobjdump -sass` listing instead of running cuobjdump.

A loop with exponentials also shows `MUFU.EX2 N GAPS-WITH-FMNMX G`: of the N - 1 gaps between
its consecutive MUFU.EX2, how many hold an FMNMX. In the softmax of the d128 kernels a thread
takes two rows' maxima (chains of 31 dependent FMNMX) and exponentials; the shipped schedule puts
the second row's chain among the first row's exponentials (G = 17 of 65), and builds where ptxas
takes both maxima first (G = 1) ran 3-5 % slower on every multi-round shape (docs/perf.md, "the
shipped kernel's 3 %"). A G near 1 marks a build on the slow side before any timing; a G like the
base's does not promise its speed.
"""
import argparse
import collections
import re
import subprocess
import sys

COUNTED = ("HGMMA", "R2UR", "WARPSYNC", "LDL", "STL", "BAR", "UTMALDG", "SYNCS")
_INSTR = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^\s*(\.L_x_\d+):")
# A branch names its target by label (`(.L_x_12)) or, as CUDA 13's cuobjdump prints it, by address.
_BRANCH_TARGET = re.compile(r"\b(?:BRA|BRX)\b[^;]*?(?:`?\((\.L_x_\d+)\)|\b0x([0-9a-f]+)\b)")
_FUNCTION = re.compile(r"Function\s*:\s*(\S+)")


def parse_functions(text):
    """{name: [(address, opcode_text)], ...} and the labels' addresses per function."""
    functions, labels = {}, {}
    name, pending = None, []
    for line in text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            name = m.group(1)
            functions[name], labels[name], pending = [], {}, []
            continue
        if name is None:
            continue
        m = _LABEL.match(line)
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.search(line)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[name][label] = address
            pending = []
            functions[name].append((address, m.group(2)))
    return functions, labels


def mnemonic(instruction):
    """The instruction's mnemonic with its modifiers, no predicate: '@P0 MUFU.EX2 R1, R2' -> 'MUFU.EX2'."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def opcode(instruction):
    """The opcode without predicate and modifiers: '@P0 HGMMA.64x128x16.F32' -> 'HGMMA'."""
    return mnemonic(instruction).split(".")[0]


def loops_of(instructions, labels):
    """Loops as (start, end) addresses from backward branches, innermost (shortest) first."""
    out = set()
    for address, text in instructions:
        if opcode(text) not in ("BRA", "BRX"):
            continue
        m = _BRANCH_TARGET.search(text)
        if not m:
            continue
        target = labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)
        if target is not None and target <= address:
            out.add((target, address))
    return sorted(out, key=lambda span: (span[1] - span[0], span[0]))


def opcode_with_modifier(instruction):
    """The opcode and its first modifier: '@P0 HGMMA.64x128x16.F32 R1' -> 'HGMMA.64x128x16'."""
    return ".".join(mnemonic(instruction).split(".")[:2])


def opcode_histogram(instructions, span):
    """[(opcode with modifier, count)] of the instructions in span, most frequent first."""
    start, end = span
    counts = collections.Counter(opcode_with_modifier(t) for a, t in instructions if start <= a <= end)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def count(instructions, span):
    start, end = span
    inside = [opcode(t) for a, t in instructions if start <= a <= end]
    row = {"instructions": len(inside)}
    for name in COUNTED:
        row[name] = sum(1 for o in inside if o == name)
    return row


def exponential_gaps(instructions, span):
    """(MUFU.EX2 count, gaps between consecutive MUFU.EX2 that hold at least one FMNMX) in span."""
    start, end = span
    inside = [t for a, t in instructions if start <= a <= end]
    exps = [i for i, t in enumerate(inside) if mnemonic(t).startswith("MUFU.EX2")]
    maxima = [i for i, t in enumerate(inside) if opcode(t) == "FMNMX"]
    gaps = sum(1 for lo, hi in zip(exps, exps[1:]) if any(lo < i < hi for i in maxima))
    return len(exps), gaps


def report(text, substring, every_loop=False, opcodes=False):
    functions, labels = parse_functions(text)
    lines = []
    for name, instructions in functions.items():
        if substring not in name:
            continue
        lines.append(f"{name}: {len(instructions)} instructions")
        for span in loops_of(instructions, labels[name]):
            row = count(instructions, span)
            if not every_loop and row["HGMMA"] == 0 and row["UTMALDG"] < 2:
                continue  # barrier spins, the retry loop of one TMA issue
            fields = " ".join(f"{k} {row[k]}" for k in COUNTED)
            exps, gaps = exponential_gaps(instructions, span)
            if exps >= 2:
                fields += f" MUFU.EX2 {exps} GAPS-WITH-FMNMX {gaps}"
            lines.append(f"  loop {span[0]:#06x}-{span[1]:#06x}: {row['instructions']} instructions, {fields}")
            if opcodes:
                lines.append("    " + " ".join(f"{op} {n}" for op, n in opcode_histogram(instructions, span)))
    return "\n".join(lines)


def self_test():
    text = """
	code for sm_90a
		Function : _Z6kernelv
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_1:
        /*0010*/                   R2UR UR4, R2 ;
.L_x_2:
        /*0020*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;
        /*0030*/                   LDL R3, [R1] ;
        /*0040*/              @P0 BRA `(.L_x_2) ;
        /*0050*/                   WARPSYNC.ALL ;
        /*0060*/              @P1 BRA `(.L_x_1) ;
        /*0068*/              @P2 BRA 0x20 ;
        /*0070*/                   BRA `(.L_x_3) ;
.L_x_3:
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*0090*/              @!P0 BRA 0x80 ;
        /*00a0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
        /*00b0*/                   UTMALDG.3D [UR8], [UR6] ;
        /*00c0*/              @P0 BRA 0xb0 ;
        /*00d0*/                   UTMALDG.3D [UR12], [UR6] ;
        /*00e0*/              @P1 BRA 0xa0 ;
        /*00f0*/                   EXIT ;
"""
    functions, labels = parse_functions(text)
    assert list(functions) == ["_Z6kernelv"], functions
    spin, tma_retry, inner, producer, by_address, outer = loops_of(functions["_Z6kernelv"], labels["_Z6kernelv"])
    assert (spin, tma_retry, inner, producer, outer, by_address) == (
        (0x80, 0x90), (0xb0, 0xc0), (0x20, 0x40), (0xa0, 0xe0), (0x10, 0x60), (0x20, 0x68)), (
        spin, tma_retry, inner, producer, outer, by_address)
    assert count(functions["_Z6kernelv"], inner) == {"instructions": 3, "HGMMA": 1, "R2UR": 0, "WARPSYNC": 0,
                                                       "LDL": 1, "STL": 0, "BAR": 0, "UTMALDG": 0, "SYNCS": 0}
    assert count(functions["_Z6kernelv"], producer)["UTMALDG"] == 2 and count(functions["_Z6kernelv"], producer)["SYNCS"] == 1
    assert count(functions["_Z6kernelv"], outer)["R2UR"] == 1 and count(functions["_Z6kernelv"], outer)["WARPSYNC"] == 1
    assert opcode("@!P2 HGMMA.64x128x16.F32.BF16 R1, R2") == "HGMMA"
    assert "loop 0x0020-0x0040: 3 instructions, HGMMA 1" in report(text, "kernel")
    assert "0x0010-0x0060" in report(text, "kernel") and "0x0010-0x0060" in report(text, "kernel", every_loop=True)
    # A barrier spin (no HGMMA) is shown only when every loop is asked for.
    assert "0x0080-0x0090" not in report(text, "kernel") and "0x0080-0x0090" in report(text, "kernel", every_loop=True)
    # The producer's loop (two TMA loads) is shown; the retry loop around one TMA issue is not.
    assert "loop 0x00a0-0x00e0: 5 instructions" in report(text, "kernel")
    assert "0x00b0-0x00c0" not in report(text, "kernel") and "0x00b0-0x00c0" in report(text, "kernel", every_loop=True)
    assert report(text, "other") == ""
    assert opcode_with_modifier("@!P2 HGMMA.64x128x16.F32.BF16 R1, R2") == "HGMMA.64x128x16"
    assert opcode_histogram(functions["_Z6kernelv"], inner) == [("BRA", 1), ("HGMMA.64x128x16", 1), ("LDL", 1)]
    with_opcodes = report(text, "kernel", opcodes=True).splitlines()
    at = with_opcodes.index("  loop 0x0020-0x0040: 3 instructions, HGMMA 1 R2UR 0 WARPSYNC 0 LDL 1 STL 0 BAR 0 "
                            "UTMALDG 0 SYNCS 0")
    assert with_opcodes[at + 1] == "    BRA 1 HGMMA.64x128x16 1 LDL 1", with_opcodes[at + 1]
    # Exponentials: the maxima of a second row between them (two of three gaps), or all first.
    softmax = """
		Function : _Z7softmaxv
        /*0000*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;
        /*0010*/                   FMNMX R2, R3, R4, !PT ;
        /*0020*/                   MUFU.EX2 R5, R6 ;
        /*0030*/                   FMNMX R2, R2, R7, !PT ;
        /*0040*/                   MUFU.EX2 R8, R9 ;
        /*0050*/                   MUFU.EX2 R10, R11 ;
        /*0060*/                   FMNMX R2, R2, R12, !PT ;
        /*0070*/                   MUFU.EX2 R13, R14 ;
        /*0080*/              @P0 BRA 0x0 ;
        /*0090*/                   FMNMX R2, R3, R4, !PT ;
        /*00a0*/                   FMNMX R2, R2, R7, !PT ;
        /*00b0*/                   MUFU.EX2 R5, R6 ;
        /*00c0*/                   MUFU.EX2 R8, R9 ;
        /*00d0*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], R24 ;
        /*00e0*/              @P0 BRA 0x90 ;
        /*00f0*/                   EXIT ;
"""
    sf, sl = parse_functions(softmax)
    interleaved, maxima_first = loops_of(sf["_Z7softmaxv"], sl["_Z7softmaxv"])[::-1]
    assert exponential_gaps(sf["_Z7softmaxv"], interleaved) == (4, 2), exponential_gaps(sf["_Z7softmaxv"], interleaved)
    assert exponential_gaps(sf["_Z7softmaxv"], maxima_first) == (2, 0)
    assert "loop 0x0000-0x0080: 9 instructions, HGMMA 1 R2UR 0 WARPSYNC 0 LDL 0 STL 0 BAR 0 UTMALDG 0 SYNCS 0 " \
           "MUFU.EX2 4 GAPS-WITH-FMNMX 2" in report(softmax, "softmax")
    assert "GAPS" not in report(text, "kernel")  # no exponentials, no field
    print("self-test passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lib", nargs="?")
    ap.add_argument("kernel", nargs="?", help="a substring of the kernel's name (mangled or demangled)")
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--all", action="store_true", help="every loop, not only those holding HGMMA")
    ap.add_argument("--opcodes", action="store_true", help="each loop's instructions counted by opcode")
    ap.add_argument("--listing", action="store_true", help="LIB is a saved `cuobjdump -sass` listing")
    ap.add_argument("--self-test", action="store_true", help="check the parser on a synthetic listing (no CUDA)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.lib or args.kernel is None:
        ap.error("LIB and KERNEL_SUBSTRING are required")
    try:
        if args.listing:
            with open(args.lib) as f:
                text = f.read()
        else:
            text = subprocess.run([args.cuobjdump, "-sass", args.lib], check=True, capture_output=True,
                                  text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"sass_loops: reading the SASS of {args.lib} failed: {e}", file=sys.stderr)
        return 2
    out = report(text, args.kernel, args.all, args.opcodes)
    if not out:
        print(f"sass_loops: no kernel in {args.lib} has '{args.kernel}' in its name", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
