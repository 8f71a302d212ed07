//===- RaggedExtension.cpp - nanobind module for the ragged dialect -------===//

#include "capi/RaggedCAPI.h"

#include "mlir-c/IR.h"
#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

#include <string>
#include <vector>

namespace nb = nanobind;
using namespace mlir::python::nanobind_adaptors;

static std::string str(MlirStringRef s) {
  return std::string(s.data, s.length);
}

NB_MODULE(_raggedDialects, m) {
  auto ragged = m.def_submodule("ragged");

  ragged.def(
      "register_dialect",
      [](MlirContext context, bool load) {
        MlirDialectHandle handle = mlirGetDialectHandle__ragged__();
        mlirDialectHandleRegisterDialect(handle, context);
        if (load)
          mlirDialectHandleLoadDialect(handle, context);
      },
      nb::arg("context").none() = nb::none(), nb::arg("load") = true);

  mlir_type_subclass(ragged, "RaggedTensorType", raggedTypeIsATensor,
                     raggedTensorTypeGetTypeID)
      .def_classmethod(
          "_get_checked",
          [](nb::object cls, int64_t batch, std::vector<int64_t> shape,
             std::vector<std::string> symbols, std::vector<std::string> parents,
             MlirType elementType, int32_t encoding, MlirContext context) {
            std::vector<MlirStringRef> syms, pars;
            for (const std::string &s : symbols)
              syms.push_back(mlirStringRefCreate(s.data(), s.size()));
            for (const std::string &p : parents)
              pars.push_back(mlirStringRefCreate(p.data(), p.size()));
            std::string error;
            MlirType type = raggedTensorTypeGetChecked(
                context, batch, shape.size(), shape.data(), syms.size(),
                syms.data(), pars.data(), elementType, encoding,
                [](MlirStringRef message, void *user) {
                  static_cast<std::string *>(user)->append(message.data,
                                                           message.length);
                },
                &error);
            if (mlirTypeIsNull(type))
              throw nb::value_error(error.c_str());
            return cls(type);
          },
          nb::arg("cls"), nb::arg("batch"), nb::arg("shape"),
          nb::arg("symbols"), nb::arg("parents"), nb::arg("element_type"),
          nb::arg("encoding"), nb::arg("context").none() = nb::none())
      .def_property_readonly("batch", raggedTensorTypeGetBatch)
      .def_property_readonly("item_rank", raggedTensorTypeGetItemRank)
      .def_property_readonly(
          "raw_shape",
          [](MlirType t) {
            std::vector<int64_t> dims;
            for (intptr_t i = 0, e = raggedTensorTypeGetItemRank(t); i < e; ++i)
              dims.push_back(raggedTensorTypeGetDim(t, i));
            return dims;
          })
      .def_property_readonly(
          "symbols",
          [](MlirType t) {
            std::vector<std::string> out;
            for (intptr_t i = 0, e = raggedTensorTypeGetNumRaggedDims(t); i < e;
                 ++i)
              out.push_back(str(raggedTensorTypeGetSymbol(t, i)));
            return out;
          })
      .def_property_readonly(
          "parents",
          [](MlirType t) {
            std::vector<std::string> out;
            for (intptr_t i = 0, e = raggedTensorTypeGetNumRaggedDims(t); i < e;
                 ++i)
              out.push_back(str(raggedTensorTypeGetParent(t, i)));
            return out;
          })
      .def_property_readonly("element_type", raggedTensorTypeGetElementType)
      .def_property_readonly("encoding_id", raggedTensorTypeGetEncoding)
      .def_property_readonly("values_type", raggedTensorTypeGetValuesType);
}
