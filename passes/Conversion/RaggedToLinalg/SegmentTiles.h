//===- SegmentTiles.h - segments cut into fixed-size row tiles --*- C++ -*-===//
//
// A reduction over segments of packed rows runs in two levels. Every segment
// is cut into tiles of `tile` rows (its last tile shorter); one generic over
// (tile, trailing dims) reduces each tile with the tile's rows unrolled in
// its body, and a second generic over (segment, trailing dims) combines each
// segment's tile results. The first level does almost all the work: its row
// index is uniform across the trailing dims, so it reads rows with contiguous
// vector loads, and one long segment among many short ones gives equal units
// of work. The tile tables have a static bound on their length (rows / tile
// plus one per segment), so no size is read back on the host; tiles past the
// last real one are empty.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_PASSES_COMPUTE_SEGMENTTILES_H
#define RAGGED_PASSES_COMPUTE_SEGMENTTILES_H

#include "mlir/IR/Builders.h"

namespace mlir::ragged::compute {

class SegmentTiles {
public:
  /// Tiles of `tile` rows over the segments of `rowOffsets` (i64
  /// `[segments + 1]`, row bounds into `values`).
  SegmentTiles(OpBuilder &b, Location loc, Value rowOffsets, Value values,
               int64_t tile);

  /// One tile inside a tile generic, at the current trailing index.
  struct Tile {
    SmallVector<Value> indices; // (tile, trailing...)
    Value segment;              // index: the segment the tile belongs to
    Value length;               // i64: rows in the tile, 0 past the last tile
    /// Each of the `tile` row slots' value (a real row of `values`, read
    /// even where the slot is past the tile's end) and whether the slot
    /// holds one of the tile's rows. Empty unless rows are read.
    SmallVector<Value> rows, valid;
    SmallVector<Value> inputs; // this tile's elements of `tileInputs`
  };
  using TileBody =
      function_ref<SmallVector<Value>(OpBuilder &, Location, const Tile &)>;
  /// One generic over (tiles, trailing dims of `values`) with one result per
  /// element type (`[tiles, trailing...]`); `tileInputs` are earlier tile
  /// results. `body` returns one value per result.
  SmallVector<Value> mapTiles(OpBuilder &b, Location loc,
                              TypeRange elementTypes, ValueRange tileInputs,
                              bool readRows, TileBody body) const;

  using SegmentBody = function_ref<SmallVector<Value>(
      OpBuilder &, Location, ArrayRef<Value> indices, Value firstTile,
      Value lastTile)>;
  /// One generic over (segments, trailing dims of `values`) with one result
  /// per element type; `body` gets the segment's tiles as an index range
  /// [firstTile, lastTile) into mapTiles' results.
  SmallVector<Value> perSegment(OpBuilder &b, Location loc,
                                TypeRange elementTypes, SegmentBody body) const;

  /// Number of rows (i64) of segment `segment` (an index).
  Value segmentLength(OpBuilder &b, Location loc, Value segment) const;

private:
  Value rowOffsets;
  Value values;
  int64_t tile;
  Value firstTile, lastTile; // [segments] i64
  Value tileRows;            // [tiles + 1] i64: row offsets of the tiles
  Value tileSegment;         // [tiles + 1] i64: the segment of each tile
};

} // namespace mlir::ragged::compute

#endif // RAGGED_PASSES_COMPUTE_SEGMENTTILES_H
