"""The ``greenckpt`` command line: parse arguments, call the library, render. Nothing imports it."""
