# tests/npy_write.py: writes .npy files from plain Python (no numpy) for the shell tests, which
# import it with `sys.path.insert(0, SRCDIR/tests)`. npy(path, descr, shape, fmt, values): descr
# the npy dtype ('<f4', '<i4', ...), fmt the matching struct code, values flat in C order.
import struct


def npy(path, descr, shape, fmt, values):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': (%s%s), }" % (
        descr, ", ".join(map(str, shape)), "," if len(shape) == 1 else "")
    h = d + " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() +
                struct.pack("<%d%s" % (len(values), fmt), *values))
