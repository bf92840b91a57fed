"""modelyard: serve Triton Python-backend model repositories over Triton's HTTP and gRPC protocol."""

__version__ = "0.1.0"
