"""TEST DOUBLE of SGLang - not SGLang. See launch_server.py."""
__version__ = "0.5.10.post1+double"
