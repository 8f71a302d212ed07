# lit configuration for ragged-mlir: ragged-opt tests and Python binding tests.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "RAGGED"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".py"]
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "e2e"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mlir_obj_dir, "test")

config.substitutions.append(("%PYTHON", config.python_executable))
llvm_config.with_system_environment(["HOME", "INCLUDE", "LIB", "TMP", "TEMP"])
llvm_config.use_default_substitutions()
# A name captured under one CHECK-LABEL is not visible under the next.
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"

tool_dirs = [config.ragged_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["ragged-opt"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

if config.enable_python:
    llvm_config.with_environment("PYTHONPATH", config.ragged_python_packages_dir, append_path=True)
else:
    config.excludes.append("python")
