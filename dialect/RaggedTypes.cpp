//===- RaggedTypes.cpp - the !ragged.tensor type --------------------------===//

#include "dialect/RaggedDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::ragged;

#define GET_TYPEDEF_CLASSES
#include "dialect/RaggedTypes.cpp.inc"

void RaggedDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialect/RaggedTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Assembly: !ragged.tensor<?, [S], [T(S)], 384, f32, offsets>
//===----------------------------------------------------------------------===//

static ParseResult parseExtent(AsmParser &parser, int64_t &value) {
  if (succeeded(parser.parseOptionalQuestion())) {
    value = ShapedType::kDynamic;
    return success();
  }
  return parser.parseInteger(value);
}

Type RaggedTensorType::parse(AsmParser &parser) {
  Builder &b = parser.getBuilder();
  SMLoc loc = parser.getCurrentLocation();
  int64_t batch;
  if (parser.parseLess() || parseExtent(parser, batch))
    return {};
  SmallVector<int64_t> shape;
  SmallVector<StringAttr> symbols, parents;
  Type elementType;
  while (!elementType) {
    if (parser.parseComma())
      return {};
    if (succeeded(parser.parseOptionalLSquare())) {
      StringRef symbol, parent;
      if (parser.parseKeyword(&symbol))
        return {};
      if (succeeded(parser.parseOptionalLParen()) &&
          (parser.parseKeyword(&parent) || parser.parseRParen()))
        return {};
      if (parser.parseRSquare())
        return {};
      shape.push_back(kRagged);
      symbols.push_back(b.getStringAttr(symbol));
      parents.push_back(b.getStringAttr(parent));
      continue;
    }
    if (succeeded(parser.parseOptionalQuestion())) {
      shape.push_back(ShapedType::kDynamic);
      continue;
    }
    int64_t size;
    SMLoc sizeLoc = parser.getCurrentLocation();
    OptionalParseResult intResult = parser.parseOptionalInteger(size);
    if (intResult.has_value()) {
      if (failed(*intResult))
        return {};
      if (size < 0) {
        parser.emitError(sizeLoc,
                         "dense dims must be non-negative or '?', got ")
            << size;
        return {};
      }
      shape.push_back(size);
      continue;
    }
    if (parser.parseType(elementType))
      return {};
  }
  Encoding encoding = Encoding::offsets;
  if (succeeded(parser.parseOptionalComma())) {
    StringRef keyword;
    SMLoc encLoc = parser.getCurrentLocation();
    if (parser.parseKeyword(&keyword))
      return {};
    std::optional<Encoding> parsed = symbolizeEncoding(keyword);
    if (!parsed) {
      parser.emitError(encLoc, "unknown ragged encoding '")
          << keyword << "', expected 'offsets' or 'lengths'";
      return {};
    }
    encoding = *parsed;
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<RaggedTensorType>(loc, parser.getContext(), batch,
                                             shape, symbols, parents,
                                             elementType, encoding);
}

static void printExtent(AsmPrinter &printer, int64_t value) {
  if (ShapedType::isDynamic(value))
    printer << "?";
  else
    printer << value;
}

void RaggedTensorType::print(AsmPrinter &printer) const {
  printer << "<";
  printExtent(printer, getBatch());
  unsigned r = 0;
  for (int64_t size : getShape()) {
    printer << ", ";
    if (size != kRagged) {
      printExtent(printer, size);
      continue;
    }
    printer << "[" << getSymbols()[r].getValue();
    if (!getParents()[r].getValue().empty())
      printer << "(" << getParents()[r].getValue() << ")";
    printer << "]";
    ++r;
  }
  printer << ", " << getElementType();
  if (getEncoding() != Encoding::offsets)
    printer << ", " << stringifyEncoding(getEncoding());
  printer << ">";
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

LogicalResult RaggedTensorType::verify(
    function_ref<InFlightDiagnostic()> emitError, int64_t batch,
    ArrayRef<int64_t> shape, ArrayRef<StringAttr> symbols,
    ArrayRef<StringAttr> parents, Type elementType, Encoding encoding) {
  if (batch < 0 && !ShapedType::isDynamic(batch))
    return emitError() << "batch size must be non-negative or '?', got "
                       << batch;
  if (!elementType.isIntOrIndexOrFloat())
    return emitError() << "element type must be an integer, index or float "
                          "type, got "
                       << elementType;
  unsigned numRagged = llvm::count(shape, kRagged);
  if (numRagged == 0)
    return emitError() << "a ragged tensor needs at least one ragged dim "
                          "'[SYM]'; use a builtin tensor otherwise";
  if (symbols.size() != numRagged || parents.size() != numRagged)
    return emitError() << "expected one symbol and one parent per ragged dim";
  for (int64_t size : shape)
    if (size != kRagged && size < 0 && !ShapedType::isDynamic(size))
      return emitError() << "dense dims must be non-negative or '?', got "
                         << size;
  llvm::DenseMap<StringAttr, StringAttr> parentOf;
  for (auto [symbol, parent] : llvm::zip_equal(symbols, parents)) {
    if (symbol.getValue().empty())
      return emitError() << "ragged dims need a symbol name";
    if (symbol == parent)
      return emitError() << "ragged dim '" << symbol.getValue()
                         << "' cannot be nested in itself";
    if (!parent.getValue().empty() && !parentOf.count(parent))
      return emitError() << "ragged dim '" << symbol.getValue()
                         << "' is nested in '" << parent.getValue()
                         << "', which must be a ragged dim before it";
    auto [it, inserted] = parentOf.try_emplace(symbol, parent);
    if (!inserted && it->second != parent)
      return emitError() << "symbol '" << symbol.getValue()
                         << "' is used with two different parents";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Queries
//===----------------------------------------------------------------------===//

SmallVector<StringAttr> RaggedTensorType::getDistinctSymbols() const {
  llvm::SetVector<StringAttr> distinct(getSymbols().begin(),
                                       getSymbols().end());
  return distinct.takeVector();
}

StringAttr RaggedTensorType::getParent(StringAttr symbol) const {
  for (auto [s, p] : llvm::zip_equal(getSymbols(), getParents()))
    if (s == symbol)
      return p.getValue().empty() ? StringAttr() : p;
  return {};
}

unsigned RaggedTensorType::getLastRaggedDim() const {
  ArrayRef<int64_t> shape = getShape();
  for (unsigned i = shape.size(); i-- > 0;)
    if (shape[i] == kRagged)
      return i;
  llvm_unreachable("verified to have a ragged dim");
}

ArrayRef<int64_t> RaggedTensorType::getTrailingDims() const {
  return getShape().drop_front(getLastRaggedDim() + 1);
}

RankedTensorType RaggedTensorType::getValuesType() const {
  SmallVector<int64_t> shape{ShapedType::kDynamic};
  llvm::append_range(shape, getTrailingDims());
  return RankedTensorType::get(shape, getElementType());
}

RankedTensorType RaggedTensorType::getPartitionType(StringAttr symbol) const {
  // n + 1 offsets, or n lengths, for the n outer items.
  int64_t size = ShapedType::kDynamic;
  if (!getParent(symbol) && !ShapedType::isDynamic(getBatch()))
    size = getBatch() + (getEncoding() == Encoding::offsets ? 1 : 0);
  return RankedTensorType::get({size}, IntegerType::get(getContext(), 64));
}

bool RaggedTensorType::isSingleLevel() const {
  return llvm::all_of(getParents(),
                      [](StringAttr p) { return p.getValue().empty(); });
}

RaggedTensorType RaggedTensorType::withElementType(Type type) const {
  return get(getContext(), getBatch(), getShape(), getSymbols(), getParents(),
             type, getEncoding());
}
