"""The model directory: `layout`, `lock`, atomic writes and input manifests (`files`),
`checkpoints`, starting from another model (`init_from`), stage provenance (`made_from`)."""
