"""What ``--safe`` lets a bundle build: an allow-list of categories, not a deny-list of known dangers.

A ``_target_`` (or a reader/writer/merger name MONAI imports) is allowed when the object it resolves
to is a class or a module-level function that lives in one of ``SAFE_CATEGORIES``: what a training or
inference bundle needs (networks, transforms, datasets and loaders, losses, optimizers, metrics,
inferers, engines and handlers, hpc-runner's own), and the user's ``safe_targets``. Inside those
modules a few members still write files, download or run code; they are listed in ``NOT_SAFE``
(refused) or ``WRITERS`` (allowed only when every path they write to is ``@output_dir``, the run dir).
Values that make an allowed class download or unpickle (``pretrained: true``, ``weights_only: false``)
are in ``UNSAFE_VALUES``. docs/security.md says what this promises and which test proves it.
"""

from __future__ import annotations

from typing import Any

SAFE_CATEGORIES: dict[str, tuple[str, ...]] = {
    "networks": ("monai.networks.nets", "monai.networks.blocks", "monai.networks.layers", "torch.nn.modules",
                 "torch.nn.functional", "torch.nn.init"),
    "transforms": ("monai.transforms",),
    "datasets and loaders": (
        "monai.data.dataset", "monai.data.dataloader", "monai.data.thread_buffer", "monai.data.image_reader",
        "monai.data.decathlon_datalist", "monai.data.grid_dataset", "monai.data.iterable_dataset",
        "monai.data.image_dataset", "monai.data.samplers", "monai.data.utils", "monai.data.meta_tensor",
        "monai.data.synthetic", "torch.utils.data.dataloader", "torch.utils.data.dataset", "torch.utils.data.sampler",
        "torch.utils.data.distributed",
    ),
    "losses": ("monai.losses",),
    "optimizers": ("torch.optim", "monai.optimizers"),
    "metrics": ("monai.metrics",),
    "inferers": ("monai.inferers",),
    "engines and handlers": ("monai.engines", "monai.handlers"),
    "hpc-runner": ("hpc_runner.engine", "hpc_runner.data", "hpc_runner.inference"),
    "plain values": ("torch.device", "torch.Generator", "torch.tensor", "torch.as_tensor", "torch.zeros",
                     "torch.ones", "torch.full", "torch.linspace", "torch.arange", "monai.utils.misc.set_determinism",
                     "monai.utils.enums", "builtins.dict", "builtins.list", "builtins.tuple"),
}
# members of the categories above that download, run code, import by name or write where they like
NOT_SAFE: dict[str, str] = {
    "monai.losses.perceptual": "it downloads and runs code from torch.hub",
    "monai.transforms.utils_create_transform_ims": "it writes figures to a folder it is given",
    "monai.data.decathlon_datalist.create_cross_validation_datalist": "it writes a file it is given",
    "monai.data.utils.create_file_basename": "it makes folders it is given",
    "monai.handlers.utils.write_metrics_reports": "it writes files to a folder it is given",
    "monai.handlers.mlflow_handler": "it sends the run to a tracking server and writes where it is told",
    "monai.handlers.clearml_handlers": "it sends the run to a server",
    "monai.optimizers.lr_finder": "it runs a training loop and keeps model copies in a folder it is given",
}
# writers inside the categories: allowed when each of these arguments is @output_dir (the run dir)
WRITERS: dict[str, tuple[str, ...]] = {
    "monai.transforms.io.array.SaveImage": ("output_dir",),
    "monai.transforms.io.dictionary.SaveImaged": ("output_dir",),
    "monai.transforms.io.array.WriteFileMapping": ("mapping_file_path",),
    "monai.transforms.io.dictionary.WriteFileMappingd": ("mapping_file_path",),
    "monai.transforms.post.dictionary.SaveClassificationd": ("output_dir",),
    "monai.handlers.checkpoint_saver.CheckpointSaver": ("save_dir",),
    "monai.handlers.metrics_saver.MetricsSaver": ("save_dir",),
    "monai.handlers.classification_saver.ClassificationSaver": ("output_dir",),
    "monai.handlers.probability_maps.ProbMapProducer": ("output_dir",),
    "monai.handlers.tensorboard_handlers.TensorBoardStatsHandler": ("log_dir",),
    "monai.handlers.tensorboard_handlers.TensorBoardImageHandler": ("log_dir",),
    "monai.handlers.logfile_handler.LogfileHandler": ("output_dir",),
    "monai.data.dataset.PersistentDataset": ("cache_dir",),
    "monai.data.dataset.CacheNTransDataset": ("cache_dir",),
    "monai.data.dataset.LMDBDataset": ("cache_dir",),
    "monai.data.dataset.GDSDataset": ("cache_dir",),
}
RUN_DIR_REF = "@output_dir"
# argument values that make an allowed class unpickle, download or run remote code
UNSAFE_VALUES: dict[str, tuple[Any, str]] = {
    "weights_only": (False, "it lets pickle files run code"),
    "allow_pickle": (True, "it lets pickle files run code"),
    "trust_remote_code": (True, "it runs code downloaded from a hub"),
    "pretrained": (True, "it downloads weights"),
    "use_ssl_pretrained": (True, "it downloads weights"),
    "download": (True, "it downloads data"),
}
DOWNLOAD_KEYS = ("pretrained_url", "url", "model_url")  # any non-empty value downloads
# argument names whose string value MONAI imports as a dotted name (LoadImage, SaveImage, PatchInferer)
NAME_KEYS = ("reader", "writer", "merger_cls")


def under(name: str, prefixes: tuple[str, ...] | list[str]) -> bool:
    """Return True when the dotted ``name`` is one of ``prefixes`` or inside one of them."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def allowed_prefixes(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Return every module prefix of the categories, plus the user's ``safe_targets``."""
    return tuple(p for prefixes in SAFE_CATEGORIES.values() for p in prefixes) + tuple(extra)


def not_safe_reason(path: str) -> str | None:
    """Return why an object inside the categories is still refused, or None."""
    for prefix, why in NOT_SAFE.items():
        if under(path, (prefix,)):
            return why
    return None
