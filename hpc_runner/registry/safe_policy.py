"""What ``--safe`` lets a bundle build: an allow-list of categories, not a deny-list of known dangers.

A ``_target_`` (or a reader/writer/merger name MONAI imports) is allowed when the object it resolves
to is a class or a module-level function that lives in one of ``SAFE_CATEGORIES``: what a training or
inference bundle needs (networks, transforms, datasets and loaders, losses, optimizers, metrics,
inferers, engines and handlers, hpc-runner's own), and the user's ``safe_targets``. Inside those
modules a few members still write files, download or run code; they are listed in ``NOT_SAFE``
(refused) or ``WRITERS`` (allowed only when every argument that decides where they write is checked: its
folders ``@output_dir``, the run dir, its file names plain names). hpc-runner's own are allowed by exact name.
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
    # exact names, never a whole module of ours: hpc_runner.data.cached.publish_once hard-links a file anywhere,
    # hpc_runner.engine.runner.run_recorded runs a run folder (issue 32); what the bundles use, and no more
    "hpc-runner": ("hpc_runner.engine.trainer.Trainer", "hpc_runner.engine.trainer.fit",
                   "hpc_runner.data.loader.ThreadDataLoader", "hpc_runner.data.cached.CachedDataset",
                   "hpc_runner.data.compose.chain", "hpc_runner.data.synthetic.synthetic_datalist",
                   "hpc_runner.data.synthetic.ensure_synthetic_volumes", "hpc_runner.inference.predictor.Predictor",
                   "hpc_runner.inference.predictor.infer", "hpc_runner.inference.predictor.evaluate",
                   "hpc_runner.inference.inputs.inference_datalist"),
    "plain values": ("torch.device", "torch.Generator", "torch.tensor", "torch.as_tensor", "torch.zeros",
                     "torch.ones", "torch.full", "torch.linspace", "torch.arange", "monai.utils.misc.set_determinism",
                     "monai.utils.enums", "builtins.dict", "builtins.list", "builtins.tuple"),
}
EXACT_CATEGORIES = ("hpc-runner",)  # categories of exact class and function names, not module prefixes
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
    "monai.networks.layers.gmm": "it compiles a C++ extension with a command its arguments reach (run through /bin/sh)",
    "monai.networks.nets.resnet.get_pretrained_resnet_medicalnet": "it downloads weights from the Hugging Face hub",
    "monai.networks.nets.swin_unetr.filter_swinunetr": "it is a helper of downloaded weights, not a component",
}
# writers inside the categories, with every argument that decides where they write (issue 32: SaveImage's
# data_root_dir moved its files out of the run dir while only output_dir was checked); each argument is
# checked by its kind below: a folder must be @output_dir, a file name a plain name, the rest left unset
_SAVE_IMAGE = ("output_dir", "data_root_dir", "output_postfix", "output_ext", "output_name_formatter", "folder_layout")
WRITERS: dict[str, tuple[str, ...]] = {
    "monai.transforms.io.array.SaveImage": _SAVE_IMAGE,
    "monai.transforms.io.dictionary.SaveImaged": _SAVE_IMAGE,
    "monai.transforms.io.array.WriteFileMapping": ("mapping_file_path",),
    "monai.transforms.io.dictionary.WriteFileMappingd": ("mapping_file_path",),
    "monai.transforms.post.dictionary.SaveClassificationd": ("output_dir", "filename", "saver"),
    "monai.handlers.checkpoint_saver.CheckpointSaver": ("save_dir", "file_prefix", "final_filename",
                                                        "key_metric_filename"),
    "monai.handlers.metrics_saver.MetricsSaver": ("save_dir",),
    "monai.handlers.classification_saver.ClassificationSaver": ("output_dir", "filename", "saver"),
    "monai.handlers.probability_maps.ProbMapProducer": ("output_dir", "output_postfix"),
    "monai.handlers.tensorboard_handlers.TensorBoardStatsHandler": ("log_dir", "summary_writer"),
    "monai.handlers.tensorboard_handlers.TensorBoardImageHandler": ("log_dir", "summary_writer"),
    "monai.handlers.logfile_handler.LogfileHandler": ("output_dir", "filename"),
    "monai.data.dataset.PersistentDataset": ("cache_dir",),
    "monai.data.dataset.CacheNTransDataset": ("cache_dir",),
    "monai.data.dataset.LMDBDataset": ("cache_dir", "db_name"),
    "monai.data.dataset.GDSDataset": ("cache_dir",),
}
# folders a writer writes into: each must be @output_dir (the run dir), directly or through plain references
RUN_DIR_ARGS = ("output_dir", "save_dir", "log_dir", "cache_dir", "mapping_file_path")
# parts of a file name: absent, or a literal name with no folder in it (no '/', no '\\', not '..')
FILE_NAME_ARGS = ("output_postfix", "output_ext", "filename", "file_prefix", "final_filename", "key_metric_filename",
                  "db_name")
# arguments that move the files elsewhere or hand the writing to another object: absent, null or empty
UNSET_ARGS = ("data_root_dir", "output_name_formatter", "folder_layout", "saver", "summary_writer")
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
    """Return every module prefix of the categories (not the exact names), plus the user's ``safe_targets``."""
    return tuple(p for name, prefixes in SAFE_CATEGORIES.items() if name not in EXACT_CATEGORIES
                 for p in prefixes) + tuple(extra)


def allowed_names() -> frozenset[str]:
    """Return the classes and functions allowed by their exact ``module.qualname`` (hpc-runner's own)."""
    return frozenset(n for name in EXACT_CATEGORIES for n in SAFE_CATEGORIES[name])


def not_safe_reason(path: str) -> str | None:
    """Return why an object inside the categories is still refused, or None."""
    if any(part.startswith("_") for part in path.split(".")):  # senet._load_state_dict downloads
        return "it is private (a name starting with '_'), not a component of the library's interface"
    for prefix, why in NOT_SAFE.items():
        if under(path, (prefix,)):
            return why
    return None
