#!/usr/bin/env python3
"""Which functions of our binaries a real run enters, for laying them out together.

    scripts/hot-functions.py OUT BINARY... -- COMMAND [ARG...]

Counts every entry into every function of each BINARY (its symbol table: build it unstripped)
while COMMAND runs, in every process that runs those files, and writes to OUT the names of the
functions entered at least once, one a line, in the order the linker should lay them out
(lld's --symbol-ordering-file; server/app/build.rs passes it on as OUTBOARD_SYMBOL_ORDER):

- the functions only the sandbox side entered (the agent and its launcher), then those both
  sides entered, then those only the server or client side entered, each group most entered
  first. Each process then maps one stretch of the file: the agent, re-executed from the same
  binary, does not pull in the server's pages nor the server the agent's.

How: one eBPF program on uprobes at every function's entry (one uprobe_multi link per binary,
Linux 6.6 or later), counting into an array indexed by the probe's cookie, doubled for the
sandbox side (told apart by the process's name: `agent`, or `exe` for the launcher). One link
attaches and detaches all probes at once: the tracefs uprobe_events way takes a twentieth of a
second to remove each of the ~25,000 probes. Needs root (CAP_BPF and CAP_PERFMON).

Prints how many functions it listed, and their bytes, to stderr. Exit 2 when the machine cannot
(no root, no uprobe_multi): scripts/build-dist.sh then links without an order.
"""
import ctypes
import mmap
import os
import struct
import subprocess
import sys

SYS_BPF = 321  # x86-64
BPF_MAP_CREATE, BPF_PROG_LOAD, BPF_LINK_CREATE = 0, 5, 28
BPF_MAP_TYPE_ARRAY, BPF_F_MMAPABLE = 2, 1 << 10
BPF_PROG_TYPE_KPROBE, BPF_TRACE_UPROBE_MULTI = 2, 48
HELPER_MAP_LOOKUP, HELPER_GET_CURRENT_COMM, HELPER_GET_ATTACH_COOKIE = 1, 16, 174
# Process names (`comm`) of the sandbox side: the agent runs as /run/outboard/agent, the launcher
# as /proc/self/exe.
SANDBOX_COMMS = (b"agent", b"exe")

libc = ctypes.CDLL(None, use_errno=True)


class Unsupported(Exception):
    """This machine cannot count: no root, no eBPF, no uprobe_multi."""


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr, 256)
    fd = libc.syscall(SYS_BPF, cmd, buf, 256)
    if fd < 0:
        err = ctypes.get_errno()
        raise Unsupported(f"bpf({cmd}): {os.strerror(err)}")
    return fd


def insn(op, dst=0, src=0, off=0, imm=0):
    return struct.pack("<BBhi", op, (src << 4) | dst, off, imm)


def ld_imm64(dst, value, src=0):
    return insn(0x18, dst, src, imm=value & 0xFFFFFFFF) + insn(0, imm=value >> 32)


def functions(binary):
    """[(file offset, [names])] of the binary's functions, one per address."""
    run = lambda *a: subprocess.run(a, capture_output=True, text=True, check=True).stdout
    segments = []
    for line in run("readelf", "-lW", binary).splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in " ".join(f[6:-1]):
            segments.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))
    out, at = [], {}
    for line in run("nm", "-S", "--defined-only", binary).splitlines():
        f = line.split()
        if len(f) != 4 or f[2] not in "tTW":
            continue
        addr = int(f[0], 16)
        for offset, vaddr, size in segments:
            if vaddr <= addr < vaddr + size:
                if addr in at:
                    out[at[addr]][1].append(f[3])
                else:
                    at[addr] = len(out)
                    out.append((addr - vaddr + offset, [f[3]]))
                break
    if not out:
        raise SystemExit(f"hot-functions.py: {binary} has no symbol table (build it unstripped)")
    return out


def program(map_fd, n):
    comm = [int.from_bytes(c.ljust(8, b"\0"), "little") for c in SANDBOX_COMMS]
    code = [
        insn(0xBF, 6, 1),                         # 0  r6 = ctx
        insn(0x85, imm=HELPER_GET_ATTACH_COOKIE), # 1  r0 = cookie (the function's index)
        insn(0xBF, 7, 0),                         # 2  r7 = r0
        insn(0xBF, 1, 10),                        # 3  r1 = fp
        insn(0x07, 1, imm=-16),                   # 4  r1 -= 16
        insn(0xB7, 2, imm=16),                    # 5  r2 = 16
        insn(0x85, imm=HELPER_GET_CURRENT_COMM),  # 6  comm → fp-16
        insn(0x79, 1, 10, -16),                   # 7  r1 = first 8 bytes of comm
        ld_imm64(2, comm[0]),                     # 8,9
        insn(0x1D, 1, 2, 4),                      # 10 if r1 == agent goto 15
        ld_imm64(2, comm[1]),                     # 11,12
        insn(0x1D, 1, 2, 1),                      # 13 if r1 == exe goto 15
        insn(0x05, off=1),                        # 14 goto 16
        insn(0x07, 7, imm=n),                     # 15 r7 += n (the sandbox side's half)
        insn(0x63, 10, 7, -4),                    # 16 key = r7
        ld_imm64(1, map_fd, src=1),               # 17,18 r1 = the map
        insn(0xBF, 2, 10),                        # 19 r2 = fp
        insn(0x07, 2, imm=-4),                    # 20 r2 -= 4
        insn(0x85, imm=HELPER_MAP_LOOKUP),        # 21 r0 = &counts[key]
        insn(0x15, 0, off=2),                     # 22 if !r0 goto 25
        insn(0xB7, 1, imm=1),                     # 23 r1 = 1
        insn(0xDB, 0, 1),                         # 24 atomic counts[key] += 1
        insn(0xB7, 0),                            # 25 r0 = 0
        insn(0x95),                               # 26 exit
    ]
    return b"".join(code)


def count(binaries, command):
    """Runs command with every function entry counted: {name: (sandbox, other)}, its status."""
    funcs = [(b, off, names) for b in binaries for off, names in functions(b)]
    n = len(funcs)
    map_fd = bpf(BPF_MAP_CREATE, struct.pack("<IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, 2 * n, BPF_F_MMAPABLE))
    code = ctypes.create_string_buffer(program(map_fd, n))
    license = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    attr = struct.pack("<IIQQIIQII16sII", BPF_PROG_TYPE_KPROBE, (len(code) - 1) // 8,
                       ctypes.addressof(code), ctypes.addressof(license), 1, len(log),
                       ctypes.addressof(log), 0, 0, b"hot_functions", 0, BPF_TRACE_UPROBE_MULTI)
    try:
        prog_fd = bpf(BPF_PROG_LOAD, attr)
    except Unsupported as e:
        raise Unsupported(f"{e}\n{log.value.decode(errors='replace')}") from None
    links, keep = [], []
    start = 0
    for b in binaries:
        mine = [f for f in funcs if f[0] == b]
        path = ctypes.create_string_buffer(os.path.realpath(b).encode())
        offsets = (ctypes.c_uint64 * len(mine))(*[f[1] for f in mine])
        cookies = (ctypes.c_uint64 * len(mine))(*range(start, start + len(mine)))
        keep += [path, offsets, cookies]
        attr = struct.pack("<IIIIQQQQIII", prog_fd, 0, BPF_TRACE_UPROBE_MULTI, 0,
                           ctypes.addressof(path), ctypes.addressof(offsets), 0,
                           ctypes.addressof(cookies), len(mine), 0, 0)
        links.append(bpf(BPF_LINK_CREATE, attr))
        start += len(mine)
    try:
        status = subprocess.run(command).returncode
    finally:
        for fd in links:
            os.close(fd)
        size = (2 * n * 8 + mmap.PAGESIZE - 1) // mmap.PAGESIZE * mmap.PAGESIZE
        with mmap.mmap(map_fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as m:
            counts = struct.unpack(f"<{2 * n}Q", m[: 2 * n * 8])
        os.close(prog_fd)
        os.close(map_fd)
    hits = {}
    for i, (_, _, names) in enumerate(funcs):
        other, sandbox = counts[i], counts[n + i]
        if other or sandbox:
            for name in names:
                s, o = hits.get(name, (0, 0))
                hits[name] = (s + sandbox, o + other)
    return hits, status


def order(hits):
    """Sandbox-only, then both, then the rest; most entered first within each."""
    group = lambda h: 0 if not h[1] else (1 if h[0] else 2)
    return sorted(hits, key=lambda name: (group(hits[name]), -sum(hits[name]), name))


def main():
    args = sys.argv[1:]
    if "--" not in args or args.index("--") < 2 or args[-1] == "--":
        raise SystemExit(__doc__.split("\n\n")[1])
    split = args.index("--")
    out, binaries, command = args[0], args[1:split], args[split + 1:]
    try:
        hits, status = count(binaries, command)
    except Unsupported as e:
        print(f"hot-functions.py: cannot count function entries here: {e}", file=sys.stderr)
        sys.exit(2)
    if status != 0:
        raise SystemExit(f"hot-functions.py: {' '.join(command)} exited {status}")
    names = order(hits)
    with open(out, "w") as f:
        f.write("".join(name + "\n" for name in names))
    groups = [sum(1 for h in hits.values() if g(h)) for g in
              (lambda h: not h[1], lambda h: h[0] and h[1], lambda h: not h[0])]
    print(f"hot-functions.py: {len(names)} functions entered ({groups[0]} in the sandbox only, "
          f"{groups[1]} on both sides, {groups[2]} outside it only) → {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
