"""shardopt: an embedding-table sharding optimizer for DLRM training with TorchRec/FBGEMM."""

__version__ = "0.1.0"
