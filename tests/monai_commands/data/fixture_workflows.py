"""Classes named by the run_workflow scenarios' configs and --workflow_name (importable from this folder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from monai.bundle import BundleWorkflow, PythonicWorkflow
from monai.networks.nets import UNet
from monai.transforms import LoadImage, SaveImage


class Runnable42:
    """MONAI's integration test's runnable: run() passes only when the config gave val=42."""

    def __init__(self, val: int = 1) -> None:
        self.val = val

    def run(self) -> int:
        """Check the value and say so."""
        assert self.val == 42, self.val
        print("runnable 42 ran", flush=True)
        return self.val


def _segment(filename: str, output_dir: str, net: torch.nn.Module) -> Path:
    """Segment one image with ``net`` and save ``<output_dir>/<stem>/<stem>_seg.nii.gz`` as MONAI's saver names it."""
    image = LoadImage(image_only=True, ensure_channel_first=True)(filename)
    with torch.no_grad():
        pred = net(image.unsqueeze(0).float()).argmax(1)
    SaveImage(output_dir=output_dir, output_postfix="seg", separate_folder=True)(pred, meta_data=image.meta)
    stem = Path(filename).name.split(".")[0]
    return Path(output_dir) / stem / f"{stem}_seg.nii.gz"


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return UNet(spatial_dims=3, in_channels=1, out_channels=2, channels=(2, 4), strides=(2,)).eval()


class SegmentOneImage(BundleWorkflow):
    """A workflow written in Python (as MONAI's NonConfigWorkflow): segment ``filename`` into ``output_dir``."""

    def __init__(self, filename: str, output_dir: str, meta_file: str | None = None) -> None:
        super().__init__(workflow_type="inference", meta_file=meta_file)
        self.filename, self.output_dir = filename, output_dir
        self._props: dict[str, Any] = {"bundle_root": ".", "device": torch.device("cpu"), "version": "0.1.0",
                                       "monai_version": "1.6.1", "pytorch_version": "2.13.0",
                                       "numpy_version": "2.0.0"}

    def initialize(self) -> None:
        """Build the network."""
        self._props["network_def"] = _net()

    def run(self) -> Path:
        """Segment the image."""
        return _segment(self.filename, self.output_dir, self._props["network_def"])

    def finalize(self) -> bool:
        """Nothing to release."""
        return True

    def _get_property(self, name: str, property: dict) -> Any:
        return self._props.get(name)

    def _set_property(self, name: str, property: dict, value: Any) -> None:
        self._props[name] = value


class PythonicSegment(PythonicWorkflow):
    """A PythonicWorkflow (properties from get_<name> methods) segmenting ``filename`` into ``output_dir``."""

    def __init__(self, workflow_type: str = "infer", properties_path: str | None = None,
                 config_file: str | None = None, meta_file: str | None = None, filename: str = "",
                 output_dir: str = ".") -> None:
        super().__init__(workflow_type=workflow_type, properties_path=properties_path, config_file=config_file,
                         meta_file=meta_file)
        self.filename, self.output_dir = filename, output_dir

    def initialize(self) -> None:
        """Build the network."""
        super().initialize()
        self.net = _net()

    def run(self) -> Path:
        """Segment the image."""
        return _segment(self.filename, self.output_dir, self.net)

    def finalize(self) -> None:
        """Nothing to release."""

    def get_bundle_root(self) -> str:
        """The bundle root property."""
        return "."

    def get_device(self) -> torch.device:
        """The device property."""
        return torch.device("cpu")

    def get_inferer(self) -> Any:
        """The inferer property (required by the property file of the scenarios)."""
        from monai.inferers import SimpleInferer

        return SimpleInferer()


class PythonicWithoutInferer(PythonicSegment):
    """The same workflow lacking the required ``inferer`` property: MONAI runs it; check_properties() objects."""

    def __getattribute__(self, name: str) -> Any:
        if name == "get_inferer":
            raise AttributeError(name)
        return super().__getattribute__(name)


class CallOnRun:
    """MONAI's integration test's second runnable: run() calls the function the config gave."""

    def __init__(self, func: Any) -> None:
        self.func = func

    def run(self) -> None:
        """Call it."""
        self.func()
