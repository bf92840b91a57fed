"""The ``modelyard`` command's entry point (``python -m modelyard`` too): a serving command's
gRPC environment comes first, then the command line, whose modules import grpc (model
configuration is tritonclient's protobuf) and grpc reads that environment when first
imported."""

from __future__ import annotations

import os
import sys

from modelyard.cli.grpc_environment import SERVING_COMMANDS, apply_grpc_environment


def run() -> None:
    if sys.argv[1:2] and sys.argv[1] in SERVING_COMMANDS:
        apply_grpc_environment(os.environ)
    from modelyard.cli.main import main

    main()
