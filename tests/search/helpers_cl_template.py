import numpy as np
import looptune as lt

NAME = "mm_cl_test"
DEFAULT_ARGS = (64, 64, 64)

def algorithm(N, M, K, dtype="float32"):
    A = lt.placeholder((N, K), dtype, name="A"); B = lt.placeholder((K, M), dtype, name="B")
    k = lt.reduce_axis(K, name="k")
    C = lt.compute((N, M), lambda i, j: lt.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]

@lt.template(NAME)
def template(cfg, N, M, K, dtype="float32"):
    cfg.define_knob("bx", [4, 8, 16])
    cfg.define_knob("by", [4, 8])
    A, B, C = algorithm(N, M, K, dtype)
    s = lt.create_schedule(C)
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, cfg["by"].val, cfg["bx"].val)
    s[C].bind(io, "blockIdx.y"); s[C].bind(jo, "blockIdx.x")
    s[C].bind(ii, "threadIdx.y"); s[C].bind(ji, "threadIdx.x")
    return s, [A, B, C]

def hand_schedule(N, M, K, dtype="float32"):
    return template(N, M, K, dtype)

def reference(a, b):
    return a @ b
