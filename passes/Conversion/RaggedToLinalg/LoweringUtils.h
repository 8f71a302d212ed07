//===- LoweringUtils.h - helpers shared by the ragged lowerings -*- C++ -*-===//

#ifndef RAGGED_PASSES_LOWERINGUTILS_H
#define RAGGED_PASSES_LOWERINGUTILS_H

#include "dialect/RaggedDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Utils/StructuredOpsUtils.h"

namespace mlir::ragged::lowering {

/// The physical form of a ragged value after type conversion.
struct Packed {
  RaggedTensorType type;
  Value values;
  /// One offsets tensor per distinct symbol, in order of first appearance.
  SmallVector<Value> partitions;

  Value offsets(StringAttr symbol) const;
  /// Values followed by partitions, cast to the converted types of `type`
  /// where a static extent differs: what replaces the ragged value.
  SmallVector<Value> flatten(OpBuilder &b, Location loc) const;
};

/// Reassembles the converted operand range of a ragged value.
Packed unpack(Value original, ValueRange converted);

/// `v` cast to `type` when a static/dynamic extent differs.
Value castTo(OpBuilder &b, Location loc, Value v, Type type);
Value constIndex(OpBuilder &b, Location loc, int64_t v);
Value dimOf(OpBuilder &b, Location loc, Value tensor, int64_t d);
/// `tensor[i]` of an i64 tensor, as an index.
Value loadIndex(OpBuilder &b, Location loc, Value tensor, ValueRange i);
/// Entry `row` of a per-row i64 table `[rows]` as an index, `row` clamped
/// to the last entry. IREE may fuse a generic over packed rows into the
/// packing of a data-tiled GEMM and evaluate it on the pack's padding rows
/// too; clamped, those read a real row's entry, never past the table.
Value loadRowEntry(OpBuilder &b, Location loc, Value table, Value row);
/// Number of segments of an offsets tensor: its size minus one.
Value numSegments(OpBuilder &b, Location loc, Value offsets);
/// Offsets without their last and without their first entry: the [n] starts
/// and ends of the segments.
std::pair<Value, Value> segmentBounds(OpBuilder &b, Location loc,
                                      Value offsets);
/// Largest segment length of an offsets tensor (0 when there is none).
Value maxSegmentLength(OpBuilder &b, Location loc, Value offsets);
/// Binary search: the largest i in [lo, hi] at which `holds(i)` is true,
/// for a predicate true up to some index and false after it, true at `lo`.
Value searchLast(OpBuilder &b, Location loc, Value lo, Value hi,
                 function_ref<Value(OpBuilder &, Location, Value)> holds);
/// The segment holding `row`: the largest s with offsets[s] <= row (binary
/// search; skips empty segments). Valid for 0 <= row < offsets[last].
Value findSegment(OpBuilder &b, Location loc, Value offsets, Value row);
/// The segment of each of `rows` rows, `[rows]` i64, searched once per row.
/// Read it with tensor.extract in a per-element generic: as an input, IREE
/// would fuse the search into (and repeat it for) every element of the row.
Value segmentOfRows(OpBuilder &b, Location loc, Value offsets, Value rows);
/// The segment of each packed row, for a generic over the rows `[rows, ...]`
/// that reads per-segment tables. With identity-mapped operands only, IREE
/// collapses (row, trailing) into one dim and every table read becomes a
/// per-element gather; `operand` (the first `rows` entries of `table`, one
/// longer: a slice that is not the whole is not fused) passed with `map`
/// keeps the dims apart. Read the segment with `at` (uniform across the
/// trailing dims), and return the body's value through `keep`: IREE erases
/// an operand its body does not read.
struct RowSegments {
  Value table, operand;
  AffineMap map;
  /// The segment of row `row` (linalg.index 0), as an index.
  Value at(OpBuilder &b, Location loc, Value row) const;
  /// `v`, selected on the row's operand entry: every row has a segment, so
  /// the select keeps `v`.
  Value keep(OpBuilder &b, Location loc, Value entry, Value v) const;
};
RowSegments rowSegments(OpBuilder &b, Location loc, Value offsets, Value rows,
                        unsigned rank);
/// `result`, its generic marked `ragged.whole_rows` (kWholeRowsAttr): it
/// reads packed rows through a per-row or per-tile index.
Value markWholeRows(Value result);
/// A RowSegments over any per-row table of `rows + 1` entries (`rowSegments`
/// makes the segment of each row), for a generic of `rank` loops.
RowSegments rowTable(OpBuilder &b, Location loc, Value table, Value rows,
                     unsigned rank);
/// `init` plus the i64 terms `term(j)`, j in [lo, hi), in an scf.for.
Value sumTerms(OpBuilder &b, Location loc, Value lo, Value hi, Value init,
               function_ref<Value(OpBuilder &, Location, Value)> term);
/// Scans over items run in chunks of this many items: the sums of each
/// chunk, their prefix over the chunks, then a walk within one chunk.
constexpr int64_t kScanChunk = 64;
/// Items [first, end) of chunk `c` of `n` items.
std::pair<Value, Value> scanChunk(OpBuilder &b, Location loc, Value c, Value n);
/// Number of chunks of `n` items.
Value numScanChunks(OpBuilder &b, Location loc, Value n);
/// For each of `columns` columns, the exclusive prefix over chunks of the
/// column's chunk sums, `[chunks + 1, columns]` i64: row c holds the sum of
/// `term(j, k)` (i64) over the items j before chunk c; the last row holds
/// the column totals. O(n columns kScanChunk + chunks^2 columns).
Value chunkPrefix(
    OpBuilder &b, Location loc, Value n, int64_t columns,
    function_ref<Value(OpBuilder &, Location, Value j, Value k)> term);
/// Exclusive prefix sum of an i64 `[n]` tensor, as an `[n + 1]` tensor.
Value exclusivePrefixSum(OpBuilder &b, Location loc, Value sizes);
/// Exclusive prefix sum of the i64 terms `term(j)`, j in [0, n), as an
/// `[n + 1]` tensor; `term` is built inside the scan's loop.
Value exclusivePrefixSum(
    OpBuilder &b, Location loc, Value n,
    function_ref<Value(OpBuilder &, Location, Value)> term);

/// Offsets of a window op's output extents along one spatial dim, from the
/// input's: the ops' extent rule per image (0 for an empty image).
Value windowOffsets(OpBuilder &b, Location loc, Value inOffsets,
                    const WindowDim &dim);

/// An empty tensor of `shape` (dynamic extents taken from `dynSizes`).
Value emptyTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                  Type elementType, ValueRange dynSizes);
/// An identity-mapped, all-parallel linalg.generic producing one tensor.
Value parallelGeneric(
    OpBuilder &b, Location loc, Value init, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps,
    function_ref<Value(OpBuilder &, Location, ValueRange)> body);
/// The same with one identity-mapped result per init (all of one shape).
SmallVector<Value> parallelGeneric(
    OpBuilder &b, Location loc, ValueRange inits, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps,
    function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)> body);

/// A linalg.generic with explicit maps (inputs then output) and iterators.
Value structured(OpBuilder &b, Location loc, Value init, ValueRange inputs,
                 ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
                 function_ref<Value(OpBuilder &, Location, ValueRange)> body);

/// Identity of a reduction: the value an empty segment starts from.
Value reduceIdentity(OpBuilder &b, Location loc, ReduceKind kind, Type t);
/// One step of a reduction of `kind` (the sum for sum and mean).
Value reduceCombine(OpBuilder &b, Location loc, ReduceKind kind, Value acc,
                    Value v);

/// A float constant of `type`.
Value floatConst(OpBuilder &b, Location loc, Type type, double v);
/// Indices of every loop of the enclosing linalg.generic.
SmallVector<Value> loopIndices(OpBuilder &b, Location loc, unsigned rank);
/// An empty tensor shaped like `like` (its element type unless given).
Value emptyLike(OpBuilder &b, Location loc, Value like, Type elementType = {});
/// An empty tensor `[n, trailing dims of values...]` (values' element type
/// unless given).
Value emptyRows(OpBuilder &b, Location loc, Value n, Value values,
                Type elementType = {});
/// Loop `for i in [lo, hi)` carrying `init`; `body` returns the next values.
ValueRange forLoop(
    OpBuilder &b, Location loc, Value lo, Value hi, ValueRange init,
    function_ref<SmallVector<Value>(OpBuilder &, Location, Value, ValueRange)>
        body);
/// Inside a generic whose loop indices are `indices` (leading dim, then the
/// trailing dims of `source`): `step` folded over rows [lo, hi) of `source`
/// at those trailing indices, from `init`.
Value foldRows(
    OpBuilder &b, Location loc, Value source, Value lo, Value hi,
    ArrayRef<Value> indices, Value init,
    function_ref<Value(OpBuilder &, Location, Value acc, Value v)> step);
/// Fails the call unless `pred` holds for every element of 1-D `tensor`.
void assertAll(OpBuilder &b, Location loc, Value tensor, StringRef message,
               function_ref<Value(OpBuilder &, Location, Value)> pred);

/// Emits "op cannot be lowered: why" and fails the pattern.
LogicalResult unsupported(Operation *op, const Twine &why);

/// The conjunction of `pred(x)` over the elements of 1-D `tensor` (one
/// reduction generic), as an i1.
Value allOf(OpBuilder &b, Location loc, Value tensor,
            function_ref<Value(OpBuilder &, Location, Value)> pred);

/// Whether `type` is a layout the addressing helper understands: a single
/// level (all ragged dims depend on the batch only, dense dims before the
/// last ragged dim static) or a chain of nested levels with one ragged dim
/// each and no dense dims between them.
LogicalResult checkAddressable(RaggedTensorType type, std::string &why);

/// `unpack`, then `checkAddressable`: a diagnostic on `op` when the layout
/// has no lowering.
FailureOr<Packed> unpackAddressable(Operation *op, Value original,
                                    ValueRange converted);

/// Maps a padded position (b, item indices up to the last ragged dim) to
/// "is it a real element" and "which row of the packed values holds it".
class Addressing {
public:
  /// Emits the loop-invariant precomputation (row offsets) at `b`.
  Addressing(OpBuilder &b, Location loc, const Packed &packed);

  /// Extent of item dim `dim` for item `batch` (ragged dims read partitions).
  Value extent(OpBuilder &b, Location loc, unsigned dim, Value batch) const;
  /// Row offsets of the items of a single-level type ([batch + 1]).
  Value rowOffsets() const { return rowOffsetsTensor; }
  std::pair<Value, Value> address(OpBuilder &b, Location loc, Value batch,
                                  ValueRange itemIndices) const;

private:
  const Packed &packed;
  Value rowOffsetsTensor;
};

} // namespace mlir::ragged::lowering

#endif // RAGGED_PASSES_LOWERINGUTILS_H
