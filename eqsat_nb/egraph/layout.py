"""Array layout of the e-graph: column indices, flags and sentinels shared by all kernels.

Node columns live in `nodes[col, node]` (one contiguous row per column), children in
`children[node, k]` (a node's children contiguous), class columns in `classes[col, class]`,
parent (use) lists in `uses[col, entry]`. A class id is the id of the node that created it.
"""
MAXA = 8                  # max children of an e-node (attribute leaves + operands)

# nodes[col, n]
N_OP, N_PAYLOAD, N_CLS, N_NCH, N_NEXT, N_FLAGS, N_EPOCH = range(7)
NODE_COLS = 7
# N_EPOCH: meta[M_EPOCH] when the node's row (op, canonical children, class) last changed:
# created, children re-canonicalized, or its class merged into another. A match all of whose
# nodes are older than the previous search was found then (semi-naive matching, as egglog).
F_DEAD = 1                # congruent duplicate removed by rebuild
F_FILTERED = 2            # excluded by cycle filtering

# classes[col, c]
C_PARENT, C_SIZE, C_HEAD, C_TAIL, C_UHEAD, C_UTAIL, C_TYPE, C_CONST, C_STAMP = range(9)
CLASS_COLS = 9
T_LIT, T_TUPLE, T_UNKNOWN = -1, -2, -3   # C_TYPE of literal, split-tuple and untyped classes

# uses[col, u]
U_NODE, U_NEXT = range(2)

# meta[i]
M_NODES, M_USES, M_PENDING, M_CLASSES, M_ERR, M_ERR_A, M_ERR_B, M_STAMP, M_UNIONS, M_EPOCH = range(10)
M_DEAD = 10              # nodes rebuild marked F_DEAD (a lower bound: sizes the hash-cons table)
META_SIZE = 16
ERR_TYPE_MISMATCH = 1    # union of two typed classes: M_ERR_A, M_ERR_B are the classes
ERR_ADD_TYPE = 2         # add found an equal node of another type: M_ERR_A class, M_ERR_B type id

# op kinds (per op id) for the analysis
K_PLAIN, K_CONST_LEAF, K_INPUT = 0, 1, 2

EMPTY = -1
