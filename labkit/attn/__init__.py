"""labkit.attn"""
