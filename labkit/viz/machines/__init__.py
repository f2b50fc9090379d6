"""The recorded results across machines (notebooks 00 and 06, and the appendix)."""
