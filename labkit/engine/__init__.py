"""labkit.engine"""
