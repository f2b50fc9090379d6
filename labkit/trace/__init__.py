"""labkit.trace"""
