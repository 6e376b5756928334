"""The data a model trains and decodes on: `prepare` (the prepare stage), the SentencePiece
vocabulary (`vocab`), reading and cleaning text (`text_io`), tf.data input (`dataset`,
`buckets`, `packing`), the token cache (`token_cache`, `token_shards`) and progress lines
(`progress`)."""
