"""The optional compiled part of labkit: the trace reader's columnar scanner. Without a C compiler the
package installs without it and reads traces with its Python decoders (labkit.trace.read.scan)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("labkit.trace.read._scan", ["labkit/trace/read/_scan.c"],
                             extra_compile_args=["-O2"], optional=True)])
