"""labkit.report"""
