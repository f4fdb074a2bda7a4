#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py: writes the generated seed files of tests/fuzz/corpus/ again
(safetensors, npy, IDX, override sets). The model seeds are copies of models/*.yaml and the
checkpoint seeds come from `baton run` (docs/testing.md). Run from the repository root with a
Python that has numpy (Debian: python3-numpy, /usr/bin/python3)."""
import gzip
import json
import struct

import numpy as np

C = 'tests/fuzz/corpus'


def safetensors(path, tensors, meta=None):
    hdr, data = {}, b''
    if meta:
        hdr['__metadata__'] = meta
    for name, (dt, shape, raw) in tensors.items():
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(',', ':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + data)


def idx(path, arr, gz=False):
    raw = struct.pack('>I', 0x800 | arr.ndim) + b''.join(struct.pack('>I', d) for d in arr.shape)
    raw += arr.astype('u1').tobytes()
    # mtime=0: the same bytes every time
    (gzip.GzipFile(path, 'wb', mtime=0) if gz else open(path, 'wb')).write(raw)


S = C + '/fuzz_safetensors/'
safetensors(S + 'dtypes.safetensors', {
    'w.f32': ('F32', [2, 3], np.arange(6, dtype='<f4').tobytes()),
    'w.f64': ('F64', [2], np.array([1.5, -2], dtype='<f8').tobytes()),
    'w.f16': ('F16', [3], np.array([1, 2, 3], dtype='<f2').tobytes()),
    'w.bf16': ('BF16', [2], b'\x80\x3f\x00\x40'),
    'i.i32': ('I32', [2], np.array([7, -1], dtype='<i4').tobytes()),
    'i.i64': ('I64', [1], np.array([5], dtype='<i8').tobytes()),
    'b.u8': ('U8', [4], bytes([1, 2, 3, 4])),
    'flag': ('BOOL', [1], b'\x01'),
}, {'format': 'pt', 'step': '12'})
safetensors(S + 'empty-and-scalar.safetensors', {
    'empty': ('F32', [0, 4], b''),
    'scalar': ('F32', [], np.array([3.25], dtype='<f4').tobytes()),
})
safetensors(S + 'no-tensors.safetensors', {}, {'only': 'metadata'})

N = C + '/fuzz_npy/'
np.save(N + 'f4-2x3.npy', np.arange(6, dtype='<f4').reshape(2, 3))
np.save(N + 'f8-scalar.npy', np.array(2.5, dtype='<f8'))
np.save(N + 'i4-labels.npy', np.array([0, 1, 2, 1], dtype='<i4'))
np.save(N + 'i8-labels.npy', np.array([3, 0], dtype='<i8'))
np.save(N + 'u1-images.npy', np.arange(2 * 3 * 3, dtype='u1').reshape(2, 3, 3))
np.save(N + 'f4-empty.npy', np.zeros((0, 5), dtype='<f4'))
# a version 2.0 header, by hand (numpy writes 2.0 only for huge headers)
d = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"
h = d + ' ' * ((64 - (12 + len(d) + 1) % 64) % 64) + '\n'
open(N + 'v2-f4.npy', 'wb').write(b'\x93NUMPY\x02\x00' + struct.pack('<I', len(h)) + h.encode()
                                  + np.array([1, 2, 3], dtype='<f4').tobytes())

I = C + '/fuzz_idx/'
idx(I + 'images-2x3x3-idx3-ubyte', np.arange(18).reshape(2, 3, 3))
idx(I + 'labels-2-idx1-ubyte', np.array([4, 9]))
idx(I + 'images-2x2x2-idx3-ubyte.gz', np.arange(8).reshape(2, 2, 2), gz=True)
idx(I + 'labels-3-idx1-ubyte.gz', np.array([0, 1, 2]), gz=True)
idx(I + '4d-1x2x2x2-idx4-ubyte', np.arange(8).reshape(1, 2, 2, 2))

O = C + '/fuzz_overrides/'
for i, t in enumerate([
        "train.optimizer.lr=3e-4",
        "layers.fc1.args.out=64\nparallel.pipeline.stages=1\nparallel.devices=[cpu:0]",
        "parallel.pipeline.schedule=gpipe\ntrain.optimizer={type: sgd, lr: 0.1, momentum: 0.9}",
        "layers.0.act=tanh\nlayers.blocks.repeat=3\ntrain.precision=bf16",
        "data.train={type: npy, images: x.npy, labels: y.npy}\ntrain.batch=16",
        "parallel.pipeline.partition={balance: [3, 3]}\nname=other"]):
    open(O + 'set%d.txt' % i, 'w').write(t)
