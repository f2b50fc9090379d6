"""labkit.mm"""
