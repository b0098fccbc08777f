"""Generate the kubelet gRPC stubs from the .proto files beside this module.

Used at build time by setup.py (``generate(out_dir)``) and at run time by the package
``__init__`` when a source checkout has no stubs yet. Stdlib + grpc_tools only: the package
itself is not importable while it is being built.

grpc_tools writes ``from <dir.of.proto> import x_pb2`` between generated files, derived from
the proto's path under its include root. So the protos are staged under
``fakegpu/kubeletplugin/proto/`` in a scratch root: the imports then read
``from fakegpu.kubeletplugin.proto import ...`` and resolve wherever the package is installed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE_PATH = Path("fakegpu", "kubeletplugin", "proto")


def proto_files() -> list[Path]:
    return sorted(HERE.glob("*.proto"))


def generated_names() -> list[str]:
    """The module files generate() writes, one message and one service module per proto."""
    names: list[str] = []
    for proto in proto_files():
        names += [f"{proto.stem}_pb2.py", f"{proto.stem}_pb2_grpc.py"]
    return names


def generate(out_dir: Path) -> list[Path]:
    """Compile every .proto into out_dir; return the written files. Raises RuntimeError."""
    from grpc_tools import protoc  # imported late: only the build needs grpcio-tools

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fakegpu-proto-") as tmp:
        src_root, gen_root = Path(tmp, "src"), Path(tmp, "gen")
        (src_root / PACKAGE_PATH).mkdir(parents=True)
        gen_root.mkdir()
        staged = []
        for proto in proto_files():
            shutil.copy2(proto, src_root / PACKAGE_PATH / proto.name)
            staged.append(str(PACKAGE_PATH / proto.name))
        include = str(Path(protoc.__file__).parent / "_proto")  # well-known types
        args = [
            "grpc_tools.protoc", f"-I{src_root}", f"-I{include}",
            f"--python_out={gen_root}", f"--grpc_python_out={gen_root}",
            *staged,
        ]
        # protoc resolves the staged names relative to the cwd as well: run from the root.
        cwd = os.getcwd()
        os.chdir(src_root)
        try:
            rc = protoc.main(args)
        finally:
            os.chdir(cwd)
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {', '.join(staged)}")
        written = []
        for path in sorted((gen_root / PACKAGE_PATH).iterdir()):
            target = out_dir / path.name
            # Rename into place so a concurrent importer never sees a half-written module.
            tmp_target = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            shutil.copyfile(path, tmp_target)
            os.replace(tmp_target, target)
            written.append(target)
    return written


def is_stale(out_dir: Path) -> bool:
    """True when a stub is missing or older than the proto it comes from (source checkouts)."""
    for proto in proto_files():
        for suffix in ("_pb2.py", "_pb2_grpc.py"):
            target = Path(out_dir) / f"{proto.stem}{suffix}"
            if not target.exists() or target.stat().st_mtime < proto.stat().st_mtime:
                return True
    return False


if __name__ == "__main__":
    for written_path in generate(HERE):
        print(written_path)
