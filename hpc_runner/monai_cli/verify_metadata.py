"""MONAI's ``verify_metadata``: validate a bundle's metadata against the JSON schema its ``schema`` URL names.

As ``python -m monai.bundle verify_metadata``: the schema is kept at ``--filepath``; an existing file
there is used as is (checked against ``--hash_val``), else the URL is downloaded to it first. Offline
(no download possible) the error says so and how to go on: put the schema at ``--filepath``, or pass
``--schema FILE`` (hpc-runner's option) to validate against a local schema file without any URL.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpc_runner.errors import ConfigError, UserError
from hpc_runner.monai_cli.arguments import check_files, get_logger, load_file, merge_args, require

TAG = "verify_metadata"
DOWNLOAD_TIMEOUT_S = 60  # MONAI sets none: a firewalled cluster node would hang on the download


def _download(url: str, filepath: str, hash_val: str | None, hash_type: str) -> None:
    """MONAI's download_url (an existing file is only hash-checked), with offline failures made readable."""
    from monai.apps.utils import download_url

    exists = Path(filepath).is_file()
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        download_url(url=url, filepath=filepath, hash_val=hash_val, hash_type=hash_type, progress=True)
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        if exists:
            raise UserError(f"the schema file does not pass the {hash_type} check against --hash_val {hash_val}",
                            where=filepath, hint="Remove it to download it again, or fix --hash_val") from None
        if "hash" in text.lower() and "check" in text.lower():
            raise UserError(f"the schema downloaded from {url} does not pass the {hash_type} check against "
                            f"--hash_val {hash_val}", where=filepath) from None
        raise UserError(
            f"the schema {url} cannot be downloaded ({type(exc).__name__}: {text}); this machine may be offline",
            where=filepath,
            hint=f"Download it where there is network (curl -L -o {Path(filepath).name} {url}) and put it at "
            f"--filepath {filepath}, or pass --schema FILE to validate against a local schema file",
        ) from None
    finally:
        socket.setdefaulttimeout(before)


def _check_parent(filepath: str, create_dir: bool) -> None:
    folder = Path(filepath).parent
    if folder.is_dir():
        return
    if not create_dir:
        raise UserError("the folder of --filepath does not exist", where=str(folder),
                        expected="an existing folder, or --create_dir True")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"the folder of --filepath cannot be created: {exc.strerror}", where=str(folder)) from None


def _validation_message(exc: Any, url: str) -> str:
    where = "::".join(str(p) for p in exc.absolute_path) or "the top level"
    return f"the metadata does not match the schema: {exc.message} (at {where}; failed validating " \
           f"'{exc.validator}' in the schema) against schema `{url}`"


def verify_metadata(
    meta_file: str | Sequence[str] | None = None,
    filepath: str | None = None,
    create_dir: bool | None = None,
    hash_val: str | None = None,
    hash_type: str | None = None,
    args_file: str | None = None,
    schema: str | None = None,
    **kwargs: Any,
) -> str:
    """MONAI's ``verify_metadata`` (same arguments); ``schema``: a local schema file, no URL. Return the schema used."""
    args = merge_args(TAG, args_file, meta_file=meta_file, filepath=filepath, create_dir=create_dir,
                      hash_val=hash_val, hash_type=hash_type, **kwargs)
    meta_file_ = require(args, "meta_file", TAG, "the metadata file to verify, e.g. --meta_file configs/metadata.json")
    if schema is None:
        filepath_ = str(require(args, "filepath", TAG, "where the schema file is kept (it is downloaded there "
                                "unless it exists), e.g. --filepath schema.json; or --schema FILE"))
    args.pop("meta_file"), args.pop("filepath", None)
    create_dir_ = args.pop("create_dir", True)
    hash_val_ = args.pop("hash_val", None)
    hash_type_ = args.pop("hash_type", "md5")

    check_files(meta_file_, "the metadata file")
    from monai.bundle import ConfigParser

    metadata = ConfigParser.load_config_files(files=meta_file_)
    if schema is not None:
        url = str(schema)
        schema_ = load_file(url, "the schema file (--schema)")
    else:
        _check_parent(filepath_, bool(create_dir_))
        url = metadata.get("schema")
        if url is None:
            raise ConfigError("must provide the `schema` field in the metadata for the URL of schema file",
                              where=", ".join(map(str, [meta_file_] if isinstance(meta_file_, str) else meta_file_)),
                              hint="Or validate against a local schema file with --schema FILE")
        _download(str(url), filepath_, hash_val_, str(hash_type_))
        schema_ = load_file(filepath_, "the schema file")
    from jsonschema import SchemaError, ValidationError, validate

    try:
        validate(instance=metadata, schema=schema_, **args)  # the other arguments are for jsonschema, as in MONAI
    except ValidationError as exc:
        raise ConfigError(_validation_message(exc, str(url)), where=str(meta_file_)) from None
    except SchemaError as exc:
        raise ConfigError(f"the schema is not a valid JSON schema: {exc.message}", where=str(url)) from None
    except TypeError as exc:  # an argument jsonschema.validate does not take
        raise UserError(f"{TAG}: {exc}", expected="MONAI's arguments, or keywords of jsonschema.validate") from None
    get_logger().info("metadata is verified with no error.")
    return str(url)
