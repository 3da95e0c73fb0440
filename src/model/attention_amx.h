#pragma once
// Attention of a prompt's blocks on Intel's AMX tiles (Sapphire Rapids and later), beside
// ops::attend_block's vector loops. A 16 × 16 × 32 tile product is 8192 multiply-adds in one
// instruction, so the two products of attention (Q·K, P·V) stop being what a long prompt waits
// for: with vector FMAs alone they were most of a 16k prompt's time.
//
// AMX multiplies bfloat16, which keeps 8 bits of a float's 24. Each operand is split in two
// bfloat16s, x = hi + lo with lo = bf16(x − hi), and a product taken as hi·hi + hi·lo + lo·hi
// (the lo·lo term is below 2^-16 of it), accumulated in F32: about 16 bits, near the F32 loops'
// results rather than bfloat16's, at a third of the tiles' speed. F16 cache elements (11 bits)
// are exactly hi + lo. The softmax is online over 64-key chunks at positions that are multiples
// of 64, so a query vector's result does not depend on which block or tile it is computed in.
#include "model/ops.h"

namespace orchard::model::ops {

// Whether this CPU has AMX's BF16 tiles and AVX-512's BF16 conversions, and the OS lets the
// process use the tiles (Linux asks for them once, per process). False off x86-64 Linux.
bool amx_available();
// Whether attend_block takes the AMX path for this block: amx_available(), the AVX-512 kernel
// set chosen, AMX allowed, widths the tiles divide (head_dim by 32, value_dim by 16), and an F16
// or Q8_0 cache: those round each element by 2^-12 or more when stored, far above the split
// products' 2^-17, while an F32 cache is asked for float precision, which the vector loops
// keep. Decode steps too, though their one row of 8 query heads fills half a tile (the vector
// loops were 1.1-1.3× faster there at depth 4096, even at 16384): a row's attention must not
// depend on the rows it is batched with (a prompt cut into chunks by the server's load, a
// cached prefix, test_batch), and the two paths differ in their last bits.
bool amx_suits(const AttentionBlock& block);
// Allowed unless the environment variable ORCHARD_AMX is "0" at start; tests and benchmarks set
// it to compare both paths in one process. Not thread-safe: call between computations.
void allow_amx_attention(bool allowed);
// attend_block's result computed on the tiles. Call only where amx_available().
void attend_block_amx(const AttentionBlock& block);

}  // namespace orchard::model::ops
