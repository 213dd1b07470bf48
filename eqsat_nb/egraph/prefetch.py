"""A software prefetch for kernels whose next accesses are known a few iterations ahead (the
hash-cons probes of later matches): `prefetch(arr, i)` asks the CPU to bring the cache line of
element i of a 1-D or 2-D array (row i, first column) towards the cache, without waiting or
faulting. It changes no value: only when memory is read."""
from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, arr, idx):
    """llvm.prefetch (read, high locality, data cache) of &arr[idx] (&arr[idx, 0] if 2-D)."""
    if not isinstance(arr, types.Array) or not isinstance(idx, types.Integer):
        return None
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], idxty, types.intp)
        indices = [i] + [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, indices, wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen
