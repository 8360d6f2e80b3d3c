"""The storage stack: dataset, checkpoint, artifact and access-log buckets, FSx for Lustre."""
