# Source this to use the development build: the venv, ragged-opt on PATH and
# the ragged_mlir package on PYTHONPATH.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$_root/.venv/bin/activate"
export PATH="$_root/build/bin:$_root/.venv/lib/python3.11/site-packages/llvm/bin:$PATH"
export PYTHONPATH="$_root/build/python_packages${PYTHONPATH:+:$PYTHONPATH}"
unset _root
