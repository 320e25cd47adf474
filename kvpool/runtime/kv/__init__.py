"""The KV bytes: the device and host pool tensors (``storage``) and the copy engine that moves
blocks between them off the compute path (``copy_engine``, ``copy_backends``, ``copy_handle``)."""
