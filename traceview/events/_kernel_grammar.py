"""The kernel-name grammar's row type and the regex fragments its rows share (`traceview.events.kernel_table`
holds the rows; `traceview.events.kernel_names` applies them)."""

from __future__ import annotations

import re

from traceview.core.records import record

_GROUP_NAME = re.compile(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>")


@record
class KernelPattern:
    """One row of the kernel-name grammar: a regex (Rust/polars syntax) and the library it marks.

    `regex` is searched in the kernel name (anchor it with `^` to match from the start); its named groups, any
    of `traceview.events.kernel_names.FIELDS`, capture the fields the name carries. `collective` (a canonical
    collective) is the collective of a name whose regex captures none. `is_comm=False` marks compute.
    """

    library: str
    generation: str
    regex: str
    collective: str | None = None
    is_comm: bool = True

    @property
    def groups(self) -> tuple[str, ...]:
        """Named groups of `regex`, in order."""
        return tuple(_GROUP_NAME.findall(self.regex))

    @property
    def bare_regex(self) -> str:
        """`regex` with its named groups made non-capturing, so several patterns can be joined by `|`."""
        return _GROUP_NAME.sub("(?:", self.regex)


START = r"^(?:void\s+)?"
END = r"(?:\(|$)"  # the argument list, or the end of a name written without one
NS = r"(?:\(anonymous namespace\)::|<unnamed>::|[A-Za-z_][A-Za-z0-9_]*::)*"  # C++ namespaces, any depth
TEMPLATE_OR_ARGS = r"(?:<|\(|$)"
