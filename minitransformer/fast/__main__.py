"""``python -m minitransformer.fast``: the table of twins (which reference each replaces,
for which array library and dtypes, and whether it is registered in this process)."""

from __future__ import annotations

from . import describe, table


def main() -> None:
    rows = table()
    heads = ("reference", "library", "twin", "dtypes", "on")
    widths = [max(len(h), *(len(r[h]) for r in rows)) for h in heads]
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)))
    for r in rows:
        print("  ".join(r[h].ljust(w) for h, w in zip(heads, widths, strict=True)))
    print(f"\nnow, on the CPU: {describe()} (fast.enable() or the CLI switches the NumPy twins on)")


if __name__ == "__main__":
    main()
