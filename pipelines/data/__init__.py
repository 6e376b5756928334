"""Training and decoding data: `prepare`, `vocab`, text reading (`text_io`), tf.data input
(`dataset`, `buckets`, `packing`), the token cache (`token_cache`, `token_shards`), `progress`."""
