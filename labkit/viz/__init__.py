"""labkit.viz"""
