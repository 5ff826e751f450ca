"""Builds anvil_client with its gRPC stubs generated from the repository's proto/ (so the
client always speaks the server's API of the same checkout): `pip install ./client/python`.

The proto is compiled as anvil_client/_gen/anvil.proto, so the generated modules are
anvil_client._gen.anvil_pb2 and anvil_pb2_grpc and nothing is installed at the top level
(a stub package named `grpc` or `anvil` would shadow others). Health checks use
grpcio-health-checking's stubs, not stubs of the repository's health.proto.
"""
import os
import shutil
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "proto", "anvil", "v1", "anvil.proto")


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        from grpc_tools import protoc  # a build requirement (pyproject.toml)
        import grpc_tools

        if not os.path.exists(PROTO):
            raise SystemExit(f"anvil-client: {PROTO} not found: install from an Anvil checkout")
        out = os.path.join(self.build_lib)
        with tempfile.TemporaryDirectory() as staging:
            gen = os.path.join(staging, "anvil_client", "_gen")
            os.makedirs(gen)
            shutil.copy(PROTO, os.path.join(gen, "anvil.proto"))
            include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
            code = protoc.main(["grpc_tools.protoc", f"-I{staging}", f"-I{include}", f"--python_out={out}",
                                f"--grpc_python_out={out}", os.path.join(gen, "anvil.proto")])
            if code != 0:
                raise SystemExit(f"anvil-client: protoc failed ({code})")


setup(cmdclass={"build_py": BuildWithStubs})
