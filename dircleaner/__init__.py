"""dircleaner: find and delete empty directory entries in an S3 metastore's folder index."""

__version__ = "0.1.0"
