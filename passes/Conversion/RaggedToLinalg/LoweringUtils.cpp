//===- LoweringUtils.cpp - helpers shared by the ragged lowerings ---------===//

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

Value Packed::offsets(StringAttr symbol) const {
  for (auto [s, p] : llvm::zip_equal(type.getDistinctSymbols(), partitions))
    if (s == symbol)
      return p;
  llvm_unreachable("symbol verified to belong to the type");
}

SmallVector<Value> Packed::flatten(OpBuilder &b, Location loc) const {
  SmallVector<Value> all{castTo(b, loc, values, type.getValuesType())};
  for (auto [symbol, partition] :
       llvm::zip_equal(type.getDistinctSymbols(), partitions))
    all.push_back(castTo(b, loc, partition, type.getPartitionType(symbol)));
  return all;
}

Value lowering::castTo(OpBuilder &b, Location loc, Value v, Type type) {
  if (v.getType() == type)
    return v;
  return tensor::CastOp::create(b, loc, type, v);
}

Packed lowering::unpack(Value original, ValueRange converted) {
  auto type = cast<RaggedTensorType>(original.getType());
  return Packed{type, converted.front(),
                llvm::to_vector(converted.drop_front())};
}

Value lowering::constIndex(OpBuilder &b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

Value lowering::dimOf(OpBuilder &b, Location loc, Value tensor, int64_t d) {
  return tensor::DimOp::create(b, loc, tensor, d);
}

Value lowering::loadIndex(OpBuilder &b, Location loc, Value tensor,
                          ValueRange i) {
  Value v = tensor::ExtractOp::create(b, loc, tensor, i);
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
}

Value lowering::loadRowEntry(OpBuilder &b, Location loc, Value table,
                             Value row) {
  Value one = constIndex(b, loc, 1);
  Value last = arith::SubIOp::create(
      b, loc, arith::MaxUIOp::create(b, loc, dimOf(b, loc, table, 0), one),
      one);
  return loadIndex(b, loc, table,
                   ValueRange{arith::MinUIOp::create(b, loc, row, last)});
}

Value lowering::numSegments(OpBuilder &b, Location loc, Value offsets) {
  return arith::SubIOp::create(b, loc, dimOf(b, loc, offsets, 0),
                               constIndex(b, loc, 1));
}

Value lowering::emptyTensor(OpBuilder &b, Location loc, ArrayRef<int64_t> shape,
                            Type elementType, ValueRange dynSizes) {
  return tensor::EmptyOp::create(b, loc, shape, elementType, dynSizes);
}

Value lowering::parallelGeneric(
    OpBuilder &b, Location loc, Value init, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps,
    function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  return parallelGeneric(b, loc, ValueRange{init}, inputs, inputMaps,
                         [&](OpBuilder &nb, Location l, ValueRange args) {
                           return SmallVector<Value>{body(nb, l, args)};
                         })
      .front();
}

SmallVector<Value> lowering::parallelGeneric(
    OpBuilder &b, Location loc, ValueRange inits, ValueRange inputs,
    ArrayRef<AffineMap> inputMaps,
    function_ref<SmallVector<Value>(OpBuilder &, Location, ValueRange)> body) {
  unsigned rank = cast<RankedTensorType>(inits.front().getType()).getRank();
  SmallVector<AffineMap> maps(inputMaps);
  maps.append(inits.size(), b.getMultiDimIdentityMap(rank));
  SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
  auto generic = linalg::GenericOp::create(
      b, loc, TypeRange(inits), inputs, inits, maps, iters,
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        linalg::YieldOp::create(nb, nloc, body(nb, nloc, args));
      });
  return SmallVector<Value>(generic.getResults());
}

std::pair<Value, Value> lowering::segmentBounds(OpBuilder &b, Location loc,
                                                Value offsets) {
  Value n = numSegments(b, loc, offsets);
  auto slice = [&](int64_t start) -> Value {
    SmallVector<OpFoldResult> offs{b.getIndexAttr(start)}, sizes{n},
        strides{b.getIndexAttr(1)};
    return tensor::ExtractSliceOp::create(b, loc, offsets, offs, sizes,
                                          strides);
  };
  return {slice(0), slice(1)};
}

Value lowering::maxSegmentLength(OpBuilder &b, Location loc, Value offsets) {
  Type i64 = b.getI64Type();
  Value zero = arith::ConstantIntOp::create(b, loc, i64, 0);
  Value init = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{}, i64);
  init = linalg::FillOp::create(b, loc, zero, init).getResult(0);
  auto [lo, hi] = segmentBounds(b, loc, offsets);
  MLIRContext *ctx = b.getContext();
  AffineMap in = AffineMap::getMultiDimIdentityMap(1, ctx);
  AffineMap out = AffineMap::get(1, 0, {}, ctx);
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{lo, hi}, ValueRange{init},
      {in, in, out}, {utils::IteratorType::reduction},
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value len = arith::SubIOp::create(nb, nloc, args[1], args[0]);
        linalg::YieldOp::create(
            nb, nloc,
            ValueRange{arith::MaxSIOp::create(nb, nloc, len, args[2])});
      });
  Value result =
      tensor::ExtractOp::create(b, loc, generic.getResult(0), ValueRange{});
  return arith::IndexCastOp::create(b, loc, b.getIndexType(), result);
}

Value lowering::searchLast(
    OpBuilder &b, Location loc, Value lo, Value hi,
    function_ref<Value(OpBuilder &, Location, Value)> holds) {
  // Invariant: holds(lo); loop until lo == hi, halving [lo, hi] each step.
  Value one = constIndex(b, loc, 1);
  Type idx = b.getIndexType();
  auto loop = scf::WhileOp::create(
      b, loc, TypeRange{idx, idx}, ValueRange{lo, hi},
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value more = arith::CmpIOp::create(nb, nloc, arith::CmpIPredicate::ult,
                                           args[0], args[1]);
        scf::ConditionOp::create(nb, nloc, more, args);
      },
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value sum = arith::AddIOp::create(
            nb, nloc, arith::AddIOp::create(nb, nloc, args[0], args[1]), one);
        Value mid =
            arith::DivUIOp::create(nb, nloc, sum, constIndex(nb, nloc, 2));
        Value ok = holds(nb, nloc, mid);
        Value midMinus = arith::SubIOp::create(nb, nloc, mid, one);
        Value nlo = arith::SelectOp::create(nb, nloc, ok, mid, args[0]);
        Value nhi = arith::SelectOp::create(nb, nloc, ok, args[1], midMinus);
        scf::YieldOp::create(nb, nloc, ValueRange{nlo, nhi});
      });
  return loop.getResult(0);
}

Value lowering::findSegment(OpBuilder &b, Location loc, Value offsets,
                            Value row) {
  return searchLast(b, loc, constIndex(b, loc, 0), numSegments(b, loc, offsets),
                    [&](OpBuilder &nb, Location l, Value mid) -> Value {
                      return arith::CmpIOp::create(
                          nb, l, arith::CmpIPredicate::sle,
                          loadIndex(nb, l, offsets, mid), row);
                    });
}

Value lowering::markWholeRows(Value result) {
  result.getDefiningOp()->setAttr(kWholeRowsAttr,
                                  UnitAttr::get(result.getContext()));
  return result;
}

RowSegments lowering::rowSegments(OpBuilder &b, Location loc, Value offsets,
                                  Value rows, unsigned rank) {
  Value table =
      segmentOfRows(b, loc, offsets,
                    arith::AddIOp::create(b, loc, rows, constIndex(b, loc, 1)));
  return rowTable(b, loc, table, rows, rank);
}

RowSegments lowering::rowTable(OpBuilder &b, Location loc, Value table,
                               Value rows, unsigned rank) {
  RowSegments r;
  r.table = table;
  r.operand = tensor::ExtractSliceOp::create(
      b, loc, table, ArrayRef<OpFoldResult>{b.getIndexAttr(0)},
      ArrayRef<OpFoldResult>{rows}, ArrayRef<OpFoldResult>{b.getIndexAttr(1)});
  r.map = AffineMap::get(rank, 0, b.getAffineDimExpr(0));
  return r;
}

Value lowering::RowSegments::at(OpBuilder &b, Location loc, Value row) const {
  return loadRowEntry(b, loc, table, row);
}

Value lowering::RowSegments::keep(OpBuilder &b, Location loc, Value entry,
                                  Value v) const {
  Value some = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::sge, entry,
      arith::ConstantIntOp::create(b, loc, b.getI64Type(), 0));
  Value zero =
      isa<FloatType>(v.getType())
          ? floatConst(b, loc, v.getType(), 0.0)
          : arith::ConstantOp::create(b, loc, b.getZeroAttr(v.getType()))
                .getResult();
  return arith::SelectOp::create(b, loc, some, v, zero);
}

Value lowering::segmentOfRows(OpBuilder &b, Location loc, Value offsets,
                              Value rows) {
  Value init =
      emptyTensor(b, loc, {ShapedType::kDynamic}, b.getI64Type(), {rows});
  return parallelGeneric(
      b, loc, init, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
        Value r = linalg::IndexOp::create(nb, l, 0);
        return arith::IndexCastOp::create(nb, l, nb.getI64Type(),
                                          findSegment(nb, l, offsets, r))
            .getResult();
      });
}

Value lowering::exclusivePrefixSum(OpBuilder &b, Location loc, Value sizes) {
  return exclusivePrefixSum(b, loc, dimOf(b, loc, sizes, 0),
                            [&](OpBuilder &nb, Location l, Value j) -> Value {
                              return tensor::ExtractOp::create(nb, l, sizes, j);
                            });
}

std::pair<Value, Value> lowering::scanChunk(OpBuilder &b, Location loc, Value c,
                                            Value n) {
  Value chunk = constIndex(b, loc, kScanChunk);
  Value first = arith::MulIOp::create(b, loc, c, chunk);
  return {first, arith::MinUIOp::create(
                     b, loc, arith::AddIOp::create(b, loc, first, chunk), n)};
}

Value lowering::numScanChunks(OpBuilder &b, Location loc, Value n) {
  return arith::CeilDivUIOp::create(b, loc, n, constIndex(b, loc, kScanChunk));
}

Value lowering::sumTerms(
    OpBuilder &b, Location loc, Value lo, Value hi, Value init,
    function_ref<Value(OpBuilder &, Location, Value)> term) {
  return forLoop(b, loc, lo, hi, init,
                 [&](OpBuilder &lb, Location l, Value j, ValueRange acc) {
                   return SmallVector<Value>{
                       arith::AddIOp::create(lb, l, acc[0], term(lb, l, j))};
                 })[0];
}

Value lowering::chunkPrefix(
    OpBuilder &b, Location loc, Value n, int64_t columns,
    function_ref<Value(OpBuilder &, Location, Value, Value)> term) {
  // Two parallel dispatches: the chunk sums, then each row's sum of the
  // chunk sums before it.
  Type i64 = b.getI64Type();
  Value chunks = numScanChunks(b, loc, n);
  auto zero = [&](OpBuilder &nb, Location l) -> Value {
    return arith::ConstantIntOp::create(nb, l, i64, 0);
  };
  Value sums = parallelGeneric(
      b, loc,
      emptyTensor(b, loc, {ShapedType::kDynamic, columns}, i64, {chunks}), {},
      {}, [&](OpBuilder &nb, Location l, ValueRange) {
        auto [first, end] =
            scanChunk(nb, l, linalg::IndexOp::create(nb, l, 0), n);
        Value k = linalg::IndexOp::create(nb, l, 1);
        return sumTerms(nb, l, first, end, zero(nb, l),
                        [&](OpBuilder &lb, Location ll, Value j) {
                          return term(lb, ll, j, k);
                        });
      });
  Value chunks1 = arith::AddIOp::create(b, loc, chunks, constIndex(b, loc, 1));
  return parallelGeneric(
      b, loc,
      emptyTensor(b, loc, {ShapedType::kDynamic, columns}, i64, {chunks1}), {},
      {}, [&](OpBuilder &nb, Location l, ValueRange) {
        Value k = linalg::IndexOp::create(nb, l, 1);
        return sumTerms(
            nb, l, constIndex(nb, l, 0), linalg::IndexOp::create(nb, l, 0),
            zero(nb, l), [&](OpBuilder &lb, Location ll, Value c) -> Value {
              return tensor::ExtractOp::create(lb, ll, sums, ValueRange{c, k});
            });
      });
}

Value lowering::exclusivePrefixSum(
    OpBuilder &b, Location loc, Value n,
    function_ref<Value(OpBuilder &, Location, Value)> term) {
  // out[i] = sum(term(0..i-1)): each output adds the terms of its own chunk
  // before it to its chunk's prefix. O(n kScanChunk + (n / kScanChunk)^2)
  // work, where one loop per output was O(n^2).
  Value starts =
      chunkPrefix(b, loc, n, 1, [&](OpBuilder &nb, Location l, Value j, Value) {
        return term(nb, l, j);
      });
  Value n1 = arith::AddIOp::create(b, loc, n, constIndex(b, loc, 1));
  return parallelGeneric(
      b, loc, emptyTensor(b, loc, {ShapedType::kDynamic}, b.getI64Type(), {n1}),
      {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
        Value i = linalg::IndexOp::create(nb, l, 0);
        Value c =
            arith::DivUIOp::create(nb, l, i, constIndex(nb, l, kScanChunk));
        Value base = tensor::ExtractOp::create(
            nb, l, starts, ValueRange{c, constIndex(nb, l, 0)});
        return sumTerms(nb, l, scanChunk(nb, l, c, n).first, i, base, term);
      });
}

LogicalResult lowering::unsupported(Operation *op, const Twine &why) {
  return op->emitOpError() << "cannot be lowered: " << why;
}

Value lowering::allOf(OpBuilder &b, Location loc, Value tensor,
                      function_ref<Value(OpBuilder &, Location, Value)> pred) {
  Value yes = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
  Value init =
      tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{}, b.getI1Type());
  init = linalg::FillOp::create(b, loc, yes, init).getResult(0);
  MLIRContext *ctx = b.getContext();
  auto generic = linalg::GenericOp::create(
      b, loc, init.getType(), ValueRange{tensor}, ValueRange{init},
      {AffineMap::getMultiDimIdentityMap(1, ctx),
       AffineMap::get(1, 0, {}, ctx)},
      {utils::IteratorType::reduction},
      [&](OpBuilder &nb, Location nloc, ValueRange args) {
        Value ok =
            arith::AndIOp::create(nb, nloc, args[1], pred(nb, nloc, args[0]));
        linalg::YieldOp::create(nb, nloc, ok);
      });
  return tensor::ExtractOp::create(b, loc, generic.getResult(0), ValueRange{});
}

//===----------------------------------------------------------------------===//
// Addressing
//===----------------------------------------------------------------------===//

FailureOr<Packed> lowering::unpackAddressable(Operation *op, Value original,
                                              ValueRange converted) {
  Packed packed = unpack(original, converted);
  std::string why;
  if (failed(checkAddressable(packed.type, why)))
    return unsupported(op, why);
  return packed;
}

LogicalResult lowering::checkAddressable(RaggedTensorType type,
                                         std::string &why) {
  ArrayRef<int64_t> shape = type.getShape();
  unsigned last = type.getLastRaggedDim();
  if (type.getEncoding() != Encoding::offsets) {
    why = "only the 'offsets' encoding is lowered";
    return failure();
  }
  if (type.isSingleLevel()) {
    for (unsigned i = 0; i < last; ++i)
      if (ShapedType::isDynamic(shape[i])) {
        why = "dynamic dense dims before the last ragged dim cannot be "
              "recovered from the packed values";
        return failure();
      }
    return success();
  }
  // A chain S, T(S), U(T)...: one ragged dim per level, nothing between.
  ArrayRef<StringAttr> symbols = type.getSymbols();
  ArrayRef<StringAttr> parents = type.getParents();
  if (last + 1 != symbols.size()) {
    why = "nested ragged tensors are lowered when their ragged dims come "
          "first, one per level";
    return failure();
  }
  for (unsigned i = 0; i < symbols.size(); ++i) {
    StringRef expected = i == 0 ? "" : symbols[i - 1].getValue();
    if (parents[i].getValue() != expected) {
      why = "nested ragged tensors are lowered when each ragged dim is "
            "nested in the one before it";
      return failure();
    }
  }
  return success();
}

Addressing::Addressing(OpBuilder &b, Location loc, const Packed &packed)
    : packed(packed) {
  RaggedTensorType type = packed.type;
  if (!type.isSingleLevel())
    return;
  if (type.getLastRaggedDim() == 0) {
    rowOffsetsTensor = packed.partitions.front();
    return;
  }
  // Rows per item = product of the item dims up to the last ragged one.
  Value n = numSegments(b, loc, packed.partitions.front());
  Value init = emptyTensor(b, loc, {ShapedType::kDynamic}, b.getI64Type(), {n});
  Value sizes = parallelGeneric(
      b, loc, init, {}, {}, [&](OpBuilder &nb, Location nloc, ValueRange) {
        Value item = linalg::IndexOp::create(nb, nloc, 0);
        Value prod = constIndex(nb, nloc, 1);
        for (unsigned d = 0; d <= type.getLastRaggedDim(); ++d)
          prod =
              arith::MulIOp::create(nb, nloc, prod, extent(nb, nloc, d, item));
        return arith::IndexCastOp::create(nb, nloc, nb.getI64Type(), prod);
      });
  rowOffsetsTensor = exclusivePrefixSum(b, loc, sizes);
}

Value Addressing::extent(OpBuilder &b, Location loc, unsigned dim,
                         Value batch) const {
  RaggedTensorType type = packed.type;
  if (!type.isRaggedDim(dim))
    return constIndex(b, loc, type.getShape()[dim]);
  unsigned r =
      llvm::count(type.getShape().take_front(dim), RaggedTensorType::kRagged);
  Value offsets = packed.offsets(type.getSymbols()[r]);
  Value next = arith::AddIOp::create(b, loc, batch, constIndex(b, loc, 1));
  return arith::SubIOp::create(b, loc, loadIndex(b, loc, offsets, next),
                               loadIndex(b, loc, offsets, batch));
}

std::pair<Value, Value> Addressing::address(OpBuilder &b, Location loc,
                                            Value batch,
                                            ValueRange itemIndices) const {
  RaggedTensorType type = packed.type;
  Value valid = arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1);
  auto within = [&](Value i, Value extent) {
    Value lt =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, i, extent);
    valid = arith::AndIOp::create(b, loc, valid, lt);
  };
  if (type.isSingleLevel()) {
    Value linear = constIndex(b, loc, 0);
    for (unsigned d = 0; d <= type.getLastRaggedDim(); ++d) {
      Value extent = this->extent(b, loc, d, batch);
      if (type.isRaggedDim(d))
        within(itemIndices[d], extent);
      linear = arith::MulIOp::create(b, loc, linear, extent);
      linear = arith::AddIOp::create(b, loc, linear, itemIndices[d]);
    }
    Value start = loadIndex(b, loc, rowOffsetsTensor, batch);
    return {valid, arith::AddIOp::create(b, loc, start, linear)};
  }
  // Nested chain: walk down the levels, clamping reads once out of range.
  Value global = batch;
  Value zero = constIndex(b, loc, 0);
  for (auto [level, symbol] : llvm::enumerate(type.getSymbols())) {
    Value offsets = packed.offsets(symbol);
    Value lastIdx = numSegments(b, loc, offsets);
    Value lo = arith::MinUIOp::create(b, loc, global, lastIdx);
    Value hi = arith::MinUIOp::create(
        b, loc, arith::AddIOp::create(b, loc, global, constIndex(b, loc, 1)),
        lastIdx);
    Value start = loadIndex(b, loc, offsets, lo);
    Value end = loadIndex(b, loc, offsets, hi);
    within(itemIndices[level], arith::SubIOp::create(b, loc, end, start));
    Value next = arith::AddIOp::create(b, loc, start, itemIndices[level]);
    global = arith::SelectOp::create(b, loc, valid, next, zero);
  }
  return {valid, global};
}

Value lowering::structured(
    OpBuilder &b, Location loc, Value init, ValueRange inputs,
    ArrayRef<AffineMap> maps, ArrayRef<utils::IteratorType> iters,
    function_ref<Value(OpBuilder &, Location, ValueRange)> body) {
  return linalg::GenericOp::create(
             b, loc, init.getType(), inputs, ValueRange{init}, maps, iters,
             [&](OpBuilder &nb, Location l, ValueRange args) {
               linalg::YieldOp::create(nb, l, ValueRange{body(nb, l, args)});
             })
      .getResult(0);
}

Value lowering::reduceIdentity(OpBuilder &b, Location loc, ReduceKind kind,
                               Type t) {
  double inf = std::numeric_limits<double>::infinity();
  switch (kind) {
  case ReduceKind::sum:
  case ReduceKind::mean:
    return floatConst(b, loc, t, 0.0);
  case ReduceKind::max:
    return floatConst(b, loc, t, -inf);
  case ReduceKind::min:
    return floatConst(b, loc, t, inf);
  }
  llvm_unreachable("unknown reduce kind");
}

Value lowering::reduceCombine(OpBuilder &b, Location loc, ReduceKind kind,
                              Value acc, Value v) {
  if (kind == ReduceKind::max)
    return arith::MaximumFOp::create(b, loc, acc, v);
  if (kind == ReduceKind::min)
    return arith::MinimumFOp::create(b, loc, acc, v);
  return arith::AddFOp::create(b, loc, acc, v);
}

Value lowering::floatConst(OpBuilder &b, Location loc, Type type, double v) {
  return arith::ConstantOp::create(b, loc, type, b.getFloatAttr(type, v));
}

SmallVector<Value> lowering::loopIndices(OpBuilder &b, Location loc,
                                         unsigned rank) {
  SmallVector<Value> idx;
  for (unsigned d = 0; d < rank; ++d)
    idx.push_back(linalg::IndexOp::create(b, loc, d));
  return idx;
}

Value lowering::emptyLike(OpBuilder &b, Location loc, Value like,
                          Type elementType) {
  auto type = cast<RankedTensorType>(like.getType());
  SmallVector<Value> dyn;
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      dyn.push_back(dimOf(b, loc, like, d));
  return emptyTensor(b, loc, type.getShape(),
                     elementType ? elementType : type.getElementType(), dyn);
}

Value lowering::emptyRows(OpBuilder &b, Location loc, Value n, Value values,
                          Type elementType) {
  auto type = cast<RankedTensorType>(values.getType());
  SmallVector<int64_t> shape{ShapedType::kDynamic};
  SmallVector<Value> dyn{n};
  for (int64_t d = 1; d < type.getRank(); ++d) {
    shape.push_back(type.getDimSize(d));
    if (type.isDynamicDim(d))
      dyn.push_back(dimOf(b, loc, values, d));
  }
  return emptyTensor(b, loc, shape,
                     elementType ? elementType : type.getElementType(), dyn);
}

Value lowering::foldRows(
    OpBuilder &b, Location loc, Value source, Value lo, Value hi,
    ArrayRef<Value> indices, Value init,
    function_ref<Value(OpBuilder &, Location, Value, Value)> step) {
  return forLoop(b, loc, lo, hi, {init},
                 [&](OpBuilder &lb, Location l, Value r, ValueRange acc) {
                   SmallVector<Value> at{r};
                   llvm::append_range(at, indices.drop_front());
                   Value v = tensor::ExtractOp::create(lb, l, source, at);
                   return SmallVector<Value>{step(lb, l, acc[0], v)};
                 })[0];
}

ValueRange lowering::forLoop(
    OpBuilder &b, Location loc, Value lo, Value hi, ValueRange init,
    function_ref<SmallVector<Value>(OpBuilder &, Location, Value, ValueRange)>
        body) {
  auto loop = scf::ForOp::create(
      b, loc, lo, hi, constIndex(b, loc, 1), init,
      [&](OpBuilder &lb, Location ll, Value i, ValueRange acc) {
        scf::YieldOp::create(lb, ll, body(lb, ll, i, acc));
      });
  return loop.getResults();
}

void lowering::assertAll(
    OpBuilder &b, Location loc, Value tensor, StringRef message,
    function_ref<Value(OpBuilder &, Location, Value)> pred) {
  cf::AssertOp::create(b, loc, allOf(b, loc, tensor, pred), message);
}

Value lowering::windowOffsets(OpBuilder &b, Location loc, Value inOffsets,
                              const WindowDim &dim) {
  if (dim.keepsExtent())
    return inOffsets;
  return exclusivePrefixSum(
      b, loc, numSegments(b, loc, inOffsets),
      [&](OpBuilder &nb, Location l, Value j) -> Value {
        auto c = [&](int64_t v) { return constIndex(nb, l, v); };
        Value next = arith::AddIOp::create(nb, l, j, c(1));
        Value x =
            arith::SubIOp::create(nb, l, loadIndex(nb, l, inOffsets, next),
                                  loadIndex(nb, l, inOffsets, j));
        Value span = arith::AddIOp::create(
            nb, l, x, c(2 * dim.padding - dim.dilation * (dim.kernel - 1) - 1));
        Value q = dim.ceil
                      ? arith::CeilDivSIOp::create(nb, l, span, c(dim.stride))
                            .getResult()
                      : arith::FloorDivSIOp::create(nb, l, span, c(dim.stride))
                            .getResult();
        Value out = arith::AddIOp::create(nb, l, q, c(1));
        if (dim.ceil) {
          // The last window must start inside the image or its leading padding.
          Value lastStart = arith::MulIOp::create(nb, l, q, c(dim.stride));
          Value past = arith::CmpIOp::create(
              nb, l, arith::CmpIPredicate::sge, lastStart,
              arith::AddIOp::create(nb, l, x, c(dim.padding)));
          out = arith::SelectOp::create(nb, l, past, q, out);
        }
        out = arith::MaxSIOp::create(nb, l, out, c(0));
        Value empty =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq, x, c(0));
        out = arith::SelectOp::create(nb, l, empty, c(0), out);
        return arith::IndexCastOp::create(nb, l, nb.getI64Type(), out);
      });
}
