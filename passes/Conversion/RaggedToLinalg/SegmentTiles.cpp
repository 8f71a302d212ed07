//===- SegmentTiles.cpp - segments cut into fixed-size row tiles ----------===//

#include "passes/Conversion/RaggedToLinalg/SegmentTiles.h"

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::ragged::compute;
using namespace mlir::ragged::lowering;

namespace {

Value i64Const(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI64Type(), v);
}

} // namespace

SegmentTiles::SegmentTiles(OpBuilder &b, Location loc, Value rowOffsets,
                           Value values, int64_t tile)
    : rowOffsets(rowOffsets), values(values), tile(tile) {
  Type i64 = b.getI64Type();
  // The tiles of each segment, ceil(length / tile), scanned into the first
  // tile of each segment.
  Value segments = numSegments(b, loc, rowOffsets);
  Value tileOffsets = exclusivePrefixSum(
      b, loc, segments, [&](OpBuilder &nb, Location l, Value s) -> Value {
        return arith::CeilDivSIOp::create(nb, l, segmentLength(nb, l, s),
                                          i64Const(nb, l, tile));
      });
  std::tie(firstTile, lastTile) = segmentBounds(b, loc, tileOffsets);

  // sum(ceil(len / tile)) <= (rows + segments * (tile - 1)) / tile: a bound
  // from the shapes alone. Without rows (or segments) there are no tiles,
  // so no tile reads a row of an empty tensor.
  Value rows = dimOf(b, loc, values, 0);
  Value zero = constIndex(b, loc, 0);
  Value bound = arith::DivUIOp::create(
      b, loc,
      arith::AddIOp::create(
          b, loc, rows,
          arith::MulIOp::create(b, loc, segments,
                                constIndex(b, loc, tile - 1))),
      constIndex(b, loc, tile));
  Value none = arith::OrIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rows, zero),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, segments, zero));
  bound = arith::SelectOp::create(b, loc, none, zero, bound);

  // Tiles are contiguous runs of rows in segment order, so their bounds are
  // one table of row offsets `[tiles + 1]` (tile t holds rows [R[t], R[t+1])),
  // with each tile's segment beside it. Tiles past the last real one (and
  // the entry past the end) start at the last segment's end.
  Value size = arith::AddIOp::create(b, loc, bound, constIndex(b, loc, 1));
  Value init = emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {size});
  SmallVector<Value> tables = parallelGeneric(
      b, loc, {init, init}, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
        Value t = linalg::IndexOp::create(nb, l, 0);
        Value one = constIndex(nb, l, 1);
        Value some = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ugt,
                                           segments, constIndex(nb, l, 0));
        Value lastSegment = arith::SelectOp::create(
            nb, l, some, arith::SubIOp::create(nb, l, segments, one),
            constIndex(nb, l, 0));
        Value s = arith::MinUIOp::create(
            nb, l, findSegment(nb, l, tileOffsets, t), lastSegment);
        Value next = arith::MinUIOp::create(
            nb, l, arith::AddIOp::create(nb, l, s, one), segments);
        Value q =
            arith::SubIOp::create(nb, l, t, loadIndex(nb, l, tileOffsets, s));
        Value start = arith::AddIOp::create(
            nb, l, loadIndex(nb, l, rowOffsets, s),
            arith::MulIOp::create(nb, l, q, constIndex(nb, l, tile)));
        start = arith::MinUIOp::create(nb, l, start,
                                       loadIndex(nb, l, rowOffsets, next));
        auto cast = [&](Value v) -> Value {
          return arith::IndexCastOp::create(nb, l, nb.getI64Type(), v);
        };
        return SmallVector<Value>{cast(start), cast(s)};
      });
  tileRows = tables[0];
  tileSegment = tables[1];
}

Value SegmentTiles::segmentLength(OpBuilder &b, Location loc,
                                  Value segment) const {
  Value next = arith::AddIOp::create(b, loc, segment, constIndex(b, loc, 1));
  return arith::SubIOp::create(
      b, loc, tensor::ExtractOp::create(b, loc, rowOffsets, next),
      tensor::ExtractOp::create(b, loc, rowOffsets, segment));
}

SmallVector<Value> SegmentTiles::mapTiles(OpBuilder &b, Location loc,
                                          TypeRange elementTypes,
                                          ValueRange tileInputs, bool readRows,
                                          TileBody body) const {
  unsigned rank = cast<RankedTensorType>(values.getType()).getRank();
  auto [starts, ends] = segmentBounds(b, loc, tileRows);
  Value tiles = dimOf(b, loc, starts, 0);
  SmallVector<Value> inits;
  for (Type t : elementTypes)
    inits.push_back(emptyRows(b, loc, tiles, values, t));
  Value lastRow = arith::SubIOp::create(b, loc, dimOf(b, loc, values, 0),
                                        constIndex(b, loc, 1));
  // The tile's bounds are operands (for its row count): read per tile, they
  // keep IREE from collapsing (tile, trailing) into one dim, which would
  // turn the row reads below into gathers. The first row is read again with
  // tensor.extract at the tile index, which keeps it uniform across the
  // trailing dims, so the rows are read with contiguous vector loads.
  SmallVector<Value> inputs{starts, ends};
  llvm::append_range(inputs, tileInputs);
  AffineMap perTile = AffineMap::get(rank, 0, b.getAffineDimExpr(0));
  SmallVector<AffineMap> maps{perTile, perTile};
  maps.append(tileInputs.size(), b.getMultiDimIdentityMap(rank));
  SmallVector<Value> results = parallelGeneric(
      b, loc, inits, inputs, maps,
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Tile t;
        t.indices = loopIndices(nb, l, rank);
        t.length = arith::SubIOp::create(nb, l, args[1], args[0]);
        t.segment = loadIndex(nb, l, tileSegment, t.indices[0]);
        t.inputs = llvm::to_vector(args.slice(2, tileInputs.size()));
        if (readRows) {
          Value start = loadIndex(nb, l, tileRows, t.indices[0]);
          for (int64_t k = 0; k < tile; ++k) {
            Value row = arith::MinUIOp::create(
                nb, l,
                arith::AddIOp::create(nb, l, start, constIndex(nb, l, k)),
                lastRow);
            SmallVector<Value> at{row};
            llvm::append_range(at, ArrayRef<Value>(t.indices).drop_front());
            t.rows.push_back(tensor::ExtractOp::create(nb, l, values, at));
            t.valid.push_back(
                arith::CmpIOp::create(nb, l, arith::CmpIPredicate::sgt,
                                      t.length, i64Const(nb, l, k)));
          }
        }
        return body(nb, l, t);
      });
  markWholeRows(results.front());
  return results;
}

SmallVector<Value> SegmentTiles::perSegment(OpBuilder &b, Location loc,
                                            TypeRange elementTypes,
                                            SegmentBody body) const {
  unsigned rank = cast<RankedTensorType>(values.getType()).getRank();
  Value segments = dimOf(b, loc, firstTile, 0);
  SmallVector<Value> inits;
  for (Type t : elementTypes)
    inits.push_back(emptyRows(b, loc, segments, values, t));
  AffineMap seg = AffineMap::get(rank, 0, b.getAffineDimExpr(0));
  return parallelGeneric(
      b, loc, inits, {firstTile, lastTile}, {seg, seg},
      [&](OpBuilder &nb, Location l, ValueRange args) {
        Value first =
            arith::IndexCastOp::create(nb, l, nb.getIndexType(), args[0]);
        Value last =
            arith::IndexCastOp::create(nb, l, nb.getIndexType(), args[1]);
        return body(nb, l, loopIndices(nb, l, rank), first, last);
      });
}
