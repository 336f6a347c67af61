"""Export a bundle's trained network: TorchScript (``ckpt_export``) and ONNX (``onnx_export``), as MONAI does.

``weights`` finds and loads the checkpoint (a file, or an hpc-runner run dir); ``network`` builds the
network and its dummy input from the config; ``torchscript`` and ``onnx_model`` convert and write the
file atomically.
"""
