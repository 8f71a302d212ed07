"""What the PyTorch integration supports, generated from its own tables.

``docs/torch.md`` holds the output of :func:`support_markdown` between two
markers; a test checks that it is current, and
``python -m ragged_mlir.torch.backend.support --write docs/torch.md`` rewrites it.
The sources are the ones the code dispatches on: NestedTensor's function
table (:data:`~.nested_ops.FUNCTIONS`), the backend's lowerings of the
ragged custom ops (:data:`~.emit.LOWERINGS`) and the element types that
cross the compiled boundary (:data:`~.graph.DTYPES`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..nested.registry import CATEGORIES, supported_functions
from . import lowerings  # noqa: F401  (fills the registry)
from .emit import PASSTHROUGH_DIALECTS
from .plan import DTYPES
from .registry import LOWERINGS

__all__ = ["BEGIN", "END", "support_markdown", "update"]

BEGIN = "<!-- BEGIN GENERATED: python -m ragged_mlir.torch.backend.support --write docs/torch.md -->"
END = "<!-- END GENERATED -->"


def support_markdown() -> str:
    """The generated section (markdown, without the markers)."""
    out = ["### Element types at the compiled boundary", ""]
    out.append(", ".join(f"`{str(d).removeprefix('torch.')}` ({name})" for d, name in DTYPES.items()))
    out += ["", "### Ragged custom ops the backend lowers", "", "| op | meaning |", "|---|---|"]
    for op, lowering in sorted(LOWERINGS.items(), key=lambda kv: str(kv[0])):
        out.append(f"| `torch.ops.{op}` | {lowering.summary} |")
    out += [
        "",
        f"Dense pieces go through torch-mlir; ops of {', '.join(f'`{d}`' for d in PASSTHROUGH_DIALECTS)} "
        "that it emits are left for IREE to lower.",
        "",
        "### NestedTensor functions, by category",
        "",
    ]
    for category, meaning in CATEGORIES.items():
        entries = supported_functions(category)
        if not entries:
            continue
        names = sorted({e.name.removeprefix("torch.") for e in entries})
        out.append(f"**{category}** ({len(names)}): {meaning}.")
        out.append("")
        out.append(", ".join(f"`{n}`" for n in names))
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def update(text: str) -> str:
    """``text`` with its generated section replaced by the current one."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"text: expected the markers {BEGIN!r} and {END!r}")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{support_markdown()}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", metavar="FILE", help="rewrite the generated section of FILE")
    args = parser.parse_args(argv)
    if args.write:
        path = Path(args.write)
        path.write_text(update(path.read_text()))
    else:
        sys.stdout.write(support_markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
