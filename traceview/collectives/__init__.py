"""Collectives (docs/metrics.md, "Collectives"; JSON key `collectives`): every communication kernel linked to
its call, with bytes, algbw and busbw, and the tables built from them."""
